"""tests/python/core/test_tensors.py: NumPy, PyTorch (CPU) and JAX (CPU) tensors into exported
kernels and back, zero-copy; kffi.Tensor as a DLPack producer and consumer."""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import gc

import kffi
import pytest

np = pytest.importorskip("numpy")


def element_strides(a) -> tuple:
    """NumPy byte strides in elements, as DLPack counts them."""
    return tuple(s // a.itemsize for s in a.strides)


def describe(kernels, x):
    shape, strides, dtype, data_ptr, device, byte_offset = kernels.describe(x)
    return {
        "shape": tuple(shape),
        "strides": tuple(strides),
        "dtype": dtype,
        "data_ptr": data_ptr,
        "device": device,
        "byte_offset": byte_offset,
    }


# ---- NumPy ------------------------------------------------------------------------------------


def test_numpy_array_is_seen_zero_copy(tensor_kernels):
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    d = describe(tensor_kernels, a)
    assert d["data_ptr"] == a.ctypes.data
    assert d["shape"] == (3, 4)
    assert d["strides"] == (4, 1)
    assert d["dtype"] == "float32"
    assert d["device"] == kffi.Device("cpu")
    assert d["byte_offset"] == 0


def test_numpy_mutation_in_kernel_is_visible(tensor_kernels):
    a = np.zeros((2, 3), dtype=np.float64)
    tensor_kernels.fill(a, 2.5)
    assert (a == 2.5).all()
    tensor_kernels.add_one_inplace(a)
    assert (a == 3.5).all()


@pytest.mark.parametrize(
    "dtype",
    [
        "bool",
        "int8",
        "uint8",
        "int16",
        "uint16",
        "int32",
        "uint32",
        "int64",
        "uint64",
        "float16",
        "float32",
        "float64",
        "complex64",
        "complex128",
    ],
)
def test_numpy_dtype_is_preserved(tensor_kernels, dtype):
    a = np.zeros((2, 2), dtype=dtype)
    assert describe(tensor_kernels, a)["dtype"] == kffi.dtype(np.dtype(dtype))


def test_numpy_transposed_array_keeps_strides(tensor_kernels):
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    v = a.T
    d = describe(tensor_kernels, v)
    assert d["shape"] == (4, 3)
    assert d["strides"] == element_strides(v) == (1, 4)
    assert d["data_ptr"] == a.ctypes.data
    tensor_kernels.add_one_inplace(v)
    np.testing.assert_array_equal(a, np.arange(12, dtype=np.float32).reshape(3, 4) + 1)


def test_numpy_sliced_array_points_at_its_first_element(tensor_kernels):
    a = np.zeros((6, 6), dtype=np.float32)
    v = a[1::2, 2:5]
    d = describe(tensor_kernels, v)
    assert d["shape"] == (3, 3)
    assert d["strides"] == element_strides(v) == (12, 1)
    assert d["data_ptr"] + d["byte_offset"] == v.ctypes.data
    tensor_kernels.fill(v, 7.0)
    expected = np.zeros((6, 6), dtype=np.float32)
    expected[1::2, 2:5] = 7.0
    np.testing.assert_array_equal(a, expected)
    assert tensor_kernels.sum(v) == 63.0


@pytest.mark.parametrize("shape", [(0,), (0, 3), (5, 0), (2, 0, 4)])
def test_numpy_zero_size_array(tensor_kernels, shape):
    a = np.zeros(shape, dtype=np.float32)
    d = describe(tensor_kernels, a)
    assert d["shape"] == shape
    assert d["strides"] == element_strides(a)
    tensor_kernels.fill(a, 1.0)  # nothing to do, no crash
    assert tensor_kernels.sum(a) == 0.0


def test_numpy_zero_dim_array(tensor_kernels):
    a = np.array(4.0, dtype=np.float32)
    d = describe(tensor_kernels, a)
    assert d["shape"] == () and d["strides"] == ()
    tensor_kernels.add_one_inplace(a)
    assert float(a) == 5.0


def test_numpy_read_only_array_arrives_marked_read_only(t, tensor_kernels):
    # A read-only array cannot travel as a borrowed DLTensor* (which has no flags); it goes
    # through NumPy's __dlpack__ and the kernel's kffi::Tensor reports is_read_only().
    a = np.arange(3, dtype=np.float32)
    a.flags.writeable = False
    try:
        a.__dlpack__(max_version=(1, 0))
    except (BufferError, TypeError):
        pytest.skip("this NumPy cannot export read-only arrays through DLPack (needs 2.1+)")
    assert tensor_kernels.is_read_only(a) is True
    assert tensor_kernels.is_read_only(kffi.from_dlpack(np.zeros(3, np.float32))) is False
    # It is still the same memory, and identity is kept through a call.
    assert describe(tensor_kernels, a)["data_ptr"] == a.ctypes.data
    assert t.echo(a) is a
    # A kernel that only reads takes it (ConstTensorView, no copy); one that may write it (a
    # TensorView parameter: fill's x) is refused before it runs, naming the parameter.
    assert tensor_kernels.sum(a) == 3.0
    with pytest.raises(ValueError) as info:
        tensor_kernels.fill(a, 9.0)
    assert str(info.value) == (
        "x: expected a writable tensor (the function may write it), got a read-only tensor "
        "(argument #0 of `fill(x: Tensor(mut), value: float) -> None`)"
    )
    assert a.tolist() == [0.0, 1.0, 2.0]


def test_numpy_non_native_byte_order_is_refused_naming_the_argument(tensor_kernels):
    a = np.zeros(3, dtype=">f4")
    with pytest.raises(
        BufferError, match=r"^x: cannot import the numpy.ndarray as a tensor: .*byte order"
    ):
        tensor_kernels.describe(a)


def test_numpy_object_array_is_refused(tensor_kernels):
    with pytest.raises(
        BufferError, match=r"^x: cannot import the numpy.ndarray as a tensor: .*\(argument #0 of "
    ) as info:
        tensor_kernels.describe(np.zeros(2, dtype=object))
    assert isinstance(info.value.__cause__, BufferError)  # NumPy's own exception, chained


def test_numpy_array_echo_is_the_same_object(t):
    a = np.zeros(3)
    assert t.echo(a) is a
    assert t.echo(a[::2]) is not a


def test_kernel_error_on_wrong_dtype(tensor_kernels):
    with pytest.raises(TypeError, match="sum expects a float32 or float64 tensor, got int32"):
        tensor_kernels.sum(np.zeros(3, dtype=np.int32))


# ---- PyTorch (CPU) ----------------------------------------------------------------------------


def test_torch_tensor_is_seen_zero_copy(tensor_kernels):
    torch = pytest.importorskip("torch")
    x = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    d = describe(tensor_kernels, x)
    assert d["data_ptr"] + d["byte_offset"] == x.data_ptr()
    assert d["shape"] == (2, 3)
    assert d["strides"] == x.stride()
    assert d["dtype"] == "float32"
    assert d["device"] == kffi.Device("cpu")


def test_torch_mutation_in_kernel_is_visible(tensor_kernels):
    torch = pytest.importorskip("torch")
    x = torch.zeros(4, dtype=torch.float64)
    tensor_kernels.fill(x, 1.25)
    assert torch.equal(x, torch.full((4,), 1.25, dtype=torch.float64))


@pytest.mark.parametrize(
    "name",
    [
        "float16",
        "bfloat16",
        "float32",
        "float64",
        "int8",
        "uint8",
        "int32",
        "int64",
        "bool",
        "complex64",
    ],
)
def test_torch_dtype_is_preserved(tensor_kernels, name):
    torch = pytest.importorskip("torch")
    x = torch.zeros(2, dtype=getattr(torch, name))
    assert describe(tensor_kernels, x)["dtype"] == name


def test_torch_non_contiguous_views(tensor_kernels):
    torch = pytest.importorskip("torch")
    base = torch.zeros(4, 6)
    view = base.t()[1:, ::2]
    d = describe(tensor_kernels, view)
    assert d["shape"] == tuple(view.shape)
    assert d["strides"] == view.stride()
    assert d["data_ptr"] + d["byte_offset"] == view.data_ptr()
    tensor_kernels.add_one_inplace(view)
    expected = torch.zeros(4, 6)
    expected.t()[1:, ::2] += 1
    assert torch.equal(base, expected)


def test_torch_storage_offset(tensor_kernels):
    torch = pytest.importorskip("torch")
    x = torch.arange(10, dtype=torch.float32)[3:]
    d = describe(tensor_kernels, x)
    assert d["data_ptr"] + d["byte_offset"] == x.data_ptr()
    assert tensor_kernels.sum(x) == float(x.sum())


@pytest.mark.parametrize("shape", [(0,), (3, 0)])
def test_torch_zero_size_tensor(tensor_kernels, shape):
    torch = pytest.importorskip("torch")
    x = torch.zeros(shape)
    assert describe(tensor_kernels, x)["shape"] == shape
    assert tensor_kernels.sum(x) == 0.0


def test_torch_tensor_echo_is_the_same_object(t):
    torch = pytest.importorskip("torch")
    x = torch.ones(3)
    assert t.echo(x) is x


def test_env_alloc_returns_torch_tensor_for_torch_inputs(tensor_kernels):
    torch = pytest.importorskip("torch")
    x = torch.zeros(2, 3, dtype=torch.float64)
    y = tensor_kernels.full_like(x, 4.0)
    assert type(y) is torch.Tensor
    assert y.shape == (2, 3) and y.dtype == torch.float64
    assert torch.equal(y, torch.full((2, 3), 4.0, dtype=torch.float64))
    assert y.data_ptr() != x.data_ptr()


def test_env_alloc_with_numpy_input_returns_numpy(tensor_kernels):
    a = np.zeros((2, 2), dtype=np.float32)
    y = tensor_kernels.full_like(a, 3.0)
    assert type(y) is np.ndarray and y.flags.writeable
    np.testing.assert_array_equal(y, np.full((2, 2), 3.0, np.float32))


def test_env_alloc_returns_kffi_tensor_otherwise(tensor_kernels):
    z = tensor_kernels.full((3,), "float64", 1.5)
    assert type(z) is kffi.Tensor
    assert z.shape == (3,) and z.dtype == "float64"
    np.testing.assert_array_equal(np.from_dlpack(z), [1.5, 1.5, 1.5])


def test_env_alloc_tensor_outlives_its_references(tensor_kernels):
    y = tensor_kernels.full((1000,), kffi.dtype("float32"), 2.0)
    arr = np.from_dlpack(y)
    del y
    gc.collect()
    assert arr.sum() == 2000.0


# ---- JAX (CPU) --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def jnp():
    """jax.numpy, making arrays on the CPU (the kernels here are CPU kernels, and a JAX with a
    GPU plugin would put them on the GPU)."""
    jax = pytest.importorskip("jax")
    import jax.numpy  # noqa: F811 (loads the submodule on the name importorskip bound)

    with jax.default_device(jax.devices("cpu")[0]):
        yield jax.numpy


def test_jax_array_is_seen_zero_copy(tensor_kernels, jnp):
    x = jnp.arange(6, dtype=jnp.float32).reshape(2, 3)
    d = describe(tensor_kernels, x)
    assert d["data_ptr"] == x.unsafe_buffer_pointer()
    assert d["shape"] == (2, 3)
    assert d["strides"] == (3, 1)
    assert d["dtype"] == "float32"
    assert tensor_kernels.sum(x) == 15.0


def test_jax_array_echo_is_the_same_object(t, jnp):
    x = jnp.ones(3)
    assert t.echo(x) is x


def test_env_alloc_with_jax_input_returns_a_jax_array(tensor_kernels, jnp):
    import jax

    y = tensor_kernels.full_like(jnp.zeros(3, dtype=jnp.float32), 1.0)
    assert isinstance(y, jax.Array)
    assert y.tolist() == [1.0, 1.0, 1.0]


# ---- kffi.Tensor and DLPack -------------------------------------------------------------------


def test_from_dlpack_numpy_is_zero_copy_and_describes_itself():
    a = np.arange(6, dtype=np.int16).reshape(2, 3)
    x = kffi.from_dlpack(a)
    assert type(x) is kffi.Tensor
    assert x.data_ptr == a.ctypes.data
    assert x.shape == (2, 3) and x.strides == (3, 1) and x.ndim == 2 and x.numel() == 6
    assert x.dtype == "int16" and x.device == kffi.Device("cpu") and x.byte_offset == 0
    assert x.__dlpack_device__() == (1, 0)
    assert repr(x) == "kffi.Tensor(shape=(2, 3), dtype=int16, device=cpu)"


def test_from_dlpack_keeps_the_producer_alive():
    a = np.arange(4, dtype=np.float64)
    x = kffi.from_dlpack(a)
    ptr = a.ctypes.data
    del a
    gc.collect()
    assert np.from_dlpack(x).tolist() == [0.0, 1.0, 2.0, 3.0]
    assert x.data_ptr == ptr


def test_from_dlpack_torch_and_jax(jnp):
    torch = pytest.importorskip("torch")
    tx = torch.arange(4, dtype=torch.float32)
    assert kffi.from_dlpack(tx).data_ptr == tx.data_ptr()
    jx = jnp.arange(4, dtype=jnp.float32)
    assert kffi.from_dlpack(jx).data_ptr == jx.unsafe_buffer_pointer()


def test_kffi_tensor_consumed_by_torch_and_numpy_zero_copy():
    torch = pytest.importorskip("torch")
    a = np.arange(8, dtype=np.float32)
    x = kffi.from_dlpack(a)
    as_torch = torch.from_dlpack(x)
    as_numpy = np.from_dlpack(x)
    assert as_torch.data_ptr() == a.ctypes.data
    assert as_numpy.ctypes.data == a.ctypes.data
    assert as_torch.tolist() == as_numpy.tolist() == a.tolist()
    a[0] = 100.0
    assert as_torch[0].item() == 100.0 and as_numpy[0] == 100.0


def test_kffi_tensor_consumed_by_jax_zero_copy(tensor_kernels, jnp):
    import jax

    # XLA copies host buffers that are not 64-byte aligned; kffi's host allocator aligns to 64.
    x = tensor_kernels.full((8,), "float32", 2.0)
    assert x.data_ptr % 64 == 0
    as_jax = jax.dlpack.from_dlpack(x)
    assert as_jax.unsafe_buffer_pointer() == x.data_ptr
    assert as_jax.tolist() == [2.0] * 8


def test_kffi_tensor_consumed_by_jax_has_the_data_even_if_jax_copies(jnp):
    import jax

    a = np.arange(5, dtype=np.float32)[1:]  # 4 bytes past an allocation: never 64-aligned
    assert jax.dlpack.from_dlpack(kffi.from_dlpack(a)).tolist() == [1.0, 2.0, 3.0, 4.0]


def test_kffi_tensor_consumed_by_torch_outlives_kffi_tensor():
    torch = pytest.importorskip("torch")
    x = kffi.from_dlpack(np.ones(16, dtype=np.float32))
    y = torch.from_dlpack(x)
    del x
    gc.collect()
    assert y.sum().item() == 16.0


def test_kffi_tensor_strided_view_round_trips_through_torch():
    torch = pytest.importorskip("torch")
    base = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    x = kffi.from_dlpack(base.t())
    assert x.shape == (4, 3) and x.strides == (1, 4)
    back = torch.from_dlpack(x)
    assert back.stride() == (1, 4)
    assert torch.equal(back, base.t())


def test_kffi_tensor_dlpack_refuses_copy_and_other_devices():
    x = kffi.from_dlpack(np.zeros(2))
    with pytest.raises(BufferError, match="does not copy"):
        x.__dlpack__(copy=True)
    with pytest.raises(BufferError, match="not on"):
        x.__dlpack__(dl_device=(2, 0))
    assert x.__dlpack__(dl_device=(1, 0)) is not None


def test_kffi_tensor_passed_to_kernel_and_echo(t, tensor_kernels):
    a = np.zeros(5, dtype=np.float32)
    x = kffi.from_dlpack(a)
    tensor_kernels.fill(x, 3.0)
    assert (a == 3.0).all()
    assert t.echo(x) is x
    assert tensor_kernels.identity(x).same_as(x)


def test_kernel_result_viewing_an_argument_keeps_it_alive(tensor_kernels):
    x = kffi.from_dlpack(np.arange(3, dtype=np.float32))
    y = tensor_kernels.identity(x)
    del x
    gc.collect()
    assert np.from_dlpack(y).tolist() == [0.0, 1.0, 2.0]


def test_non_tensor_where_tensor_expected(tensor_kernels):
    with pytest.raises(
        TypeError,
        match=r"^x: expected Tensor\(mut\), got str "
        r"\(argument #0 of `fill\(x: Tensor\(mut\), value: float\) -> None`\)$",
    ):
        tensor_kernels.fill("not a tensor", 1.0)


def test_from_dlpack_of_non_tensor_is_type_error():
    with pytest.raises(TypeError, match="Expected a tensor"):
        kffi.from_dlpack([1, 2, 3])
