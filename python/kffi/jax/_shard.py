"""python/kffi/jax/_shard.py: partitioning and vmap rules derived from a contract's parallel symbols.

A contract symbol declared ``parallel`` (``; n: int64 parallel``, ``kffi.sym_int("n",
parallel=True)``) says the kernel computes each index along every dimension of that size
independently. That is all XLA needs to run the kernel on shards:

- partitioning (:func:`sharded_lowering`): under ``jax.jit`` over several devices, the call is
  lowered through ``jax.experimental.custom_partitioning`` with a Shardy rule in which each
  parallel symbol is one factor shared by every dimension of that size (it may stay sharded) and
  every other dimension is a factor of its own that needs replication. Each device then runs the
  kernel on its local shard, with output shapes evaluated from the contract per shard; outputs
  keep the parallel sharding.
- vmap (:func:`fold_batch`): a batch dimension added in front of operands whose leading
  dimension is a parallel symbol folds into it: (B, n, ...) -> (B * n, ...), one call, and back.

A parallel symbol is used only where splitting it is exact: it appears at most once per tensor,
and every output dimension that mentions it is that symbol alone (an output of ``n * 2`` rows
computed per shard is not a shard of the full output). Otherwise it is treated as any other.
"""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

from ..contract import _abstract
from ..contract._parallel import exact_parallel, parallel_symbols, rpn_dim
from ._call_primitive import kffi_call_p

if TYPE_CHECKING:  # _primitive imports this module
    from ._primitive import CallPlan

__all__ = ["ShardRule", "fold_batch", "require_devices", "rule_of", "sharded_lowering"]

_NO_RULE = object()
_lock = threading.Lock()


# Per dimension of an operand or output: the parallel symbol it is split along, or None.
_Dims = tuple[str | None, ...]
# Per dimension of an output: ("sym", name) or ("expr", the symbols it mentions).
_OutDecl = list[tuple[str, Any]]


