"""python/kffi/torch/_autograd.py: ``kffi.torch.register_autograd``: a kffi backward for a kffi op.

    fwd = kffi.torch.register_op(square, "mylib::square")              # y = x * x (returned)
    kffi.torch.register_autograd(fwd, backward=square_bwd)            # dx = 2 x g (a kffi fn)

The backward kffi function is registered as a functional op of its own (its ``mut`` parameters
allocated and returned), so compiled backward graphs call it like any op. It is called with
``(*residuals, *grads, **params)``: the residuals (by default the forward's tensor inputs; with
``setup_context``, what it saved with ``ctx.save_for_backward``), one gradient per forward
output, and the forward's scalar parameters that it names. Its outputs are the gradients of the
forward's tensor inputs, in order.

An op without a rule refuses inputs that require grad while grad mode is on (a clear error, never
a silent grad_fn=None).
"""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import torch

from ..contract import _abstract
from ..runtime._objects import Function
from ._op import TorchOp, register_op, registered_ops
from ._schema import OpSignature, signature_of

__all__ = ["register_autograd"]

_lock = threading.Lock()


def _resolve(op: TorchOp | str) -> TorchOp:
    if isinstance(op, TorchOp):
        return op
    if isinstance(op, str):
        found = registered_ops().get(op)
        if found is not None:
            return found
    raise TypeError(
        f"kffi.torch.register_autograd: expected an op from kffi.torch.register_op (or its "
        f"qualname), got {op!r}"
    )


def _backward_signature(
    op: TorchOp, backward: Function | TorchOp
) -> tuple[OpSignature, bool | None]:
    """(signature, allocate) of the backward op made from ``backward`` (not registered yet)."""
    allocate: bool | None = None
    if isinstance(backward, TorchOp):
        sig = backward.sig
    else:
        meta = getattr(backward, "_metadata", None)
        if not _abstract.has_structured_contract(meta):
            raise TypeError(
                f"kffi.torch.register_autograd: the backward kffi function "
                f"{getattr(backward, '__name__', '?')} needs a contract (its outputs are the "
                f"gradients: `mut` tensors or declared outputs); or pass a Python "
                f"backward(ctx, *grads)"
            )
        allocate = True if any(p.get("mutable") for p in meta.get("params") or []) else None
        sig = signature_of(backward, _backward_name(op), allocate=allocate)
    if sig.mutated:
        raise TypeError(
            f"kffi.torch.register_autograd: the backward op {sig.qualname} writes "
            f"{sig.mutated} in place; backward ops are functional"
        )
    return sig, allocate


def _backward_name(op: TorchOp) -> str:
    return op.qualname + "_kffi_backward"


def register_autograd(
    op: TorchOp | str,
    backward: Function | TorchOp | Callable[..., Any],
    *,
    setup_context: Callable[[Any, tuple[Any, ...], Any], None] | None = None,
) -> None:
    """Makes ``op`` (a :class:`TorchOp`) differentiable with ``backward``.

    ``backward``: a kffi function with a contract, called with ``(*residuals, *grads,
    **params)`` whose outputs are the gradients of the op's tensor inputs (see the module
    docstring); or a Python function ``backward(ctx, *grads)`` returning one gradient per op
    argument (None for non-tensors), as :func:`torch.library.register_autograd` takes.

    ``setup_context(ctx, inputs, output)``: saves what the backward needs with
    ``ctx.save_for_backward``; by default the op's tensor inputs are saved.

    The op must be functional: a kffi function that writes its outputs (``mut``) is registered
    with ``allocate=`` for that.
    """
    op = _resolve(op)
    if op.mutates_args:
        raise TypeError(
            f"kffi.torch.register_autograd: {op.qualname} writes {list(op.mutates_args)} in "
            f"place, and torch differentiates only functional ops; register it with "
            f"kffi.torch.register_op(fn, name, allocate={tuple(op.mutates_args)!r}) to have it "
            f"allocate and return them"
        )
    if setup_context is not None and not callable(setup_context):
        raise TypeError("kffi.torch.register_autograd: setup_context is a function")
    with _lock:
        if op.has_autograd:
            raise ValueError(f"kffi.torch.register_autograd: {op.qualname} already has a rule")
        args = op.sig.schema_args
        tensor_idx = [i for i, p in enumerate(args) if p.kind == "tensor"]
        scalar_names = [(i, p.name) for i, p in enumerate(args) if p.kind != "tensor"]
        n_out = len(op.sig.returns)

        if isinstance(backward, (Function, TorchOp)):
            bwd_sig, allocate = _backward_signature(op, backward)
            if len(bwd_sig.returns) != len(tensor_idx):
                raise ValueError(
                    f"kffi.torch.register_autograd: {op.qualname} has {len(tensor_idx)} tensor "
                    f"input(s), but its backward {bwd_sig.label} produces "
                    f"{len(bwd_sig.returns)} gradient(s)"
                )
            bwd_args = bwd_sig.schema_args
            n_tensor_args = sum(p.kind == "tensor" for p in bwd_args)
            if setup_context is None and n_tensor_args != len(tensor_idx) + n_out:
                raise ValueError(
                    f"kffi.torch.register_autograd: the backward {bwd_sig.label} takes "
                    f"{n_tensor_args} tensor(s); it is called with the {len(tensor_idx)} tensor "
                    f"input(s) of {op.qualname} and {n_out} gradient(s) (pass setup_context "
                    f"to save other residuals)"
                )
            if isinstance(backward, TorchOp):
                bwd = backward
            else:
                bwd = register_op(backward, _backward_name(op), allocate=allocate)
            param_names = {p.name for p in bwd_args if p.kind != "tensor"}

            def torch_backward(ctx: Any, *grads: Any) -> Any:
                params = {k: v for k, v in ctx.kffi_params.items() if k in param_names}
                # Gradients arrive in any layout (sum's is an expanded, stride-0 tensor); kernels
                # are written for dense memory.
                dense = [g.contiguous() if isinstance(g, torch.Tensor) else g for g in grads]
                out = bwd(*ctx.saved_tensors, *dense, **params)
                it = iter(out if isinstance(out, tuple) else (out,))
                return tuple(next(it) if p.kind == "tensor" else None for p in args)
        elif callable(backward):
            torch_backward = backward
        else:
            raise TypeError(
                f"kffi.torch.register_autograd: backward is a kffi function or a Python "
                f"function, got {type(backward).__name__}"
            )

        def torch_setup(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
            ctx.kffi_params = {name: inputs[i] for i, name in scalar_names}
            if setup_context is None:
                ctx.save_for_backward(*(inputs[i] for i in tensor_idx))
            else:
                setup_context(ctx, inputs, output)

        # The no-rule kernel goes first: one Autograd kernel per op.
        op._handles["autograd"]()
        try:
            torch.library.register_autograd(
                op.qualname, torch_backward, setup_context=torch_setup, lib=op._lib
            )
        except BaseException:
            op._handles["autograd"] = op._handles["autograd_again"]()
            raise
        op.has_autograd = True
