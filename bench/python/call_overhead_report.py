"""bench/python/call_overhead_report.py: call_overhead.py's timing (interleaved, calibrated
samples per cell) and report: medians, ratios against the anchors and their goals, the table,
the threaded-state rows and the environment in the JSON."""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import gc
import itertools
import json
import os
import platform
import random
import statistics
import sys
import threading
import time
from pathlib import Path

from call_overhead_build import (
    BINDINGS,
    CASES,
    DESCRIBE,
    FIXED,
    GILS,
    ROOT,
    cxx_version,
    log,
    pybind11_include,
)

# ---------------------------------------------------------------------------------------------
# Timing
# ---------------------------------------------------------------------------------------------


class CallTimer:
    """Times n calls of fn(*args) in a loop where fn and the arguments are locals (LOAD_FAST),
    like timeit but without a global lookup per call."""

    def __init__(self, fn, args):
        names = [f"a{i}" for i in range(len(args))]
        params = "".join(f", {n}" for n in names)
        src = (
            f"def inner(_it, _timer, _f{params}):\n"
            f"    _t0 = _timer()\n"
            f"    for _ in _it:\n"
            f"        _f({', '.join(names)})\n"
            f"    return _timer() - _t0\n"
        )
        ns = {}
        exec(src, ns)  # noqa: S102 - our own template
        self._inner, self._fn, self._args = ns["inner"], fn, tuple(args)

    def timeit(self, number, clock=time.perf_counter):
        return self._inner(itertools.repeat(None, number), clock, self._fn, *self._args)


def make_timer(fn, args):
    return CallTimer(fn, args)


def calibrate(timer, sample_s):
    n = 64
    while True:
        t = timer.timeit(n)
        if t > 0.2 * sample_s or n >= 1 << 24:
            return max(64, int(n * sample_s / max(t, 1e-9)))
        n *= 4


def run_benchmark(funcs, case_args, args):
    sample_s = args.sample_ms / 1000.0
    cells = []
    for (binding, case, gil), fn in funcs.items():
        try:
            fn(*case_args[case])  # smoke + first-call setup
        except Exception as e:
            log(f"  ! {binding}/{case}: call failed: {type(e).__name__}: {e}")
            continue
        timer = make_timer(fn, case_args[case])
        timer.timeit(2000)  # warm-up
        cells.append(
            {
                "binding": binding,
                "case": case,
                "gil": gil,
                "timer": timer,
                "number": calibrate(timer, sample_s),
                "samples_cpu": [],
                "samples_wall": [],
            }
        )
    rng = random.Random(1234)
    gc_was = gc.isenabled()
    gc.disable()
    try:
        for _rep in range(args.reps):
            order = list(range(len(cells)))
            rng.shuffle(order)
            for i in order:
                c = cells[i]
                # Thread CPU time and wall time of the same loop: CPU time does not count the
                # time this thread was preempted (a shared or busy machine), wall time does.
                w0 = time.perf_counter()
                cpu = c["timer"].timeit(c["number"], time.thread_time)
                wall = time.perf_counter() - w0
                c["samples_cpu"].append(cpu / c["number"] * 1e9)
                c["samples_wall"].append(wall / c["number"] * 1e9)
    finally:
        if gc_was:
            gc.enable()
    # The timing loop plus one of the cheapest C calls there is (an empty list's bound clear(),
    # METH_NOARGS): a floor under every binding's number.
    empty = CallTimer([].clear, ())
    floor = statistics.median(
        empty.timeit(200_000, time.thread_time if args.clock == "cpu" else time.perf_counter)
        / 200_000
        * 1e9
        for _ in range(9)
    )
    overhead = {"loop_plus_c_call_ns": round(floor, 2)}
    return cells, overhead


# ---------------------------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------------------------

GOALS = [
    # (name, case, anchor, max ratio kffi/anchor)
    ("0 args vs nanobind", "noop", "nanobind", 1.0),
    ("0 args vs tvm-ffi", "noop", "tvm-ffi", 0.65),
    ("3 ints vs nanobind", "ints3", "nanobind", 1.0),
    ("1 str vs nanobind", "str1", "nanobind", 1.0),
    ("3 torch tensors vs tvm-ffi", "torch3", "tvm-ffi", 0.6),
    ("3 NumPy arrays vs tvm-ffi", "numpy3", "tvm-ffi", 0.8),
]


