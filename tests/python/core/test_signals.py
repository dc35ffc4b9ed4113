"""tests/python/core/test_signals.py: Ctrl-C during a long native call that polls
KFFIEnvCheckSignals raises KeyboardInterrupt (or whatever the Python signal handler raises)."""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time

import kffi
import pytest

pytestmark = pytest.mark.skipif(not hasattr(signal, "pthread_kill"), reason="POSIX signals only")

MAX_SECONDS = 30.0  # the native loop's own limit; a working interrupt ends it much sooner
DELAY = 0.2


@contextlib.contextmanager
def handler(signum, fn):
    previous = signal.signal(signum, fn)
    try:
        yield
    finally:
        signal.signal(signum, previous)


@contextlib.contextmanager
def send_later(send):
    """Calls send() from a timer thread after DELAY; always joins the thread."""
    timer = threading.Timer(DELAY, send)
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
        timer.join()


def to_main_thread(signum):
    return lambda: signal.pthread_kill(threading.main_thread().ident, signum)


def test_sigint_via_pthread_kill_raises_keyboard_interrupt(t):
    with handler(signal.SIGINT, signal.default_int_handler):
        start = time.perf_counter()
        with send_later(to_main_thread(signal.SIGINT)), pytest.raises(KeyboardInterrupt):
            t.spin_until_signal(MAX_SECONDS)
        elapsed = time.perf_counter() - start
    assert elapsed < MAX_SECONDS / 2


def test_sigint_via_os_kill_raises_keyboard_interrupt(t):
    with handler(signal.SIGINT, signal.default_int_handler):
        start = time.perf_counter()
        with (
            send_later(lambda: os.kill(os.getpid(), signal.SIGINT)),
            pytest.raises(KeyboardInterrupt),
        ):
            t.spin_until_signal(MAX_SECONDS)
        elapsed = time.perf_counter() - start
    assert elapsed < MAX_SECONDS / 2


def test_keyboard_interrupt_has_the_native_frame(t):
    import traceback

    with handler(signal.SIGINT, signal.default_int_handler):
        with send_later(to_main_thread(signal.SIGINT)), pytest.raises(KeyboardInterrupt) as info:
            t.spin_until_signal(MAX_SECONDS)
    names = [f.name for f in traceback.extract_tb(info.value.__traceback__)]
    assert "testing.spin_until_signal" in names


class Interrupted(Exception):
    pass


def test_custom_signal_handler_exception_comes_back(t):
    def raise_custom(signum, frame):
        raise Interrupted(f"signal {signum}")

    with handler(signal.SIGUSR1, raise_custom):
        with send_later(to_main_thread(signal.SIGUSR1)), pytest.raises(Interrupted) as info:
            t.spin_until_signal(MAX_SECONDS)
    assert str(info.value) == f"signal {int(signal.SIGUSR1)}"


def test_handler_that_returns_lets_the_call_finish(t):
    calls = []
    with handler(signal.SIGUSR1, lambda signum, frame: calls.append(signum)):
        with send_later(to_main_thread(signal.SIGUSR1)):
            spun = t.spin_until_signal(DELAY * 5)
    assert spun >= DELAY * 5
    assert calls == [signal.SIGUSR1]


def test_no_signal_means_the_call_runs_to_its_limit(t):
    assert t.spin_until_signal(0.05) >= 0.05


def test_process_still_works_after_interrupts(t):
    with handler(signal.SIGINT, signal.default_int_handler):
        for _ in range(3):
            with send_later(to_main_thread(signal.SIGINT)), pytest.raises(KeyboardInterrupt):
                t.spin_until_signal(MAX_SECONDS)
    assert t.add_one(1) == 2
    kffi.check_signals()  # nothing pending
