"""tests/python/kffi_cuda/test_two_gpus.py: every kffi path runs a call on the device of its CUDA
tensors.

With cuda:0 current and the tensors on cuda:1, each path must run the kernel on cuda:1, on that
device's current stream, give the right result, and leave cuda:0 current afterwards: kffi.compile
(contract exports), plain KFFI_EXPORT functions, kffi.torch ops (eager, torch.ops and
torch.compile), CUDA graph capture, kffi.jax, and bridged CuTe DSL exports (with and without
kffi.with_contract). The kernels here carry no device guard of their own: kffi's is what is
tested. Skipped with fewer than two GPUs (run it on a two-GPU host).
"""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available() or torch.cuda.device_count() < 2:
    pytest.skip("needs two CUDA GPUs", allow_module_level=True)

import kffi
import kffi.torch

# A kernel that launches on its environment stream with no device guard: what docs/torch.md shows.
ADD_ONE = r"""
__global__ void add_one_kernel(const float* x, float* y, int64_t n) {
  int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) y[i] = x[i] + 1.0f;
}
void add_one(kffi::ConstTensorView x, kffi::TensorView y, void* stream) {
  int64_t n = x.numel();
  if (n == 0) return;
  add_one_kernel<<<static_cast<unsigned>((n + 255) / 256), 256, 0,
                   static_cast<cudaStream_t>(stream)>>>(x.data<float>(), y.data<float>(), n);
  KFFI_CUDA_CHECK(cudaGetLastError());
}
"""

# Plain exports (no contract): where they run, and the same kernel without kffi's guard.
PLAIN = r"""
#include <kffi/cuda.h>
#include <kffi/kffi.h>

__global__ void plain_add_one_kernel(const float* x, float* y, int64_t n) {
  int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) y[i] = x[i] + 1.0f;
}

/// y = x + 1 on the environment stream of x's device, with no device guard of its own.
void PlainAddOne(kffi::ConstTensorView x, kffi::TensorView y) {
  int64_t n = x.numel();
  plain_add_one_kernel<<<static_cast<unsigned>((n + 255) / 256), 256, 0,
                         kffi::cuda::current_stream(x.device())>>>(x.data<float>(),
                                                                   y.data<float>(), n);
  KFFI_CUDA_CHECK(cudaGetLastError());
}

/// [the CUDA device current in the call, the environment stream of x's device].
kffi::Array<int64_t> Where(kffi::ConstTensorView x) {
  int device = -1;
  KFFI_CUDA_CHECK(cudaGetDevice(&device));
  return kffi::Array<int64_t>{
      device, static_cast<int64_t>(reinterpret_cast<intptr_t>(kffi::cuda::current_stream(x.device())))};
}

KFFI_EXPORT_DOC(plain_add_one, PlainAddOne, "y = x + 1", "x, y");
KFFI_EXPORT_DOC(where, Where, "[current device, environment stream]", "x");
KFFI_EXPORT_DOC(where_unguarded, kffi::NoDeviceGuard<Where>, "where, without kffi's guard", "x");
"""


@pytest.fixture(scope="module")
def add_one():
    if not kffi.cpp.nvcc_available():
        pytest.skip("needs nvcc")
    n = kffi.sym_int("n")
    return kffi.compile(
        ADD_ONE,
        "add_one",
        kffi.fake_tensor("float32", (n,)),
        kffi.fake_tensor("float32", (n,), mut=True),
        kffi.fake_stream(),
        options={"quiet": True},
    )


@pytest.fixture(scope="module")
def plain():
    if not kffi.cpp.nvcc_available():
        pytest.skip("needs nvcc")
    return kffi.cpp.load_inline("kffi_test_two_gpus_plain", cuda_sources=PLAIN, quiet=True)


@pytest.fixture(autouse=True)
def _device_zero_current():
    """Each test starts with cuda:0 current, and must leave it so."""
    torch.cuda.set_device(0)
    yield
    torch.cuda.synchronize(0)
    torch.cuda.synchronize(1)
    assert torch.cuda.current_device() == 0


def inputs(n=1000, device="cuda:1"):
    x = torch.arange(n, dtype=torch.float32, device=device)
    return x, torch.full_like(x, -7.0)


def check(x, y):
    torch.cuda.synchronize(y.device)
    assert torch.equal(y, x + 1)
    assert torch.cuda.current_device() == 0


@pytest.mark.parametrize("n", [1, 1000, 1 << 20])
def test_kffi_compile_runs_on_the_tensors_device(add_one, n):
    x, y = inputs(n)
    add_one(x, y)
    check(x, y)


