"""tests/python/core/test_errors.py: native errors become Python exceptions by kind, keep their
message, and carry the native frames in the Python traceback."""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import traceback
import uuid

import kffi
import pytest

BUILTIN_KINDS = [
    ("TypeError", TypeError),
    ("ValueError", ValueError),
    ("RuntimeError", RuntimeError),
    ("IndexError", IndexError),
    ("KeyError", KeyError),
    ("AttributeError", AttributeError),
    ("NotImplementedError", NotImplementedError),
    ("AssertionError", AssertionError),
    ("MemoryError", MemoryError),
]


@pytest.mark.parametrize("kind,exc_type", BUILTIN_KINDS)
def test_native_error_kind_maps_to_builtin_exception(t, kind, exc_type):
    with pytest.raises(exc_type) as info:
        t.raise_error(kind, f"a {kind} from C++")
    assert str(info.value) == f"a {kind} from C++"
    assert not isinstance(info.value, kffi.Error)


def test_key_error_prints_message_without_quotes(t):
    with pytest.raises(KeyError) as info:
        t.raise_error("KeyError", "no such key: k")
    assert str(info.value) == "no such key: k"


@pytest.mark.parametrize("kind", ["InternalError", "CustomKernelError", "cudaError"])
def test_other_kinds_become_kffi_error_with_kind(t, kind):
    with pytest.raises(kffi.Error) as info:
        t.raise_error(kind, "unusual")
    assert info.value.kind == kind
    assert str(info.value) == "unusual"
    assert isinstance(info.value, RuntimeError)


def test_kffi_error_is_a_runtime_error_subclass():
    assert issubclass(kffi.Error, RuntimeError)
    err = kffi.Error("m", "SomeKind")
    assert err.kind == "SomeKind" and str(err) == "m"
    assert kffi.Error("m").kind == "RuntimeError"


@pytest.mark.parametrize(
    "message",
    [
        "",
        "plain",
        "multi\nline\nmessage",
        "unicode ✓ é 日本",
        "x" * 10000,
        "quotes ' \" and `backticks`",
    ],
)
def test_message_is_unchanged(t, message):
    with pytest.raises(ValueError) as info:
        t.raise_error("ValueError", message)
    assert str(info.value) == message


def test_register_error_maps_a_kind_to_a_class(t):
    kind = f"PyTestError{uuid.uuid4().hex[:8]}"

    class MyError(kffi.Error):
        pass

    assert kffi.register_error(kind, MyError) is MyError
    with pytest.raises(MyError) as info:
        t.raise_error(kind, "registered")
    assert str(info.value) == "registered"
    assert info.value.kind == kind


def test_register_error_as_decorator(t):
    kind = f"PyTestDecorated{uuid.uuid4().hex[:8]}"

    @kffi.register_error(kind)
    class Decorated(ValueError):
        pass

    with pytest.raises(Decorated, match="decorated"):
        t.raise_error(kind, "decorated")


def test_registered_class_travels_back_to_cpp_with_its_kind(t):
    kind = f"PyTestRoundTrip{uuid.uuid4().hex[:8]}"

    @kffi.register_error(kind)
    class RoundTrip(kffi.Error):
        pass

    def callback():
        raise RoundTrip("there and back")

    assert t.catch_error(callback) == (kind, "there and back")


def test_register_error_rejects_non_exception_classes():
    with pytest.raises(TypeError, match="expects an exception class"):
        kffi.register_error("Nope", int)


# ---- backtraces -------------------------------------------------------------------------------


def test_native_frames_appear_in_python_traceback(t):
    with pytest.raises(ValueError) as info:
        t.raise_error("ValueError", "with frames")
    frames = traceback.extract_tb(info.value.__traceback__)
    native = [f for f in frames if f.filename.endswith("testing_lib.cc")]
    assert native, [(f.filename, f.name) for f in frames]
    names = [f.name for f in native]
    # The frame the C++ code recorded, and the frame of the function it left.
    assert "raise_error" in names
    assert "testing.raise_error" in names
    assert all(f.lineno > 0 for f in native)


def test_native_frames_come_after_the_python_caller(t):
    with pytest.raises(RuntimeError) as info:
        t.raise_error("RuntimeError", "order")
    names = [f.name for f in traceback.extract_tb(info.value.__traceback__)]
    assert names[0] == "test_native_frames_come_after_the_python_caller"
    # Most recent call last, as Python prints it: the innermost C++ frame is the last one.
    assert names[-1] == "raise_error"


def test_formatted_traceback_shows_native_file_and_line(t):
    with pytest.raises(IndexError) as info:
        t.raise_error("IndexError", "formatted")
    text = "".join(traceback.format_exception(info.value))
    assert 'testing_lib.cc", line' in text
    assert "IndexError: formatted" in text


def test_kffi_error_traceback_has_native_frames(t):
    with pytest.raises(kffi.Error) as info:
        t.raise_error("InternalError", "frames")
    files = [f.filename for f in traceback.extract_tb(info.value.__traceback__)]
    assert any(f.endswith("testing_lib.cc") for f in files)


def test_error_crossing_two_boundaries_gains_frames(t):
    with pytest.raises(ValueError) as info:
        t.apply(t.raise_error, "ValueError", "twice")
    names = [f.name for f in traceback.extract_tb(info.value.__traceback__)]
    assert "testing.apply" in names and "testing.raise_error" in names
    assert names.index("testing.apply") < names.index("testing.raise_error")


# ---- messages made by the C++ side --------------------------------------------------------------


def test_typed_call_type_mismatch_message(t):
    with pytest.raises(TypeError) as info:
        t.add_one("one")
    assert str(info.value) == (
        "arg0: expected int, got str (argument #0 of `testing.add_one(arg0: int) -> int`)"
    )


@pytest.mark.parametrize(
    "value,got",
    [(1.5, "float"), (None, "None"), ((1,), "tuple"), (b"bytes", "bytes"), ({"a": 1}, "dict")],
)
def test_typed_call_type_mismatch_names_what_it_got(t, value, got):
    # The Python type the caller passed, not the kffi type it would convert to (Array, Map).
    with pytest.raises(TypeError) as info:
        t.add_one(value)
    assert str(info.value).startswith(f"arg0: expected int, got {got} (argument #0 of `")


@pytest.mark.parametrize("args", [(), (1, 2), (1, 2, 3)])
def test_typed_call_argument_count_message(t, args):
    with pytest.raises(TypeError) as info:
        t.add_one(*args)
    assert str(info.value) == (
        f"testing.add_one: expected 1 argument, got {len(args)} "
        "(`testing.add_one(arg0: int) -> int`)"
    )


def test_type_mismatch_has_the_function_frame(t):
    with pytest.raises(TypeError) as info:
        t.add_one("x")
    names = [f.name for f in traceback.extract_tb(info.value.__traceback__)]
    assert "testing.add_one" in names


def test_packed_function_error_message(t):
    with pytest.raises(TypeError, match="testing.apply expects a function and its arguments"):
        t.apply()


def test_errors_do_not_leak_into_later_calls(t):
    for _ in range(3):
        with pytest.raises(ValueError):
            t.raise_error("ValueError", "once")
        assert t.add_one(1) == 2
