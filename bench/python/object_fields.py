#!/usr/bin/env python3
"""bench/python/object_fields.py: what reading a field of a kffi object costs from Python (goal:
at most 1.5x a nanobind property read of the same field, same run).

Rows (ns per operation, best of --reps runs of --number operations each):
  kffi field read        p.x, p a kffi object of tests/python/kernels/object_kernels.cc
                         (KFFI_OBJECT_DEF, a double field)
  nanobind property read q.x, q a nanobind class with .def_rw("x", ...) of a double (built here
                         from nanobind's sources; skipped when nanobind is not installed)
  kffi field write       p.y = 1.0
  python attribute read  a plain Python object's attribute (the floor)
  tvm field read         p.y, p a TVM-FFI object (refl::ObjectDef, tests/tvm_libs/tvm_refl.cc) of
                         a library bound to apache-tvm-ffi (loaded in this process); goal: within
                         2x of the kffi field read (skipped when apache-tvm-ffi is not installed)
  4 scalars call         config_score4(2, 3, 0.5, 1.0)
  4-field dataclass call config_score(Config(2, 3, 0.5, 1.0)), a dataclass declared to the C++
                         object type test.Config (kffi.register_record), taken as an ObjectPtr:
                         a new object per call (the callee may keep it), and the callee's
                         reference count updates
  4-field dataclass call (const&)
                         config_score_ref(Config(...)): the same, taken as a
                         const ObjectPtr<T>& (borrowed: no reference count updates)
  4-field struct call     tiles_score(Tiles(2, 3, 0.5, 1.0)): an undecorated dataclass to a
                         plain C++ struct parameter (KFFI_RECORD), matched by field names; the
                         callee gets a copy, so the box is reused from call to call
  4-field NamedTuple call the same with a typing.NamedTuple
Goal (issue 27): a 4-field dataclass call costs at most the 4-scalar call plus 60 ns; printed for
both dataclass rows.

Usage: python3 bench/python/object_fields.py [--reps 7] [--number 200000] [--out FILE.json]
"""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import timeit
from pathlib import Path
from typing import NamedTuple

import kffi

ROOT = Path(__file__).resolve().parents[2]
KERNELS = ROOT / "tests" / "python" / "kernels" / "object_kernels.cc"

NB_SOURCE = r"""
#include <nanobind/nanobind.h>
namespace nb = nanobind;
struct Point { double x = 3.0; double y = 4.0; };
NB_MODULE(nb_point, m) {
  nb::class_<Point>(m, "Point").def(nb::init<>()).def_rw("x", &Point::x).def_rw("y", &Point::y);
}
"""


def _cache() -> Path:
    d = Path(tempfile.gettempdir()) / f"kffi-bench-objects-{os.getuid()}"
    d.mkdir(parents=True, exist_ok=True)
    return d


