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

It also opens the bridge (libkffi_tvm) in kffi's extension once it is in the process
(install_bridge_hooks): the extension calls it through one typed table, whose errors arrive as
kffi's errors. Then the extension knows which parameters of a TVM-FFI function take owning Tensors
(there, framework tensors are passed as Tensors that hold them), the type key of an object whose
type belongs to apache-tvm-ffi's registry, and that type's fields and methods: each such type gets
a class, made here once, with one descriptor per field (docs/tvm_ffi.md, "Reflected objects").

Importing this module does not import tvm_ffi: the protocol methods are only called by tvm_ffi.
"""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable
from typing import Any

from .. import _core, _reflection, libinfo
from .._lazy import lazy
from ..runtime import _hooks
from ..runtime._objects import Array, Dict, Function, Map, Object, Shape, Tensor


def _bridge_path() -> str:
    return os.path.join(libinfo.lib_dir(), "libkffi_tvm.so")


@lazy
def _bridge() -> None:
    """libkffi_tvm's table in kffi's extension (the loaded object kffi's loader uses)."""
    _core._tvm_bridge_open(_bridge_path(), True)


def install_bridge_hooks() -> None:
    """Opens the bridge in kffi's extension once libkffi_tvm is in the process (kffi's loader
    opens it with the first TVM-FFI library; before that no TVM-FFI function or object can
    exist): then functions wrapped from here on know which parameters take owning Tensors, and
    objects of apache-tvm-ffi's types get their classes. Called before a module's functions are
    looked up; a flag test once done."""
    if _bridge.done:
        return
    if _core._tvm_bridge_open(_bridge_path(), False):  # loaded already? (never loads it)
        _bridge()


def _prepare_foreign(cls: type[Any], index: int) -> None:
    """Fields (descriptors), methods the class does not define itself, and the structural flag
    of apache-tvm-ffi's type index on cls; registers cls as the type's class."""
    _key, structural, fields, methods, parent_key = _core._tvm_foreign_reflection(index)
    cls._kffi_fields = tuple(name for name, _writable, _compared in fields)
    # Fields the type leaves out of structural ==/hash (SEqHashIgnore, CompareOff) are not here.
    cls._kffi_compared = tuple(name for name, _writable, is_compared in fields if is_compared)
    cls._kffi_structural = structural
    # The methods list holds the ancestors' too: those of the parent, whose class cls derives from,
    # come by inheritance (with any overrides that class has).
    inherited: set[str] = set()
    parent = _core._tvm_foreign_index(parent_key) if parent_key is not None else None
    if parent is not None and _foreign_classes.get(parent) in cls.__mro__[1:]:
        inherited = {m[0] for m in _core._tvm_foreign_reflection(parent)[3]}
    for name, fn, is_static in methods:
        if name in inherited:
            continue
        if name not in cls.__dict__ or getattr(cls.__dict__[name], "_kffi_native", False):
            m: Any = staticmethod(fn) if is_static else _reflection._method(fn, name)
            if not is_static:
                m._kffi_native = True
            setattr(cls, name, m)
    _core._tvm_foreign_install(cls, index)
    _foreign_classes[index] = cls


# The class of each foreign type index that has one (made here, or named by register_object).
_foreign_classes: dict[int, type] = {}
_MAX_DEPTH = 256


def _foreign_class_for(index: int) -> type:
    """Called by the extension for the first object of a type of apache-tvm-ffi's registry: a
    class that derives from its parent type's class (made first, root first, where missing), so
    isinstance follows the TVM type hierarchy."""
    with _reflection._lock:
        missing = [index]  # this type, then the ancestors without a class, nearest first
        base: type = _reflection.ReflectedObject
        while True:
            if len(missing) > _MAX_DEPTH:  # the bridge refuses deeper ancestor lists already
                raise ValueError(f"kffi: foreign type index {index}: ancestors deeper than 256")
            parent_key = _core._tvm_foreign_reflection(missing[-1])[4]
            parent = _core._tvm_foreign_index(parent_key) if parent_key is not None else None
            if parent is None:
                break
            if parent in _foreign_classes:
                base = _foreign_classes[parent]
                break
            missing.append(parent)
        for at in reversed(missing):
            if at in _foreign_classes:  # the class of index itself, made since the call began
                base = _foreign_classes[at]
                continue
            base = _reflection.class_named(_core._tvm_foreign_reflection(at)[0], base)
            _prepare_foreign(base, at)
        return base


def _register_foreign(type_key: str, cls: type) -> bool:
    """kffi.register_object for a type key of the loaded apache-tvm-ffi's registry: False when
    the key is not one (no apache-tvm-ffi loaded, or it lacks the key)."""
    install_bridge_hooks()
    if not _bridge.done:
        return False
    index = _core._tvm_foreign_index(type_key)
    if index is None:
        return False
    with _reflection._lock:
        _reflection._adopt_reflected_methods(cls)
        _prepare_foreign(cls, index)
    return True


_core._tvm_set_foreign_class_hook(_foreign_class_for)
_reflection._foreign_registrars.append(_register_foreign)


@lazy
def _object_from_address() -> Callable[[int | None], Any]:
    """tvm_ffi's `kffi.object_from_address` global (registered once by the bridge)."""
    import tvm_ffi

    _bridge()
    _core._tvm_install()
    from_address: Callable[[int | None], Any] = tvm_ffi.get_global_func("kffi.object_from_address")
    return from_address


def to_tvm_ffi(obj: Function | Tensor) -> Any:
    """The tvm_ffi object for a kffi Function or Tensor (cached on obj)."""
    peer = getattr(obj, "_tvm_ffi_peer", None)
    if peer is not None:
        return peer
    from_address = _object_from_address()
    address = _core._tvm_export_object(obj)
    peer = from_address(address)  # takes the reference the bridge handed out
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
        _bridge()
        _core._tvm_set_installed_runtime(os.fsencode(path))


# The runtime's loader calls these (it imports no higher layer): before a library loads, and
# before a module's function is wrapped.
_hooks.before_load.append(note_installed_runtime)
_hooks.before_lookup.append(install_bridge_hooks)
