"""python/kffi/torch/_glue.py: kffi.torch's native glue (built once, into kffi's build cache, and
loaded) through the one glue helper, kffi.build.glue: the dispatcher glue and the eager library.

_dispatch.cc is C++ against the headers of the torch that runs, so it is built where torch is, on
first use, with kffi.cpp: the library is keyed by its sources, the compiler, the flags and kffi's
own glue headers (``depends``), and the flags carry torch's version and a digest of the torch
headers it includes, so a new torch gets its own build and an unchanged one loads in
milliseconds.
"""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any

from .. import _core
from .._lazy import lazy
from ..build import cpp as _cpp
from ..build.glue import Glue

_HERE = os.path.dirname(os.path.abspath(__file__))
# The dispatcher glue: the kernels and their registration (_dispatch.cc), and the C++ API that
# registers ops from a manifest without Python (_register.cc, <kffi/torch.h>).
_SOURCES = [
    os.path.join(_HERE, "_dispatch.cc"),
    os.path.join(_HERE, "_register.cc"),
    os.path.join(_HERE, "_signature.cc"),  # op signatures (schema, plan) from metadata
    os.path.join(_HERE, "_meta.cc"),  # meta kernels from contracts (RegisterOps(module, ns))
]
INCLUDE_DIR = os.path.join(_HERE, "include")  # <kffi/torch.h>
# The torch headers _dispatch.cc and _eager.cc include directly: their digest keys the builds.
_TORCH_HEADERS = (
    "torch/library.h",
    "ATen/core/dispatch/Dispatcher.h",  # _register.cc
    "caffe2/serialize/inline_container.h",  # _register.cc (CheckPackage)
    "c10/core/SymInt.h",  # _meta.cc
    "ATen/core/Tensor.h",
    "ATen/ops/empty.h",
    "ATen/ops/from_blob.h",
    "ATen/core/LegacyTypeDispatch.h",
    "c10/core/Stream.h",
    "c10/core/impl/DeviceGuardImplInterface.h",
    "ATen/PythonTorchFunctionTLS.h",  # _eager.cc
    "c10/core/impl/TorchDispatchModeTLS.h",
    "c10/core/impl/LocalDispatchKeySet.h",
    "torch/csrc/autograd/python_variable.h",  # _eager.cc
)

_EAGER_SOURCES = [os.path.join(_HERE, "_eager.cc"), os.path.join(_HERE, "_import.cc")]
# kffi's own header the glue sources include (its digest keys the builds too).
_GLUE_HEADER = os.path.join(_HERE, "_torch_dlpack.h")
_DISPATCH_HEADERS = (
    os.path.join(_HERE, "_dispatch.h"),
    os.path.join(_HERE, "_signature.h"),
    os.path.join(_HERE, "_meta.h"),
    os.path.join(INCLUDE_DIR, "kffi", "torch.h"),
)


def _torch_dirs() -> tuple[str, list[str], str]:
    """torch's include folder, the include paths its C++ API needs, and its lib folder."""
    import torch

    root = os.path.dirname(torch.__file__)
    include = os.path.join(root, "include")
    return (
        include,
        [include, os.path.join(include, "torch", "csrc", "api", "include")],
        os.path.join(root, "lib"),
    )


def _headers_digest(include: str) -> str:
    return _cpp._headers_key(
        include,
        _TORCH_HEADERS,
        "kffi.torch: torch's header",
        "kffi.torch builds its dispatcher kernels against the headers an installed torch ships",
    )


def _torch_flags(torch: ModuleType) -> list[str]:
    include = _torch_dirs()[0]
    abi = int(getattr(torch._C, "_GLIBCXX_USE_CXX11_ABI", 1))
    return [
        "-std=c++20",  # torch's headers need it (later -std flags win)
        "-O2",
        # torch's debug-only internal asserts off, as in torch's own build: with them, c10's
        # inline helpers (DispatchKeySet tests, IValue accessors) stay calls on every op call.
        "-DNDEBUG",
        f"-D_GLIBCXX_USE_CXX11_ABI={abi}",
        f'-DKFFI_TORCH_VERSION="{torch.__version__}"',
        f'-DKFFI_TORCH_HEADERS="{_headers_digest(include)}"',
        "-Wno-unused-parameter",
    ]


def _loaded_libstdcxx() -> str | None:
    """The path of the libstdc++ shared object this process runs (torch's), or None."""
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                path = line.split(maxsplit=5)[-1].strip()
                if os.path.basename(path).startswith("libstdc++.so"):
                    return path
    except OSError:
        pass
    return None


