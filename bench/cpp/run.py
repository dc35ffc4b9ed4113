#!/usr/bin/env python3
"""bench/cpp/run.py: C++ call overhead, contract check cost and compile time, printed as tables and
saved as JSON.

Usage: python3 bench/cpp/run.py [--build-dir DIR] [--out results.json]
Builds the benchmark (Release) if needed, runs it with repetitions, and reports medians and the
overhead of each typed call over its direct anchor measured in the same run.
"""
# SPDX-License-Identifier: Apache-2.0

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
    subprocess.run(
        [
            "cmake",
            "-S",
            ROOT,
            "-B",
            build_dir,
            "-G",
            "Ninja",
            "-DCMAKE_BUILD_TYPE=Release",
            "-DKFFI_BUILD_BENCH=ON",
            "-DKFFI_BUILD_TESTS=OFF",
            "-DKFFI_BUILD_EXAMPLES=OFF",
        ],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    subprocess.run(
        [
            "cmake",
            "--build",
            build_dir,
            "--target",
            "kffi_bench_call",
            "kffi_bench_contract",
            "kffi_bench_aot",
        ],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    # Only where the toolchain has link-time optimisation (bench/cpp/CMakeLists.txt).
    subprocess.run(
        ["cmake", "--build", build_dir, "--target", "kffi_bench_aot_lto"],
        check=False,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def run_benchmarks(build_dir, repetitions, name="kffi_bench_call"):
    exe = os.path.join(build_dir, "bench", "cpp", name)
    out = subprocess.run(
        [
            exe,
            f"--benchmark_repetitions={repetitions}",
            "--benchmark_min_time=0.2",
            "--benchmark_format=json",
        ],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    runs = {}
    for b in json.loads(out)["benchmarks"]:
        if b.get("run_type") == "iteration":
            runs.setdefault(b["run_name"], []).append(b["cpu_time"])
    return {name: statistics.median(times) for name, times in runs.items()}


CXXFLAGS = ["-std=c++17", "-O2", "-fPIC", "-fvisibility=hidden"]

# The same kernels written for apache-tvm-ffi, the anchor of the build-time rows (its headers
# come with the apache-tvm-ffi wheel; the rows are left out where it is not installed).
TVM_EXPORT_UNIT = """#include <tvm/ffi/function.h>
namespace {
int64_t AddOne(int64_t x) { return x + 1; }
}  // namespace
TVM_FFI_DLL_EXPORT_TYPED_FUNC(add_one, AddOne);
"""
# kffi's input is a ConstTensorView: a contract refuses a read-only parameter that may be written.
KERNEL = """
void add_one({In} x, {T} y) {{
  const float* a = static_cast<const float*>(x.data_ptr());
  float* b = static_cast<float*>(y.data_ptr());
  for (int64_t i = 0; i < x.numel(); ++i) b[i] = a[i] + 1.0f;
}}
"""
TVM_TENSOR_UNIT = (
    "#include <tvm/ffi/container/tensor.h>\n#include <tvm/ffi/function.h>\n"
    + KERNEL.format(In="tvm::ffi::TensorView", T="tvm::ffi::TensorView")
    + "TVM_FFI_DLL_EXPORT_TYPED_FUNC(add_one, add_one);\n"
)
# The cold JIT build of the same add_one: kffi.compile (with a contract) and
# tvm_ffi.cpp.load_inline, each in a fresh process with a fresh build directory.
KFFI_JIT = f"""import tempfile, kffi
src = {KERNEL.format(In="kffi::ConstTensorView", T="kffi::TensorView")!r}
with tempfile.TemporaryDirectory() as d:
    n = kffi.sym_int("n")
    kffi.compile(src, "add_one", kffi.fake_tensor("float32", [n]),
                 kffi.fake_tensor("float32", [n], mut=True),
                 options={{"build_directory": d, "quiet": True}})
"""
TVM_JIT = f"""import tempfile, tvm_ffi.cpp
src = {KERNEL.format(In="tvm::ffi::TensorView", T="tvm::ffi::TensorView")!r}
with tempfile.TemporaryDirectory() as d:
    tvm_ffi.cpp.load_inline("add_one", cpp_sources=src, functions=["add_one"], build_directory=d)
"""


def tvm_include_dirs():
    """apache-tvm-ffi's include directories, or None where it is not installed."""
    try:
        import tvm_ffi.libinfo as info
    except Exception:  # any failure to import means no anchor
        return None
    dirs = [info.find_include_path()]
    if hasattr(info, "find_dlpack_include_path"):
        dirs.append(info.find_dlpack_include_path())
    return dirs


def timed(cmd):
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t0


def paired(cmd_a, cmd_b, repeats):
    """Medians of A's and B's seconds and of the ratio A/B taken pair by pair (A and B run in
    turn, so that a machine whose speed drifts moves both sides of a pair alike)."""
    ta, tb, ratios = [], [], []
    for _ in range(repeats):
        a = timed(cmd_a)
        b = timed(cmd_b)
        ta.append(a)
        tb.append(b)
        ratios.append(a / b)
    return statistics.median(ta), statistics.median(tb), statistics.median(ratios)


def compile_time(repeats):
    """Median seconds to compile compile_unit.cc the way a kernel author would (-O2 -fPIC)."""
    src = os.path.join(ROOT, "bench", "cpp", "compile_unit.cc")
    times = []
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "unit.o")
        for _ in range(repeats):
            times.append(
                timed(["g++", *CXXFLAGS, "-I", os.path.join(ROOT, "include"), "-c", src, "-o", out])
            )
    return statistics.median(times)


def row(label, result, goal):
    ta, tb, ratio = result
    status = "PASS" if ratio <= goal else "MISS"
    print(f"{label:<28}{ta:>10.3f}{tb:>11.3f}{ratio:>8.2f}  <= {goal} {status}")
    return {
        "case": label,
        "kffi_s": ta,
        "tvm_ffi_s": tb,
        "ratio": ratio,
        "goal": goal,
        "status": status,
    }


def dispatch_compile_row(repeats):
    """compile_unit_dispatch.cc (a contract export over three dtypes) with contract-driven
    kffi::DispatchDtype against the same TU dispatching by an if-chain, in paired runs."""
    src = os.path.join(ROOT, "bench", "cpp", "compile_unit_dispatch.cc")
    with tempfile.TemporaryDirectory() as tmp:
        base = ["g++", *CXXFLAGS, "-I", os.path.join(ROOT, "include"), "-c", src]
        a = [*base, "-o", os.path.join(tmp, "a.o")]
        b = [*base, "-DKFFI_BENCH_HAND_DISPATCH", "-o", os.path.join(tmp, "b.o")]
        ta, tb, ratio = paired(a, b, repeats)
    print(
        f"\ncontract export TU, DispatchDtype<ContractDtypes> vs an if-chain: {ta:.3f} s vs "
        f"{tb:.3f} s (ratio {ratio:.2f}, paired)"
    )
    return {"dispatch_s": ta, "if_chain_s": tb, "ratio": ratio}


def build_time_rows(repeats, jit_repeats):
    """kffi against apache-tvm-ffi, in paired runs: the export TU, the contract TU (against
    tvm-ffi's export of the same TensorView kernel) and the cold JIT build (issue 14's goals)."""
    inc = tvm_include_dirs()
    if inc is None:
        print("\nbuild time against apache-tvm-ffi: skipped (tvm_ffi is not installed)")
        return []
    rows = []
    print(f"\n{'build time (paired runs)':<28}{'kffi s':>10}{'tvm-ffi s':>11}{'ratio':>8}  goal")
    with tempfile.TemporaryDirectory() as tmp:
        units = []
        for name, text in [("tvm_export.cc", TVM_EXPORT_UNIT), ("tvm_tensor.cc", TVM_TENSOR_UNIT)]:
            path = os.path.join(tmp, name)
            with open(path, "w") as f:
                f.write(text)
            units.append(path)
        kinc = ["-I", os.path.join(ROOT, "include")]
        tinc = [arg for d in inc for arg in ("-I", d)]
        out = ["-c", "-o", os.path.join(tmp, "unit.o")]
        for label, kffi_unit, tvm_unit, goal in [
            ("export TU", "compile_unit.cc", units[0], 0.5),
            ("contract TU", "compile_unit_contract.cc", units[1], 0.5),
        ]:
            a = ["g++", *CXXFLAGS, *kinc, os.path.join(ROOT, "bench", "cpp", kffi_unit), *out]
            b = ["g++", *CXXFLAGS, *tinc, tvm_unit, *out]
            rows.append(row(label, paired(a, b, repeats), goal))
        if jit_repeats > 0:
            a = [sys.executable, "-c", KFFI_JIT]
            b = [sys.executable, "-c", TVM_JIT]
            try:
                rows.append(row("kffi.compile cold build", paired(a, b, jit_repeats), 0.5))
            except subprocess.CalledProcessError as e:
                print(f"{'kffi.compile cold build':<28}failed ({e}); is kffi installed?")
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build-dir", default=os.path.join(ROOT, "build", "bench"))
    ap.add_argument("--out", default=os.path.join(ROOT, "build", "bench_cpp.json"))
    ap.add_argument("--repetitions", type=int, default=10)
    ap.add_argument("--compile-repeats", type=int, default=7, help="pairs per build-time row")
    ap.add_argument("--jit-repeats", type=int, default=3, help="0 leaves the JIT row out")
    args = ap.parse_args()
    build(args.build_dir)
    med = run_benchmarks(args.build_dir, args.repetitions)
    pairs = [
        ("0 args", "BM_Direct_0Args", "BM_Typed_0Args"),
        ("3 ints", "BM_Direct_3Ints", "BM_Typed_3Ints"),
        ("3 ints (TypedFunction)", "BM_Direct_3Ints", "BM_TypedFunction_3Ints"),
        ("3 tensor views", "BM_Direct_3Tensors", "BM_Typed_3TensorViews"),
        # Not an anchor pair: the if-chain a kernel writes by hand against kffi::DispatchDtype.
        ("dtype: if-chain|Dispatch", "BM_Typed_HandDispatch", "BM_Typed_DispatchDtype"),
    ]
    rows = []
    print(f"{'case':<24}{'direct ns':>12}{'kffi ns':>12}{'overhead ns':>14}{'ratio':>8}")
    for label, direct, typed in pairs:
        d, t = med[direct], med[typed]
        rows.append(
            {
                "case": label,
                "direct_ns": d,
                "kffi_ns": t,
                "overhead_ns": t - d,
                "ratio": t / d if d else None,
            }
        )
        print(f"{label:<24}{d:>12.2f}{t:>12.2f}{t - d:>14.2f}{t / d:>8.2f}")
    # Contracts: the same no-op with three 64x32 tensors without and with a contract; the check
    # plan's cost per tensor is the difference over three (goal <= 5 ns per tensor).
    cmed = run_benchmarks(args.build_dir, args.repetitions, "kffi_bench_contract")
    base = cmed["BM_NoContract_3Tensors"]
    contract_rows = []
    print(f"\n{'contract (3 tensors)':<28}{'call ns':>10}{'per tensor ns':>15}  goal <= 5 ns")
    print(f"{'no contract':<28}{base:>10.2f}{'':>15}")
    for label, name in [
        ("dtype + shape", "BM_Contract_3Tensors_DtypeShape"),
        ("full (align, device, ...)", "BM_Contract_3Tensors_Full"),
        ("full, all three `mut`", "BM_Contract_3Tensors_Full_Mut"),
        # The leading rank-2 tensor inline, the rest in one call into the runtime.
        ("ranks 2, 1, 2", "BM_Contract_3Tensors_MixedRanks"),
    ]:
        per = (cmed[name] - base) / 3
        contract_rows.append(
            {
                "case": label,
                "call_ns": cmed[name],
                "per_tensor_ns": per,
                "status": "PASS" if per <= 5.0 else "MISS",
            }
        )
        print(f"{label:<28}{cmed[name]:>10.2f}{per:>15.2f}  {contract_rows[-1]['status']}")
    # An EnvStream parameter is a per-call cost (one KFFIEnvGetStream), not a per-tensor one.
    full, stream = cmed["BM_Contract_3Tensors_Full"], cmed["BM_Contract_3Tensors_Full_EnvStream"]
    contract_rows.append(
        {"case": "full + EnvStream", "call_ns": stream, "env_stream_ns": stream - full}
    )
    print(
        f"{'full + EnvStream':<28}{stream:>10.2f}  (+{stream - full:.2f} ns per call for the "
        f"environment stream)"
    )
    # Ahead of time: the typed entry point of a generated header (docs/aot.md) against a direct
    # call of the same function through a pointer (goal: within 2 ns), linked as usual and with
    # link-time optimisation (where the export's safe call inlines into the entry point).
    aot_rows = []
    amed = {}
    print(
        f"\n{'typed header entry':<34}{'direct ns':>12}{'header ns':>12}{'overhead ns':>14}"
        "  goal <= 2 ns"
    )
    for link, exe in [("", "kffi_bench_aot"), (" (-flto)", "kffi_bench_aot_lto")]:
        if not os.path.exists(os.path.join(args.build_dir, "bench", "cpp", exe)):
            print(f"{'(no LTO in this toolchain)':<34}")
            continue
        m = run_benchmarks(args.build_dir, args.repetitions, exe)
        amed.update({f"{k}{link}": v for k, v in m.items()})
        for label, case in [
            ("0 args", "0Args"),
            ("3 ints", "3Ints"),
            ("3 tensor views", "3Tensors"),
        ]:
            d, h = m[f"BM_AotDirect_{case}"], m[f"BM_AotHeader_{case}"]
            aot_rows.append(
                {
                    "case": label + link,
                    "lto": bool(link),
                    "direct_ns": d,
                    "header_ns": h,
                    "overhead_ns": h - d,
                    "status": "PASS" if h - d <= 2.0 else "MISS",
                }
            )
            row = aot_rows[-1]
            print(f"{row['case']:<34}{d:>12.2f}{h:>12.2f}{h - d:>14.2f}  {row['status']}")
    ct = compile_time(5)
    print(
        f"\ncompile time of a TU that includes the function header and exports one typed "
        f"function: {ct:.3f} s (goal < 1.0 s; TVM-FFI reports ~1.2 s, pybind11 ~2.2 s)"
    )
    dispatch_row = dispatch_compile_row(args.compile_repeats)
    build_rows = build_time_rows(args.compile_repeats, args.jit_repeats)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(
            {
                "calls": rows,
                "contracts": contract_rows,
                "compile_time_s": ct,
                "dispatch_compile": dispatch_row,
                "build_time_vs_tvm_ffi": build_rows,
                "medians_ns": med,
                "contract_medians_ns": cmed,
                "aot_header_entry": aot_rows,
                "aot_medians_ns": amed,
            },
            f,
            indent=2,
        )
    print(f"results written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
