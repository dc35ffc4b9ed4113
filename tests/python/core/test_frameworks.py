"""tests/python/core/test_frameworks.py: the per-framework table is where a framework is known.

A made-up framework ("toyfw": an array class, a dtype and a device class) becomes a full citizen
by one row of runtime/_frameworks.py and nothing else: its arrays pass zero-copy, results come
back as its arrays, its read-only flag reaches the kernel, its dtypes and devices convert. The
same classes without the row get kffi's defaults. The lazy-view methods the extension asks are
the row's (torch's), and another framework cannot replace them.
"""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import kffi
import numpy as np
import pytest
from kffi.runtime import _frameworks

READ_ONLY = kffi._core.TENSOR_FLAG_READ_ONLY


def _toy_classes():
    """Fresh classes of module "toyfw" (new types: never classified before this test)."""

    class ToyArray:
        def __init__(self, data):
            self.data = np.asarray(data)

        def __dlpack__(self, **kwargs):
            return self.data.__dlpack__(**kwargs)

        def __dlpack_device__(self):
            return self.data.__dlpack_device__()

        @classmethod
        def from_dlpack(cls, x):
            return cls(np.from_dlpack(x))

    class ToyDType:
        def __init__(self, name):
            self.toy_name = name

    class ToyDevice:
        def __init__(self, kind, number):
            self.kind, self.number = kind, number

    for cls in (ToyArray, ToyDType, ToyDevice):
        cls.__module__ = "toyfw"
    return ToyArray, ToyDType, ToyDevice


def _toy_row(array, dtype_cls, device_cls):
    class Toy(_frameworks.Framework):
        name = "toyfw"
        modules = ("toyfw",)
        read_only = True

        def from_dlpack(self):
            return array.from_dlpack

        def is_dtype_type(self, tp):
            return issubclass(tp, dtype_cls)

        def is_device_type(self, tp):
            return issubclass(tp, device_cls)

        def dtype_text(self, value):
            return value.toy_name if isinstance(value, dtype_cls) else None

        def device_of(self, value):
            return (value.kind, value.number) if isinstance(value, device_cls) else None

    return Toy()


def test_a_new_framework_is_one_row(t, tensor_kernels, monkeypatch):
    ToyArray, ToyDType, ToyDevice = _toy_classes()
    row = _toy_row(ToyArray, ToyDType, ToyDevice)
    monkeypatch.setattr(_frameworks, "FRAMEWORKS", (*_frameworks.FRAMEWORKS, row))
    x = ToyArray(np.arange(3, dtype=np.float32))
    assert tensor_kernels.sum(x) == 3.0  # zero-copy in
    out = tensor_kernels.full_like(x, 7.0)
    assert type(out) is ToyArray  # a new result comes back as the caller's framework's array
    assert out.data.tolist() == [7.0, 7.0, 7.0]
    assert t.tensor_flags(ToyArray(np.zeros(2))) == READ_ONLY  # the row's read_only
    assert kffi.dtype(ToyDType("bfloat16")) == "bfloat16"
    assert t.echo(ToyDType("int8")) == kffi.dtype("int8")
    assert kffi.Device(ToyDevice("cuda", 1)) == kffi.Device("cuda:1")
    assert t.echo(ToyDevice("cpu", 0)) == kffi.Device("cpu")


def test_without_its_row_a_framework_gets_the_defaults(t, tensor_kernels):
    ToyArray, ToyDType, ToyDevice = _toy_classes()
    out = tensor_kernels.full_like(ToyArray(np.arange(2, dtype=np.float32)), 7.0)
    assert type(out) is kffi.Tensor  # no from_dlpack of its own: kffi's tensor
    assert t.tensor_flags(ToyArray(np.zeros(2))) == 0  # writable
    with pytest.raises(TypeError, match="as a dtype"):
        kffi.dtype(ToyDType("int8"))
    with pytest.raises(ValueError, match="Unknown device type"):
        kffi.Device(ToyDevice("cuda", 1))


def test_the_rows_name_the_integrations():
    assert _frameworks.INTEGRATIONS == {
        "torch": "kffi.torch",
        "jax": "kffi.jax",
        "cuda": "kffi.cuda",
    }
    with pytest.raises(AttributeError, match="has no attribute 'toyfw'"):
        kffi.toyfw  # noqa: B018


def test_lazy_view_methods_come_from_the_torch_row_and_stay():
    torch = pytest.importorskip("torch")
    t = torch.tensor([1 + 2j])
    with pytest.raises(ValueError, match=r"the torch tensor is a lazy conjugate view"):
        kffi.from_dlpack(t.conj())
    base = torch._C.TensorBase
    # The extension keeps the first framework's methods: another cannot take them over ...
    with pytest.raises(ValueError, match=r"lazy views of torch are set already; mlx cannot"):
        kffi._core._set_lazy_views("mlx", base, base.is_conj, base.is_neg, base.dtype)
    # ... and the same framework setting them again changes nothing.
    kffi._core._set_lazy_views("torch", base, base.is_conj, base.is_neg, base.dtype)
    with pytest.raises(TypeError, match=r"expected a type, two callables and a descriptor"):
        kffi._core._set_lazy_views("torch", 1, base.is_conj, base.is_neg, base.dtype)
