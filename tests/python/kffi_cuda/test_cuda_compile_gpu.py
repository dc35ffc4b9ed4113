"""tests/python/kffi_cuda/test_cuda_compile_gpu.py: kffi.cuda kernels on a GPU: results, the stream
they launch on, CUDA graph capture, torch ops and JAX calls, a multi-arch image set, a Triton cubin
launched through kffi.cuda.load_cubin, and a library that embeds a cubin. Skipped without a GPU."""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU (torch.cuda.is_available() is False)", allow_module_level=True)

import kffi
import kffi.cuda as kcuda

try:
    kcuda._nvrtc.nvrtc_library()
except RuntimeError as e:  # pragma: no cover
    pytest.skip(f"needs NVRTC (pip install nvidia-cuda-nvrtc): {e}", allow_module_level=True)

MAJOR, MINOR = torch.cuda.get_device_capability()
ARCH = f"sm_{MAJOR}{MINOR}"


@pytest.fixture(autouse=True)
def _on_cuda0():
    """Each test starts with cuda:0 current ("cuda" below means it, and a graph captures on its
    stream). On the two-GPU host, earlier tests in the same process (JAX's sharded ones, whose
    arrays are freed later) leave cuda:1 current; kffi's own calls restore what they change."""
    torch.cuda.set_device(0)


AXPY = r"""
extern "C" __global__ void axpy(const float* x, float* y, float a, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] += a * x[i];
}
"""

SPIN = r"""
extern "C" __global__ void spin_add(float* y, long long cycles, int n) {
  long long start = clock64();
  while (clock64() - start < cycles) {}
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] += 1.0f;
}
"""


def axpy_fn(arch=None):
    n = kffi.sym_int("n")
    return kcuda.compile(
        AXPY,
        "axpy",
        kffi.fake_tensor("float32", [n]),
        kffi.fake_tensor("float32", [n], mut=True),
        kffi.Float32,
        kffi.Int32,
        param_names=["x", "y", "a", "count"],
        grid=(n + 255) // 256,
        block=256,
        arch=arch or ARCH,
    )


def test_results():
    f = axpy_fn()
    x = torch.arange(1000, dtype=torch.float32, device="cuda")
    y = torch.ones_like(x)
    f(x, y, 2.0, 1000)
    torch.testing.assert_close(y, 1 + 2 * x)
    # A view with a storage offset: byte_offset / data_ptr are honoured.
    big = torch.zeros(1010, device="cuda")
    f(x, big[10:], 1.0, 1000)
    torch.testing.assert_close(big[10:], x)
    assert big[:10].abs().sum().item() == 0


def test_results_with_cupy():
    cp = pytest.importorskip("cupy")
    f = axpy_fn()
    x = cp.arange(300, dtype=cp.float32)
    y = cp.zeros_like(x)
    f(x, y, 3.0, 300)
    cp.testing.assert_allclose(y, 3 * x)


