"""tests/python/support/dlpack_util.py: DLPack producers made with ctypes, for layouts and flags no
real framework produces (huge or negative shapes, read-only flags, CUDA device tags on host
memory)."""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import ctypes

DLPACK_FLAG_READ_ONLY = 1
KDL_CPU, KDL_CUDA = 1, 2
KDL_INT, KDL_UINT, KDL_FLOAT = 0, 1, 2


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


class DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [
        ("version", DLPackVersion),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", ctypes.c_void_p),
        ("flags", ctypes.c_uint64),
        ("dl_tensor", DLTensor),
    ]


# A prototype of our own: ctypes.pythonapi.PyCapsule_New is shared, and other packages (jax)
# set its argtypes to theirs.
capsule_new = ctypes.PYFUNCTYPE(
    ctypes.py_object, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p
)(("PyCapsule_New", ctypes.pythonapi))


class Producer:
    """An object with __dlpack__ whose tensor has exactly the given layout. Its memory is a small
    host buffer whatever the shape says (kffi must refuse impossible shapes before any use). The
    producer keeps every ctypes object alive; its tensors have no deleter."""

    def __init__(
        self,
        shape,
        strides=None,
        bits=32,
        code=KDL_FLOAT,
        flags=0,
        device=(KDL_CPU, 0),
        nbytes=64,
        byte_offset=0,
    ):
        self.buffer = (ctypes.c_uint8 * nbytes)()
        self.byte_offset = byte_offset
        self.shape = (ctypes.c_int64 * max(len(shape), 1))(*shape)
        self.strides = (ctypes.c_int64 * max(len(shape), 1))(*strides) if strides else None
        self.layout = (tuple(shape), strides, bits, code, flags, device)
        self.made = []

    def __dlpack_device__(self):
        return self.layout[5]

    def __dlpack__(self, stream=None, max_version=None, dl_device=None, copy=None):
        shape, _strides, bits, code, flags, device = self.layout
        mt = DLManagedTensorVersioned()
        mt.version = DLPackVersion(1, 0)
        mt.flags = flags
        t = mt.dl_tensor
        t.data = ctypes.addressof(self.buffer)
        t.device = DLDevice(*device)
        t.ndim = len(shape)
        t.dtype = DLDataType(code, bits, 1)
        t.shape = self.shape
        t.strides = self.strides if self.strides is not None else None
        t.byte_offset = self.byte_offset
        self.made.append(mt)
        return capsule_new(ctypes.addressof(mt), b"dltensor_versioned", None)
