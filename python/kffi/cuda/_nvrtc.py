"""python/kffi/cuda/_nvrtc.py: NVRTC through ctypes: find libnvrtc, compile CUDA source to cubins
and PTX for several archs, and turn its failures into NVRTCError with the log.

libnvrtc comes from the ``nvidia-cuda-nvrtc`` wheel, else the toolkit (``$CUDA_HOME``, the
dynamic loader's path); ``$KFFI_NVRTC_LIBRARY`` names one explicitly. Nothing here runs at
``import kffi``: the library is opened on the first compile.
"""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import contextlib
import ctypes
import glob
import hashlib
import os
import re
import sys
import threading
from collections.abc import Sequence
from typing import Any

from .._lazy import lazy
from ..toolchain._files import _write_atomic
from ..toolchain.cpp import BuildError

__all__ = ["NVRTCError", "compile_images", "normalize_arch", "nvrtc_library", "nvrtc_version"]


class NVRTCError(BuildError):
    """NVRTC could not compile the source. ``log`` is NVRTC's log (file:line: error ...),
    ``errors`` the (line, message) pairs of its errors, ``arch`` the target that failed."""

    def __init__(self, name: str, arch: str, options: list[str], log: str, status: str) -> None:
        self.log = log
        self.arch = arch
        self.errors = [
            (int(m.group(1)), m.group(2).strip())
            for m in re.finditer(r"\((\d+)\): (?:catastrophic )?error: (.*)", log)
        ]
        super().__init__(name, ["nvrtc", *options], log, 1, "")
        self.args = (
            f"NVRTC failed to compile {name!r} for {arch} ({status}).\n"
            f"Options: {' '.join(options)}\n{log.rstrip()}",
        )

    def __str__(self) -> str:
        return str(self.args[0])


_lock = threading.Lock()


def _wheel_candidates() -> list[str]:
    try:
        import nvidia  # the namespace package of NVIDIA's wheels
    except ImportError:
        return []
    found: list[str] = []
    for root in list(getattr(nvidia, "__path__", [])):
        for sub in ("cu13/lib", "cu12/lib", "cuda_nvrtc/lib"):
            found += sorted(glob.glob(os.path.join(root, sub, "libnvrtc.so.*[0-9]")), reverse=True)
    return [p for p in found if "builtins" not in os.path.basename(p)]


def _toolkit_candidates() -> list[str]:
    found: list[str] = []
    for var in ("CUDA_HOME", "CUDA_PATH"):
        home = os.environ.get(var)
        if home:
            for sub in ("lib64", "lib", "targets/x86_64-linux/lib"):
                found += sorted(glob.glob(os.path.join(home, sub, "libnvrtc.so*")), reverse=True)
    found += sorted(glob.glob("/usr/local/cuda/lib64/libnvrtc.so*"), reverse=True)
    return [p for p in found if "builtins" not in os.path.basename(p) and "alt" not in p]


def _candidates() -> list[str]:
    explicit = os.environ.get("KFFI_NVRTC_LIBRARY")
    found = [explicit] if explicit else []
    found += _wheel_candidates() + _toolkit_candidates()
    return found + ["libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"]


@lazy
def nvrtc_library() -> tuple[ctypes.CDLL, str]:
    """(ctypes library, path) of libnvrtc; RuntimeError naming what was tried when none loads."""
    tried = []
    for path in _candidates():
        try:
            lib = ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
        except OSError as e:
            tried.append(f"{path}: {e}")
            continue
        _declare(lib)
        return lib, path
    raise RuntimeError(
        "kffi.cuda: cannot find NVRTC (libnvrtc). Install it with `pip install nvidia-cuda-nvrtc`"
        ", or set CUDA_HOME to a CUDA toolkit, or KFFI_NVRTC_LIBRARY to the library's path. "
        "Tried:\n  " + "\n  ".join(tried)
    )


