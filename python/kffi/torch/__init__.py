"""kffi.torch: kffi functions as PyTorch custom ops (torch.compile, fake tensors, CUDA graphs,
autograd).

    import kffi.torch
    op = kffi.torch.register_op(fn, "mylib::scale")      # torch.ops.mylib.scale too
    op(y, x, 2.0)                                        # eager: straight to kffi
    torch.compile(lambda x, y: op(y, x, 2.0), fullgraph=True)
    ops = module.torch_ops("mylib")                      # every contract function of a module
    kffi.torch.register_autograd(ops.square, backward=module.square_bwd)
    kffi.torch.save_ops("model.kffi_ops", ops)         # for kffi::torch::RegisterOps in C++

Importing kffi does not import this package (nor torch). The first torch tensor argument of any
kffi call loads kffi.torch's tensor reader, built with kffi for this torch (docs/torch.md,
"Setup"): every kffi call then reads torch.Tensor arguments from the tensor directly, lazy-view
bits included, with no Python code run.
"""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

from collections.abc import Iterator

from ..contract import _abstract
from ..runtime._objects import Module
from . import _glue
from ._autograd import register_autograd
from ._deploy import cpp_flags, save_ops
from ._op import TorchOp, register_op, registered_ops

__all__ = [
    "TorchOp",
    "cpp_flags",
    "fast_tensor_import",
    "ops_of_module",
    "register_autograd",
    "register_op",
    "registered_ops",
    "save_ops",
]


def fast_tensor_import(build: bool = True) -> bool:
    """Makes every kffi call read torch.Tensor arguments from the tensor itself (its TensorImpl)
    rather than through torch's DLPack exchange API and Python methods: the same DLTensors, with
    less work per tensor. Anything unusual (another layout or device, a tensor without storage)
    still goes through torch's API. The first torch tensor argument of a process turns it on by
    itself where kffi was built for this torch; for another torch this builds the reader (about
    a minute; cached) or, with ``build=False``, only uses one built already. Returns whether it is
    on."""
    return _glue.install_tensor_import(build)


fast_tensor_import(build=False)  # a few milliseconds where kffi was built for this torch


class OpNamespace:
    """The ops made from a module's functions: ``ops.scale``, ``ops["scale"]``, ``list(ops)``."""

    def __init__(self, namespace: str, ops: dict[str, TorchOp]) -> None:
        self._namespace = namespace
        self._ops = dict(ops)

    def __getattr__(self, name: str) -> TorchOp:
        try:
            ops: dict[str, TorchOp] = self.__dict__["_ops"]  # not self._ops: no recursion
            return ops[name]
        except KeyError:
            raise AttributeError(
                f"kffi.torch: namespace {self._namespace!r} has no op {name!r}; ops: "
                f"{', '.join(sorted(self._ops)) or '(none)'}"
            ) from None

    def __getitem__(self, name: str) -> TorchOp:
        return self._ops[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._ops)

    def __len__(self) -> int:
        return len(self._ops)

    def __contains__(self, name: object) -> bool:
        return name in self._ops

    def __dir__(self) -> list[str]:
        return sorted(set(super().__dir__()) | set(self._ops))

    def __repr__(self) -> str:
        return f"<kffi.torch ops {self._namespace}: {', '.join(sorted(self._ops))}>"


def ops_of_module(module: Module, namespace: str) -> OpNamespace:
    """Registers every function of ``module`` that has a contract as ``namespace::<name>``
    (functions whose names are not identifiers are skipped)."""
    ops: dict[str, TorchOp] = {}
    for name in module.functions():
        fn = module.get_function(name)
        if not name.isidentifier() or fn is None:
            continue
        if not _abstract.has_structured_contract(getattr(fn, "_metadata", None)):
            continue
        ops[name] = register_op(fn, f"{namespace}::{name}", _module_name=module.name)
    return OpNamespace(namespace, ops)
