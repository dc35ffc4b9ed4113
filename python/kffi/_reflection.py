"""python/kffi/_reflection.py: Python classes of reflected kffi object types (fields, methods).

A C++ object type that declares fields (KFFI_OBJECT_DEF, kffi/reflection.h) shows them as
attributes: one descriptor per field, made by the extension, reads the field through the type's
getter (and assigns it through its setter when the field is read-write). Such a type gets a class
made here the first time one of its objects reaches Python, unless `register_object` named one.
"""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import numbers
import reprlib
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar, cast

from . import _core

Object = _core.Object

_lock = threading.RLock()
# type index -> the class made or registered for it
_classes: dict[int, type[Object]] = {}

# A field: (name, type text, type index, writable); a method: (name, Function).
_Field = tuple[str, str, int, bool, bool]
_Info = tuple[str, int, int, tuple[_Field, ...], tuple[tuple[str, _core.Function], ...]]
_O = TypeVar("_O", bound=Object)
_T = TypeVar("_T")


def _info(index: int) -> _Info | None:
    """(key, parent index, flags, fields, methods) of a type's own declarations, or None."""
    return _core._reflection(index)


def _known(index: int) -> _Info:
    """_info of a type known to exist (one of _chain's, a registered object's)."""
    info = _info(index)
    if info is None:
        raise KeyError(f"kffi: no type of index {index}")
    return info


def _chain(index: int) -> list[int]:
    """The type and its ancestors, root first."""
    out: list[int] = []
    while index >= 0:
        info = _info(index)
        if info is None:
            break
        out.append(index)
        index = info[1]
    return out[::-1]


def fields_of(index: int) -> list[_Field]:
    """(name, type, type index, writable, compared) of every field of the type, ancestors' first
    (compared: not left out of structural == and hash)."""
    seen: dict[str, _Field] = {}
    for at in _chain(index):
        for f in _known(at)[3]:
            seen[f[0]] = f
    return list(seen.values())


def _structural(index: int) -> bool:
    return any(_known(at)[2] & 1 for at in _chain(index))


class ReflectedObject(Object):
    """Base of the classes of reflected kffi object types: fields as attributes, a repr that shows
    them, and ==/hash by field values where the C++ type declared structural equality."""

    __slots__ = ()
    _kffi_fields: tuple[str, ...] = ()
    _kffi_compared: tuple[str, ...] = ()  # the fields structural == and hash compare
    _kffi_structural = False

    @reprlib.recursive_repr("...")
    def __repr__(self) -> str:
        if not self._handle:
            return f"<kffi.{type(self).__name__} (released)>"
        body = ", ".join(f"{n}={getattr(self, n)!r}" for n in self._kffi_fields)
        return f"{self.type_key}({body})"

    def _field_values(self) -> tuple[Any, ...]:
        return tuple(getattr(self, n) for n in self._kffi_compared)

    def __eq__(self, other: object) -> bool:
        if not self._kffi_structural:
            return Object.__eq__(self, other)
        if not isinstance(other, Object) or other.type_index != self.type_index:
            return NotImplemented
        if self.same_as(other):
            return True
        # The same type: its class is this one, or a registered one given _field_values.
        return _values_equal(self._field_values(), cast(ReflectedObject, other)._field_values())

    def __ne__(self, other: object) -> bool:
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq

    def __hash__(self) -> int:
        if not self._kffi_structural:
            return Object.__hash__(self)
        return hash((self.type_index,) + tuple(_hashable(v) for v in self._field_values()))


def _values_equal(a: tuple[Any, ...], b: tuple[Any, ...]) -> bool:
    for x, y in zip(a, b):
        if isinstance(x, Object) and not hasattr(x, "_kffi_fields"):
            # Tensors and other opaque objects compare by identity (no elementwise ==).
            if not (isinstance(y, Object) and x.same_as(y)):
                return False
        elif x is not y and x != y:
            return False
    return len(a) == len(b)


def _hashable(v: object) -> object:
    if isinstance(v, Object) and not hasattr(v, "_kffi_fields"):
        return v._handle
    return v


