"""python/kffi/runtime/_types.py: kffi.dtype and kffi.Device, and how Python values are classified."""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import ctypes
import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any

from .. import _core
from . import _hooks

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


def _torch() -> ModuleType | None:
    """The torch module when it is imported, else None (kffi never imports it to classify: an
    object of a torch class exists only once torch is imported)."""
    return sys.modules.get("torch")


def _is_torch_instance(value: object, name: str) -> bool:
    """isinstance(value, torch.<name>), by the class hierarchy (not the module's name: a
    subclass may live anywhere)."""
    torch = _torch()
    cls = getattr(torch, name, None) if torch is not None else None
    return isinstance(cls, type) and isinstance(value, cls)


def _is_torch_tensor_type(tp: type) -> bool:
    """Whether tp is torch's tensor class or a subclass of it (torch._C.TensorBase in its MRO),
    defined in whatever module: such tensors get torch's lazy-view checks."""
    torch = _torch()
    base = getattr(getattr(torch, "_C", None), "TensorBase", None) if torch is not None else None
    return isinstance(base, type) and base in tp.__mro__


def _dtype_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    mod = type(value).__module__ or ""
    if _is_torch_instance(value, "dtype"):
        text = str(value)  # "torch.float32"
        return text.split(".", 1)[1] if text.startswith("torch.") else text
    if mod.startswith("numpy") or mod.startswith("ml_dtypes") or isinstance(value, type):
        import numpy  # only when a NumPy dtype is given

        return str(numpy.dtype(value))
    if mod.startswith("jax") or hasattr(value, "dtype"):
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
        elif _is_torch_instance(device_type, "device"):
            torch_dev = device_type
            device_type = _DEVICE_CODES[torch_dev.type]
            index = torch_dev.index
        elif not isinstance(device_type, int) or device_type not in _DEVICE_NAMES:
            raise ValueError(f"Unknown device type {device_type!r}")
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


# Run once, when kffi first classifies a torch tensor type: kffi.torch's tensor import
# (runtime/_hooks.py), which reads torch tensors, and their lazy-view bits, from the TensorImpl
# where its library is built already; without it every torch tensor argument costs calls into
# torch's methods. The runtime reaches kffi.torch only through its entry point there.
first_torch_tensor_hook: Callable[[], None] | None = _hooks.first_torch_tensor


def _torch_tensor_seen() -> None:
    global first_torch_tensor_hook
    hook, first_torch_tensor_hook = first_torch_tensor_hook, None
    if hook is not None:
        hook()


# (kind, flags, from_dlpack, stream_hook): a row of the extension's conversion table.
_Entry = tuple[str, int, Callable[[Any], Any] | None, Callable[[], int] | None]


def _tensor_entry(tp: type, mod: str) -> _Entry:
    """(kind, flags, from_dlpack, stream_hook) of a tensor type: how its results come back and
    whether its arrays may be written."""
    flags = 0
    from_dlpack: Callable[[Any], Any] | None = None
    stream_hook: Callable[[], int] | None = None
    if _is_torch_tensor_type(tp):
        # Lazy views refused (the extension checks the same hierarchy).
        flags |= _core.TYPE_FLAG_TORCH
        _torch_tensor_seen()
    elif mod.startswith("numpy"):
        import numpy

        from_dlpack = numpy.from_dlpack
    elif mod.startswith(("jax", "jaxlib")):
        import jax.dlpack

        flags |= _core.TYPE_FLAG_READ_ONLY  # JAX arrays are immutable
        from_dlpack = jax.dlpack.from_dlpack
    elif mod.startswith("cupy"):
        cupy = sys.modules.get("cupy")
        if cupy is not None:
            from_dlpack = cupy.from_dlpack

            def cupy_stream() -> int:
                # CuPy's current stream becomes the call's environment stream (as torch's does).
                return int(cupy.cuda.get_current_stream().ptr)

            cupy_stream.__qualname__ = "cupy_current_stream"
            stream_hook = cupy_stream
    return ("tensor", flags, from_dlpack, stream_hook)


def _is_stream_type(tp: type, mod: str) -> bool:
    if hasattr(tp, "__cuda_stream__"):
        return True
    # torch.cuda.Stream and its subclasses, wherever they are defined (and, by name, streams of
    # a torch without __cuda_stream__).
    torch = _torch()
    torch_stream = getattr(getattr(torch, "cuda", None), "Stream", None)
    name = tp.__name__
    if (isinstance(torch_stream, type) and issubclass(tp, torch_stream)) or (
        mod.startswith("torch") and name in ("Stream", "ExternalStream")
    ):
        return hasattr(tp, "cuda_stream")
    return mod.startswith("cupy") and name in ("Stream", "ExternalStream") and hasattr(tp, "ptr")


def _classify(tp: type) -> _Entry:
    """Called once per Python type the first time it is passed to a kffi function: returns
    (kind, flags, from_dlpack, stream_hook) for the extension's conversion table."""
    kind = _classify_kind(tp)
    if isinstance(kind, tuple):
        return kind
    return (kind, 0, None, None)


def _classify_kind(tp: type) -> str | _Entry:
    mod = tp.__module__ or ""
    name = tp.__name__
    if issubclass(tp, dtype):
        return "dtype"
    if issubclass(tp, Device):
        return "device"
    if any("__kffi_type__" in k.__dict__ for k in tp.__mro__):
        return "record"  # a dataclass / NamedTuple declared to a kffi type (kffi._reflection)
    if mod.startswith("jax") and any(k.__name__ == "Tracer" for k in tp.__mro__):
        return "jax_tracer"
    if (hasattr(tp, "__dlpack__") or hasattr(tp, "__dlpack_c_exchange_api__")) and not issubclass(
        tp, (int, float, complex, str, bytes)
    ):
        return _tensor_entry(tp, mod)
    torch = _torch()
    if torch is not None and issubclass(tp, (torch.dtype, torch.device)):
        return "dtype" if issubclass(tp, torch.dtype) else "device"
    if mod.startswith("numpy") and (name == "dtype" or name.endswith("DType")):
        return "dtype"
    if _is_stream_type(tp, mod):
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
