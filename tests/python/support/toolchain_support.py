"""tests/python/support/toolchain_support.py: search paths that lack a tool, for tests of what users
get where a tool is missing: a C++ compiler (a serving container) or Python (a C++ build
machine)."""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import os
import shutil
from pathlib import Path

# What building a C++ program with CMake runs, besides CMake: the compiler driver, the assembler
# and linker it calls by name, and a build tool.
_BUILD_TOOLS = ("c++", "g++", "cc", "gcc", "as", "ld", "ld.bfd", "ld.gold", "ninja", "make")


def real_cmake() -> str | None:
    """CMake's own executable: PyPI's cmake package installs a Python script named cmake, which
    needs the Python a test removes."""
    exe = shutil.which("cmake")
    if exe is None:
        return None
    with open(exe, "rb") as f:
        if f.read(2) != b"#!":
            return os.path.realpath(exe)
    try:
        import cmake  # the PyPI package: its binary lives in CMAKE_BIN_DIR

        return os.path.join(cmake.CMAKE_BIN_DIR, "cmake")
    except (ImportError, AttributeError):
        return None


def path_without_python(folder: Path) -> str:
    """A PATH of one folder holding links to the build tools and CMake, and no Python."""
    folder.mkdir(parents=True, exist_ok=True)
    tools = {name: shutil.which(name) for name in _BUILD_TOOLS}
    tools["cmake"] = real_cmake()
    for name, exe in tools.items():
        if exe is not None and not (folder / name).exists():
            (folder / name).symlink_to(os.path.realpath(exe))
    assert not any(folder.glob("python*")), "a python in the no-Python PATH"
    return str(folder)


def env_without_python(folder: Path) -> dict[str, str]:
    """The environment of a C++ build with no Python: HOME, PATH (path_without_python) and, where
    CUDA's compiler is installed, CUDACXX (torch's CMake package enables CUDA for a CUDA torch)."""
    env = {"HOME": os.environ.get("HOME", "/"), "PATH": path_without_python(folder)}
    nvcc = shutil.which("nvcc") or next(
        (
            p
            for p in (
                os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "bin", "nvcc"),
                "/usr/local/cuda/bin/nvcc",
            )
            if os.path.exists(p)
        ),
        None,
    )
    if nvcc is not None:
        env["CUDACXX"] = os.path.realpath(nvcc)
    return env


def env_without_compiler(folder: Path, **extra: str) -> dict[str, str]:
    """The environment of a process with no C++ compiler: PATH is an empty folder, and CC/CXX
    name files that do not exist (kffi's builds read them first)."""
    folder.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k not in ("CC", "CXX", "CUDACXX", "NVCC")}
    env.update(PATH=str(folder), CXX=str(folder / "no-c++"), CC=str(folder / "no-cc"), **extra)
    return env
