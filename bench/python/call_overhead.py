#!/usr/bin/env python3
"""bench/python/call_overhead.py: Python -> native call overhead of kffi against its anchors.

One run measures, side by side and interleaved, the same tiny kernels bound seven ways:

  kffi         a kernel library built with kffi-config, loaded with kffi.load_module
  tvm-ffi      the same kernels built with tvm-ffi-config (TVM_FFI_DLL_EXPORT_TYPED_FUNC),
               loaded with tvm_ffi.load_module
  nanobind     an extension module compiled here with nanobind's sources (nb::ndarray for tensors)
  pybind11     an extension module (py::array for NumPy, the __dlpack__ protocol for torch)
  torch.ops    a torch.library custom op with a C++ kernel (torch.utils.cpp_extension.load_inline);
               falls back to a Python-registered custom op when the C++ build fails
  torch+pyb11  the same torch extension's pybind11 functions taking at::Tensor (the classic
               "torch C++ extension" binding)
  python       a plain Python function with an empty body (the interpreter's own call floor)

Cases: no-op with 0 args; 3 ints; 1 str; 3 NumPy arrays; 3 torch CPU tensors; 3 torch CUDA
tensors with stream pickup (only when torch.cuda.is_available()). Every case runs twice: with the
GIL held during the native call and with it released (bindings whose policy is fixed are shown in
both rows and marked). Ratios are kffi / anchor measured in the same run. These rows are tuned
(kffi.torch's reader asked for up front, --torch-import); below them, the default-path rows of
default_path.py (kffi and tvm-ffi in a fresh process with an empty cache and no compiler, nothing
tuned), unless --no-default-path.

Method: each cell (case x binding x GIL mode) is warmed up, calibrated to ~--sample-ms per
sample, then sampled --reps times in a shuffled order per repetition (interleaved, so drift hits
all bindings alike); the median per-call time of the samples is reported. The clock is this
thread's CPU time by default (robust on a busy machine); --clock wall uses wall time, and the
JSON keeps both.

Process state: a process that has only ever had one thread gets glibc's single-thread mutexes
(plain stores), and every GIL release + re-take is ~17 ns cheaper than once any second thread
has existed (atomics from then on, for good). The main table is measured in the first state
(builds in a child process, BLAS pools pinned to one thread, CUDA cells last); the no-op rows are
then measured again in the second state and printed below the table.

Usage: python3 bench/python/call_overhead.py [--out build/bench_python.json] [--reps 21]
                                             [--sample-ms 6] [--clock cpu|wall]
                                             [--compare old.json] [--skip BINDING ...]
Native builds are cached in build/bench_cache/ keyed by a hash of source, flags and versions.
The script never fails on a missed goal; a binding that cannot be built is skipped and named.
"""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import argparse
import concurrent.futures
import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CACHE = ROOT / "build" / "bench_cache"
CXX = os.environ.get("CXX", "c++")
OPT = ["-O3", "-DNDEBUG"]

from call_overhead_build import (
    BINDINGS,
    CASES,
    DESCRIBE,
    FIXED,
    build_kffi,
    build_nanobind,
    build_pybind11,
    build_torch_ext,
    build_tvm,
    import_extension,
    log,
)
from call_overhead_report import (
    BLAS_VARS,
    check_stale_install,
    environment,
    gil_round_trip,
    measure_threaded_state,
    print_compare,
    print_table,
    print_threaded_state,
    run_benchmark,
    set_blas_threads,
    summarize,
)

# ---------------------------------------------------------------------------------------------
# Bindings and cases
# ---------------------------------------------------------------------------------------------


_PY_OPS = []  # keeps the Python-registered custom ops alive


def register_python_ops(torch, add):
    """torch.library.custom_op ops with empty Python kernels (when the C++ extension is out)."""
    ns = "kbench_py"
    ops = getattr(torch.ops, ns)
    if not hasattr(ops, "noop"):
        # Explicit schemas: this module's annotations are strings (from __future__ import).
        for name, schema, params in [
            ("noop", "() -> ()", ""),
            ("ints3", "(int a, int b, int c) -> ()", "a, b, c"),
            ("str1", "(str s) -> ()", "s"),
            ("tensors3", "(Tensor a, Tensor b, Tensor c) -> ()", "a, b, c"),
        ]:
            fn = eval(f"lambda {params}: None")
            _PY_OPS.append(
                torch.library.custom_op(f"{ns}::{name}", fn, mutates_args=(), schema=schema)
            )
    for case, fname in [
        ("noop", "noop"),
        ("ints3", "ints3"),
        ("str1", "str1"),
        ("torch3", "tensors3"),
        ("cuda3", "tensors3"),
    ]:
        add("torch.ops", case, FIXED, getattr(ops, fname).default)
    return "Python-registered (torch.library.custom_op)"


