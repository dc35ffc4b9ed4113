"""python/kffi/jax/_primitive.py: ``kffi.jax.call``: a kffi function as a JAX primitive.

One primitive, ``kffi_call``, serves every function. Its parameters are a call plan (the
function, how JAX operands and attributes map to its parameters, where outputs come from) and
the static attributes. Abstract evaluation derives output shapes from the function's contract
(kffi._abstract) or from ``out_shapes``; lowering registers one XLA FFI target per (plan,
platform), once, and emits the custom call. Eager calls run the primitive through a one-op jit.
"""

from __future__ import annotations

import itertools
import re
import threading
from functools import partial

import jax
import jax.extend
import jax.ffi
import numpy as np
from jax import tree_util
from jax.interpreters import ad, batching, mlir

from .. import Function, _abstract
from ._ffi import parse_arg_spec, register_ffi_target

try:  # public names first; jax moves internals between releases
    from jax.core import ShapedArray, Tracer
except ImportError:  # pragma: no cover (newer jax)
    from jax._src.core import ShapedArray, Tracer

try:  # the eager path: run one primitive through XLA
    from jax.interpreters.xla import apply_primitive as _apply_primitive
except ImportError:  # pragma: no cover (newer jax)
    from jax._src.dispatch import apply_primitive as _apply_primitive

__all__ = ["CallPlan", "call", "kffi_call_p"]

kffi_call_p = jax.extend.core.Primitive("kffi_call")
kffi_call_p.multiple_results = True

_OPTION_NAMES = ("out_shapes", "input_output_aliases", "arg_spec", "allow_cuda_graph")


# ---------------------------------------------------------------------------------------------
# Values: which arguments are arrays (XLA operands), which are static attributes.
# ---------------------------------------------------------------------------------------------


def _is_array(x) -> bool:
    return isinstance(x, (jax.Array, np.ndarray, Tracer)) or hasattr(x, "__jax_array__")


def _attr_value(name: str, value):
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


def _mlir_attr(value):
    if isinstance(value, bool):
        return np.bool_(value)
    if isinstance(value, int):
        return np.int64(value)
    if isinstance(value, float):
        return np.float64(value)
    if isinstance(value, tuple):
        return np.asarray(value[2], dtype=value[1])
    return value


# ---------------------------------------------------------------------------------------------
# Plans.
# ---------------------------------------------------------------------------------------------


def _metadata(fn):
    meta = getattr(fn, "_metadata", None)
    return meta if isinstance(meta, dict) else None


def _fn_name(fn) -> str:
    name = getattr(fn, "__name__", None) or (_metadata(fn) or {}).get("name") or "fn"
    return re.sub(r"[^A-Za-z0-9_]", "_", str(name))[:48] or "fn"


_target_counter = itertools.count()


