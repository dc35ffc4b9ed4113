"""tests/python/support/malloc_heap.py: bytes in use in glibc's malloc heap, for the leak checks
of core (test_leaks, test_objects_fields) and kffi_tvm (test_tvm_bridge, test_tvm_reflection)."""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import ctypes
import ctypes.util


def mallinfo_used():
    """Bytes in use in glibc's malloc heap (native allocations), or None off glibc."""
    libc_name = ctypes.util.find_library("c")
    if not libc_name:
        return None
    libc = ctypes.CDLL(libc_name)
    if not hasattr(libc, "mallinfo2"):
        return None

    class MallInfo2(ctypes.Structure):
        _fields_ = [
            (name, ctypes.c_size_t)
            for name in (
                "arena",
                "ordblks",
                "smblks",
                "hblks",
                "hblkhd",
                "usmblks",
                "fsmblks",
                "uordblks",
                "fordblks",
                "keepcost",
            )
        ]

    libc.mallinfo2.restype = MallInfo2
    info = libc.mallinfo2()
    return info.uordblks + info.hblkhd
