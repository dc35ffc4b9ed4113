"""tests/python/hostile/test_hostile_load_object.py: kffi.load_object refuses, at load and naming
it, a symbol nothing defines, whatever its kind (issue 29, class 4); refuses every path that is not
a regular file before reading it (a FIFO would block); and a damaged entry of its cache (truncated,
overwritten, without its record) is linked again instead of failing every later load (class 10).

Every load runs in a fresh process with a timeout: before the guards, an undefined function
killed the process at its first call and a FIFO blocked forever.
"""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

# Loads each object path given and calls its function `f` with 3; prints one result per path:
# ["ok", f(3)] or [exception type, message].
_LOAD = textwrap.dedent("""
    import json, sys
    import kffi

    out = []
    for path in sys.argv[1:]:
        try:
            out.append(["ok", kffi.load_object(path).f(3)])
        except Exception as e:
            out.append([type(e).__name__, str(e)])
    print(json.dumps(out))
""")

# One object per kind of symbol the object refers to; `f` uses it (or, for "unused", another
# function does: the object is refused all the same, its code being unresolved).
_HEAD = "#include <kffi/export.h>\n#include <cstdint>\n"
OBJECTS = {
    "function": (
        'extern "C" int64_t kffi_test_missing_function(int64_t);\n'
        "int64_t F(int64_t x) { return kffi_test_missing_function(x); }\n",
        "kffi_test_missing_function",
    ),
    "cpp_function": (
        "int64_t kffi_test_missing_cpp(double);\n"
        "int64_t F(int64_t x) { return kffi_test_missing_cpp(double(x)); }\n",
        "kffi_test_missing_cpp(double)",
    ),
    "unused_function": (
        'extern "C" int64_t kffi_test_missing_function(int64_t);\n'
        "int64_t Unused(int64_t x) { return kffi_test_missing_function(x); }\n"
        "int64_t F(int64_t x) { return x; }\n"
        "KFFI_EXPORT(unused, Unused);\n",
        "kffi_test_missing_function",
    ),
    "variable": (
        'extern "C" int64_t kffi_test_missing_variable;\n'
        "int64_t F(int64_t x) { return x + kffi_test_missing_variable; }\n",
        "kffi_test_missing_variable",
    ),
    "tls": (
        'extern "C" __thread int64_t kffi_test_missing_tls;\n'
        "int64_t F(int64_t x) { return x + kffi_test_missing_tls; }\n",
        "kffi_test_missing_tls",
    ),
    "cpp_thread_local": (
        "extern thread_local int64_t kffi_test_missing_thread_local;\n"
        "int64_t F(int64_t x) { return x + kffi_test_missing_thread_local; }\n",
        "kffi_test_missing_thread_local",
    ),
    # Weak references may stay undefined (they read as NULL): such objects load and run.
    "weak_function": (
        'extern "C" __attribute__((weak)) int64_t kffi_test_weak_function(int64_t);\n'
        "int64_t F(int64_t x) { return kffi_test_weak_function ? kffi_test_weak_function(x) : -x; }\n",
        None,
    ),
    "weak_variable": (
        'extern "C" __attribute__((weak)) int64_t kffi_test_weak_variable;\n'
        "int64_t F(int64_t x) { return &kffi_test_weak_variable ? 0 : -x; }\n",
        None,
    ),
    "defined": ("int64_t F(int64_t x) { return -x; }\n", None),
}


