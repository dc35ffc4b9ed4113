#!/usr/bin/env python3
"""scripts/tvm_ffi_suite.py: apache-tvm-ffi's own C++ tests, run on its runtime and on kffi's.

kffi says that libraries built with apache-tvm-ffi's headers run on kffi's TVM-FFI runtime
(libkffi_tvm + libkffi) with no apache-tvm-ffi installed. The strictest judge is apache-tvm-ffi's
own test suite, so this script:

1. fetches the sources of the apache-tvm-ffi release kffi follows from PyPI (its sdist, checked
   against the SHA-256 PyPI lists; nothing of it is kept in kffi's tree);
2. builds its tests/cpp with its own CMake (-DTVM_FFI_BUILD_TESTS=ON; GoogleTest from Debian's
   /usr/src/googletest, or the sdist's copy);
3. links the same objects twice, one executable per test file: against its libtvm_ffi and
   against kffi's libkffi_tvm + libkffi (its testing library too, relinked the same way); a file
   that needs a symbol the runtime does not export does not link, and its tests count as "could
   not link", with the symbols named;
4. runs every test in its own process with a time limit, and prints a table (passed / failed /
   crashed / timed out / could not link, per runtime), with every test that did not pass on kffi
   listed by name, and writes JSON.

With --expect tests/abi/tvm_ffi_suite_expected.json (what CI runs), any difference from that
list fails: a file that no longer links on kffi, a test that no longer passes on either runtime,
a listed one that now passes, a crash or a hang.

Usage: python3 scripts/tvm_ffi_suite.py [--version 0.1.15.post2] [--work build/tvm_ffi_suite]
                                        [--kffi-lib DIR] [--timeout 60] [--jobs N] [--json OUT]
                                        [--filter SUBSTRING] [--expect LIST]
--kffi-lib is the folder of libkffi.so and libkffi_tvm.so (default: the installed kffi's).
Without --expect, exits 0 when every test passes on the reference runtime and none crashes on
kffi's.
"""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import argparse
import concurrent.futures
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PYPI = "https://pypi.org/simple/apache-tvm-ffi/"
DEFAULT_VERSION = "0.1.15.post2"


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# ---- sources --------------------------------------------------------------------------------