class CallPlan:
    """How one call shape maps onto a function: the arg_spec, the output rule, the aliases.

    Plans are cached and compared by identity, so jit's caches hit for repeated calls.
    """

    def __init__(
        self,
        fn,
        arg_spec,
        n_inputs,
        input_names,
        aliases,
        allow_cuda_graph,
        meta=None,
        out_tree=None,
        fixed_outs=None,
        vmap=None,
        label=None,
    ):
        self.fn = fn
        self.arg_spec = tuple(arg_spec)
        self.n_inputs = n_inputs
        self.input_names = tuple(input_names)  # the tensor parameter of each operand, or None
        self.aliases = tuple(sorted(aliases))
        self.allow_cuda_graph = bool(allow_cuda_graph)
        self.meta = meta  # structured contract: outputs derived from it
        self.out_tree = out_tree
        self.fixed_outs = fixed_outs  # tuple of (shape, dtype) when given by out_shapes
        self.vmap = vmap
        self.label = label or _fn_name(fn)
        self._targets = {}
        self._avals = {}
        self._lock = threading.Lock()
        parse_arg_spec(self.arg_spec)  # fail early on a malformed spec

    def __repr__(self):
        return f"<kffi.jax plan {self.label} {list(self.arg_spec)}>"

    # -- abstract evaluation --------------------------------------------------------------------

    def out_avals(self, in_avals) -> tuple:
        key = tuple((tuple(a.shape), str(a.dtype)) for a in in_avals)
        hit = self._avals.get(key)
        if hit is not None:
            return hit
        if self.fixed_outs is not None:
            outs = self.fixed_outs
        else:
            shapes, dtypes = {}, {}
            for name, (shape, dtype) in zip(self.input_names, key):
                if name is not None:
                    shapes[name] = shape
                    dtypes[name] = dtype
            _check_input_dtypes(self.meta, dtypes, self.label)
            try:
                outs = tuple(
                    (shape, dtype)
                    for _, shape, dtype in _abstract.infer_outputs(self.meta, shapes, dtypes)
                )
            except _abstract.ContractError as e:
                raise ValueError(f"kffi.jax: {self.label}: {e}") from None
        avals = tuple(ShapedArray(tuple(s), np.dtype(_np_dtype(d))) for s, d in outs)
        self._avals[key] = avals
        return avals

    # -- targets ------------------------------------------------------------------------------

    def target(self, platform: str) -> str:
        """The XLA target of this plan on platform ("cpu", "cuda", "rocm"): registered once."""
        with self._lock:
            name = self._targets.get(platform)
            if name is None:
                self._check_platform(platform)
                name = f"kffi_{self.label}_{next(_target_counter)}"
                register_ffi_target(
                    name,
                    self.fn,
                    platform=platform,
                    arg_spec=list(self.arg_spec),
                    allow_cuda_graph=self.allow_cuda_graph,
                )
                self._targets[platform] = name
            return name

    def _check_platform(self, platform: str) -> None:
        """A contract that fixes its tensors' device refuses a computation placed elsewhere: a
        host kernel handed GPU buffers would read device memory as host memory."""
        params = (self.meta or {}).get("params") or []
        devices = {
            d.partition(":")[0]
            for p in params
            if p.get("kind") == "tensor" and p.get("device")
            for d in str(p["device"]).split("|")
        }
        if devices and platform not in devices:
            want = ", ".join(sorted(devices))
            raise ValueError(
                f"kffi.jax: {self.label} takes {want} tensors (its contract), but this "
                f"computation runs on {platform}; place its inputs on a {want} device "
                "(jax.device_put or jax.default_device)"
            )


def _np_dtype(name: str):
    import jax.numpy as jnp

    try:
        return jnp.dtype(name)
    except TypeError:
        raise TypeError(f"kffi.jax: dtype {name!r} has no JAX equivalent") from None


def _check_input_dtypes(meta, dtypes, label):
    for _, p in _abstract.tensor_params(meta):
        allowed = p.get("dtypes") or []
        got = dtypes.get(p.get("name"))
        if got is not None and allowed and "*" not in allowed and got not in allowed:
            raise TypeError(
                f"kffi.jax: {label}: parameter {p['name']!r} expects dtype "
                f"{'|'.join(allowed)}, got {got}"
            )


# ---------------------------------------------------------------------------------------------
# Building a plan from a call's arguments.
# ---------------------------------------------------------------------------------------------


def _is_tensor_type(type_text) -> bool:
    return isinstance(type_text, str) and type_text.startswith(("Tensor", "DLTensor"))


def _default_of(p):
    """(has_default, value) of a parameter: Optional parameters default to None."""
    if "default" in p:
        return True, p["default"]
    if p.get("optional"):
        return True, None
    return False, None


