"""python/kffi/torch/_dtensor.py: DTensor sharding rules for kffi.torch ops, from their contracts.

A contract symbol declared ``parallel`` says the kernel computes each index along every dimension
of that size independently, so a kernel called on each rank's rows of a DTensor sharded along
that dimension computes that rank's rows of the result, with no collective. This module declares
that to DTensor (``torch.distributed.tensor.experimental.register_sharding``) for every op that
``kffi.torch.register_op`` registers:

- for each usable parallel symbol, one strategy: every tensor dimension whose contract size is
  exactly that symbol is ``Shard(dim)`` (inputs, ``mut`` inputs and outputs alike), everything
  else ``Replicate()``;
- always the all-``Replicate()`` strategy (each rank runs the kernel on the whole tensors).

DTensor picks the cheapest strategy for the placements it is given and redistributes the inputs
to it: a tensor sharded along a parallel dimension stays where it is; one sharded along any
other dimension is gathered first. A symbol is usable only where splitting it is exact (as for
kffi.jax): it appears at most once per tensor, every output's dimension that mentions it is that
symbol alone, and every output has it (an output without it would be computed from one rank's
rows only). A contract whose every tensor has no declared shape, or an op without a contract, gets
the all-Replicate strategy only.

An op that writes an argument in place (``mut`` not allocated) must not have that argument
redistributed: the kernel would write a temporary copy. Its rule offers only the strategies that
keep every written argument's placement on every mesh dimension, and raises a ValueError (saying
to call the op on ``.to_local()`` tensors) when none does. An op returning a non-tensor (int,
float, bool, tensor list) cannot be described to DTensor; its rule raises the same kind of error.

Importing torch.distributed.tensor takes most of a second, so registering an op never does it:
when DTensor is not imported yet, the op waits in a list that an import hook registers the moment
``torch.distributed.tensor`` finishes importing (before any DTensor can exist).
"""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import threading
import warnings
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..contract._parallel import exact_parallel, parallel_symbols, rpn_dim
from ._schema import OpSignature

if TYPE_CHECKING:
    from ._op import TorchOp

__all__ = ["ShardingRule", "declare_sharding", "rule_of"]

_DTENSOR = "torch.distributed.tensor"
_lock = threading.Lock()
_pending: list[TorchOp] = []  # ops registered before DTensor was imported
_hook: _WhenDTensorImported | None = None

# Per dimension of a tensor: the usable parallel symbol it is split along, or None.
_Dims = tuple[str | None, ...]


class ShardingRule:
    """What DTensor may do with one op: its tensor arguments' and outputs' dimensions as the
    parallel symbols they may be split along, per usable symbol.

    ``args``: {argument name: dims, or None for a tensor without a declared shape};
    ``returns``: dims per op return; ``symbols``: {usable symbol: divisibility};
    ``written``: the arguments the op writes in place; ``refusal``: why DTensor cannot call the
    op at all (a non-tensor return), else None.
    """

    def __init__(
        self,
        sig: OpSignature,
        args: dict[str, _Dims | None],
        returns: list[_Dims | None],
        symbols: dict[str, int],
        refusal: str | None = None,
    ) -> None:
        self.qualname = sig.qualname
        self.names = [p.name for p in sig.schema_args]
        self.args = args
        self.returns = returns
        self.symbols = symbols
        self.written = [p.name for p in sig.schema_args if p.mutable]
        self.refusal = refusal

    # -- placements -------------------------------------------------------------------------

    @staticmethod
    def _placement(dims: _Dims | None, sym: str | None) -> Any:
        from torch.distributed.tensor import Replicate, Shard

        if sym is not None and dims is not None and sym in dims:
            return Shard(dims.index(sym))
        return Replicate()

    def strategies(self, *args: Any, **kwargs: Any) -> list[tuple[list[Any], list[Any]]]:
        """register_sharding's function: [(output placements, input placements)] for a call,
        whose tensors come as DTensorSpecs (the placements they have now)."""
        from torch.distributed.tensor._dtensor_spec import DTensorSpec

        if self.refusal is not None:
            raise ValueError(self.refusal)
        given: list[tuple[str, Any]] = [
            (self.names[i] if i < len(self.names) else f"#{i}", a) for i, a in enumerate(args)
        ]
        given += list(kwargs.items())
        specs = {name: a for name, a in given if isinstance(a, DTensorSpec)}
        candidates: list[str | None] = [None]  # None: all Replicate
        candidates += [s for s in self.symbols if self._even(s, specs)]
        written = [n for n in self.written if n in specs]
        if written:  # keep what the kernel writes where it is (see the module docstring)
            candidates = [
                c
                for c in candidates
                if all(
                    p == self._placement(self.args.get(n), c)
                    for n in written
                    for p in specs[n].placements
                )
            ]
            if not candidates:
                n = written[0]
                raise ValueError(
                    f"kffi.torch: {self.qualname} writes its argument {n!r} in place, and that "
                    f"DTensor's placements {tuple(specs[n].placements)} are not ones its kernel "
                    f"can write where they are (only {self._writable(n)} on every mesh "
                    f"dimension); call the op on .to_local() tensors, or register it with "
                    f"allocate=[{n!r}] to have it return a new tensor"
                )
        out = []
        for c in candidates:
            outs = [self._placement(d, c) for d in self.returns]
            ins = [
                self._placement(self.args.get(name), c) if isinstance(a, DTensorSpec) else None
                for name, a in given
            ]
            out.append((outs, ins))
        return out

    def _even(self, sym: str, specs: Mapping[str, Any]) -> bool:
        """Whether every dimension of size ``sym`` splits into pieces the contract accepts on
        every rank of the mesh (a symbol of divisibility 1 always does)."""
        div = self.symbols[sym]
        if div == 1:
            return True
        for name, spec in specs.items():
            dims = self.args.get(name)
            meta = spec.tensor_meta
            if dims is None or meta is None or sym not in dims:
                continue
            if meta.shape[dims.index(sym)] % (div * spec.mesh.size()):
                return False
        return True

    def _writable(self, name: str) -> str:
        dims = self.args.get(name)
        shards = [f"Shard({dims.index(s)})" for s in self.symbols if dims and s in dims]
        return " or ".join(["Replicate()", *shards])


