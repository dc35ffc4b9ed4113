"""tests/python/core/test_surface.py: the Python surface a new user meets: dtype constants, NumPy
and JAX views of kffi.Tensor, results in the caller's types, reprs, defaults, stream parameters and
framework streams, and the errors for tensors that cannot be passed."""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import ctypes
import sys
import types

import kffi
import pytest
from dlpack_util import KDL_CUDA, Producer

np = pytest.importorskip("numpy")


# ---- dtypes ---------------------------------------------------------------------------------------


def test_every_dtype_is_exported_and_equal_to_its_spelling():
    for name in (
        "float32",
        "float16",
        "bfloat16",
        "int8",
        "uint64",
        "bool",
        "complex64",
        "float8_e4m3fn",
        "float4_e2m1fn",
    ):
        value = getattr(kffi, name)
        assert isinstance(value, kffi.dtype)
        assert value == kffi.dtype(name) == name
    assert kffi.float32.bits == 32 and kffi.bfloat16.itemsize == 2
    assert "float32" in kffi.__all__ and "bool" not in kffi.__all__  # import * keeps builtins


def test_dtype_constants_are_accepted_wherever_a_dtype_is(t, tensor_kernels):
    assert t.echo(kffi.bfloat16) == kffi.bfloat16
    assert t.type_index(kffi.float64) == kffi._core.TYPE_INDEX["DataType"]
    z = tensor_kernels.full((2,), kffi.float64, 0.5)
    assert z.dtype == kffi.float64 and np.from_dlpack(z).tolist() == [0.5, 0.5]


# ---- kffi.Tensor in NumPy and JAX -----------------------------------------------------------------


def test_numpy_asarray_of_a_kffi_tensor_is_zero_copy():
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    x = kffi.from_dlpack(a)
    b = np.asarray(x)
    assert b.dtype == np.float32 and b.shape == (2, 3)
    assert b.ctypes.data == a.ctypes.data
    np.testing.assert_array_equal(b, a)
    assert np.asarray(x, dtype=np.float64).dtype == np.float64
    assert np.array(x).ctypes.data != a.ctypes.data  # np.array copies, as for any array


def test_jax_asarray_of_a_kffi_tensor():
    jnp = pytest.importorskip("jax.numpy")
    x = kffi.from_dlpack(np.arange(4, dtype=np.float32))
    assert jnp.asarray(x).tolist() == [0.0, 1.0, 2.0, 3.0]


def test_tuple_results_are_tuples(pyext_kernels):
    assert pyext_kernels.numel_and_ndim(np.zeros((2, 3))) == (6, 2)
    assert type(pyext_kernels.numel_and_ndim(np.zeros(1))) is tuple


# ---- Function repr, defaults ----------------------------------------------------------------------


def test_function_repr_shows_its_name(t, tensor_kernels):
    assert repr(tensor_kernels.describe) == "<kffi.Function describe>"
    assert repr(t.echo) == "<kffi.Function testing.echo>"
    assert repr(kffi.Function(len)).startswith("<kffi.Function at 0x")


def test_optional_parameters_may_be_left_out(pyext_kernels):
    clamp = pyext_kernels.clamp
    assert clamp(5) == 5
    assert clamp(5, 7) == 7
    assert clamp(5, None, 3) == 3
    assert clamp(5, high=3) == 3
    assert clamp(x=-2, low=0) == 0
    params = __import__("inspect").signature(clamp).parameters
    assert params["x"].default is params["x"].empty
    assert params["low"].default is None and params["high"].default is None
    with pytest.raises(TypeError, match="missing required argument 'x'"):
        clamp(low=1)


# ---- errors for tensors that cannot be passed ------------------------------------------------------


def test_missing_global_called_from_cpp_is_a_public_key_error(t):
    with pytest.raises(KeyError) as info:
        t.call_global("pyext.no_such_function", 1)
    assert type(info.value) is kffi.MissingKeyError
    assert str(info.value) == "Global function `pyext.no_such_function` is not registered"


