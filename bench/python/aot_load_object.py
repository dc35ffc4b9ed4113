#!/usr/bin/env python3
"""bench/python/aot_load_object.py: what kffi.load_object of an exported object costs (goal for a
cached object: under 50 ms), against kffi.load_module of the same function's shared library,
measured in the same run.

Each timing is of the call alone, in a fresh Python process (``import kffi`` first, not timed):
  load_module      kffi.load_module("libadd_one.so")          (the anchor: a dlopen)
  load_object cold kffi.load_object("add_one.o"), empty cache (hash, link with the C++ driver,
                   dlopen)
  load_object      the same with the linked object in the cache (hash, dlopen)

Usage: python3 bench/python/aot_load_object.py [--reps 15] [--out build/bench_aot.json]
"""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import kffi

ROOT = Path(__file__).resolve().parents[2]

KERNEL = r"""
void add_one(kffi::ConstTensorView a, kffi::TensorView b) {
  const float* x = a.data<float>();
  float* y = b.data<float>();
  for (int64_t i = 0; i < a.numel(); ++i) y[i] = x[i] + 1.0f;
}
"""

TIMED = """
import sys, time, kffi
path = sys.argv[2]
t0 = time.perf_counter()
mod = (kffi.load_object if sys.argv[1] == "object" else kffi.load_module)(path)
t1 = time.perf_counter()
assert mod.functions() == ["add_one"], mod.functions()
print((t1 - t0) * 1000.0)
"""


def timed(kind: str, path: str, env: dict) -> float:
    out = subprocess.run(
        [sys.executable, "-c", TIMED, kind, path], env=env, capture_output=True, text=True
    )
    if out.returncode != 0:
        raise RuntimeError(out.stderr)
    return float(out.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--out", default=str(ROOT / "build" / "bench_aot.json"))
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        n = kffi.sym_int()
        f = kffi.compile(
            KERNEL,
            "add_one",
            kffi.fake_tensor("float32", (n,)),
            kffi.fake_tensor("float32", (n,), mut=True),
            options={"quiet": True},
        )
        obj = f.export(os.path.join(tmp, "add_one.o"))
        lib = f.export(os.path.join(tmp, "libadd_one.so"))
        cold_ms, warm_ms, module_ms = [], [], []
        for i in range(args.reps):
            # A fresh cache for each cold load; the warm loads share the last one.
            env = dict(os.environ, KFFI_CACHE_DIR=os.path.join(tmp, f"cache{i}"))
            if i < 3:
                cold_ms.append(timed("object", obj, env))
            else:
                env["KFFI_CACHE_DIR"] = os.path.join(tmp, "cache0")
            warm_ms.append(timed("object", obj, env))
            module_ms.append(timed("module", lib, env))
        rows = {
            "load_module_ms": statistics.median(module_ms),
            "load_object_cold_ms": statistics.median(cold_ms),
            "load_object_cached_ms": statistics.median(warm_ms),
            "object_bytes": os.path.getsize(obj),
        }
    base = rows["load_module_ms"]
    print(f"{'case':<22}{'median ms':>12}{'vs load_module':>16}")
    for label, key in [
        ("load_module (.so)", "load_module_ms"),
        ("load_object, cold", "load_object_cold_ms"),
        ("load_object, cached", "load_object_cached_ms"),
    ]:
        print(f"{label:<22}{rows[key]:>12.2f}{rows[key] / base:>15.1f}x")
    status = "PASS" if rows["load_object_cached_ms"] < 50.0 else "MISS"
    print(f"cached load_object goal < 50 ms: {status} ({rows['object_bytes']} byte object)")
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as fh:
        json.dump({**rows, "status": status, "reps": args.reps}, fh, indent=2)
    print(f"results written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