def _shape_dims(shape: Sequence[Any] | None) -> tuple[Any, ...] | None:
    """A parameter's declared shape: symbol names stay, wildcards and ints become None."""
    if shape is None:
        return None
    return tuple(d if isinstance(d, str) and not d.startswith("*") else None for d in shape)


def _output_dims(o: Mapping[str, Any]) -> tuple[list[Any], set[str]] | None:
    """A declared output's dims (the symbol it is exactly, else None) and the symbols that
    appear inside an expression (which a shard's kernel cannot produce its part of)."""
    rpn = o.get("shape_rpn")
    if not isinstance(rpn, list):
        return None
    dims: list[Any] = []
    in_expr: set[str] = set()
    for d in rpn:
        sym, mentioned = rpn_dim(d)
        dims.append(sym)
        in_expr |= mentioned
    return dims, in_expr


def rule_of(sig: OpSignature) -> ShardingRule:
    """The DTensor rule of an op's signature (see the module docstring)."""
    tensors = [p for p in sig.schema_args if p.kind == "tensor"]
    args: dict[str, _Dims | None] = {p.name: _shape_dims(p.shape) for p in tensors}
    if any(r != "Tensor" for r in sig.returns):
        what = ", ".join(sig.returns)
        return ShardingRule(
            sig,
            args,
            [],
            {},
            refusal=f"kffi.torch: {sig.qualname} returns {what}, which DTensor cannot place; "
            f"call the op on .to_local() tensors",
        )
    # Each op return: the allocated outputs, then the contract's declared outputs.
    outputs: list[tuple[Any, ...] | None] = [_shape_dims(p.shape) for p in sig.allocated]
    in_expr: set[str] = set()
    declared = sig.outputs if sig.contract else []
    for o in declared:
        dims = _output_dims(o)
        outputs.append(None if dims is None else tuple(dims[0]))
        in_expr |= dims[1] if dims is not None else set()
    parallel = parallel_symbols(sig.meta) if sig.contract else {}
    if len(outputs) != len(sig.returns):  # returns the contract does not declare
        parallel = {}
    written = [args[p.name] for p in tensors if p.mutable]
    known = list(args.values()) + outputs
    usable: dict[str, int] = {}
    if all(d is not None for d in known):
        exact = exact_parallel(parallel, [d for d in known if d is not None], in_expr)
        for s, div in parallel.items():  # exact, and every output and written argument has it
            if s in exact and all(d is not None and s in d for d in outputs + written):
                usable[s] = div
    returns = [None if d is None else tuple(x if x in usable else None for x in d) for d in outputs]
    args = {
        n: None if d is None else tuple(x if x in usable else None for x in d)
        for n, d in args.items()
    }
    return ShardingRule(sig, args, returns, usable)


def _register(op: TorchOp) -> None:
    from torch.distributed.tensor.experimental import register_sharding

    register_sharding(op.default)(rule_of(op.sig).strategies)


def _register_pending() -> None:
    """Registers the ops that waited for DTensor (the import hook calls it)."""
    with _lock:
        ops = list(_pending)
        _pending.clear()
    for op in ops:
        try:
            _register(op)
        except Exception as e:  # never break the user's import of torch.distributed.tensor
            warnings.warn(
                f"kffi.torch: {op.qualname}: no DTensor sharding rule ({e})",
                RuntimeWarning,
                stacklevel=2,
            )


class _Loader(importlib.abc.Loader):
    """torch.distributed.tensor's own loader, which then registers the waiting ops."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def create_module(self, spec: Any) -> Any:
        return self._inner.create_module(spec)

    def exec_module(self, module: Any) -> None:
        self._inner.exec_module(module)
        _register_pending()

    def __getattr__(self, name: str) -> Any:  # get_source, is_package, ...: the inner loader's
        return getattr(self._inner, name)


class _WhenDTensorImported(importlib.abc.MetaPathFinder):
    """A finder that only wraps the loader of torch.distributed.tensor (and then leaves)."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != _DTENSOR:
            return None
        _remove_hook()
        spec = importlib.machinery.PathFinder.find_spec(fullname, path, target)
        if spec is not None and spec.loader is not None:
            spec.loader = _Loader(spec.loader)
        return spec


def _remove_hook() -> None:
    global _hook
    with _lock:
        if _hook is not None and _hook in sys.meta_path:
            sys.meta_path.remove(_hook)
        _hook = None


def declare_sharding(op: TorchOp) -> None:
    """Gives DTensor the sharding rule of ``op`` (see the module docstring): now when
    torch.distributed.tensor is imported, else when it is."""
    global _hook
    import torch.distributed

    if not torch.distributed.is_available():
        return  # a torch built without distributed support has no DTensor
    with _lock:  # checked under the lock that the hook's registration takes: no op is missed
        module = sys.modules.get(_DTENSOR)
        imported = module is not None and getattr(module, "DTensor", None) is not None
        if not imported:
            _pending.append(op)
            if _hook is None:
                _hook = _WhenDTensorImported()
                sys.meta_path.insert(0, _hook)
            return
    _register(op)
