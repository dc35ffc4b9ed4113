"""python/kffi/_lazy.py: a value made once, on first use, from any thread.

The package's one lazy singleton (glue built on first use, a library opened once, a hook
installed once): the lowest layer, importing nothing of kffi, so every layer can use it.
"""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Generic, TypeVar

__all__ = ["lazy"]

T = TypeVar("T")


class lazy(Generic[T]):
    """Decorates a function of no arguments: the first call runs it, and every call returns its
    result. A concurrent first call waits for the one running (a lock, taken only until the value
    exists); a run that raises stores nothing, so the next call tries again. ``done`` tells
    whether the value exists (without making it)."""

    def __init__(self, make: Callable[[], T]) -> None:
        self._make = make
        self._lock = threading.Lock()
        self._done = False
        self._value: T | None = None
        functools.update_wrapper(self, make)

    @property
    def done(self) -> bool:
        return self._done

    def __call__(self) -> T:
        if not self._done:
            with self._lock:
                if not self._done:
                    self._value = self._make()
                    self._done = True  # set last: a reader that sees it sees the value
        return self._value  # type: ignore[return-value]
