"""tests/python/core/test_cleanup_errors.py: cleanup that runs Python code while an error is
pending.

A DLPack producer's deleter may be Python code (a ctypes callback). kffi runs it whenever the last
reference to the tensor goes: after a failed call (the arguments are released with the error
pending), while a frame unwinds, when a container conversion fails halfway. Python code run with an
exception pending fails with SystemError or swallows the exception; kffi keeps the pending exception
aside while such cleanup runs, so the caller sees the original error and the deleter runs normally.
"""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import ctypes
import gc
import sys

import kffi
import pytest

np = pytest.importorskip("numpy")

from fake_dlpack import DLPACK_DELETER as _DELETER
from fake_dlpack import DLDataType as _DLDataType
from fake_dlpack import DLDevice as _DLDevice
from fake_dlpack import DLManagedTensor as _Managed
from fake_dlpack import capsule_new as _capsule_new


class PythonDeleterProducer:
    """A pre-1.0 DLPack producer (float32, 1-d) whose deleter is Python code run through ctypes:
    it records the call, runs Python that raises and catches (as real cleanup code may), and
    raises itself when raise_in_deleter is set."""

    def __init__(self, n=4, shape=None, raise_in_deleter=False):
        self.host = np.arange(max(n, 1), dtype=np.float32)
        self.shape = (ctypes.c_int64 * 1)(n if shape is None else shape)
        self.events: list[str] = []
        self.raise_in_deleter = raise_in_deleter
        self._keep: dict[int, object] = {}
        self._deleter = _DELETER(self._delete)

    def _delete(self, ptr):
        self.events.append("deleted")
        try:
            int("not a number")
        except ValueError:
            self.events.append("caught inside the deleter")
        self._keep.pop(ctypes.addressof(ptr.contents), None)
        if self.raise_in_deleter:
            raise RuntimeError("the deleter failed")

    def __dlpack_device__(self):
        return (1, 0)

    def __dlpack__(self, stream=None, max_version=None, **kwargs):
        if max_version is not None:
            raise TypeError("a pre-1.0 producer: no max_version")
        m = _Managed()
        m.dl_tensor.data = self.host.ctypes.data
        m.dl_tensor.device = _DLDevice(1, 0)
        m.dl_tensor.ndim = 1
        m.dl_tensor.dtype = _DLDataType(2, 32, 1)
        m.dl_tensor.shape = self.shape
        m.dl_tensor.strides = None
        m.dl_tensor.byte_offset = 0
        m.deleter = self._deleter
        self._keep[ctypes.addressof(m)] = m
        return _capsule_new(ctypes.addressof(m), b"dltensor", None)


@pytest.fixture
def k(tensor_kernels):
    return tensor_kernels


def test_failed_call_releases_a_python_deleter_tensor_with_its_error(k):
    p = PythonDeleterProducer()
    # The tensor converts (an owned import through __dlpack__), the float argument does not: the
    # call fails and releases the tensor with the TypeError pending.
    with pytest.raises(TypeError) as info:
        k.fill(p, "not a float")
    assert str(info.value).startswith("value: expected float, got str (argument #1 of `fill(")
    assert p.events == ["deleted", "caught inside the deleter"]


def test_callee_error_releases_a_python_deleter_tensor_with_its_error(k):
    p = PythonDeleterProducer()
    # The callee itself refuses the call (one argument of two): its error is pending while the
    # converted tensor goes.
    with pytest.raises(TypeError, match=r"^fill: expected 2 arguments, got 1 \(`fill\("):
        k.fill(p)
    assert p.events == ["deleted", "caught inside the deleter"]


def test_conversion_error_after_the_tensor_keeps_its_error(t):
    p = PythonDeleterProducer()
    with pytest.raises(OverflowError, match=r"^arg1: Python int too large .*\(argument #1 of "):
        t.echo(p, 2**80)
    gc.collect()
    assert p.events[0] == "deleted"


def test_frame_unwinding_releases_a_kffi_tensor_with_its_error():
    p = PythonDeleterProducer()

    def fails():
        x = kffi.from_dlpack(p)  # a kffi.Tensor owning the producer's tensor
        assert x.shape == (4,)
        raise LookupError("raised while x is alive")

    with pytest.raises(LookupError, match="raised while x is alive"):
        fails()
    gc.collect()
    assert p.events == ["deleted", "caught inside the deleter"]


def test_failed_list_conversion_releases_converted_elements_with_its_error(t):
    p = PythonDeleterProducer()
    # The tensor is the list's first element (owned by the Array being built); the second element
    # fails, and the elements built so far are released with the OverflowError pending.
    with pytest.raises(OverflowError, match="Python int too large"):
        t.echo([p, 2**80])
    gc.collect()
    assert p.events[0] == "deleted"


def test_impossible_layout_runs_the_deleter_with_its_error(t):
    p = PythonDeleterProducer(n=4, shape=-3)
    with pytest.raises(ValueError, match=r"negative size in shape") as info:
        t.echo(p)
    assert str(info.value).startswith("arg0: cannot import the PythonDeleterProducer as a tensor")
    assert "(argument #0 of `testing.echo`)" in str(info.value)
    gc.collect()
    assert p.events[0] == "deleted"


def test_deleter_that_raises_is_reported_as_unraisable_and_keeps_the_error(k, monkeypatch):
    seen = []
    monkeypatch.setattr(sys, "unraisablehook", lambda u: seen.append(u))
    p = PythonDeleterProducer(raise_in_deleter=True)
    with pytest.raises(TypeError, match=r"^value: expected float, got str \(argument #1 of "):
        k.fill(p, "not a float")
    gc.collect()
    assert p.events[0] == "deleted"
    # ctypes reports the callback's own exception; the TypeError above is the one that arrived.
    assert any("the deleter failed" in str(u.exc_value) for u in seen)


def test_process_stays_healthy_after_cleanup_errors(k):
    for _ in range(20):
        p = PythonDeleterProducer()
        with pytest.raises(TypeError):
            k.fill(p, None)
    x = np.zeros(3, np.float32)
    k.fill(x, 2.0)
    assert x.tolist() == [2.0, 2.0, 2.0]