def _torch_ldflags() -> list[str]:
    libdir = _torch_dirs()[2]
    flags = [f"-L{libdir}", f"-Wl,-rpath,{libdir}", "-lc10", "-ltorch_cpu"]
    # The glue passes C++ objects to and from libtorch (strings, streams, c10 errors), so it must
    # use the very libstdc++ torch does. A toolchain whose own library directory holds only
    # libstdc++.a (one in /opt with CXX set to it, say) links a private copy: its streams then
    # fail on the locale state of the shared one (an error message cut at its first number, or a
    # crash). Naming the loaded shared object first binds every libstdc++ symbol to it.
    libstdcxx = _loaded_libstdcxx()
    if libstdcxx is not None:
        flags.insert(0, libstdcxx)
    return flags


def _eager_options() -> dict[str, Any]:
    import sysconfig

    import torch

    paths = sysconfig.get_paths()
    py_includes = sorted({paths["include"], paths.get("platinclude", paths["include"])})
    return {
        "extra_cflags": _torch_flags(torch) + [f'-DKFFI_PYTHON="{sys.version}"'],
        "extra_ldflags": _torch_ldflags(),
        "extra_include_paths": py_includes + _torch_dirs()[1],
        "depends": [_GLUE_HEADER],
    }


def _eager_lib(build: bool = True) -> Any:
    """The extension module of _eager.cc and _import.cc (built on first use: a few seconds),
    or None when it cannot be built here (no Python headers) or, with build=False, is not built
    yet. Thread safe."""
    if not build and not _eager.built():
        return None
    lib = _eager()
    return lib if not isinstance(lib, str) else None


def _load_eager(glue: Glue[Any]) -> Any:
    """The extension module of _EAGER_SOURCES, or why it is unavailable (a str)."""
    import importlib.machinery
    import importlib.util
    import warnings

    try:
        path = glue.build()
        # A CPython extension module, imported the way _core is: its PyInit names it.
        loader = importlib.machinery.ExtensionFileLoader("kffi_torch_eager", path)
        spec = importlib.util.spec_from_file_location("kffi_torch_eager", path, loader=loader)
        if spec is None:
            raise ImportError(f"no module spec for {path}")
        lib = importlib.util.module_from_spec(spec)
        loader.exec_module(lib)
    except (_cpp.BuildError, ImportError, OSError) as e:
        warnings.warn(
            f"kffi.torch: eager op calls take the Python path, and torch tensors the DLPack "
            f"exchange API, which cost more per call: the C gate (python/kffi/torch/_eager.cc, "
            f"_import.cc) did not build or load: "
            f"{str(e).splitlines()[0] if str(e) else type(e).__name__}",
            RuntimeWarning,
            stacklevel=4,
        )
        return "unavailable"
    return lib


# The extension module of _EAGER_SOURCES, or why it is unavailable (a str).
_eager: Glue[Any] = Glue(
    "kffi_torch_eager", _EAGER_SOURCES, _eager_options, load=_load_eager, quiet=True
)


def eager_maker() -> Callable[..., Any] | None:
    """kffi_torch_make_eager from _eager.cc, or None when it cannot be built here: eager calls
    then take the Python gate. Installs the tensor import too (install_tensor_import)."""
    lib = _eager_lib()
    if lib is None:
        return None
    install_tensor_import(build=False)
    maker: Callable[..., Any] = lib.kffi_torch_make_eager  # a function of the PyDLL
    return maker


def install_tensor_import(build: bool = True) -> bool:
    """Makes kffi calls import torch.Tensor arguments with _import.cc (the TensorImpl's fields,
    read directly) instead of torch's DLPack exchange API; the same DLTensors, for less, and
    the lazy-view bits (conjugate, negative) read from the TensorImpl too instead of through
    torch's methods. With build=False, only when the library is built already. Returns whether
    it is installed."""
    if not _tensor_import.done and _eager_lib(build) is None:
        return False
    return _tensor_import()


@lazy
def _tensor_import() -> bool:
    """Installs _import.cc's import (once); False for a torch without the exchange API, where
    kffi uses __dlpack__."""
    import torch

    original = getattr(torch.Tensor, "__dlpack_c_exchange_api__", None)
    if original is None:
        return False
    lib = _eager_lib(build=False)
    replacement = lib.kffi_torch_exchange_api(original, torch._C.TensorBase)
    _core._override_exchange_api(original, replacement, lib.kffi_torch_lazy_view_reader())
    return True


def _glue_options() -> dict[str, Any]:
    import torch

    return {
        "extra_cflags": _torch_flags(torch),
        "extra_ldflags": _torch_ldflags(),
        "extra_include_paths": [INCLUDE_DIR, *_torch_dirs()[1]],
        "depends": [_GLUE_HEADER, *_DISPATCH_HEADERS],
    }


# The loaded glue module (built on first use, a few tens of seconds). Thread safe.
glue: Glue[Any] = Glue(
    "kffi_torch_dispatch",
    _SOURCES,
    _glue_options,
    failure="kffi.torch: building the dispatcher glue (python/kffi/torch/_dispatch.cc and "
    "_register.cc, against the installed torch's headers) failed; kffi.torch needs a C++20 "
    "compiler for it, once per torch version.",
)