def build_kernels() -> Path:
    flags = subprocess.run(
        [sys.executable, "-m", "kffi.config", "--cxxflags", "--ldflags", "--libs"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    # The headers' contents count too: a changed kffi header must not reuse an older build.
    from call_overhead import tree_hash
    from kffi import libinfo

    key = (
        KERNELS.read_bytes() + " ".join(flags).encode() + tree_hash(libinfo.include_dir()).encode()
    )
    digest = hashlib.sha256(key).hexdigest()[:16]
    out = _cache() / f"libobject_kernels-{digest}.so"
    if not out.exists():
        cmd = ["g++", "-shared", "-O2", "-o", str(out), str(KERNELS), *flags]
        subprocess.run(cmd, check=True)
    return out


def build_nanobind():
    """The nanobind module (imported), or None when nanobind is not installed."""
    try:
        import nanobind
    except ImportError:
        return None
    nb_dir = Path(nanobind.__file__).parent
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    digest = hashlib.sha256((NB_SOURCE + nanobind.__version__).encode()).hexdigest()[:12]
    d = _cache() / f"nb-{digest}"
    d.mkdir(exist_ok=True)
    out = d / f"nb_point{suffix}"
    if not out.exists():
        src = d / "nb_point.cpp"
        src.write_text(NB_SOURCE)
        cmd = [
            "g++", "-O2", "-shared", "-fPIC", "-std=c++17", "-fvisibility=hidden",
            f"-I{nanobind.include_dir()}", f"-I{nb_dir / 'ext' / 'robin_map' / 'include'}",
            f"-I{sysconfig.get_paths()['include']}", str(src),
            str(nb_dir / "src" / "nb_combined.cpp"), "-o", str(out),
        ]  # fmt: skip
        subprocess.run(cmd, check=True)
    sys.path.insert(0, str(d))
    import nb_point

    return nb_point


def build_tvm_point():
    """A Point of tests/tvm_libs/tvm_refl.cc, its library bound to apache-tvm-ffi, or None when
    apache-tvm-ffi is not installed."""
    sys.path.insert(0, str(ROOT / "tests" / "python" / "support"))
    import tvm_libs

    if tvm_libs.tvm_ffi_dir() is None:
        return None
    lib = tvm_libs.build("tvm_refl", linked=False, release=True)
    return kffi.load_module(lib).make_point(3, 4.0)


def best_ns(stmt: str, env: dict, reps: int, number: int) -> float:
    t = timeit.Timer(stmt, globals=env)
    return min(t.repeat(repeat=reps, number=number)) / number * 1e9


def paired(a: str, b: str, env: dict, rounds: int, number: int) -> tuple[float, float]:
    """Medians over rounds of (b - a) in ns and of b / a, each round timing both statements
    back to back (their order alternating), so that drift between rows cancels."""
    ta, tb = timeit.Timer(a, globals=env), timeit.Timer(b, globals=env)
    ta.timeit(number)  # warm-up
    tb.timeit(number)
    diffs, ratios = [], []
    for r in range(rounds):
        if r % 2:
            y, x = tb.timeit(number), ta.timeit(number)
        else:
            x, y = ta.timeit(number), tb.timeit(number)
        diffs.append((y - x) / number * 1e9)
        ratios.append(y / x)
    return statistics.median(diffs), statistics.median(ratios)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--number", type=int, default=200_000)
    ap.add_argument("--out", default=str(ROOT / "build" / "bench_object_fields.json"))
    args = ap.parse_args()

    mod = kffi.load_module(build_kernels())
    p = mod.make_point(3.0, 4.0, 0)
    nb = build_nanobind()

    class Plain:
        def __init__(self):
            self.x = 3.0

    @kffi.register_record("test.Config")
    @dataclasses.dataclass
    class Config:
        tile_m: int
        tile_n: int
        alpha: float
        beta: float

    @dataclasses.dataclass
    class Tiles:  # no register_record: tiles_score's parameter type says what it becomes
        tile_m: int
        tile_n: int
        alpha: float
        beta: float

    class TilesNT(NamedTuple):
        tile_m: int
        tile_n: int
        alpha: float
        beta: float

    env = {
        "p": p,
        "q": nb.Point() if nb else None,
        "o": Plain(),
        "score4": mod.config_score4,
        "score": mod.config_score,
        "score_ref": mod.config_score_ref,
        "cfg": Config(2, 3, 0.5, 1.0),
        "tiles": mod.tiles_score,
        "tdc": Tiles(2, 3, 0.5, 1.0),
        "tnt": TilesNT(2, 3, 0.5, 1.0),
    }
    rows = {"kffi field read": best_ns("p.x", env, args.reps, args.number)}
    if nb is not None:
        rows["nanobind property read"] = best_ns("q.x", env, args.reps, args.number)
    rows["kffi field write"] = best_ns("p.y = 1.0", env, args.reps, args.number)
    rows["python attribute read"] = best_ns("o.x", env, args.reps, args.number)
    tvm_point = build_tvm_point()
    if tvm_point is not None:
        env["t"] = tvm_point
        rows["tvm field read"] = best_ns("t.y", env, args.reps, args.number)
    rows["4 scalars call"] = best_ns("score4(2, 3, 0.5, 1.0)", env, args.reps, args.number)
    rows["4-field dataclass call"] = best_ns("score(cfg)", env, args.reps, args.number)
    rows["4-field dataclass call (const&)"] = best_ns("score_ref(cfg)", env, args.reps, args.number)
    rows["4-field struct call"] = best_ns("tiles(tdc)", env, args.reps, args.number)
    rows["4-field NamedTuple call"] = best_ns("tiles(tnt)", env, args.reps, args.number)

    rounds, n = 4 * args.reps + 1, max(1, args.number // 4)
    pairs = {
        "4-field dataclass call - 4 scalars call": ("score4(2, 3, 0.5, 1.0)", "score(cfg)"),
        "4-field dataclass call (const&) - 4 scalars call": (
            "score4(2, 3, 0.5, 1.0)",
            "score_ref(cfg)",
        ),
        "4-field struct call - 4 scalars call": ("score4(2, 3, 0.5, 1.0)", "tiles(tdc)"),
        "4-field NamedTuple call - 4 scalars call": ("score4(2, 3, 0.5, 1.0)", "tiles(tnt)"),
    }
    if nb is not None:
        pairs["kffi field read / nanobind property read"] = ("q.x", "p.x")
    if "t" in env:
        pairs["tvm field read / kffi field read"] = ("p.x", "t.y")
    paired_rows = {name: paired(a, b, env, rounds, n) for name, (a, b) in pairs.items()}

    print(f"{'operation':<34}{'ns':>10}")
    for name, ns in rows.items():
        print(f"{name:<34}{ns:>10.1f}")
    result = {"rows_ns": rows, "nanobind": nb is not None}
    extra = rows["4-field dataclass call"] - rows["4 scalars call"]
    result["dataclass_minus_scalars_ns"] = extra
    dataclass_rows = ("4-field dataclass call", "4-field dataclass call (const&)")
    for row in (*dataclass_rows, "4-field struct call", "4-field NamedTuple call"):
        extra = rows[row] - rows["4 scalars call"]
        key = row.replace(" (const&)", "_constref").replace(" ", "_").replace("-", "")
        result[key + "_minus_scalars_ns"] = extra
        goal = " (goal <= 60)" if row != "4-field NamedTuple call" else ""
        print(f"{row} - 4 scalars call: {extra:.1f} ns{goal}")
    if nb is not None:
        ratio = rows["kffi field read"] / rows["nanobind property read"]
        result["field_read_vs_nanobind"] = ratio
        print(f"kffi field read / nanobind property read: {ratio:.2f} (goal <= 1.5)")
    else:
        print("nanobind is not installed: no nanobind row")
    if "tvm field read" in rows:
        ratio = rows["tvm field read"] / rows["kffi field read"]
        result["tvm_field_read_vs_kffi"] = ratio
        print(f"tvm field read / kffi field read: {ratio:.2f} (goal <= 2)")
    print(f"paired medians over {rounds} rounds (difference in ns, ratio):")
    for name, (diff, ratio) in paired_rows.items():
        print(f"  {name:<52}{diff:>8.1f} ns {ratio:>7.2f}x")
    result["paired_medians"] = {k: {"diff_ns": d, "ratio": r} for k, (d, r) in paired_rows.items()}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