def cuda_case_args():
    import torch

    return tuple(torch.zeros(16, device="cuda") for _ in range(3))


def os_thread_count():
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return None


def selected_builders(args):
    builders = {
        "kffi": build_kffi,
        "tvm-ffi": build_tvm,
        "nanobind": build_nanobind,
        "pybind11": build_pybind11,
    }
    skip = set(args.skip or [])
    if args.torch_op != "python" and not args.no_torch_ext and "torch.ops" not in skip:
        builders["torch-ext"] = build_torch_ext
    return {k: v for k, v in builders.items() if k not in skip}


def build_all(args):
    """--build-only: compiles every selected binding concurrently (a thread per compiler
    process); errors are left for the measuring process to report."""
    for mod in ("kffi", "tvm_ffi", "nanobind"):  # import in this thread first
        try:
            importlib.import_module(mod)
        except ImportError as e:
            log(f"  ! cannot import {mod}: {e}")
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2)) as ex:
        for fut in [ex.submit(fn) for fn in selected_builders(args).values()]:
            try:
                fut.result()
            except Exception:  # noqa: S110 (failures are reported by the run itself)
                pass
    import torch  # asked here: initialising CUDA starts driver threads (see setup_bindings)

    print(json.dumps({"cuda_available": bool(torch.cuda.is_available())}))
    return 0


