"""tests/python/kffi_jax/jax_export_cases.py: the processes of test_jax_export.py's round trips.

    python jax_export_cases.py export DIR [cpu|cuda]   # exports f (fixed, symbolic) into DIR
    python jax_export_cases.py names DIR [cpu|cuda]    # prints f's kffi target names
    python jax_export_cases.py run DIR [cpu|cuda] [register|shipped|none]
                                                       # deserializes DIR's blobs and runs them

f calls a module kernel twice (repeat2: n -> 2n, scale) and a kffi.compile kernel (add_one);
on cuda, the CUDA twins of the three. The export also ships the two libraries in DIR; a run
registers kernels it builds again (register), the shipped libraries (shipped, which needs no
compiler), or none. Each run prints one JSON line.
"""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import kffi
import kffi.jax
import numpy as np

HERE = Path(__file__).resolve().parent
SUPPORT = HERE.parent / "support"  # deploy_kernels.cc/.cu, shared with kffi_torch

ADD_ONE_CPU = r"""
void add_one(kffi::TensorView y, kffi::ConstTensorView x) {
  const float* in = x.data<float>();
  float* out = y.data<float>();
  for (int64_t i = 0; i < x.numel(); ++i) out[i] = in[i] + 1;
}
"""

ADD_ONE_CUDA = r"""
#include <cuda_runtime.h>
__global__ void add_one_kernel(const float* x, float* y, int64_t n) {
  int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[i] + 1;
}
void add_one(kffi::TensorView y, kffi::ConstTensorView x) {
  int64_t n = x.numel();
  auto s = static_cast<cudaStream_t>(KFFIEnvGetStream(kDLCUDA, x.device().device_id));
  if (n) add_one_kernel<<<(n + 255) / 256, 256, 0, s>>>(x.data<float>(), y.data<float>(), n);
  cudaError_t err = cudaGetLastError();
  KFFI_CHECK(err == cudaSuccess, RuntimeError) << "CUDA error: " << cudaGetErrorString(err);
}
"""


def library(device: str) -> str:
    if device == "cuda":
        return kffi.cpp.build(
            "kffi_test_deploy_kernels_cuda", [str(SUPPORT / "deploy_kernels.cu")], quiet=True
        )
    return kffi.cpp.build(
        "kffi_test_deploy_kernels", [str(SUPPORT / "deploy_kernels.cc")], quiet=True
    )


def add_one(device: str):
    n = kffi.sym_int()
    return kffi.compile(
        ADD_ONE_CUDA if device == "cuda" else ADD_ONE_CPU,
        "add_one",
        kffi.fake_tensor("float32", (n,), mut=True),
        kffi.fake_tensor("float32", (n,)),
        options={"quiet": True},
    )


def function(device: str):
    mod = kffi.load_module(library(device))
    inc = add_one(device)

    def f(x):
        y = kffi.jax.call(mod.repeat2, x)  # n -> 2 n: the output shape is an expression
        y = kffi.jax.call(mod.scale, y, factor=3.0)
        return kffi.jax.call(inc, y)

    f.module, f.add_one = mod, inc
    return f


def expected(x):
    return np.repeat(np.asarray(x), 2) * 3 + 1


def serve_in_workers(out_dir: Path, device: str, runs: list, timeout: float = 300) -> list:
    """Runs DIR's blobs in one fresh worker process per (how, env) of runs, all at once; returns
    each worker's (returncode, JSON result or None, stderr). Workers left running are killed."""
    workers = [
        subprocess.Popen(
            [sys.executable, __file__, "run", str(out_dir), device, how],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for how, env in runs
    ]
    try:
        outputs = [w.communicate(timeout=timeout) for w in workers]
    finally:
        for w in workers:
            if w.poll() is None:
                w.kill()
                w.wait()
    results = []
    for w, (stdout, stderr) in zip(workers, outputs):
        lines = stdout.strip().splitlines()
        got = json.loads(lines[-1]) if w.returncode == 0 and lines else None
        results.append((w.returncode, got, stderr))
    return results


def main(argv) -> int:
    what, out_dir, device = argv[1], Path(argv[2]), argv[3]
    jax.config.update("jax_platforms", "cpu" if device == "cpu" else "cuda")
    if what in ("export", "names"):
        f = function(device)
        (n,) = jax.export.symbolic_shape("n")
        fixed = kffi.jax.export(f)(jax.ShapeDtypeStruct((4,), jnp.float32))
        if what == "names":
            print(json.dumps({"names": kffi.jax._export.targets_in_text(fixed.mlir_module())}))
            return 0
        symbolic = kffi.jax.export(f)(jax.ShapeDtypeStruct((n,), jnp.float32))
        (out_dir / "fixed.bin").write_bytes(fixed.serialize())
        for shipped, fn in (("kernels.so", f.module.repeat2), ("add_one.so", f.add_one)):
            shutil.copyfile(fn._origin[0], out_dir / shipped)
        (out_dir / "symbolic.bin").write_bytes(symbolic.serialize())
        x = jnp.arange(4, dtype=jnp.float32)
        print(json.dumps({"original": np.asarray(jax.jit(f)(x)).tolist()}))
        return 0
    if argv[4] == "register":
        kffi.jax.register_module(kffi.load_module(library(device)))
        kffi.jax.register_module(add_one(device))
    elif argv[4] == "shipped":
        for shipped in ("kernels.so", "add_one.so"):
            kffi.jax.register_module(kffi.load_module(str(out_dir / shipped)))
    fixed = jax.export.deserialize((out_dir / "fixed.bin").read_bytes())
    symbolic = jax.export.deserialize((out_dir / "symbolic.bin").read_bytes())
    result = {
        "fixed": np.asarray(fixed.call(jnp.arange(4, dtype=jnp.float32))).tolist(),
        "symbolic5": np.asarray(symbolic.call(jnp.arange(5, dtype=jnp.float32))).tolist(),
        "symbolic3_jit": np.asarray(
            jax.jit(symbolic.call)(jnp.arange(3, dtype=jnp.float32))
        ).tolist(),
        "platform": jax.devices()[0].platform,
        "pid": os.getpid(),
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
