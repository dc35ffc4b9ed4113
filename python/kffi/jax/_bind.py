"""python/kffi/jax/_bind.py: how the arguments of a ``kffi.jax.call`` map onto the parameters.

A call becomes an arg_spec (what the XLA handler passes to each parameter: ``args.<i>``,
``rets.<j>``, ``attrs.<name>``, ``stream``, ``none``), the operands (JAX arrays, in order), the
static attributes and the input/output aliases. Three layouts, one per kind of function:

- a structured contract, without ``out_shapes``: the ``mut`` tensor parameters are the outputs
  (or, given arrays for them too, are updated in place), the others take the arguments
  (:func:`bind_contract`);
- parameter metadata without a contract: ``out_shapes`` names the parameter that receives each
  output (``{"y": jax.ShapeDtypeStruct(...)}``); the positional arguments bind, in order, to the
  parameters not named there. Unnamed ``out_shapes`` are the function's returned tensors, and
  are refused while a tensor parameter is left unfilled: kffi cannot tell which one the caller
  meant as an output (:func:`bind_named`);
- no parameter metadata, or an explicit ``arg_spec``: arrays are the inputs in order, other
  values attributes, laid out by the arg_spec (default jax_tvm_ffi's ``["args", "rets"]``)
  (:func:`bind_flat`).

Whatever the layout, a parameter that the function's metadata marks ``mutable`` (the function
may write it) never receives a JAX input that is not aliased to an output
(:func:`check_writable`): JAX arrays are immutable and XLA may share their buffers.
"""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import collections
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import jax
import numpy as np

from .. import _core
from .._type_text import is_tensor
from ..runtime._objects import Function, _shown_type
from ._records import bind_record, record_layout

try:  # public names first; jax moves internals between releases
    from jax.core import Tracer
except ImportError:  # pragma: no cover (newer jax)
    from jax._src.core import Tracer

__all__ = [
    "Binding",
    "attr_value",
    "bind_contract",
    "bind_flat",
    "bind_named",
    "check_aliases",
    "check_writable",
    "fn_name",
    "has_param_names",
    "is_array",
    "metadata",
    "naming_hint",
    "rule_out_shapes",
    "signature",
]


@dataclass
class Binding:
    """One call laid out for the handler: operands, the tensor parameter each operand fills
    (None where unknown), the arg_spec, the static attributes and the (operand, output) aliases."""

    operands: list[Any] = field(default_factory=list)
    input_names: list[str | None] = field(default_factory=list)
    spec: list[str] = field(default_factory=list)
    attrs: list[tuple[str, Any]] = field(default_factory=list)
    aliases: list[tuple[int, int]] = field(default_factory=list)

    def add_operand(self, value: Any, name: str | None = None) -> None:
        self.spec.append(f"args.{len(self.operands)}")
        self.operands.append(value)
        self.input_names.append(name)


# ---------------------------------------------------------------------------------------------
# Values and metadata.
# ---------------------------------------------------------------------------------------------


# A function's metadata (JSON: its values are Any).
_Meta = dict[str, Any]


def is_array(x: object) -> bool:
    return isinstance(x, (jax.Array, np.ndarray, Tracer)) or hasattr(x, "__jax_array__")