def median_of(results, binding, case, gil):
    r = results.get(case, {}).get(gil, {}).get(binding)
    if r is None:
        r = results.get(case, {}).get(FIXED, {}).get(binding)
    return None if r is None else r["median_ns"]


def summarize(cells, clock):
    results = {}
    for c in cells:
        s = c["samples_" + clock]
        q = statistics.quantiles(s, n=4) if len(s) >= 2 else [s[0], s[0], s[0]]
        results.setdefault(c["case"], {}).setdefault(c["gil"], {})[c["binding"]] = {
            "median_ns": round(statistics.median(s), 2),
            "min_ns": round(min(s), 2),
            "iqr_ns": round(q[2] - q[0], 2),
            "median_cpu_ns": round(statistics.median(c["samples_cpu"]), 2),
            "median_wall_ns": round(statistics.median(c["samples_wall"]), 2),
            "calls_per_sample": c["number"],
            "samples_cpu_ns": [round(x, 2) for x in c["samples_cpu"]],
            "samples_wall_ns": [round(x, 2) for x in c["samples_wall"]],
        }
    ratios = {}
    for case, _ in CASES:
        for gil in GILS:
            k = median_of(results, "kffi", case, gil)
            if k is None:
                continue
            for b in BINDINGS[1:]:
                o = median_of(results, b, case, gil)
                if o:
                    ratios.setdefault(case, {}).setdefault(gil, {})[b] = round(k / o, 3)
    goals = []
    for name, case, anchor, limit in GOALS:
        for gil in GILS:
            r = ratios.get(case, {}).get(gil, {}).get(anchor)
            goals.append(
                {
                    "goal": name,
                    "case": case,
                    "gil": gil,
                    "anchor": anchor,
                    "max_ratio": limit,
                    "ratio": r,
                    "status": "n/a" if r is None else ("PASS" if r <= limit else "MISS"),
                }
            )
    return results, ratios, goals


def gil_round_trip(results):
    """What releasing and re-taking the GIL adds to a no-op call, per binding (released - held),
    and what the 0-args goal against tvm-ffi leaves kffi when both release: the evidence for
    whether that goal is reachable at all on this interpreter and machine."""
    out = {}
    for b in ("kffi", "tvm-ffi", "nanobind", "pybind11"):
        held = median_of(results, b, "noop", "held")
        rel = median_of(results, b, "noop", "released")
        if held is not None and rel is not None:
            out[b] = round(rel - held, 2)
    tvm_rel = median_of(results, "tvm-ffi", "noop", "released")
    k_held = median_of(results, "kffi", "noop", "held")
    if tvm_rel is not None and k_held is not None:
        out["budget_for_release_at_0.65x_tvm"] = round(0.65 * tvm_rel - k_held, 2)
    return out


def contend_gil_once(seconds=0.05):
    """Runs a second thread that waits for the GIL while this one runs, then ends it."""
    stop = time.perf_counter() + seconds

    def spin():
        while time.perf_counter() < stop:
            pass

    t = threading.Thread(target=spin)
    t.start()
    spin()
    t.join()


def measure_threaded_state(funcs, case_args, args):
    """The no-op rows again once this process has had a second thread.

    A process that has only ever had one thread gets glibc's single-thread fast path: its mutex
    lock and unlock are plain stores, and CPython's GIL release + re-take (two mutexes, a
    condition variable) costs ~22 ns (dev VM, Python 3.11) / ~33 ns (H200 host, 3.12). From the
    first second thread on (a thread pool, a BLAS pool, CUDA's driver threads) they are atomic
    read-modify-writes for good, even after that thread ends: ~40 / ~46 ns, for every binding
    that releases the GIL. The main table is measured in the first state (builds run in a child
    process, CUDA cells last); these rows show the second, so both are on record."""
    contend_gil_once()
    noop = {k: v for k, v in funcs.items() if k[1] == "noop"}
    cells, _ = run_benchmark(noop, case_args, args)
    results, ratios, _ = summarize(cells, args.clock)
    return {
        "results": {
            g: {b: r["median_ns"] for b, r in v.items()} for g, v in results.get("noop", {}).items()
        },
        "ratios_kffi_over": ratios.get("noop", {}),
        "gil_round_trip_ns": gil_round_trip(results),
        "results_full": results,
    }


