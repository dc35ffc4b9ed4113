"""tests/python/core/test_callbacks.py: Python -> C++ -> Python -> C++ calls through testing.apply,
errors raised in callbacks, callbacks from native threads, and the global function registry."""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import traceback
import uuid

import kffi
import pytest


def unique_name(prefix: str = "pytest.callbacks") -> str:
    return f"{prefix}.{uuid.uuid4().hex[:12]}"


@pytest.fixture
def global_name():
    """A fresh global name, removed after the test."""
    name = unique_name()
    yield name
    kffi.remove_global_func(name)


# ---- calls through C++ ----------------------------------------------------------------------


def test_apply_calls_a_python_callable_with_the_arguments(t):
    assert t.apply(lambda a, b: a + b, 1, 2) == 3
    assert t.apply(lambda *args: args, 1, "x", None) == (1, "x", None)


def test_callback_receives_converted_values(t):
    seen = []
    t.apply(lambda *args: seen.extend(args), 1, 2.5, "str", b"bytes", (1, 2), {"k": 1}, None)
    assert seen[:5] == [1, 2.5, "str", b"bytes", (1, 2)]
    assert isinstance(seen[4], kffi.Array)
    assert isinstance(seen[5], kffi.Map) and seen[5]["k"] == 1
    assert seen[6] is None


def test_callback_result_comes_back_converted(t):
    result = t.apply(lambda: [1, {"a": "b"}])
    assert type(result) is tuple
    assert result[1]["a"] == "b"
    assert t.apply(lambda: None) is None


def test_python_to_cpp_to_python_to_cpp(t):
    # testing.apply(testing.apply, f, x): C++ calls C++ (through a Function value) calls Python,
    # which calls back into C++.
    assert t.apply(t.apply, lambda x: t.add_one(x) * 10, 4) == 50


def test_deeply_nested_callbacks(t):
    def level(n):
        if n == 0:
            return "bottom"
        return t.apply(level, n - 1)

    assert level(30) == "bottom"


def test_cpp_function_passed_as_callback(t):
    assert t.apply(t.add_one, 41) == 42


def test_callback_called_many_times_from_cpp(t):
    calls = []

    def f(x):
        calls.append(x)
        return x * 2

    assert t.call_n_times(f, 1000, 21) == 42
    assert len(calls) == 1000


def test_python_object_passes_through_cpp_unchanged(t):
    marker = object()
    assert t.apply(lambda x: x, marker) is marker


def test_function_value_returned_from_cpp_is_callable(t):
    f = t.echo(lambda x: x + "!")
    assert isinstance(f, kffi.Function)
    assert f("hi") == "hi!"
    assert t.apply(f, "again") == "again!"


def test_lambda_closure_state_is_kept(t):
    counter = {"n": 0}

    def bump():
        counter["n"] += 1
        return counter["n"]

    f = kffi.Function(bump)
    assert [t.apply(f) for _ in range(3)] == [1, 2, 3]


# ---- exceptions raised in callbacks -----------------------------------------------------------


class CallbackError(Exception):
    pass


def test_exception_in_callback_comes_back_as_same_type_and_instance(t):
    raised = CallbackError("from the callback")

    def callback():
        raise raised

    with pytest.raises(CallbackError) as info:
        t.apply(callback)
    assert info.value is raised
    assert str(info.value) == "from the callback"


@pytest.mark.parametrize(
    "exc_type",
    [
        ValueError,
        TypeError,
        KeyError,
        IndexError,
        RuntimeError,
        ZeroDivisionError,
        OSError,
        StopIteration,
    ],
)
def test_builtin_exception_in_callback_keeps_its_type(t, exc_type):
    def callback():
        raise exc_type("boom")

    with pytest.raises(exc_type) as info:
        t.apply(callback)
    assert type(info.value) is exc_type


def test_exception_through_two_cpp_layers_is_the_same_instance(t):
    raised = CallbackError("deep")

    def callback(x):
        raise raised

    with pytest.raises(CallbackError) as info:
        t.apply(t.apply, callback, 1)
    assert info.value is raised


def test_callback_traceback_has_callback_frames_and_cpp_frame(t):
    def inner_callback():
        raise CallbackError("tb")

    with pytest.raises(CallbackError) as info:
        t.apply(inner_callback)
    frames = traceback.extract_tb(info.value.__traceback__)
    names = [f.name for f in frames]
    files = [f.filename for f in frames]
    # Outer Python caller, then the native frame of testing.apply, then the callback.
    assert names[0] == "test_callback_traceback_has_callback_frames_and_cpp_frame"
    assert names[-1] == "inner_callback"
    assert "testing.apply" in names
    assert names.index("testing.apply") < names.index("inner_callback")
    assert any(f.endswith("testing_lib.cc") for f in files)
    cpp_frame = frames[names.index("testing.apply")]
    assert cpp_frame.filename.endswith("testing_lib.cc")
    assert cpp_frame.lineno > 0


def test_callback_exception_traceback_is_printable(t):
    def bad():
        raise CallbackError("printable")

    with pytest.raises(CallbackError) as info:
        t.apply(bad)
    text = "".join(traceback.format_exception(info.value))
    assert "testing_lib.cc" in text
    assert "in bad" in text
    assert "CallbackError: printable" in text


def test_cpp_sees_python_exception_kind_and_message(t):
    def callback():
        raise ValueError("seen from C++")

    assert t.catch_error(callback) == ("ValueError", "seen from C++")


def test_cpp_sees_kind_of_unregistered_exception_class_by_its_name(t):
    def callback():
        raise CallbackError("custom")

    assert t.catch_error(callback) == ("CallbackError", "custom")