def attr_value(name: str, value: Any) -> Any:
    """A hashable static value for attribute ``name``: int, float, bool, str, or a tuple
    ("array", dtype name, values) for sequences and 1-d arrays."""
    if isinstance(value, Tracer):
        raise TypeError(
            f"kffi.jax: parameter {name!r} is a scalar attribute and must be a "
            f"static value, got a traced value; pass a Python or NumPy scalar (or "
            f"make it a tensor parameter)"
        )
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        v = int(value)
        if not -(2**63) <= v < 2**63:
            raise OverflowError(f"kffi.jax: attribute {name!r} = {v} does not fit int64")
        return v
    if isinstance(value, (float, np.floating)) or type(value).__name__ == "bfloat16":
        return float(value)  # float16 and bfloat16 widen exactly; attributes travel as float64
    if isinstance(value, str):
        return value
    if isinstance(value, (tuple, list, np.ndarray)):
        arr = np.asarray(value)
        if arr.ndim != 1:
            raise ValueError(f"kffi.jax: attribute {name!r}: arrays are 1-d, got shape {arr.shape}")
        if arr.dtype == np.bool_:
            kind = "bool"
        elif np.issubdtype(arr.dtype, np.integer):
            kind = "int64"
        elif np.issubdtype(arr.dtype, np.floating) or arr.size == 0:
            kind = "float64"
        else:
            raise TypeError(
                f"kffi.jax: attribute {name!r}: cannot pass an array of "
                f"{arr.dtype} (ints, floats or bools)"
            )
        return ("array", kind, tuple(arr.astype(kind).tolist()))
    raise TypeError(
        f"kffi.jax: attribute {name!r}: cannot pass {type(value).__name__} "
        f"{value!r} to XLA (int, float, bool, str, or a 1-d sequence of them)"
    )


def metadata(fn: object) -> _Meta | None:
    meta = getattr(fn, "_metadata", None)
    return meta if isinstance(meta, dict) else None


def check_platform(label: str, meta: _Meta | None, platform: str) -> None:
    """A contract that fixes its tensors' device refuses a computation placed elsewhere: a host
    kernel handed GPU buffers would read device memory as host memory (and crash)."""
    devices = {
        d.partition(":")[0]
        for p in _params(meta) or []
        if p.get("kind") == "tensor" and p.get("device")
        for d in str(p["device"]).split("|")
    }
    if devices and platform not in devices:
        want = ", ".join(sorted(devices))
        raise ValueError(
            f"kffi.jax: {label} takes {want} tensors (its contract), but this computation runs "
            f"on {platform}; place its inputs on a {want} device (jax.device_put or "
            "jax.default_device), or export for that platform (kffi.jax.export(f, "
            f"platforms=[{want!r}]))"
        )


def fn_name(fn: object) -> str:
    name = getattr(fn, "__name__", None) or (metadata(fn) or {}).get("name") or "fn"
    return re.sub(r"[^A-Za-z0-9_]", "_", str(name))[:48] or "fn"


def _params(meta: _Meta | None) -> list[dict[str, Any]] | None:
    """The parameter dicts of metadata that names its parameters, else None."""
    params = (meta or {}).get("params")
    if not isinstance(params, list) or not all(isinstance(p, dict) for p in params):
        return None
    return params


def _names(params: Sequence[Mapping[str, Any]]) -> list[str]:
    return [p.get("name") or f"arg{i}" for i, p in enumerate(params)]


def _is_tensor_param(p: Mapping[str, Any]) -> bool:
    """A tensor parameter: a contract's ``kind: "tensor"``, or a plain export's C++ type
    (``Tensor``, ``DLTensor*``, ``Optional<Tensor>``)."""
    if "kind" in p:
        return p.get("kind") == "tensor"
    return is_tensor(p.get("type"))


def _default_of(p: Mapping[str, Any]) -> tuple[bool, Any]:
    """(has_default, value) of a parameter: Optional parameters default to None."""
    if "default" in p:
        return True, p["default"]
    if p.get("optional"):
        return True, None
    return False, None


def _label(fn: object, meta: _Meta | None) -> str:
    return (meta or {}).get("name") or fn_name(fn)


def signature(meta: _Meta | None) -> str:
    params = _params(meta) or []
    return (
        f"{(meta or {}).get('name', '?')}("
        + ", ".join(f"{n}: {_shown_type(p)}" for n, p in zip(_names(params), params))
        + ")"
    )


def _quoted(names: Iterable[object]) -> str:
    return ", ".join(repr(n) for n in names) or "none"


# ---------------------------------------------------------------------------------------------
# A structured contract: `mut` parameters are the outputs.
# ---------------------------------------------------------------------------------------------


