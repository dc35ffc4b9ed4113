"""python/kffi/jax/_primitive.py: ``kffi.jax.call``: a kffi function as a JAX primitive.

One primitive, ``kffi_call``, serves every function. Its parameters are a call plan (the
function, how JAX operands and attributes map to its parameters, where outputs come from) and
the static attributes. Abstract evaluation derives output shapes from the function's contract
(kffi.contract._abstract) or from ``out_shapes``; lowering registers one XLA FFI target per (plan,
platform), once, and emits the custom call. Eager calls run the primitive through a one-op jit.
"""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any

import jax
import jax.ffi
import numpy as np
from jax import tree_util
from jax.interpreters import ad, batching, mlir

from ..contract import _abstract
from ..runtime._error import counted
from ..runtime._objects import Function
from . import _bind as bind
from . import _export, _shard
from ._call_primitive import kffi_call_p
from ._ffi import parse_arg_spec, register_content_target, register_ffi_target

try:  # public names first; jax moves internals between releases
    from jax.core import ShapedArray
except ImportError:  # pragma: no cover (newer jax)
    from jax._src.core import ShapedArray

try:  # the eager path: run one primitive through XLA
    from jax.interpreters.xla import apply_primitive as _apply_primitive
except ImportError:  # pragma: no cover (newer jax)
    from jax._src.dispatch import apply_primitive as _apply_primitive

__all__ = ["CallPlan", "call", "kffi_call_p"]


_OPTION_NAMES = ("out_shapes", "input_output_aliases", "arg_spec", "allow_cuda_graph")


def _mlir_attr(value: Any) -> Any:
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


_target_counter = itertools.count()


class CallPlan:
    """How one call shape maps onto a function: the arg_spec, the output rule, the aliases.

    Plans are cached and compared by identity, so jit's caches hit for repeated calls.
    """

    # kffi.jax._shard's cache on the plan: its ShardRule, or its mark for none.
    _shard_rule: object

    def __init__(
        self,
        fn: Function,
        arg_spec: Sequence[str],
        n_inputs: int,
        input_names: Sequence[str | None],
        aliases: Sequence[tuple[int, int]],
        allow_cuda_graph: bool,
        meta: dict[str, Any] | None = None,
        out_tree: Any = None,
        fixed_outs: tuple[_Aval, ...] | None = None,
        vmap: str | Callable[..., Any] | None = None,
        label: str | None = None,
    ) -> None:
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
        self.label = label or bind.fn_name(fn)
        self._targets: dict[str, str] = {}
        self._stable: str | None = None
        self._stable_known = False  # _stable not computed yet
        self._avals: dict[tuple[_Aval, ...], tuple[Any, ...]] = {}
        self._lock = threading.Lock()
        parse_arg_spec(self.arg_spec)  # fail early on a malformed spec
        if _shard.rule_of(self) is not None:
            # Its partitioning rule lowers with the devices known: asked only once a contract
            # with parallel symbols is called, so other calls lower as before.
            _shard.require_devices(kffi_call_p)

    def __repr__(self) -> str:
        return f"<kffi.jax plan {self.label} {list(self.arg_spec)}>"

    # -- abstract evaluation --------------------------------------------------------------------

    def out_avals(self, in_avals: Sequence[Any]) -> tuple[Any, ...]:
        key = tuple((tuple(a.shape), str(a.dtype)) for a in in_avals)
        hit = self._avals.get(key)
        if hit is not None:
            return hit
        outs: tuple[tuple[Any, str], ...]
        if self.fixed_outs is not None:
            outs = self.fixed_outs
        else:
            shapes: dict[str, tuple[int, ...]] = {}
            dtypes: dict[str, str] = {}
            for name, (shape, dtype) in zip(self.input_names, key):
                if name is not None:
                    shapes[name] = shape
                    dtypes[name] = dtype
            assert self.meta is not None  # a plan without fixed outputs has a contract
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
                name = self.stable_name()
                if name is not None:  # named by content: the same in every process
                    register_content_target(
                        name, self.fn, platform, list(self.arg_spec), self.allow_cuda_graph
                    )
                    _export.remember(self.fn)
                else:  # not from a library file: a name of this process
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

    def stable_name(self) -> str | None:
        """The content-derived XLA target name (kffi/jax/_export.py), or None for a function
        that no library file holds."""
        if not self._stable_known:
            self._stable = _export.stable_target_name(self.fn, self.arg_spec, self.allow_cuda_graph)
            self._stable_known = True
        return self._stable

    def _check_platform(self, platform: str) -> None:
        bind.check_platform(self.label, self.meta, platform)


