"""python/kffi/runtime/_objects.py: Python views of kffi objects: containers, Tensor, Module, Function."""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import inspect
import json
import keyword
import operator
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from .. import _core, _reflection, _type_text
from . import _frameworks, _hooks
from ._types import Device, dtype

Object = _core.Object
Function = _core.Function


def _released_repr(obj: Object) -> str | None:
    """The repr of an object whose native reference was dropped by _release(), else None."""
    return f"<kffi.{type(obj).__name__} (released)>" if not obj._handle else None


# Static type indices of the C ABI (exported by the extension).
_TYPE_INDEX: dict[str, int] = dict(_core.TYPE_INDEX)
_MISSING = object()


class Array(Object, Sequence[Any]):
    """An immutable sequence (kffi Array). Behaves like a tuple."""

    __slots__ = ()

    def __len__(self) -> int:
        return _core._seq_len(self)

    def __getitem__(self, i: Any) -> Any:  # an index or a slice
        if isinstance(i, slice):
            return _core._seq_items(self)[i]
        if not isinstance(i, int):
            try:
                i = operator.index(i)
            except TypeError:
                raise TypeError(
                    f"{type(self).__name__} indices must be integers or slices, "
                    f"not {type(i).__name__}"
                ) from None
        return _core._seq_get(self, i)

    def __iter__(self) -> Iterator[Any]:
        return iter(_core._seq_items(self))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (Array, List, tuple, list)):
            return list(self) == list(other)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(tuple(self))

    def __repr__(self) -> str:
        return _released_repr(self) or f"{type(self).__name__}({list(self)!r})"


class List(Array):
    """A mutable sequence shared by reference (kffi List). Read access from Python."""

    __slots__ = ()
    __hash__ = None  # type: ignore[assignment]  # mutable: unhashable, as list is


class Map(Object, Mapping[Any, Any]):
    """An immutable mapping (kffi Map). Behaves like a read-only dict."""

    __slots__ = ()

    def _items(self) -> list[tuple[Any, Any]]:
        return _core._map_items(self)

    def __len__(self) -> int:
        return _core._map_len(self)

    def __getitem__(self, key: Any) -> Any:
        value = _core._map_get(self, key, _MISSING)
        if value is _MISSING:
            raise KeyError(key)
        return value

    def __contains__(self, key: object) -> bool:
        return _core._map_get(self, key, _MISSING) is not _MISSING

    def get(self, key: Any, default: Any = None) -> Any:
        value = _core._map_get(self, key, _MISSING)
        return default if value is _MISSING else value

    def __iter__(self) -> Iterator[Any]:
        return iter([k for k, _ in self._items()])

    def items(self) -> list[tuple[Any, Any]]:  # type: ignore[override]  # a list, not a view
        return self._items()

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (Mapping, dict)):
            return dict(self._items()) == dict(other.items())
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # compares by value, as dict does

    def __repr__(self) -> str:
        return _released_repr(self) or f"{type(self).__name__}({dict(self._items())!r})"


class Dict(Map):
    """A mutable mapping shared by reference (kffi Dict). Read access from Python."""

    __slots__ = ()


class Shape(Object, Sequence[int]):
    """An immutable tuple of ints (kffi Shape)."""

    __slots__ = ()

    def __len__(self) -> int:
        return len(_core._shape_tuple(self))

    def __getitem__(self, i: Any) -> Any:  # an index or a slice
        return _core._shape_tuple(self)[i]

    def __iter__(self) -> Iterator[int]:
        return iter(_core._shape_tuple(self))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (Shape, tuple, list)):
            return tuple(self) == tuple(other)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(_core._shape_tuple(self))

    def __repr__(self) -> str:
        return _released_repr(self) or f"Shape({_core._shape_tuple(self)!r})"


