"""python/kffi/runtime/_error.py: native errors become Python exceptions (and back), tracebacks kept."""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import builtins
import sys
import traceback
import types
from collections.abc import Callable
from typing import TypeVar, cast, overload

from .. import _core


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """``"1 dimension"``, ``"2 dimensions"``: a count and its noun, for messages (the plural is
    the noun + "s" unless given). The C++ side's twin is ``kffi::details::Counted``."""
    return f"1 {noun}" if n == 1 else f"{n} {plural or noun + 's'}"


class Error(RuntimeError):
    """A native error whose kind has no Python exception class of its own.

    ``kind`` holds the native kind (e.g. "InternalError"); the message is unchanged.
    """

    kind = "RuntimeError"

    def __init__(self, message: str = "", kind: str | None = None) -> None:
        super().__init__(message)
        if kind is not None:
            self.kind = kind


_BUILTIN_KINDS = (
    "TypeError",
    "ValueError",
    "RuntimeError",
    "IndexError",
    "KeyError",
    "AttributeError",
    "NotImplementedError",
    "AssertionError",
    "MemoryError",
    "OverflowError",
    "ZeroDivisionError",
    "KeyboardInterrupt",
    "OSError",
    "FileNotFoundError",
    "BufferError",
    "StopIteration",
)
_KIND_TO_CLASS: dict[str, type[BaseException]] = {k: getattr(builtins, k) for k in _BUILTIN_KINDS}
_CLASS_TO_KIND: dict[type[BaseException], str] = {v: k for k, v in _KIND_TO_CLASS.items()}


_E = TypeVar("_E", bound=type[BaseException])


@overload
def register_error(kind: str, cls: None = None) -> Callable[[_E], _E]: ...
@overload
def register_error(kind: str, cls: _E) -> _E: ...
def register_error(kind: str, cls: _E | None = None) -> _E | Callable[[_E], _E]:
    """Maps a native error kind to a Python exception class (both directions).

    Usable as a decorator: ``@kffi.register_error("MyError") class MyError(kffi.Error): ...``
    """

    def do_register(c: _E) -> _E:
        if not (isinstance(c, type) and issubclass(c, BaseException)):
            raise TypeError(f"register_error expects an exception class, got {c!r}")
        _KIND_TO_CLASS[kind] = c
        _CLASS_TO_KIND[c] = kind
        return c

    return do_register if cls is None else do_register(cls)


# Frames made from native backtrace lines, cached by (file, line, function).
_FRAME_CACHE: dict[tuple[str, int, str], types.FrameType] = {}


class _FrameMarker(Exception):
    pass


def _native_frame(filename: str, lineno: int, name: str) -> types.FrameType:
    key = (filename, lineno, name)
    frame = _FRAME_CACHE.get(key)
    if frame is None:
        # A code object that raises at the native line gives a real frame there.
        code = compile("\n" * (max(lineno, 1) - 1) + "raise _M", filename, "exec")
        code = code.replace(co_name=name)
        try:
            exec(code, {"_M": _FrameMarker})  # noqa: S102 (a synthetic frame, built here)
        except _FrameMarker:
            tb = sys.exc_info()[2]
            assert tb is not None  # in an except block
            frame = tb.tb_next.tb_frame if tb.tb_next is not None else tb.tb_frame
        assert frame is not None  # the code raised: the except block set it
        if len(_FRAME_CACHE) < 4096:
            _FRAME_CACHE[key] = frame
    return frame


def _parse_backtrace(backtrace: str) -> list[tuple[str, int, str]]:
    """Native frames, most recent first: lines `  File "f", line N, in func [...]`."""
    frames = []
    for line in backtrace.splitlines():
        line = line.strip()
        if not line.startswith('File "'):
            continue
        try:
            rest = line[len('File "') :]
            filename, rest = rest.split('", line ', 1)
            lineno_str, rest = rest.split(", in ", 1)
            name = rest.split(" [", 1)[0]
            frames.append((filename, int(lineno_str), name))
        except ValueError:
            continue
    return frames


def _with_native_frames(exc: BaseException, backtrace: str) -> BaseException:
    tb = exc.__traceback__
    # Python tracebacks run oldest to newest; native frames are most recent first.
    for filename, lineno, name in _parse_backtrace(backtrace):
        frame = _native_frame(filename, lineno, name)
        tb = types.TracebackType(tb, frame, frame.f_lasti, lineno)
    return exc.with_traceback(tb)


def _make_exception(kind: str, message: str, backtrace: str, original: object) -> BaseException:
    if original is not None and isinstance(original, BaseException):
        # A Python exception raised in a callback: the same exception, with the native frames it
        # crossed put between the outer caller and the callback's own frames.
        own = _parse_backtrace(_format_python_tb(original.__traceback__))
        native = _parse_backtrace(backtrace)[len(own) :] if own else _parse_backtrace(backtrace)
        tb = original.__traceback__
        for filename, lineno, name in native:
            frame = _native_frame(filename, lineno, name)
            tb = types.TracebackType(tb, frame, frame.f_lasti, lineno)
        return original.with_traceback(tb)
    cls = _KIND_TO_CLASS.get(kind)
    exc: BaseException
    if cls is None:
        exc = Error(message, kind)
    elif cls is KeyError:
        exc = MissingKeyError(message)
    else:
        exc = cls(message)
        if isinstance(exc, Error):
            exc.kind = kind  # a class from register_error: its instances carry their kind
    return _with_native_frames(exc, backtrace)


class MissingKeyError(KeyError):
    """The KeyError native code raises (a missing global function, key or name): a KeyError
    that prints its message as is (a plain KeyError shows the repr of its key)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


def _format_python_tb(tb: types.TracebackType | None) -> str:
    lines = []
    for fs in reversed(traceback.extract_tb(tb)):
        lines.append(f'  File "{fs.filename}", line {fs.lineno}, in {fs.name}')
    return "\n".join(lines)


def _describe_exception(exc: BaseException) -> tuple[str, str, str]:
    cls = type(exc)
    kind = None
    for klass in cls.__mro__:
        if klass in _CLASS_TO_KIND:
            kind = _CLASS_TO_KIND[klass]
            break
        if klass is Error:
            # Reached before its base RuntimeError: a kffi.Error keeps its own kind.
            kind = cast(Error, exc).kind
            break
    if kind is None:
        kind = cls.__name__
    if isinstance(exc, KeyError) and len(exc.args) == 1 and not isinstance(exc, MissingKeyError):
        message = str(exc.args[0])
    else:
        message = str(exc)
    return (kind or "RuntimeError", message, _format_python_tb(exc.__traceback__))


_core._set_error_hooks(_make_exception, _describe_exception)
