"""tests/python/core/test_boundary.py: what a kernel is guaranteed to see, on the CPU (issue 23).

Read-only memory by type (kffi::TensorView may write, kffi::ConstTensorView only reads; the
signature, the metadata and contracts say which), byte_offset included by data<T>(), one format
of argument errors naming what the caller passed, and the device guard's behaviour where no CUDA
driver is loaded. The two-GPU behaviour is tests/python/kffi_cuda/test_two_gpus.py's.
"""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import ctypes

import kffi
import kffi.cpp
import numpy as np
import pytest
from dlpack_util import Producer
from fake_dlpack import FakeDeviceTensor

SOURCE = r"""
#include <kffi/kffi.h>

/// y = x * factor: y written, x only read.
void Scale(kffi::TensorView y, kffi::ConstTensorView x, double factor) {
  kffi::CheckSameShape(y, x, "y", "x");
  for (int64_t i = 0; i < x.numel(); ++i) y.data<float>()[i] = x.data<float>()[i] * factor;
}
/// The sum of x's elements through data<T>() (byte_offset included).
double Sum(kffi::ConstTensorView x) {
  double s = 0;
  for (int64_t i = 0; i < x.numel(); ++i) s += x.data<float>()[i];
  return s;
}
/// C-style: a DLTensor* may be written, a const DLTensor* only read.
void Copy(DLTensor* dst, const DLTensor* src) {
  kffi::TensorView(dst).data<float>()[0] = kffi::ConstTensorView(src).data<float>()[0];
}
/// An owned Tensor takes read-only memory as a read-only Tensor; its data<T>() refuses writes.
bool WriteOwned(kffi::Tensor t) {
  if (!t.is_read_only()) t.data<float>()[0] = 1.0f;
  try {
    t.data<float>();
  } catch (const kffi::Error&) {
    return false;
  }
  return true;
}
/// Optional writable tensor.
void MaybeFill(kffi::Optional<kffi::TensorView> y) {
  if (y.has_value()) y->data<float>()[0] = 7.0f;
}
int64_t TakeInt(int64_t n) { return n; }
int64_t TakeInts(kffi::Array<int64_t> xs) { return static_cast<int64_t>(xs.size()); }
int64_t Numel(kffi::ConstTensorView x) { return x.numel(); }

KFFI_EXPORT_DOC(scale, Scale, "y = x * factor", "y, x, factor");
KFFI_EXPORT_DOC(sum, Sum, "sum of x", "x");
KFFI_EXPORT_DOC(copy, Copy, "dst[0] = src[0]", "dst, src");
KFFI_EXPORT_DOC(write_owned, WriteOwned, "writes t[0] unless read-only", "t");
KFFI_EXPORT_DOC(maybe_fill, MaybeFill, "y[0] = 7", "y");
KFFI_EXPORT_DOC(take_int, TakeInt, "n", "n");
KFFI_EXPORT_DOC(take_ints, TakeInts, "len(xs)", "xs");
KFFI_EXPORT_DOC(numel, Numel, "numel", "x");
KFFI_EXPORT_DOC(numel_unguarded, kffi::NoDeviceGuard<Numel>, "numel, no device guard", "x");
"""

SIG = "`scale(y: Tensor(mut), x: Tensor, factor: float) -> None`"


@pytest.fixture(scope="module")
def mod():
    return kffi.cpp.load_inline("kffi_test_boundary", cpp_sources=SOURCE, quiet=True)


def read_only(a):
    a = np.array(a, dtype=np.float32)
    a.flags.writeable = False
    return a


# ---- read-only memory, by type ------------------------------------------------------------------


def test_signature_and_metadata_say_which_tensors_the_function_may_write(mod):
    assert mod.scale.__doc__.startswith(SIG.strip("`"))
    params = mod.scale._metadata["params"]
    assert [p.get("mutable", False) for p in params] == [True, False, False]
    assert all(p["type"] == "Tensor" for p in params[:2])
    copy = mod.copy._metadata["params"]
    assert [p.get("mutable", False) for p in copy] == [True, False]
    assert mod.maybe_fill._metadata["params"][0]["type"] == "Optional<Tensor>"
    assert mod.maybe_fill._metadata["params"][0]["mutable"] is True


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(lambda: read_only([1, 2, 3, 4]), id="read-only numpy"),
        pytest.param(lambda: np.frombuffer(b"\0" * 16, dtype=np.float32), id="bytes"),
        pytest.param(lambda: kffi.from_dlpack(read_only([1, 2, 3, 4])), id="read-only kffi.Tensor"),
        pytest.param(
            lambda: Producer((4,), flags=1, nbytes=16), id="DLPack tensor flagged read-only"
        ),
    ],
)
def test_read_only_memory_is_refused_for_a_writable_parameter(mod, make):
    y = make()
    x = np.ones(4, dtype=np.float32)
    before = bytes(np.asarray(kffi.from_dlpack(y)) if isinstance(y, Producer) else np.asarray(y))
    with pytest.raises(ValueError) as info:
        mod.scale(y, x, 2.0)
    assert str(info.value) == (
        "y: expected a writable tensor (the function may write it), got a read-only tensor "
        f"(argument #0 of {SIG})"
    )
    after = bytes(np.asarray(kffi.from_dlpack(y)) if isinstance(y, Producer) else np.asarray(y))
    assert after == before  # never written