def bind_contract(
    fn: Function, meta: _Meta, args: Sequence[Any], kwargs: Mapping[str, Any]
) -> Binding:
    """Tensor parameters declared ``mut`` are outputs; given them all (as many arrays as tensor
    parameters), they are updated in place (each input aliased to its output)."""
    params = meta.get("params") or []
    label = _label(fn, meta)
    mutates = set(meta.get("mutates") or [])
    is_tensor = [p.get("kind") == "tensor" for p in params]
    is_mut = [
        t and (p.get("mutable") or p.get("name") in mutates) for t, p in zip(is_tensor, params)
    ]
    given_arrays = sum(is_array(a) for a in args) + sum(is_array(v) for v in kwargs.values())
    n_tensor, n_mut = sum(is_tensor), sum(is_mut)
    # More arrays than the non-mut tensor parameters take: the mut ones are given too.
    inplace = bool(n_mut) and n_tensor - n_mut < given_arrays <= n_tensor
    if given_arrays > n_tensor or (given_arrays > n_tensor - n_mut and not inplace):
        raise TypeError(
            f"kffi.jax: {label} takes {n_tensor - n_mut} input array(s)"
            + (f" (or {n_tensor}, to update its mut parameters in place)" if n_mut else "")
            + f", got {given_arrays}; signature: {signature(meta)}"
        )
    names = _names(params)
    fillable = [
        i for i, p in enumerate(params) if p.get("kind") != "stream" and (inplace or not is_mut[i])
    ]
    values: dict[int, Any] = {}
    if len(args) > len(fillable):
        raise TypeError(
            f"kffi.jax: {label} takes {len(fillable)} argument(s), got {len(args)}; "
            f"signature: {signature(meta)}"
        )
    for i, a in zip(fillable, args):
        values[i] = a
    for k, v in kwargs.items():
        if k not in names:
            raise TypeError(
                f"kffi.jax: {label} got an unexpected keyword argument {k!r}; "
                f"signature: {signature(meta)}"
            )
        i = names.index(k)
        if i not in fillable:
            raise TypeError(
                f"kffi.jax: {label}: {k!r} is an output (declared mut); its array is made by XLA"
            )
        if i in values:
            raise TypeError(f"kffi.jax: {label} got multiple values for argument {k!r}")
        values[i] = v
    b = Binding()
    out_index = 0
    for i, p in enumerate(params):
        kind = p.get("kind")
        if kind == "stream":
            b.spec.append("stream")
            continue
        if is_mut[i]:
            if inplace:
                if i not in values:
                    raise TypeError(f"kffi.jax: {label} missing array for {names[i]!r}")
                b.aliases.append((len(b.operands), out_index))
                b.operands.append(values[i])
                b.input_names.append(names[i])
            b.spec.append(f"rets.{out_index}")
            out_index += 1
            continue
        if i not in values:
            has_default, default = _default_of(p)
            if not has_default:
                raise TypeError(
                    f"kffi.jax: {label} missing argument {names[i]!r}; signature: {signature(meta)}"
                )
            if default is None:
                b.spec.append("none")
                continue
            values[i] = default
        v = values[i]
        if is_tensor[i]:
            if not is_array(v):
                raise TypeError(
                    f"kffi.jax: {label}: parameter {names[i]!r} is a tensor, got {type(v).__name__}"
                )
            b.add_operand(v, names[i])
        elif (layout := record_layout(p)) is not None:
            bind_record(b, names[i], layout, v, _core._argument_context(i, signature(meta)))
        else:
            if is_array(v):
                raise TypeError(
                    f"kffi.jax: {label}: parameter {names[i]!r} is a {kind} "
                    f"(a static attribute), got an array"
                )
            b.attrs.append((names[i], attr_value(names[i], v)))
            b.spec.append(f"attrs.{names[i]}")
    return b


# ---------------------------------------------------------------------------------------------
# Parameter names without a contract: outputs are named in out_shapes.
# ---------------------------------------------------------------------------------------------


def has_param_names(meta: _Meta | None) -> bool:
    return bool(_params(meta))


def _tensor_names(meta: _Meta | None) -> list[str]:
    params = _params(meta) or []
    return [n for n, p in zip(_names(params), params) if _is_tensor_param(p)]


