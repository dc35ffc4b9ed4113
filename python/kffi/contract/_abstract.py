"""python/kffi/contract/_abstract.py: output shapes and dtypes of a contract function, from its metadata.

Framework integrations (kffi.jax's abstract evaluation, kffi.torch's fake implementations) ask
what a call will produce without running it. A contract's metadata says so:

- tensor parameters carry ``kind: "tensor"``, ``shape`` (int literals, symbol names, or a
  wildcard string starting with ``*``), ``dtypes`` (names; empty = any) and ``mutable``;
  ``mutates`` lists the parameters declared ``mut`` (the kernel writes them: outputs);
- returned tensors are listed in ``outputs``, each with ``dtype`` and ``shape_rpn``: one token
  list per dimension in reverse Polish notation (ints, symbol names, and the operators ``+ - *
  // %`` and ``neg``).

Symbols are bound from the shapes of the tensors a caller gives, then every output dimension is
evaluated with a stack. Values are used only through ``+ - * // %`` and unary minus, so
anything int-like works: Python ints, NumPy ints, torch SymInts.
"""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeGuard

from .. import _core
from ..runtime._error import counted

__all__ = [
    "MAX_RPN_TOKENS",
    "ContractError",
    "OutputSpec",
    "bind_symbols",
    "eval_shape_rpn",
    "has_structured_contract",
    "infer_outputs",
    "output_specs",
    "tensor_params",
]

# A dimension's expression is short (n * 2, (n + 1) // 2); the bound keeps hostile metadata cheap.
MAX_RPN_TOKENS = 1024


class ContractError(ValueError):
    """Output shapes or dtypes cannot be derived (a bad expression, an unbound symbol, input
    shapes that contradict the contract)."""


def _is_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def eval_shape_rpn(
    rpn: Sequence[Any],
    symbols: Mapping[str, Any],
    *,
    what: str = "kffi: cannot evaluate the output shape",
    nonnegative: bool = False,
) -> Any:
    """Evaluates one dimension of an output's ``shape_rpn`` (the metadata of a contract export)
    with a stack: ``rpn`` lists ints, symbol names and the operators "+", "-", "*", "//", "%"
    (Python's semantics) and "neg"; ``symbols`` maps names to int-like values (Python or NumPy
    ints, or symbolic ints such as torch.SymInt, used only through the operators). The C++ side
    evaluates the same tokens (kffi::Contract::OutputShape). Every problem is a ContractError (a
    ValueError) that starts with ``what``: a malformed expression, an unbound symbol, a division
    or modulo by zero, a value beyond int64, and with ``nonnegative`` (callers that allocate the
    dimension) a negative result.

        meta = kffi.load_module(path).metadata("f")
        shape = [eval_shape_rpn(d, {"n": 8}) for d in meta["outputs"][0]["shape_rpn"]]
    """
    # The one evaluator is C++ (kffi/contract/shape_rpn.h, through _core): these messages are its.
    value, error = _core._eval_shape_rpn(rpn, symbols, what, bool(nonnegative), MAX_RPN_TOKENS)
    if error is not None:
        raise ContractError(error)
    return value


def has_structured_contract(meta: object) -> TypeGuard[dict[str, Any]]:
    """Whether metadata carries the structured contract fields (``mutates``, per-param ``kind``)."""
    return isinstance(meta, dict) and "mutates" in meta


# Metadata is JSON (a library's, read by Module.metadata): its values are Any.


def tensor_params(meta: Mapping[str, Any]) -> list[tuple[int, dict[str, Any]]]:
    """[(index, param dict)] of the tensor parameters, in order."""
    return [
        (i, p)
        for i, p in enumerate(meta.get("params") or [])
        if isinstance(p, dict) and p.get("kind") == "tensor"
    ]


def _is_wildcard(dim: object) -> bool:
    return isinstance(dim, str) and dim.startswith("*")


def bind_symbols(meta: Mapping[str, Any], shapes: Mapping[str, Iterable[Any]]) -> dict[str, Any]:
    """Binds each symbol to its value in the given shapes: ``shapes`` maps parameter names to
    shapes (sequences of int-likes). Checks literal dimensions, ranks and repeated symbols."""
    env: dict[str, Any] = {}
    origin: dict[str, str] = {}
    for _, p in tensor_params(meta):
        name: Any = p.get("name")  # JSON, found among the keys of shapes below
        if name not in shapes:
            continue
        shape = tuple(shapes[name])
        decl = p.get("shape")
        if decl is None:
            continue
        if len(decl) != len(shape):
            raise ContractError(
                f"parameter {name!r}: expected {counted(len(decl), 'dimension')} "
                f"{_render(decl)}, got shape {shape}"
            )
        for d, (want, got) in enumerate(zip(decl, shape)):
            where = f"{name}.shape[{d}]"
            if _is_int(want):
                if _is_int(got) and got != want:
                    raise ContractError(f"{where}: expected {want}, got {got} (shape {shape})")
            elif _is_wildcard(want):
                continue
            elif isinstance(want, str):
                if want in env:
                    if _is_int(got) and _is_int(env[want]) and got != env[want]:
                        raise ContractError(
                            f"{where} = {got}: expected to match "
                            f"{origin[want]} = {env[want]} (symbol {want})"
                        )
                else:
                    env[want] = got
                    origin[want] = where
            else:
                raise ContractError(f"parameter {name!r}: cannot read dimension {want!r}")
    return env


