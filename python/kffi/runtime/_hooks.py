"""python/kffi/runtime/_hooks.py: where higher layers plug into the runtime, which imports none.

The runtime is a low layer (tests/python/house/test_layers.py): it never imports the TVM bridge
or a framework integration. What it needs of them goes through here:

- ``before_load`` and ``before_lookup``: callables run before a library is loaded and before a
  module's function is wrapped. kffi.tvm adds its own on import (the face imports it, so they are
  in place before any library loads).

The frameworks and kffi's integrations for them are rows of runtime/_frameworks.py.
"""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

from collections.abc import Callable

before_load: list[Callable[[], None]] = []
before_lookup: list[Callable[[], None]] = []
