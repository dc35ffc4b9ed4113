"""tests/python/core/test_threads.py: native calls release the GIL (so Python threads overlap in
native code), results stay correct under concurrency, and the per-function / global opt-outs
work."""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import kffi
import pytest

THREADS = 8
SLEEP = 0.2  # seconds each native call sleeps
# A free-threaded CPython (3.13t and later) runs without a GIL: no setting serialises calls there.
GIL_ENABLED = getattr(sys, "_is_gil_enabled", lambda: True)()


def assert_serialised_unless_free_threaded(slept, wall):
    if GIL_ENABLED:
        # Holding the GIL, no two calls can overlap: the wall time is at least their sum.
        assert wall >= sum(slept) * 0.95, (wall, sum(slept))
    else:
        # No GIL to hold: the calls overlap whatever release_gil says.
        assert wall < sum(slept) / 2, (wall, sum(slept))


def run_concurrently(fn, n=THREADS):
    """Runs fn(i) on n threads that start together; returns (results, wall seconds)."""
    barrier = threading.Barrier(n)

    def task(i):
        barrier.wait()
        return fn(i)

    with ThreadPoolExecutor(max_workers=n) as pool:
        start = time.perf_counter()
        results = list(pool.map(task, range(n)))
        wall = time.perf_counter() - start
    return results, wall


def test_native_calls_overlap_when_gil_is_released(t):
    sleep = kffi.get_global_func("testing.sleep")
    assert sleep.release_gil is None  # follows the global default
    assert kffi.get_default_release_gil() is True
    slept, wall = run_concurrently(lambda i: sleep(SLEEP))
    serial = sum(slept)  # what the calls would take one after another
    assert all(s >= SLEEP * 0.9 for s in slept)
    # Overlapping calls finish in about one call's time; allow a generous factor.
    assert wall < serial / 2, (wall, serial)


def test_release_gil_opt_out_per_function_serialises_calls(t):
    sleep = kffi.get_global_func("testing.sleep")
    sleep.release_gil = False
    assert sleep.release_gil is False
    slept, wall = run_concurrently(lambda i: sleep(SLEEP / 4))
    assert_serialised_unless_free_threaded(slept, wall)


def test_release_gil_setting_is_per_function_object(t):
    a = kffi.get_global_func("testing.sleep")
    b = kffi.get_global_func("testing.sleep")
    a.release_gil = False
    assert b.release_gil is None
    a.release_gil = None
    assert a.release_gil is None


def test_set_default_release_gil_false_serialises_calls(t, restore_default_release_gil):
    sleep = kffi.get_global_func("testing.sleep")
    kffi.set_default_release_gil(False)
    assert kffi.get_default_release_gil() is False
    slept, wall = run_concurrently(lambda i: sleep(SLEEP / 4))
    assert_serialised_unless_free_threaded(slept, wall)


def test_per_function_true_wins_over_default_false(t, restore_default_release_gil):
    sleep = kffi.get_global_func("testing.sleep")
    kffi.set_default_release_gil(False)
    sleep.release_gil = True
    slept, wall = run_concurrently(lambda i: sleep(SLEEP))
    assert wall < sum(slept) / 2, (wall, sum(slept))


def test_default_release_gil_round_trips(restore_default_release_gil):
    kffi.set_default_release_gil(0)
    assert kffi.get_default_release_gil() is False
    kffi.set_default_release_gil("yes")
    assert kffi.get_default_release_gil() is True


def test_concurrent_calls_return_correct_results(t):
    def work(i):
        out = []
        for j in range(2000):
            v = i * 100_000 + j
            out.append(
                (
                    t.add_one(v) == v + 1,
                    t.echo((i, j)) == (i, j),
                    t.echo(f"thread {i} call {j}") == f"thread {i} call {j}",
                )
            )
        return all(all(r) for r in out)

    results, _ = run_concurrently(work)
    assert all(results)


def test_concurrent_python_callbacks_from_native_code(t):
    # testing.apply releases the GIL; each callback takes it back to run Python.
    def work(i):
        return [t.apply(lambda x: x * 2 + i, j) for j in range(500)]

    results, _ = run_concurrently(work)
    for i, r in enumerate(results):
        assert r == [j * 2 + i for j in range(500)]


def test_callbacks_from_native_threads_started_by_many_python_threads(t):
    def work(i):
        return [t.call_in_thread(lambda x: x + i, j) for j in range(50)]

    results, _ = run_concurrently(work)
    for i, r in enumerate(results):
        assert r == [j + i for j in range(50)]


def test_concurrent_errors_stay_on_their_thread(t):
    def work(i):
        messages = []
        for j in range(300):
            try:
                t.raise_error("ValueError", f"{i}:{j}")
            except ValueError as e:
                messages.append(str(e))
        return messages

    results, _ = run_concurrently(work)
    for i, messages in enumerate(results):
        assert messages == [f"{i}:{j}" for j in range(300)]


def test_concurrent_tensor_kernels(tensor_kernels):
    np = pytest.importorskip("numpy")
    arrays = [np.zeros(1000, np.float32) for _ in range(THREADS)]

    def work(i):
        for _ in range(200):
            tensor_kernels.add_one_inplace(arrays[i])
        return tensor_kernels.sum(arrays[i])

    results, _ = run_concurrently(work)
    assert results == [200.0 * 1000] * THREADS


def test_stream_scopes_are_per_thread(t):
    # An explicit stream is thread-local: another thread keeps seeing the default (NULL).
    inside = threading.Event()
    release = threading.Event()
    seen = {}

    def holder():
        with kffi.use_stream(0x1234, device="cuda:0"):
            seen["holder"] = t.get_stream(2, 0)
            inside.set()
            release.wait(10)

    thread = threading.Thread(target=holder)
    thread.start()
    assert inside.wait(10)
    seen["other"] = t.get_stream(2, 0)
    release.set()
    thread.join()
    assert seen == {"holder": 0x1234, "other": 0}


def test_use_stream_nests_and_restores(t):
    assert kffi.get_current_stream("cuda:1") == 0
    with kffi.use_stream(0x10, device="cuda:1"):
        assert t.get_stream(2, 1) == 0x10
        with kffi.use_stream(0x20, device="cuda:1"):
            assert t.get_stream(2, 1) == 0x20
            assert kffi.get_current_stream("cuda:1") == 0x20
        assert t.get_stream(2, 1) == 0x10
    assert t.get_stream(2, 1) == 0
    assert t.get_stream(2, 0) == 0  # other devices untouched


def test_use_stream_none_is_a_no_op(t):
    with kffi.use_stream(None):
        assert t.get_stream(2, 0) == 0


def test_use_stream_restores_after_an_exception(t):
    with pytest.raises(RuntimeError):
        with kffi.use_stream(0x30, device="cuda:0"):
            raise RuntimeError("inside")
    assert t.get_stream(2, 0) == 0


@pytest.mark.skipif(
    not sysconfig.get_config_var("Py_GIL_DISABLED"), reason="needs a free-threaded CPython"
)
def test_importing_kffi_keeps_the_gil_disabled():
    """The extension declares Py_mod_gil = Py_MOD_GIL_NOT_USED: a free-threaded interpreter that
    imports it keeps running without a GIL (it would re-enable the GIL, with a RuntimeWarning,
    for an extension that does not)."""
    code = (
        "import sys, kffi, kffi.cpp, kffi.contract\n"
        "assert not sys._is_gil_enabled(), 'importing kffi enabled the GIL'\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHON_GIL"}
    subprocess.run([sys.executable, "-W", "error::RuntimeWarning", "-c", code], check=True, env=env)
