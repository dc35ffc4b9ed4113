"""tests/python/core/test_leaks.py: many calls leave reference counts, Python memory, native memory
and native object counts where they were."""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import gc
import sys
import tracemalloc

import kffi
import pytest
from malloc_heap import mallinfo_used

np = pytest.importorskip("numpy")

CALLS = 100_000


class Plain:
    pass


def values_to_pass():
    """(id, factory) of one value of every kind; a factory so each test gets fresh objects."""
    items = [
        ("big_int", lambda: 10**12 + 7),
        ("float", lambda: 12345.678),
        ("short_str", lambda: "".join(["s", "h"])),
        ("long_str", lambda: "a long string, " * 4),
        ("str_with_nul", lambda: "abc\x00defghij"),
        ("bytes", lambda: b"some bytes here" * 2),
        ("tuple", lambda: (1, "two", 3.0)),
        ("list", lambda: [1, [2, 3]]),
        ("dict", lambda: {"a": 1, "b": (2,)}),
        ("ndarray", lambda: np.zeros((3, 4), np.float32)),
        ("ndarray_view", lambda: np.zeros((4, 4), np.float32)[::2, 1:]),
        ("read_only_ndarray", lambda: read_only(np.zeros(3))),
        ("kffi_array", lambda: kffi.to_kffi((1, 2, 3))),
        ("kffi_map", lambda: kffi.to_kffi({"k": "v"})),
        ("kffi_tensor", lambda: kffi.from_dlpack(np.zeros(4))),
        ("kffi_function", lambda: kffi.Function(lambda: None)),
        ("python_object", Plain),
        ("callable", lambda: lambda x: x),
        ("dtype", lambda: kffi.dtype("float16")),
        ("device", lambda: kffi.Device("cuda:1")),
    ]
    try:
        import torch

        items.append(("torch_tensor", lambda: torch.zeros(3, 2)))
        items.append(("torch_view", lambda: torch.zeros(4, 4).t()[1:]))
    except ImportError:
        pass
    return items


def read_only(a):
    a.flags.writeable = False
    return a


VALUES = values_to_pass()


@pytest.mark.parametrize("factory", [v[1] for v in VALUES], ids=[v[0] for v in VALUES])
def test_argument_refcount_unchanged_over_many_calls(t, factory):
    value = factory()
    echo, nop = t.echo, t.nop
    for _ in range(100):  # warm up per-type caches
        echo(value)
        nop(value)
    before = sys.getrefcount(value)
    for _ in range(CALLS):
        nop(value)
        echo(value)
    gc.collect()
    assert sys.getrefcount(value) == before


