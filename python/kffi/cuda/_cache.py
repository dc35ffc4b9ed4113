"""python/kffi/cuda/_cache.py: the content-addressed cache of NVRTC output, on disk and in memory.

Key: SHA-256 of the source, the kernel name expressions, the archs, the options, NVRTC's version
and kffi's version. Value: one bundle file (its own key, every arch's image, the lowered names,
the log: a bundle copied under another key's name, record and all, is not that key's) under
``<kffi cache>/nvrtc/`` (kffi.cpp.cache_dir(): ``$KFFI_CACHE_DIR`` ...), written by an atomic
rename with kffi.cpp's size + SHA-256 record beside it, and built under kffi.cpp's file lock so
that processes asking at once compile once. ``$KFFI_CUDA_PREBUILT`` lists read-only cache roots
(``os.pathsep``-separated, laid out as a cache root) searched first: a deployment ships one made
by :func:`kffi.cuda.precompile` and compiles nothing at boot.
"""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import hashlib
import json
import os
import struct
import threading
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

from .. import _core
from ..toolchain import cpp as _cpp
from ..toolchain._files import _cache_entry_intact, _keep_record, _locked, _write_atomic

_SCHEMA = "kffi.cuda/1"
_MAGIC = b"KFFICUDA2\n"  # 2: the header holds the key
# key -> (compile result, path of its bundle or None)
_memory: dict[str, tuple[dict[str, Any], str | None]] = {}
_memory_lock = threading.Lock()
_compiles = 0


def compile_count() -> int:
    """How many NVRTC programs (each for all its archs) this process has compiled."""
    return _compiles


def cache_key(
    source: str,
    name_expressions: Iterable[str],
    archs: Iterable[str],
    options: Iterable[str],
    nvrtc_version: Iterable[int],
) -> str:
    ident = {
        "schema": _SCHEMA,
        "source": source,
        "names": list(name_expressions),
        "archs": list(archs),
        "options": list(options),
        "nvrtc": list(nvrtc_version),
        "kffi": list(_core.runtime_version()),
    }
    return hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()


def pack(result: dict[str, Any], key: str) -> bytes:
    images = result["images"]
    header: dict[str, Any] = {
        "key": key,
        "lowered": result["lowered"],
        "log": result["log"],
        "images": [],
    }
    blobs: list[bytes] = []
    offset = 0
    for arch, data in images.items():
        header["images"].append({"arch": arch, "offset": offset, "size": len(data)})
        blobs.append(data)
        offset += len(data)
    h = json.dumps(header).encode()
    return _MAGIC + struct.pack("<Q", len(h)) + h + b"".join(blobs)


def unpack(data: bytes, key: str) -> dict[str, Any] | None:
    """The bundle's contents; None when the bytes are not a whole bundle of this key."""
    try:
        if not data.startswith(_MAGIC):
            return None
        (n,) = struct.unpack_from("<Q", data, len(_MAGIC))
        start = len(_MAGIC) + 8
        header = json.loads(data[start : start + n])
        if header.get("key") != key:
            return None  # what was hashed, what is checked and what runs are the same bytes
        base = start + n
        images: dict[str, bytes] = {}
        for im in header["images"]:
            lo, size = base + int(im["offset"]), int(im["size"])
            if lo + size > len(data):
                return None
            images[str(im["arch"])] = data[lo : lo + size]
        return {"images": images, "lowered": dict(header["lowered"]), "log": str(header["log"])}
    except (ValueError, KeyError, TypeError, struct.error):
        return None


def _file_name(name: str, key: str) -> str:
    safe = "".join(c if c.isalnum() or c == "_" else "_" for c in name)[:40] or "kernel"
    return f"{safe}_{key[:32]}.kcubin"


def prebuilt_roots() -> list[str]:
    return [p for p in os.environ.get("KFFI_CUDA_PREBUILT", "").split(os.pathsep) if p]


def _read(path: str, key: str) -> dict[str, Any] | None:
    if not _cache_entry_intact(path):
        return None
    try:
        with open(path, "rb") as f:
            return unpack(f.read(), key)
    except OSError:
        return None


class _LockSite(NamedTuple):
    """Names the lock of a cache entry for kffi.cpp's file lock (``<dir>/.<name>_<hash>.lock``)."""

    dir: str
    name: str
    hash: str


def lookup_or_compile(
    name: str,
    key: str,
    compile_fn: Callable[[], dict[str, Any]],
    cache_root: str | None = None,
    use_cache: bool = True,
) -> tuple[dict[str, Any], str | None]:
    """The compile result for key: from memory, a prebuilt root, the disk cache, else compile_fn()
    (then stored). With cache_root (a cache to fill, e.g. for shipping), the entry is made there
    whatever else holds it. Returns (result, path or None)."""
    global _compiles
    if not use_cache:
        _compiles += 1
        return compile_fn(), None
    with _memory_lock:
        hit = _memory.get(key)
    if hit is not None and cache_root is None:
        return hit
    fname = _file_name(name, key)
    if cache_root is None:
        for root in prebuilt_roots():
            path = os.path.join(root, "nvrtc", fname)
            res = _read(path, key)
            if res is not None:
                with _memory_lock:
                    _memory[key] = (res, path)
                return res, path
    d = os.path.join(cache_root or _cpp.cache_dir(), "nvrtc")
    path = os.path.join(d, fname)
    res = _read(path, key)
    if res is None:
        plan = _LockSite(dir=d, name=fname[: -len(".kcubin")], hash="lock")
        with _locked(plan, _cpp._quiet(None)):
            res = _read(path, key)  # another process may have compiled it while this one waited
            if res is None:
                if hit is not None:
                    res = hit[0]  # compiled in this process already: only written here
                else:
                    _compiles += 1
                    res = compile_fn()
                _write_atomic(path, pack(res, key))
                _keep_record(path)
    if cache_root is None or hit is None:
        with _memory_lock:
            _memory.setdefault(key, (res, path))
    return res, path


def clear_memory_cache() -> None:
    """Forgets the in-memory entries (the disk cache stays)."""
    with _memory_lock:
        _memory.clear()