def _method(fn: _core.Function, name: str) -> Callable[..., Any]:
    def method(self: Object, *args: Any, **kwargs: Any) -> Any:
        return fn(self, *args, **kwargs)

    method.__name__ = name
    method.__qualname__ = name
    return method


def _prepare(cls: type[Object], index: int) -> None:
    """Installs the fields (descriptors), the native methods the class does not define itself and
    the structural flags on cls."""
    _core._install_fields(cls, index)
    # A ReflectedObject, or a registered class given its methods (register_object).
    reflected = cast("type[ReflectedObject]", cls)
    fields = fields_of(index)
    reflected._kffi_fields = tuple(f[0] for f in fields)
    reflected._kffi_compared = tuple(f[0] for f in fields if f[4])
    reflected._kffi_structural = _structural(index)
    bases = cls.__mro__[1:]
    for at in _chain(index):
        if at != index and _classes.get(at) in bases:
            continue  # its methods come by inheritance (or the class's overrides of them)
        for name, fn in _known(at)[4]:
            if name not in cls.__dict__ or getattr(cls.__dict__[name], "_kffi_native", False):
                m = _method(fn, name)
                m.__dict__["_kffi_native"] = True  # marks kffi's own (a later class replaces it)
                setattr(cls, name, m)
    _core._register_object_class(index, cls)
    _classes[index] = cls


def class_named(key: str, base: type[_T]) -> type[_T]:
    """A new class for type key (named by its last part, qualified by the key) deriving from
    base, as kffi makes one for a reflected type of its own registry or of apache-tvm-ffi's."""
    made = type(key.rsplit(".", 1)[-1], (base,), {"__slots__": (), "__module__": "kffi.objects"})
    made.__qualname__ = key
    return made


def _declares(index: int) -> bool:
    """Whether the type declares reflection of its own (fields, methods or flags)."""
    _key, _parent, flags, fields, methods = _known(index)
    return bool(fields or methods or flags)


def _class_for(index: int) -> type[Object]:
    """Called by the extension for an object of a reflected type that has no class yet: a class
    deriving from its nearest reflected ancestor's, made first (root first) where missing, so
    isinstance follows the type hierarchy whichever type's object arrives first."""
    with _lock:
        cls = _classes.get(index)
        if cls is not None:
            return cls
        base: type[Object] = ReflectedObject
        for at in _chain(index):  # root first
            if at in _classes:
                base = _classes[at]
            elif at == index or _declares(at):
                base = class_named(_known(at)[0], base)
                _prepare(base, at)
        return base


# register_object's answer for type keys of other registries: each takes (type_key, cls) and
# returns True once it made cls the class of that key (kffi/tvm/_bridge.py adds one).
_foreign_registrars: list[Callable[[str, type], bool]] = []


def _adopt_reflected_methods(cls: type) -> None:
    """The repr, == and hash of reflected objects where the class defines none."""
    for name in ("__repr__", "__eq__", "__ne__", "__hash__", "_field_values"):
        if name not in cls.__dict__ and not issubclass(cls, ReflectedObject):
            setattr(cls, name, ReflectedObject.__dict__[name])


def register_object(type_key: str) -> Callable[[type[_O]], type[_O]]:
    """Class decorator: objects of the kffi type `type_key` come to Python as this class.

    The class must derive from kffi.Object (a subclass of a class registered for an ancestor type
    is fine); it gets the type's fields as attributes and its native methods, and keeps the
    methods it defines itself. The library that defines the type must be loaded first::

        @kffi.register_object("test.Point")
        class Point(kffi.Object):
            def dist2(self):
                return self.x**2 + self.y**2
    """
    if not isinstance(type_key, str):
        raise TypeError(f"register_object: type_key must be a str, got {type(type_key).__name__}")

    def decorate(cls: type[_O]) -> type[_O]:
        if not (isinstance(cls, type) and issubclass(cls, Object)):
            raise TypeError(
                f"register_object({type_key!r}): expected a subclass of kffi.Object, got {cls!r}"
            )
        try:
            index = _core._type_key_to_index(type_key)
        except KeyError:
            # A type of another runtime's registry (a loaded apache-tvm-ffi's: kffi.tvm).
            if any(register(type_key, cls) for register in _foreign_registrars):
                return cls
            raise KeyError(
                f"register_object: type key {type_key!r} is not registered; load the library "
                "that defines it first"
            ) from None
        with _lock:
            _adopt_reflected_methods(cls)
            _prepare(cls, index)
        return cls

    return decorate