def _declare(lib: ctypes.CDLL) -> None:
    p, i, sz, cp = ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t, ctypes.c_char_p
    sigs = {
        "nvrtcVersion": [ctypes.POINTER(i), ctypes.POINTER(i)],
        "nvrtcCreateProgram": [
            ctypes.POINTER(p),
            cp,
            cp,
            i,
            ctypes.POINTER(cp),
            ctypes.POINTER(cp),
        ],
        "nvrtcDestroyProgram": [ctypes.POINTER(p)],
        "nvrtcCompileProgram": [p, i, ctypes.POINTER(cp)],
        "nvrtcAddNameExpression": [p, cp],
        "nvrtcGetLoweredName": [p, cp, ctypes.POINTER(cp)],
        "nvrtcGetProgramLogSize": [p, ctypes.POINTER(sz)],
        "nvrtcGetProgramLog": [p, ctypes.c_char_p],
        "nvrtcGetCUBINSize": [p, ctypes.POINTER(sz)],
        "nvrtcGetCUBIN": [p, ctypes.c_char_p],
        "nvrtcGetPTXSize": [p, ctypes.POINTER(sz)],
        "nvrtcGetPTX": [p, ctypes.c_char_p],
        "nvrtcGetNumSupportedArchs": [ctypes.POINTER(i)],
        "nvrtcGetSupportedArchs": [ctypes.POINTER(i)],
    }
    for name, args in sigs.items():
        fn = getattr(lib, name)
        fn.argtypes = args
        fn.restype = ctypes.c_int
    lib.nvrtcGetErrorString.argtypes = [ctypes.c_int]
    lib.nvrtcGetErrorString.restype = ctypes.c_char_p


def _loaded_version() -> tuple[int, int]:
    lib, _ = nvrtc_library()
    major, minor = ctypes.c_int(0), ctypes.c_int(0)
    _check(lib, lib.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor)), "nvrtcVersion")
    return (major.value, minor.value)


@lazy
def nvrtc_version() -> tuple[int, int]:
    """NVRTC's (major, minor). Remembered in kffi's cache with the library's path, size and mtime
    (per Python prefix and NVRTC settings), so that a process whose compiles all hit the cache
    neither searches for the library nor opens it (~25 ms)."""
    from ..toolchain import cpp as _cpp

    where = "\0".join(
        [sys.prefix]
        + [os.environ.get(v, "") for v in ("KFFI_NVRTC_LIBRARY", "CUDA_HOME", "CUDA_PATH")]
    )
    record = os.path.join(
        _cpp.cache_dir(), ".compilers", "nvrtc-" + hashlib.sha256(where.encode()).hexdigest()[:24]
    )
    try:
        with open(record, "rb") as f:  # bytes: no codec module to import on a warm start
            path, size, mtime, major, minor = f.read(4096).decode("utf-8").split("\n")[:5]
        st = os.stat(path)
        if str(st.st_size) == size and str(st.st_mtime_ns) == mtime:
            return (int(major), int(minor))
    except (OSError, ValueError):
        pass
    version = _loaded_version()
    _, path = nvrtc_library()
    if os.path.isabs(path):
        with contextlib.suppress(OSError):
            st = os.stat(path)
            _write_atomic(
                record, f"{path}\n{st.st_size}\n{st.st_mtime_ns}\n{version[0]}\n{version[1]}\n"
            )
    return version


@lazy
def supported_archs() -> tuple[int, ...]:
    """The real architectures (as ints: 75, 80, 90, 100, ...) this NVRTC generates code for."""
    lib, _ = nvrtc_library()
    n = ctypes.c_int(0)
    _check(lib, lib.nvrtcGetNumSupportedArchs(ctypes.byref(n)), "nvrtcGetNumSupportedArchs")
    arr = (ctypes.c_int * n.value)()
    _check(lib, lib.nvrtcGetSupportedArchs(arr), "nvrtcGetSupportedArchs")
    return tuple(arr)


def _check(lib: ctypes.CDLL, rc: int, what: str) -> None:
    if rc != 0:
        msg = lib.nvrtcGetErrorString(rc).decode("utf-8", "replace")
        raise RuntimeError(f"kffi.cuda: {what} failed: {msg}")


_ARCH = re.compile(r"(sm|compute)_(\d{2,3})([af]?)")


