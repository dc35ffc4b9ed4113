"""tests/python/kffi_cuda/test_gpu_streams.py: stream objects as explicit stream parameters, and
CuPy's current stream picked up for a call, on a real GPU (skipped without one; the CPU tests of the
same logic use stand-ins, in test_surface.py)."""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU (torch.cuda.is_available() is False)", allow_module_level=True)


def test_torch_cuda_stream_as_a_stream_parameter(pyext_kernels):
    s = torch.cuda.Stream()
    assert pyext_kernels.stream_handle(s) == s.cuda_stream
    assert (
        pyext_kernels.stream_handle(torch.cuda.current_stream())
        == torch.cuda.current_stream().cuda_stream
    )


def test_cupy_stream_as_a_stream_parameter(pyext_kernels):
    cupy = pytest.importorskip("cupy")
    s = cupy.cuda.Stream()
    assert pyext_kernels.stream_handle(s) == s.ptr


def test_cupy_current_stream_is_the_call_stream(tensor_kernels):
    cupy = pytest.importorskip("cupy")
    a = cupy.zeros(4, dtype=cupy.float32)
    s = cupy.cuda.Stream(non_blocking=True)
    with s:
        assert tensor_kernels.stream_of(a) == s.ptr
    # Outside the block: CuPy's current stream again (the legacy default stream is 0).
    assert tensor_kernels.stream_of(a) == cupy.cuda.get_current_stream().ptr