def test_plain_export_runs_on_the_tensors_device(plain):
    x, y = inputs()
    plain.plain_add_one(x, y)
    check(x, y)
    assert list(plain.where(x)) == [1, torch.cuda.current_stream(1).cuda_stream]
    assert torch.cuda.current_device() == 0
    # Opting out (kffi::NoDeviceGuard) runs on the caller's device, as before.
    assert plain.where_unguarded(x)[0] == 0


def test_the_torch_stream_of_device_one_reaches_the_kernel(add_one, plain):
    x, y = inputs(1 << 20)
    s1 = torch.cuda.Stream(device=1)
    torch.cuda.synchronize(1)
    with torch.cuda.stream(s1):
        torch.cuda.set_device(0)  # cuda:0 current; device 1's current stream stays s1
        assert plain.where(x)[1] == s1.cuda_stream
        add_one(x, y)
        done = torch.cuda.Event()
        done.record(s1)  # after the kernel only if it went to s1
    torch.cuda.set_device(0)
    done.synchronize()
    assert torch.equal(y, x + 1)


def test_tensors_from_two_devices_are_refused_naming_both(add_one):
    x = torch.zeros(8, device="cuda:0")
    y = torch.zeros(8, device="cuda:1")
    with pytest.raises(
        ValueError, match=r"y\.device\.index: expected 0 \(as x\.device\.index\), got 1"
    ):
        add_one(x, y)


def test_torch_op_eager_dispatcher_and_compiled(add_one):
    op = kffi.torch.register_op(add_one, "kffi_two_gpus::add_one")
    calls = {
        "eager": op,
        "torch.ops": torch.ops.kffi_two_gpus.add_one.default,
        "compiled": torch.compile(lambda x, y: op(x, y), fullgraph=True),
    }
    for name, call in calls.items():
        x, y = inputs()
        call(x, y)
        torch.cuda.synchronize(1)
        assert torch.equal(y, x + 1), name
        assert torch.cuda.current_device() == 0, name
        # The next call of the same path (a compiled one reuses its graph) is right too.
        x2, y2 = inputs(1000)
        x2 += 5
        call(x2, y2)
        check(x2, y2)


def test_cuda_graph_capture_on_device_one(add_one):
    x, y = inputs(4096)
    with torch.cuda.device(1):
        side = torch.cuda.Stream()
        with torch.cuda.stream(side):
            add_one(x, y)  # warm-up outside the capture
        side.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            add_one(x, y)
    torch.cuda.set_device(0)
    x.fill_(41.0)
    g.replay()
    torch.cuda.synchronize(1)
    assert torch.all(y == 42.0).item()


def test_kffi_jax_call_on_device_one(add_one):
    jax = pytest.importorskip("jax")
    import kffi.jax

    try:
        gpus = jax.devices("gpu")
    except RuntimeError:
        pytest.skip("JAX has no GPU backend here")
    if len(gpus) < 2:
        pytest.skip("JAX sees fewer than two GPUs")
    x = jax.device_put(jax.numpy.arange(1000, dtype=jax.numpy.float32), gpus[1])
    eager = kffi.jax.call(add_one, x)
    jitted = jax.jit(lambda a: kffi.jax.call(add_one, a))(x)
    for y in (eager, jitted):
        assert y.devices() == {gpus[1]}
        assert (jax.numpy.asarray(y) == x + 1).all()
    # XLA makes its device current on the thread that runs its executables and leaves it so
    # (a plain JAX computation on gpus[1] does the same): the device is XLA's to manage here.
    torch.cuda.set_device(0)


# ---- a bridged CuTe DSL export (it sets the device itself), and with kffi.with_contract ---------


@pytest.fixture(scope="module")
def cute_add_one():
    from cute_artifacts import artifacts_dir, load_library

    return load_library(artifacts_dir(), "add_one").add_one


def test_bridged_cute_export_on_device_one(cute_add_one):
    x, y = inputs()
    cute_add_one(x, y)
    check(x, y)


def test_cute_export_with_contract_on_device_one(cute_add_one):
    n = kffi.sym_int("n")
    f = kffi.with_contract(
        cute_add_one,
        kffi.fake_tensor("float32", (n,)),
        kffi.fake_tensor("float32", (n,), mut=True),
        param_names=["a", "b"],
        device="cuda",
        name="cute_add_one_two_gpus",
    )
    x, y = inputs()
    f(x, y)
    check(x, y)
    with pytest.raises(
        ValueError, match=r"b\.device\.index: expected 1 \(as a\.device\.index\), got 0"
    ):
        f(x, torch.zeros(1000, device="cuda:0"))