def normalize_arch(arch: object) -> str:
    """ "sm_90", "sm_90a", "compute_90" (PTX), from those or "90", "9.0", "90a"; ValueError else."""
    if isinstance(arch, int) and not isinstance(arch, bool):
        arch = str(arch)
    if not isinstance(arch, str):
        raise TypeError(f"kffi.cuda: an arch is a str such as 'sm_90', got {type(arch).__name__}")
    a = arch.strip().lower()
    if re.fullmatch(r"\d{1,2}\.\d[af]?", a):
        a = a.replace(".", "")
    if re.fullmatch(r"\d{2,3}[af]?", a):
        a = "sm_" + a
    if not _ARCH.fullmatch(a):
        raise ValueError(
            f"kffi.cuda: cannot read the arch {arch!r} (expected e.g. 'sm_80', 'sm_90a', "
            "'sm_100f' or 'compute_90' for PTX)"
        )
    return a


def compile_images(
    source: str,
    name: str,
    name_expressions: Sequence[str],
    archs: Sequence[str],
    options: Sequence[str],
) -> dict[str, Any]:
    """Compiles source once per arch. Returns {"images": {arch: bytes}, "lowered": {expr: name},
    "log": str}; NVRTCError on a compile error."""
    lib, _ = nvrtc_library()
    supported = supported_archs()
    images: dict[str, bytes] = {}
    lowered: dict[str, str] = {}
    logs: list[str] = []
    for arch in archs:
        m = _ARCH.fullmatch(arch)
        assert m is not None  # the caller normalized it (normalize_arch)
        if int(m.group(2)) not in supported:
            raise ValueError(
                f"kffi.cuda: NVRTC {'.'.join(map(str, nvrtc_version()))} cannot target {arch}; "
                f"it supports sm_{', sm_'.join(map(str, supported))}"
            )
        opts = [f"--gpu-architecture={arch}", *options]
        prog = ctypes.c_void_p()
        _check(
            lib,
            lib.nvrtcCreateProgram(
                ctypes.byref(prog), source.encode(), f"{name}.cu".encode(), 0, None, None
            ),
            "nvrtcCreateProgram",
        )
        try:
            for expr in name_expressions:
                _check(
                    lib, lib.nvrtcAddNameExpression(prog, expr.encode()), "nvrtcAddNameExpression"
                )
            argv = (ctypes.c_char_p * len(opts))(*[o.encode() for o in opts])
            with _lock:  # NVRTC is thread-safe, but one compile at a time keeps memory bounded
                rc = lib.nvrtcCompileProgram(prog, len(opts), argv)
            size = ctypes.c_size_t(0)
            lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
            buf = ctypes.create_string_buffer(size.value)
            lib.nvrtcGetProgramLog(prog, buf)
            log = buf.value.decode("utf-8", "replace")
            if rc != 0:
                status = lib.nvrtcGetErrorString(rc).decode("utf-8", "replace")
                raise NVRTCError(name, arch, opts, log, status)
            if log.strip():
                logs.append(f"[{arch}]\n{log}")
            if arch.startswith("sm_"):
                get_size, get = lib.nvrtcGetCUBINSize, lib.nvrtcGetCUBIN
            else:
                get_size, get = lib.nvrtcGetPTXSize, lib.nvrtcGetPTX
            get_size(prog, ctypes.byref(size))
            out = ctypes.create_string_buffer(size.value)
            _check(lib, get(prog, out), "reading NVRTC's output")
            data = out.raw
            if not arch.startswith("sm_"):
                data = data.rstrip(b"\0")
            images[arch] = data
            for expr in name_expressions:
                low = ctypes.c_char_p()
                _check(
                    lib,
                    lib.nvrtcGetLoweredName(prog, expr.encode(), ctypes.byref(low)),
                    f"nvrtcGetLoweredName({expr!r})",
                )
                assert low.value is not None  # nvrtcGetLoweredName succeeded
                lowered[expr] = low.value.decode()
        finally:
            lib.nvrtcDestroyProgram(ctypes.byref(prog))
    return {"images": images, "lowered": lowered, "log": "\n".join(logs)}