class ShardRule:
    """The dims of each operand and output as parallel symbol names (None: not split)."""

    def __init__(
        self,
        operand_dims: tuple[_Dims, ...],
        result_dims: tuple[_Dims, ...],
        divisibility: dict[str, int],
    ) -> None:
        self.operand_dims = operand_dims  # per operand: tuple of symbol-or-None per dimension
        self.result_dims = result_dims
        self.divisibility = divisibility  # {symbol: divisibility}
        self.symbols = tuple(sorted({s for dims in operand_dims for s in dims if s is not None}))
        self._partitioned: dict[tuple[Any, ...], Any] = {}

    # -- the Shardy rule ------------------------------------------------------------------------

    def sdy_rule(self) -> Any:
        from jax.experimental.custom_partitioning import ArrayMapping, SdyShardingRule

        factor = {s: f"p{i}" for i, s in enumerate(self.symbols)}
        replicated: list[str] = []

        def mapping(dims: _Dims) -> Any:
            names = []
            for s in dims:
                if s is None:
                    replicated.append(f"r{len(replicated)}")
                    names.append(replicated[-1])
                else:
                    names.append(factor[s])
            return ArrayMapping(*names)

        operands = tuple(mapping(d) for d in self.operand_dims)
        results = tuple(mapping(d) for d in self.result_dims)
        return SdyShardingRule(operands, results, need_replication_factors=tuple(replicated))

    # -- shardings ------------------------------------------------------------------------------

    def _axes(
        self, mesh: Any, shapes: Sequence[tuple[int, ...]], shardings: Sequence[Any]
    ) -> dict[str, tuple[str, ...]]:
        """{symbol: mesh axes} that the operands' shardings give the parallel symbols, kept only
        where every dimension of that size splits evenly into pieces the contract accepts."""
        from jax.sharding import NamedSharding

        axes: dict[str, tuple[str, ...]] = {}
        used: set[str] = set()
        for dims, shape, sh in zip(self.operand_dims, shapes, shardings):
            if not isinstance(sh, NamedSharding):
                continue
            spec = tuple(sh.spec) + (None,) * (len(shape) - len(sh.spec))
            for d, s in enumerate(dims):
                entry = spec[d] if d < len(spec) else None
                if s is None or s in axes or entry is None:
                    continue
                names = (entry,) if isinstance(entry, str) else tuple(entry)
                if (
                    not names
                    or used.intersection(names)
                    or not all(isinstance(a, str) and a in mesh.shape for a in names)
                ):
                    continue
                axes[s] = names
                used.update(names)
        for s in list(axes):
            parts = math.prod(mesh.shape[a] for a in axes[s])
            for dims, shape in zip(self.operand_dims, shapes):
                for d, t in enumerate(dims):
                    if t == s and (
                        shape[d] % parts or (shape[d] // parts) % self.divisibility.get(s, 1)
                    ):
                        axes.pop(s, None)
        return axes

    @staticmethod
    def _sharding(mesh: Any, dims: _Dims, axes: Mapping[str, tuple[str, ...]]) -> Any:
        from jax.sharding import NamedSharding, PartitionSpec

        spec: list[Any] = []
        for s in dims:
            names = axes.get(s) if s is not None else None
            spec.append(None if names is None else names[0] if len(names) == 1 else names)
        return NamedSharding(mesh, PartitionSpec(*spec))

    def shardings(
        self, mesh: Any, arg_shapes: Sequence[Any]
    ) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
        shapes = [tuple(a.shape) for a in arg_shapes]
        axes = self._axes(mesh, shapes, [a.sharding for a in arg_shapes])
        args = tuple(self._sharding(mesh, d, axes) for d in self.operand_dims)
        results = tuple(self._sharding(mesh, d, axes) for d in self.result_dims)
        return args, results

    # -- custom_partitioning ------------------------------------------------------------------

    def partitioned(self, plan: CallPlan, attrs: tuple[Any, ...]) -> Any:
        """A custom_partitioning function binding ``plan`` (cached per attrs)."""
        with _lock:
            hit = self._partitioned.get(attrs)
        if hit is not None:
            return hit
        from jax.experimental.custom_partitioning import custom_partitioning

        def call(*operands: Any) -> tuple[Any, ...]:
            return tuple(kffi_call_p.bind(*operands, plan=plan, attrs=attrs))

        def partition(mesh: Any, arg_shapes: Any, result_shape: Any) -> Any:
            del result_shape
            args, results = self.shardings(mesh, arg_shapes)
            return mesh, call, results, args

        def infer(
            mesh: Any, arg_shapes: Any, result_shape: Any
        ) -> Any:  # GSPMD, when Shardy is off
            del result_shape
            return self.shardings(mesh, arg_shapes)[1]

        def propagate(
            mesh: Any, user_shape: Any
        ) -> Any:  # GSPMD: the user's sharding as a suggestion
            del mesh
            return user_shape.sharding

        fn = custom_partitioning(call)
        fn.def_partition(
            partition,
            infer_sharding_from_operands=infer,
            propagate_user_sharding=propagate,
            sharding_rule=self.sdy_rule(),
        )
        with _lock:
            self._partitioned.setdefault(attrs, fn)
            return self._partitioned[attrs]


def _operand_decls(plan: CallPlan) -> list[tuple[Any, ...] | None]:
    """The declared shape of each operand's tensor parameter, or None where unknown."""
    params = {
        p.get("name"): p for p in (plan.meta or {}).get("params") or [] if isinstance(p, dict)
    }
    decls: list[tuple[Any, ...] | None] = []
    for name in plan.input_names:
        p = params.get(name) if name is not None else None
        shape = p.get("shape") if p is not None and p.get("kind") == "tensor" else None
        decls.append(tuple(shape) if isinstance(shape, list) else None)
    return decls


def _output_decls(plan: CallPlan) -> list[_OutDecl] | None:
    """Per output, per dimension: the symbol it is exactly, an int, or "expr" (anything else),
    and the symbols each output mentions. None when the outputs cannot be read."""
    try:
        specs = _abstract.output_specs(plan.meta or {})  # none: a ContractError
    except _abstract.ContractError:
        return None
    outs: list[_OutDecl] = []
    for spec in specs:
        if spec.dims is None:
            return None
        dims: _OutDecl = []
        for d in spec.dims:
            if spec.returned:
                sym, mentioned = rpn_dim(d)
                dims.append(("sym", sym) if sym is not None else ("expr", mentioned))
            elif isinstance(d, str) and not d.startswith("*"):
                dims.append(("sym", d))
            else:
                dims.append(("expr", frozenset()))
        outs.append(dims)
    return outs


def _usable(
    parallel: Iterable[str],
    operand_decls: Iterable[tuple[Any, ...]],
    output_decls: Iterable[_OutDecl],
) -> set[str]:
    """The parallel symbols that can be split exactly (contract/_parallel.py)."""
    output_decls = list(output_decls)
    exact = [[v for kind, v in dims if kind == "sym"] for dims in output_decls]
    in_expr = {s for dims in output_decls for kind, v in dims if kind == "expr" for s in v}
    return exact_parallel(parallel, [*operand_decls, *exact], in_expr)


def rule_of(plan: CallPlan) -> ShardRule | None:
    """The ShardRule of a plan (cached on it), or None: no structured contract, no usable
    parallel symbol, or an operand whose parameter is unknown."""
    cached = getattr(plan, "_shard_rule", None)
    if cached is not None:
        return None if cached is _NO_RULE else cast(ShardRule, cached)
    rule: ShardRule | None = None
    parallel = parallel_symbols(plan.meta)
    if parallel and plan.fixed_outs is None:
        decls = _operand_decls(plan)
        output_decls = _output_decls(plan)
        operand_decls = [d for d in decls if d is not None]
        if output_decls is not None and len(operand_decls) == len(decls):
            usable = _usable(parallel, operand_decls, output_decls)
            if any(s in usable for decl in operand_decls for s in decl):
                rule = ShardRule(
                    tuple(
                        tuple(d if d in usable else None for d in decl) for decl in operand_decls
                    ),
                    tuple(
                        tuple(v if kind == "sym" and v in usable else None for kind, v in dims)
                        for dims in output_decls
                    ),
                    {s: parallel[s] for s in usable},
                )
    plan._shard_rule = rule if rule is not None else _NO_RULE
    return rule


# ---------------------------------------------------------------------------------------------
# Lowering.
# ---------------------------------------------------------------------------------------------


def _devices(ctx: Any) -> int:
    """How many devices the computation spans when XLA partitions it automatically (a
    ShardingContext); 0 elsewhere (shard_map's manual axes: each body sees its shard already)."""
    try:
        from jax._src import sharding_impls
    except ImportError:  # pragma: no cover (jax moved it)
        return 0
    axis_context = ctx.module_context.axis_context
    if isinstance(axis_context, sharding_impls.ShardingContext):
        return int(axis_context.num_devices)
    return 0


def require_devices(primitive: Any) -> None:
    """Asks jit to lower ``primitive`` with the device assignment known, as custom_partitioning
    needs (as jax's own cuDNN attention primitives do); older jax always passes it."""
    try:
        from jax._src import dispatch
    except ImportError:  # pragma: no cover (jax moved it)
        return
    requires = getattr(dispatch, "prim_requires_devices_during_lowering", None)
    if isinstance(requires, set):
        requires.add(primitive)


def sharded_lowering(
    ctx: Any, operands: Sequence[Any], plan: CallPlan, attrs: tuple[Any, ...]
) -> Any:
    """The lowering through custom_partitioning when the plan has a rule and the computation
    spans several devices; None otherwise (the caller emits the plain custom call)."""
    rule = rule_of(plan)
    if rule is None or _devices(ctx) < 2:
        return None
    from jax.interpreters import mlir

    try:
        fn = rule.partitioned(plan, attrs)
    except ImportError:  # pragma: no cover (a jax without custom_partitioning's Shardy rules)
        return None
    return mlir.lower_fun(lambda *ops: fn(*ops), multiple_results=True)(ctx, *operands)


# ---------------------------------------------------------------------------------------------
# vmap: fold the batch into a leading parallel dimension.
# ---------------------------------------------------------------------------------------------


def fold_batch(
    plan: CallPlan,
    attrs: tuple[Any, ...],
    args: Sequence[Any],
    dims: Sequence[int | None],
    bind: Callable[..., Any],
) -> tuple[list[Any], list[int]] | None:
    """(outputs, out dims) of a vmapped call whose batch folds into a leading parallel symbol,
    or None when the shapes do not allow it. ``bind`` binds the primitive."""
    rule = rule_of(plan)
    if rule is None:
        return None
    leading = {d[0] for d in rule.operand_dims if d} | {d[0] for d in rule.result_dims if d}
    if len(leading) != 1 or None in leading:
        return None
    (sym,) = leading
    # The symbol leads every operand and output, and appears nowhere else.
    for d in rule.operand_dims + rule.result_dims:
        if not d or d[0] != sym or sym in d[1:]:
            return None
    import jax.numpy as jnp

    size = n = None
    for a, bd in zip(args, dims):
        if bd is not None:
            size = a.shape[bd]
            n = a.shape[bd + 1 if bd == 0 else 0]
    if size is None or (args and not all(a.ndim >= 1 for a in args)):
        return None
    folded = []
    for arg, bd in zip(args, dims):
        a = (
            jnp.moveaxis(arg, bd, 0)
            if bd is not None
            else jnp.broadcast_to(arg, (size, *arg.shape))
        )
        folded.append(a.reshape((a.shape[0] * a.shape[1], *a.shape[2:])))
    width = _symbol_width(plan.meta, sym)
    if folded and folded[0].shape[0] > width:
        return None  # the folded size would break the symbol's int32 range
    outs = bind(*folded, plan=plan, attrs=attrs)
    return [o.reshape((size, n, *o.shape[1:])) for o in outs], [0] * len(outs)


def _symbol_width(meta: Mapping[str, Any] | None, sym: str | None) -> int:
    for s in (meta or {}).get("symbols") or []:
        if isinstance(s, dict) and s.get("name") == sym and s.get("width") == "int32":
            return (1 << 31) - 1
    return (1 << 63) - 1