def fetch_sdist(version: str, work: Path) -> Path:
    """The extracted sdist of apache-tvm-ffi `version` (downloaded once, its SHA-256 checked)."""
    src = work / f"apache_tvm_ffi-{version}"
    if (src / "tests" / "cpp" / "CMakeLists.txt").exists():
        return src
    req = urllib.request.Request(PYPI, headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        index = json.load(r)
    name = f"apache_tvm_ffi-{version}.tar.gz"
    entry = next((f for f in index["files"] if f["filename"] == name), None)
    if entry is None:
        raise SystemExit(f"tvm_ffi_suite: PyPI has no {name}")
    work.mkdir(parents=True, exist_ok=True)
    archive = work / name
    log(f"tvm_ffi_suite: downloading {name}")
    with urllib.request.urlopen(entry["url"], timeout=300) as r:
        data = r.read()
    digest = hashlib.sha256(data).hexdigest()
    if digest != entry["hashes"]["sha256"]:
        raise SystemExit(f"tvm_ffi_suite: {name} has SHA-256 {digest}, PyPI lists another")
    archive.write_bytes(data)
    with tarfile.open(archive) as tar:
        tar.extractall(work, filter="data")
    return src


def googletest_dir(src: Path) -> Path:
    for cand in (Path("/usr/src/googletest"), src / "build_test" / "_deps" / "googletest-src"):
        if (cand / "CMakeLists.txt").exists():
            return cand
    raise SystemExit(
        "tvm_ffi_suite: no GoogleTest sources (apt-get install libgtest-dev gives "
        "/usr/src/googletest)"
    )


def build_reference(src: Path, work: Path, jobs: int) -> Path:
    """apache-tvm-ffi and its tests, built with its own CMake; the build folder.

    No CMAKE_BUILD_TYPE, so no -O flag: their tests compile about four times faster at -O0 (with
    the AddressSanitizer their CMake adds) than at RelWithDebInfo, and what they check does not
    depend on it; the kffi libraries they run on are the Release ones. Their CMake compiles the
    tests with -Werror, so a warning that this compiler has and theirs did not (g++ 12:
    redundant-move in array.h) stops a file: such a file is compiled again with its own command
    plus -Wno-error, and the rest of the build goes on."""
    b = work / "build-O0"
    gen = ["-G", "Ninja"] if shutil.which("ninja") else []
    cmake = [
        "cmake",
        "-S",
        str(src),
        "-B",
        str(b),
        *gen,
        "-DCMAKE_BUILD_TYPE=",
        "-DCMAKE_EXPORT_COMPILE_COMMANDS=ON",
        "-DTVM_FFI_BUILD_TESTS=ON",
        f"-DFETCHCONTENT_SOURCE_DIR_GOOGLETEST={googletest_dir(src)}",
        "-DFETCHCONTENT_FULLY_DISCONNECTED=ON",
    ]
    run(cmake, "configure apache-tvm-ffi")
    runtime = ["tvm_ffi_shared", "tvm_ffi_testing", "gtest", "gtest_main"]
    run(["cmake", "--build", str(b), "-j", str(jobs), "--target", *runtime], "build its runtime")
    keep_going = ["--", "-k", "0"] if gen else ["--", "-k"]
    log("tvm_ffi_suite: build its tests")
    subprocess.run(
        ["cmake", "--build", str(b), "-j", str(jobs), "--target", "tvm_ffi_tests", *keep_going],
        capture_output=True,
        text=True,
    )
    for entry in json.loads((b / "compile_commands.json").read_text()):
        out = Path(entry["directory"]) / entry["output"] if "output" in entry else None
        if out is None or "tvm_ffi_tests.dir" not in str(out) or out.exists():
            continue
        log(f"tvm_ffi_suite: compiling {Path(entry['file']).name} again with -Wno-error")
        proc = subprocess.run(
            entry["command"] + " -Wno-error",
            shell=True,
            cwd=entry["directory"],
            capture_output=True,
            text=True,
        )
        if proc.returncode != 0:
            raise SystemExit(
                f"tvm_ffi_suite: {entry['file']} does not compile:\n{proc.stderr[-3000:]}"
            )
    return b


def run(cmd: list[str], what: str) -> None:
    log(f"tvm_ffi_suite: {what}")
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"tvm_ffi_suite: {what} failed:\n{(proc.stdout + proc.stderr)[-4000:]}")


# ---- linking --------------------------------------------------------------------------------


def one(folder: Path, pattern: str) -> Path:
    found = sorted(folder.rglob(pattern))
    if not found:
        raise SystemExit(f"tvm_ffi_suite: no {pattern} under {folder}")
    return found[0]


def test_objects(b: Path) -> dict[str, Path]:
    """{test file stem: its object} of tvm_ffi_tests."""
    folder = b / "tests" / "cpp" / "CMakeFiles" / "tvm_ffi_tests.dir"
    objs = sorted(folder.rglob("*.cc.o"))
    # By path under tests/cpp: extra/test_big_int and test_big_int are two files.
    return {str(o.relative_to(folder))[: -len(".cc.o")]: o for o in objs}


