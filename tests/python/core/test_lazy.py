"""tests/python/core/test_lazy.py: kffi._lazy.lazy, the package's one lazy singleton (glue built on
first use, libkffi_tvm opened once, jax's export hook installed once)."""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import threading
import time

import pytest
from kffi._lazy import lazy
from kffi.tvm import _bridge as _tvm


def test_first_call_makes_the_value_once_for_every_thread():
    made = []

    @lazy
    def value():
        """The docstring stays."""
        made.append(1)
        time.sleep(0.05)  # widens the window in which other threads arrive
        return object()

    assert not value.done and value.__doc__ == "The docstring stays."
    results = []
    threads = [threading.Thread(target=lambda: results.append(value())) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(made) == 1 and value.done
    assert len(results) == 8 and all(r is results[0] for r in results)
    assert value() is results[0]


def test_a_failed_make_stores_nothing_and_the_next_call_tries_again():
    calls = []

    @lazy
    def value():
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("first try fails")
        return 7

    with pytest.raises(RuntimeError, match="^first try fails$"):
        value()
    assert not value.done
    assert value() == 7 and value() == 7 and len(calls) == 2


def test_the_package_singletons_are_lazy():
    pytest.importorskip("jax")
    from kffi.jax import _export, _glue

    for f in (
        _tvm._bridge,
        _tvm._object_from_address,
        _tvm.note_installed_runtime,
        _glue.handler_module,
        _export._install_hook,
    ):
        assert isinstance(f, lazy), f
