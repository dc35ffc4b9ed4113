"""tests/python/kffi_jax/test_jax_shard_gpu.py: kffi.jax over two GPUs (parallel contract symbols).

The CPU cases (4 virtual devices) are in jax_shard_cases.py; these run the same rules on two
CUDA devices: a CUDA row normalisation compiled with kffi.compile, and a bridged CuTe DSL export
made row-parallel with kffi.with_contract. They skip without a CUDA JAX backend of 2 devices.
"""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap

import kffi
import numpy as np
import pytest

jax = pytest.importorskip("jax")
import kffi.jax
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P


def _gpus() -> list:
    try:
        return jax.devices("gpu")
    except RuntimeError:
        return []


pytestmark = pytest.mark.skipif(len(_gpus()) < 2, reason="needs a CUDA JAX backend of 2 GPUs")

COLLECTIVES = ("all-gather", "all-to-all", "collective-permute", "all-reduce", "reduce-scatter")

SRC = r"""
#include <cuda_runtime.h>
__global__ void rownorm_kernel(const float* x, float* y, int64_t m) {
  const float* row = x + blockIdx.x * m;
  float* out = y + blockIdx.x * m;
  __shared__ float part[128];
  float s = 0;
  for (int64_t j = threadIdx.x; j < m; j += blockDim.x) s += row[j];
  part[threadIdx.x] = s;
  __syncthreads();
  for (int k = blockDim.x / 2; k > 0; k >>= 1) {
    if (threadIdx.x < k) part[threadIdx.x] += part[threadIdx.x + k];
    __syncthreads();
  }
  for (int64_t j = threadIdx.x; j < m; j += blockDim.x) out[j] = row[j] / part[0];
}
void rownorm(kffi::ConstTensorView x, kffi::TensorView y, void* stream) {
  const int64_t n = x.size(0), m = x.size(1);
  if (n > 0)
    rownorm_kernel<<<n, 128, 0, (cudaStream_t)stream>>>(x.data<float>(), y.data<float>(), m);
}
"""


@pytest.fixture(scope="module")
def rownorm():
    if shutil.which("nvcc") is None:
        pytest.skip("needs nvcc")
    n, m = kffi.sym_int("n", parallel=True), kffi.sym_int("m")
    return kffi.compile(
        SRC,
        "rownorm",
        kffi.fake_tensor("float32", (n, m)),
        kffi.fake_tensor("float32", (n, m), mut=True),
        kffi.fake_stream(),
        options={"quiet": True},
    )


@pytest.fixture(scope="module")
def mesh():
    return Mesh(np.array(_gpus()[:2]), ("d",))


def _x():
    return np.random.default_rng(0).random((256, 384), dtype=np.float32) + 0.5


def _expected(x):
    return x / x.sum(1, keepdims=True)


def test_rows_sharded_over_two_gpus_without_collectives(rownorm, mesh):
    x = _x()
    sharding = NamedSharding(mesh, P("d", None))
    xs = jax.device_put(x, sharding)

    def f(a):
        return kffi.jax.call(rownorm, a)

    text = jax.jit(f).lower(xs).compile().as_text()
    assert [c for c in COLLECTIVES if c in text] == [], text
    y = jax.jit(f)(xs)
    assert y.sharding.is_equivalent_to(sharding, 2)
    assert {s.device for s in y.addressable_shards} == set(mesh.devices.flat)
    assert {s.data.shape for s in y.addressable_shards} == {(128, 384)}
    np.testing.assert_allclose(np.asarray(y), _expected(x), rtol=1e-5)


def test_columns_sharded_are_gathered_and_right(rownorm, mesh):
    x = _x()
    xs = jax.device_put(x, NamedSharding(mesh, P(None, "d")))
    y = jax.jit(lambda a: kffi.jax.call(rownorm, a))(xs)
    np.testing.assert_allclose(np.asarray(y), _expected(x), rtol=1e-5)


def test_graph_trait_and_vmap_on_two_gpus(rownorm, mesh):
    x = _x()
    xs = jax.device_put(np.stack([x, 2 * x]), NamedSharding(mesh, P(None, "d", None)))

    def f(a):
        return kffi.jax.call(rownorm, a, allow_cuda_graph=True)

    y = jax.jit(jax.vmap(f))(xs)
    np.testing.assert_allclose(np.asarray(y), np.stack([_expected(x)] * 2), rtol=1e-5)


CUTE_SCRIPT = textwrap.dedent("""
    import os, sys, json
    os.environ["XLA_PYTHON_CLIENT_PREALLOCATE"] = "false"
    import jax, jax.numpy as jnp, numpy as np, kffi, kffi.jax
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
    gpus = jax.devices("gpu")
    n = kffi.sym_int("n", parallel=True)
    f = kffi.with_contract(
        kffi.load_module(sys.argv[1]).add_one,
        kffi.fake_tensor("float32", (n,)), kffi.fake_tensor("float32", (n,), mut=True),
        param_names=["a", "b"], device="cuda", name="cute_add_one_rows")
    mesh = Mesh(np.array(gpus[:2]), ("d",))
    x = jax.device_put(jnp.arange(4096, dtype=jnp.float32), NamedSharding(mesh, P("d")))
    step = jax.jit(lambda a: kffi.jax.call(f, a * 2))
    text = step.lower(x).compile().as_text()
    y = step(x)
    print(json.dumps({
        "right": bool((np.asarray(y) == np.arange(4096) * 2 + 1).all()),
        "collectives": [c for c in ("all-gather", "all-to-all", "collective-permute",
                                    "all-reduce") if c in text],
        "shards": sorted(str(s.data.shape) for s in y.addressable_shards),
    }))
""")


def test_cute_dsl_export_made_row_parallel_with_with_contract():
    from cute_artifacts import artifacts_dir

    cute_dir = artifacts_dir()  # or skip: no DSL, no prebuilt artifacts
    manifest = json.loads((cute_dir / "manifest.json").read_text())
    lib = cute_dir / manifest["libraries"]["add_one"]
    proc = subprocess.run(
        [sys.executable, "-c", CUTE_SCRIPT, str(lib)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report == {"right": True, "collectives": [], "shards": ["(2048,)", "(2048,)"]}, report