def test_torch_meta_tensor_is_a_clear_error_naming_the_argument(tensor_kernels):
    torch = pytest.importorskip("torch")
    with pytest.raises(
        ValueError,
        match=r"^x: a torch tensor on the meta device has no memory",
    ) as info:
        tensor_kernels.describe(torch.empty(3, device="meta"))
    assert info.value.__cause__ is not None  # torch's own message, chained
    # not followed by torch's text and frames
    assert str(info.value).endswith(
        "shapes alone) (argument #0 of `describe(x: Tensor) -> Array<Any>`)"
    )


def test_jax_tracer_in_an_eager_call_says_to_use_kffi_jax_call(tensor_kernels):
    jax = pytest.importorskip("jax")
    jnp = pytest.importorskip("jax.numpy")

    with pytest.raises(TypeError, match=r"^x: a JAX tracer .* kffi\.jax\.call") as info:
        jax.jit(lambda a: tensor_kernels.describe(a))(jnp.ones(3))
    assert info.value.__cause__ is not None
    assert "_error_repr" not in str(info.value)
    # JAX's text is the __cause__
    assert str(info.value).endswith(
        "kffi.jax.call(...) instead (argument #0 of `describe(x: Tensor) -> Array<Any>`)"
    )


# ---- stream parameters -----------------------------------------------------------------------------


class CudaStreamProtocol:
    """Any object with __cuda_stream__ (the CUDA stream protocol: (version, handle))."""

    def __init__(self, handle):
        self.handle = handle

    def __cuda_stream__(self):
        return (0, self.handle)


def _fake_type(module, name, **attrs):
    return type(name, (), {"__module__": module, **attrs})


def test_stream_objects_become_their_handles(pyext_kernels, t):
    opaque = kffi._core.TYPE_INDEX["OpaquePtr"]
    assert pyext_kernels.stream_handle(CudaStreamProtocol(0x1234)) == 0x1234
    assert t.type_index(CudaStreamProtocol(5)) == opaque
    torch_stream = _fake_type("torch.cuda.streams", "Stream", cuda_stream=0x5678)()
    assert pyext_kernels.stream_handle(torch_stream) == 0x5678
    cupy_stream = _fake_type("cupy.cuda.stream", "Stream", ptr=0x9ABC)()
    assert pyext_kernels.stream_handle(cupy_stream) == 0x9ABC
    assert pyext_kernels.stream_handle(None) == 0
    assert t.type_index(77) == kffi._core.TYPE_INDEX["Int"]  # raw handles stay ints


def test_bad_stream_object_names_the_argument(pyext_kernels):
    class Broken:
        def __cuda_stream__(self):
            return "not a pair"

    with pytest.raises(
        TypeError,
        match=r"^stream: cannot read the stream handle of a Broken: .*"
        r"\(argument #0 of `stream_handle\(stream: void\*\) -> int`\)$",
    ) as info:
        pyext_kernels.stream_handle(Broken())
    assert isinstance(info.value.__cause__, TypeError)


# ---- CuPy: its current stream is the call's environment stream ---------------------------------------


@pytest.fixture
def fake_cupy(monkeypatch):
    """A stand-in `cupy` module: get_current_stream().ptr and from_dlpack, enough for kffi's
    stream pickup (the real CuPy is tested on the GPU machine)."""
    current = types.SimpleNamespace(ptr=0xC0FFEE)
    mod = types.ModuleType("cupy")
    mod.cuda = types.SimpleNamespace(get_current_stream=lambda: current)
    mod.from_dlpack = lambda x: ("cupy array of", x)
    monkeypatch.setitem(sys.modules, "cupy", mod)
    seen = {}

    class ndarray(Producer):  # CuPy's class name
        __module__ = "cupy._core.core"

        def __dlpack__(self, stream=None, **kwargs):
            seen["stream"] = stream
            return super().__dlpack__(**kwargs)

    return types.SimpleNamespace(module=mod, current=current, ndarray=ndarray, seen=seen)