def _bind_contract(fn, meta, args, kwargs):
    """(operands, input_names, arg_spec, attrs, aliases) for a function with a structured
    contract. Tensor parameters declared ``mut`` are outputs; given them all (as many arrays as
    tensor parameters), they are updated in place (each input aliased to its output)."""
    params = meta.get("params") or []
    label = meta.get("name") or _fn_name(fn)
    mutates = set(meta.get("mutates") or [])
    is_tensor = [p.get("kind") == "tensor" for p in params]
    is_mut = [
        t and (p.get("mutable") or p.get("name") in mutates) for t, p in zip(is_tensor, params)
    ]
    given_arrays = sum(_is_array(a) for a in args) + sum(_is_array(v) for v in kwargs.values())
    n_tensor, n_mut = sum(is_tensor), sum(is_mut)
    # More arrays than the non-mut tensor parameters take: the mut ones are given too.
    inplace = bool(n_mut) and n_tensor - n_mut < given_arrays <= n_tensor
    if given_arrays > n_tensor or (given_arrays > n_tensor - n_mut and not inplace):
        raise TypeError(
            f"kffi.jax: {label} takes {n_tensor - n_mut} input array(s)"
            + (f" (or {n_tensor}, to update its mut parameters in place)" if n_mut else "")
            + f", got {given_arrays}; signature: {_signature(meta)}"
        )
    names = [p.get("name") or f"arg{i}" for i, p in enumerate(params)]
    fillable = [
        i for i, p in enumerate(params) if p.get("kind") != "stream" and (inplace or not is_mut[i])
    ]
    values = {}
    if len(args) > len(fillable):
        raise TypeError(
            f"kffi.jax: {label} takes {len(fillable)} argument(s), got {len(args)}; "
            f"signature: {_signature(meta)}"
        )
    for i, a in zip(fillable, args):
        values[i] = a
    for k, v in kwargs.items():
        if k not in names:
            raise TypeError(
                f"kffi.jax: {label} got an unexpected keyword argument {k!r}; "
                f"signature: {_signature(meta)}"
            )
        i = names.index(k)
        if i not in fillable:
            raise TypeError(
                f"kffi.jax: {label}: {k!r} is an output (declared mut); its array is made by XLA"
            )
        if i in values:
            raise TypeError(f"kffi.jax: {label} got multiple values for argument {k!r}")
        values[i] = v
    operands, input_names, spec, attrs, aliases = [], [], [], [], []
    out_index = 0
    for i, p in enumerate(params):
        kind = p.get("kind")
        if kind == "stream":
            spec.append("stream")
            continue
        if is_mut[i]:
            if inplace:
                if i not in values:
                    raise TypeError(f"kffi.jax: {label} missing array for {names[i]!r}")
                aliases.append((len(operands), out_index))
                operands.append(values[i])
                input_names.append(names[i])
            spec.append(f"rets.{out_index}")
            out_index += 1
            continue
        if i not in values:
            has_default, default = _default_of(p)
            if not has_default:
                raise TypeError(
                    f"kffi.jax: {label} missing argument {names[i]!r}; signature: "
                    f"{_signature(meta)}"
                )
            if default is None:
                spec.append("none")
                continue
            values[i] = default
        v = values[i]
        if is_tensor[i]:
            if not _is_array(v):
                raise TypeError(
                    f"kffi.jax: {label}: parameter {names[i]!r} is a tensor, got {type(v).__name__}"
                )
            spec.append(f"args.{len(operands)}")
            operands.append(v)
            input_names.append(names[i])
        else:
            if _is_array(v):
                raise TypeError(
                    f"kffi.jax: {label}: parameter {names[i]!r} is a {kind} "
                    f"(a static attribute), got an array"
                )
            attrs.append((names[i], _attr_value(names[i], v)))
            spec.append(f"attrs.{names[i]}")
    return operands, input_names, spec, attrs, aliases


def _signature(meta) -> str:
    params = meta.get("params") or []
    return (
        f"{meta.get('name', '?')}("
        + ", ".join(f"{p.get('name')}: {p.get('type')}" for p in params)
        + ")"
    )


def _bind_plain(fn, meta, args, kwargs, n_outputs, arg_spec):
    """(operands, arg_spec, attrs) for a function without a structured contract: arrays are
    inputs, other values attributes; result buffers go to the tensor parameters nothing filled
    (or, without parameter metadata, after everything else: jax_tvm_ffi's ["args", "rets"])."""
    params = (meta or {}).get("params")
    names = [p.get("name") or f"arg{i}" for i, p in enumerate(params)] if params else None
    operands, attrs, spec = [], [], []

    def add(name, v, is_tensor=None):
        # A parameter known not to be a tensor is an attribute (a traced value is refused).
        if is_tensor and not _is_array(v):
            raise TypeError(f"kffi.jax: parameter {name!r} is a tensor, got {type(v).__name__}")
        if _is_array(v) and is_tensor is not False:
            spec.append(f"args.{len(operands)}")
            operands.append(v)
        else:
            attrs.append((name, _attr_value(name, v)))
            spec.append(f"attrs.{name}")

    if arg_spec is not None:  # the caller's spec: arrays in order, attributes by name
        for i, a in enumerate(args):
            if _is_array(a):
                operands.append(a)
            else:
                name = names[i] if names and i < len(names) else f"arg{i}"
                attrs.append((name, _attr_value(name, a)))
        for k, v in kwargs.items():
            if _is_array(v):
                raise TypeError(
                    f"kffi.jax: with an explicit arg_spec, arrays are positional "
                    f"(got array {k!r} by keyword)"
                )
            attrs.append((k, _attr_value(k, v)))
        return operands, list(arg_spec), attrs
    if names is None:
        for i, a in enumerate(args):
            add(f"arg{i}", a)
        for k, v in kwargs.items():
            add(k, v)
        spec.append("rets")
        return operands, spec, attrs
    label = (meta or {}).get("name") or _fn_name(fn)
    if len(args) > len(names):
        raise TypeError(f"kffi.jax: {label} takes {len(names)} argument(s), got {len(args)}")
    filled = dict(enumerate(args))
    for k, v in kwargs.items():
        if k not in names:
            raise TypeError(f"kffi.jax: {label} got an unexpected keyword argument {k!r}")
        if names.index(k) in filled:
            raise TypeError(f"kffi.jax: {label} got multiple values for argument {k!r}")
        filled[names.index(k)] = v
    n_rets_taken = 0
    for i, p in enumerate(params):
        if i in filled:
            add(names[i], filled[i], _is_tensor_type(p.get("type")))
        elif _is_tensor_type(p.get("type")) and n_rets_taken < n_outputs:
            spec.append(f"rets.{n_rets_taken}")
            n_rets_taken += 1
        else:
            has_default, default = _default_of(p)
            if not has_default:
                raise TypeError(f"kffi.jax: {label} missing argument {names[i]!r}")
            if default is None:
                spec.append("none")
            else:
                add(names[i], default)
    returns = (meta or {}).get("return")
    if n_rets_taken < n_outputs and returns in ("None", "void", None):
        raise TypeError(
            f"kffi.jax: {label}: {n_outputs} output(s) given by out_shapes, but only "
            f"{n_rets_taken} tensor parameter(s) are left to receive them and the "
            f"function returns nothing"
        )
    return operands, spec, attrs


