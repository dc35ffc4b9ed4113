"""python/kffi/typing.py: types for annotations, used by the stubs kffi-stubgen writes.

from kffi.typing import TensorLike

def scale(y: TensorLike, x: TensorLike, factor: float) -> None: ...
"""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

from typing import Any, Protocol

__all__ = ["StreamLike", "TensorLike"]


class TensorLike(Protocol):
    """What kffi takes where a function expects a tensor: any object with ``__dlpack__``.

    Such as torch, NumPy, JAX and CuPy arrays, and kffi.Tensor.
    """

    def __dlpack__(self) -> Any:
        """The tensor as a DLPack capsule (the DLPack protocol's method)."""
        ...


#: What an explicit stream parameter takes: None (the default stream), an int (a raw handle),
#: a torch.cuda.Stream, a CuPy stream or any object with ``__cuda_stream__``.
StreamLike = object