def _np_dtype(name: str) -> Any:
    import jax.numpy as jnp

    try:
        return jnp.dtype(name)
    except TypeError:
        raise TypeError(f"kffi.jax: dtype {name!r} has no JAX equivalent") from None


def _check_input_dtypes(meta: dict[str, Any], dtypes: Mapping[Any, str], label: str) -> None:
    for _, p in _abstract.tensor_params(meta):
        allowed = p.get("dtypes") or []
        got = dtypes.get(p.get("name"))
        if got is not None and allowed and "*" not in allowed and got not in allowed:
            raise TypeError(
                f"kffi.jax: {label}: parameter {p['name']!r} expects dtype "
                f"{'|'.join(allowed)}, got {got}"
            )


# ---------------------------------------------------------------------------------------------
# Building a plan from a call's arguments (the layouts: _bind.py).
# ---------------------------------------------------------------------------------------------


# An output's (shape, dtype name).
_Aval = tuple[tuple[int, ...], str]


def _flatten_out_shapes(out_shapes: Any) -> tuple[tuple[_Aval, ...], Any]:
    leaves, tree = tree_util.tree_flatten(out_shapes)
    return tuple(_aval_of(leaf) for leaf in leaves), tree


def _aval_of(leaf: Any, name: str | None = None) -> _Aval:
    if not (hasattr(leaf, "shape") and hasattr(leaf, "dtype")):
        where = f"out_shapes[{name!r}]" if name is not None else "out_shapes leaves"
        raise TypeError(
            f"kffi.jax: {where} have .shape and .dtype (e.g. jax.ShapeDtypeStruct), got {leaf!r}"
        )
    return (tuple(int(d) for d in leaf.shape), str(np.dtype(leaf.dtype)))


def _named_out_shapes(
    fn: Function, meta: dict[str, Any] | None, out_shapes: Mapping[str, Any]
) -> tuple[tuple[str, ...], tuple[_Aval, ...]]:
    """(parameter names, avals) of a dict ``out_shapes`` naming the parameter of each output."""
    label = (meta or {}).get("name") or bind.fn_name(fn)
    if not bind.has_param_names(meta):
        raise TypeError(
            f"kffi.jax: {label} has no parameter names (no metadata), so out_shapes cannot "
            f"name its outputs; its layout is every input, then every output (arg_spec "
            f"['args', 'rets']): pass out_shapes as a jax.ShapeDtypeStruct or a tuple of them, "
            f"or an explicit arg_spec"
        )
    if not out_shapes:
        raise ValueError(f"kffi.jax: {label}: out_shapes names no output")
    names = tuple(out_shapes)
    return names, tuple(_aval_of(v, k) for k, v in out_shapes.items())


_plan_cache: dict[tuple[Any, ...], tuple[Function, CallPlan]] = {}
_plan_lock = threading.Lock()