def naming_hint(meta: _Meta | None, label: str) -> str:
    """How to name outputs, for the messages that ask for it."""
    return (
        f"pass out_shapes={{name: jax.ShapeDtypeStruct(shape, dtype), ...}} naming the "
        f"parameter that receives each output, one of {label}'s tensor parameters "
        f"({_quoted(_tensor_names(meta))}); positional arguments then bind, in order, to the "
        f"parameters not named there"
    )


def _fill(
    label: str,
    names: Sequence[str],
    slots: Sequence[int],
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
    outputs: Mapping[int, int],
) -> dict[int, Any]:
    """{parameter index: value} from positional arguments (to ``slots``, in order) and keywords.
    A keyword may give an output parameter its initial value (an array)."""
    if len(args) > len(slots):
        named = (
            f" (the outputs named in out_shapes, {_quoted(names[i] for i in outputs)}, take none)"
            if outputs
            else ""
        )
        raise TypeError(
            f"kffi.jax: {label} takes {len(slots)} positional argument(s){named}, got {len(args)}"
        )
    filled = dict(zip(slots, args))
    for k, v in kwargs.items():
        if k not in names:
            raise TypeError(f"kffi.jax: {label} got an unexpected keyword argument {k!r}")
        i = names.index(k)
        if i in filled:
            raise TypeError(f"kffi.jax: {label} got multiple values for argument {k!r}")
        if i in outputs and not is_array(v):
            raise TypeError(
                f"kffi.jax: {label}: {k!r} is an output (named in out_shapes); pass nothing "
                f"for it, or an array to start from (updated in place), got {type(v).__name__}"
            )
        filled[i] = v
    return filled


def bind_named(
    fn: Function,
    meta: _Meta | None,
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
    out_names: Sequence[str] | None,
    out_avals: Sequence[Any],
) -> Binding:
    """Binds a function with parameter metadata. ``out_names``: the parameter receiving each
    output (from a dict ``out_shapes``), or None when ``out_shapes`` is unnamed: the outputs
    are then the function's returned tensors, and every tensor parameter must be filled."""
    params = cast("list[dict[str, Any]]", _params(meta))  # the caller: has_param_names(meta)
    label = _label(fn, meta)
    names = _names(params)
    outputs: dict[int, int] = {}  # parameter index -> output index
    for j, name in enumerate(out_names or ()):
        if not isinstance(name, str) or name not in names:
            raise TypeError(
                f"kffi.jax: {label}: out_shapes names {name!r}, which is not a parameter of "
                f"{signature(meta)}; {naming_hint(meta, label)}"
            )
        i = names.index(name)
        if not _is_tensor_param(params[i]):
            raise TypeError(
                f"kffi.jax: {label}: out_shapes names {name!r}, a {params[i].get('type')} "
                f"parameter; {naming_hint(meta, label)}"
            )
        outputs[i] = j
    streams = {i for i, p in enumerate(params) if p.get("kind") == "stream"}  # XLA's stream
    slots = [i for i in range(len(params)) if i not in outputs and i not in streams]
    filled = _fill(label, names, slots, args, kwargs, outputs)
    unfilled = [
        names[i]
        for i, p in enumerate(params)
        if i not in filled and i not in outputs and _is_tensor_param(p) and not _default_of(p)[0]
    ]
    if unfilled and out_names is None:
        raise TypeError(
            f"kffi.jax: {label}: name the outputs in out_shapes: without a contract, kffi cannot "
            f"tell which tensor parameters are outputs, and this call gives no array to "
            f"{len(unfilled)} of them; {naming_hint(meta, label)} (a ShapeDtypeStruct alone is "
            f"for tensors the function returns)"
        )
    if unfilled:
        raise TypeError(
            f"kffi.jax: {label} missing array for tensor parameter(s) {_quoted(unfilled)} (name "
            f"them in out_shapes too if they are outputs); signature: {signature(meta)}"
        )
    b = Binding()
    for i, p in enumerate(params):
        tensor = _is_tensor_param(p)
        if i in streams and i not in filled:
            b.spec.append("stream")
            continue
        if i in outputs:
            j = outputs[i]
            if i in filled:  # the output's initial value: updated in place
                _check_initial_value(label, names[i], filled[i], out_avals[j])
                b.aliases.append((len(b.operands), j))
                b.operands.append(filled[i])
                b.input_names.append(None)
            b.spec.append(f"rets.{j}")
            continue
        if i not in filled:
            has_default, default = _default_of(p)
            if not has_default:
                raise TypeError(
                    f"kffi.jax: {label} missing argument {names[i]!r}; signature: {signature(meta)}"
                )
            if default is None:
                b.spec.append("none")
                continue
            filled[i] = default
        v = filled[i]
        if tensor:
            if not is_array(v):
                raise TypeError(
                    f"kffi.jax: {label}: parameter {names[i]!r} is a tensor, got {type(v).__name__}"
                )
            b.add_operand(v)
        elif (layout := record_layout(p)) is not None:
            bind_record(b, names[i], layout, v, _core._argument_context(i, signature(meta)))
        else:
            if is_array(v) and not isinstance(v, Tracer):  # attr_value explains tracers
                raise TypeError(
                    f"kffi.jax: {label}: parameter {names[i]!r} is a {p.get('type')} "
                    f"(a static attribute), got an array"
                )
            b.attrs.append((names[i], attr_value(names[i], v)))
            b.spec.append(f"attrs.{names[i]}")
    if out_names is None and len(out_avals) and (meta or {}).get("return") in ("None", "void"):
        raise TypeError(
            f"kffi.jax: {label}: out_shapes gives {len(out_avals)} output(s) to be returned, "
            f"but {label} returns nothing; {naming_hint(meta, label)}"
        )
    return b


