"""python/kffi/toolchain/glue.py: a framework integration's native glue, built on first use.

Built on first use and loaded once: the helper kffi.torch (torch/_glue.py) builds its glue with.
(kffi.jax's glue, the XLA handler, needs none: it ships prebuilt and jax/_glue.py loads it.)

The glue is C++ against the headers of the framework that runs, so it is built where that
framework is, by kffi.cpp: keyed by the sources, the compiler, the flags and the ``depends``
files (the glue's own headers), locked against other processes building the same key, and
cached, so an unchanged framework loads it in milliseconds. The loaded library is a
kffi._lazy.lazy singleton: made once, from any thread, a failed make tried again.
"""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from .._lazy import lazy
from ..runtime._api import load_module
from . import cpp

T = TypeVar("T")


class Glue(lazy[T]):
    """The glue library ``name`` of ``sources``, a lazy singleton.

    Calling it gives the loaded glue (built on first use; thread safe). ``options()`` gives the build's keywords of
    :func:`kffi.cpp.build` (flags, include paths, ``depends``), computed on first use (they need
    the framework's import); ``load(glue)`` makes the value from the glue (default: builds it and
    loads it as a kffi.Module); ``failure`` words a failed build (a RuntimeError, the compiler's
    output after it) where the caller wants its own message instead of kffi.cpp.BuildError.
    """

    def __init__(
        self,
        name: str,
        sources: Sequence[str],
        options: Callable[[], dict[str, Any]],
        *,
        load: Callable[[Glue[T]], T] | None = None,
        failure: str | None = None,
        quiet: bool | None = None,
    ) -> None:
        self.name = name
        self.sources = list(sources)
        self._options = options
        self._load = load if load is not None else _load_module
        self._failure = failure
        self._quiet = quiet

        def make() -> T:
            return self._load(self)

        super().__init__(make)

    def plan(self) -> cpp._Plan:
        """The build (its key, its output path), without building."""
        o = self._options()
        return cpp._plan_from_files(
            self.name,
            self.sources,
            o.get("extra_cflags"),
            o.get("extra_cuda_cflags"),
            o.get("extra_ldflags"),
            o.get("extra_include_paths"),
            None,
            o.get("depends"),
        )

    def built(self) -> bool:
        """Whether the library is loaded or in the cache already (nothing is built).

        False where the build cannot even be planned (no compiler: its identity is in the key).
        """
        if self.done:
            return True
        try:
            return os.path.exists(self.plan().output)
        except (RuntimeError, OSError):
            return False

    def build(self) -> str:
        """Builds the library (or finds it in the cache) and returns its path.

        A failed build, or one that cannot start (no compiler), raises the glue's own message
        when it has one.
        """
        try:
            return cpp._build(self.plan(), False, self._quiet)
        except RuntimeError as e:  # cpp.BuildError, or no compiler to plan the build with
            if self._failure is None:
                raise
            raise RuntimeError(f"{self._failure}\n{e}") from None


def _load_module(glue: Glue[Any]) -> Any:
    return load_module(glue.build())