class Tensor(Object):
    """A kffi tensor: owns (a reference to) its data; speaks DLPack both ways.

    ``torch.from_dlpack(t)``, ``numpy.from_dlpack(t)`` and ``jax.dlpack.from_dlpack(t)`` take it
    without a copy.
    """

    __slots__ = ()
    __dlpack_c_exchange_api__ = _core._tensor_exchange_api

    def _info(self) -> tuple[Any, ...]:
        return _core._tensor_info(self)

    @property
    def data_ptr(self) -> int:
        return int(self._info()[0] or 0)

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self._info()[1])

    @property
    def strides(self) -> tuple[int, ...]:
        return tuple(self._info()[2])

    @property
    def dtype(self) -> dtype:
        return dtype(_core._dtype_to_str(*self._info()[3]))

    @property
    def device(self) -> Device:
        return Device(*self._info()[4])

    @property
    def byte_offset(self) -> int:
        return int(self._info()[5])

    @property
    def ndim(self) -> int:
        return len(self._info()[1])

    @property
    def is_read_only(self) -> bool:
        """True when the producer marked the memory read-only (a read-only NumPy array, a JAX
        array): kernels must not write it."""
        return bool(self._info()[6])

    def numel(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    def __dlpack_device__(self) -> tuple[int, int]:
        device_type, device_id = self._info()[4]
        return (device_type, device_id)

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> Any:
        """``numpy.asarray(t)``: a NumPy array viewing the same memory (CPU tensors; zero-copy
        unless a dtype conversion or ``copy=True`` asks for one)."""
        import numpy

        if self._info()[4][0] != 1:
            raise BufferError(f"numpy.asarray needs a CPU tensor; this one is on {self.device}")
        arr = numpy.from_dlpack(self)
        if dtype is not None and numpy.dtype(dtype) != arr.dtype:
            return arr.astype(dtype)
        return arr.copy() if copy else arr

    def __jax_array__(self) -> Any:
        """``jax.numpy.asarray(t)``: a JAX array of the same memory (through DLPack)."""
        to_jax = _frameworks.framework("jax").from_dlpack()
        assert to_jax is not None
        return to_jax(self)

    def __dlpack__(
        self,
        *,
        stream: Any = None,
        max_version: tuple[int, int] | None = None,
        dl_device: tuple[int, int] | None = None,
        copy: bool | None = None,
    ) -> Any:
        if copy:
            raise BufferError("kffi.Tensor.__dlpack__ does not copy (copy=True was asked)")
        if dl_device is not None and tuple(dl_device) != self.__dlpack_device__():
            raise BufferError(f"kffi.Tensor is on {self.device}, not on {dl_device}")
        versioned = max_version is not None and max_version[0] >= 1
        return _core._tensor_to_dlpack(self, versioned)

    def __repr__(self) -> str:
        return _released_repr(self) or (
            f"kffi.Tensor(shape={self.shape}, dtype={self.dtype}, device={self.device})"
        )


class ErrorObject(Object):
    """A native error held as a value (not raised)."""

    __slots__ = ()

    @property
    def kind(self) -> str:
        return _core._error_info(self)[0]

    @property
    def message(self) -> str:
        return _core._error_info(self)[1]

    @property
    def backtrace(self) -> str:
        return _core._error_info(self)[2]

    def __repr__(self) -> str:
        return _released_repr(self) or f"ErrorObject({self.kind}: {self.message})"


_PY_TYPE_NAMES = {
    "int": "int",
    "float": "float",
    "bool": "bool",
    "str": "str",
    "bytes": "bytes",
    "None": "None",
}


def _check_metadata(meta: object, where: str) -> dict[str, Any]:
    """Validates the keys a reader relies on (unknown keys are ignored); ValueError naming the
    function and the module otherwise, so a malformed library never fails with a bare
    JSONDecodeError, KeyError or an error of inspect."""
    if not isinstance(meta, dict):
        raise ValueError(f"{where}: expected a JSON object, got {type(meta).__name__}")
    params = meta.get("params", [])
    if params is None:
        params = []
    if not isinstance(params, list):
        raise ValueError(f"{where}: `params` must be a list, got {type(params).__name__}")
    seen: dict[
        str, int
    ] = {}  # the name each parameter goes by (an unnamed one: arg<i>) -> its index
    for i, p in enumerate(params):
        if not isinstance(p, dict):
            raise ValueError(f"{where}: params[{i}] must be an object, got {type(p).__name__}")
        name = p.get("name")
        if name is None or name == "":
            name = f"arg{i}"  # unnamed: the name _annotate gives it
        elif not isinstance(name, str) or not name.isidentifier() or keyword.iskeyword(name):
            raise ValueError(
                f"{where}: params[{i}] has name {name!r}, expected a Python identifier"
            )
        if name in seen:
            j = seen[name]
            unnamed = [k for k in (j, i) if not params[k].get("name")]
            note = (
                f" (an unnamed parameter is called arg<index>: params[{unnamed[0]}])"
                if unnamed
                else ""
            )
            raise ValueError(
                f"{where}: params[{i}] repeats the parameter name {name!r} of params[{j}]{note}"
            )
        seen[name] = i
        if "type" in p and not isinstance(p["type"], str):
            raise ValueError(
                f"{where}: params[{i}] (`{name}`) has type {p['type']!r}, expected a str"
            )
    for key in ("name", "doc", "return"):
        if key in meta and meta[key] is not None and not isinstance(meta[key], str):
            raise ValueError(f"{where}: `{key}` must be a str, got {type(meta[key]).__name__}")
    return meta


def _shown_type(param: dict[str, Any]) -> str:
    """A parameter's type as signatures show it: a tensor the function may write (a C++
    kffi::TensorView: "mutable" in the metadata) reads `Tensor(mut)`, as in C++'s messages."""
    text = str(param.get("type", "Any"))
    if param.get("mutable") and text in ("Tensor", "Optional<Tensor>"):
        return text.replace("Tensor", "Tensor(mut)")
    return text


def _annotate(func: Function, meta: dict[str, Any]) -> Function:
    """Gives a function from a module its parameter names, signature and docstring (meta has
    passed _check_metadata)."""
    params = meta.get("params") or []
    names = tuple(p.get("name") or f"arg{i}" for i, p in enumerate(params))
    func._param_names = names
    func._metadata = meta  # the structured contract, for framework integrations (kffi.jax)
    _reflection._note_record_params(func, params)  # dataclass/NamedTuple -> object parameters
    # Trailing parameters with a default ("default" in the metadata, or an Optional type) may be
    # left out of a call.
    defaults = []
    for p in reversed(params):
        if "default" in p:
            defaults.append(p["default"])
        elif _type_text.is_optional(p.get("type")):
            defaults.append(None)
        else:
            break
    defaults.reverse()
    func._param_defaults = tuple(defaults) if defaults else None
    first_default = len(params) - len(defaults)
    sig_params = [
        inspect.Parameter(
            n,
            inspect.Parameter.POSITIONAL_OR_KEYWORD,
            annotation=p.get("type", inspect.Parameter.empty),
            default=(
                defaults[i - first_default] if i >= first_default else inspect.Parameter.empty
            ),
        )
        for i, (n, p) in enumerate(zip(names, params))
    ]
    ret = meta.get("return") or inspect.Signature.empty
    func.__signature__ = inspect.Signature(sig_params, return_annotation=ret)
    rendered = ", ".join(f"{n}: {_shown_type(p)}" for n, p in zip(names, params))
    doc = meta.get("doc") or ""
    func.__doc__ = f"{meta.get('name') or ''}({rendered}) -> {ret}\n\n{doc}".rstrip()
    func.__name__ = meta.get("name") or ""
    return func


class Module(Object):
    """A loaded kernel library. ``mod.scale(...)``, ``mod["scale"]``, ``mod.functions()``."""

    __slots__ = ()

    @property
    def name(self) -> str:
        return _core._module_name(self)

    def functions(self) -> list[str]:
        """Names of the functions this module (and its imports) export."""
        return _core._module_list_functions(self, True)

    def metadata(self, name: str) -> dict[str, Any] | None:
        """The exported metadata of a function: params, return type, docstring. Malformed
        metadata is a ValueError naming the function and the module."""
        text = _core._module_get_metadata(self, name)
        if not text:
            return None
        where = f"Malformed metadata of function `{name}` in module `{self.name}`"
        try:
            meta = json.loads(text)
        except (ValueError, RecursionError) as e:
            raise ValueError(f"{where}: not valid JSON ({e})") from e
        return _check_metadata(meta, where)

    def get_function(self, name: str) -> Function | None:
        """The function, or None when the module has no function of that name."""
        for hook in _hooks.before_lookup:  # kffi.tvm: a TVM-FFI export's owning parameters
            hook()
        f = _core._module_get_function(self, name, True)
        if f is not None:
            # Where it came from (the library's path, the name): kffi.jax names its XLA targets
            # by the library's content and this name, the same in every process.
            f._origin = (self.name, name)
            meta = self.metadata(name)
            if meta:
                _annotate(f, meta)
            else:  # no metadata (e.g. a TVM-FFI export without it): the name at least
                f.__name__ = name
        return f

    def import_module(self, other: Module) -> None:
        _core._module_import(self, other)

    def torch_ops(self, namespace: str) -> Any:
        """Registers every function of this module that has a contract as the torch op
        ``namespace::<name>`` (see kffi.torch.register_op); returns them by name: ``ops.scale``.
        Imports torch (through kffi.torch's entry point: runtime/_frameworks.py)."""
        return _frameworks.integration("torch").ops_of_module(self, namespace)

    def __getitem__(self, name: str) -> Function:
        f = self.get_function(name)
        if f is None:
            raise KeyError(
                f"Module {self.name!r} has no function {name!r}; available: "
                f"{', '.join(self.functions()) or '(none)'}"
            )
        return f

    def __getattr__(self, name: str) -> Function:
        if name.startswith("__"):
            raise AttributeError(name)
        f = self.get_function(name)
        if f is None:
            raise AttributeError(
                f"Module {self.name!r} has no function {name!r}; available: "
                f"{', '.join(self.functions()) or '(none)'}"
            )
        # Cached on the instance: later `mod.name` lookups skip the native lookup and metadata.
        Object._store_attr(self, name, f)
        return f

    def __contains__(self, name: str) -> bool:
        return _core._module_get_function(self, name, True) is not None

    def __dir__(self) -> list[str]:
        return sorted(set(super().__dir__()) | set(self.functions()))

    def __repr__(self) -> str:
        return _released_repr(self) or f"kffi.Module({self.name!r})"


for _key, _cls in (
    ("Array", Array),
    ("List", List),
    ("Map", Map),
    ("Dict", Dict),
    ("Shape", Shape),
    ("Tensor", Tensor),
    ("Module", Module),
    ("Error", ErrorObject),
):
    _core._register_object_class(_TYPE_INDEX[_key], _cls)
