#!/usr/bin/env python3
"""bench/jax/shard_rows.py: a row-parallel kffi kernel under jax.jit, sharded over 2 devices.

The kernel normalises each row of x (y = x / sum(x's row)); its contract declares the rows
`parallel`. One process measures, interleaved, a jitted ``kffi.jax.call`` on an input of
(2 * rows, cols) float32:

  single      the whole input on one device
  sharded     rows split over 2 devices (NamedSharding P("d", None)): each device runs the
              kernel on its own (rows, cols) half, no collective
  gathered    (today's behaviour) the same sharded input, the same kernel with a contract that
              declares no parallel symbol: XLA gathers the input onto each device first

For each case: the median time per call, and the collectives in the compiled HLO (all-gather,
all-reduce, all-to-all, collective-permute, reduce-scatter). The goal (issue 24, two GPUs,
2 x (8192 x 8192)): sharded <= 0.55x single. The results of every case are compared with each
other first.

Usage: python3 bench/jax/shard_rows.py [--platform gpu|cpu] [--rows 8192] [--cols 8192]
                                       [--reps 15] [--calls 10] [--out build/bench_shard_rows.json]
On CPU (the default where fewer than 2 GPUs are present) it runs on 2 virtual CPU devices with
small sizes (--rows 256 --cols 512 unless given). Never fails on a missed goal.
"""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
from pathlib import Path

import _rows as rows

ROOT = Path(__file__).resolve().parents[2]
COLLECTIVES = ("all-gather", "all-reduce", "all-to-all", "collective-permute", "reduce-scatter")

CPU_SRC = r"""
void rownorm(kffi::ConstTensorView x, kffi::TensorView y) {
  const int64_t n = x.shape()[0], m = x.shape()[1];
  const float* a = x.data<float>();
  float* b = y.data<float>();
  for (int64_t i = 0; i < n; ++i) {
    float s = 0;
    for (int64_t j = 0; j < m; ++j) s += a[i * m + j];
    const float inv = 1.0f / s;
    for (int64_t j = 0; j < m; ++j) b[i * m + j] = a[i * m + j] * inv;
  }
}
"""

GPU_SRC = r"""
#include <cuda_runtime.h>
// One block per row: a shared-memory sum, then the scaled row.
__global__ void rownorm_kernel(const float* x, float* y, int64_t m) {
  const float* row = x + blockIdx.x * m;
  float* out = y + blockIdx.x * m;
  __shared__ float part[256];
  float s = 0;
  for (int64_t j = threadIdx.x; j < m; j += blockDim.x) s += row[j];
  part[threadIdx.x] = s;
  __syncthreads();
  for (int k = blockDim.x / 2; k > 0; k >>= 1) {
    if (threadIdx.x < k) part[threadIdx.x] += part[threadIdx.x + k];
    __syncthreads();
  }
  const float inv = 1.0f / part[0];
  for (int64_t j = threadIdx.x; j < m; j += blockDim.x) out[j] = row[j] * inv;
}
void rownorm(kffi::ConstTensorView x, kffi::TensorView y, void* stream) {
  const int64_t n = x.shape()[0], m = x.shape()[1];
  if (n > 0)
    rownorm_kernel<<<n, 256, 0, (cudaStream_t)stream>>>(x.data<float>(), y.data<float>(), m);
}
"""


def gpu_count() -> int:
    import ctypes

    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return 0
    count = ctypes.c_int(0)
    if cuda.cuInit(0) != 0 or cuda.cuDeviceGetCount(ctypes.byref(count)) != 0:
        return 0
    return count.value


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--platform", choices=("gpu", "cpu"), default=None)
    ap.add_argument("--rows", type=int, default=None, help="rows per device (default 8192 GPU)")
    ap.add_argument("--cols", type=int, default=None, help="columns (default 8192 GPU)")
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--calls", type=int, default=10, help="calls per timed sample")
    ap.add_argument("--out", default=str(ROOT / "build" / "bench_shard_rows.json"))
    args = ap.parse_args(argv)
    if args.platform is None:
        args.platform = "gpu" if gpu_count() >= 2 else "cpu"
    big = args.platform == "gpu"
    args.rows = args.rows or (8192 if big else 256)
    args.cols = args.cols or (8192 if big else 512)
    return args


