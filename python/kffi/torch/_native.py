"""python/kffi/torch/_native.py: builds (once, into kffi's build cache) and loads the dispatcher glue.

_dispatch.cc is C++ against the headers of the torch that runs, so it is built where torch is, on
first use, with kffi.cpp.build: the library is keyed by its source, the compiler and the flags,
and the flags carry torch's version and a digest of the torch headers it includes, so a new
torch gets its own build and an unchanged one loads in milliseconds.
"""

from __future__ import annotations

import hashlib
import os
import sys
import threading

from .. import cpp as _cpp
from .. import load_module as _load_module

_HERE = os.path.dirname(os.path.abspath(__file__))
_SOURCE = os.path.join(_HERE, "_dispatch.cc")
# The torch headers _dispatch.cc and _eager.cc include directly: their digest keys the builds.
_TORCH_HEADERS = (
    "torch/library.h",
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

_lock = threading.Lock()
_module = None
_EAGER_SOURCE = os.path.join(_HERE, "_eager.cc")
_eager = None  # the make function, or the reason it is unavailable (str)


def _torch_dirs():
    import torch

    root = os.path.dirname(torch.__file__)
    include = os.path.join(root, "include")
    return (
        include,
        [include, os.path.join(include, "torch", "csrc", "api", "include")],
        os.path.join(root, "lib"),
    )


def _headers_digest(include: str) -> str:
    h = hashlib.sha256()
    for name in _TORCH_HEADERS:
        path = os.path.join(include, name)
        try:
            with open(path, "rb") as f:
                h.update(name.encode() + b"\0" + f.read())
        except OSError as e:
            raise RuntimeError(
                f"kffi.torch: torch's header {path} cannot be read ({e}); kffi.torch builds its "
                f"dispatcher kernels against the headers an installed torch ships"
            ) from None
    return h.hexdigest()[:24]


def _torch_flags(torch) -> list:
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


def _loaded_libstdcxx():
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


def _torch_ldflags() -> list:
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


def eager_maker():
    """kffi_torch_make_eager from _eager.cc (built on first use: a few seconds), or None when
    it cannot be built here (no Python headers): eager calls then take the Python gate."""
    global _eager
    if _eager is None:
        with _lock:
            if _eager is None:
                _eager = _build_eager()
    return _eager if callable(_eager) else None


def _build_eager():
    import ctypes
    import sysconfig
    import warnings

    import torch

    paths = sysconfig.get_paths()
    py_includes = sorted({paths["include"], paths.get("platinclude", paths["include"])})
    flags = _torch_flags(torch) + [f'-DKFFI_PYTHON="{sys.version}"']
    try:
        path = _cpp.build(
            "kffi_torch_eager",
            [_EAGER_SOURCE],
            extra_cflags=flags,
            extra_ldflags=_torch_ldflags(),
            extra_include_paths=py_includes + _torch_dirs()[1],
            quiet=True,
        )
        lib = ctypes.PyDLL(path)
        make = lib.kffi_torch_make_eager
    except (_cpp.BuildError, OSError, AttributeError) as e:
        warnings.warn(
            f"kffi.torch: eager op calls take the Python path, which costs more per call: the "
            f"C gate (python/kffi/torch/_eager.cc) did not build or load: "
            f"{str(e).splitlines()[0] if str(e) else type(e).__name__}",
            RuntimeWarning,
            stacklevel=3,
        )
        return "unavailable"
    make.restype = ctypes.py_object
    make.argtypes = [ctypes.py_object] * 5 + [ctypes.c_int, ctypes.py_object, ctypes.py_object]
    return make


def glue():
    """The loaded glue module (built on first use, a few tens of seconds). Thread safe."""
    global _module
    if _module is not None:
        return _module
    with _lock:
        if _module is None:
            import torch

            flags = _torch_flags(torch)
            ldflags = _torch_ldflags()
            include_paths = _torch_dirs()[1]
            try:
                path = _cpp.build(
                    "kffi_torch_dispatch",
                    [_SOURCE],
                    extra_cflags=flags,
                    extra_ldflags=ldflags,
                    extra_include_paths=include_paths,
                )
            except _cpp.BuildError as e:
                raise RuntimeError(
                    "kffi.torch: building the dispatcher glue (python/kffi/torch/_dispatch.cc, "
                    "against the installed torch's headers) failed; kffi.torch needs a C++20 "
                    f"compiler for it, once per torch version.\n{e}"
                ) from None
            _module = _load_module(path)
    return _module
