#!/usr/bin/env python3
"""bench/python/stable_abi_cost.py: what the stable ABI would cost kffi's call path.

docs/packaging.md chooses one wheel per CPython version over a core extension built against the
stable ABI (Py_LIMITED_API 3.12). This measures that choice. A real limited build of _core does
not exist: parts of it have no limited equivalent at all (records read member slots through
PyMemberDescrObject; the finalization check needs PyGILState_Check). What can be measured is the
call path, so this builds _core twice from the same tree:

  per-version   the tree as it is
  stable-ABI    the same, with every macro or inline read that Py_LIMITED_API 3.12 lacks replaced
                by the exported function a limited build has to call: PyTuple_GetItem/Size,
                PyList_GetItem/Size, PyFloat_AsDouble, PyType_GetFlags for the Py*_Check macros,
                _Py_IncRef/_Py_DecRef for reference counts (3.12's limited API makes them calls),
                PyLong_AsLongLongAndOverflow for small ints and PyUnicode_AsUTF8AndSize for str
                (no compact-value or compact-ASCII peeks)

and measures both on call_overhead.py's kernels:
  instructions  (valgrind, where installed) per call inside kffi.Function's vectorcall,
                inclusive: deterministic, the interpreter's own share left out
  time          call_overhead.py run on each build in turn (--rounds each, tvm-ffi in the same
                process as the anchor); medians of per-sample ns and of kffi/tvm-ffi ratios

The builds go to build/stable_abi/ (a copy of the tracked tree, two pip --target installs, about
5 minutes on 2 cores). Prints a table and writes JSON (--out). Never fails on a result.

Usage: python3 bench/python/stable_abi_cost.py [--out build/bench_stable_abi.json] [--rounds 2]
                                               [--reps 11] [--no-time] [--no-instructions]
"""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
WORK = ROOT / "build" / "stable_abi"
CASES = ["noop", "ints3", "str1", "numpy3"]

# Placed right after <Python.h> in py_common.h: from there on, the limited API's way.
LIMITED_HEADER = """
#undef PyTuple_GET_ITEM
#define PyTuple_GET_ITEM(t, i) PyTuple_GetItem((PyObject*)(t), (i))
#undef PyTuple_GET_SIZE
#define PyTuple_GET_SIZE(t) PyTuple_Size((PyObject*)(t))
#undef PyTuple_SET_ITEM
#define PyTuple_SET_ITEM(t, i, v) PyTuple_SetItem((PyObject*)(t), (i), (v))
#undef PyList_GET_ITEM
#define PyList_GET_ITEM(t, i) PyList_GetItem((PyObject*)(t), (i))
#undef PyList_GET_SIZE
#define PyList_GET_SIZE(t) PyList_Size((PyObject*)(t))
#undef PyList_SET_ITEM
#define PyList_SET_ITEM(t, i, v) PyList_SetItem((PyObject*)(t), (i), (v))
#undef PyFloat_AS_DOUBLE
#define PyFloat_AS_DOUBLE(o) PyFloat_AsDouble((PyObject*)(o))
#undef PyBytes_AS_STRING
#define PyBytes_AS_STRING(o) PyBytes_AsString((PyObject*)(o))
#undef PyBytes_GET_SIZE
#define PyBytes_GET_SIZE(o) PyBytes_Size((PyObject*)(o))
#undef PyType_FastSubclass
#define PyType_FastSubclass(t, f) ((PyType_GetFlags(t) & (f)) != 0)
#define PyType_HasFeature(t, f) ((PyType_GetFlags(t) & (f)) != 0)
#define Py_INCREF(o) _Py_IncRef(_PyObject_CAST(o))
#define Py_DECREF(o) _Py_DecRef(_PyObject_CAST(o))
#define Py_XINCREF(o) Py_IncRef(_PyObject_CAST(o))
#define Py_XDECREF(o) Py_DecRef(_PyObject_CAST(o))
#undef Py_NewRef
#define Py_NewRef(o) (_Py_IncRef(_PyObject_CAST(o)), _PyObject_CAST(o))
#undef Py_XNewRef
#define Py_XNewRef(o) (Py_IncRef(_PyObject_CAST(o)), _PyObject_CAST(o))
"""

