"""python/kffi/jax/_glue.py: kffi.jax's native glue, the XLA handler (built once, into kffi's build
cache, and loaded) through the one glue helper, kffi.build.glue.

The handler is C++ against the XLA FFI headers of the jaxlib that runs (``jax.ffi.include_dir()``),
so it is built where jaxlib is present, on first use: kffi.cpp keys the library by the sources,
the compiler, the flags and the handler's own header (``depends``); the flags carry a digest of
the XLA FFI headers and jaxlib's version, so a new jaxlib gets its own build and an unchanged one
loads in milliseconds.
"""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import os
from typing import Any

from ..build import cpp as _cpp
from ..build.glue import Glue

_HERE = os.path.dirname(os.path.abspath(__file__))
_SOURCES = [os.path.join(_HERE, f) for f in ("_xla_handler.cc", "_xla_alloc.cc", "_xla_targets.cc")]
_LOCAL_HEADER = os.path.join(_HERE, "_xla_handler.h")  # not a source: a build dependency
_HEADERS = ("c_api.h",)  # the handler includes only the C API


def xla_ffi_include_dir() -> str:
    import jax.ffi

    folder: str = jax.ffi.include_dir()
    return folder


def _headers_digest(include_dir: str) -> str:
    api = os.path.join(include_dir, "xla", "ffi", "api")
    return _cpp._headers_key(
        api,
        _HEADERS,
        "kffi.jax: jaxlib's XLA FFI header",
        "kffi.jax needs a jaxlib that ships its FFI headers",
    )


def _options() -> dict[str, Any]:
    import jaxlib

    inc = xla_ffi_include_dir()
    return {
        "extra_cflags": [
            "-O2",
            f'-DKFFI_JAX_XLA_FFI_HEADERS="{_headers_digest(inc)}"',
            # jaxlib re-exports its version without listing it (no __all__).
            f'-DKFFI_JAX_JAXLIB_VERSION="{jaxlib.__version__}"',  # type: ignore[attr-defined]
        ],
        "extra_include_paths": [inc],
        "depends": [_LOCAL_HEADER],
    }


# The loaded handler module (built on first use). Thread safe.
handler_module: Glue[Any] = Glue("kffi_jax_handler", _SOURCES, _options)
