"""tests/python/kffi_cuda/test_cuda_params_gpu.py: kernels whose parameters are structs passed by
value (params=), launched on a GPU: an NVRTC kernel taking tensor descriptors {data, n, stride} (a
strided view, so the strides are read from the call), and a CuTe DSL cubin (no TVM-FFI wrapper)
built here when nvidia-cutlass-dsl is installed. Skipped without a GPU."""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU (torch.cuda.is_available() is False)", allow_module_level=True)

import kffi.cuda as kcuda

try:
    kcuda._nvrtc.nvrtc_library()
except RuntimeError as e:  # pragma: no cover
    pytest.skip(f"needs NVRTC (pip install nvidia-cuda-nvrtc): {e}", allow_module_level=True)

from test_cuda_params import (
    CONTRACT,
    CUTE_CONTRACT,
    CUTE_PARAMS,
    DESC,
    PARAMS,
    build_cute_cubin,
)

MAJOR, MINOR = torch.cuda.get_device_capability()
ARCH = f"sm_{MAJOR}{MINOR}"


def test_descriptors_by_value_read_shapes_and_strides():
    f = kcuda.compile(
        DESC, "scaled", CONTRACT, grid="cdiv(n, 128)", block=128, arch=ARCH, params=PARAMS
    )
    base = torch.arange(3000, dtype=torch.float32, device="cuda")
    x = base[::3]  # stride 3, read from the call
    y = torch.zeros(2000, device="cuda")[::2]  # stride 2
    f(x, y, 2.0, 5, 0.25)
    torch.cuda.synchronize()
    # p = {k, b, c = 0}: s * x + k + b + 0
    torch.testing.assert_close(y, 2.0 * x + 5 + 0.25)


def test_descriptors_run_in_cuda_graphs():
    f = kcuda.compile(
        DESC, "scaled", CONTRACT, grid="cdiv(n, 128)", block=128, arch=ARCH, params=PARAMS
    )
    x = torch.arange(256, dtype=torch.float32, device="cuda")
    y = torch.zeros_like(x)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        f(x, y, 3.0, 1, 0.0)
    g.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(y, 3.0 * x + 1)


def test_cute_dsl_cubin_launches(tmp_path):
    if (MAJOR, MINOR) != (9, 0):
        pytest.skip("the CuTe kernel is built for sm_90a")
    cubin, _, name = build_cute_cubin(tmp_path / "cute")
    f = kcuda.load_cubin(cubin, arch="sm_90a").kernel(
        name, CUTE_CONTRACT, params=CUTE_PARAMS, grid="cdiv(n, 128)", block=128
    )
    a = torch.rand(1000, device="cuda")
    b = torch.zeros_like(a)
    f(a, b, 1.5)
    torch.cuda.synchronize()
    torch.testing.assert_close(b, a + 1.5)
    # The kernel bounds its threads by the shape it was passed: a shorter tensor leaves the rest.
    b2 = torch.zeros(1000, device="cuda")
    f(a[:300], b2[:300], 1.0)
    torch.cuda.synchronize()
    torch.testing.assert_close(b2[:300], a[:300] + 1.0)
    assert torch.count_nonzero(b2[300:]) == 0


def test_driver_checks_parameters_of_ptx_at_the_first_launch():
    # PTX carries no sizes kffi reads offline; the driver (cuKernelGetParamInfo, CUDA 12.4+)
    # reports them once the image is loaded, before the first launch.
    prog = kcuda.nvrtc_compile(DESC, ["scaled"], arch=f"compute_{MAJOR}{MINOR}")
    mod = prog.load()
    assert mod.param_info("scaled") == {}
    wrong = mod.kernel("scaled", CONTRACT, grid="cdiv(n, 128)", block=128)  # pointers, not structs
    x = torch.ones(16, device="cuda")
    with pytest.raises(ValueError, match=r"parameter 0 \(`x`\) is 24 bytes in `scaled`, 8 bytes"):
        wrong(x, torch.zeros_like(x), 1.0, 1, 1.0)
    right = mod.kernel("scaled", CONTRACT, grid="cdiv(n, 128)", block=128, params=PARAMS)
    y = torch.zeros_like(x)
    right(x, y, 1.0, 1, 1.0)
    torch.cuda.synchronize()
    torch.testing.assert_close(y, x + 2)
