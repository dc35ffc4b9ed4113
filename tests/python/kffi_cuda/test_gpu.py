"""tests/python/kffi_cuda/test_gpu.py: CUDA tensors from PyTorch and CuPy, the stream the callee
sees (picked up from the caller framework, or set with kffi.use_stream), and allocation on the GPU.
Skipped where there is no GPU."""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import kffi
import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU (torch.cuda.is_available() is False)", allow_module_level=True)

CUDA = 2  # kDLCUDA


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


def test_torch_cuda_tensor_is_seen_zero_copy(tensor_kernels):
    x = torch.arange(12, dtype=torch.float32, device="cuda").reshape(3, 4)
    d = describe(tensor_kernels, x)
    assert d["device"] == kffi.Device("cuda:0")
    assert d["data_ptr"] + d["byte_offset"] == x.data_ptr()
    assert d["shape"] == (3, 4) and d["strides"] == (4, 1) and d["dtype"] == "float32"


def test_torch_cuda_non_contiguous_view(tensor_kernels):
    x = torch.zeros(4, 6, device="cuda").t()[1:, ::2]
    d = describe(tensor_kernels, x)
    assert d["shape"] == tuple(x.shape)
    assert d["strides"] == x.stride()
    assert d["data_ptr"] + d["byte_offset"] == x.data_ptr()


def test_torch_cuda_tensor_echo_is_the_same_object(t):
    x = torch.ones(3, device="cuda")
    assert t.echo(x) is x


def test_callee_sees_the_torch_current_stream(tensor_kernels):
    x = torch.zeros(4, device="cuda")
    assert tensor_kernels.stream_of(x) == torch.cuda.current_stream().cuda_stream
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        assert tensor_kernels.stream_of(x) == side.cuda_stream
        assert tensor_kernels.stream_of(x) == torch.cuda.current_stream().cuda_stream
    # Picked up for the call only: nothing is left behind on this thread afterwards.
    assert kffi.get_current_stream("cuda:0") == 0


def test_no_stream_is_picked_up_for_cpu_tensors(tensor_kernels):
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        assert tensor_kernels.stream_of(torch.zeros(2)) == 0


def test_use_stream_wins_over_the_picked_up_stream(tensor_kernels, t):
    x = torch.zeros(4, device="cuda")
    explicit = torch.cuda.Stream()
    other = torch.cuda.Stream()
    with torch.cuda.stream(other):
        with kffi.use_stream(explicit):
            assert tensor_kernels.stream_of(x) == explicit.cuda_stream
            assert t.get_stream(CUDA, 0) == explicit.cuda_stream
            assert kffi.get_current_stream("cuda:0") == explicit.cuda_stream
        assert tensor_kernels.stream_of(x) == other.cuda_stream
    assert t.get_stream(CUDA, 0) == 0


def test_env_alloc_on_cuda_returns_torch_cuda_tensor(tensor_kernels):
    x = torch.zeros(2, 3, dtype=torch.float16, device="cuda")
    y = tensor_kernels.empty_like(x)
    assert type(y) is torch.Tensor
    assert y.device == x.device and y.shape == x.shape and y.dtype == x.dtype
    assert y.data_ptr() != x.data_ptr()


def test_kffi_tensor_of_cuda_memory_round_trips_through_torch():
    x = torch.arange(8, dtype=torch.float32, device="cuda")
    k = kffi.from_dlpack(x)
    assert k.device == kffi.Device("cuda:0")
    assert k.data_ptr == x.data_ptr()
    back = torch.from_dlpack(k)
    assert back.data_ptr() == x.data_ptr()
    assert torch.equal(back, x)


def test_cuda_tensor_on_second_device(tensor_kernels):
    if torch.cuda.device_count() < 2:
        pytest.skip("needs two GPUs")
    x = torch.zeros(3, device="cuda:1")
    assert describe(tensor_kernels, x)["device"] == kffi.Device("cuda:1")
    side = torch.cuda.Stream(device="cuda:1")
    with torch.cuda.stream(side):
        assert tensor_kernels.stream_of(x) == side.cuda_stream


def test_jax_gpu_array_is_seen_zero_copy(t, tensor_kernels):
    jax = pytest.importorskip("jax")
    try:
        gpu = jax.devices("gpu")[0]
    except RuntimeError:
        pytest.skip("JAX has no GPU backend here")
    x = jax.device_put(jax.numpy.arange(4, dtype=jax.numpy.float32), gpu)
    d = describe(tensor_kernels, x)
    assert d["device"] == kffi.Device("cuda:0")
    assert d["data_ptr"] == x.unsafe_buffer_pointer()
    assert t.echo(x) is x
    with pytest.raises(ValueError, match="sum is a CPU kernel, got a tensor on cuda"):
        tensor_kernels.sum(x)


# ---- CuPy ----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cupy():
    return pytest.importorskip("cupy")


def test_cupy_array_is_seen_zero_copy(tensor_kernels, cupy):
    a = cupy.arange(6, dtype=cupy.float32).reshape(2, 3)
    d = describe(tensor_kernels, a)
    assert d["device"] == kffi.Device("cuda:0")
    assert d["data_ptr"] + d["byte_offset"] == a.data.ptr
    assert d["shape"] == (2, 3) and d["strides"] == (3, 1) and d["dtype"] == "float32"


def test_cupy_array_echo_is_the_same_object(t, cupy):
    a = cupy.zeros(3)
    assert t.echo(a) is a


def test_use_stream_with_cupy_stream(tensor_kernels, cupy):
    a = cupy.zeros(3, dtype=cupy.float32)
    stream = cupy.cuda.Stream()
    with kffi.use_stream(stream):
        assert tensor_kernels.stream_of(a) == stream.ptr


def test_kffi_tensor_consumed_by_cupy(cupy):
    x = torch.arange(4, dtype=torch.float32, device="cuda")
    a = cupy.from_dlpack(kffi.from_dlpack(x))
    assert a.data.ptr == x.data_ptr()
    assert a.tolist() == [0.0, 1.0, 2.0, 3.0]
