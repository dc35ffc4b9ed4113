#!/usr/bin/env python3
"""bench/python/tvm_bridge.py: the cost of calling a TVM-FFI library through kffi (issue 9).

A library built with apache-tvm-ffi's headers, bench/python/tvm_bridge_kernels.cc (`noop()`,
`three_tensors(a, b, c)` of TensorView parameters and `three_tensors_owned(a, b, c)` of
`ffi::Tensor` parameters, TVM_FFI_DLL_EXPORT_TYPED_FUNC exports with empty bodies), is called
three ways in one process, interleaved:

  bridged   kffi.load_module of the library (bound to the loaded apache-tvm-ffi, as it is in any
            process that imported tvm_ffi): kffi's Python call, the bridge's wrapper (environment
            copy, error move), the export
  tvm_ffi   tvm_ffi.load_module of the same file: tvm_ffi's Python call, the export
  native    a kffi export of the same signature (KFFI_EXPORT), the anchor of "within 10%"

and, in a child process that never imports tvm_ffi, the library bound to kffi's own shim against
the native export again ("bridged (shim)"). Cases: no arguments; three NumPy arrays; three torch
CPU tensors; the same for `ffi::Tensor` parameters ("(Tensor)": kffi makes an owning Tensor per
argument, as tvm_ffi does for every tensor), and for the TensorView export of the library built
without metadata ("(no metadata)": owning Tensors too, kffi cannot tell); and "noop (env reader)": the no-op of tests/tvm_libs/tvm_testlib.cc, a library that
imports TVMFFIEnvGetStream and TVMFFIEnvTensorAlloc, whose allocator imports the bridge redirects
to its forwarders at load, so that each call marks the thread (the cost a library that can
allocate pays; one that cannot, pays nothing for it). Where CUDA exists, a GPU row: the CuTe DSL add_one (tests/cute_dsl) with two CUDA
tensors, call plus launch, through kffi and through tvm_ffi (KFFI_CUTE_ARTIFACTS or a local
nvidia-cutlass-dsl provides the kernel).

Goals: bridged / tvm_ffi <= 1.0; bridged / native <= 1.10. Times are medians of interleaved
samples of thread CPU time per call; ratios are medians of the per-round ratios (each round samples
every cell once, shuffled), so that a machine's drift between rounds cancels. Prints a table and writes JSON (--out); never fails on a missed goal.

Usage: python3 bench/python/tvm_bridge.py [--out build/bench_tvm_bridge.json] [--reps 15]
                                          [--sample-ms 5]
"""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import argparse
import gc
import itertools
import json
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "python" / "support"))

import tvm_libs

NATIVE_SRC = r"""
#include <kffi/export.h>
#include <kffi/tensor.h>
KFFI_EXPORT(noop, []() {});
KFFI_EXPORT(three_tensors,
            [](kffi::ConstTensorView, kffi::ConstTensorView, kffi::TensorView) {});
"""


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def build_native() -> Path:
    # kffi.cpp, the one way to build a kffi library, at the TVM libraries' release flags.
    import kffi.cpp

    return Path(
        kffi.cpp.build_inline(
            "tvm_bridge_native",
            cpp_sources=NATIVE_SRC,
            extra_cflags=["-O3", "-DNDEBUG"],
            quiet=True,
        )
    )


class CallTimer:
    """n calls of fn(*args) with fn and the arguments as locals (no global lookup per call)."""

    def __init__(self, fn, args):
        names = [f"a{i}" for i in range(len(args))]
        params = "".join(f", {n}" for n in names)
        src = (
            f"def inner(_it, _timer, _f{params}):\n    _t0 = _timer()\n    for _ in _it:\n"
            f"        _f({', '.join(names)})\n    return _timer() - _t0\n"
        )
        ns = {}
        exec(src, ns)  # noqa: S102 - our own template
        self._inner, self._fn, self._args = ns["inner"], fn, tuple(args)

    def timeit(self, number, clock=time.thread_time):
        return self._inner(itertools.repeat(None, number), clock, self._fn, *self._args)


def measure(cells: dict, reps: int, sample_ms: float) -> dict:
    """{key: [ns per call, one sample per round]}; cells: {key: (fn, args)}; every round samples
    each cell once, in a shuffled order, so that samples of one round pair up (paired_ratio)."""
    timers = {}
    for key, (fn, args) in cells.items():
        fn(*args)
        t = CallTimer(fn, args)
        t.timeit(2000)
        n = 64
        while t.timeit(n) < 0.2 * sample_ms / 1000 and n < 1 << 24:
            n *= 4
        timers[key] = (t, max(64, int(n * (sample_ms / 1000) / max(t.timeit(n), 1e-9))))
    samples = {k: [] for k in cells}
    rng = random.Random(7)
    gc.disable()
    try:
        for _ in range(reps):
            keys = list(cells)
            rng.shuffle(keys)
            for k in keys:
                t, n = timers[k]
                samples[k].append(t.timeit(n) / n * 1e9)
    finally:
        gc.enable()
    return samples


