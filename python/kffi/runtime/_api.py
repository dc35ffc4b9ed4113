"""python/kffi/runtime/_api.py: the runtime's functions: loading libraries, the global function
registry, conversions, the version and the runtime's limits (re-exported by the package face)."""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from .. import _core
from . import _hooks
from ._objects import Function, Module

__version__: str = "{}.{}.{}".format(*_core.runtime_version()[:3])
ABI_VERSION: int = _core.runtime_version()[3]

# Containers (tuples, lists, dicts) convert nested at most this deep, either way; deeper input is
# a RecursionError whatever sys.getrecursionlimit() says (the C stack is the limit), and deeper
# Array results stay kffi.Array objects below that level instead of becoming tuples.
MAX_CONTAINER_DEPTH: int = _core.MAX_CONTAINER_DEPTH

from_dlpack = _core.from_dlpack
set_default_release_gil = _core.set_default_release_gil
get_default_release_gil = _core.get_default_release_gil
list_global_func_names = _core.list_global_func_names
remove_global_func = _core.remove_global_func
check_signals = _core.check_signals

_F = TypeVar("_F", bound=Callable[..., Any])


def get_global_func(name: str, allow_missing: bool = False) -> Function | None:
    """The global function registered under ``name``.

    Raises ValueError when there is none, unless ``allow_missing`` (then returns None).
    """
    f = _core.get_global_func(name)
    if f is None and not allow_missing:
        raise ValueError(f"Global function {name!r} is not registered")
    if f is not None:
        f.__name__ = name
    return f


def register_global_func(name: str, func: Any = None, override: bool = False) -> Any:
    """Registers a Python callable (or a kffi.Function) as a global function, callable from C++.

    Also a decorator: ``@kffi.register_global_func("my.add")``.
    """

    def do_register(f: _F) -> _F:
        _core.register_global_func(name, f, override)
        return f

    return do_register if func is None else do_register(func)


def load_module(path: str | bytes | os.PathLike[str] | os.PathLike[bytes]) -> Module:
    """Loads a kernel library: built with kffi/export.h, or for the TVM-FFI ABI (docs/tvm_ffi.md)."""
    path = os.fspath(path)
    if "\0" in (path if isinstance(path, str) else path.decode("utf-8", "replace")):
        # Cut at the NUL, the path would name another file.
        raise ValueError(f"Cannot load module: the path {path!r} contains a NUL byte")
    if not os.path.exists(path):
        raise FileNotFoundError(f"Cannot load kffi module: no such file {path!r}")
    for hook in _hooks.before_load:  # kffi.tvm: where apache-tvm-ffi's runtime is
        hook()
    # A bytes path goes on as it is: the extension's TypeError names it ("path must be a str").
    full = os.path.abspath(path)
    before = _file_identity(full)
    module = _core.load_module(full)  # type: ignore[arg-type]
    if isinstance(full, str) and before is not None:
        # The file as it was when its code was loaded (the first load: a path loaded again is
        # the same code); unknown when it changed while loading.
        with _loaded_lock:
            _loaded_files.setdefault(full, before if _file_identity(full) == before else None)
    return module


# Path -> the identity of the file whose code the first load of that path loaded (None: it changed
# while loading). Content addresses of a library's code (kffi.jax's target names) hash the file
# only while it is still that file.
_loaded_files: dict[str, tuple[int, ...] | None] = {}
_loaded_lock = threading.Lock()


def _file_identity(path: str | bytes) -> tuple[int, ...] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def loaded_file_changed(path: str) -> bool:
    """Whether the library file at ``path`` is no longer the one this process loaded code from
    (replaced, rewritten, or changed while it was loading). False for a path never loaded."""
    full = os.path.abspath(path)
    with _loaded_lock:
        if full not in _loaded_files:
            return False
        loaded = _loaded_files[full]
    return loaded is None or _file_identity(full) != loaded


def system_lib() -> Module:
    """The process's system library: kernels linked statically into the program."""
    return _core.system_lib()


def to_kffi(value: Any) -> Any:
    """``value`` as kffi sees it (tuple -> Array, dict -> Map, callables -> Function, ...).

    Call results differ in one way: an Array a function returns arrives as a Python tuple.
    """
    return _core._to_kffi(value)
