"""python/kffi/torch/_schema.py: a kffi function's torch op signature, read from its metadata.

From the metadata every export carries (``params`` with ``name``/``type``/``default``) and the
structured contract fields (``kind``, ``optional``, ``shape``, ``dtypes``, ``mutable``,
``mutates``, ``outputs``), this module derives:

- the torch schema: argument names, types (``Tensor``, ``Tensor(a!)`` for a tensor the function
  writes, ``Tensor?``, ``SymInt``, ``float``, ``bool``, ``str``, lists), defaults and returns;
- the plan the C++ kernel follows (which kffi parameter takes which schema argument, the current
  stream, an allocated output or None), as a flat list of ints (see _dispatch.cc);
- the rules that shape allocated outputs (a literal, or a dimension of an argument).

Stream parameters are not in the schema: the op passes the current stream of the call's device.
``mut`` tensors are arguments written in place, unless the op allocates them (``allocate=``):
then they leave the schema and are returned, before the contract's declared outputs.
"""

from __future__ import annotations

import json
import keyword
import math
import re
from dataclasses import dataclass, field

from .._type_text import is_tensor, optional_inner
from ..contract import _abstract

__all__ = ["OpSignature", "Param", "signature_of"]

_NO_DEFAULT = object()
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

# Return kinds (RetKind in _dispatch.cc).
RET_NONE, RET_TENSOR, RET_TENSORS, RET_TENSOR_LIST, RET_INT, RET_FLOAT, RET_BOOL = range(7)
# Parameter sources (Source in _dispatch.cc).
SRC_ARG, SRC_STREAM, SRC_ALLOC, SRC_NONE = range(4)

_SCALAR_KINDS = {"int": "SymInt", "float": "float", "bool": "bool", "str": "str"}
_RET_SCALARS = {
    "int": ("SymInt", RET_INT),
    "float": ("float", RET_FLOAT),
    "bool": ("bool", RET_BOOL),
}
_CPP_LISTS = {"Array<int>": "SymInt[]", "Array<float>": "float[]", "Array<bool>": "bool[]"}


@dataclass
class Param:
    """One parameter of the kffi function and where it stands in the op."""

    index: int
    name: str
    kind: str  # "tensor", "int", "float", "bool", "str", "list", "stream"
    schema_type: str | None  # None: not an op argument (stream, allocated output)
    optional: bool = False
    default: object = _NO_DEFAULT
    mutable: bool = False
    allocated: bool = False
    shape: tuple | None = None
    dtypes: tuple = ()

    @property
    def has_default(self) -> bool:
        return self.default is not _NO_DEFAULT


@dataclass
class OpSignature:
    """The op made from one kffi function (see the module docstring)."""

    qualname: str
    label: str  # the function's name, for messages
    params: list
    returns: list  # torch return types
    ret_kind: int
    n_fn_returns: int  # tensors the function itself returns
    outputs: list = field(default_factory=list)  # declared returned outputs (metadata dicts)
    meta: dict | None = None
    contract: bool = False

    @property
    def schema_args(self) -> list:
        return [p for p in self.params if p.schema_type is not None]

    @property
    def allocated(self) -> list:
        return [p for p in self.params if p.allocated]

    @property
    def mutated(self) -> list:
        return [p.name for p in self.params if p.mutable and not p.allocated]

    @property
    def direct(self) -> bool:
        """Whether the op's arguments are exactly the function's parameters, in order."""
        return all(p.schema_type is not None for p in self.params)

    def schema(self) -> str:
        """The torch schema, without the name: ``(Tensor(a!) y, Tensor x, float f=2.) -> ()``."""
        args = self.schema_args
        # Only a trailing run of defaults (as the kffi call path fills them).
        first_default = len(args)
        while first_default > 0 and args[first_default - 1].has_default:
            first_default -= 1
        parts, alias = [], 0
        for i, p in enumerate(args):
            t = p.schema_type
            if p.mutable:
                base, opt = (t[:-1], "?") if t.endswith("?") else (t, "")
                t = f"{base}({_alias_name(alias)}!){opt}"
                alias += 1
            text = f"{t} {p.name}"
            if i >= first_default:
                text += "=" + _schema_default(p)
            parts.append(text)
        if not self.returns:
            ret = "()"
        elif len(self.returns) == 1:
            ret = self.returns[0]
        else:
            ret = "(" + ", ".join(self.returns) + ")"
        return "(" + ", ".join(parts) + ") -> " + ret

    def native_plan(self, packed_dtype) -> list:
        """The flat plan of _dispatch.cc; ``packed_dtype(name)`` packs a dtype name."""
        schema_pos = {p.name: i for i, p in enumerate(self.schema_args)}
        alloc_pos = {p.name: k for k, p in enumerate(self.allocated)}
        items = [len(self.params)]
        for p in self.params:
            if p.allocated:
                items += [SRC_ALLOC, alloc_pos[p.name]]
            elif p.kind == "stream":
                items += [SRC_STREAM, 0]
            elif p.schema_type is None:
                items += [SRC_NONE, 0]
            else:
                items += [SRC_ARG, schema_pos[p.name]]
        items.append(len(self.allocated))
        for p in self.allocated:
            items += [len(p.shape), len(p.dtypes), *(packed_dtype(d) for d in p.dtypes)]
            for source in self.alloc_dims(p):
                if isinstance(source, int):
                    items += [-1, source]
                else:
                    items += [schema_pos[source[0]], source[1]]
        items += [self.device_arg(), self.ret_kind, self.n_fn_returns]
        return items

    def device_arg(self) -> int:
        """The schema argument whose device a call uses: the first required tensor (else the
        first tensor; -1 when none)."""
        args = self.schema_args
        for want_required in (True, False):
            for i, p in enumerate(args):
                if p.kind == "tensor" and (not p.optional or not want_required):
                    return i
        return -1

    def alloc_dims(self, p: Param) -> list:
        """Per dimension of an allocated output: an int, or (argument name, dimension)."""
        out = []
        for d, dim in enumerate(p.shape):
            if isinstance(dim, int) and not isinstance(dim, bool):
                out.append(dim)
                continue
            source = self.symbol_source(dim) if isinstance(dim, str) else None
            if source is None:
                raise TypeError(
                    f"kffi.torch: {self.label}: cannot allocate {p.name!r}: its dimension {d} "
                    f"({dim!r}) is not fixed by any tensor argument; pass it as an argument "
                    f"(leave it out of allocate=)"
                )
            out.append(source)
        return out

    def symbol_source(self, symbol: str):
        """(argument name, dimension) of the first tensor argument that binds ``symbol``;
        required arguments first. None when no argument binds it."""
        if symbol.startswith("*"):
            return None
        candidates = [p for p in self.schema_args if p.kind == "tensor" and p.shape is not None]
        candidates.sort(key=lambda p: p.optional)  # stable: required first, in order
        for p in candidates:
            for d, dim in enumerate(p.shape):
                if dim == symbol:
                    return (p.name, d)
        return None


