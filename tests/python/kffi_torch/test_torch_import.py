"""tests/python/kffi_torch/test_torch_import.py: kffi.torch.fast_tensor_import: torch.Tensor
arguments read from the TensorImpl give exactly the DLTensors torch's own DLPack exchange API gives,
and whatever the direct read does not cover still goes through torch's API (same results, same
errors). Lazy conjugate and negative views, which torch's import hands over unresolved, are refused;
the lazy-view reader gives kffi their bits. (test_torch_views.py checks kffi calls over a generated
space of tensors.)"""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import ctypes
import gc
import re
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
import kffi
import kffi.torch
from dlpack_util import DLTensor

_capsule_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", ctypes.pythonapi)
)
# DLPackExchangeAPI: header (version: 2 x uint32, prev_api), then managed_tensor_allocator,
# managed_tensor_from_py_object_no_sync, managed_tensor_to_py_object_no_sync,
# dltensor_from_py_object_no_sync, current_work_stream.
_DLTENSOR_IMPORT_OFFSET = 8 + 8 + 3 * 8
_Import = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.POINTER(DLTensor))


def _import_of(capsule):
    api = _capsule_pointer(capsule, b"dlpack_exchange_api")
    return _Import(ctypes.c_void_p.from_address(api + _DLTENSOR_IMPORT_OFFSET).value)


@pytest.fixture(scope="module")
def imports():
    """(torch's DLTensor import, kffi.torch's), both called through ctypes."""
    if not kffi.torch.fast_tensor_import():
        pytest.skip("kffi.torch's C library does not build here")
    from kffi.torch import _glue

    lib = _glue._eager_lib()
    original = torch.Tensor.__dlpack_c_exchange_api__
    ours = lib.kffi_torch_exchange_api(original, torch._C.TensorBase)
    return _import_of(original), _import_of(ours)


def _fields(fn, t):
    out = DLTensor()
    assert fn(t, ctypes.byref(out)) == 0
    n = out.ndim
    return {
        "data": out.data,
        "device": (out.device.device_type, out.device.device_id),
        "ndim": n,
        "dtype": (out.dtype.code, out.dtype.bits, out.dtype.lanes),
        "shape": [out.shape[i] for i in range(n)],
        "strides": [out.strides[i] for i in range(n)] if out.strides else None,
        "byte_offset": out.byte_offset,
    }


def _cases():
    base = torch.arange(24, dtype=torch.float32).reshape(2, 3, 4)
    cases = {
        "contiguous": base,
        "0-dim": torch.tensor(3.5),
        "empty": torch.empty(0, 3),
        "transposed": base.transpose(0, 2),
        "stepped slice": base[:, ::2, 1:],
        "storage offset": base.reshape(-1)[5:],
        "expanded (stride 0)": torch.ones(3, 1).expand(3, 5),
        "size-1 dims": torch.zeros(1, 4, 1),
        "channels_last": torch.zeros(2, 3, 4, 5).to(memory_format=torch.channels_last),
        "requires grad": torch.ones(3, requires_grad=True),
        "parameter (subclass)": torch.nn.Parameter(torch.ones(2, 2)),
        "inference tensor": None,
    }
    with torch.inference_mode():
        cases["inference tensor"] = torch.ones(4)
    dtypes = [
        torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8, torch.int16,
        torch.int32, torch.int64, torch.uint8, torch.bool, torch.complex64, torch.complex128,
    ]  # fmt: skip
    for name in ("uint16", "uint32", "uint64", "float8_e4m3fn", "float8_e5m2", "complex32"):
        if hasattr(torch, name):
            dtypes.append(getattr(torch, name))
    for dt in dtypes:
        cases[f"dtype {dt}"] = torch.zeros(2, 3, dtype=dt)
    if torch.cuda.is_available():
        last = torch.cuda.device_count() - 1
        cuda = torch.arange(12.0, device="cuda").reshape(3, 4)
        cases["cuda"] = cuda
        cases["cuda transposed slice"] = cuda.t()[1:]
        cases["cuda half"] = cuda.half()
        cases[f"cuda:{last}"] = torch.ones(5, device=f"cuda:{last}")
    return cases


