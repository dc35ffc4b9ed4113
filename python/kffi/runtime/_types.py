"""python/kffi/runtime/_types.py: kffi.dtype and kffi.Device, and how Python values are classified."""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import ctypes
from typing import Any

from .. import _core
from . import _frameworks

# Device type codes and names as the C++ side spells them (exported by the extension).
_DEVICE_NAMES: dict[int, str] = dict(_core.DEVICE_TYPE_NAMES)
_DEVICE_CODES = {v: k for k, v in _DEVICE_NAMES.items()}
_DEVICE_CODES["gpu"] = 2


class dtype(str):
    """A data type, spelled as a string ("float32", "bfloat16", "int8x4", ...).

    Accepts strings, ``torch.dtype``, ``numpy.dtype`` and NumPy scalar types.
    """

    __slots__ = ("_dl",)
    _dl: tuple[int, int, int]  # (DLDataType code, bits, lanes)

    def __new__(cls, value: Any) -> dtype:
        if isinstance(value, dtype):
            return value
        text = _dtype_text(value)
        dl = _core._dtype_from_str(text)  # ValueError naming the string when it is bad
        canonical = _core._dtype_to_str(*dl)
        self = str.__new__(cls, canonical)
        self._dl = dl
        return self

    @property
    def code(self) -> int:
        return self._dl[0]

    @property
    def bits(self) -> int:
        return self._dl[1]

    @property
    def lanes(self) -> int:
        return self._dl[2]

    @property
    def itemsize(self) -> int:
        return (self._dl[1] * self._dl[2] + 7) // 8

    def __repr__(self) -> str:
        return f"dtype('{self!s}')"

    def __reduce__(self) -> tuple[type[dtype], tuple[str]]:
        return (dtype, (str(self),))


def _dtype_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    text: str | None = _frameworks.first_answer(lambda fw: fw.dtype_text(value))
    if text is not None:
        return text
    if hasattr(value, "dtype"):  # an array of any framework: its dtype
        return str(getattr(value, "name", None) or value.dtype)
    raise TypeError(f"Cannot interpret {value!r} (of type {type(value).__name__}) as a dtype")


class Device:
    """A device: a type ("cpu", "cuda", ...) and an index. Accepts "cuda:1" and torch.device."""

    __slots__ = ("device_type", "index")

    device_type: int
    index: int

    def __init__(self, device_type: Any, index: int | None = None) -> None:
        if isinstance(device_type, Device):
            device_type, index = device_type.device_type, device_type.index
        elif isinstance(device_type, str):
            name, _, idx = device_type.partition(":")
            if name not in _DEVICE_CODES:
                raise ValueError(
                    f"Unknown device type {name!r} in {device_type!r}; expected "
                    f"one of {sorted(_DEVICE_CODES)}"
                )
            if idx:
                if not idx.isdigit():
                    raise ValueError(f"Bad device index in {device_type!r}")
                if index is not None and int(idx) != index:
                    raise ValueError(f"Device {device_type!r} given with a different index {index}")
                index = int(idx)
            device_type = _DEVICE_CODES[name]
        elif not isinstance(device_type, int) or device_type not in _DEVICE_NAMES:
            # A framework's device (torch.device): its row says (type name, index).
            value = device_type
            found = _frameworks.first_answer(lambda fw: fw.device_of(value))
            if found is None:
                raise ValueError(f"Unknown device type {device_type!r}")
            device_type, index = _DEVICE_CODES[found[0]], found[1]
        self.device_type = int(device_type)
        self.index = int(index or 0)

    @property
    def type(self) -> str:
        return _DEVICE_NAMES.get(self.device_type, str(self.device_type))

    def __eq__(self, other: object) -> bool:
        try:
            other = other if isinstance(other, Device) else Device(other)
        except (TypeError, ValueError):
            return NotImplemented
        return (self.device_type, self.index) == (other.device_type, other.index)

    def __hash__(self) -> int:
        return hash((self.device_type, self.index))

    def __repr__(self) -> str:
        return f"Device('{self}')"

    def __str__(self) -> str:
        return "cpu" if self.device_type == 1 else f"{self.type}:{self.index}"

    def __dlpack_device__(self) -> tuple[int, int]:
        return (self.device_type, self.index)


# (kind, flags, from_dlpack, stream_hook, explain_export): a row of the extension's conversion
# table (see TypeInfo in python/src/py_common.h).
_Entry = tuple[str, int, Any, Any, Any]