def _alias_name(i: int) -> str:
    return "abcdefghijklmnopqrstuvwxyz"[i] if i < 26 else f"a{i}"


def _schema_default(p: Param) -> str:
    v = p.default
    if v is None:
        return "None"
    if isinstance(v, bool):
        return "True" if v else "False"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, list) and all(isinstance(x, (int, float)) for x in v):
        return "[" + ", ".join(repr(x) for x in v) + "]"
    raise TypeError(f"kffi.torch: parameter {p.name!r}: cannot write its default {v!r} in a schema")


def _optional(t: str, optional: bool) -> str:
    return t + "?" if optional else t


def _contract_param(i: int, p: dict, label: str) -> Param:
    name = p.get("name") or f"arg{i}"
    kind = p.get("kind")
    optional = bool(p.get("optional"))
    default = p["default"] if "default" in p else (None if optional else _NO_DEFAULT)
    if kind == "tensor":
        return Param(
            i,
            name,
            "tensor",
            _optional("Tensor", optional),
            optional=optional,
            default=default,
            mutable=bool(p.get("mutable")),
            shape=tuple(p["shape"]) if p.get("shape") is not None else None,
            dtypes=tuple(_abstract._dtype_options(p.get("dtypes"))),
        )
    if kind in ("int", "float", "bool"):
        return Param(
            i, name, kind, _optional(_SCALAR_KINDS[kind], optional), optional, default=default
        )
    if kind == "stream":
        return Param(i, name, "stream", None, optional=True, default=None)
    if kind == "tuple":
        elems = {e.get("kind") for e in p.get("elems") or []}
        if len(elems) == 1 and next(iter(elems)) in ("int", "float", "bool"):
            elem = _SCALAR_KINDS[next(iter(elems))]
            return Param(i, name, "list", _optional(elem + "[]", optional), optional, default)
    raise TypeError(
        f"kffi.torch: {label}: parameter {name!r} has type {p.get('type')!r}, which a torch "
        f"op cannot take (tensors, int, float, bool, streams, and tuples of int/float/bool)"
    )


def _cpp_param(i: int, p: dict, label: str) -> Param:
    name = p.get("name") or f"arg{i}"
    type_text = str(p.get("type", ""))
    optional, inner = optional_inner(type_text)
    default = p["default"] if "default" in p else (None if optional else _NO_DEFAULT)
    if is_tensor(inner):
        return Param(i, name, "tensor", _optional("Tensor", optional), optional, default)
    if inner in _SCALAR_KINDS:
        return Param(i, name, inner, _optional(_SCALAR_KINDS[inner], optional), optional, default)
    if inner in _CPP_LISTS:
        return Param(i, name, "list", _optional(_CPP_LISTS[inner], optional), optional, default)
    raise TypeError(
        f"kffi.torch: {label}: parameter {name!r} has C++ type {type_text!r}, which a torch op "
        f"cannot take (Tensor, int, float, bool, str, Optional of them, Array<int|float|bool>)"
    )


