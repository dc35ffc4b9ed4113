"""python/kffi/jax/_op.py: ``kffi.jax.primitive``: a kffi function as a JAX op with rules.

    op = kffi.jax.primitive(square, vjp=(None, square_bwd))   # both kffi functions
    jax.grad(lambda x: op(x).sum())(x)

Differentiation rules are made of other calls (kffi functions or Python functions of JAX
arrays) through jax.custom_vjp / jax.custom_jvp; the batching rule lives in the primitive's
plan, so it also applies inside those rules.
"""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax

from ..runtime._objects import Function
from ._bind import is_array as _is_array
from ._bind import rule_out_shapes
from ._primitive import _bind, _plan_for

__all__ = ["Op", "primitive"]


class Op:
    """A kffi function as a JAX op: ``op(*args, **params)`` works eagerly, under jit, and under
    grad / jvp / vmap when the matching rule was given. See :func:`primitive`."""

    def __init__(
        self,
        fn: Function,
        *,
        out_shapes: Any = None,
        input_output_aliases: Mapping[int, int] | None = None,
        arg_spec: Sequence[str] | None = None,
        allow_cuda_graph: bool = False,
        jvp: Function | Callable[..., Any] | None = None,
        vjp: tuple[Any, Any] | None = None,
        vmap: str | Callable[..., Any] | None = None,
    ) -> None:
        if not isinstance(fn, Function):
            raise TypeError(
                f"kffi.jax.primitive: expected a kffi.Function, got {type(fn).__name__}"
            )
        if jvp is not None and vjp is not None:
            raise ValueError(
                "kffi.jax.primitive: give jvp or vjp, not both (JAX derives "
                "reverse mode from a jvp, or uses the vjp for reverse mode only)"
            )
        if vjp is not None and (not isinstance(vjp, tuple) or len(vjp) != 2):
            raise TypeError("kffi.jax.primitive: vjp is a pair (fwd, bwd); fwd may be None")
        if vmap is not None and vmap != "sequential" and not callable(vmap):
            raise TypeError(
                "kffi.jax.primitive: vmap is 'sequential' or a batching rule "
                "rule(args, dims, **params) -> (outs, out_dims)"
            )
        self.fn = fn
        self.options: dict[str, Any] = {
            "out_shapes": out_shapes,
            "input_output_aliases": input_output_aliases,
            "arg_spec": arg_spec,
            "allow_cuda_graph": allow_cuda_graph,
        }
        self.jvp = jvp
        self.vjp = vjp
        self.vmap = vmap
        self._wrapped: dict[str, Callable[..., Any]] = {}
        self._lock = threading.Lock()
        self.__name__ = getattr(fn, "__name__", "kffi_op")
        self.__doc__ = getattr(fn, "__doc__", None)

    def __repr__(self) -> str:
        rules = [k for k in ("jvp", "vjp", "vmap") if getattr(self, k) is not None]
        return f"<kffi.jax op {self.__name__}" + (f" with {', '.join(rules)}>" if rules else ">")

    # -- plain calls ----------------------------------------------------------------------------

    def _call(
        self, fn: Function, args: Sequence[Any], params: Mapping[str, Any], **overrides: Any
    ) -> Any:
        options = dict(self.options, **overrides)
        plan, operands, attrs = _plan_for(
            fn,
            args,
            params,
            options["out_shapes"],
            options["input_output_aliases"],
            options["arg_spec"],
            options["allow_cuda_graph"],
            vmap=self.vmap,
        )
        return _bind(plan, operands, attrs)

    def _call_rule(
        self,
        rule: Function | Callable[..., Any],
        args: Sequence[Any],
        params: Mapping[str, Any],
        out_shapes: Any = None,
    ) -> Any:
        """Runs a rule given as a kffi function (a plain call) or as a Python function. A kffi
        rule without a contract takes its inputs first: the tensor parameters they leave
        unfilled receive the outputs (named for kffi.jax.call), else it returns them."""
        if isinstance(rule, Function):
            if out_shapes is not None:
                out_shapes = rule_out_shapes(rule, len(args), set(params), out_shapes)
            return self._call(
                rule, args, params, out_shapes=out_shapes, arg_spec=None, input_output_aliases=None
            )
        return rule(*args, **params)

    def __call__(self, *args: Any, **params: Any) -> Any:
        if self.jvp is None and self.vjp is None:
            return self._call(self.fn, args, params)
        # Arrays are differentiated; everything else is a static parameter closed over.
        positions = tuple(i for i, a in enumerate(args) if _is_array(a))
        statics = tuple((i, a) for i, a in enumerate(args) if i not in positions)
        key = repr((positions, statics, sorted(params.items())))  # static values may not hash
        with self._lock:
            f = self._wrapped.get(key)
            if f is None:
                f = self._make_custom(len(args), positions, statics, params)
                self._wrapped[key] = f
        return f(*[args[i] for i in positions])

    # -- custom rules ---------------------------------------------------------------------------

    def _make_custom(
        self,
        nargs: int,
        positions: tuple[int, ...],
        statics: tuple[tuple[int, Any], ...],
        params: Mapping[str, Any],
    ) -> Callable[..., Any]:
        static_map = dict(statics)

        def full_args(arrays: Sequence[Any]) -> list[Any]:
            it = iter(arrays)
            return [next(it) if i in positions else static_map[i] for i in range(nargs)]

        def primal(*arrays: Any) -> Any:
            return self._call(self.fn, full_args(arrays), params)

        def avals_like(xs: Sequence[Any]) -> tuple[Any, ...]:
            return tuple(jax.ShapeDtypeStruct(x.shape, x.dtype) for x in xs)

        if self.vjp is not None:
            fwd_rule, bwd_rule = self.vjp
            f = jax.custom_vjp(primal)

            def fwd(*arrays: Any) -> Any:
                if fwd_rule is None:  # residuals: the primal inputs
                    return primal(*arrays), tuple(arrays)
                if isinstance(fwd_rule, Function):
                    if not _has_contract(fwd_rule):
                        raise TypeError(
                            f"kffi.jax.primitive: the forward kffi function "
                            f"{getattr(fwd_rule, '__name__', '?')} needs a contract (its "
                            f"outputs: the primal outputs, then the residuals); or pass a "
                            f"Python fwd that calls kffi.jax.call"
                        )
                    outs = self._call_rule(fwd_rule, full_args(arrays), params)
                    outs = outs if isinstance(outs, tuple) else (outs,)
                    n_primal = len(_as_tuple(jax.eval_shape(primal, *arrays)))
                    primal_out = outs[0] if n_primal == 1 else tuple(outs[:n_primal])
                    return primal_out, tuple(outs[n_primal:])
                return fwd_rule(*full_args(arrays), **params)

            def bwd(res: Any, cts: Any) -> tuple[Any, ...]:
                cts = _as_tuple(cts)
                if isinstance(bwd_rule, Function):
                    # The gradients are shaped like the primal arrays unless a contract says.
                    grads = self._call_rule(
                        bwd_rule,
                        (*res, *cts),
                        params,
                        out_shapes=None
                        if _has_contract(bwd_rule)
                        else avals_like(_primal_arrays(res, positions)),
                    )
                else:
                    grads = bwd_rule(res, cts if len(cts) > 1 else cts[0])
                return _as_tuple(grads)

            f.defvjp(fwd, bwd)
            vjp_op: Callable[..., Any] = f
            return vjp_op

        jvp_rule = self.jvp
        g = jax.custom_jvp(primal)

        def jvp(primals: Any, tangents: Any) -> Any:
            out = primal(*primals)
            if isinstance(jvp_rule, Function):
                shapes = avals_like(_as_tuple(out))
                if not isinstance(out, (tuple, list)):
                    shapes = shapes[0]  # the tangent has the output's structure
                t_out = self._call_rule(
                    jvp_rule,
                    (*primals, *tangents),
                    params,
                    out_shapes=None if _has_contract(jvp_rule) else shapes,
                )
                return out, t_out
            assert jvp_rule is not None  # with no vjp, a jvp (else no custom rule is made)
            return jvp_rule(primals, tangents)

        g.defjvp(jvp)
        jvp_op: Callable[..., Any] = g
        return jvp_op