def test_cpp_sees_kind_of_kffi_error_raised_in_python(t):
    def callback():
        raise kffi.Error("with a kind", "PythonMadeError")

    assert t.catch_error(callback) == ("PythonMadeError", "with a kind")


def test_key_error_message_is_the_key_text_in_cpp(t):
    def callback():
        raise KeyError("missing-key")

    assert t.catch_error(callback) == ("KeyError", "missing-key")


def test_callback_returning_normally_is_not_an_error(t):
    assert t.catch_error(lambda: 1) is None


def test_callback_result_that_cannot_convert_raises(t):
    with pytest.raises(OverflowError):
        t.apply(lambda: 2**70)


def test_wrong_arity_callback_raises_type_error(t):
    with pytest.raises(TypeError):
        t.apply(lambda a, b: a, 1)


# ---- global registry --------------------------------------------------------------------------


def test_register_and_get_global_func(global_name):
    kffi.register_global_func(global_name, lambda x: x * 3)
    f = kffi.get_global_func(global_name)
    assert isinstance(f, kffi.Function)
    assert f(5) == 15


def test_register_global_func_as_decorator_returns_the_function(global_name):
    @kffi.register_global_func(global_name)
    def triple(x):
        return 3 * x

    assert triple(2) == 6  # still the plain Python function
    assert kffi.get_global_func(global_name)(2) == 6


def test_global_registered_from_python_is_callable_from_cpp(t, global_name):
    kffi.register_global_func(global_name, lambda a, b: f"{a}-{b}")
    looked_up = kffi.get_global_func(global_name)
    assert t.apply(looked_up, "x", 7) == "x-7"


def test_kffi_function_can_be_registered_under_a_new_name(t, global_name):
    kffi.register_global_func(global_name, t.add_one)
    f = kffi.get_global_func(global_name)
    assert f.same_as(t.add_one)
    assert f(1) == 2


def test_registering_a_taken_name_is_key_error(global_name):
    kffi.register_global_func(global_name, lambda: 1)
    with pytest.raises(KeyError, match=f"Global function `{global_name}` is already registered"):
        kffi.register_global_func(global_name, lambda: 2)
    assert kffi.get_global_func(global_name)() == 1


def test_override_replaces_a_global(global_name):
    kffi.register_global_func(global_name, lambda: 1)
    kffi.register_global_func(global_name, lambda: 2, override=True)
    assert kffi.get_global_func(global_name)() == 2


def test_remove_global_func_reports_whether_it_existed(global_name):
    kffi.register_global_func(global_name, lambda: 1)
    assert kffi.remove_global_func(global_name) is True
    assert kffi.remove_global_func(global_name) is False
    assert kffi.get_global_func(global_name, allow_missing=True) is None


def test_function_obtained_before_removal_stays_callable(global_name):
    kffi.register_global_func(global_name, lambda: "alive")
    f = kffi.get_global_func(global_name)
    kffi.remove_global_func(global_name)
    assert f() == "alive"


def test_get_missing_global_raises_value_error_or_returns_none():
    name = unique_name("pytest.missing")
    with pytest.raises(ValueError, match=f"Global function '{name}' is not registered"):
        kffi.get_global_func(name)
    assert kffi.get_global_func(name, allow_missing=True) is None


def test_list_global_func_names_is_sorted_and_has_testing_and_new_globals(t, global_name):
    kffi.register_global_func(global_name, lambda: None)
    names = kffi.list_global_func_names()
    assert names == sorted(names)
    for n in ("testing.echo", "testing.apply", "testing.raise_error", global_name):
        assert n in names
    kffi.remove_global_func(global_name)
    assert global_name not in kffi.list_global_func_names()


def test_register_non_callable_is_type_error(global_name):
    with pytest.raises(TypeError, match="register_global_func expects a callable, got int"):
        kffi.register_global_func(global_name, 3)


# ---- callbacks from native threads -----------------------------------------------------------


def test_callback_called_from_a_native_thread(t):
    import threading

    def callback(a, b):
        return a + b, threading.current_thread() is threading.main_thread()

    assert t.call_in_thread(callback, 20, 22) == (42, False)


def test_exception_in_callback_on_native_thread_reaches_the_caller(t):
    raised = CallbackError("from another thread")

    def callback():
        raise raised

    with pytest.raises(CallbackError) as info:
        t.call_in_thread(callback)
    assert info.value is raised


def test_native_error_on_native_thread_reaches_the_caller(t):
    with pytest.raises(KeyError, match="thread key"):
        t.call_in_thread(t.raise_error, "KeyError", "thread key")


def test_callable_released_on_a_native_thread_is_freed(t):
    import gc
    import weakref

    class Callable:
        def __call__(self):
            return "called"

    obj = Callable()
    ref = weakref.ref(obj)
    assert t.call_in_thread(obj) == "called"
    del obj
    gc.collect()
    assert ref() is None


def test_interpreter_exits_cleanly_with_live_kffi_objects(testing_module, tmp_path):
    import subprocess
    import sys

    script = tmp_path / "exit_with_objects.py"
    script.write_text(
        "import sys, kffi\n"
        "kffi.load_module(sys.argv[1])\n"
        "kffi.register_global_func('pytest.exit.cb', lambda x: x)\n"
        "keep = [kffi.Function(lambda: 1), kffi.to_kffi({'f': lambda: 2}),\n"
        "        kffi.get_global_func('testing.echo')(lambda: 3)]\n"
        "try:\n"
        "    kffi.get_global_func('testing.raise_error')('ValueError', 'x')\n"
        "except ValueError as e:\n"
        "    keep.append(e)\n"
        "print('done')\n"
    )
    proc = subprocess.run(
        [sys.executable, str(script), testing_module.name],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "done"
    assert proc.stderr == ""