def build(platform):
    import kffi

    cuda = platform == "gpu"
    src = GPU_SRC if cuda else CPU_SRC
    stream = [kffi.fake_stream()] if cuda else []

    def compile_with(parallel):
        n, m = kffi.sym_int("n", parallel=parallel), kffi.sym_int("m")
        return kffi.compile(
            src,
            "rownorm",
            kffi.fake_tensor("float32", (n, m)),
            kffi.fake_tensor("float32", (n, m), mut=True),
            *stream,
            options={"quiet": True},
        )

    return compile_with(True), compile_with(False)


def collectives(text) -> dict:
    return {c: text.count(f" {c}(") + text.count(f" {c}-start(") for c in COLLECTIVES}


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.platform == "cpu":  # before jax starts
        os.environ["XLA_FLAGS"] = (
            os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=2"
        ).strip()
        os.environ.setdefault("JAX_PLATFORMS", "cpu")
    import jax
    import kffi.jax
    import numpy as np
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    devices = jax.devices("gpu" if args.platform == "gpu" else "cpu")
    if len(devices) < 2:
        print(f"shard_rows: needs 2 {args.platform} devices, found {len(devices)}")
        return 0
    parallel_fn, plain_fn = build(args.platform)
    mesh = Mesh(np.array(devices[:2]), ("d",))
    shape = (2 * args.rows, args.cols)
    host = np.random.default_rng(0).random(shape, dtype=np.float32) + 0.5
    x_single = jax.device_put(host, devices[0])
    x_sharded = jax.device_put(host, NamedSharding(mesh, P("d", None)))

    def make(fn):
        def f(a):
            return kffi.jax.call(fn, a)

        return jax.jit(f)

    cases = {
        "single": (make(parallel_fn), x_single),
        "sharded": (make(parallel_fn), x_sharded),
        "gathered": (make(plain_fn), x_sharded),
    }
    hlo, outs = {}, {}
    for name, (f, x) in cases.items():
        hlo[name] = collectives(f.lower(x).compile().as_text())
        outs[name] = np.asarray(f(x))
    ref = host / host.sum(1, keepdims=True)
    for name, y in outs.items():
        err = float(np.abs(y - ref).max())
        if err > 1e-5:
            print(f"shard_rows: {name} differs from NumPy by {err}")
            return 1

    samples = {name: [] for name in cases}
    for f, x in cases.values():  # warm up
        for _ in range(3):
            f(x).block_until_ready()
    for _ in range(args.reps):
        order = list(cases)
        random.shuffle(order)
        for name in order:
            f, x = cases[name]
            y = None
            t0 = time.perf_counter()
            for _ in range(args.calls):
                y = f(x)
            y.block_until_ready()
            samples[name].append((time.perf_counter() - t0) / args.calls)
    med = {name: statistics.median(v) for name, v in samples.items()}
    ratio_sharded = med["sharded"] / med["single"]
    ratio_gathered = med["gathered"] / med["single"]

    device_name = getattr(devices[0], "device_kind", args.platform)
    print(
        f"kffi.jax row-parallel kernel, input {shape[0]}x{shape[1]} float32, "
        f"2 x {device_name}, {args.reps} reps x {args.calls} calls"
    )
    print(f"{'case':<10} {rows.HEADER}  collectives in HLO")
    for name in cases:
        cells = rows.row(med[name], med[name] / med["single"])
        print(f"{name:<10} {cells}  {rows.collectives_text(hlo[name])}")
    goal = 0.55
    print(f"{rows.goal_text(ratio_sharded, goal)}; gathered {ratio_gathered:.2f}x")
    result = {
        "bench": "shard_rows",
        "platform": args.platform,
        "device": device_name,
        "devices": 2,
        "shape": list(shape),
        "reps": args.reps,
        "calls": args.calls,
        "median_s": med,
        "samples_s": samples,
        "ratio_sharded_vs_single": ratio_sharded,
        "ratio_gathered_vs_single": ratio_gathered,
        "goal_sharded_vs_single": goal,
        "hlo_collectives": hlo,
    }
    rows.write(args.out, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