def setup_bindings(args):
    """Builds and loads every binding. Returns (funcs, skipped, info)

    funcs[(binding, case, gil)] = callable taking the case's args; gil is held/released/fixed.
    """
    import numpy as np
    import torch

    funcs, skipped, info = {}, {}, {}
    builders = selected_builders(args)
    skip = set(args.skip or [])
    t0 = time.perf_counter()
    # This process stays single-threaded until the CPU cells are measured (see
    # measure_threaded_state): the compiles run concurrently in a child process (build_all),
    # which also asks whether CUDA is there (initialising CUDA starts driver threads); here
    # every build is then a cache hit, made in this thread.
    child = subprocess.run(
        [sys.executable, __file__, "--build-only", *args.build_flags],
        text=True,
        stdout=subprocess.PIPE,
    )
    cuda_available = False
    if child.returncode != 0:
        log(f"  ! the build process exited with {child.returncode}; building here instead")
    else:
        cuda_available = json.loads(child.stdout.strip().splitlines()[-1])["cuda_available"]
    cuda = cuda_available and not args.no_cuda
    paths, errors = {}, {}
    for name, fn in builders.items():
        try:
            paths[name] = fn()
        except Exception as e:
            errors[name] = f"{type(e).__name__}: {str(e).strip()[:400]}"
    info["build_seconds"] = round(time.perf_counter() - t0, 2)
    for name, err in errors.items():
        log(f"  ! {name}: {err}")

    xs_np = tuple(np.zeros(16, np.float32) for _ in range(3))
    xs_t = tuple(torch.zeros(16) for _ in range(3))
    case_args = {
        "noop": (),
        "ints3": (1, 2, 3),
        "str1": ("hello",),
        "numpy3": xs_np,
        "torch3": xs_t,
    }
    if cuda:
        case_args["cuda3"] = (None,) * 3  # the tensors: cuda_case_args(), when the cells run
    exchange_cap = getattr(torch.Tensor, "__dlpack_c_exchange_api__", None)
    info["torch_has_dlpack_c_exchange_api"] = exchange_cap is not None

    def add(binding, case, gil, fn):
        if case in case_args:
            funcs[(binding, case, gil)] = fn

    # kffi
    if "kffi" in paths:
        import kffi

        mod = kffi.load_module(paths["kffi"])
        for case, fname in [
            ("noop", "noop"),
            ("ints3", "ints3"),
            ("str1", "str1"),
            ("numpy3", "tensors3"),
            ("torch3", "tensors3"),
            ("cuda3", "tensors3_stream"),
        ]:
            held = mod.get_function(fname)
            held.release_gil = False
            rel = mod.get_function(fname)
            rel.release_gil = True
            add("kffi", case, "held", held)
            add("kffi", case, "released", rel)
        torch_import = "exchange"
        if args.torch_import == "kffi.torch":
            import kffi.torch

            if kffi.torch.fast_tensor_import():
                torch_import = "kffi.torch"
            else:
                log("  ! kffi.torch's tensor import is unavailable; kffi uses the exchange API")
        info["kffi"] = {
            "version": kffi.__version__,
            "path": os.path.dirname(kffi.__file__),
            "default_release_gil": kffi.get_default_release_gil(),
            "torch_import": torch_import,
        }
    elif "kffi" in errors:
        skipped["kffi"] = errors["kffi"]
    # tvm-ffi
    if "tvm-ffi" in paths:
        import tvm_ffi

        mod = tvm_ffi.load_module(str(paths["tvm-ffi"]))
        for case, fname in [
            ("noop", "noop"),
            ("ints3", "ints3"),
            ("str1", "str1"),
            ("numpy3", "tensors3"),
            ("torch3", "tensors3"),
            ("cuda3", "tensors3_stream"),
        ]:
            held = mod.get_function(fname)
            held.release_gil = False
            rel = mod.get_function(fname)
            info["tvm_ffi_default_release_gil"] = bool(rel.release_gil)
            rel.release_gil = True  # its default (TVM_FFI_RELEASE_GIL_BY_DEFAULT=1), made sure
            add("tvm-ffi", case, "held", held)
            add("tvm-ffi", case, "released", rel)
        info["tvm_ffi"] = tvm_ffi.__version__
    elif "tvm-ffi" in errors:
        skipped["tvm-ffi"] = errors["tvm-ffi"]
    # nanobind and pybind11: each module has `<fn>` (GIL held) and `<fn>_nogil` (released)
    ext_cases = {
        "nanobind": (
            "kbench_nb",
            {"numpy3": "tensors3", "torch3": "tensors3", "cuda3": "tensors3_stream"},
        ),
        "pybind11": (
            "kbench_pb",
            {"numpy3": "arrays3", "torch3": "dlpack3", "cuda3": "dlpack3_stream"},
        ),
    }
    for binding, (module_name, tensor_fns) in ext_cases.items():
        if binding not in paths:
            if binding in errors:
                skipped[binding] = errors[binding]
            continue
        m = import_extension(module_name, paths[binding])
        if exchange_cap is not None:
            m.set_exchange_api(exchange_cap)
        fns = {"noop": "noop", "ints3": "ints3", "str1": "str1", **tensor_fns}
        for case, fname in fns.items():
            add(binding, case, "held", getattr(m, fname))
            add(binding, case, "released", getattr(m, fname + "_nogil"))
    # torch extension: torch.ops + pybind11(at::Tensor)
    torch_op_kind = None
    if "torch-ext" in paths:
        try:
            torch.ops.load_library(str(paths["torch-ext"]))
            m = import_extension(paths["torch-ext"].name.split(".")[0], paths["torch-ext"])
            ops = torch.ops.kbench
            for case, fname in [
                ("noop", "noop"),
                ("ints3", "ints3"),
                ("str1", "str1"),
                ("torch3", "tensors3"),
                ("cuda3", "tensors3_stream"),
            ]:
                add("torch.ops", case, FIXED, getattr(ops, fname).default)
                add("torch+pyb11", case, "held", getattr(m, fname))
                add("torch+pyb11", case, "released", getattr(m, fname + "_nogil"))
            torch_op_kind = "C++ kernel (load_inline, TORCH_LIBRARY)"
        except Exception as e:
            errors["torch-ext"] = f"{type(e).__name__}: {e}"
    if "torch-ext" in errors:
        skipped["torch+pyb11"] = errors["torch-ext"]
        log(
            f"  ! torch C++ extension unavailable ({errors['torch-ext'][:200]}); "
            "using a Python-registered custom op"
        )
    if torch_op_kind is None and args.torch_op != "none" and "torch.ops" not in skip:
        try:
            torch_op_kind = register_python_ops(torch, add)
        except Exception as e:
            skipped["torch.ops"] = f"{type(e).__name__}: {e}"
    info["torch_op_kind"] = torch_op_kind

    # plain Python
    def py0():
        pass

    def py1(a):
        pass

    def py3(a, b, c):
        pass

    for case in case_args:
        add("python", case, FIXED, {0: py0, 1: py1, 3: py3}[len(case_args[case])])
    info["cuda"] = cuda
    return funcs, case_args, skipped, info


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=str(ROOT / "build" / "bench_python.json"))
    ap.add_argument("--reps", type=int, default=21, help="timing samples per cell (median)")
    ap.add_argument("--sample-ms", type=float, default=6.0, help="target duration of one sample")
    ap.add_argument(
        "--torch-op",
        choices=["cpp", "python", "none"],
        default="cpp",
        help="torch custom op kernel: C++ (fallback python), python, or none",
    )
    ap.add_argument(
        "--no-torch-ext",
        action="store_true",
        help="skip the torch C++ extension (torch.ops C++ kernel, torch+pyb11)",
    )
    ap.add_argument("--no-cuda", action="store_true", help="skip the CUDA case")
    ap.add_argument(
        "--torch-import",
        choices=["kffi.torch", "exchange"],
        default="kffi.torch",
        help="how kffi reads torch tensors: kffi.torch's direct read (kffi.torch."
        "fast_tensor_import, on where kffi.torch is set up) or torch's DLPack exchange API",
    )
    ap.add_argument(
        "--skip",
        nargs="*",
        choices=["kffi", "tvm-ffi", "nanobind", "pybind11", "torch.ops"],
        help="bindings to leave out",
    )
    ap.add_argument(
        "--clock",
        choices=["cpu", "wall"],
        default="cpu",
        help="what median_ns (table, ratios, goals) uses: this thread's CPU time "
        "(robust on a shared machine) or wall time; the JSON keeps both",
    )
    ap.add_argument("--compare", help="a previous JSON to compare kffi's medians with")
    ap.add_argument(
        "--no-default-path",
        action="store_true",
        help="skip the default-path rows (fresh processes, empty cache, nothing tuned)",
    )
    ap.add_argument(
        "--blas-threads",
        choices=["1", "default"],
        default="1",
        help="1 (default): BLAS/OpenMP pools of NumPy and torch get one thread, set "
        "before they load; default: leave them as the environment says",
    )
    ap.add_argument("--build-only", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    set_blas_threads(args.blas_threads)
    args.build_flags = [
        "--torch-op",
        args.torch_op,
        *(["--no-torch-ext"] if args.no_torch_ext else []),
        *(["--skip", *args.skip] if args.skip else []),
    ]
    if args.build_only:
        return build_all(args)

    t_start = time.perf_counter()
    log("building / loading bindings (cached in build/bench_cache) ...")
    check_stale_install()
    funcs, case_args, skipped, info = setup_bindings(args)
    log(f"measuring {len(funcs)} cells x {args.reps} samples ...")
    # CPU cells first, while this process has only ever had one thread; then the no-op rows in
    # the multi-threaded state; then the CUDA cells (CUDA starts driver threads).
    info["os_threads_at_cpu_cells"] = os_thread_count()
    cpu_funcs = {k: v for k, v in funcs.items() if k[1] != "cuda3"}
    cells, overhead = run_benchmark(cpu_funcs, case_args, args)
    threaded = measure_threaded_state(funcs, case_args, args)
    cuda_funcs = {k: v for k, v in funcs.items() if k[1] == "cuda3"}
    if cuda_funcs:
        case_args["cuda3"] = cuda_case_args()
        cells += run_benchmark(cuda_funcs, case_args, args)[0]
    results, ratios, goals = summarize(cells, args.clock)
    print_table(results, ratios, goals, info, overhead, skipped, args.clock)
    print_threaded_state(threaded)
    default = None
    if not args.no_default_path:
        # What a user gets untuned, beside the tuned rows above (bench/python/default_path.py):
        # run after them, so its processes do not share this one's threads.
        import default_path

        default = default_path.percall_rows(max(9, args.reps // 2), info.get("cuda", False))
        default_path.print_percall(default)
    if args.compare:
        print_compare(results, args.compare)
    doc = {
        "schema": 1,
        "what": "Python call overhead: median ns per call over interleaved timing samples",
        "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "settings": {
            "reps": args.reps,
            "sample_ms": args.sample_ms,
            "opt": OPT,
            "clock": args.clock,
            "blas_threads": args.blas_threads,
            "blas_env": {v: os.environ.get(v) for v in BLAS_VARS},
        },
        "environment": environment(info),
        "loop_overhead": overhead,
        "bindings": {b: DESCRIBE[b] for b in BINDINGS if b in DESCRIBE},
        "cases": dict(CASES),
        "results": results,
        "ratios_kffi_over": ratios,
        "goals": goals,
        "gil_round_trip_ns": gil_round_trip(results),
        "multi_threaded_process": {k: v for k, v in threaded.items() if k != "results_full"},
        "default_path": default,
        "skipped": skipped,
        "total_seconds": round(time.perf_counter() - t_start, 1),
    }
    if str(info.get("torch_op_kind") or "").startswith("Python"):
        doc["bindings"]["torch.ops"] = DESCRIBE["torch.ops(py)"]
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=1))
    print(f"\nJSON: {out}  (total {doc['total_seconds']}s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