# The argument fast path's int and str reads (PackPlainArg), as a limited build writes them.
FAST_PATH_EDITS = [
    (
        # The quick packing reads inline what needs no call; a limited build has nothing to read
        # inline, so it packs every argument in one pass with the calls below.
        "KFFI_INLINE bool PackPlainArg(PyObject* obj, KFFIAny* out) {\n",
        "KFFI_INLINE bool PackPlainArg(PyObject* obj, KFFIAny* out) {\n"
        "  if constexpr (kQuick) return PackPlainArg<false>(obj, out);\n",
    ),
    (
        # Every int through PyLong_AsLongLongAndOverflow (the branch after this test).
        "    if (KFFI_UNLIKELY(!ReadCompactInt(obj, &v))) {\n",
        "    if (true) {\n",
    ),
    (
        "  if (tp == &PyUnicode_Type && PyUnicode_IS_COMPACT_ASCII(obj)) {\n"
        "    // ASCII is its own UTF-8: the same buffer PyUnicode_AsUTF8AndSize returns for it. A compact\n"
        "    // ASCII str keeps it right after its header (what PyUnicode_DATA computes after testing\n"
        "    // again whether the str is ASCII).\n"
        "    const auto* ascii = reinterpret_cast<const PyASCIIObject*>(obj);\n"
        "    return StoreStrInPlace<kQuick>(reinterpret_cast<const char*>(ascii + 1), ascii->length, out);\n"
        "  }\n",
        # Every str through PyUnicode_AsUTF8AndSize.
        "  if (tp == &PyUnicode_Type) {\n"
        "    Py_ssize_t n = 0;\n"
        "    const char* s = PyUnicode_AsUTF8AndSize(obj, &n);\n"
        "    if (s != nullptr) return StoreStrInPlace(s, n, out);\n"
        "    PyErr_Clear();\n"
        "  }\n",
    ),
]

# The calls counted under callgrind: the kernels of call_overhead.py, GIL held.
DRIVER = """
import sys
sys.path.insert(0, {bench!r})
import numpy as np
import kffi
from call_overhead_build import build_kffi

case, n = sys.argv[1], int(sys.argv[2])
f = kffi.load_module(str(build_kffi())).get_function({{"numpy3": "tensors3"}}.get(case, case))
f.release_gil = False
arrays = tuple(np.ones(16, dtype=np.float32) for _ in range(3))
args = {{"noop": (), "ints3": (1, 2, 3), "str1": ("hello",), "numpy3": arrays}}[case]
for _ in range(n):
    f(*args)
"""


def log(msg: str) -> None:
    print(msg, flush=True)


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    if text.count(old) != 1:
        raise SystemExit(f"stable_abi_cost: {path} no longer has the text this edits:\n{old}")
    path.write_text(text.replace(old, new))


def make_trees() -> dict[str, Path]:
    """Copies the tracked tree, makes the stable-ABI variant, and installs both builds."""
    files = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, check=True, capture_output=True
    ).stdout.split(b"\0")
    sites = {}
    for variant in ("per-version", "stable-ABI"):
        src = WORK / variant / "src"
        site = WORK / variant / "site"
        shutil.rmtree(WORK / variant, ignore_errors=True)
        for f in files:
            if f:
                rel = f.decode()
                (src / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(ROOT / rel, src / rel)
        if variant == "stable-ABI":
            edit(
                src / "python/src/py_common.h",
                "#include <Python.h>\n",
                "#include <Python.h>\n" + LIMITED_HEADER,
            )
            for old, new in FAST_PATH_EDITS:
                edit(src / "python/src/py_common.h", old, new)
        log(f"building _core ({variant}) into {site} ...")
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "install",
                "-q",
                "--no-build-isolation",
                "--no-deps",
                "-C",
                "install.strip=false",
                "--target",
                str(site),
                str(src),
            ],
            check=True,
        )
        sites[variant] = site
    return sites