def paired_ratio(a: list | None, b: list | None) -> float | None:
    """The median over rounds of a/b: drift of the machine between rounds cancels out."""
    if not a or not b or len(a) != len(b):
        return None
    return statistics.median(x / y for x, y in zip(a, b))


def case_args(np, torch):
    """{case: (export, arguments, export of the native anchor)}."""
    cases = {"noop": ("noop", (), "noop")}
    arrays = tuple(np.zeros(16, np.float32) for _ in range(3))
    cases["numpy3"] = ("three_tensors", arrays, "three_tensors")
    cases["numpy3 (Tensor)"] = ("three_tensors_owned", arrays, "three_tensors")
    if torch is not None:
        tensors = tuple(torch.zeros(16) for _ in range(3))
        cases["torch3"] = ("three_tensors", tensors, "three_tensors")
        cases["torch3 (Tensor)"] = ("three_tensors_owned", tensors, "three_tensors")
    return cases


def nometa_cases(np, torch):
    """The TensorView export of the library built without metadata."""
    cases = {"numpy3 (no metadata)": ("three_tensors", case_args(np, torch)["numpy3"][1])}
    if torch is not None:
        cases["torch3 (no metadata)"] = ("three_tensors", case_args(np, torch)["torch3"][1])
    return cases


def run_in_process(lib: Path, nometa_lib: Path, env_lib: Path, native: Path, args) -> dict:
    import numpy as np

    try:
        import torch
    except ImportError:
        torch = None
    import kffi
    import tvm_ffi

    bridged = kffi.load_module(lib)
    theirs = tvm_ffi.load_module(str(lib))
    ours = kffi.load_module(native)
    cells = {}
    for case, (fname, a, anchor) in case_args(np, torch).items():
        cells[("bridged", case)] = (bridged[fname], a)
        cells[("tvm_ffi", case)] = (getattr(theirs, fname), a)
        cells[("native", case)] = (ours[anchor], a)
    nometa = kffi.load_module(nometa_lib)
    theirs_nometa = tvm_ffi.load_module(str(nometa_lib))
    for case, (fname, a) in nometa_cases(np, torch).items():
        cells[("bridged", case)] = (nometa[fname], a)
        cells[("tvm_ffi", case)] = (getattr(theirs_nometa, fname), a)
        cells[("native", case)] = (ours[fname], a)
    env_reader = kffi.load_module(env_lib)
    cells[("bridged", "noop (env reader)")] = (env_reader["noop"], ())
    cells[("tvm_ffi", "noop (env reader)")] = (tvm_ffi.load_module(str(env_lib)).noop, ())
    cells[("native", "noop (env reader)")] = (ours["noop"], ())
    return measure(cells, args.reps, args.sample_ms)


CHILD = r"""
import json, sys
sys.path.insert(0, {bench!r})
import tvm_bridge as b
import numpy as np
try:
    import torch
except ImportError:
    torch = None
import kffi, tvm_libs
shim = kffi.load_module({lib!r})
shim_nometa = kffi.load_module({nometa_lib!r})
ours = kffi.load_module({native!r})
cells = {{}}
for case, (fname, a, anchor) in b.case_args(np, torch).items():
    cells[("bridged (shim)", case)] = (shim[fname], a)
    cells[("native", case)] = (ours[anchor], a)
for case, (fname, a) in b.nometa_cases(np, torch).items():
    cells[("bridged (shim)", case)] = (shim_nometa[fname], a)
    cells[("native", case)] = (ours[fname], a)
res = b.measure(cells, {reps}, {sample_ms})
print(json.dumps({{"mapped": tvm_libs.libtvm_ffi_mapped(),
                  "results": [[k[0], k[1], v] for k, v in res.items()]}}))
"""


def run_shim_child(lib: Path, nometa_lib: Path, native: Path, args) -> dict:
    code = CHILD.format(
        bench=str(Path(__file__).parent),
        lib=str(lib),
        nometa_lib=str(nometa_lib),
        native=str(native),
        reps=args.reps,
        sample_ms=args.sample_ms,
    )
    proc = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True)
    if proc.returncode != 0:
        log(proc.stderr)
        return {}
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    if out["mapped"]:
        log("! the shim child mapped libtvm_ffi: its rows are not the shim's")
    return {(b, c): v for b, c, v in out["results"]}


