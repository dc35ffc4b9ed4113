"""python/kffi/jax/_glue.py: kffi.jax's native glue, the XLA handler, loaded once from the package.

The handler ships prebuilt: cmake/jax_handler.cmake builds it with kffi (against _xla_ffi.h, kffi's
own declaration of XLA's FFI C API, not jaxlib's headers) and installs it in kffi/jax/lib. It agrees
on the API version with XLA at run time, so one binary serves every supported jaxlib, and the first
call needs neither a compiler nor kffi's build cache.
"""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import os

from .._lazy import lazy
from ..runtime._api import load_module
from ..runtime._objects import Module

# Where the package's install puts it (cmake/jax_handler.cmake).
HANDLER_PATH = os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "lib", "libkffi_jax_handler.so"
)


@lazy
def handler_module() -> Module:
    """The loaded handler library (opened once, from any thread)."""
    if not os.path.exists(HANDLER_PATH):
        raise RuntimeError(
            f"kffi.jax: kffi was installed without its JAX handler (no {HANDLER_PATH}); "
            "reinstall kffi (pip install --force-reinstall kffi, or pip install . from a source "
            "checkout)"
        )
    return load_module(HANDLER_PATH)