def test_launch_callback_and_text_contract():
    seen = []

    def config(x, y, a, count):
        seen.append(count)
        return ((count + 127) // 128,), 128

    f = kcuda.compile(
        AXPY,
        "axpy",
        "x: Tensor([n], float32, device=cuda), y: Tensor([n], float32, mut, device=cuda), "
        "a: float32, count: int32",
        launch=config,
        arch=ARCH,
    )
    x = torch.ones(500, device="cuda")
    y = torch.zeros(500, device="cuda")
    f(x, y, 4.0, 500)
    assert seen == [500]
    torch.testing.assert_close(y, torch.full_like(y, 4.0))


def test_runs_on_the_callers_stream():
    n = kffi.sym_int("n")
    f = kcuda.compile(
        SPIN,
        "spin_add",
        kffi.fake_tensor("float32", [n], mut=True),
        kffi.Int64,
        kffi.Int32,
        param_names=["y", "cycles", "count"],
        grid=1,
        block=256,
        arch=ARCH,
    )
    y = torch.zeros(256, device="cuda")
    torch.cuda.synchronize()
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        f(y, 200_000_000, 256)  # about 0.1 s
        assert not s.query(), "the kernel should still run on the side stream"
        assert torch.cuda.default_stream().query(), "the default stream must be idle"
    s.synchronize()
    torch.testing.assert_close(y, torch.ones_like(y))


def test_cuda_graph_capture():
    f = axpy_fn()
    x = torch.arange(512, dtype=torch.float32, device="cuda")
    y = torch.zeros_like(x)
    f(x, y, 1.0, 512)  # warm up (loads the module) outside the capture
    torch.cuda.synchronize()
    y.zero_()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        f(x, y, 1.0, 512)
    torch.cuda.synchronize()
    assert y.abs().sum().item() == 0  # captured, not run
    g.replay()
    g.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(y, 2 * x)


def test_torch_op():
    f = axpy_fn()
    op = kffi.torch.register_op(f, "kffi_cuda_test::axpy")
    x = torch.arange(64, dtype=torch.float32, device="cuda")
    y = torch.zeros_like(x)
    op(x, y, 2.0, 64)
    torch.testing.assert_close(y, 2 * x)
    compiled = torch.compile(lambda a, b: op(a, b, 1.0, 64), fullgraph=True)
    compiled(x, y)
    torch.testing.assert_close(y, 3 * x)


def test_jax_call():
    jax = pytest.importorskip("jax")
    try:
        if jax.default_backend() != "gpu":
            pytest.skip("needs a CUDA JAX backend")
    except Exception:
        pytest.skip("needs a CUDA JAX backend")
    import jax.numpy as jnp
    import kffi.jax
    import numpy as np

    n = kffi.sym_int("n")
    src = 'extern "C" __global__ void scaled(const float* x, float* y, float a, int count) {\n'
    src += (
        "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i < count) y[i] = a * x[i];\n}\n"
    )
    f = kcuda.compile(
        src,
        "scaled",
        kffi.fake_tensor("float32", [n]),
        kffi.fake_tensor("float32", [n], mut=True),
        kffi.Float32,
        kffi.Int32,
        param_names=["x", "y", "a", "count"],
        grid="cdiv(n, 128)",
        block=128,
        arch=ARCH,
    )
    x = jnp.arange(128, dtype=jnp.float32)
    sds = jax.ShapeDtypeStruct(x.shape, x.dtype)
    out = jax.jit(lambda a: kffi.jax.call(f, a, a=2.0, count=128, out_shapes={"y": sds}))(x)
    np.testing.assert_allclose(np.asarray(out), 2 * np.arange(128))


def test_multi_arch_set_picks_this_device():
    others = [a for a in ("sm_80", "sm_90", "sm_100", "sm_120") if a != ARCH]
    f = axpy_fn(arch=[*others, ARCH])
    assert f.cubin_module.pick((MAJOR, MINOR)) == ARCH
    x = torch.ones(10, device="cuda")
    y = torch.zeros(10, device="cuda")
    f(x, y, 5.0, 10)
    torch.testing.assert_close(y, torch.full_like(y, 5.0))


def test_missing_arch_is_a_clear_error():
    other = "sm_100" if MAJOR != 10 else "sm_90"
    f = axpy_fn(arch=[other])
    x = torch.ones(10, device="cuda")
    # The message names the tensor's device: torch's current one, which tests run earlier in the
    # same process may have left on another GPU.
    dev = f"cuda:{x.device.index}"
    with pytest.raises(RuntimeError, match=rf"has no image for {dev} \({ARCH}.*it has: {other}"):
        f(x, x.clone(), 1.0, 10)
    f2 = axpy_fn()  # the process is fine afterwards
    y = torch.zeros(10, device="cuda")
    f2(x, y, 1.0, 10)
    torch.testing.assert_close(y, x)


def test_ptx_only_is_compiled_by_the_driver():
    f = axpy_fn(arch=[f"compute_{MAJOR}{MINOR}"])
    x = torch.ones(10, device="cuda")
    y = torch.zeros(10, device="cuda")
    try:
        f(x, y, 1.0, 10)
    except RuntimeError as e:  # PTX newer than the driver: its own error, named
        assert "PTX" in str(e) or "cuLibraryLoadData" in str(e)
        return
    torch.testing.assert_close(y, x)


def test_embedded_cubin_library(tmp_path):
    from test_cuda_compile import build_embedding_library

    mod, _ = build_embedding_library(tmp_path, [ARCH])
    x = torch.arange(300, dtype=torch.float32, device="cuda")
    y = torch.ones_like(x)
    mod.embedded_axpy(x, y, 2.0)
    torch.testing.assert_close(y, 1 + 2 * x)


def test_triton_cubin():
    triton = pytest.importorskip("triton")
    import triton.language as tl

    @triton.jit
    def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        offs = pid * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(
            out_ptr + offs,
            tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask),
            mask=mask,
        )

    x = torch.rand(3000, device="cuda")
    y = torch.rand(3000, device="cuda")
    out = torch.empty_like(x)
    compiled = add_kernel[(3,)](x, y, out, 3000, BLOCK=1024)  # Triton's own launch compiles it
    torch.cuda.synchronize()
    md = compiled.metadata
    mod = kcuda.load_cubin(compiled.asm["cubin"])
    # Triton appends scratch pointers (global, profile) to its kernels' parameters; extra values
    # past a kernel's own parameters are not read, so two null ones fit every Triton version.
    fn = mod.kernel(
        md.name,
        "x: Tensor([n], float32, device=cuda), y: Tensor([n], float32, device=cuda), "
        "out: Tensor([n], float32, mut, device=cuda), count: int32, scratch0: int64, "
        "scratch1: int64",
        grid="cdiv(n, 1024)",
        block=32 * md.num_warps,
        shared_mem=md.shared,
    )
    out2 = torch.zeros_like(x)
    fn(x, y, out2, 3000, 0, 0)
    torch.testing.assert_close(out2, x + y)
