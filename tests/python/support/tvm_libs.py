"""tests/python/support/tvm_libs.py: builds the TVM-FFI test libraries (tests/tvm_libs/*.cc).

They are compiled against apache-tvm-ffi's headers exactly as a TVM-FFI kernel author builds
them (`tvm-ffi-config` flags), in two flavours: "linked" (-ltvm_ffi, a DT_NEEDED entry, with an
rpath to the wheel's lib folder) and "unlinked" (the TVMFFI* imports left unresolved, for
whichever runtime the loader provides). The package is located without importing it, so that a
test process can build them and still never load libtvm_ffi. Built libraries are cached by a
hash of source, headers and flags, like conftest.py's.
"""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import hashlib
import importlib.util
import os
import re
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
SOURCES = REPO / "tests" / "tvm_libs"


def tvm_ffi_dir() -> Path | None:
    """The installed tvm_ffi package folder, or None when apache-tvm-ffi is absent."""
    spec = importlib.util.find_spec("tvm_ffi")
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = Path(next(iter(spec.submodule_search_locations)))
    return folder if (folder / "include" / "tvm" / "ffi" / "c_api.h").exists() else None


def _cache_dir() -> Path:
    root = os.environ.get("KFFI_TEST_LIB_DIR")
    path = Path(root) if root else Path(tempfile.gettempdir()) / f"kffi-test-libs-{os.getuid()}"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _digest(parts: list[bytes]) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(hashlib.sha256(p).digest())
    return h.hexdigest()[:16]


def build(
    name: str,
    linked: bool,
    source: Path | None = None,
    rpath: bool = True,
    release: bool = False,
    metadata: bool = True,
    tvm: Path | None = None,
) -> Path:
    """Builds tests/tvm_libs/<name>.cc (or source) once per content; returns the library's path.
    rpath=False leaves a linked library without the rpath that lets the loader find libtvm_ffi.
    tvm names another apache-tvm-ffi package folder (another release's headers, release_dir).
    release=True builds with -O3 -DNDEBUG (the flags of a benchmark's native anchor) instead of
    the tests' quick -O1. metadata=False leaves out the signature symbols
    (`__tvm_ffi__metadata_<name>`), as apache-tvm-ffi's default build does; such a build
    registers its global functions under its own prefix, so that it can share a process with the
    others.

    Not kffi.cpp.build: these are apache-tvm-ffi libraries, built with its headers and nothing of
    kffi (kffi.cpp links every library with libkffi and kffi's headers), which the bridge tests
    need (a library that must load and run without kffi's ABI)."""
    tvm = tvm or tvm_ffi_dir()
    if tvm is None:
        raise RuntimeError("apache-tvm-ffi is not installed")
    source = source or SOURCES / f"{name}.cc"
    include = tvm / "include"
    dlpack = tvm / "3rdparty" / "dlpack" / "include"
    flags = [
        "-std=c++17",
        *(["-O3", "-DNDEBUG"] if release else ["-O1"]),
        "-fPIC",
        "-shared",
        f"-I{include}",
        f"-I{dlpack}",
    ]
    if metadata:
        flags.append("-DTVM_FFI_DLL_EXPORT_INCLUDE_METADATA=1")
    prefix = name + ("_linked" if linked else "") + ("" if metadata else "_nometa")
    if prefix != name:
        flags.append(f'-DTVM_TESTLIB_GLOBAL_PREFIX="{prefix}"')
    if linked:
        lib = tvm / "lib"
        flags += [f"-L{lib}", "-ltvm_ffi"]
        if rpath:
            flags.append(f"-Wl,-rpath,{lib}")
    headers = sorted(include.rglob("*.h"))
    # Sources a test library includes from its own folder (`#include "tvm_refl.cc"`) count too.
    included = re.findall(rb'^#include "([^"/]+)"', source.read_bytes(), flags=re.M)
    local = [(source.parent / n.decode()).read_bytes() for n in included]
    key = _digest(
        [source.read_bytes(), " ".join(flags).encode(), *local]
        + [str(h).encode() + str(h.stat().st_mtime_ns).encode() for h in headers]
    )
    flavour = ("linked" if rpath else "linked-norpath") if linked else "unlinked"
    flavour += "-release" if release else ""
    flavour += "" if metadata else "-nometa"
    out = _cache_dir() / f"lib{name}-{flavour}-{key}.so"
    if out.exists():
        return out
    tmp = out.with_suffix(f".{os.getpid()}.tmp")
    cmd = ["g++", str(source), "-o", str(tmp)] + flags
    proc = subprocess.run(cmd, check=False, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"building {out.name} failed:\n{' '.join(cmd)}\n{proc.stderr}")
    os.replace(tmp, out)
    return out


def release_dir(version: str) -> Path | None:
    """The tvm_ffi package folder of apache-tvm-ffi `version`, unpacked from its PyPI wheel into
    the cache (downloaded once), for building libraries against another release's headers; None
    when the wheel cannot be had (no network). Never installed or imported."""
    root = _cache_dir() / f"apache-tvm-ffi-{version}"
    folder = root / "tvm_ffi"
    if (folder / "include" / "tvm" / "ffi" / "c_api.h").exists():
        return folder
    wheels = root.with_name(root.name + ".download")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--quiet",
            "--no-deps",
            "--only-binary=:all:",
            f"apache-tvm-ffi=={version}",
            "-d",
            str(wheels),
        ],
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
    )
    found = sorted(wheels.glob("apache_tvm_ffi-*.whl")) if proc.returncode == 0 else []
    if not found:
        return None
    tmp = root.with_name(f"{root.name}.{os.getpid()}.tmp")
    with zipfile.ZipFile(found[0]) as z:
        members = [
            m for m in z.namelist() if m.startswith(("tvm_ffi/include/", "tvm_ffi/3rdparty/"))
        ]
        z.extractall(tmp, members)
    os.replace(tmp, root)
    return folder


def libtvm_ffi_mapped() -> bool:
    """Whether a libtvm_ffi is mapped into this process."""
    with open("/proc/self/maps") as f:
        return any("libtvm_ffi" in line for line in f)