def _plan_for(
    fn: Function,
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
    out_shapes: Any,
    input_output_aliases: Mapping[int, int] | None,
    arg_spec: Sequence[str] | None,
    allow_cuda_graph: bool,
    vmap: str | Callable[..., Any] | None = None,
) -> tuple[CallPlan, list[Any], tuple[Any, ...]]:
    """(plan, operands, attrs) for one call; plans are cached by the call's static structure.

    The layouts (_bind.py): a structured contract without out_shapes; parameter names with
    out_shapes (a dict names the parameter of each output, else the outputs are returned); no
    parameter names or an explicit arg_spec (inputs then outputs, or as the arg_spec says)."""
    meta = bind.metadata(fn)
    label = (meta or {}).get("name") or bind.fn_name(fn)
    structured = _abstract.has_structured_contract(meta) and out_shapes is None and arg_spec is None
    out_names: tuple[str, ...] | None = None
    fixed: tuple[_Aval, ...] | None
    tree: Any
    if structured:
        assert meta is not None  # has_structured_contract
        b = bind.bind_contract(fn, meta, args, kwargs)
        fixed, tree = None, None
        n_outputs = sum(item.startswith("rets.") for item in b.spec) + len(
            meta.get("outputs") or []
        )
    else:
        if out_shapes is None:
            hint = f"; {bind.naming_hint(meta, label)}" if bind.has_param_names(meta) else ""
            raise TypeError(
                f"kffi.jax: {label} has no contract declaring its outputs "
                f"(metadata without 'mutates'); pass out_shapes=jax.ShapeDtypeStruct"
                f"(shape, dtype) (or a pytree of them){hint}"
            )
        if isinstance(out_shapes, dict) and arg_spec is None:
            out_names, fixed = _named_out_shapes(fn, meta, out_shapes)
            tree = None  # one array, or a tuple in the order of out_shapes
        else:
            fixed, tree = _flatten_out_shapes(out_shapes)
        if arg_spec is None and bind.has_param_names(meta):
            b = bind.bind_named(fn, meta, args, kwargs, out_names, fixed)
        else:
            b = bind.bind_flat(fn, meta, args, kwargs, arg_spec)
        n_outputs = len(fixed)
    aliases = list(b.aliases) + list((input_output_aliases or {}).items())
    bind.check_aliases(label, aliases, len(b.operands), n_outputs)
    key = (
        id(fn),
        tuple(b.spec),
        len(b.operands),
        tuple(b.input_names),
        tuple(sorted(aliases)),
        bool(allow_cuda_graph),
        fixed,
        tree,
        out_names,
        vmap,
        structured,
    )
    with _plan_lock:
        entry = _plan_cache.get(key)
    if entry is None or entry[0] is not fn:
        # A new layout: checked once, before a plan exists (a refused call caches nothing).
        bind.check_writable(label, meta, b.spec, len(b.operands), n_outputs, aliases)
        plan = CallPlan(
            fn,
            b.spec,
            len(b.operands),
            b.input_names,
            aliases,
            allow_cuda_graph,
            meta=meta if structured else None,
            out_tree=tree,
            fixed_outs=fixed,
            vmap=vmap,
        )
        with _plan_lock:
            entry = _plan_cache.get(key)
            if entry is None or entry[0] is not fn:
                _plan_cache[key] = (fn, plan)
            else:
                plan = entry[1]
    else:
        plan = entry[1]
    return plan, b.operands, tuple(b.attrs)


def call(
    fn: Function,
    *args: Any,
    out_shapes: Any = None,
    input_output_aliases: Mapping[int, int] | None = None,
    arg_spec: Sequence[str] | None = None,
    allow_cuda_graph: bool = False,
    **attrs: Any,
) -> Any:
    """Calls a kffi function on JAX arrays, eagerly or under ``jax.jit``; returns JAX arrays.

    With a contract, outputs need no declaration: the function's ``mut`` tensor parameters and
    its declared returned tensors are the outputs, their shapes evaluated from the input shapes.
    Pass the input arrays and the scalar parameters (positionally or by name); given arrays for
    the ``mut`` parameters too, they are updated in place (as new JAX arrays). The result is one
    array, or a tuple when there are several outputs.

    Without a contract, ``out_shapes`` says what the call produces:

    - a dict names the parameter that receives each output,
      ``out_shapes={"y": jax.ShapeDtypeStruct(shape, dtype)}``; the positional arguments bind,
      in order, to the parameters not named there. The result is one array, or a tuple in the
      order of the dict. An array passed by keyword for a named output is its initial value
      (updated in place).
    - a ``jax.ShapeDtypeStruct`` or another pytree of them: the tensors the function returns
      (refused while a tensor parameter is left without an array); the result has its
      structure.

    A JAX input never reaches a parameter that the function's metadata marks mutable (it may
    write it) unless it is aliased to an output: such a call is refused with a ValueError
    naming the parameter. A function without parameter metadata (a TVM-FFI export) takes every
    input, then every output (jax_tvm_ffi's ``["args", "rets"]``).

    A contract whose symbols are declared ``parallel`` (``; n: int64 parallel``) also gives
    XLA a partitioning rule: under ``jax.jit`` over several devices, each device runs the
    function on its shard of the parallel dimensions (the others are replicated first), and a
    ``jax.vmap`` batch in front of a leading parallel dimension folds into it (kffi/jax/_shard.py,
    docs/scaling.md).

    ``input_output_aliases``: {input index: output index}, as in ``jax.ffi.ffi_call``.
    ``arg_spec``: the exact layout (see :func:`register_ffi_target`); ``out_shapes`` is then a
    pytree, as in ``jax.ffi.ffi_call``. ``allow_cuda_graph``: declare the target safe to
    capture into CUDA graphs. Other keywords are parameters (scalars become XLA attributes and
    must be static).
    """
    if not isinstance(fn, Function):
        raise TypeError(f"kffi.jax.call: expected a kffi.Function, got {type(fn).__name__}")
    plan, operands, attr_key = _plan_for(
        fn, args, attrs, out_shapes, input_output_aliases, arg_spec, allow_cuda_graph
    )
    return _bind(plan, operands, attr_key)


