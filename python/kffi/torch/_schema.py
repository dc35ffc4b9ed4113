"""python/kffi/torch/_schema.py: a kffi function's torch op signature, read from its metadata.

The derivation itself is C++ (_signature.cc, in the dispatcher glue): one implementation serves
kffi.torch here and ``kffi::torch::RegisterOps(module, ns)`` in a C++ program. This module calls
it and holds the result as the objects kffi.torch reads: the schema, the call plan, and per
parameter where it stands in the op (schema argument, stream, allocated output).
"""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ..runtime._objects import Function
from . import _glue

__all__ = ["OpSignature", "Param", "signature_of"]

_NO_DEFAULT = object()

# Return kinds (RetKind in _dispatch.h).
RET_NONE, RET_TENSOR, RET_TENSORS, RET_TENSOR_LIST, RET_INT, RET_FLOAT, RET_BOOL = range(7)


@dataclass
class Param:
    """One parameter of the kffi function and where it stands in the op."""

    index: int
    name: str
    kind: str  # "tensor", "int", "float", "bool", "str", "list", "stream", "record"
    schema_type: str | None  # None: not an op argument (stream, allocated output)
    optional: bool = False
    default: object = _NO_DEFAULT
    mutable: bool = False
    allocated: bool = False
    shape: tuple[Any, ...] | None = None  # the metadata's: ints, symbol names, wildcards
    dtypes: tuple[str, ...] = ()
    # per dimension of an allocated output: an int, or (argument name, dimension)
    alloc_dims: list[int | tuple[str, int]] = field(default_factory=list)
    # kind "record": its fields, each a schema argument named `<param>_<field>` (field_name set)
    fields: list[Param] = field(default_factory=list)
    record_key: str = ""
    field_name: str = ""

    @property
    def has_default(self) -> bool:
        return self.default is not _NO_DEFAULT


@dataclass
class OpSignature:
    """The op made from one kffi function (see _signature.h)."""

    qualname: str
    label: str  # the function's name, for messages
    params: list[Param]
    returns: list[str]  # torch return types
    ret_kind: int
    n_fn_returns: int  # tensors the function itself returns
    # declared returned outputs (metadata dicts)
    outputs: list[dict[str, Any]] = field(default_factory=list)
    meta: dict[str, Any] | None = None
    contract: bool = False
    _schema: str = ""
    _plan: list[int] = field(default_factory=list)
    _device_arg: int = -1
    # What the plan's records are, by name (type key, then field names, per record), and the type
    # text of every parameter (the metadata's): the glue checks the plan against both.
    record_names: list[str] = field(default_factory=list)
    param_types: list[str] = field(default_factory=list)

    @property
    def schema_args(self) -> list[Param]:
        """The op's arguments in order: a record parameter's fields stand in its place."""
        out: list[Param] = []
        for p in self.params:
            if p.schema_type is not None:
                out.append(p)
            out.extend(p.fields)
        return out

    @property
    def records(self) -> list[Param]:
        return [p for p in self.params if p.kind == "record"]

    @property
    def allocated(self) -> list[Param]:
        return [p for p in self.params if p.allocated]

    @property
    def mutated(self) -> list[str]:
        return [p.name for p in self.params if p.mutable and not p.allocated]

    @property
    def direct(self) -> bool:
        """Whether the op's arguments are exactly the function's parameters, in order."""
        return all(p.schema_type is not None for p in self.params)

    def schema(self) -> str:
        """The torch schema, without the name: ``(Tensor(a!) y, Tensor x, float f=2.) -> ()``."""
        return self._schema

    def native_plan(self, packed_dtype: object = None) -> list[int]:
        """The flat call plan of _dispatch.cc (dtypes packed by the glue)."""
        return list(self._plan)

    def device_arg(self) -> int:
        """The schema argument whose device a call uses: the first required tensor (else the
        first tensor; -1 when none)."""
        return self._device_arg

    def alloc_dims(self, p: Param) -> list[int | tuple[str, int]]:
        """Per dimension of an allocated output: an int, or (argument name, dimension)."""
        return list(p.alloc_dims)


def _names(value: str | Iterable[str], what: str) -> list[str]:
    if isinstance(value, str):
        value = (value,)
    try:
        names = set(value)
    except TypeError:
        raise TypeError(f"kffi.torch: {what} is a sequence of parameter names") from None
    for n in names:
        if not isinstance(n, str):
            raise TypeError(f"kffi.torch: {what} holds parameter names (str), got {n!r}")
    return sorted(names)


def signature_of(
    fn: Function,
    qualname: str,
    *,
    mutates_args: str | Iterable[str] | None = None,
    allocate: bool | str | Iterable[str] | None = None,
) -> OpSignature:
    """The op signature of ``fn`` (a kffi Function with metadata) under ``qualname``."""
    meta = getattr(fn, "_metadata", None)
    label = (meta or {}).get("name") or getattr(fn, "__name__", None) or "function"
    if not isinstance(meta, dict) or not isinstance(meta.get("params"), list):
        raise TypeError(
            f"kffi.torch: {label} has no metadata (parameter names and types); torch ops are "
            f"made from functions of kffi.load_module(...) / kffi.compile / kffi.cpp.load_inline"
        )
    mutates = [] if mutates_args is None else _names(mutates_args, "mutates_args")
    mode = 0
    alloc_names: list[str] = []
    if allocate is True:
        mode = 1
    elif allocate:
        mode, alloc_names = 2, _names(allocate, "allocate")
    (schema, plan, label, ret_kind, n_fn, contract, returns, device_arg, raw, record_names) = (
        _glue.glue().op_signature(
            json.dumps(meta), qualname, label, mutates_args is not None, mutates, mode, alloc_names
        )
    )
    meta_params = meta["params"]
    params: list[Param] = []
    for i, item in enumerate(raw):
        name, kind, schema_type, optional, has_default, mutable, allocated, dtypes, dims = item[:9]
        fields, record_key = item[9], item[10]
        p = meta_params[i] if isinstance(meta_params[i], dict) else {}
        shape = p.get("shape")
        names = [n for q in raw for n in ([q[0]] if q[2] is not None else [f[0] for f in q[9]])]
        dims = list(dims)
        params.append(
            Param(
                i,
                str(name),
                str(kind),
                None if schema_type is None else str(schema_type),
                bool(optional),
                p.get("default") if has_default else _NO_DEFAULT,
                bool(mutable),
                bool(allocated),
                tuple(shape) if kind == "tensor" and shape is not None else None,
                tuple(str(d) for d in dtypes),
                [
                    dims[k + 1] if dims[k] < 0 else (str(names[dims[k]]), dims[k + 1])
                    for k in range(0, len(dims), 2)
                ],
                [
                    Param(i, str(fname), str(fkind), str(ftype), field_name=str(fn_))
                    for fname, fkind, ftype, fn_ in fields
                ],
                str(record_key),
            )
        )
    return OpSignature(
        qualname,
        str(label),
        params,
        [str(r) for r in returns],
        int(ret_kind),
        int(n_fn),
        outputs=list(meta.get("outputs") or []) if contract else [],
        meta=meta if contract else None,
        contract=bool(contract),
        _schema=str(schema),
        _plan=[int(x) for x in plan],
        _device_arg=int(device_arg),
        record_names=[str(n) for n in record_names],
        param_types=[str(p.get("type", "")) if isinstance(p, dict) else "" for p in meta_params],
    )