def test_bytes_are_never_written(mod):
    frozen = bytes(16)
    with pytest.raises(ValueError, match="expected a writable tensor"):
        mod.scale(np.frombuffer(frozen, dtype=np.float32), np.ones(4, np.float32), 3.0)
    with pytest.raises(ValueError, match="expected a writable tensor"):
        mod.copy(np.frombuffer(frozen, dtype=np.float32), np.ones(1, np.float32))
    with pytest.raises(ValueError, match="expected a writable tensor"):
        mod.maybe_fill(np.frombuffer(frozen, dtype=np.float32))
    assert frozen == bytes(16)


def test_read_only_memory_is_accepted_by_a_read_only_parameter_without_a_copy(mod):
    x = read_only([1, 2, 3, 4])
    y = np.zeros(4, dtype=np.float32)
    mod.scale(y, x, 2.0)
    assert y.tolist() == [2, 4, 6, 8]
    assert mod.sum(np.frombuffer(np.float32([1, 2, 3]).tobytes(), dtype=np.float32)) == 6.0
    dst = np.zeros(1, dtype=np.float32)
    mod.copy(dst, read_only([5]))
    assert dst.tolist() == [5.0]
    mod.maybe_fill(None)  # an Optional writable tensor may be None


def test_an_owned_tensor_parameter_takes_read_only_memory_read_only(mod):
    ro = read_only([0, 0])
    assert mod.write_owned(ro) is False
    assert ro.tolist() == [0, 0]
    rw = np.zeros(2, dtype=np.float32)
    assert mod.write_owned(rw) is True
    assert rw.tolist() == [1.0, 0.0]


def test_jax_arrays_are_refused_for_writable_parameters_and_read_in_place(mod):
    jax = pytest.importorskip("jax")
    jnp = jax.numpy
    # On the CPU: these kernels read host memory (a GPU host's default JAX device is its GPU).
    x = jax.device_put(jnp.arange(4, dtype=jnp.float32), jax.devices("cpu")[0])
    with pytest.raises(ValueError, match=r"^y: expected a writable tensor"):
        mod.scale(x, np.ones(4, np.float32), 2.0)
    assert x.tolist() == [0, 1, 2, 3]
    y = np.zeros(4, dtype=np.float32)
    mod.scale(y, x, 2.0)  # a JAX array for a read-only parameter: fine
    assert y.tolist() == [0, 2, 4, 6]


def test_a_contract_must_agree_with_the_cpp_parameter_types():
    n = kffi.sym_int("n")
    src = "void f(kffi::TensorView a, kffi::TensorView b) {}"
    with pytest.raises(ValueError) as info:
        f = kffi.compile(
            src,
            "f",
            kffi.fake_tensor("float32", (n,)),
            kffi.fake_tensor("float32", (n,), mut=True),
            options={"quiet": True},
        )
        f(np.zeros(2, np.float32), np.zeros(2, np.float32))
    message = str(info.value)
    assert "parameter #0 `a: Tensor([n], float32, device=cpu, contiguous)` is read-only" in message
    assert "declare it kffi::ConstTensorView" in message
    # The mirror: a `mut` tensor on a C++ parameter that only reads it is refused too, for each
    # read-only C++ spelling.
    for cpp in ("kffi::ConstTensorView", "const DLTensor*"):
        with pytest.raises(ValueError) as info:
            kffi.compile(
                f"void g({cpp} a, kffi::TensorView b) {{}}",
                "g",
                kffi.fake_tensor("float32", (n,), mut=True),
                kffi.fake_tensor("float32", (n,), mut=True),
                options={"quiet": True},
            )
        message = str(info.value)
        assert "parameter #0 `a: Tensor([n], float32, device=cpu, contiguous, mut)` is `mut`" in (
            message
        ), cpp
        assert "declare it kffi::TensorView (or DLTensor*)" in message
    # An owned kffi::Tensor takes either (it may write memory the contract made sure is writable).
    g = kffi.compile(
        "void g(kffi::Tensor a, kffi::TensorView b) {}",
        "g",
        kffi.fake_tensor("float32", (n,), mut=True),
        kffi.fake_tensor("float32", (n,), mut=True),
        options={"quiet": True},
    )
    g(np.zeros(2, np.float32), np.zeros(2, np.float32))