def _bind(plan: CallPlan, operands: Sequence[Any], attr_key: tuple[Any, ...]) -> Any:
    import jax.numpy as jnp

    arrays = [jnp.asarray(x) for x in operands]
    outs = kffi_call_p.bind(*arrays, plan=plan, attrs=attr_key)
    if plan.out_tree is not None:
        return tree_util.tree_unflatten(plan.out_tree, outs)
    return outs[0] if len(outs) == 1 else tuple(outs)


# ---------------------------------------------------------------------------------------------
# Primitive rules.
# ---------------------------------------------------------------------------------------------


def _abstract_eval(*avals: Any, plan: CallPlan, attrs: tuple[Any, ...]) -> tuple[Any, ...]:
    del attrs
    if len(avals) != plan.n_inputs:
        raise TypeError(
            f"kffi.jax: {plan.label} bound with {counted(len(avals), 'operand')}, its plan "
            f"takes {plan.n_inputs}"
        )
    return plan.out_avals(avals)


def _lowering(
    ctx: Any, *operands: Any, plan: CallPlan, attrs: tuple[Any, ...], platform: str
) -> Any:
    # Over several devices, a contract with parallel symbols lowers through its partitioning
    # rule (each device runs the kernel on its shard); the per-shard call comes back here.
    sharded = _shard.sharded_lowering(ctx, operands, plan, attrs)
    if sharded is not None:
        return sharded
    name = plan.target(platform)
    aliases = dict(plan.aliases) or None
    rule = jax.ffi.ffi_lowering(name, operand_output_aliases=aliases)
    return rule(ctx, *operands, **{k: _mlir_attr(v) for k, v in attrs})


def _no_jvp(primals: Any, tangents: Any, *, plan: CallPlan, attrs: tuple[Any, ...]) -> Any:
    del primals, tangents, attrs
    raise NotImplementedError(
        f"kffi.jax: {plan.label} has no differentiation rule (jax.grad / jax.jvp). Attach one "
        f"with kffi.jax.primitive({plan.label}, vjp=(fwd, bwd)) or jvp=..."
    )


def _no_transpose(cts: Any, *args: Any, plan: CallPlan, attrs: tuple[Any, ...]) -> Any:
    del cts, args, attrs
    raise NotImplementedError(
        f"kffi.jax: {plan.label} cannot be transposed: JAX sees a kffi call as opaque, so "
        f"reverse mode (jax.grad) through it needs a vjp rule (kffi.jax.primitive(fn, "
        f"vjp=...)); a jvp rule made of kffi calls gives forward mode only"
    )


def _batch(
    args: Sequence[Any], dims: Sequence[int | None], *, plan: CallPlan, attrs: tuple[Any, ...]
) -> Any:
    if plan.vmap is None:
        # A batch in front of a leading parallel symbol folds into it: one call, no rule needed.
        folded = _shard.fold_batch(plan, attrs, args, dims, kffi_call_p.bind)
        if folded is not None:
            return folded
        raise NotImplementedError(
            f"kffi.jax: {plan.label} has no batching rule (jax.vmap). Pass vmap='sequential' "
            f"or a rule to kffi.jax.primitive({plan.label}, vmap=...)"
        )
    if callable(plan.vmap):
        return plan.vmap(args, dims, **dict(attrs))
    # "sequential": one call per batch element (jax.lax.map), batch axes moved to the front.
    import jax.numpy as jnp

    batched = [d is not None for d in dims]  # None: not mapped
    moved = [jnp.moveaxis(a, d, 0) if d is not None else a for a, d in zip(args, dims)]

    def one(xs: Sequence[Any]) -> Any:
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