def _flatten_out_shapes(out_shapes):
    leaves, tree = tree_util.tree_flatten(out_shapes)
    outs = []
    for leaf in leaves:
        if not (hasattr(leaf, "shape") and hasattr(leaf, "dtype")):
            raise TypeError(
                f"kffi.jax: out_shapes leaves have .shape and .dtype (e.g. "
                f"jax.ShapeDtypeStruct), got {leaf!r}"
            )
        outs.append((tuple(int(d) for d in leaf.shape), str(np.dtype(leaf.dtype))))
    return tuple(outs), tree


_plan_cache = {}
_plan_lock = threading.Lock()


def _plan_for(
    fn, args, kwargs, out_shapes, input_output_aliases, arg_spec, allow_cuda_graph, vmap=None
):
    """(plan, operands, attrs) for one call; plans are cached by the call's static structure."""
    meta = _metadata(fn)
    structured = _abstract.has_structured_contract(meta) and out_shapes is None and arg_spec is None
    if structured:
        operands, input_names, spec, attrs, aliases = _bind_contract(fn, meta, args, kwargs)
        fixed, tree = None, None
    else:
        if out_shapes is None:
            raise TypeError(
                f"kffi.jax: {_fn_name(fn)} has no contract declaring its outputs "
                f"(metadata without 'mutates'); pass out_shapes=jax.ShapeDtypeStruct"
                f"(shape, dtype) (or a pytree of them)"
            )
        fixed, tree = _flatten_out_shapes(out_shapes)
        operands, spec, attrs = _bind_plain(fn, meta, args, kwargs, len(fixed), arg_spec)
        input_names = [None] * len(operands)
        aliases = []
    for i, o in (input_output_aliases or {}).items():
        if not (isinstance(i, int) and isinstance(o, int)):
            raise TypeError(
                "kffi.jax: input_output_aliases maps input indices to output indices (ints)"
            )
        aliases.append((i, o))
    attr_key = tuple(attrs)
    key = (
        id(fn),
        tuple(spec),
        len(operands),
        tuple(input_names),
        tuple(sorted(aliases)),
        bool(allow_cuda_graph),
        fixed,
        tree,
        vmap,
        structured,
    )
    with _plan_lock:
        entry = _plan_cache.get(key)
        if entry is None or entry[0] is not fn:
            plan = CallPlan(
                fn,
                spec,
                len(operands),
                input_names,
                aliases,
                allow_cuda_graph,
                meta=meta if structured else None,
                out_tree=tree,
                fixed_outs=fixed,
                vmap=vmap,
            )
            _plan_cache[key] = (fn, plan)
        else:
            plan = entry[1]
    return plan, operands, attr_key


