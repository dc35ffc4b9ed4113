"""python/kffi/tvm/_bridge.py: kffi and apache-tvm-ffi in one process (docs/tvm_ffi.md).

Loading libraries built for the TVM-FFI ABI needs nothing from Python: kffi's loader does it.
This module adds the Python side of the other direction, kffi values handed to ``tvm_ffi``:

- ``kffi.Function`` and ``kffi.Tensor`` implement ``__tvm_ffi_object__``, the protocol tvm_ffi
  reads from its arguments, so a kffi function can go wherever a ``tvm_ffi.Function`` is taken
  (``jax_tvm_ffi.register_ffi_target`` included) and a tensor crosses as the same object. A
  function is wrapped so that TVM-FFI callers get its errors in their runtime's slot and their
  environment stream and allocator inside it.
- ``kffi.Array``/``List``/``Shape`` and ``kffi.Map``/``Dict`` implement ``__tvm_ffi_value__``
  (a tuple, a dict): tvm_ffi then builds its own containers (maps have different layouts in the
  two runtimes, so they are rebuilt rather than shared).

tvm_ffi values handed to kffi go through kffi's usual conversions: a ``tvm_ffi.Function`` is a
callable, a ``tvm_ffi.Tensor`` a DLPack tensor.

It also hands kffi's extension two answers of the bridge (install_bridge_hooks): which parameters
of a TVM-FFI function take owning Tensors (there, framework tensors are passed as Tensors that
hold them), and the type key of an object whose type belongs to apache-tvm-ffi's registry.

Importing this module does not import tvm_ffi: the protocol methods are only called by tvm_ffi.
"""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import ctypes
import importlib.util
import os
from collections.abc import Callable
from typing import Any

from .. import libinfo
from .._lazy import lazy
from ..runtime import _hooks
from ..runtime._objects import Array, Dict, Function, Map, Object, Shape, Tensor

_ERR_SIZE = 1024

# Python exception classes for the kinds the bridge reports.
_KINDS = {"TypeError": TypeError, "ValueError": ValueError, "RuntimeError": RuntimeError}


@lazy
def _bridge() -> ctypes.CDLL:
    """libkffi_tvm, the bridge kffi's loader uses (the same loaded object)."""
    lib = ctypes.CDLL(os.path.join(libinfo.lib_dir(), "libkffi_tvm.so"))
    lib.KFFITvmInstall.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
    lib.KFFITvmInstall.restype = ctypes.c_int
    lib.KFFITvmExportObject.argtypes = [
        ctypes.c_void_p,
        ctypes.POINTER(ctypes.c_void_p),
        ctypes.c_char_p,
        ctypes.c_size_t,
    ]
    lib.KFFITvmExportObject.restype = ctypes.c_int
    lib.KFFITvmRealRuntimeLoaded.argtypes = []
    lib.KFFITvmRealRuntimeLoaded.restype = ctypes.c_int
    lib.KFFITvmSetInstalledRuntime.argtypes = [ctypes.c_char_p]
    lib.KFFITvmSetInstalledRuntime.restype = None
    _install_hooks(lib)
    return lib


def _install_hooks(lib: ctypes.CDLL) -> None:
    address = ctypes.cast(lib.KFFITvmFunctionOwnedTensorArgs, ctypes.c_void_p).value
    types = ctypes.cast(lib.KFFITvmForeignTypeInfo, ctypes.c_void_p).value
    assert address is not None and types is not None  # functions of a loaded library
    Object._install_tvm_bridge(address, types)


def install_bridge_hooks() -> None:
    """Hands kffi's extension the bridge's answers once libkffi_tvm is in the process (kffi's
    loader opens it with the first TVM-FFI library; before that no TVM-FFI function or object can
    exist): then functions wrapped from here on know which parameters take owning Tensors. Called
    before a module's functions are looked up; a flag test once done (the bridge's loading
    installs them)."""
    if _bridge.done:
        return
    try:  # loaded already? (RTLD_NOLOAD: never loads it)
        ctypes.CDLL(os.path.join(libinfo.lib_dir(), "libkffi_tvm.so"), mode=_NOLOAD)
    except OSError:
        return
    _bridge()


