"""python/kffi/runtime/_hooks.py: where higher layers plug into the runtime, which imports none.

The runtime is a low layer (tests/python/test_layers.py): it never imports the TVM bridge or a
framework integration. What it needs of them goes through here:

- ``before_load`` and ``before_lookup``: callables run before a library is loaded and before a
  module's function is wrapped. kffi.tvm adds its own on import (the face imports it, so they are
  in place before any library loads).
- ``INTEGRATIONS``: the framework integrations by name, as the modules that implement them. They
  load on first use (``kffi.torch``, ``mod.torch_ops(...)``, the first torch tensor argument):
  importing kffi imports no framework. Adding one (MLX, say) is its subpackage plus one line here.
"""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import importlib
from collections.abc import Callable
from types import ModuleType

before_load: list[Callable[[], None]] = []
before_lookup: list[Callable[[], None]] = []

# Entry points, not imports: the runtime names an integration's module and imports it only when
# it is asked for.
INTEGRATIONS: dict[str, str] = {
    "jax": "kffi.jax",
    "torch": "kffi.torch",
    "cuda": "kffi.cuda",  # NVRTC and the CUDA driver, opened only when used
}


def integration(name: str) -> ModuleType:
    """The framework integration ``name`` (imported on first use)."""
    return importlib.import_module(INTEGRATIONS[name])


def package_getattr(name: str) -> ModuleType:
    """The package's ``__getattr__``: ``kffi.jax`` and ``kffi.torch`` load on first use."""
    if name in INTEGRATIONS:
        return integration(name)
    raise AttributeError(f"module 'kffi' has no attribute {name!r}")


def first_torch_tensor() -> None:
    """Run once, on the first torch tensor argument (runtime/_types.py): kffi.torch's tensor
    import, when its library is built already (never builds it here: the first torch tensor
    argument must not wait for a compiler). kffi.torch.fast_tensor_import() builds it."""
    try:
        integration("torch").fast_tensor_import(build=False)
    except Exception:  # noqa: S110 (a torch kffi.torch cannot use: torch's own import stays)
        pass
