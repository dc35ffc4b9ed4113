"""tests/python/hostile/test_hostile_loader.py: a library whose load failed fails the same way every
time (issue 29, class 3), however the loads interleave: a static initialiser that loads its own file
again (before or after it reports), threads that load it at once, later loads, and loads through
another path to the same file (a symbolic or a hard link).

Each case runs in a fresh process (a failed library stays failed for the life of a process), with
a timeout: a regression fails the test instead of hanging or killing the run.
"""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import LibraryBuilder

LIBS = Path(__file__).resolve().parent / "hostile_libs"

REPORT = "load_errors: the export `twice` is malformed"

# Loads `first` (from `threads` threads at once, after a barrier), then each of `later` in turn;
# prints one [kind, message] per load ("ok" and the result of twice(21) for a load that worked).
_LOADS = textwrap.dedent("""
    import json, sys, threading
    import kffi

    first, threads, later = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3])

    def attempt(path):
        try:
            return ["ok", kffi.load_module(path).twice(21)]
        except Exception as e:
            return [type(e).__name__, str(e)]

    results = [None] * threads
    barrier = threading.Barrier(threads)

    def run(i):
        barrier.wait()
        results[i] = attempt(first)

    workers = [threading.Thread(target=run, args=(i,)) for i in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    results += [attempt(p) for p in later]
    print(json.dumps(results))
""")


@pytest.fixture(scope="module")
def load_errors_lib(tmp_path_factory) -> Path:
    built = LibraryBuilder().build_all({"load_errors": LIBS / "load_errors.cc"})
    # A private copy, with a hard link and a symbolic link beside it (same file system).
    d = tmp_path_factory.mktemp("load_errors")
    lib = d / "libload_errors.so"
    shutil.copyfile(built["load_errors"], lib)
    os.link(lib, d / "hardlink.so")
    os.symlink(lib, d / "symlink.so")
    return lib


def _run(mode: str, first: Path, threads: int = 1, later=()):
    env = dict(os.environ, KFFI_TEST_LOAD_MODE=mode)
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            _LOADS,
            str(first),
            str(threads),
            json.dumps([str(p) for p in later]),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout), proc.stderr


def _failed_as_reported(result, given) -> bool:
    return result == ["ValueError", f"Cannot load module `{given}`: {REPORT}"]


@pytest.mark.parametrize(
    "mode, threads",
    [
        ("report", 1),  # the plain case: every later load fails too
        ("self-before", 1),  # the initialiser loads its own file, then reports
        ("self-after", 1),  # reports, then loads its own file
        ("sleep", 8),  # eight threads load it at once while the initialiser runs
        ("report", 8),
    ],
)
def test_a_failed_load_fails_the_same_way_every_time(load_errors_lib, mode, threads):
    lib = load_errors_lib
    results, stderr = _run(mode, lib, threads, later=[lib, lib])
    assert len(results) == threads + 2
    for r in results:
        assert _failed_as_reported(r, lib), results
    if mode == "self-before":
        # Inside its own initialiser the library is not loaded yet: that load is refused.
        assert "inner load: RuntimeError: Cannot load module" in stderr
        assert "it is being loaded on this thread" in stderr
    if mode == "self-after":
        # After the report, the load from inside the initialiser fails like every other.
        assert f"inner load: ValueError: Cannot load module `{lib}`: {REPORT}" in stderr


@pytest.mark.parametrize("first", ["libload_errors.so", "hardlink.so", "symlink.so"])
def test_a_failed_load_fails_through_every_path_to_the_file(load_errors_lib, first):
    d = load_errors_lib.parent
    paths = [d / "libload_errors.so", d / "hardlink.so", d / "symlink.so"]
    results, _ = _run("report", d / first, 1, later=paths)
    for r, given in zip(results, [d / first, *paths]):
        assert _failed_as_reported(r, given), results


def test_a_library_that_loads_itself_but_reports_nothing_loads(load_errors_lib):
    results, stderr = _run("self-only", load_errors_lib, 4, later=[load_errors_lib])
    assert results == [["ok", 42]] * 5
    assert "it is being loaded on this thread" in stderr
    results, stderr = _run("none", load_errors_lib, 1, later=[load_errors_lib])
    assert results == [["ok", 42]] * 2 and stderr == ""
