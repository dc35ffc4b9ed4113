#!/usr/bin/env python3
"""bench/python/compile_cache.py: what a cache hit of kffi.compile (and kffi.cpp.load_inline)
costs, once the library is built.

Variants (median of --reps each):
  in-process     the same call again in the process that built it (hash the sources, flags and
                 compiler identity, find the library, load it: the loader already has it)
  fresh-process  a new Python process: `import kffi` first (not timed), then the call (timed);
                 the whole process's wall time is reported too

A cache hit starts no compiler: the script checks kffi.cpp.get_compiler_invocations() == 0 in
every fresh process and fails otherwise.

Usage: python3 bench/python/compile_cache.py [--reps 20] [--out build/bench_compile_cache.json]
                                             [--cache-dir DIR]
"""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

KERNEL = r"""
void add_one(kffi::ConstTensorView a, kffi::TensorView b) {
  const float* x = a.data<float>();
  float* y = b.data<float>();
  for (int64_t i = 0; i < a.numel(); ++i) y[i] = x[i] + 1.0f;
}
"""

# One call of each variant; also run as the body of the fresh processes.
CALLS = {
    "kffi.compile": textwrap.dedent("""
        n = kffi.sym_int(divisibility=4)
        fn = kffi.compile(KERNEL, "add_one", kffi.fake_tensor("float32", (n,), align=16),
                          kffi.fake_tensor("float32", (n,), align=16, mut=True))
    """),
    "kffi.cpp.load_inline": textwrap.dedent("""
        fn = kffi.cpp.load_inline("add_one_inline", cpp_sources=KERNEL,
                                  functions=["add_one"]).add_one
    """),
}

CHILD = """
import json, sys, time
t0 = time.perf_counter()
import kffi, kffi.cpp
t1 = time.perf_counter()
KERNEL = {kernel!r}
{call}
t2 = time.perf_counter()
print(json.dumps({{"import_ms": (t1 - t0) * 1e3, "call_ms": (t2 - t1) * 1e3,
                   "compiler_invocations": kffi.cpp.get_compiler_invocations()}}))
"""


def run_call(kffi, variant: str):
    scope = {"kffi": kffi, "KERNEL": KERNEL}
    exec(CALLS[variant], scope)  # noqa: S102 (our own fixed snippets)
    return scope["fn"]


def fresh_process(variant: str, env: dict) -> dict:
    code = CHILD.format(kernel=KERNEL, call=CALLS[variant])
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600
    )
    wall_ms = (time.perf_counter() - start) * 1e3
    if proc.returncode != 0:
        raise SystemExit(f"fresh process failed:\n{proc.stderr}")
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    if result["compiler_invocations"] != 0:
        raise SystemExit(
            f"{variant}: a cache hit in a fresh process started "
            f"{result['compiler_invocations']} compiler process(es)"
        )
    result["wall_ms"] = wall_ms
    return result


def summarize(values) -> dict:
    return {
        "median": statistics.median(values),
        "min": min(values),
        "max": max(values),
        "n": len(values),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--out", default=str(ROOT / "build" / "bench_compile_cache.json"))
    ap.add_argument(
        "--cache-dir",
        default=None,
        help="KFFI_CACHE_DIR to use (default: a fresh temporary folder)",
    )
    args = ap.parse_args()

    tmp = None
    if args.cache_dir is None:
        tmp = tempfile.TemporaryDirectory(prefix="kffi-bench-cache-")
        args.cache_dir = tmp.name
    os.environ["KFFI_CACHE_DIR"] = args.cache_dir
    os.environ["KFFI_BUILD_QUIET"] = "1"
    env = dict(os.environ)

    import kffi
    import kffi.contract

    variants = list(CALLS)
    if not kffi.contract.has_contract_support():
        print("kffi.compile: this kffi has no KFFI_EXPORT_CONTRACT; measuring load_inline only")
        variants.remove("kffi.compile")

    report = {
        "python": platform.python_version(),
        "machine": platform.machine(),
        "kffi": kffi.__version__,
        "reps": args.reps,
        "results": {},
    }
    print(
        f"kffi {kffi.__version__}, Python {platform.python_version()}, "
        f"median of {args.reps}; times in ms"
    )
    print(
        f"{'variant':<22} {'cold build':>11} {'in-process':>11} {'fresh: call':>12} "
        f"{'fresh: import':>14} {'fresh: wall':>12}"
    )
    for variant in variants:
        start = time.perf_counter()
        run_call(kffi, variant)  # the build (or an earlier run's cache)
        cold_ms = (time.perf_counter() - start) * 1e3
        inproc = []
        for _ in range(args.reps):
            start = time.perf_counter()
            run_call(kffi, variant)
            inproc.append((time.perf_counter() - start) * 1e3)
        fresh = [fresh_process(variant, env) for _ in range(args.reps)]
        row = {
            "cold_build_ms": cold_ms,
            "in_process_ms": summarize(inproc),
            "fresh_process_call_ms": summarize([r["call_ms"] for r in fresh]),
            "fresh_process_import_ms": summarize([r["import_ms"] for r in fresh]),
            "fresh_process_wall_ms": summarize([r["wall_ms"] for r in fresh]),
        }
        report["results"][variant] = row
        print(
            f"{variant:<22} {cold_ms:>11.1f} {row['in_process_ms']['median']:>11.3f} "
            f"{row['fresh_process_call_ms']['median']:>12.3f} "
            f"{row['fresh_process_import_ms']['median']:>14.1f} "
            f"{row['fresh_process_wall_ms']['median']:>12.1f}"
        )
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.out}")
    if tmp is not None:
        tmp.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
