"""tests/python/kffi_jax/test_jax_gpu.py: kffi.jax on CUDA: targets, XLA's stream as the environment
stream (ordering with surrounding XLA ops), the CUDA-graph trait, allocation into XLA's buffers,
and a CuTe DSL export run through kffi.jax without jax_tvm_ffi.

Skipped without a CUDA JAX backend (and nvcc for the kernels built here). The CuTe test needs
KFFI_CUTE_ADD_ONE_LIB: a shared library exporting `__tvm_ffi_add_one` (seed 000's
`add_one(a, b)`: b = a + 1 on float32 [n], environment stream), as built by the TVM-FFI bridge
helper's script; KFFI_CUTE_ADD_ONE_NAME overrides the function name.
"""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp
import kffi
import kffi.jax


def _cuda_backend() -> bool:
    try:
        return jax.default_backend() == "gpu" and "cuda" in jax.devices()[0].client.platform_version
    except Exception:
        return False


pytestmark = pytest.mark.skipif(not _cuda_backend(), reason="needs a CUDA JAX backend")

CUDA_SRC = r"""
#include <cuda_runtime.h>
#include <cstdint>

__global__ void add_one_kernel(const float* x, float* y, int64_t n, long long spin) {
  int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (spin > 0) {  // a slow kernel: makes a wrong stream visible as a race
    long long start = clock64();
    while (clock64() - start < spin) {}
  }
  if (i < n) y[i] = x[i] + 1.0f;
}

static cudaStream_t EnvStream(kffi::ConstTensorView t) {
  return static_cast<cudaStream_t>(KFFIEnvGetStream(kDLCUDA, t.device().device_id));
}

static int64_t g_last_stream = -1;
static int64_t g_last_alloc = 0;

static void Launch(kffi::ConstTensorView x, kffi::TensorView y, long long spin) {
  KFFI_CHECK(x.device().device_type == kDLCUDA, ValueError) << "expected a CUDA tensor";
  cudaStream_t s = EnvStream(x);
  g_last_stream = static_cast<int64_t>(reinterpret_cast<intptr_t>(s));
  int64_t n = x.numel();
  add_one_kernel<<<(unsigned)((n + 255) / 256), 256, 0, s>>>(x.data<float>(), y.data<float>(), n,
                                                              spin);
  cudaError_t err = cudaGetLastError();
  KFFI_CHECK(err == cudaSuccess, RuntimeError) << "CUDA error: " << cudaGetErrorString(err);
}

void add_one(kffi::ConstTensorView x, kffi::TensorView y) { Launch(x, y, 0); }
void add_one_slow(kffi::ConstTensorView x, kffi::TensorView y) { Launch(x, y, 20000000); }

kffi::Tensor alloc_plus_one(kffi::ConstTensorView x) {
  kffi::Tensor out = kffi::Tensor::FromEnvAlloc(x.shape(), x.dtype(), x.device());
  g_last_alloc = static_cast<int64_t>(reinterpret_cast<intptr_t>(out.data_ptr()));
  Launch(x, out, 0);
  return out;
}

/// Allocates a scratch tensor (not a result) and uses it.
void add_one_with_scratch(kffi::ConstTensorView x, kffi::TensorView y) {
  kffi::Tensor tmp = kffi::Tensor::FromEnvAlloc(x.shape(), x.dtype(), x.device());
  Launch(x, tmp, 0);
  cudaMemcpyAsync(y.data(), tmp.data(), x.numel() * 4, cudaMemcpyDeviceToDevice,
                  EnvStream(x));
}

void bad_launch(kffi::ConstTensorView x, kffi::TensorView) {
  add_one_kernel<<<1, 4096, 0, EnvStream(x)>>>(nullptr, nullptr, 0, 0);  // too many threads
  cudaError_t err = cudaGetLastError();
  KFFI_CHECK(err == cudaSuccess, RuntimeError) << "CUDA error: " << cudaGetErrorString(err);
}

int64_t last_stream() { return g_last_stream; }
int64_t last_alloc() { return g_last_alloc; }
"""


@pytest.fixture(scope="module")
def gk():
    if not kffi.cpp.nvcc_available():
        pytest.skip("needs nvcc")
    return kffi.cpp.load_inline(
        "kffi_test_jax_gpu",
        cuda_sources=CUDA_SRC,
        functions=[
            "add_one",
            "add_one_slow",
            "alloc_plus_one",
            "add_one_with_scratch",
            "bad_launch",
            "last_stream",
            "last_alloc",
        ],
        quiet=True,
    )


def sds(x):
    return jax.ShapeDtypeStruct(x.shape, x.dtype)


def test_cuda_target_eager_and_jit(gk):
    kffi.jax.register_ffi_target("kffi_gpu_add_one", gk.add_one, platform="gpu")
    x = jnp.arange(1000, dtype=jnp.float32)
    f = jax.ffi.ffi_call("kffi_gpu_add_one", sds(x))
    np.testing.assert_array_equal(f(x), np.arange(1000) + 1)
    np.testing.assert_array_equal(jax.jit(lambda a: f(f(a)) * 2)(x), (np.arange(1000) + 2) * 2)
    assert gk.last_stream() not in (-1,)  # the kernel ran and read an environment stream