def run_gpu_row(args) -> dict:
    try:
        import torch
    except ImportError:
        return {}
    if not torch.cuda.is_available():
        return {}
    folder = os.environ.get("KFFI_CUTE_ARTIFACTS")
    if not folder:
        import importlib.util

        if importlib.util.find_spec("cutlass") is None:
            log("GPU row skipped: no KFFI_CUTE_ARTIFACTS and no nvidia-cutlass-dsl")
            return {}
        folder = str(ROOT / "build" / "bench_cache" / "cute")
        subprocess.run(
            [sys.executable, str(ROOT / "tests" / "cute_dsl" / "build_kernels.py"), folder],
            check=True,
            capture_output=True,
        )
    import kffi
    import tvm_ffi

    path = os.path.join(folder, "add_one.so")
    ours = kffi.load_module(path)["add_one"]
    theirs = tvm_ffi.load_module(path)["add_one"]
    a = torch.arange(1024, dtype=torch.float32, device="cuda")
    b = torch.empty_like(a)
    res = measure(
        {
            ("bridged", "cute_add_one_cuda2"): (ours, (a, b)),
            ("tvm_ffi", "cute_add_one_cuda2"): (theirs, (a, b)),
        },
        args.reps,
        args.sample_ms,
    )
    torch.cuda.synchronize()
    return res


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=str(ROOT / "build" / "bench_tvm_bridge.json"))
    p.add_argument("--reps", type=int, default=15)
    p.add_argument("--sample-ms", type=float, default=5.0)
    args = p.parse_args()
    if tvm_libs.tvm_ffi_dir() is None:
        log("apache-tvm-ffi is not installed: nothing to compare")
        return 0
    # The same compiler flags as the native anchor (build_native), so that the rows compare the
    # bridge, not two optimisation levels of the exports' own code.
    lib = tvm_libs.build(
        "tvm_bridge_kernels",
        linked=False,
        source=Path(__file__).with_name("tvm_bridge_kernels.cc"),
        release=True,
    )
    nometa_lib = tvm_libs.build(
        "tvm_bridge_kernels",
        linked=False,
        source=Path(__file__).with_name("tvm_bridge_kernels.cc"),
        release=True,
        metadata=False,
    )
    env_lib = tvm_libs.build("tvm_testlib", linked=False, release=True)
    native = build_native()
    log("shim child ...")
    shim = run_shim_child(lib, nometa_lib, native, args)
    log("in process ...")
    results = run_in_process(lib, nometa_lib, env_lib, native, args)
    results.update(run_gpu_row(args))

    rows = []
    cases = sorted({c for _, c in results} | {c for _, c in shim})
    print(
        f"{'case':<22}{'bridged':>10}{'tvm_ffi':>10}{'native':>10}{'br/tvm':>9}{'br/nat':>9}"
        f"{'shim':>10}{'nat(ch)':>10}{'sh/nat':>9}   (ns per call)"
    )
    for case in cases:
        s_br, s_tv, s_nat = (results.get((k, case)) for k in ("bridged", "tvm_ffi", "native"))
        s_sh, s_nat_c = shim.get(("bridged (shim)", case)), shim.get(("native", case))
        br, tv, nat, sh, nat_c = (
            statistics.median(v) if v else None for v in (s_br, s_tv, s_nat, s_sh, s_nat_c)
        )
        br_tv, br_nat, sh_nat = (
            paired_ratio(s_br, s_tv),
            paired_ratio(s_br, s_nat),
            paired_ratio(s_sh, s_nat_c),
        )

        def f(v):
            return f"{v:>10.1f}" if v is not None else f"{'-':>10}"

        def r(v):
            return f"{v:>9.3f}" if v is not None else f"{'-':>9}"

        print(f"{case:<22}{f(br)}{f(tv)}{f(nat)}{r(br_tv)}{r(br_nat)}{f(sh)}{f(nat_c)}{r(sh_nat)}")
        rows.append(
            {
                "case": case,
                "bridged_ns": br,
                "tvm_ffi_ns": tv,
                "native_ns": nat,
                "bridged_over_tvm_ffi": br_tv,
                "bridged_over_native": br_nat,
                "shim_ns": sh,
                "native_in_shim_child_ns": nat_c,
                "shim_over_native": sh_nat,
            }
        )
    print(
        "goals: bridged/tvm_ffi <= 1.0, bridged/native <= 1.10 (shim/native likewise); ratios are "
        "medians of per-round pairs"
    )
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    with open(args.out, "w") as fh:
        json.dump(
            {"rows": rows, "reps": args.reps, "sample_ms": args.sample_ms, "clock": "thread_time"},
            fh,
            indent=2,
        )
    log(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
