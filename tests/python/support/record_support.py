"""tests/python/support/record_support.py: the record kernels (kernels/record_op_kernels.cc) and the
dataclass their flat.Blend fields read from, for the record tests of every integration."""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import dataclasses

from conftest import KERNELS, LibraryBuilder


@dataclasses.dataclass
class Blend:
    alpha: float
    n: int
    flag: bool
    tag: str


def record_kernels() -> str:
    """The path of record_op_kernels.cc's library (built once, cached)."""
    return str(LibraryBuilder().build("record_op_kernels", KERNELS / "record_op_kernels.cc"))
