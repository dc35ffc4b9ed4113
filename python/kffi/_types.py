"""python/kffi/_types.py: kffi.dtype and kffi.Device, and how Python values are classified."""
from __future__ import annotations

import ctypes

from . import _core

_DEVICE_NAMES = {
    1: "cpu", 2: "cuda", 3: "cuda_host", 4: "opencl", 7: "vulkan", 8: "metal", 9: "vpi",
    10: "rocm", 11: "rocm_host", 12: "ext_dev", 13: "cuda_managed", 14: "oneapi", 15: "webgpu",
    16: "hexagon", 17: "maia", 18: "trn",
}
_DEVICE_CODES = {v: k for k, v in _DEVICE_NAMES.items()}
_DEVICE_CODES["gpu"] = 2


class dtype(str):
    """A data type, spelled as a string ("float32", "bfloat16", "int8x4", ...).

    Accepts strings, ``torch.dtype``, ``numpy.dtype`` and NumPy scalar types.
    """

    __slots__ = ("_dl",)

    def __new__(cls, value):
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

    def __repr__(self):
        return f"dtype('{str(self)}')"

    def __reduce__(self):
        return (dtype, (str(self),))


def _dtype_text(value) -> str:
    if isinstance(value, str):
        return value
    mod = type(value).__module__ or ""
    if mod.startswith("torch"):
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

    def __init__(self, device_type, index: int | None = None):
        if isinstance(device_type, Device):
            device_type, index = device_type.device_type, device_type.index
        elif isinstance(device_type, str):
            name, _, idx = device_type.partition(":")
            if name not in _DEVICE_CODES:
                raise ValueError(f"Unknown device type {name!r} in {device_type!r}; expected "
                                 f"one of {sorted(_DEVICE_CODES)}")
            if idx:
                if not idx.isdigit():
                    raise ValueError(f"Bad device index in {device_type!r}")
                if index is not None and int(idx) != index:
                    raise ValueError(f"Device {device_type!r} given with a different index {index}")
                index = int(idx)
            device_type = _DEVICE_CODES[name]
        elif type(device_type).__module__.startswith("torch"):
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

    def __eq__(self, other):
        try:
            other = other if isinstance(other, Device) else Device(other)
        except (TypeError, ValueError):
            return NotImplemented
        return (self.device_type, self.index) == (other.device_type, other.index)

    def __hash__(self):
        return hash((self.device_type, self.index))

    def __repr__(self):
        return f"Device('{self}')"

    def __str__(self):
        return "cpu" if self.device_type == 1 else f"{self.type}:{self.index}"

    def __dlpack_device__(self):
        return (self.device_type, self.index)


def _classify(tp: type) -> str:
    """Called once per Python type the first time it is passed to a kffi function."""
    mod = tp.__module__ or ""
    name = tp.__name__
    if issubclass(tp, dtype):
        return "dtype"
    if issubclass(tp, Device):
        return "device"
    if mod.startswith("torch") and name == "dtype":
        return "dtype"
    if mod.startswith("torch") and name == "device":
        return "device"
    if mod.startswith("numpy") and (name == "dtype" or name.endswith("DType")):
        return "dtype"
    if issubclass(tp, ctypes.c_void_p):
        return "voidp"
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


def _to_dtype(value):
    return (value if isinstance(value, dtype) else dtype(value))._dl


def _to_device(value):
    d = value if isinstance(value, Device) else Device(value)
    return (d.device_type, d.index)


def _make_dtype(code, bits, lanes):
    return dtype(_core._dtype_to_str(code, bits, lanes))


def _make_device(device_type, index):
    return Device(device_type, index)


def _make_voidp(address):
    return ctypes.c_void_p(address)


_core._set_converter_hooks(_classify, _to_dtype, _to_device, _make_dtype, _make_device,
                           _make_voidp)
