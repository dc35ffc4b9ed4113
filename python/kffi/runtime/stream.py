"""python/kffi/runtime/stream.py: kffi.use_stream, an explicit stream for the calls in a scope."""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from .. import _core
from . import _frameworks
from ._types import Device, _is_stream_type, _stream_handle


def _stream_spec(stream: Any) -> tuple[int, int, int] | None:
    """(device_type, device_id, handle) of torch/CuPy streams, __cuda_stream__ objects, ints."""
    if stream is None:
        return None
    if isinstance(stream, int):
        return (2, _current_cuda_device(), stream)
    tp = type(stream)
    if not _is_stream_type(tp):
        raise TypeError(
            f"use_stream expects a torch.cuda.Stream, a CuPy stream, an object with "
            f"__cuda_stream__ or an int handle; got {tp.__name__}"
        )
    handle = _stream_handle(stream)
    device = getattr(stream, "device", None)
    index = getattr(device, "index", None)
    if index is None:
        index = getattr(stream, "device_id", None)
    return (2, _current_cuda_device() if index is None else index, handle)


def _current_cuda_device() -> int:
    """The CUDA device a framework's code runs on (torch.cuda.current_device()), else 0."""
    device: int | None = _frameworks.first_answer(lambda fw: fw.current_cuda_device())
    return 0 if device is None else device


@contextlib.contextmanager
def use_stream(stream: Any, device: Any = None) -> Iterator[None]:
    """Runs the kffi calls in the block on ``stream``.

    It wins over the stream picked up from tensor arguments. ``device`` ("cuda:1") overrides the
    device the stream is taken to be on.
    """
    spec = _stream_spec(stream)
    if spec is None:
        yield
        return
    device_type, device_id, handle = spec
    if device is not None:
        d = Device(device)
        device_type, device_id = d.device_type, d.index
    prev = _core._env_push_stream(device_type, device_id, handle)
    try:
        yield
    finally:
        _core._env_pop_stream(device_type, device_id, prev)


def get_current_stream(device: Any = "cuda:0") -> int:
    """The stream kffi calls on this thread currently see for a device (0: default stream)."""
    d = Device(device)
    return _core._env_get_stream(d.device_type, d.index)