def link_runtime(b: Path, out: Path, runtime: str, kffi_lib: Path) -> list[str]:
    """The link flags of a test against `runtime` ("tvm_ffi" or "kffi"), its testing library
    relinked from the same object into out/ for kffi's."""
    gtest = [str(one(b, "libgtest_main.a")), str(one(b, "libgtest.a")), "-lpthread"]
    # Their tests are built with AddressSanitizer (add_sanitizer_address): link its runtime too.
    commands = json.loads((b / "compile_commands.json").read_text())
    if any(
        "tvm_ffi_tests.dir" in c["output"] and "-fsanitize=address" in c["command"]
        for c in commands
    ):
        gtest.append("-fsanitize=address")
    if runtime == "tvm_ffi":
        lib = one(b, "libtvm_ffi.so").parent
        testing = one(b, "libtvm_ffi_testing.so")
        return [str(testing), f"-L{lib}", "-ltvm_ffi", f"-Wl,-rpath,{lib}", *gtest]
    out.mkdir(parents=True, exist_ok=True)
    testing = out / "libtvm_ffi_testing.so"
    obj = one(b / "CMakeFiles" / "tvm_ffi_testing.dir", "testing.cc.o")
    rt = [f"-L{kffi_lib}", "-lkffi_tvm", "-lkffi", f"-Wl,-rpath,{kffi_lib}"]
    proc = subprocess.run(
        [os.environ.get("CXX", "c++"), "-shared", "-o", str(testing), str(obj), *rt],
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        raise SystemExit(
            f"tvm_ffi_suite: the testing library does not link on kffi:\n{proc.stderr}"
        )
    return [str(testing), *rt, f"-Wl,-rpath,{out}", *gtest]


def link(objs: dict[str, Path], exe: Path, flags: list[str]) -> dict[str, str]:
    """Links the test files into one executable, as their CMake does (a file's static
    registrations serve the tests of others). A file that needs a symbol the runtime does not
    define is left out and linking tried again; returns {left-out file: the symbols it lacks}."""
    exe.parent.mkdir(parents=True, exist_ok=True)
    left_out: dict[str, str] = {}
    by_path = {str(o): stem for stem, o in objs.items()}
    while True:
        kept = [str(o) for stem, o in objs.items() if stem not in left_out]
        proc = subprocess.run(
            [os.environ.get("CXX", "c++"), *kept, "-o", str(exe), *flags],
            capture_output=True,
            text=True,
        )
        if proc.returncode == 0:
            return left_out
        missing: dict[str, set[str]] = {}
        current = None
        for line in proc.stderr.splitlines():
            m = re.search(r"(\S+\.cc\.o): in function", line)
            if m:
                current = by_path.get(m.group(1))
            u = re.search(r"undefined reference to `([^']+)'", line)
            if u and current is not None:
                missing.setdefault(current, set()).add(u.group(1))
        if not missing:
            raise SystemExit(f"tvm_ffi_suite: linking {exe.name} failed:\n{proc.stderr[-3000:]}")
        for stem, names in missing.items():
            shown = sorted(names)
            left_out[stem] = "; ".join(shown[:8]) + (" ..." if len(shown) > 8 else "")


def list_tests(exe: Path) -> list[str]:
    proc = subprocess.run(
        [str(exe), "--gtest_list_tests"], capture_output=True, text=True, timeout=60
    )
    names, suite = [], ""
    for line in proc.stdout.splitlines():
        if not line.strip() or line.startswith("Running main"):
            continue
        if not line.startswith(" "):
            suite = line.split("#")[0].strip()
        elif not (suite + line).count("DISABLED_"):
            # gtest runs a DISABLED_ test only when asked to: the suite leaves them out too.
            names.append(suite + line.split("#")[0].strip())
    return names


def run_one(exe: Path, name: str, timeout: float) -> tuple[str, str]:
    """(outcome, the end of its output): passed, failed, crashed or timed out."""
    try:
        proc = subprocess.run(
            [str(exe), f"--gtest_filter={name}"],
            capture_output=True,
            text=True,
            timeout=timeout,
            errors="replace",
        )
    except subprocess.TimeoutExpired:
        return "timed out", ""
    tail = (proc.stdout + proc.stderr)[-600:]
    if "ERROR: AddressSanitizer" in proc.stderr:
        # Their tests are built with AddressSanitizer, which reports a bad access and exits 1.
        return "crashed", proc.stderr[proc.stderr.index("ERROR: AddressSanitizer") :][:600]
    if proc.returncode < 0 or proc.returncode > 128:
        sig = -proc.returncode if proc.returncode < 0 else proc.returncode - 128
        try:
            signame = signal.Signals(sig).name
        except ValueError:
            signame = str(sig)
        return "crashed", f"{signame}: {tail}"
    # A name two files define runs twice under one filter: passed when every run passed.
    if proc.returncode == 0 and "[  PASSED  ]" in proc.stdout and "[  FAILED  ]" not in proc.stdout:
        return "passed", ""
    return "failed", tail


OUTCOMES = ["passed", "failed", "crashed", "timed out", "could not link"]


def run_suite(
    runtime: str,
    b: Path,
    work: Path,
    kffi_lib: Path,
    timeout: float,
    jobs: int,
    filt: str,
    only: set[str] | None = None,
    label: str | None = None,
) -> tuple[dict[str, dict[str, str]], set[str]]:
    """({test name: {"outcome", "detail", "file"}}, the files linked) on `runtime`, with the test
    files in `only` (all when None); the executable is bin/<label or runtime>."""
    flags = link_runtime(b, work / runtime, runtime, kffi_lib)
    objs = {stem: o for stem, o in test_objects(b).items() if only is None or stem in only}
    exe = work / runtime / "bin" / (label or runtime)
    left_out = link(objs, exe, flags)
    results: dict[str, dict[str, str]] = {}
    # Which file a test comes from: its suite and name in that file's source.
    names = [n for n in list_tests(exe) if filt in n]
    files = test_files_of(b, names)
    for stem, missing in left_out.items():
        for name in tests_in_source(b, stem):
            if filt in name:
                results[name] = {"outcome": "could not link", "detail": missing, "file": stem}
    with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
        futures = {pool.submit(run_one, exe, n, timeout): n for n in names}
        for fut in concurrent.futures.as_completed(futures):
            name = futures[fut]
            outcome, detail = fut.result()
            results[name] = {"outcome": outcome, "detail": detail, "file": files.get(name, "?")}
    return results, set(objs) - set(left_out)


def source_of(b: Path, stem: str) -> Path:
    src = json.loads((b / "compile_commands.json").read_text())
    for entry in src:
        if entry["output"].endswith(f"tvm_ffi_tests.dir/{stem}.cc.o"):
            return Path(entry["file"])
    raise SystemExit(f"tvm_ffi_suite: no source for {stem}")


TEST_MACRO = re.compile(r"^\s*TEST(?:_F|_P)?\(\s*(\w+)\s*,\s*(\w+)\s*\)", re.M)


def tests_in_source(b: Path, stem: str) -> list[str]:
    """The tests a file defines (TEST/TEST_F), as Suite.Name."""
    text = source_of(b, stem).read_text(errors="replace")
    found = [f"{suite}.{name}" for suite, name in TEST_MACRO.findall(text)]
    return [n for n in found if "DISABLED_" not in n]


def test_files_of(b: Path, names: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for stem in test_objects(b):
        for name in tests_in_source(b, stem):
            out[name] = stem
    return out


def check_expected(
    expect: dict, report: dict[str, dict[str, dict[str, str]]], linked: set[str]
) -> list[str]:
    """Every difference from the expected list: a file that no longer links on kffi or one that
    links now, a test that does not pass where it should, a listed one that now passes (the fix
    takes it off the list, so that the list keeps meaning something), a crash, a changed count."""
    problems = []
    links, cannot = set(expect["links"]), set(expect["cannot_link"])
    for stem in sorted(links - linked):
        missing = {r["detail"] for r in report["kffi"].values() if r["file"] == stem}
        problems.append(f"{stem} no longer links on kffi: {'; '.join(sorted(missing))}")
    for stem in sorted(linked & cannot):
        problems.append(f"{stem} links on kffi now; move it to the files that link")
    for stem in sorted(linked - links - cannot):
        problems.append(f"{stem} is a test file the list does not name")
    listed = expect["not_passing"]
    for runtime, got in report.items():
        if len(got) != expect["tests"][runtime]:
            problems.append(
                f"{runtime}: {len(got)} tests where the list has {expect['tests'][runtime]}"
            )
        for name, r in sorted(got.items()):
            entry = listed.get(name)
            if r["outcome"] in ("crashed", "timed out"):
                problems.append(f"{runtime}: {name} {r['outcome']}: {r['detail'][-300:]}")
            elif r["outcome"] == "could not link":
                continue  # the file checks above
            elif runtime == "kffi":
                fails = entry is not None
            else:
                fails = runtime == "tvm_ffi_same_files" and bool(entry and entry["also_on_tvm_ffi"])
            if fails and r["outcome"] == "passed":
                problems.append(f"{runtime}: {name} passes now; take it off the list")
            elif not fails and r["outcome"] != "passed":
                problems.append(f"{runtime}: {name} {r['outcome']}: {r['detail'][-300:]}")
    return problems


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--version", default=DEFAULT_VERSION)
    ap.add_argument("--work", default=str(ROOT / "build" / "tvm_ffi_suite"))
    ap.add_argument("--kffi-lib", default=None)
    ap.add_argument("--timeout", type=float, default=60.0)
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--json", default=None)
    ap.add_argument("--filter", default="", help="run only tests whose name holds this")
    ap.add_argument(
        "--expect",
        default=None,
        help="the list of what passes and what does not (tests/abi/tvm_ffi_suite_expected.json):"
        " fail on any difference from it",
    )
    args = ap.parse_args()
    work = Path(args.work).resolve()
    if args.kffi_lib is None:
        import kffi.libinfo

        kffi_lib = Path(kffi.libinfo.lib_dir())
    else:
        kffi_lib = Path(args.kffi_lib).resolve()
    expect = json.loads(Path(args.expect).read_text()) if args.expect else None
    if expect is not None:
        if args.filter:
            raise SystemExit("tvm_ffi_suite: --expect runs every test; leave out --filter")
        args.version = expect["version"]
    src = fetch_sdist(args.version, work)
    b = build_reference(src, work, args.jobs)
    report: dict[str, dict[str, dict[str, str]]] = {}
    log("tvm_ffi_suite: linking and running on tvm_ffi")
    report["tvm_ffi"], _ = run_suite(
        "tvm_ffi", b, work, kffi_lib, args.timeout, args.jobs, args.filter
    )
    log("tvm_ffi_suite: linking and running on kffi")
    report["kffi"], linked = run_suite(
        "kffi", b, work, kffi_lib, args.timeout, args.jobs, args.filter
    )
    rows = [("tvm_ffi", "libtvm_ffi.so")]
    if linked != set(test_objects(b)):
        # The files kffi cannot link are left out, and their static registrations with them: the
        # reference without them tells which kffi results come from that rather than the runtime.
        log("tvm_ffi_suite: linking and running on tvm_ffi with the files that link on kffi")
        report["tvm_ffi_same_files"], _ = run_suite(
            "tvm_ffi", b, work, kffi_lib, args.timeout, args.jobs, args.filter, linked, "same_files"
        )
        rows.append(("tvm_ffi_same_files", "libtvm_ffi.so, kffi's files"))
    rows.append(("kffi", "libkffi_tvm.so + libkffi.so"))
    print(f"\napache-tvm-ffi {args.version} tests/cpp, each test in its own process")
    print(f"{'runtime':<30}" + "".join(f"{o:>16}" for o in OUTCOMES) + f"{'of':>8}")
    for runtime, label in rows:
        counts = {o: 0 for o in OUTCOMES}
        for r in report[runtime].values():
            counts[r["outcome"]] += 1
        print(
            f"{label:<30}"
            + "".join(f"{counts[o]:>16}" for o in OUTCOMES)
            + f"{len(report[runtime]):>8}"
        )
    same = report.get("tvm_ffi_same_files", {})
    not_passed = {n: r for n, r in sorted(report["kffi"].items()) if r["outcome"] != "passed"}
    if not_passed:
        print("\nnot passed on kffi (* : fails on libtvm_ffi too with the same files linked):")
        for name, r in not_passed.items():
            mark = "*" if same.get(name, {}).get("outcome", "passed") not in ("passed",) else " "
            print(f"  {mark} {r['outcome']:<14} {r['file']:<34} {name}  {r['detail'][-160:]!r}")
    if args.json:
        Path(args.json).write_text(
            json.dumps({"version": args.version, "results": report}, indent=1)
        )
    if expect is not None:
        problems = check_expected(expect, report, linked)
        for line in problems:
            print(f"tvm_ffi_suite: {line}", file=sys.stderr)
        print(f"\n{len(problems)} differences from {args.expect}")
        return 1 if problems else 0
    ref_ok = all(r["outcome"] == "passed" for r in report["tvm_ffi"].values())
    kffi_crash = any(r["outcome"] in ("crashed", "timed out") for r in report["kffi"].values())
    return 0 if ref_ok and not kffi_crash else 1


if __name__ == "__main__":
    sys.exit(main())
