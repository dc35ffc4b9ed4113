"""tests/python/support/fake_dlpack.py: DLPack tensors that claim any device, for argument checks on
a CPU.

A kernel's own argument validation (device, dtype, shape, divisibility, alignment) reads only the
DLTensor's fields, so a tensor that says it lives on CUDA device 0 but points at host memory
exercises those checks on a machine without a GPU. Its data must never be touched: use these
only for calls that are expected to fail validation.
"""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import ctypes
from typing import ClassVar

import numpy as np


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class DLManagedTensor(ctypes.Structure):
    pass


DLPACK_DELETER = ctypes.CFUNCTYPE(None, ctypes.POINTER(DLManagedTensor))
DLManagedTensor._fields_ = [
    ("dl_tensor", DLTensor),
    ("manager_ctx", ctypes.c_void_p),
    ("deleter", DLPACK_DELETER),
]

# PyCapsule_New through a prototype of our own (ctypes.pythonapi's is shared: tvm_ffi sets its
# argtypes to others).
from dlpack_util import capsule_new

_DTYPES = {
    "float32": (2, 32),
    "float16": (2, 16),
    "float64": (2, 64),
    "int32": (0, 32),
    "bool": (6, 8),
    "int8": (0, 8),
    "int16": (0, 16),
    "int64": (0, 64),
    "uint8": (1, 8),
    "uint16": (1, 16),
    "uint32": (1, 32),
    "uint64": (1, 64),
    "bfloat16": (4, 16),
    "float8_e4m3fn": (10, 8),
    "float8_e5m2": (12, 8),
    "float8_e4m3fnuz": (11, 8),
}


class FakeDeviceTensor:
    """A 1-d tensor of n elements of dtype on (device_type, device_id), whose data pointer is the
    start of a host buffer plus offset bytes (offset != 0 misaligns it)."""

    _alive: ClassVar[
        list
    ] = []  # the structures live as long as the process: consumers may keep the tensor

    def __init__(self, n: int, dtype: str = "float32", device=(2, 0), offset: int = 0):
        self._host = np.zeros(max(n, 1) + 16, dtype=np.float64)
        self._shape = (ctypes.c_int64 * 1)(n)
        code, bits = _DTYPES[dtype]
        m = DLManagedTensor()
        m.dl_tensor.data = self._host.ctypes.data + offset
        m.dl_tensor.device = DLDevice(*device)
        m.dl_tensor.ndim = 1
        m.dl_tensor.dtype = DLDataType(code, bits, 1)
        m.dl_tensor.shape = self._shape
        m.dl_tensor.strides = None
        m.dl_tensor.byte_offset = 0
        m.deleter = (
            DLPACK_DELETER()
        )  # NULL: nothing to free (and no Python code to run in a deleter)
        self._managed = m
        self._device = device
        FakeDeviceTensor._alive.append(self)

    def __dlpack_device__(self):
        return self._device

    def __dlpack__(self, stream=None, **kwargs):
        return capsule_new(ctypes.addressof(self._managed), b"dltensor", None)