def print_threaded_state(threaded):
    results = threaded["results_full"]
    print(
        "\nno-op, 0 args once the process has had a second thread (glibc's mutexes then use "
        "atomics; same goals, informational):"
    )
    for gil in GILS:
        k = median_of(results, "kffi", "noop", gil)
        if k is None:
            continue
        parts = [f"kffi {fmt_ns(k)}"]
        for b in ("tvm-ffi", "nanobind", "pybind11"):
            o = median_of(results, b, "noop", gil)
            if o:
                parts.append(f"{b} {fmt_ns(o)} ({k / o:.2f}x)")
        print(f"  GIL {gil:<8} " + ", ".join(parts))
    rt = threaded["gil_round_trip_ns"]
    if rt:
        print(f"  GIL release + re-take (released - held, ns): {fmt_round_trip(rt)}")


def fmt_round_trip(rt):
    """The per-binding entries of gil_round_trip() as "kffi 23.1, tvm-ffi 22.4, ..."."""
    return ", ".join(f"{b} {v:.1f}" for b, v in rt.items() if not b.startswith("budget"))


def fmt_ns(x):
    return "-" if x is None else (f"{x:.0f}" if x >= 100 else f"{x:.1f}")


def print_table(results, ratios, goals, info, overhead, skipped, clock):
    present = [b for b in BINDINGS if any(b in g for c in results.values() for g in c.values())]
    op_kind = "py" if str(info.get("torch_op_kind", "")).startswith("Python") else "C++"
    hdr = ["case", "GIL", "kffi ns"] + [
        f"torch.ops[{op_kind}]" if b == "torch.ops" else b for b in present if b != "kffi"
    ]
    rows = []
    for case, label in CASES:
        if case not in results:
            continue
        for gil in GILS:
            k = median_of(results, "kffi", case, gil)
            row = [label, gil, fmt_ns(k)]
            for b in present:
                if b == "kffi":
                    continue
                o = median_of(results, b, case, gil)
                if o is None:
                    row.append("n/a")
                    continue
                fixed = FIXED in results[case] and b in results[case][FIXED]
                r = ratios.get(case, {}).get(gil, {}).get(b)
                cell = f"{fmt_ns(o)}{'*' if fixed else ''}"
                if r is not None:
                    cell += f" ({r:.2f}x)"
                row.append(cell)
            rows.append(row)
    widths = [max(len(str(r[i])) for r in rows + [hdr]) for i in range(len(hdr))]

    def line(r):
        return "  ".join(
            str(v).ljust(w) if i < 2 else str(v).rjust(w) for i, (v, w) in enumerate(zip(r, widths))
        )

    print()
    print(
        f"Python call overhead, median ns per call ({clock} clock; ratio = kffi / that binding, "
        "<1 = kffi faster)"
    )
    print(line(hdr))
    print("  ".join("-" * w for w in widths))
    prev = None
    for r in rows:
        if prev is not None and r[0] != prev:
            pass
        print(line(r))
        prev = r[0]
    print()
    print(
        "* GIL policy fixed by the binding (measured once, shown in both rows): torch.ops "
        "always releases the GIL; python never does."
    )
    print(
        f"torch.ops kernel: {info.get('torch_op_kind')}; "
        f"floor (timing loop + [].clear() call): {overhead['loop_plus_c_call_ns']:.1f} ns, "
        "included in every number."
    )
    blas = {v: os.environ.get(v) for v in BLAS_VARS}
    print(
        "BLAS/OpenMP pools: "
        + ", ".join(f"{k}={v}" for k, v in blas.items())
        + f" (a pool of several threads makes the process multi-threaded; see --blas-threads); "
        f"OS threads while the CPU cells ran: {info.get('os_threads_at_cpu_cells')}"
    )
    for b, why in skipped.items():
        print(f"skipped {b}: {why}")
    print()
    print(
        "What each binding does (the same work per case: nothing / sum 3 int64 / length of a "
        "str / data pointer + ndim of 3 tensors, + the current stream for CUDA):"
    )
    import textwrap

    for b in present:
        d = DESCRIBE["torch.ops(py)"] if b == "torch.ops" and op_kind == "py" else DESCRIBE[b]
        print(
            textwrap.fill(
                d, width=100, initial_indent=f"  {b + ':':<13}", subsequent_indent=" " * 15
            )
        )
    print()
    print("Goals (informational):")
    for g in goals:
        r = "-" if g["ratio"] is None else f"{g['ratio']:.2f}x"
        print(
            f"  {g['status']:4}  {g['goal']:<28} GIL {g['gil']:<8} kffi/{g['anchor']} = {r} "
            f"(goal <= {g['max_ratio']:g}x)"
        )
    rt = gil_round_trip(results)
    if rt:
        print(
            f"\nGIL release + re-take on a no-op call (released - held, ns): {fmt_round_trip(rt)}"
        )
        if "budget_for_release_at_0.65x_tvm" in rt:
            print(
                f"  0 args <= 0.65x tvm-ffi with both releasing leaves kffi "
                f"{rt['budget_for_release_at_0.65x_tvm']:.1f} ns for the release itself "
                f"(0.65 x tvm-ffi released - kffi held)"
            )