def instructions(sites: dict[str, Path]) -> dict[str, dict[str, int]]:
    if shutil.which("valgrind") is None:
        log("  valgrind is not installed: no instruction counts")
        return {}
    driver = WORK / "driver.py"
    driver.write_text(DRIVER.format(bench=str(ROOT / "bench" / "python")))
    n = 10000
    out: dict[str, dict[str, int]] = {}
    for variant, site in sites.items():
        env = dict(os.environ, PYTHONPATH=str(site), PYTHONHASHSEED="0")
        # The first run builds (or finds) the kernel library outside the count.
        subprocess.run([sys.executable, str(driver), "noop", "1"], env=env, check=True)
        for case in CASES:
            r = subprocess.run(
                [
                    "valgrind",
                    "--tool=callgrind",
                    "--collect-atstart=no",
                    "--toggle-collect=*FunctionVectorcall*",
                    f"--callgrind-out-file={WORK / 'callgrind.out'}",
                    sys.executable,
                    str(driver),
                    case,
                    str(n),
                ],
                env=env,
                capture_output=True,
                text=True,
                check=True,
            )
            m = re.search(r"Collected : (\d+)", r.stderr)
            out.setdefault(variant, {})[case] = round(int(m.group(1)) / n) if m else -1
    return out


def timings(sites: dict[str, Path], rounds: int, reps: int) -> dict[str, dict]:
    out: dict[str, dict] = {}
    for r in range(rounds):
        for variant, site in sites.items():
            js = WORK / f"call_overhead_{variant}_{r}.json"
            log(f"  call_overhead.py on the {variant} build, round {r + 1} of {rounds} ...")
            subprocess.run(
                [
                    sys.executable,
                    str(ROOT / "bench/python/call_overhead.py"),
                    "--skip",
                    "nanobind",
                    "pybind11",
                    "torch.ops",
                    "--no-default-path",
                    "--no-torch-ext",
                    "--no-cuda",
                    "--reps",
                    str(reps),
                    "--out",
                    str(js),
                ],
                env=dict(os.environ, PYTHONPATH=str(site)),
                check=True,
                capture_output=True,
            )
            data = json.loads(js.read_text())
            for case, by_gil in data["results"].items():
                for gil, cell in by_gil.items():
                    if "kffi" not in cell or "tvm-ffi" not in cell:
                        continue
                    k = cell["kffi"]["samples_cpu_ns"]
                    t = cell["tvm-ffi"]["samples_cpu_ns"]
                    row = out.setdefault(f"{case} {gil}", {}).setdefault(
                        variant, {"ns": [], "r": []}
                    )
                    row["ns"].append(statistics.median(k))
                    row["r"].append(statistics.median(a / b for a, b in zip(k, t)))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=str(ROOT / "build" / "bench_stable_abi.json"))
    ap.add_argument("--rounds", type=int, default=2, help="call_overhead.py runs per build")
    ap.add_argument("--reps", type=int, default=11, help="call_overhead.py's --reps")
    ap.add_argument("--no-time", action="store_true")
    ap.add_argument("--no-instructions", action="store_true")
    args = ap.parse_args()

    sites = make_trees()
    result: dict = {"what": "kffi's call path: per-version _core vs the stable ABI's calls"}
    if not args.no_instructions:
        log("instructions per call inside kffi.Function's vectorcall (callgrind) ...")
        counts = instructions(sites)
        result["instructions"] = counts
        if counts:
            log(f"\n{'case (GIL held)':18} {'per-version':>12} {'stable-ABI':>11} {'ratio':>6}")
            for case in CASES:
                a, b = counts["per-version"][case], counts["stable-ABI"][case]
                log(f"{case:18} {a:12d} {b:11d} {b / a:6.2f}")
    if not args.no_time:
        log("\ntime per call (call_overhead.py, cpu clock) ...")
        rows = timings(sites, args.rounds, args.reps)
        result["time"] = rows
        log(
            f"\n{'case':18} {'per-version ns':>14} {'stable-ABI ns':>13} {'ratio':>6}"
            f" {'kffi/tvm-ffi':>17}"
        )
        for name, by in rows.items():
            a = statistics.median(by["per-version"]["ns"])
            b = statistics.median(by["stable-ABI"]["ns"])
            ra = statistics.median(by["per-version"]["r"])
            rb = statistics.median(by["stable-ABI"]["r"])
            log(f"{name:18} {a:14.1f} {b:13.1f} {b / a:6.2f} {ra:8.3f} -> {rb:.3f}")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1))
    log(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
