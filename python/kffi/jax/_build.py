"""python/kffi/jax/_build.py: builds (once, into kffi's build cache) and loads the XLA handler.

The handler is C++ against the XLA FFI headers of the jaxlib that runs (``jax.ffi.include_dir()``),
so it is built where jaxlib is present, on first use: kffi.cpp.build keys the library by the
sources, the compiler and flags; the flags carry a digest of those headers, of the handler's own
header and jaxlib's version, so a new jaxlib gets its own build and an unchanged one loads in
milliseconds.
"""

from __future__ import annotations

import os

from .. import cpp as _cpp
from .. import load_module as _load_module
from .._lazy import lazy

_HERE = os.path.dirname(os.path.abspath(__file__))
_SOURCES = [os.path.join(_HERE, f) for f in ("_xla_handler.cc", "_xla_alloc.cc", "_xla_targets.cc")]
_LOCAL_HEADER_NAME = "_xla_handler.h"  # not a source: its digest goes in a flag
_HEADERS = ("c_api.h",)  # the handler includes only the C API


def xla_ffi_include_dir() -> str:
    import jax.ffi

    return jax.ffi.include_dir()


def _headers_digest(include_dir: str) -> str:
    api = os.path.join(include_dir, "xla", "ffi", "api")
    return _cpp._headers_key(
        api,
        _HEADERS,
        "kffi.jax: jaxlib's XLA FFI header",
        "kffi.jax needs a jaxlib that ships its FFI headers",
    )


@lazy
def handler_module():
    """The loaded handler module (built on first use). Thread safe."""
    import jaxlib

    inc = xla_ffi_include_dir()
    local = _cpp._headers_digest(_HERE, [_LOCAL_HEADER_NAME])[:24]
    flags = [
        "-O2",
        f'-DKFFI_JAX_XLA_FFI_HEADERS="{_headers_digest(inc)}"',
        f'-DKFFI_JAX_JAXLIB_VERSION="{jaxlib.__version__}"',
        f'-DKFFI_JAX_HANDLER_HEADER="{local}"',
    ]
    path = _cpp.build("kffi_jax_handler", _SOURCES, extra_cflags=flags, extra_include_paths=[inc])
    return _load_module(path)