def test_xla_stream_orders_the_kernel_with_surrounding_ops(gk):
    """A slow kernel between XLA ops: launched on any stream but XLA's, the ops around it would
    race with it and read stale or partial data."""
    kffi.jax.register_ffi_target("kffi_gpu_add_one_slow", gk.add_one_slow, platform="gpu")
    slow = jax.ffi.ffi_call("kffi_gpu_add_one_slow", jax.ShapeDtypeStruct((1 << 20,), jnp.float32))

    @jax.jit
    def f(a):
        b = a * 3.0  # XLA, before
        c = slow(b)  # kffi, slow
        return c * 2.0 + c.sum()  # XLA, after: reads every element

    for k in range(3):
        x = jnp.full((1 << 20,), float(k), jnp.float32)
        c = 3.0 * k + 1
        np.testing.assert_allclose(
            np.asarray(f(x)), np.full(1 << 20, c * 2 + c * (1 << 20)), rtol=1e-6
        )
    assert gk.last_stream() != 0  # XLA's stream, not the legacy default stream


def test_graph_trait_and_captured_chain(gk):
    kffi.jax.register_ffi_target(
        "kffi_gpu_add_one_graph", gk.add_one, platform="gpu", allow_cuda_graph=True
    )
    kffi.jax.register_ffi_target("kffi_gpu_add_one_nograph", gk.add_one, platform="gpu")
    assert kffi.jax.handler_traits("kffi_gpu_add_one_graph", platform="gpu") == 1
    assert kffi.jax.handler_traits("kffi_gpu_add_one_nograph", platform="gpu") == 0
    x = jnp.arange(256, dtype=jnp.float32)
    call = jax.ffi.ffi_call("kffi_gpu_add_one_graph", sds(x))

    @jax.jit
    def chain(a):
        for _ in range(20):
            a = call(a)
        return a

    # Replayed graphs must see each call's new buffers: different inputs, every run right.
    for k in range(4):
        np.testing.assert_array_equal(chain(x + k), np.arange(256) + k + 20)


def test_allocation_into_xla_result_buffer_on_gpu(gk):
    kffi.jax.register_ffi_target(
        "kffi_gpu_alloc", gk.alloc_plus_one, platform="gpu", arg_spec=["args"]
    )
    x = jnp.arange(64, dtype=jnp.float32)
    y = jax.ffi.ffi_call("kffi_gpu_alloc", sds(x))(x)
    np.testing.assert_array_equal(y, np.arange(64) + 1)
    assert gk.last_alloc() == y.unsafe_buffer_pointer()


def test_scratch_memory_from_xla_and_refused_under_graphs(gk):
    kffi.jax.register_ffi_target("kffi_gpu_scratch", gk.add_one_with_scratch, platform="gpu")
    x = jnp.arange(64, dtype=jnp.float32)
    np.testing.assert_array_equal(
        jax.ffi.ffi_call("kffi_gpu_scratch", sds(x))(x), np.arange(64) + 1
    )
    kffi.jax.register_ffi_target(
        "kffi_gpu_scratch_graph", gk.add_one_with_scratch, platform="gpu", allow_cuda_graph=True
    )
    with pytest.raises(jax.errors.JaxRuntimeError) as e:
        jax.ffi.ffi_call("kffi_gpu_scratch_graph", sds(x))(x).block_until_ready()
    assert "allow_cuda_graph=True allocated a tensor that is not one of its results" in str(e.value)


def test_cuda_errors_reach_python(gk):
    kffi.jax.register_ffi_target("kffi_gpu_bad", gk.bad_launch, platform="gpu")
    x = jnp.ones((4,), jnp.float32)
    with pytest.raises(jax.errors.JaxRuntimeError) as e:
        jax.ffi.ffi_call("kffi_gpu_bad", sds(x))(x).block_until_ready()
    assert "RuntimeError: CUDA error:" in str(e.value)


def test_call_on_gpu_arrays_returns_gpu_arrays(gk):
    x = jnp.arange(10, dtype=jnp.float32)
    y = kffi.jax.call(gk.alloc_plus_one, x, out_shapes=sds(x))
    assert isinstance(y, jax.Array) and y.devices() == x.devices()
    np.testing.assert_array_equal(y, np.arange(10) + 1)
    z = jax.jit(
        lambda a: kffi.jax.call(gk.add_one, a, out_shapes={"y": sds(a)}, allow_cuda_graph=True)
    )(x)
    np.testing.assert_array_equal(z, np.arange(10) + 1)


CUTE_SCRIPT = textwrap.dedent("""
    import os, sys
    import numpy as np, jax, jax.numpy as jnp
    import kffi, kffi.jax
    mod = kffi.load_module(os.environ["KFFI_CUTE_ADD_ONE_LIB"])
    fn = mod[os.environ.get("KFFI_CUTE_ADD_ONE_NAME", "add_one")]
    kffi.jax.register_ffi_target("kffi_cute_add_one", fn, platform="gpu", allow_cuda_graph=True)
    x = jnp.arange(4096, dtype=jnp.float32)
    call = jax.ffi.ffi_call("kffi_cute_add_one", jax.ShapeDtypeStruct(x.shape, x.dtype))
    np.testing.assert_array_equal(jax.jit(lambda a: call(call(a)) * 2)(x), (np.arange(4096) + 2) * 2)
    y = kffi.jax.call(fn, x, out_shapes=jax.ShapeDtypeStruct(x.shape, x.dtype))
    np.testing.assert_array_equal(y, np.arange(4096) + 1)
    assert "jax_tvm_ffi" not in sys.modules, "jax_tvm_ffi was imported"
    print("cute ok")
""")


@pytest.mark.skipif(
    not os.environ.get("KFFI_CUTE_ADD_ONE_LIB"),
    reason="set KFFI_CUTE_ADD_ONE_LIB to a CuTe DSL add_one export",
)
def test_cute_dsl_export_through_kffi_jax_without_jax_tvm_ffi():
    proc = subprocess.run(
        [sys.executable, "-c", CUTE_SCRIPT],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "cute ok" in proc.stdout
