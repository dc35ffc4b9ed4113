"""python/kffi/toolchain/_compilers.py: which compilers make kffi's builds ($CXX, nvcc), what
they say of themselves (remembered on disk, so a cache hit starts no compiler), and the one way
commands run.
"""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import functools
import hashlib
import os
import shlex
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from typing import cast

from ._files import _write_atomic, cache_dir


class BuildError(RuntimeError):
    """A compiler or linker command failed.

    Attributes: ``command`` (the argument list), ``output`` (its stdout and stderr),
    ``returncode``, ``build_directory``.
    """

    def __init__(
        self,
        name: str,
        command: Sequence[str],
        output: str,
        returncode: int,
        build_directory: str,
    ) -> None:
        self.name = name
        self.command = list(command)
        self.output = output
        self.returncode = returncode
        self.build_directory = build_directory
        self.summary = f"Building kffi library {name!r} failed (exit status {returncode})."
        super().__init__(self._text())

    def _text(self) -> str:
        return f"{self.summary}\nCommand: {shlex.join(self.command)}\n{self.output.rstrip()}"

    def with_summary(self, summary: str) -> BuildError:
        """The same failure, its first line saying what went wrong in kffi's words."""
        e = BuildError(self.name, self.command, self.output, self.returncode, self.build_directory)
        e.summary = summary
        e.args = (e._text(),)
        return e


_invocations = 0


def get_compiler_invocations() -> int:
    """How many compiler processes (including ``--version`` probes) this process has started."""
    return _invocations


def _run(cmd: Sequence[str], cwd: str | None = None) -> subprocess.CompletedProcess[str]:
    global _invocations
    _invocations += 1
    return subprocess.run(
        cmd,
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
        check=False,
    )


@dataclass(frozen=True)
class _Compiler:
    argv: tuple[str, ...]  # e.g. ("ccache", "g++") or ("/usr/local/cuda/bin/nvcc",)
    path: str  # the resolved executable of argv[0]
    version: str  # its `--version` output


def _resolve(exe: str) -> str | None:
    found = shutil.which(exe)
    return os.path.realpath(found) if found else None


def _compiler_output(
    argv: tuple[str, ...], path: str, option: str, required: bool = False
) -> str | None:
    """`<compiler> <option>`, remembered on disk by the executable's identity.

    The identity is its path, size, mtime and inode, so that a cache hit in a fresh process starts no compiler at all. (A launcher such as
    ccache, or a script that runs another nvcc, is identified by its own file.) When the command
    fails: None, or a BuildError when required.
    """
    st = os.stat(path)
    ident = f"{shlex.join(argv)}\0{path}\0{st.st_size}\0{st.st_mtime_ns}\0{st.st_ino}"
    if option != "--version":  # the memo of --version keeps its name from before
        ident += f"\0{option}"
    memo = os.path.join(
        cache_dir(), ".compilers", hashlib.sha256(ident.encode()).hexdigest()[:24] + ".txt"
    )
    try:
        with open(memo, encoding="utf-8") as f:
            return f.read()
    except OSError:
        pass
    proc = _run([*argv, option])
    if proc.returncode != 0:
        if required:
            raise BuildError("<compiler check>", [*argv, option], proc.stdout, proc.returncode, "")
        return None
    _write_atomic(memo, proc.stdout)
    return proc.stdout


@functools.cache
def _compiler_cached(argv: tuple[str, ...], path: str, size: int, mtime_ns: int) -> _Compiler:
    version = _compiler_output(argv, path, "--version", required=True)
    return _Compiler(argv, path, cast(str, version))  # required: a failure raised


def _compiler_from(argv: tuple[str, ...], what: str, hint: str) -> _Compiler:
    path = _resolve(argv[0])
    if path is None:
        raise RuntimeError(f"kffi.cpp: cannot find the {what} {argv[0]!r} ({hint})")
    st = os.stat(path)
    return _compiler_cached(argv, path, st.st_size, st.st_mtime_ns)


def _cxx() -> _Compiler:
    argv = tuple(shlex.split(os.environ.get("CXX") or "c++"))
    return _compiler_from(argv, "C++ compiler", "set CXX")


def _cuda_homes() -> list[str]:
    homes = [os.environ.get(v) for v in ("CUDA_HOME", "CUDA_PATH")]
    return [h for h in homes if h] + ["/usr/local/cuda"]


def _nvcc_path() -> str:
    explicit = os.environ.get("KFFI_NVCC")
    if explicit:
        return explicit
    for home in _cuda_homes():
        if os.path.exists(os.path.join(home, "bin", "nvcc")):
            return os.path.join(home, "bin", "nvcc")
    return shutil.which("nvcc") or "nvcc"


def _nvcc() -> _Compiler:
    return _compiler_from((_nvcc_path(),), "CUDA compiler", "set KFFI_NVCC or CUDA_HOME")


def nvcc_available() -> bool:
    """Whether an nvcc is found (CUDA sources can be built)."""
    return _resolve(_nvcc_path()) is not None