@pytest.mark.parametrize("factory", [v[1] for v in VALUES], ids=[v[0] for v in VALUES])
def test_result_refcount_is_one_owner(t, factory):
    value = factory()
    echo = t.echo
    for _ in range(CALLS // 10):
        result = echo(value)
    gc.collect()
    # Only `result` holds a fresh result; a result that is the argument itself has exactly one
    # more owner than the argument alone. What getrefcount reports for one owner is measured on a
    # fresh object: 2 through 3.13 (its own argument counts), 1 from 3.14 (which borrows it).
    probe = object()
    one_owner = sys.getrefcount(probe)
    if result is value:
        before = sys.getrefcount(value)
        del result
        assert sys.getrefcount(value) == before - 1
    else:
        assert sys.getrefcount(result) == one_owner


def test_refcounts_through_callbacks(t):
    arg = [1, 2, 3]
    seen = []

    def callback(x):
        seen.append(x)
        return arg

    before_arg = sys.getrefcount(arg)
    before_cb = sys.getrefcount(callback)
    for _ in range(CALLS // 10):
        result = t.apply(callback, arg)
        seen.clear()
    del result
    gc.collect()
    assert sys.getrefcount(arg) == before_arg
    assert sys.getrefcount(callback) == before_cb


def test_refcounts_through_raised_errors(t):
    message = "an error message that is long enough"
    before = sys.getrefcount(message)
    for _ in range(CALLS // 10):
        try:
            t.raise_error("ValueError", message)
        except ValueError:
            pass
    gc.collect()
    assert sys.getrefcount(message) == before


def test_refcount_of_exception_raised_in_callback(t):
    exc = RuntimeError("kept")

    def callback():
        # Raising one instance again grows its traceback (as in plain Python): start afresh.
        raise exc.with_traceback(None)

    for _ in range(10):
        with pytest.raises(RuntimeError):
            t.apply(callback)
    exc.__traceback__ = None
    gc.collect()
    before = sys.getrefcount(exc)
    for _ in range(CALLS // 20):
        try:
            t.apply(callback)
        except RuntimeError:
            pass
    exc.__traceback__ = None
    gc.collect()
    assert sys.getrefcount(exc) == before


# ---- native object counts -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "factory",
    [
        lambda: kffi.to_kffi((1, 2)),
        lambda: kffi.to_kffi({"a": 1}),
        lambda: kffi.from_dlpack(np.zeros(2)),
        lambda: kffi.Function(lambda: None),
    ],
    ids=["array", "map", "tensor", "function"],
)
def test_native_use_count_stable(t, factory):
    obj = factory()
    assert obj._use_count == 1
    assert t.use_count(obj) == 1  # arguments are borrowed: no reference added for the call
    for _ in range(CALLS):
        t.nop(obj)
        t.echo(obj)
    gc.collect()
    assert obj._use_count == 1


def test_native_use_count_of_containers_holding_objects(t):
    inner = kffi.to_kffi({"k": 1})
    outer = t.echo([inner, inner])
    assert inner._use_count == 3
    for _ in range(CALLS // 10):
        t.echo(outer)
        outer[0]
    gc.collect()
    assert inner._use_count == 3
    del outer
    gc.collect()
    assert inner._use_count == 1


def test_native_use_count_of_function_passed_as_callback(t):
    f = kffi.Function(lambda x: x)
    for _ in range(CALLS // 10):
        t.apply(f, 1)
    assert f._use_count == 1


def test_global_function_use_count_stable(t):
    before = t.add_one._use_count
    for _ in range(1000):
        kffi.get_global_func("testing.add_one")
    gc.collect()
    assert t.add_one._use_count == before


# ---- memory -------------------------------------------------------------------------------------


def workload(t, tensor_kernels, n):
    """A mix of calls that allocate on both sides of the boundary."""
    a = np.zeros(8, np.float32)
    big = "x" * 100
    for i in range(n):
        t.echo(big)
        t.echo((i, "abcdefghij", 2.5))
        t.echo({"k": i})
        t.apply(lambda v: v + 1, i)
        tensor_kernels.fill(a, 1.0)
        tensor_kernels.describe(a)
        if i % 10 == 0:
            try:
                t.raise_error("ValueError", "leak check")
            except ValueError:
                pass
            tensor_kernels.full((4,), "float32", 0.0)


WINDOW = 10_000


def test_tracemalloc_flat_over_two_windows(t, tensor_kernels):
    workload(t, tensor_kernels, 2000)  # warm caches (types, frames, interned strings)
    gc.collect()
    tracemalloc.start()
    try:
        gc.collect()
        start = tracemalloc.get_traced_memory()[0]
        workload(t, tensor_kernels, WINDOW)
        gc.collect()
        middle = tracemalloc.get_traced_memory()[0]
        workload(t, tensor_kernels, WINDOW)
        gc.collect()
        end = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    first, second = middle - start, end - middle
    # A leak of one small object per call would be >= 16 bytes * 60,000 calls per window.
    assert second < 64 * 1024, (first, second)


def test_native_heap_flat_over_two_windows(t, tensor_kernels):
    if mallinfo_used() is None:
        pytest.skip("needs glibc's mallinfo2")
    workload(t, tensor_kernels, 2000)
    gc.collect()
    start = mallinfo_used()
    workload(t, tensor_kernels, WINDOW)
    gc.collect()
    middle = mallinfo_used()
    workload(t, tensor_kernels, WINDOW)
    gc.collect()
    end = mallinfo_used()
    first, second = middle - start, end - middle
    # The same bound as above, for everything malloc'ed (C++ objects, DLPack tensors, ...).
    assert second < 256 * 1024, (first, second)