def _tensor_entry(tp: type) -> _Entry:
    """The entry of a tensor type: how its results come back, whether its arrays may be written,
    its lazy views; its framework's row says (runtime/_frameworks.py)."""
    fw = _frameworks.tensor_framework(tp)
    if fw is None:
        return ("tensor", 0, None, None, None)
    return ("tensor", *fw.tensor_entry(tp))


def _is_stream_type(tp: type) -> bool:
    """A type with __cuda_stream__, or a framework's stream class (torch.cuda.Stream, CuPy's)."""
    return hasattr(tp, "__cuda_stream__") or any(
        fw.is_stream_type(tp) for fw in _frameworks.FRAMEWORKS
    )


def _classify(tp: type) -> _Entry:
    """Called once per Python type the first time it is passed to a kffi function: returns
    (kind, flags, from_dlpack, stream_hook) for the extension's conversion table."""
    kind = _classify_kind(tp)
    if isinstance(kind, tuple):
        return kind
    return (kind, 0, None, None, None)


def _classify_kind(tp: type) -> str | _Entry:
    if issubclass(tp, dtype):
        return "dtype"
    if issubclass(tp, Device):
        return "device"
    if any("__kffi_type__" in k.__dict__ for k in tp.__mro__):
        return "record"  # a dataclass / NamedTuple declared to a kffi type (kffi._reflection)
    special = _frameworks.first_answer(lambda fw: fw.special_kind(tp))
    if special is not None:
        return str(special)
    if (hasattr(tp, "__dlpack__") or hasattr(tp, "__dlpack_c_exchange_api__")) and not issubclass(
        tp, (int, float, complex, str, bytes)
    ):
        return _tensor_entry(tp)
    if any(fw.is_dtype_type(tp) for fw in _frameworks.FRAMEWORKS):
        return "dtype"
    if any(fw.is_device_type(tp) for fw in _frameworks.FRAMEWORKS):
        return "device"
    if _is_stream_type(tp):
        return "stream"
    if issubclass(tp, ctypes.c_void_p):
        return "voidp"
    if issubclass(tp, str):
        return "str"
    if issubclass(tp, (bytes, bytearray)):
        return "bytes"
    if issubclass(tp, int):  # IntEnum (whose metaclass has __len__), numpy ints on some builds
        return "index"
    if issubclass(tp, float):
        return "float"
    if hasattr(tp, "__index__") and not hasattr(tp, "__len__"):
        return "index"
    if hasattr(tp, "__float__") and not hasattr(tp, "__len__"):
        return "float"
    if issubclass(tp, (tuple, list)):
        return "sequence"
    if issubclass(tp, dict):
        return "mapping"
    # Look in the type's own classes: a metaclass __call__ would make every class look callable.
    if any("__call__" in klass.__dict__ for klass in tp.__mro__):
        return "callable"
    return "opaque"


def _to_dtype(value: Any) -> tuple[int, int, int]:
    return (value if isinstance(value, dtype) else dtype(value))._dl


def _to_device(value: Any) -> tuple[int, int]:
    d = value if isinstance(value, Device) else Device(value)
    return (d.device_type, d.index)


def _make_dtype(code: int, bits: int, lanes: int) -> dtype:
    return dtype(_core._dtype_to_str(code, bits, lanes))


def _make_device(device_type: int, index: int) -> Device:
    return Device(device_type, index)


def _make_voidp(address: int | None) -> ctypes.c_void_p:
    return ctypes.c_void_p(address)


def _stream_handle(stream: Any) -> int:
    """The raw handle of a stream object: ``__cuda_stream__`` (a (version, handle) pair),
    torch.cuda.Stream's ``cuda_stream``, CuPy's ``ptr``."""
    proto = getattr(stream, "__cuda_stream__", None)
    if proto is not None:
        value = proto() if callable(proto) else proto
        if not (isinstance(value, tuple) and len(value) == 2 and isinstance(value[1], int)):
            raise TypeError(
                f"{type(stream).__name__}.__cuda_stream__ must give (version, handle), "
                f"got {value!r}"
            )
        return value[1]
    for attr in ("cuda_stream", "ptr"):
        value = getattr(stream, attr, None)
        if isinstance(value, int):
            return value
    raise TypeError(
        f"{type(stream).__name__} has no stream handle (__cuda_stream__, cuda_stream or ptr)"
    )


_core._set_converter_hooks(
    _classify, _to_dtype, _to_device, _make_dtype, _make_device, _make_voidp, _stream_handle
)