_NOLOAD = getattr(os, "RTLD_NOLOAD", 4) | getattr(os, "RTLD_LAZY", 1)


def _raise_from(buf: ctypes.Array[ctypes.c_char]) -> None:
    kind, _, message = buf.value.decode("utf-8", "replace").partition(": ")
    raise _KINDS.get(kind, RuntimeError)(message)


@lazy
def _object_from_address() -> Callable[[int | None], Any]:
    """tvm_ffi's `kffi.object_from_address` global (registered once by the bridge)."""
    import tvm_ffi

    buf = ctypes.create_string_buffer(_ERR_SIZE)
    if _bridge().KFFITvmInstall(buf, _ERR_SIZE) != 0:
        _raise_from(buf)
    from_address: Callable[[int | None], Any] = tvm_ffi.get_global_func("kffi.object_from_address")
    return from_address


def to_tvm_ffi(obj: Function | Tensor) -> Any:
    """The tvm_ffi object for a kffi Function or Tensor (cached on obj)."""
    peer = getattr(obj, "_tvm_ffi_peer", None)
    if peer is not None:
        return peer
    from_address = _object_from_address()
    out = ctypes.c_void_p()
    buf = ctypes.create_string_buffer(_ERR_SIZE)
    if _bridge().KFFITvmExportObject(obj._handle, ctypes.byref(out), buf, _ERR_SIZE) != 0:
        _raise_from(buf)
    peer = from_address(out.value)  # takes the reference the bridge handed out
    Object._store_attr(obj, "_tvm_ffi_peer", peer)
    return peer


def _tvm_ffi_object(self: Function | Tensor) -> Any:
    return to_tvm_ffi(self)


def _seq_value(self: Array | Shape) -> tuple[Any, ...]:
    return tuple(self)


def _map_value(self: Map) -> dict[Any, Any]:
    return dict(self.items())


# The protocol methods tvm_ffi looks up on the classes (the runtime's classes know nothing of
# tvm_ffi: this layer adds them).
_PROTOCOL: tuple[tuple[type[Object], str, Callable[[Any], Any]], ...] = (
    (Function, "__tvm_ffi_object__", _tvm_ffi_object),
    (Tensor, "__tvm_ffi_object__", _tvm_ffi_object),
    (Array, "__tvm_ffi_value__", _seq_value),  # List inherits it
    (Shape, "__tvm_ffi_value__", _seq_value),
    (Map, "__tvm_ffi_value__", _map_value),  # Dict inherits it
    (Dict, "__tvm_ffi_value__", _map_value),
)
for _cls, _name, _impl in _PROTOCOL:
    setattr(_cls, _name, _impl)
del _cls, _name, _impl


@lazy
def note_installed_runtime() -> None:
    """Tells kffi's loader (once) where the installed apache-tvm-ffi's libtvm_ffi.so is, so that a
    TVM-FFI library that must run on it finds it without ``import tvm_ffi``: one linked with
    -ltvm_ffi that the dynamic loader cannot resolve, and one built with apache-tvm-ffi's C++
    headers, whose process-wide type-index statics must hold apache-tvm-ffi's numbers
    (docs/tvm_ffi.md, "Which runtime a library runs on"). Nothing is loaded here. Skipped when
    KFFI_TVM_RUNTIME is set (the loader reads it) or apache-tvm-ffi is not installed."""
    path = None
    if not os.environ.get("KFFI_TVM_RUNTIME"):
        spec = importlib.util.find_spec("tvm_ffi")
        for folder in (spec.submodule_search_locations or []) if spec else []:
            candidate = os.path.join(folder, "lib", "libtvm_ffi.so")
            if os.path.exists(candidate):
                path = candidate
                break
    if path is not None:
        _bridge().KFFITvmSetInstalledRuntime(os.fsencode(path))


# The runtime's loader calls these (it imports no higher layer): before a library loads, and
# before a module's function is wrapped.
_hooks.before_load.append(note_installed_runtime)
_hooks.before_lookup.append(install_bridge_hooks)