@pytest.mark.parametrize("case", sorted(_cases()))
def test_the_direct_read_gives_torchs_dltensor(imports, case):
    t = _cases()[case]
    theirs, ours = imports
    assert _fields(ours, t) == _fields(theirs, t)


def test_kffi_calls_see_the_same_tensors(imports):
    src = r"""
    kffi::Array<int64_t> describe(kffi::ConstTensorView t) {
      kffi::Array<int64_t> out;
      out.push_back(reinterpret_cast<intptr_t>(t.data_ptr()));
      out.push_back(t.ndim());
      for (int i = 0; i < t.ndim(); ++i) out.push_back(t.shape()[i]);
      for (int i = 0; i < t.ndim(); ++i) out.push_back(t.strides()[i]);
      out.push_back(t.dtype().code * 1000 + t.dtype().bits);
      return out;
    }
    """
    describe = kffi.cpp.load_inline(
        "kffi_test_torch_import", cpp_sources=src, functions=["describe"], quiet=True
    )["describe"]
    for name, t in _cases().items():
        got = list(describe(t))
        n = t.dim()
        assert got[0] == t.data_ptr(), name
        assert got[1:2] == [n] and got[2 : 2 + n] == list(t.shape), name
        assert got[2 + n : 2 + 2 * n] == list(t.stride()), name


def test_what_the_direct_read_does_not_cover_goes_to_torch(imports):
    theirs, ours = imports
    # A tensor without storage: torch's import says what is wrong, through either API.
    meta = torch.empty(3, device="meta")
    sparse = torch.eye(3).to_sparse()
    for t in (meta, sparse):
        errors = []
        for fn in (theirs, ours):
            try:
                errors.append(("ok", _fields(fn, t)))
            except Exception as e:  # whatever torch raises, compared
                errors.append((type(e), str(e)))
        assert errors[0] == errors[1], errors
    # A class that names torch's exchange API without being a tensor: refused, no crash.

    class Impostor:
        __dlpack_c_exchange_api__ = torch.Tensor.__dlpack_c_exchange_api__

    with pytest.raises(Exception, match="Unable to cast"):  # torch's caster refuses it
        _fields(ours, Impostor())
    identity = kffi.cpp.load_inline(
        "kffi_test_torch_import_id",
        cpp_sources="int64_t ndim(kffi::ConstTensorView t) { return t.ndim(); }",
        functions=["ndim"],
        quiet=True,
    )["ndim"]
    with pytest.raises(
        Exception,
        match=r"^t: cannot import the Impostor as a tensor: Unable to cast .* "
        r"\(argument #0 of `ndim\(t: Tensor\) -> int`\)$",
    ):
        identity(Impostor())
    assert identity(torch.zeros(2, 2)) == 2  # the process is healthy


def test_tensors_stay_alive_and_unchanged_by_the_read(imports):
    t = torch.arange(6.0).reshape(2, 3).t()
    before = (t.data_ptr(), t.shape, t.stride(), t._version, sys.getrefcount(t))
    _, ours = imports
    for _ in range(1000):
        _fields(ours, t)
    gc.collect()
    assert (t.data_ptr(), t.shape, t.stride(), t._version, sys.getrefcount(t)) == before


def test_importing_kffi_torch_turns_it_on_when_built(imports):
    # A fresh process: the library is in the build cache now, so the import alone installs it.
    code = "import kffi, kffi.torch; from kffi.torch import _glue; print(_glue._tensor_import.done)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["True"]