def print_compare(results, old_path):
    try:
        old = json.loads(Path(old_path).read_text())["results"]
    except (OSError, ValueError, KeyError) as e:
        log(f"cannot read {old_path}: {e}")
        return
    print()
    print(f"kffi vs {old_path} (median ns: old -> new)")
    for case, _ in CASES:
        for gil in GILS:
            n = median_of(results, "kffi", case, gil)
            o = median_of(old, "kffi", case, gil)
            if n is None or o is None:
                continue
            print(f"  {case:<8} {gil:<9} {o:8.1f} -> {n:8.1f}  ({(n / o - 1) * 100:+.1f}%)")


def environment(info):
    import numpy
    import torch

    env = {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
        "cxx": cxx_version(),
        "numpy": numpy.__version__,
        "torch": torch.__version__,
    }
    try:
        with open("/proc/cpuinfo") as f:
            for ln in f:
                if ln.startswith("model name"):
                    env["cpu"] = ln.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        env["nanobind"] = __import__("nanobind").__version__
    except ImportError:
        pass
    try:
        env["pybind11"] = pybind11_include()[1]
    except Exception:  # noqa: S110 (pybind11 is optional: its version is left out)
        pass
    env.update({k: v for k, v in info.items()})
    return env


def check_stale_install():
    """Warns when python/src is newer than the installed kffi extension (bench measures that)."""
    try:
        import kffi

        core = Path(kffi._core.__file__)
        newest = max((p.stat().st_mtime for p in (ROOT / "python" / "src").glob("*")), default=0)
        if newest > core.stat().st_mtime:
            log(
                "  ! python/src is newer than the installed kffi._core: reinstall "
                "(pip install --no-build-isolation .) to measure the current sources"
            )
    except Exception:  # noqa: S110 (the staleness warning is best effort)
        pass


BLAS_VARS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def set_blas_threads(mode):
    """Pins the BLAS/OpenMP thread pools that NumPy and torch start at import to one thread.

    Why: a pool of more than one thread makes this process multi-threaded from the import on,
    and then every GIL release + re-take costs ~17 ns more for every binding (glibc's mutexes
    switch from plain stores to atomics; see measure_threaded_state). The call-overhead rows are
    measured single-threaded by default; --blas-threads default keeps the pools (variables the
    caller set are left alone either way)."""
    if mode == "default":
        return
    if "numpy" in sys.modules or "torch" in sys.modules:
        log("warning: NumPy/torch already imported: --blas-threads 1 has no effect")
    for var in BLAS_VARS:
        os.environ.setdefault(var, "1")