def call(
    fn,
    *args,
    out_shapes=None,
    input_output_aliases=None,
    arg_spec=None,
    allow_cuda_graph=False,
    **attrs,
):
    """Calls a kffi function on JAX arrays, eagerly or under ``jax.jit``; returns JAX arrays.

    With a contract, outputs need no declaration: the function's ``mut`` tensor parameters and
    its declared returned tensors are the outputs, their shapes evaluated from the input shapes.
    Pass the input arrays and the scalar parameters (positionally or by name); given arrays for
    the ``mut`` parameters too, they are updated in place (as new JAX arrays). The result is one
    array, or a tuple when there are several outputs.

    Without a contract, ``out_shapes`` (a ``jax.ShapeDtypeStruct`` or a pytree of them) says
    what the call produces, and the result has its structure; outputs go to the tensor
    parameters the call leaves unfilled, else come from what the function returns.

    ``input_output_aliases``: {input index: output index}, as in ``jax.ffi.ffi_call``.
    ``arg_spec``: the exact layout (see :func:`register_ffi_target`). ``allow_cuda_graph``:
    declare the target safe to capture into CUDA graphs. Other keywords are parameters
    (scalars become XLA attributes and must be static).
    """
    if not isinstance(fn, Function):
        raise TypeError(f"kffi.jax.call: expected a kffi.Function, got {type(fn).__name__}")
    plan, operands, attr_key = _plan_for(
        fn, args, attrs, out_shapes, input_output_aliases, arg_spec, allow_cuda_graph
    )
    return _bind(plan, operands, attr_key)


def _bind(plan, operands, attr_key):
    import jax.numpy as jnp

    operands = [jnp.asarray(x) for x in operands]
    outs = kffi_call_p.bind(*operands, plan=plan, attrs=attr_key)
    if plan.out_tree is not None:
        return tree_util.tree_unflatten(plan.out_tree, outs)
    return outs[0] if len(outs) == 1 else tuple(outs)


# ---------------------------------------------------------------------------------------------
# Primitive rules.
# ---------------------------------------------------------------------------------------------


def _abstract_eval(*avals, plan, attrs):
    del attrs
    if len(avals) != plan.n_inputs:
        raise TypeError(
            f"kffi.jax: {plan.label} bound with {len(avals)} operands, its plan "
            f"takes {plan.n_inputs}"
        )
    return plan.out_avals(avals)


def _lowering(ctx, *operands, plan, attrs, platform):
    name = plan.target(platform)
    aliases = dict(plan.aliases) or None
    rule = jax.ffi.ffi_lowering(name, operand_output_aliases=aliases)
    return rule(ctx, *operands, **{k: _mlir_attr(v) for k, v in attrs})


def _no_jvp(primals, tangents, *, plan, attrs):
    del primals, tangents, attrs
    raise NotImplementedError(
        f"kffi.jax: {plan.label} has no differentiation rule (jax.grad / jax.jvp). Attach one "
        f"with kffi.jax.primitive({plan.label}, vjp=(fwd, bwd)) or jvp=..."
    )


def _no_transpose(cts, *args, plan, attrs):
    del cts, args, attrs
    raise NotImplementedError(
        f"kffi.jax: {plan.label} cannot be transposed: JAX sees a kffi call as opaque, so "
        f"reverse mode (jax.grad) through it needs a vjp rule (kffi.jax.primitive(fn, "
        f"vjp=...)); a jvp rule made of kffi calls gives forward mode only"
    )


def _batch(args, dims, *, plan, attrs):
    if plan.vmap is None:
        raise NotImplementedError(
            f"kffi.jax: {plan.label} has no batching rule (jax.vmap). Pass vmap='sequential' "
            f"or a rule to kffi.jax.primitive({plan.label}, vmap=...)"
        )
    if callable(plan.vmap):
        return plan.vmap(args, dims, **dict(attrs))
    # "sequential": one call per batch element (jax.lax.map), batch axes moved to the front.
    import jax.numpy as jnp

    batched = [d is not None for d in dims]  # None: not mapped
    moved = [jnp.moveaxis(a, d, 0) if b else a for a, d, b in zip(args, dims, batched)]

    def one(xs):
        it = iter(xs)
        ops = [next(it) if b else a for a, b in zip(moved, batched)]
        return kffi_call_p.bind(*ops, plan=plan, attrs=attrs)

    outs = jax.lax.map(one, [a for a, b in zip(moved, batched) if b])
    return outs, [0] * len(outs)


kffi_call_p.def_impl(partial(_apply_primitive, kffi_call_p))
kffi_call_p.def_abstract_eval(_abstract_eval)
for _platform in ("cpu", "cuda", "rocm"):
    mlir.register_lowering(kffi_call_p, partial(_lowering, platform=_platform), platform=_platform)
ad.primitive_jvps[kffi_call_p] = _no_jvp
ad.primitive_transposes[kffi_call_p] = _no_transpose
batching.primitive_batchers[kffi_call_p] = _batch
