#!/usr/bin/env python3
"""bench/cpp/run.py: C++ call overhead and compile time, printed as a table and saved as JSON.

Usage: python3 bench/cpp/run.py [--build-dir DIR] [--out results.json]
Builds the benchmark (Release) if needed, runs it with repetitions, and reports medians and the
overhead of each typed call over its direct anchor measured in the same run.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def build(build_dir):
    subprocess.run(["cmake", "-S", ROOT, "-B", build_dir, "-G", "Ninja", "-DCMAKE_BUILD_TYPE=Release",
                    "-DKFFI_BUILD_BENCH=ON", "-DKFFI_BUILD_TESTS=OFF", "-DKFFI_BUILD_EXAMPLES=OFF"],
                   check=True, stdout=subprocess.DEVNULL)
    subprocess.run(["cmake", "--build", build_dir, "--target", "kffi_bench_call"], check=True,
                   stdout=subprocess.DEVNULL)


def run_benchmarks(build_dir, repetitions):
    exe = os.path.join(build_dir, "bench", "cpp", "kffi_bench_call")
    out = subprocess.run([exe, f"--benchmark_repetitions={repetitions}",
                          "--benchmark_min_time=0.2", "--benchmark_format=json"],
                         check=True, capture_output=True, text=True).stdout
    runs = {}
    for b in json.loads(out)["benchmarks"]:
        if b.get("run_type") == "iteration":
            runs.setdefault(b["run_name"], []).append(b["cpu_time"])
    return {name: statistics.median(times) for name, times in runs.items()}


def compile_time(repeats):
    """Median seconds to compile compile_unit.cc the way a kernel author would (-O2 -fPIC)."""
    src = os.path.join(ROOT, "bench", "cpp", "compile_unit.cc")
    times = []
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(repeats):
            t0 = time.perf_counter()
            subprocess.run(["g++", "-std=c++17", "-O2", "-fPIC", "-fvisibility=hidden",
                            "-I", os.path.join(ROOT, "include"), "-c", src, "-o",
                            os.path.join(tmp, "unit.o")], check=True)
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build-dir", default=os.path.join(ROOT, "build", "bench"))
    ap.add_argument("--out", default=os.path.join(ROOT, "build", "bench_cpp.json"))
    ap.add_argument("--repetitions", type=int, default=10)
    args = ap.parse_args()
    build(args.build_dir)
    med = run_benchmarks(args.build_dir, args.repetitions)
    pairs = [("0 args", "BM_Direct_0Args", "BM_Typed_0Args"),
             ("3 ints", "BM_Direct_3Ints", "BM_Typed_3Ints"),
             ("3 ints (TypedFunction)", "BM_Direct_3Ints", "BM_TypedFunction_3Ints"),
             ("3 tensor views", "BM_Direct_3Tensors", "BM_Typed_3TensorViews")]
    rows = []
    print(f"{'case':<24}{'direct ns':>12}{'kffi ns':>12}{'overhead ns':>14}{'ratio':>8}")
    for label, direct, typed in pairs:
        d, t = med[direct], med[typed]
        rows.append({"case": label, "direct_ns": d, "kffi_ns": t, "overhead_ns": t - d,
                     "ratio": t / d if d else None})
        print(f"{label:<24}{d:>12.2f}{t:>12.2f}{t - d:>14.2f}{t / d:>8.2f}")
    ct = compile_time(5)
    print(f"\ncompile time of a TU that includes the function header and exports one typed "
          f"function: {ct:.3f} s (goal < 1.0 s; TVM-FFI reports ~1.2 s, pybind11 ~2.2 s)")
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump({"calls": rows, "compile_time_s": ct, "medians_ns": med}, f, indent=2)
    print(f"results written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
