"""kffi: an open ABI and FFI for machine-learning kernels.

Load a kernel library and call it with PyTorch, NumPy, JAX or CuPy arrays::

    mod = kffi.load_module("libscale.so")
    mod.scale(x, y, 2.0)
"""

from __future__ import annotations

import os as _os

# The extension finds libkffi next to it (kffi/lib) through its rpath.
from . import _core, _types, libinfo
from ._error import Error, MissingKeyError, register_error
from ._objects import Array, Dict, ErrorObject, Function, List, Map, Module, Object, Shape, Tensor
from ._reflection import register_object, register_record
from ._types import Device, dtype
from .stream import get_current_stream, use_stream

__version__ = "{}.{}.{}".format(*_core.runtime_version()[:3])
ABI_VERSION = _core.runtime_version()[3]

from_dlpack = _core.from_dlpack
set_default_release_gil = _core.set_default_release_gil
get_default_release_gil = _core.get_default_release_gil
list_global_func_names = _core.list_global_func_names
remove_global_func = _core.remove_global_func
check_signals = _core.check_signals


def get_global_func(name: str, allow_missing: bool = False):
    """The global function registered under ``name``.

    Raises ValueError when there is none, unless ``allow_missing`` (then returns None).
    """
    f = _core.get_global_func(name)
    if f is None and not allow_missing:
        raise ValueError(f"Global function {name!r} is not registered")
    if f is not None:
        f.__name__ = name
    return f


def register_global_func(name: str, func=None, override: bool = False):
    """Registers a Python callable (or a kffi.Function) as a global function, callable from C++.

    Also a decorator: ``@kffi.register_global_func("my.add")``.
    """

    def do_register(f):
        _core.register_global_func(name, f, override)
        return f

    return do_register if func is None else do_register(func)


def load_module(path) -> Module:
    """Loads a kernel library: built with kffi/export.h, or for the TVM-FFI ABI (docs/tvm_ffi.md)."""
    path = _os.fspath(path)
    if "\0" in (path if isinstance(path, str) else path.decode("utf-8", "replace")):
        # Cut at the NUL, the path would name another file.
        raise ValueError(f"Cannot load module: the path {path!r} contains a NUL byte")
    if not _os.path.exists(path):
        raise FileNotFoundError(f"Cannot load kffi module: no such file {path!r}")
    _tvm.note_installed_runtime()
    return _core.load_module(_os.path.abspath(path))


def system_lib() -> Module:
    """The process's system library: kernels linked statically into the program."""
    return _core.system_lib()


# Containers (tuples, lists, dicts) convert nested at most this deep, either way; deeper input is
# a RecursionError whatever sys.getrecursionlimit() says (the C stack is the limit), and deeper
# Array results stay kffi.Array objects below that level instead of becoming tuples.
MAX_CONTAINER_DEPTH: int = _core.MAX_CONTAINER_DEPTH


def to_kffi(value):
    """``value`` as kffi sees it (tuple -> Array, dict -> Map, callables -> Function, ...).

    Call results differ in one way: an Array a function returns arrives as a Python tuple.
    """
    return _core._to_kffi(value)


# kffi.float32, kffi.bfloat16, ...: dtypes, equal to kffi.dtype("float32") and accepted wherever
# a dtype is.
globals().update({_name: dtype(_name) for _name in _core.DTYPE_NAMES})

__all__ = [
    "MAX_CONTAINER_DEPTH",
    "MissingKeyError",
    "Array",
    "Device",
    "Dict",
    "Error",
    "ErrorObject",
    "Function",
    "List",
    "Map",
    "Module",
    "Object",
    "register_object",
    "register_record",
    "Shape",
    "Tensor",
    "dtype",
    "from_dlpack",
    "get_global_func",
    "libinfo",
    "list_global_func_names",
    "load_module",
    "register_error",
    "register_global_func",
    "remove_global_func",
    "set_default_release_gil",
    "get_default_release_gil",
    "system_lib",
    "to_kffi",
    "use_stream",
    "get_current_stream",
    "check_signals",
    "__version__",
] + [_name for _name in _core.DTYPE_NAMES if _name != "bool"]  # `import *` must not shadow bool


# kffi values handed to apache-tvm-ffi (protocol methods; does not import tvm_ffi), JIT builds
# (kffi.cpp) and contracts declared with fake arguments (kffi.compile): these import the names
# above, so they come after them.
def _torch_fast_import() -> None:
    """kffi.torch's tensor import, when its library is built already (never builds it here: the
    first torch tensor argument must not wait for a compiler). kffi.torch.fast_tensor_import()
    builds it."""
    try:
        from .torch import _native

        _native.install_tensor_import(build=False)
    except Exception:  # noqa: S110 (a torch kffi.torch cannot use: torch's own import stays)
        pass


_types.first_torch_tensor_hook = _torch_fast_import

from . import _tvm, cpp  # noqa: E402
from ._with_contract import with_contract  # noqa: E402
from .aot import load_object  # noqa: E402
from .contract import (  # noqa: E402
    Bool,
    Float32,
    Float64,
    Int32,
    Int64,
    Optional,
    compile,
    fake_stream,
    fake_tensor,
    sym_int,
)

__all__ += [
    "Bool",
    "Float32",
    "Float64",
    "Int32",
    "Int64",
    "Optional",
    "compile",
    "cpp",
    "fake_stream",
    "fake_tensor",
    "load_object",
    "stubgen",
    "sym_int",
    "with_contract",
]


# The submodule kffi.stubgen (the `kffi-stubgen` command) is imported here, before the function
# below takes its name in the package: a later `import kffi.stubgen` finds the module loaded and
# leaves kffi.stubgen the function.
from . import stubgen as _stubgen_module  # noqa: E402


def stubgen(module, path=None, *, module_doc=None) -> str:
    """Writes (when ``path`` is given) and returns the ``.pyi`` stub of a module's functions:
    Python types, parameter names and defaults, contracts in the docstrings. ``module`` is a
    kffi.Module or the path of a library (``.so``) or object (``.o``). The command
    ``kffi-stubgen`` does the same (docs/aot.md)."""
    return _stubgen_module.stubgen(module, path, module_doc=module_doc)


def __getattr__(name):
    # Framework integrations load on first use: importing kffi imports neither jax nor torch (nor
    # kffi.cuda, which opens NVRTC and the CUDA driver only when used).
    if name in ("cuda", "jax", "torch"):
        import importlib

        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module 'kffi' has no attribute {name!r}")
