"""python/kffi/torch/_deploy.py: kffi ops for a C++ program with no Python (AOTInductor .pt2).

``save_ops(path, ops)`` writes the manifest ``kffi::torch::RegisterOps`` (<kffi/torch.h>,
python/kffi/torch/_register.cc) reads: per op its schema, its kffi library (path and SHA-256),
function and call plan, as kffi.torch derived them here, with the plan's records by name (type
keys and field names), never by an index of this process. ``cpp_flags()`` gives the compiler and
linker flags of a C++ program that calls RegisterOps: kffi's (kffi-config), torch's, and the
dispatcher glue library kffi.torch builds (the very kernels Python registers).
"""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import hashlib
import os
import shlex
import sys
from collections.abc import Sequence
from typing import Any

from ..toolchain.cpp import _config_flags
from . import _glue
from ._op import TorchOp, registered_ops

__all__ = ["cpp_flags", "save_ops"]

MAGIC = "kffi-torch-ops 2"


def _sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _field(value: str, what: str, op: str) -> str:
    if "\t" in value or "\n" in value or "\r" in value:
        raise ValueError(
            f"kffi.torch.save_ops: {op}: its {what} {value!r} holds a tab or a newline, which the "
            f"manifest cannot hold"
        )
    return value


def _ops_of(ops: Any) -> list[TorchOp]:
    if ops is None:
        return list(registered_ops().values())
    if isinstance(ops, TorchOp):
        return [ops]
    if hasattr(ops, "_ops") and isinstance(ops._ops, dict):  # an OpNamespace
        return list(ops._ops.values())
    if isinstance(ops, dict):
        ops = ops.values()
    out = list(ops)
    for op in out:
        if not isinstance(op, TorchOp):
            raise TypeError(
                f"kffi.torch.save_ops: expected kffi.torch ops (TorchOp, module.torch_ops(ns), or "
                f"a list of them), got {type(op).__name__}"
            )
    return out


def _line(op: TorchOp, base: str | None, glue: Any) -> str:
    origin = getattr(op.fn, "_origin", None)
    if not (isinstance(origin, tuple) and len(origin) == 2 and isinstance(origin[0], str)):
        raise ValueError(
            f"kffi.torch.save_ops: {op.qualname}: its kffi function does not come from a library "
            f"file (a Python callable, say), so a C++ program cannot load it; register a function "
            f"of kffi.load_module(path) or kffi.compile"
        )
    if op.has_autograd:
        raise ValueError(
            f"kffi.torch.save_ops: {op.qualname} has an autograd rule (register_autograd), which "
            f"is Python; kffi::torch::RegisterOps registers forward kernels only"
        )
    path, name = origin
    library = os.path.abspath(path)
    if base is not None:
        library = os.path.relpath(library, base)
    sig = op.sig
    written = [i for i, p in enumerate(sig.schema_args) if p.mutable]
    fields = [
        _field(op.qualname, "name", op.qualname),
        _field(op.schema, "schema", op.qualname),
        _field(library, "library path", op.qualname),
        _sha256(path),
        _field(name, "function name", op.qualname),
        _field(", ".join(sig.mutated), "written arguments", op.qualname),
        " ".join(map(str, written)),
        " ".join(map(str, sig.native_plan(glue.packed_dtype))),
        " ".join(_name(n, op.qualname) for n in sig.record_names),
    ]
    return "\t".join(fields)


def _name(value: str, op: str) -> str:
    """A record type key or field name of the manifest's space-separated list."""
    if not value or any(c.isspace() for c in value):
        raise ValueError(
            f"kffi.torch.save_ops: {op}: the record name {value!r} is empty or holds white "
            f"space, which the manifest cannot hold"
        )
    return value


def save_ops(path: str | os.PathLike[str], ops: Any = None, *, relative: bool = False) -> str:
    """Writes the manifest of kffi.torch ops that ``kffi::torch::RegisterOps(path)`` registers in
    a C++ program (see docs/deploy.md). ``ops``: a TorchOp, the namespace ``module.torch_ops(ns)``
    returns, a list or dict of TorchOps, or None for every op kffi.torch registered in this
    process. Each op's function must come from a library file (``kffi.load_module``,
    ``kffi.compile``); the manifest records its path and SHA-256, which RegisterOps checks. With
    ``relative=True`` the paths are relative to the manifest's folder (deploy the libraries
    beside it). Returns the path."""
    path = os.fspath(path)
    base = os.path.dirname(os.path.abspath(path)) if relative else None
    glue = _glue.glue()
    lines = [MAGIC] + [_line(op, base, glue) for op in _ops_of(ops)]
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    os.replace(tmp, path)
    return path


def cpp_flags(compile: bool = True, link: bool = True) -> list[str]:
    """The flags of a C++ program using ``<kffi/torch.h>`` and libtorch (AOTIModelPackageLoader
    included). Compile flags: C++20, torch's C++ ABI, the include folders of kffi.torch, torch and
    kffi (kffi-config's). Link flags: the dispatcher glue library (the one kffi was built with
    for this torch; the very kernels kffi.torch registers in Python), libkffi (kffi-config's), torch's libraries, each
    with its rpath; give them after the objects. The program does not link libpython."""
    import torch

    flags: list[str] = []
    if compile:
        # kffi-config's -std=c++17 fits kernel libraries; torch's headers need C++20.
        kffi_cxx = [f for f in _config_flags()["cxx"] if not f.startswith("-std=")]
        flags += [
            *_glue.torch_abi_flags(torch),
            f"-I{_glue.INCLUDE_DIR}",
            *(f"-I{p}" for p in _glue._torch_dirs()[1]),
            *kffi_cxx,
        ]
    if link:
        glue = os.path.abspath(_glue.glue().name)
        flags += [
            *_glue.libstdcxx_flags(),  # the program passes C++ objects to the glue and libtorch
            # By file name (-l:NAME), not path: the program then finds the library through its
            # rpath or LD_LIBRARY_PATH wherever it is deployed.
            f"-L{os.path.dirname(glue)}",
            f"-l:{os.path.basename(glue)}",
            f"-Wl,-rpath,{os.path.dirname(glue)}",
            *_config_flags()["link"],
            *_glue.torch_lib_dir_flags(),
            # libtorch brings libtorch_cuda where torch has CUDA (its AOTInductor runner for CUDA
            # models registers itself there): kept even by a linker that drops unused libraries.
            "-Wl,--no-as-needed",
            "-ltorch",
            "-Wl,--as-needed",
            "-ltorch_cpu",
            "-lc10",
        ]
    return flags


_USAGE = "usage: python -m kffi.torch [--cxxflags] [--ldflags]"


def main(argv: Sequence[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else list(argv)
    if not args or any(a not in ("--cxxflags", "--ldflags") for a in args):
        print(_USAGE, file=sys.stderr)
        return 2
    flags = cpp_flags(compile="--cxxflags" in args, link="--ldflags" in args)
    print(" ".join(shlex.quote(f) for f in flags))
    return 0