def _check_name(name: str, label: str):
    if not _IDENT.fullmatch(name) or keyword.iskeyword(name):
        raise ValueError(
            f"kffi.torch: {label}: parameter name {name!r} cannot name a torch schema argument"
        )


def _names(value, what: str) -> set:
    if isinstance(value, str):
        value = (value,)
    try:
        names = set(value)
    except TypeError:
        raise TypeError(f"kffi.torch: {what} is a sequence of parameter names") from None
    for n in names:
        if not isinstance(n, str):
            raise TypeError(f"kffi.torch: {what} holds parameter names (str), got {n!r}")
    return names


def signature_of(fn, qualname: str, *, mutates_args=None, allocate=None) -> OpSignature:
    """The op signature of ``fn`` (a kffi Function with metadata) under ``qualname``."""
    meta = getattr(fn, "_metadata", None)
    label = (meta or {}).get("name") or getattr(fn, "__name__", None) or "function"
    if not isinstance(meta, dict) or not isinstance(meta.get("params"), list):
        raise TypeError(
            f"kffi.torch: {label} has no metadata (parameter names and types); torch ops are "
            f"made from functions of kffi.load_module(...) / kffi.compile / kffi.cpp.load_inline"
        )
    contract = _abstract.has_structured_contract(meta)
    raw = meta["params"]
    if contract:
        params = [_contract_param(i, p, label) for i, p in enumerate(raw)]
        declared = {p.name for p in params if p.mutable} | set(meta.get("mutates") or [])
        if mutates_args is not None and _names(mutates_args, "mutates_args") != declared:
            raise ValueError(
                f"kffi.torch: {label}: mutates_args={sorted(_names(mutates_args, 'x'))} "
                f"contradicts its contract, which marks {sorted(declared) or 'nothing'} `mut`"
            )
        for p in params:
            p.mutable = p.kind == "tensor" and p.name in declared
    else:
        params = [_cpp_param(i, p, label) for i, p in enumerate(raw)]
        if mutates_args is None:
            raise TypeError(
                f"kffi.torch: {label} has no contract saying which tensors it writes; pass "
                f"mutates_args=(names of the tensor parameters it writes) (or () for none)"
            )
        wanted = _names(mutates_args, "mutates_args")
        by_name = {p.name: p for p in params}
        for n in sorted(wanted):
            if n not in by_name or by_name[n].kind != "tensor":
                raise ValueError(
                    f"kffi.torch: {label}: mutates_args names {n!r}, which is not one of its "
                    f"tensor parameters ({', '.join(p.name for p in params if p.kind == 'tensor') or 'none'})"
                )
            by_name[n].mutable = True
    for p in params:
        _check_name(p.name, label)

    # Allocated outputs: mut tensors the op makes and returns.
    if allocate:
        if not contract:
            raise TypeError(
                f"kffi.torch: {label}: allocate= needs a contract (output shapes come from it)"
            )
        mut = [p for p in params if p.mutable]
        chosen = {p.name for p in mut} if allocate is True else _names(allocate, "allocate")
        for n in sorted(chosen):
            if n not in {p.name for p in mut}:
                raise ValueError(
                    f"kffi.torch: {label}: allocate= names {n!r}, which is not a `mut` tensor "
                    f"parameter ({', '.join(p.name for p in mut) or 'none'})"
                )
        for p in mut:
            if p.name in chosen:
                if p.shape is None:
                    raise TypeError(f"kffi.torch: {label}: {p.name!r} has no declared shape")
                p.allocated, p.schema_type = True, None

    outputs = list(meta.get("outputs") or []) if contract else []
    returns = ["Tensor"] * sum(p.allocated for p in params)
    if outputs:
        returns += ["Tensor"] * len(outputs)
        ret_kind = RET_TENSOR if len(outputs) == 1 else RET_TENSORS
        n_fn = len(outputs)
    else:
        ret_type = str(meta.get("return", "None"))
        n_fn = 0
        if ret_type in ("None", "void", ""):
            ret_kind = RET_NONE
        elif ret_type in ("Tensor", "DLTensor*"):
            returns.append("Tensor")
            ret_kind, n_fn = RET_TENSOR, 1
        elif ret_type == "Array<Tensor>" and not contract:
            returns.append("Tensor[]")
            ret_kind = RET_TENSOR_LIST
        elif ret_type in _RET_SCALARS:
            t, ret_kind = _RET_SCALARS[ret_type]
            returns.append(t)
        else:
            raise TypeError(
                f"kffi.torch: {label} returns {ret_type}; a torch op made from it returns "
                f"tensors (a contract's outputs, Tensor, Array<Tensor>), int, float, bool or None"
            )
    sig = OpSignature(
        qualname,
        label,
        params,
        returns,
        ret_kind,
        n_fn,
        outputs=outputs,
        meta=meta if contract else None,
        contract=contract,
    )
    for p in sig.allocated:
        sig.alloc_dims(p)  # fail now when a dimension is not fixed by the arguments
    return sig
