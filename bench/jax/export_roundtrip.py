#!/usr/bin/env python3
"""bench/jax/export_roundtrip.py: a deserialized kffi.jax.export computation runs as fast as the
original.

One process builds f(x) = add_one(scale(x, 3)) from two kffi contract kernels (a module and a
kffi.compile function), exports it with kffi.jax.export, serializes and deserializes it, and
measures, interleaved, the median time per call of

  original      jax.jit(f)
  deserialized  jax.jit(jax.export.deserialize(blob).call)

after checking that both give the same result. The goal (issue 26): deserialized / original
within noise (ratio about 1.0). Fresh-process registration is the same code path
(kffi.jax.register_module); tests/python/kffi_jax/test_jax_export.py covers it.

Usage: python3 bench/jax/export_roundtrip.py [--platform cpu|gpu] [--n 1048576] [--reps 15]
                                             [--calls 50] [--out build/bench_export.json]
"""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--platform", default=None)
    ap.add_argument("--n", type=int, default=1 << 20)
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--calls", type=int, default=50)
    ap.add_argument("--out", default=str(ROOT / "build" / "bench_export.json"))
    args = ap.parse_args()

    import jax
    import jax.numpy as jnp
    import kffi
    import kffi.jax
    import numpy as np

    if args.platform:
        jax.config.update("jax_platforms", "cuda" if args.platform == "gpu" else "cpu")
    gpu = jax.default_backend() == "gpu"
    sys.path.insert(0, str(ROOT / "tests" / "python" / "kffi_jax"))
    import jax_export_cases as cases  # the test kernels: repeat2 and scale (module), add_one

    device = "cuda" if gpu else "cpu"
    mod = kffi.load_module(cases.library(device))
    inc = cases.add_one(device)

    def f(x):
        return kffi.jax.call(inc, kffi.jax.call(mod.scale, x, factor=3.0))

    x = jnp.arange(args.n, dtype=jnp.float32)
    exported = kffi.jax.export(f)(jax.ShapeDtypeStruct(x.shape, x.dtype))
    back = jax.export.deserialize(exported.serialize())
    fns = {"original": jax.jit(f), "deserialized": jax.jit(back.call)}
    results = {k: np.asarray(fn(x)) for k, fn in fns.items()}
    np.testing.assert_array_equal(results["original"], results["deserialized"])
    times = {k: [] for k in fns}
    for _ in range(args.reps):
        for k, fn in fns.items():  # interleaved
            fn(x).block_until_ready()
            t0 = time.perf_counter()
            for _ in range(args.calls):
                y = fn(x)
            y.block_until_ready()
            times[k].append((time.perf_counter() - t0) / args.calls)
    med = {k: statistics.median(v) for k, v in times.items()}
    ratio = med["deserialized"] / med["original"]
    report = {
        "device": str(jax.devices()[0]),
        "n": args.n,
        "median_us": {k: round(v * 1e6, 2) for k, v in med.items()},
        "ratio_deserialized_over_original": round(ratio, 3),
    }
    print(json.dumps(report, indent=2))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
