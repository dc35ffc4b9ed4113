"""python/kffi/cuda/_cubin_info.py: a kernel's parameter list read from a cubin, with no GPU.

A cubin is an ELF file; its section ``.nv.info.<kernel>`` holds the kernel's attributes, among
them one EIATTR_KPARAM_INFO per parameter (its ordinal, byte offset and size). The CUDA driver
reports the same through cuKernelGetParamInfo, but only with a GPU. The format is NVIDIA's and
undocumented but stable; anything unexpected reads as "no information" (None) rather than as
a wrong answer, except a cubin that lacks the kernel, which is a ValueError.
"""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import struct

_EIFMT_NVAL, _EIFMT_BVAL, _EIFMT_HVAL, _EIFMT_SVAL = 1, 2, 3, 4
_EIATTR_KPARAM_INFO = 0x17


def _sections(data: bytes) -> dict[str, tuple[int, int]] | None:
    """{name: (offset, size)} of an ELF64 little-endian file; None when it is not one."""
    if len(data) < 64 or data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        return None
    shoff = struct.unpack_from("<Q", data, 0x28)[0]
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    if shentsize < 64 or shstrndx >= shnum or shoff + shnum * shentsize > len(data):
        return None
    raw = []
    for i in range(shnum):
        name, _type, _flags, _addr, off, size = struct.unpack_from(
            "<IIQQQQ", data, shoff + i * shentsize
        )
        raw.append((name, off, size))
    str_off, _, str_size = raw[shstrndx][1], None, raw[shstrndx][2]
    if str_off + str_size > len(data):
        return None
    out: dict[str, tuple[int, int]] = {}
    for name, off, size in raw:
        if name >= str_size or off + size > len(data):
            continue
        end = data.find(b"\0", str_off + name, str_off + str_size)
        if end < 0:
            continue
        out[data[str_off + name : end].decode("latin-1")] = (off, size)
    return out


def kernel_params(
    data: bytes, kernel: str, label: str = "the cubin"
) -> list[tuple[int, int]] | None:
    """``[(offset, size), ...]`` of ``kernel``'s parameters in order, read from a cubin's
    ``.nv.info.<kernel>`` section; None when ``data`` is not an ELF cubin this can read.
    ValueError when the cubin has no kernel of that name."""
    sections = _sections(data)
    if sections is None:
        return None
    where = sections.get(".nv.info." + kernel)
    if where is None:
        if not any(n.startswith(".nv.info.") for n in sections):
            return None  # no per-kernel attributes at all: nothing to compare
        kernels = sorted(n[len(".nv.info.") :] for n in sections if n.startswith(".nv.info."))
        raise ValueError(
            f"kffi.cuda: {label} has no kernel `{kernel}`; its kernels: {', '.join(kernels)}"
        )
    off, size = where
    end, p = off + size, off
    params: dict[int, tuple[int, int]] = {}
    while p + 2 <= end:
        fmt, attr = data[p], data[p + 1]
        if fmt in (_EIFMT_NVAL, _EIFMT_BVAL, _EIFMT_HVAL):
            p += 4  # entries are 4-byte aligned: a value-less one is padded
        elif fmt == _EIFMT_SVAL:
            if p + 4 > end:
                return None
            n = struct.unpack_from("<H", data, p + 2)[0]
            if p + 4 + n > end:
                return None
            if attr == _EIATTR_KPARAM_INFO and n >= 12:
                _index, ordinal, offset, flags = struct.unpack_from("<IHHI", data, p + 4)
                params[ordinal] = (offset, (flags >> 18) & 0x3FFF)
            p += 4 + n
        else:
            return None  # an encoding this reader does not know
    if sorted(params) != list(range(len(params))):
        return None
    return [params[i] for i in range(len(params))]