def _render(decl: Iterable[object]) -> str:
    return "[" + ", ".join(str(d) for d in decl) + "]"


@dataclass(frozen=True)
class OutputSpec:
    """One output of a call: a ``mut`` tensor parameter (``param_index`` set) or a returned
    tensor (``param_index`` None). ``dims`` holds, per dimension, an int, a symbol name or a
    wildcard (parameters) or an RPN token list (returned outputs). ``dtypes``: candidates (empty
    = any)."""

    name: str
    param_index: int | None
    dims: tuple[Any, ...] | None  # None: a parameter whose contract gives no shape
    dtypes: tuple[str, ...]

    @property
    def returned(self) -> bool:
        return self.param_index is None


def _dtype_options(value: Any) -> tuple[str, ...]:
    if value is None or value == "*" or value == "":
        return ()
    if isinstance(value, str):
        return tuple(x.strip() for x in value.split("|") if x.strip() and x.strip() != "*")
    return tuple(str(x) for x in value if str(x) != "*")


def output_specs(meta: Mapping[str, Any]) -> list[OutputSpec]:
    """The outputs a call produces, in order: ``mut`` tensor parameters (parameter order), then
    the declared returned outputs."""
    if not has_structured_contract(meta):
        raise ContractError("the function's metadata has no structured contract (no 'mutates')")
    mutates = set(meta.get("mutates") or [])
    specs: list[OutputSpec] = []
    for i, p in tensor_params(meta):
        if p.get("mutable") or p.get("name") in mutates:
            shape = p.get("shape")
            specs.append(
                OutputSpec(
                    p.get("name") or f"arg{i}",
                    i,
                    tuple(shape) if shape is not None else None,
                    _dtype_options(p.get("dtypes")),
                )
            )
    for k, o in enumerate(meta.get("outputs") or []):
        rpn = o.get("shape_rpn")
        if rpn is None:
            raise ContractError(f"output {o.get('name') or k!r} has no shape_rpn")
        specs.append(
            OutputSpec(o.get("name") or f"out{k}", None, tuple(rpn), _dtype_options(o.get("dtype")))
        )
    return specs


def _pick_dtype(spec: OutputSpec, input_dtypes: Iterable[object]) -> str:
    if len(spec.dtypes) == 1:
        return spec.dtypes[0]
    for dt in input_dtypes:
        if not spec.dtypes or str(dt) in spec.dtypes:
            return str(dt)
    options = "|".join(spec.dtypes) or "any dtype"
    raise ContractError(
        f"output {spec.name!r}: its dtype ({options}) is not fixed by the "
        f"contract nor by an input's dtype"
    )


def infer_outputs(
    meta: Mapping[str, Any], shapes: Mapping[str, Iterable[Any]], dtypes: Mapping[str, object]
) -> list[tuple[str, tuple[Any, ...], str]]:
    """[(name, shape tuple, dtype name)] for each output (see :func:`output_specs`).

    ``shapes`` / ``dtypes`` map the names of the tensor parameters the caller gives to their
    shapes and dtypes (dtype names or objects whose str() is one). Inputs come first in the
    dtype fallback: an output whose dtype the contract leaves open takes the dtype of the first
    input tensor that the contract allows for it.
    """
    env = bind_symbols(meta, shapes)
    in_dtypes = [dtypes[p["name"]] for _, p in tensor_params(meta) if p.get("name") in dtypes]
    result: list[tuple[str, tuple[Any, ...], str]] = []
    for spec in output_specs(meta):
        dims: list[Any] = []
        if spec.dims is None:
            raise ContractError(f"output {spec.name!r}: the contract gives no shape")
        if spec.param_index is not None and spec.name in shapes:
            dims = list(shapes[spec.name])  # given by the caller (updated in place)
        elif spec.returned:
            for d, tokens in enumerate(spec.dims):
                dims.append(
                    eval_shape_rpn(
                        tokens, env, what=f"output {spec.name!r} dimension {d}", nonnegative=True
                    )
                )
        else:
            for d, dim in enumerate(spec.dims):
                where = f"output {spec.name!r} dimension {d}"
                if _is_int(dim):
                    dims.append(dim)
                elif _is_wildcard(dim) or not isinstance(dim, str):
                    raise ContractError(f"{where}: {dim!r} is not fixed by the contract")
                elif dim not in env:
                    bound = ", ".join(sorted(env)) or "none"
                    raise ContractError(
                        f"{where}: symbol {dim!r} is not bound by any input (bound: {bound})"
                    )
                else:
                    dims.append(env[dim])
        if spec.param_index is not None and spec.name in dtypes:
            dtype = str(dtypes[spec.name])
        else:
            dtype = _pick_dtype(spec, in_dtypes)
        result.append((spec.name, tuple(dims), dtype))
    return result
