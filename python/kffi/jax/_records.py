"""python/kffi/jax/_records.py: record parameters of kffi.jax calls, as static attributes.

A parameter whose type is a kffi object type with fields (a KFFI_OBJECT_DEF type with a default
constructor, or a KFFI_RECORD struct) takes a record: a dataclass, a NamedTuple or a kffi object
of the type. Its writable fields travel as static XLA attributes named ``<param>_<field>`` (the
names kffi.torch gives their schema arguments), and the arg_spec item
``record.<param>:<type key>:<field>,...`` tells the XLA handler to make the object (the type's
creator) and assign each field from its attribute (its C++ setter) before the call
(_xla_handler.cc). Fields are int, float, bool or str; a record is static, so a field of another
value makes another computation (``jax.jit`` retraces).
"""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import threading
from typing import Any

from .. import _reflection
from ..runtime._objects import Object

try:  # public names first; jax moves internals between releases
    from jax.core import Tracer
except ImportError:  # pragma: no cover (newer jax)
    from jax._src.core import Tracer

__all__ = ["bind_record", "record_layout"]

_SCALARS = ("int", "float", "bool", "str")
# Sized field types: their setters check the range.
_KINDS = {
    **{
        t: "int" for t in ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")
    },
    **{t: "float" for t in ("float16", "float32", "float64", "bfloat16")},
    **{t: t for t in _SCALARS},
}
_MISSING = object()
_lock = threading.Lock()
_layouts: dict[str, tuple[str, tuple[tuple[str, str], ...]] | None] = {}


def record_layout(param: dict[str, Any]) -> tuple[str, tuple[tuple[str, str], ...]] | None:
    """(type key, ((field, type), ...) of its writable fields) when the parameter's type is a
    registered kffi object type with fields, else None."""
    type_text = param.get("type")
    if not isinstance(type_text, str):
        return None
    with _lock:
        if type_text in _layouts:
            return _layouts[type_text]
    index = _reflection._record_type_index(type_text)
    layout = None
    if index >= 0:
        fields = _reflection.fields_of(index)
        if fields:
            layout = (
                type_text,
                tuple((n, _KINDS.get(t, t)) for n, t, _, writable, _c in fields if writable),
            )
    with _lock:
        _layouts[type_text] = layout
    return layout


def _field_value(label: str, kind: str, v: object, where: str) -> object:
    if isinstance(v, Tracer):
        raise TypeError(
            f"{label}: a record's fields are static attributes, got a traced value; pass the "
            f"record as a static argument (jax.jit(..., static_argnames=...)) or close over it"
            f"{where}"
        )
    return _reflection.record_field_value(label, kind, v, where)


def bind_record(
    binding: Any,
    name: str,
    layout: tuple[str, tuple[tuple[str, str], ...]],
    value: object,
    where: str,
) -> None:
    """Adds record ``value`` for parameter ``name`` to ``binding``: one attribute per field and
    the arg_spec item that rebuilds the object. Errors name ``name.field``."""
    key, fields = layout
    for f, kind in fields:
        if kind not in _SCALARS:
            raise TypeError(
                f"{name}.{f}: kffi.jax passes a record's fields as static attributes (int, "
                f"float, bool, str); {key}.{f} is {kind}{where}"
            )
    if isinstance(value, Object):
        if getattr(value, "type_key", None) != key:
            raise TypeError(f"{name}: expected {key}, got {value.type_key}{where}")
    else:
        names = _reflection._record_fields(type(value))
        if names is None:
            raise TypeError(
                f"{name}: expected {key}, got {type(value).__name__} (a dataclass or "
                f"NamedTuple with its fields, or the object, passes){where}"
            )
        known = {f for f, _ in fields}
        for n in names:
            if n not in known:
                raise TypeError(
                    f"{name}.{n}: expected a field of {key}, got a field of "
                    f"{type(value).__name__} that {key} does not have (or cannot assign){where}"
                )
    for f, kind in fields:
        v = getattr(value, f, _MISSING)
        if v is _MISSING:
            raise TypeError(
                f"{name}.{f}: expected a value ({kind}), got a {type(value).__name__} without "
                f"field {f}{where}"
            )
        binding.attrs.append((f"{name}_{f}", _field_value(f"{name}.{f}", kind, v, where)))
    binding.spec.append(f"record.{name}:{key}:{','.join(f for f, _ in fields)}")