_core._set_reflection_hook(_class_for)


def _record_fields(cls: type) -> tuple[str, ...] | None:
    """For the extension: the field names of a record class (a dataclass or a typing.NamedTuple),
    or None for any other class; read once per class."""
    import dataclasses

    fields = getattr(cls, "_fields", None)  # a NamedTuple's
    if dataclasses.is_dataclass(cls):
        return tuple(f.name for f in dataclasses.fields(cls))
    if issubclass(cls, tuple) and isinstance(fields, tuple):
        return tuple(fields)
    return None


def record_field_value(label: str, kind: str, v: object, where: str) -> object:
    """Field value v of a flattened record checked against its kind and converted.

    The kinds are those a record's field takes as one scalar of a torch schema or a JAX attribute
    ("int", "float", "bool", "str"); label names the field (``cfg.alpha``) and where the call.
    """
    if kind == "str":
        ok = isinstance(v, str)
    elif kind == "bool":
        ok = isinstance(v, numbers.Integral) or type(v).__name__ == "bool_"
    elif kind == "int":
        ok = isinstance(v, numbers.Integral)
    else:
        ok = isinstance(v, numbers.Real)
    if not ok:
        raise TypeError(f"{label}: expected {kind}, got {type(v).__name__}{where}")
    if kind == "int":
        i = int(v)  # type: ignore[call-overload]
        if not -(2**63) <= i < 2**63:
            raise OverflowError(f"{label}: {i} does not fit int64{where}")
        return i
    if kind == "float":
        return float(v)  # type: ignore[arg-type]
    if kind == "bool":
        return bool(v)
    return v


def _record_plan(cls: type) -> tuple[int, tuple[str, ...]]:
    """For the extension: (kffi type index, field names) of a record class (a dataclass or a
    typing.NamedTuple with ``__kffi_type__``), read once per class."""
    key = getattr(cls, "__kffi_type__", None)
    if not isinstance(key, str):
        raise TypeError(f"record class {cls.__qualname__}: __kffi_type__ must be a type key str")
    try:
        index = _core._type_key_to_index(key)
    except KeyError:
        raise KeyError(
            f"record class {cls.__qualname__}: kffi type {key!r} is not registered; load the "
            "library that defines it first"
        ) from None
    names = _record_fields(cls)
    if names is None:
        raise TypeError(
            f"record class {cls.__qualname__}: expected a dataclass or a typing.NamedTuple"
        )
    return index, names


def _record_type_index(type_text: object) -> int:
    """The type index of a parameter type text that names a registered kffi object type, else
    -1 (the extension keeps only those a record can build: with fields and a constructor)."""
    if not isinstance(type_text, str) or "." not in type_text or "<" in type_text:
        return -1
    try:
        return _core._type_key_to_index(type_text)
    except (KeyError, ValueError, TypeError):
        return -1


def _note_record_params(func: _core.Function, params: Sequence[Mapping[str, Any]]) -> None:
    """Tells the extension which parameters of func (metadata ``params``) take a record type:
    there a dataclass or NamedTuple with the type's field names converts to it."""
    types = tuple(_record_type_index(p.get("type")) for p in params)
    if any(t >= 0 for t in types):
        _core._set_record_params(func, types)


def register_record(type_key: str) -> Callable[[type[_T]], type[_T]]:
    """Class decorator for a dataclass or typing.NamedTuple: its instances passed to a kffi
    function become objects of the kffi type ``type_key`` (made by the type's default
    constructor, each field assigned through its C++ setter, in the extension). Sets
    ``cls.__kffi_type__``; a class may set that attribute itself instead."""
    if not isinstance(type_key, str):
        raise TypeError(f"register_record: type_key must be a str, got {type(type_key).__name__}")

    def decorate(cls: type[_T]) -> type[_T]:
        # An attribute of the user's class that no static type declares.
        setattr(cls, "__kffi_type__", type_key)  # noqa: B010
        return cls

    return decorate