def _check_initial_value(label: str, name: str, value: Any, aval: Any) -> None:
    shape, dtype = aval
    got_shape = tuple(getattr(value, "shape", shape))
    got_dtype = str(getattr(value, "dtype", dtype))
    if got_shape != tuple(shape) or got_dtype != dtype:
        raise ValueError(
            f"kffi.jax: {label}: the array given for output {name!r} is {got_dtype}{list(got_shape)}"
            f", but out_shapes declares {dtype}{list(shape)}"
        )


# ---------------------------------------------------------------------------------------------
# No parameter names, or an explicit arg_spec.
# ---------------------------------------------------------------------------------------------


def bind_flat(
    fn: Function,
    meta: _Meta | None,
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
    arg_spec: Sequence[str] | None,
) -> Binding:
    """Arrays are the inputs in order, other values attributes; the layout is ``arg_spec``, or
    every input then every result (jax_tvm_ffi's ``["args", "rets"]``)."""
    params = _params(meta)
    names = _names(params) if params else None
    b = Binding()
    if arg_spec is not None:  # the caller's spec: arrays in order, attributes by name
        for i, a in enumerate(args):
            if is_array(a):
                b.operands.append(a)
                b.input_names.append(None)
            else:
                name = names[i] if names and i < len(names) else f"arg{i}"
                b.attrs.append((name, attr_value(name, a)))
        for k, v in kwargs.items():
            if is_array(v):
                raise TypeError(
                    f"kffi.jax: with an explicit arg_spec, arrays are positional "
                    f"(got array {k!r} by keyword)"
                )
            b.attrs.append((k, attr_value(k, v)))
        b.spec = list(arg_spec)
        return b
    for i, a in enumerate(args):
        _add_flat(b, f"arg{i}", a)
    for k, v in kwargs.items():
        _add_flat(b, k, v)
    b.spec.append("rets")
    return b


def _add_flat(b: Binding, name: str, v: Any) -> None:
    if is_array(v):
        b.add_operand(v)
    else:
        b.attrs.append((name, attr_value(name, v)))
        b.spec.append(f"attrs.{name}")


# ---------------------------------------------------------------------------------------------
# Checks over any layout.
# ---------------------------------------------------------------------------------------------