def _as_tuple(x: Any) -> tuple[Any, ...]:
    return tuple(x) if isinstance(x, (tuple, list)) else (x,)


def _has_contract(fn: Function) -> bool:
    meta = getattr(fn, "_metadata", None)
    return isinstance(meta, dict) and "mutates" in meta


def _primal_arrays(res: Sequence[Any], positions: tuple[int, ...]) -> tuple[Any, ...]:
    """The primal arrays among the residuals (the default fwd keeps exactly them, first)."""
    return tuple(res[: len(positions)])


def primitive(
    fn: Function,
    *,
    out_shapes: Any = None,
    input_output_aliases: Mapping[int, int] | None = None,
    arg_spec: Sequence[str] | None = None,
    allow_cuda_graph: bool = False,
    jvp: Function | Callable[..., Any] | None = None,
    vjp: tuple[Any, Any] | None = None,
    vmap: str | Callable[..., Any] | None = None,
) -> Op:
    """A kffi function as a JAX op with optional transformation rules.

    ``op(*args, **params)`` calls ``fn`` like :func:`kffi.jax.call` (same ``out_shapes``,
    ``input_output_aliases``, ``arg_spec``, ``allow_cuda_graph``). Without rules, ``jax.grad``,
    ``jax.jvp`` and ``jax.vmap`` raise NotImplementedError. Rules:

    - ``vjp=(fwd, bwd)`` (reverse mode, through ``jax.custom_vjp``). ``fwd`` is None (the
      residuals are the primal input arrays), a kffi function whose outputs are the primal
      outputs followed by the residuals, or a Python function returning ``(out, residuals)``.
      ``bwd`` is a kffi function called with ``(*residuals, *cotangents, **params)`` whose
      outputs are the gradients of the input arrays (shaped like them unless its contract
      says), or a Python function ``bwd(residuals, cotangents) -> gradients``.
    - ``jvp`` (forward mode through ``jax.custom_jvp``; reverse mode too when the tangents are
      computed by JAX operations, which JAX can transpose, i.e. by a Python rule): a kffi function called
      with ``(*primals, *tangents, **params)`` returning the output tangents (shaped like the
      outputs unless its contract says), or a Python function ``jvp(primals, tangents) ->
      (out, out_tangents)``.
    - ``vmap``: ``"sequential"`` (one call per batch element, via ``jax.lax.map``) or a JAX
      batching rule ``rule(args, dims, **params) -> (outs, out_dims)``; it also applies to the
      kffi functions of the rules above.
    """
    return Op(
        fn,
        out_shapes=out_shapes,
        input_output_aliases=input_output_aliases,
        arg_spec=arg_spec,
        allow_cuda_graph=allow_cuda_graph,
        jvp=jvp,
        vjp=vjp,
        vmap=vmap,
    )