def test_override_refuses_what_is_no_exchange_api(imports):
    from kffi import _core

    original = torch.Tensor.__dlpack_c_exchange_api__
    with pytest.raises(
        TypeError, match=r'replacement is a "dlpack_exchange_api" capsule of DLPack 1, got int'
    ):
        _core._override_exchange_api(original, 3)
    with pytest.raises(
        TypeError, match=r'original is a "dlpack_exchange_api" capsule of DLPack 1, got str'
    ):
        _core._override_exchange_api("x", original)
    # Overriding the same API again is allowed, another framework's is not.
    from kffi.torch import _glue

    again = _glue._eager_lib().kffi_torch_exchange_api(original, torch._C.TensorBase)
    assert _core._override_exchange_api(original, again) is None
    with pytest.raises(ValueError, match="another framework's exchange API is already overridden"):
        _core._override_exchange_api(kffi.Tensor.__dlpack_c_exchange_api__, again)


# DLPackExchangeAPI: managed_tensor_from_py_object_no_sync follows the header and the allocator.
_MANAGED_IMPORT_OFFSET = 8 + 8 + 8
_ManagedImport = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.POINTER(ctypes.c_void_p))


def _managed_import_of(capsule):
    api = _capsule_pointer(capsule, b"dlpack_exchange_api")
    return _ManagedImport(ctypes.c_void_p.from_address(api + _MANAGED_IMPORT_OFFSET).value)


def test_the_fast_imports_refuse_lazy_views_which_torchs_hand_over(imports):
    from kffi.torch import _glue

    theirs, ours = imports
    ours_capsule = _glue._eager_lib().kffi_torch_exchange_api(
        torch.Tensor.__dlpack_c_exchange_api__, torch._C.TensorBase
    )
    managed = _managed_import_of(ours_capsule)
    z = torch.tensor([1 + 2j, 3 - 4j])
    lazy = {
        "negative": torch.tensor([1.0, 2.0])._neg_view(),
        "conjugate": z.conj(),
        "negative view, e.g. x.conj().imag": z.conj().imag,
    }
    for what, t in lazy.items():
        # torch's import hands the memory over as it is: the unresolved values.
        assert _fields(theirs, t)["data"] == t.data_ptr()
        with pytest.raises(ValueError, match=f"lazy {re.escape(what)}.*pass x.resolve_(neg|conj)"):
            _fields(ours, t)
        out = ctypes.c_void_p()
        with pytest.raises(ValueError, match=f"lazy {re.escape(what)}"):
            managed(t, ctypes.byref(out))
        assert out.value is None
    # The managed import still exports what it should (its deleter frees the export).
    out = ctypes.c_void_p()
    assert managed(torch.ones(3), ctypes.byref(out)) == 0
    from dlpack_util import DLManagedTensorVersioned

    mt = DLManagedTensorVersioned.from_address(out.value)
    assert mt.dl_tensor.ndim == 1
    ctypes.CFUNCTYPE(None, ctypes.c_void_p)(mt.deleter)(out.value)


def test_the_lazy_view_reader_reads_the_tensorimpl(imports):
    from kffi.torch import _glue

    reader_capsule = _glue._eager_lib().kffi_torch_lazy_view_reader()
    read = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object)(
        _capsule_pointer(reader_capsule, b"kffi.lazy_view_bits")
    )
    z = torch.ones(2, dtype=torch.complex64)
    assert read(torch.ones(2)) == 0 and read(z) == 0 and read(torch.nn.Parameter(z)) == 0
    assert read(z.conj()) == 1 and read(z._neg_view()) == 2 and read(z.conj()._neg_view()) == 3
    assert read(z.conj().imag) == 2
    with torch.inference_mode():
        assert read(torch.ones(2)._neg_view()) == 2
    assert read(object()) == -1 and read(torch.ones(2).numpy()) == -1  # no torch tensor
    from kffi import _core

    original = torch.Tensor.__dlpack_c_exchange_api__
    with pytest.raises(TypeError, match=r'lazy_view_bits is a "kffi.lazy_view_bits" capsule'):
        _core._override_exchange_api(original, original, 3)
    with pytest.raises(TypeError, match="capsule or None, got PyCapsule"):
        _core._override_exchange_api(original, original, original)
