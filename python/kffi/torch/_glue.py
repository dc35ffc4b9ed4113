"""python/kffi/torch/_glue.py: kffi.torch's native glue, loaded: the dispatcher glue (a kffi
module: _dispatch.cc, _call_env.cc, _register.cc, _signature.cc, _meta.cc) and the eager extension (the gate of
op calls and the torch.Tensor reader of every kffi call: _eager.cc, _import.cc).

Both are C++ against torch's C++ API, whose ABI changes with every torch minor version. kffi's
build makes them for the torch it finds (cmake/torch_glue.cmake): the folder
lib/torch-<major>.<minor> beside this file, with glue.json saying what they were built against.
That is what a process loads, with no compiler: the first torch tensor argument of any kffi call
loads the reader, the first op the gate and the dispatcher glue.

A torch of a minor version kffi was not built for gets the same sources built against its own
headers on first use, into kffi's build cache (kffi.toolchain.glue, keyed by the sources, the
compiler, the flags, torch's version and a digest of its headers): the last fallback, which says
so in one line. Where that cannot build (no compiler), ops take the Python gate and torch tensors
torch's own DLPack import plus its Python methods for the lazy-view check, which cost more per
call; the dispatcher glue, without which no op can be registered, raises.
"""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import json
import logging
import os
import sys
import sysconfig
from collections.abc import Callable
from types import ModuleType
from typing import Any

from .. import _core
from .._lazy import lazy
from ..runtime._api import __version__ as _kffi_version
from ..runtime._api import load_module
from ..toolchain import cpp as _cpp
from ..toolchain.glue import Glue