def check_aliases(
    label: str, aliases: Sequence[tuple[int, int]], n_operands: int, n_outputs: int
) -> None:
    """Each alias maps an existing operand to an existing output, each at most once."""
    for i, o in aliases:
        if not (isinstance(i, int) and isinstance(o, int)):
            raise TypeError(
                "kffi.jax: input_output_aliases maps input indices to output indices (ints)"
            )
        if not (0 <= i < n_operands and 0 <= o < n_outputs):
            raise ValueError(
                f"kffi.jax: {label}: input_output_aliases {{{i}: {o}}}: the call has "
                f"{n_operands} input array(s) and {n_outputs} output(s)"
            )
    for pos, what in ((0, "input"), (1, "output")):
        counts = collections.Counter(a[pos] for a in aliases)  # one pass, however many aliases
        dup = sorted(x for x, k in counts.items() if k > 1)
        if dup:
            raise ValueError(
                f"kffi.jax: {label}: {what} {dup[0]} is aliased twice (input_output_aliases, "
                f"or an output's initial value given as well)"
            )


def _slots(spec: Iterable[str], n_operands: int, n_outputs: int) -> list[tuple[str, int | None]]:
    """What each parameter receives, in order: ("args", i), ("rets", j) or (item, None)."""
    out: list[tuple[str, int | None]] = []
    for item in spec:
        if item == "args":
            out.extend(("args", i) for i in range(n_operands))
        elif item == "rets":
            out.extend(("rets", j) for j in range(n_outputs))
        elif item.startswith(("args.", "rets.")):
            kind, _, index = item.partition(".")
            out.append((kind, int(index)))
        else:
            out.append((item, None))
    return out


def check_writable(
    label: str,
    meta: _Meta | None,
    spec: Iterable[str],
    n_operands: int,
    n_outputs: int,
    aliases: Iterable[tuple[int, int]],
) -> None:
    """Refuses a JAX input that reaches a parameter the function may write (``"mutable": true``
    in its metadata) unless the input is aliased to an output: XLA then hands the function a
    buffer of its own. Spec items that cannot be matched to parameters are left alone."""
    params = _params(meta)
    if not params:
        return
    slots = _slots(spec, n_operands, n_outputs)
    if len(slots) != len(params):
        return  # not one item per parameter: the call itself reports the arity
    aliased = {i for i, _ in aliases}
    for name, p, (kind, index) in zip(_names(params), params, slots):
        if kind == "args" and p.get("mutable") and index not in aliased:
            raise ValueError(
                f"kffi.jax: {label}: parameter {name!r} may be written by the function (its "
                f"metadata marks it mutable), so it cannot take a JAX input array: JAX arrays "
                f"are immutable and XLA may share their buffers. Make it an output "
                f"(out_shapes={{{name!r}: jax.ShapeDtypeStruct(shape, dtype)}}, with "
                f"{name}=array to start from an array's values), alias its input to an output "
                f"(input_output_aliases), or, if the function only reads it, declare it "
                f"read-only (kffi::ConstTensorView in C++, no `mut` in a contract)"
            )


# ---------------------------------------------------------------------------------------------
# Rules of kffi.jax.primitive.
# ---------------------------------------------------------------------------------------------


def rule_out_shapes(fn: Function, n_positional: int, kw_names: Iterable[str], shapes: Any) -> Any:
    """``out_shapes`` for a rule function without a contract that kffi calls with
    ``n_positional`` arrays (residuals and cotangents, or primals and tangents) and the keyword
    parameters ``kw_names``: by the rules' convention (inputs first, outputs after) the tensor
    parameters left unfilled receive the outputs, so they are named. Else ``shapes`` unnamed
    (returned tensors)."""
    params = _params(metadata(fn))
    if not params:
        return shapes
    names = _names(params)
    slots = [i for i, n in enumerate(names) if n not in kw_names][n_positional:]
    free = [
        names[i] for i in slots if _is_tensor_param(params[i]) and not _default_of(params[i])[0]
    ]
    flat = shapes if isinstance(shapes, (tuple, list)) else (shapes,)
    if len(free) != len(flat):
        return shapes
    return dict(zip(free, flat))
