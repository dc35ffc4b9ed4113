"""python/kffi/torch/_records.py: record parameters of kffi.torch ops, flattened to their fields.

A parameter whose type is a kffi object type with fields (a KFFI_OBJECT_DEF type with a default
constructor, or a KFFI_RECORD struct) is not a torch schema type. The op takes its writable
scalar fields instead, one schema argument each, named ``<param>_<field>`` (a torch schema name
cannot hold a dot): ``cfg: demo.Config`` becomes ``float cfg_alpha, SymInt cfg_n``
(_signature.cc). The dispatcher kernel builds the object again from them (_dispatch.cc).

This module is the op's Python side of that: :class:`RecordArgs` turns a call that passes the
record (a dataclass, a NamedTuple, or a kffi object of the type) or its flattened keywords into
the op's schema arguments, checking each field with messages that name ``cfg.alpha`` as the kffi
call does; and it builds the value the kffi function takes for an eager call.
"""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import collections
from typing import Any

import torch

from .. import _core, _reflection
from ..runtime._error import counted
from ..runtime._objects import Object

__all__ = ["RecordArgs"]

# True while dynamo traces. It cannot trace dataclasses.fields, so the check for record fields
# the type lacks is left out of compiled code; each field the type has is still read and checked.
_compiling = getattr(torch.compiler, "is_dynamo_compiling", torch.compiler.is_compiling)


def _type_name(v: object) -> str:
    return type(v).__name__


class RecordArgs:
    """How one op's call binds: its parameters as the user passes them (a record parameter as
    one value, or as its fields by keyword), flattened to the op's schema arguments."""

    def __init__(self, sig: Any, fn: Any) -> None:
        self.qualname: str = sig.qualname
        doc = (getattr(fn, "__doc__", None) or "").split("\n")[0]
        self._signature = doc or f"{sig.label}(...)"
        # The parameters a caller passes, in order: schema arguments and records.
        self._slots = [p for p in sig.params if p.schema_type is not None or p.kind == "record"]
        self._slot_names = {p.name: i for i, p in enumerate(self._slots)}
        self._field_args = {f.name: (p, f) for p in sig.records for f in p.fields}
        # Whether a call's arguments are the kffi function's (no allocated outputs, no streams):
        # then an untraced call passing the records whole goes to the function as it is.
        self.direct = len(self._slots) == len(sig.params)
        self._tensors = [(i, p.name) for i, p in enumerate(self._slots) if p.kind == "tensor"]
        self._written = [(i, p.name) for i, p in enumerate(self._slots) if p.mutable]
        # The value the kffi function takes for a record: a NamedTuple of exactly its writable
        # fields (kffi matches it to the parameter's type, in C++).
        self._tuple_types = {
            p.name: collections.namedtuple(f"{p.name}_record", [f.field_name for f in p.fields])
            for p in sig.records
        }
        # Where a record parameter's errors point, in the runtime's format; made here, as
        # torch.compile traces _where and cannot trace into the extension.
        self._places = {
            p.index: _core._argument_context(p.index, self._signature) for p in sig.records
        }

    def _where(self, p: Any) -> str:
        return self._places[p.index]

    def _field(self, p: Any, f: Any, v: object) -> object:
        """Field f of record parameter p, checked and converted to what the schema takes."""
        return _reflection.record_field_value(f"{p.name}.{f.field_name}", f.kind, v, self._where(p))

    def _record(self, p: Any, rec: object) -> list[object]:
        """The schema values of record rec passed for parameter p."""
        if isinstance(rec, Object):
            if getattr(rec, "type_key", None) != p.record_key:
                raise TypeError(
                    f"{p.name}: expected {p.record_key}, got {rec.type_key}{self._where(p)}"
                )
        elif not _compiling():
            names = _reflection._record_fields(type(rec))
            if names is None:
                raise TypeError(
                    f"{p.name}: expected {p.record_key}, got {_type_name(rec)} (a dataclass or "
                    f"NamedTuple with its fields, or the object, passes){self._where(p)}"
                )
            known = {f.field_name for f in p.fields}
            for n in names:
                if n not in known:
                    raise TypeError(
                        f"{p.name}.{n}: expected a field of {p.record_key}, got a field of "
                        f"{_type_name(rec)} that {p.record_key} does not have (or cannot "
                        f"assign){self._where(p)}"
                    )
        out = []
        for f in p.fields:
            # hasattr, not a sentinel default: torch 2.11's dynamo cannot trace `is` against an
            # object() sentinel (NotImplementedError: ObjectVariable()) under fullgraph.
            if not hasattr(rec, f.field_name):
                raise TypeError(
                    f"{p.name}.{f.field_name}: expected a value ({f.kind}), got a "
                    f"{_type_name(rec)} without field {f.field_name}{self._where(p)}"
                )
            out.append(self._field(p, f, getattr(rec, f.field_name)))
        return out

    def flatten(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[object]:
        """The op's schema arguments, in order (defaults filled in), from a call that passes
        each record whole or as its fields by keyword (``cfg_alpha=...``)."""
        slots = self._slots
        if len(args) > len(slots):
            raise TypeError(
                f"{self.qualname}() takes {counted(len(slots), 'argument')} but {len(args)} "
                f"{'was' if len(args) == 1 else 'were'} given"
            )
        given = {slots[i].name: a for i, a in enumerate(args)}
        fields: dict[str, object] = {}
        for k, v in kwargs.items():
            if k in self._slot_names:
                if k in given:
                    raise TypeError(f"{self.qualname}() got multiple values for argument {k!r}")
                given[k] = v
            elif k in self._field_args:
                fields[k] = v
            else:
                raise TypeError(f"{self.qualname}() got an unexpected keyword argument {k!r}")
        out: list[object] = []
        for p in slots:
            if p.kind != "record":
                if p.name in given:
                    out.append(given[p.name])
                elif p.has_default:
                    out.append(p.default)
                else:
                    raise TypeError(f"{self.qualname}() missing required argument {p.name!r}")
                continue
            passed = [f.name for f in p.fields if f.name in fields]
            if p.name in given:
                if passed:
                    raise TypeError(
                        f"{self.qualname}() got {p.name!r} and its field {passed[0]!r}: pass "
                        f"the record or its fields"
                    )
                out.extend(self._record(p, given[p.name]))
                continue
            for f in p.fields:
                if f.name not in fields:
                    raise TypeError(
                        f"{self.qualname}() missing required argument {p.name!r} (a "
                        f"{p.record_key}, or its fields "
                        f"{', '.join(g.name for g in p.fields)} by keyword): no "
                        f"{p.name}.{f.field_name}"
                    )
                out.append(self._field(p, f, fields[f.name]))
        return out

    def tensor_values(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Any] | None:
        """The tensor arguments of a call that passes each record whole, else None."""
        for k in kwargs:
            if k not in self._slot_names:
                return None  # a record's field by keyword, or an error flatten reports
        n = len(args)
        return [args[i] if i < n else kwargs.get(name) for i, name in self._tensors]

    def written_values(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Any]:
        """The tensors the call writes (their versions are bumped after a direct call)."""
        n = len(args)
        return [args[i] if i < n else kwargs.get(name) for i, name in self._written]

    def kffi_value(self, p: Any, by_name: dict[str, Any]) -> object:
        """What the kffi function takes for record parameter p, from the schema values."""
        return self._tuple_types[p.name](*(by_name[f.name] for f in p.fields))
