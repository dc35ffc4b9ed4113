"""kffi: an open ABI and FFI for machine-learning kernels.

A kernel library built once (C++ or CUDA, with ``kffi-config``'s flags) is called with NumPy,
PyTorch, JAX or CuPy arrays, zero-copy, on the caller's CUDA stream::

    import numpy as np
    import kffi

    mod = kffi.load_module("libscale_cpu.so")   # exports scale(y, x, factor): y = x * factor
    x = np.arange(4, dtype=np.float32)
    y = np.empty_like(x)
    mod.scale(y, x, 2.0)                        # the output comes first
    help(mod.scale)                             # its signature and docstring

Wrong arguments raise before the kernel runs, naming the argument, what was expected and what
came: TypeError for a wrong type or dtype, ValueError for a wrong shape, device or a read-only
array where the kernel writes.

Also here:

- ``kffi.compile(source, name, *fake_args)``: compile a C++/CUDA function from Python, its
  argument contract given by ``kffi.fake_tensor``/``kffi.sym_int`` and checked on every call;
- ``kffi.torch``: kffi functions as ``torch.library`` ops (``torch.compile``, autograd);
- ``kffi.jax``: kffi functions inside ``jax.jit`` (``kffi.jax.call``);
- ``kffi.cpp.load_inline``, ``kffi.aot``: building libraries and objects;
- ``kffi.Error`` and ``kffi.register_error``: errors raised by kernels.

The guides are in the repository's docs/ folder (start with README.md).
"""
# SPDX-License-Identifier: Apache-2.0
# This file is the package's face: it only re-exports. The layers below it, lowest first (each
# imports only from its own layer and those below; tests/python/house/test_layers.py checks
# it):
# - base: the extension _core, _lazy, _type_text, libinfo, config, typing;
# - runtime/: objects (Module, Function, Tensor, containers), dtypes, devices, errors, streams,
#   loading and the global function registry; higher layers plug in through runtime/_hooks.py;
# - toolchain/: the compilers, build plan, cache and lock (kffi.cpp), export (kffi.aot), stubs
#   (build.py: kffi.build, its former name);
# - contract/: fake arguments, contract rendering, kffi.compile, the one shape evaluator;
# - tvm/: the TVM bridge's Python side and kffi.with_contract;
# - jax/, torch/: the framework integrations, loaded on first use (the rows of the framework
#   table, runtime/_frameworks.py, name them).

from __future__ import annotations

# The extension finds libkffi next to it (kffi/lib) through its rpath.
from . import _core as _core
from . import aot as aot
from . import cpp, libinfo
from ._reflection import register_object, register_record
from .contract import (
    Bool,
    Float32,
    Float64,
    Int32,
    Int64,
    fake_stream,
    fake_tensor,
    sym_int,
)
from .contract import (
    Optional as Optional,
)
from .contract import (
    compile as compile,
)
from .runtime._api import (
    ABI_VERSION as ABI_VERSION,
)
from .runtime._api import (
    MAX_CONTAINER_DEPTH,
    __version__,
    check_signals,
    from_dlpack,
    get_default_release_gil,
    get_global_func,
    list_global_func_names,
    load_module,
    register_global_func,
    remove_global_func,
    set_default_release_gil,
    system_lib,
    to_kffi,
)
from .runtime._dtypes import *  # noqa: F403 (kffi.float32, ...: one per dtype name of _core)
from .runtime._dtypes import PUBLIC_NAMES as _DTYPE_NAMES
from .runtime._error import Error, MissingKeyError, register_error

# kffi.jax and kffi.torch load on first use (PEP 562: the package's __getattr__).
from .runtime._frameworks import package_getattr as __getattr__  # noqa: F401
from .runtime._objects import (
    Array,
    Dict,
    ErrorObject,
    Function,
    List,
    Map,
    Module,
    Object,
    Shape,
    Tensor,
)
from .runtime._types import Device, dtype
from .runtime.stream import get_current_stream, use_stream
from .toolchain.aot import load_object
from .toolchain.stubgen import stubgen
from .tvm import with_contract

# `from kffi import *` brings neither kffi.compile nor kffi.Optional nor kffi.bool: they would
# shadow the builtins compile and bool and typing.Optional (they stay kffi's attributes).
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
    *_DTYPE_NAMES,
    "Bool",
    "Float32",
    "Float64",
    "Int32",
    "Int64",
    "cpp",
    "fake_stream",
    "fake_tensor",
    "load_object",
    "stubgen",
    "sym_int",
    "with_contract",
]