_HERE = os.path.dirname(os.path.abspath(__file__))
# The dispatcher glue: the kernels and their registration (_dispatch.cc), and the C++ API that
# registers ops from a manifest without Python (_register.cc, <kffi/torch.h>).
_SOURCES = [
    os.path.join(_HERE, "_dispatch.cc"),
    os.path.join(_HERE, "_call_env.cc"),  # what a call runs in: allocator, stream, errors
    os.path.join(_HERE, "_register.cc"),
    os.path.join(_HERE, "_signature.cc"),  # op signatures (schema, plan) from metadata
    os.path.join(_HERE, "_pytext.cc"),  # Python's spellings for messages and schemas
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
    os.path.join(_HERE, "_call_env.h"),
    os.path.join(_HERE, "_signature.h"),
    os.path.join(_HERE, "_pytext.h"),
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


def torch_abi_flags(torch: ModuleType) -> list[str]:
    """What any C++ that includes torch's headers is compiled with: C++20 (torch's headers need
    it; a later -std flag wins over kffi-config's C++17) and torch's libstdc++ ABI. The one
    source of these for the glue built here and for users' programs (_deploy.cpp_flags)."""
    abi = int(getattr(torch._C, "_GLIBCXX_USE_CXX11_ABI", 1))
    return ["-std=c++20", f"-D_GLIBCXX_USE_CXX11_ABI={abi}"]


def torch_lib_dir_flags() -> list[str]:
    """torch's library folder, to link against and find at run time (-L and its rpath)."""
    libdir = _torch_dirs()[2]
    return [f"-L{libdir}", f"-Wl,-rpath,{libdir}"]


def _torch_flags(torch: ModuleType) -> list[str]:
    include = _torch_dirs()[0]
    return [
        *torch_abi_flags(torch),
        "-O2",
        # torch's debug-only internal asserts off, as in torch's own build: with them, c10's
        # inline helpers (DispatchKeySet tests, IValue accessors) stay calls on every op call.
        "-DNDEBUG",
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


def libstdcxx_flags() -> list[str]:
    """The libstdc++ torch runs with, to name first on a link line: C++ that passes C++ objects
    to and from libtorch or the glue (strings, streams, c10 errors) must use that very one. A
    toolchain whose own library directory holds only libstdc++.a (one in /opt with CXX set to it,
    say) links a private copy: its streams then fail on the locale state of the shared one (an
    error message cut at its first number, or a crash). Naming the loaded shared object first
    binds every libstdc++ symbol to it (cmake/torch_glue.cmake does the same for the glue)."""
    libstdcxx = _loaded_libstdcxx()
    return [libstdcxx] if libstdcxx is not None else []


def _torch_ldflags() -> list[str]:
    return [*libstdcxx_flags(), *torch_lib_dir_flags(), "-lc10", "-ltorch_cpu"]


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


_log = logging.getLogger("kffi.torch")
_EAGER_MODULE = "kffi_torch_eager"
# Where kffi's build put the glue, one folder per torch minor version (cmake/torch_glue.cmake).
_PREBUILT_ROOT = os.path.join(_HERE, "lib")


def _torch_minor(version: str) -> str:
    """'2.13' of '2.13.0+cpu'."""
    return ".".join(version.split("+")[0].split(".")[:2])


@lazy
def _prebuilt() -> tuple[str | None, str]:
    """The folder of the glue kffi was built with for the running torch (None when there is none,
    or it is another kffi's), and what kffi was built for (for the fallback's message)."""
    import torch

    lib = _PREBUILT_ROOT
    try:
        built = sorted(d.removeprefix("torch-") for d in os.listdir(lib) if d.startswith("torch-"))
    except OSError:
        built = []
    have = (
        f"this kffi has glue for torch {', '.join(built)}"
        if built
        else "this kffi was built without torch"
    )
    folder = os.path.join(lib, f"torch-{_torch_minor(torch.__version__)}")
    try:
        with open(os.path.join(folder, "glue.json"), encoding="utf-8") as f:
            stamp = json.load(f)
    except (OSError, ValueError):
        return None, have
    if not isinstance(stamp, dict) or _torch_minor(str(stamp.get("torch"))) != _torch_minor(
        torch.__version__
    ):
        return None, have
    if stamp.get("kffi") != _kffi_version:
        return None, f"{have}, made by kffi {stamp.get('kffi')}, not this kffi {_kffi_version}"
    return folder, have


def _prebuilt_file(name: str) -> str | None:
    folder = _prebuilt()[0]
    if folder is None:
        return None
    path = os.path.join(folder, name)
    return path if os.path.exists(path) else None


def _announce_build(what: str) -> None:
    """The fallback's one line: what it builds and why."""
    import torch

    _log.warning(
        "kffi.torch: no prebuilt glue for torch %s (%s): building %s against its headers now "
        "(once per torch version, kept in kffi's build cache; about a minute). Build kffi with "
        "this torch installed to have it prebuilt.",
        torch.__version__,
        _prebuilt()[1],
        what,
    )


@lazy
def glue() -> Any:
    """The loaded dispatcher glue (a kffi.Module): kffi's prebuilt one for this torch, else built
    here on first use. Thread safe."""
    path = _prebuilt_file("libkffi_torch.so")
    if path is not None:
        return load_module(path)
    _announce_build(
        "its dispatcher glue (_dispatch.cc, _call_env.cc, _register.cc, _signature.cc, _pytext.cc, "
        "_meta.cc)"
    )
    return _jit_glue()


def _import_extension(path: str) -> Any:
    """The CPython extension module at path, imported the way _core is (its PyInit names it)."""
    import importlib.machinery
    import importlib.util

    loader = importlib.machinery.ExtensionFileLoader(_EAGER_MODULE, path)
    spec = importlib.util.spec_from_file_location(_EAGER_MODULE, path, loader=loader)
    if spec is None:
        raise ImportError(f"no module spec for {path}")
    lib = importlib.util.module_from_spec(spec)
    loader.exec_module(lib)
    return lib


def _prebuilt_eager() -> str | None:
    """The prebuilt eager extension for this torch and this Python, or None."""
    folder = _prebuilt()[0]
    if folder is None:
        return None
    try:
        with open(os.path.join(folder, "glue.json"), encoding="utf-8") as f:
            soabi = json.load(f).get("python_soabi")
    except (OSError, ValueError):
        return None
    if soabi != sysconfig.get_config_var("SOABI"):
        return None  # built for another Python, or by a build without Python
    return _prebuilt_file(_EAGER_MODULE + (sysconfig.get_config_var("EXT_SUFFIX") or ".so"))


@lazy
def _eager() -> Any:
    """The eager extension module, or why it is unavailable (a str): kffi's prebuilt one, else
    built here (the fallback). Thread safe."""
    import warnings

    path = _prebuilt_eager()
    try:
        if path is None:
            _announce_build("its eager gate and tensor reader (_eager.cc, _import.cc)")
            path = _jit_eager.build()
        return _import_extension(path)
    except (RuntimeError, ImportError, OSError) as e:  # a failed build, or no compiler
        warnings.warn(
            f"kffi.torch: eager op calls take the Python path, and torch tensors the DLPack "
            f"exchange API and torch's Python methods, which cost more per call: the eager "
            f"extension (python/kffi/torch/_eager.cc, _import.cc) did not build or load: "
            f"{str(e).splitlines()[0] if str(e) else type(e).__name__}",
            RuntimeWarning,
            stacklevel=4,
        )
        return "unavailable"


def _eager_lib(build: bool = True) -> Any:
    """The eager extension module, or None when it cannot be had here or, with build=False, would
    have to be built (a prebuilt one, or one in the build cache, loads). Thread safe."""
    if not build and not _eager.done and _prebuilt_eager() is None and not _jit_eager.built():
        return None
    lib = _eager()
    return lib if not isinstance(lib, str) else None


def eager_maker() -> Callable[..., Any] | None:
    """kffi_torch_make_eager from _eager.cc, or None when the extension cannot be had here: eager
    calls then take the Python gate. Installs the tensor import too (install_tensor_import)."""
    lib = _eager_lib()
    if lib is None:
        return None
    install_tensor_import(build=False)
    maker: Callable[..., Any] = lib.kffi_torch_make_eager  # a function of the extension
    return maker


def install_tensor_import(build: bool = True) -> bool:
    """Makes kffi calls import torch.Tensor arguments with _import.cc (the TensorImpl's fields,
    read directly) instead of torch's DLPack exchange API; the same DLTensors, for less, and
    the lazy-view bits (conjugate, negative) read from the TensorImpl too instead of through
    torch's methods. With build=False, only when the extension is prebuilt or built already.
    Returns whether it is installed."""
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


# The fallbacks: the same glue built here on first use (about a minute), where kffi was not built
# for this torch; quiet, since _announce_build says what happens. Thread safe.
_jit_glue: Glue[Any] = Glue(
    "kffi_torch_dispatch",
    _SOURCES,
    _glue_options,
    failure="kffi.torch: building the dispatcher glue (python/kffi/torch/_dispatch.cc and "
    "_register.cc, against the installed torch's headers) failed; kffi.torch needs it, and this "
    "kffi was not built for this torch: build kffi with this torch installed, or give it a C++20 "
    "compiler.",
    quiet=True,
)
_jit_eager: Glue[Any] = Glue(_EAGER_MODULE, _EAGER_SOURCES, _eager_options, quiet=True)