def test_cupy_current_stream_becomes_the_environment_stream(fake_cupy, tensor_kernels):
    arr = fake_cupy.ndarray((4,), device=(KDL_CUDA, 0))
    assert tensor_kernels.stream_of(arr) == 0xC0FFEE
    # The consumer tells the producer which stream it uses (DLPack's stream argument).
    assert fake_cupy.seen["stream"] == 0xC0FFEE
    fake_cupy.current.ptr = 0  # CuPy's default (legacy) stream
    assert tensor_kernels.stream_of(fake_cupy.ndarray((4,), device=(KDL_CUDA, 0))) == 0
    assert fake_cupy.seen["stream"] == 1  # DLPack's name for the legacy default stream
    # An explicit use_stream still wins.
    fake_cupy.current.ptr = 0xBEEF
    with kffi.use_stream(0x1111, device="cuda:0"):
        assert tensor_kernels.stream_of(fake_cupy.ndarray((4,), device=(KDL_CUDA, 0))) == 0x1111
    assert kffi.get_current_stream("cuda:0") == 0  # restored after the call


def test_cupy_results_come_back_as_cupy_arrays(fake_cupy, tensor_kernels):
    arr = fake_cupy.ndarray((4,), device=(1, 0))
    result = tensor_kernels.empty_like(arr)
    assert result[0] == "cupy array of" and isinstance(result[1], kffi.Tensor)


def test_use_stream_accepts_the_same_stream_objects():
    with kffi.use_stream(CudaStreamProtocol(0x4242), device="cuda:0"):
        assert kffi.get_current_stream("cuda:0") == 0x4242
    with kffi.use_stream(_fake_type("cupy.cuda.stream", "Stream", ptr=0x77, device_id=0)()):
        assert kffi.get_current_stream("cuda:0") == 0x77
    with pytest.raises(TypeError, match="use_stream expects"):
        kffi.use_stream(ctypes.c_int(3)).__enter__()


# ---- the extension module ------------------------------------------------------------------------


def test_the_extension_exports_abi_constants():
    assert kffi._core.TYPE_INDEX["Tensor"] == 70 and kffi._core.TYPE_INDEX["Array"] == 71
    assert kffi._core.DEVICE_TYPE_NAMES[1] == "cpu" and kffi._core.DEVICE_TYPE_NAMES[2] == "cuda"
    assert kffi.Device("cuda_managed:0").device_type == 13


def test_constants_come_from_the_extension():
    # The C++ side's values, never retyped in Python (contract/plan.h, py_common.h TypeFlag).
    core = kffi._core
    assert core.MAX_NDIM == 32 and core.MAX_CONTRACT_BYTES == 65536
    assert kffi.contract.MAX_CONTRACT_BYTES == core.MAX_CONTRACT_BYTES
    assert (core.TYPE_FLAG_READ_ONLY, core.TYPE_FLAG_LAZY_VIEWS) == (1, 2)
    # Every named dtype is the runtime's spelling, exported as kffi.<name> (bool kept out of
    # __all__ so that `import *` does not shadow the builtin).
    assert len(core.DTYPE_NAMES) == 26 and len(set(core.DTYPE_NAMES)) == 26
    for name in core.DTYPE_NAMES:
        assert getattr(kffi, name) == kffi.dtype(name) == name
        assert (name in kffi.__all__) == (name != "bool")
    assert {"float8_e3m4", "float6_e2m3fn", "complex128", "float4_e2m1fn"} <= set(core.DTYPE_NAMES)
    for name in ("MAX_NDIM", "DTYPE_NAMES"):
        assert not hasattr(kffi.runtime._types, name) and not hasattr(kffi.contract, name)


def test_a_second_copy_of_the_extension_is_refused():
    import importlib.util

    spec = importlib.util.find_spec("kffi._core")
    with pytest.raises(ImportError, match="only once per process"):
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
    assert kffi.to_kffi((1, 2)) == (1, 2)  # the first copy is untouched