def _kffi_cxxflags() -> list:
    out = subprocess.run(
        [sys.executable, "-m", "kffi.config", "--cxxflags"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return out.split()


@pytest.fixture(scope="module")
def objects(tmp_path_factory) -> dict:
    d = tmp_path_factory.mktemp("objects")
    flags = _kffi_cxxflags()
    procs = {}
    for kind, (body, _) in OBJECTS.items():
        src = d / f"{kind}.cc"
        export = "" if "KFFI_EXPORT(f," in body else "KFFI_EXPORT(f, F);\n"
        src.write_text(_HEAD + body + export)
        cmd = ["c++", "-c", "-fPIC", "-O1", "-o", str(d / f"{kind}.o"), str(src), *flags]
        procs[kind] = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
    for proc in procs.values():
        _, err = proc.communicate()
        assert proc.returncode == 0, err
    return {kind: d / f"{kind}.o" for kind in OBJECTS}


def _load(paths, cache: Path) -> list:
    env = dict(os.environ, KFFI_CACHE_DIR=str(cache))
    proc = subprocess.run(
        [sys.executable, "-c", _LOAD, *map(str, paths)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    # Before the guard, the first call of an unresolved function ended the process (exit 127).
    assert proc.returncode == 0, f"exit {proc.returncode}: {proc.stderr[-2000:]}"
    return json.loads(proc.stdout)


def test_every_kind_of_undefined_symbol(objects, tmp_path):
    kinds = list(OBJECTS)
    results = _load([objects[k] for k in kinds], tmp_path / "cache")
    for kind, result in zip(kinds, results):
        symbol = OBJECTS[kind][1]
        if symbol is None:
            assert result == ["ok", -3], (kind, result)
            continue
        assert result[0] == "RuntimeError", (kind, result)
        msg = result[1]
        assert msg.startswith(f"Cannot load object `{objects[kind]}`: it uses `"), (kind, msg)
        assert symbol in msg and "which nothing defines" in msg, (kind, msg)
    # Refused the same way when the linked file is already in the cache.
    again = _load([objects[k] for k in kinds], tmp_path / "cache")
    assert again == results


def test_every_kind_of_file_that_is_not_a_regular_file(objects, tmp_path):
    d = tmp_path / "files"
    d.mkdir()
    fifo = d / "fifo.o"
    os.mkfifo(fifo)
    (d / "folder.o").mkdir()
    os.symlink("/dev/null", d / "device.o")
    os.symlink(d / "folder.o", d / "link_to_folder.o")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(d / "socket.o"))
    (d / "empty.o").write_bytes(b"")
    (d / "text.o").write_text("not an object\n")
    expected = {
        "fifo.o": "it is a FIFO (named pipe), not a regular file",
        "folder.o": "it is a directory, not a regular file",
        "device.o": "it is a device, not a regular file",
        "link_to_folder.o": "it is a directory, not a regular file",
        "socket.o": "it is a socket, not a regular file",
        "empty.o": "not an ELF object file",
        "text.o": "not an ELF object file",
    }
    try:
        # A loader that opens the FIFO for reading blocks until a writer comes: the timeout
        # turns that into a failure instead of a hung run.
        results = _load([d / n for n in expected], tmp_path / "cache")
    finally:
        sock.close()
    for (name, why), result in zip(expected.items(), results):
        assert result == ["RuntimeError", f"Cannot load object `{d / name}`: {why}"], result
    os.symlink(d / "nowhere.o", d / "dangling.o")
    (result,) = _load([d / "dangling.o"], tmp_path / "cache")
    assert result[0] == "FileNotFoundError", result


def _cache_entry(cache: Path) -> Path:
    (linked,) = [p for p in (cache / "objects").glob("*.so")]
    return linked


@pytest.mark.parametrize("damage", ["truncate", "overwrite", "no_record", "bad_record", "empty"])
def test_a_damaged_cache_entry_is_linked_again(objects, tmp_path, damage):
    cache = tmp_path / "cache"
    assert _load([objects["defined"]], cache) == [["ok", -3]]
    linked = _cache_entry(cache)
    record = Path(str(linked) + ".sha256")
    good, good_record = linked.read_bytes(), record.read_text()
    assert good_record == f"{len(good)} {__import__('hashlib').sha256(good).hexdigest()}\n"
    if damage == "truncate":
        linked.write_bytes(good[: len(good) // 3])
    elif damage == "overwrite":  # same size, other bytes: only the digest tells
        linked.write_bytes(good[:64] + bytes(len(good) - 64))
    elif damage == "no_record":
        record.unlink()
    elif damage == "bad_record":
        record.write_text("garbage")
    elif damage == "empty":
        linked.write_bytes(b"")
    # Loads (linked again), and stays loadable.
    assert _load([objects["defined"]], cache) == [["ok", -3]]
    assert _load([objects["defined"]], cache) == [["ok", -3]]
    assert (
        record.read_text()
        == f"{linked.stat().st_size} "
        + __import__("hashlib").sha256(linked.read_bytes()).hexdigest()
        + "\n"
    )