def test_a_contract_must_agree_with_the_cpp_parameter_count_in_words():
    # One parameter is "1 parameter", not "1 parameters".
    with pytest.raises(ValueError, match=r"it declares 1 parameter \(EnvStream included\) but "):
        kffi.compile(
            "void h(kffi::ConstTensorView a, kffi::ConstTensorView b) {}",
            "h",
            kffi.fake_tensor("float32", (2,)),
            options={"quiet": True},
        )


def test_a_contract_refuses_read_only_memory_for_mut_and_takes_it_otherwise():
    n = kffi.sym_int("n")
    src = r"""
void add_one(kffi::ConstTensorView a, kffi::TensorView b) {
  for (int64_t i = 0; i < a.numel(); ++i) b.data<float>()[i] = a.data<float>()[i] + 1;
}"""
    f = kffi.compile(
        src,
        "add_one",
        kffi.fake_tensor("float32", (n,)),
        kffi.fake_tensor("float32", (n,), mut=True),
        options={"quiet": True},
    )
    b = np.zeros(3, np.float32)
    f(read_only([1, 2, 3]), b)
    assert b.tolist() == [2, 3, 4]
    frozen = bytes(12)
    with pytest.raises(ValueError, match=r"^b: expected a writable tensor"):
        f(np.ones(3, np.float32), np.frombuffer(frozen, dtype=np.float32))
    assert frozen == bytes(12)


# ---- byte_offset ----------------------------------------------------------------------------


def test_data_includes_byte_offset(mod):
    # A DLPack tensor whose first element is 4 bytes into its buffer [100, 1, 2, 3]: data<T>()
    # starts at 1 (data_ptr() alone would read 100).
    p = Producer((3,), nbytes=16, byte_offset=4)
    # The source array is named: a temporary's buffer is freed as soon as .ctypes.data is read,
    # before memmove copies it (free-threaded CPython's allocator reuses it at once).
    values = np.array([100, 1, 2, 3], dtype=np.float32)
    ctypes.memmove(p.buffer, values.ctypes.data, 16)
    assert mod.sum(p) == 6.0
    out = Producer((3,), nbytes=16, byte_offset=4)
    mod.scale(out, p, 10.0)
    assert np.frombuffer(bytes(out.buffer), dtype=np.float32).tolist() == [0, 10, 20, 30]


# ---- one format of argument errors, naming what the caller passed -----------------------------


@pytest.mark.parametrize(
    ("value", "got"),
    [
        ([1, 2], "list"),
        ({"a": 1}, "dict"),
        ((1, 2), "tuple"),
        (np.bool_(True), "numpy.bool"),
        (np.float32(1.5), "numpy.float32"),
        ("7", "str"),
        (1.5, "float"),
        (None, "None"),
    ],
)
def test_type_errors_name_the_callers_type(mod, value, got):
    with pytest.raises(TypeError) as info:
        mod.take_int(value)
    assert (
        str(info.value) == f"n: expected int, got {got} (argument #0 of `take_int(n: int) -> int`)"
    )


def test_container_element_errors_name_the_callers_container(mod):
    with pytest.raises(TypeError) as info:
        mod.take_ints([1, "x"])
    text = str(info.value)
    assert text.startswith("xs: expected Array<int>, got list")
    assert text.endswith("(argument #0 of `take_ints(xs: Array<int>) -> int`)")


def test_count_and_check_errors_share_the_format(mod):
    with pytest.raises(TypeError) as info:
        mod.scale(np.zeros(2, np.float32))
    assert str(info.value) == f"scale: expected 3 arguments, got 1 ({SIG})"
    with pytest.raises(ValueError) as info:
        mod.scale(np.zeros(2, np.float32), np.zeros(3, np.float32), 1.0)
    assert str(info.value) == "y.shape: expected [3] (as x.shape), got [2]"
    with pytest.raises(OverflowError) as info:
        mod.take_int(2**70)
    assert str(info.value) == (
        "n: Python int too large to convert to int64 (kffi ints are 64-bit) "
        "(argument #0 of `take_int(n: int) -> int`)"
    )


# ---- the device guard without a CUDA driver -------------------------------------------------


def test_device_guard_does_nothing_without_a_cuda_driver(mod):
    # A tensor that claims CUDA memory (fake: its data is host memory never touched): with no
    # CUDA driver in the process there is no device to make current, and the call goes on.
    import sys

    if "torch" in sys.modules and sys.modules["torch"].cuda.is_available():
        pytest.skip("a CUDA driver is loaded here: the two-GPU tests cover the guard")
    fake = FakeDeviceTensor(5, device=(2, 3))
    assert mod.numel(fake) == 5
    assert mod.numel_unguarded(fake) == 5
