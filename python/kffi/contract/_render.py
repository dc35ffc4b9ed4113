"""python/kffi/contract/_render.py: a contract's text from fake arguments (render_contract), the
names of its symbols and parameters, and its output tensors (_fakes.py: the fake arguments)."""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ._fakes import (
    _IDENT,
    MAX_CONTRACT_BYTES,
    FakeTensor,
    SymInt,
    _as_fake,
    _Fake,
    _Names,
)

# ---------------------------------------------------------------------------------------------
# Rendering.
# ---------------------------------------------------------------------------------------------


def _symbol_names(
    args: Iterable[_Fake], outputs: Iterable[_OutputTensor], param_names: Iterable[str]
) -> tuple[dict[int, str], list[SymInt]]:
    """({id(sym): name}, symbols in order of appearance): given names are kept, the others are
    n0, n1, ... (skipping names already taken)."""
    seen: list[SymInt] = []
    for x in [*args, *outputs]:
        for s in x.symbols():
            if all(s is not t for t in seen):
                seen.append(s)
    names: dict[int, str] = {}
    taken = set(param_names)
    for s in seen:
        if s.name is not None:
            if s.name in taken:
                raise ValueError(
                    f"kffi.compile: two symbols (or a symbol and a parameter) are named {s.name!r}"
                )
            taken.add(s.name)
            names[id(s)] = s.name
    counter = 0
    for s in seen:
        if s.name is None:
            while f"n{counter}" in taken:
                counter += 1
            names[id(s)] = f"n{counter}"
            taken.add(f"n{counter}")
    return names, seen


class _OutputTensor:
    """An output declaration: a fake tensor whose dims are ints and expressions of the inputs'
    symbols (``n * 2``, ``(n + 1) // 2``)."""

    def __init__(self, t: object) -> None:
        if not isinstance(t, FakeTensor):
            raise TypeError(f"kffi.compile: outputs are kffi.fake_tensor(...), got {t!r}")
        if t.strides is not None:
            raise ValueError("kffi.compile: an output declares no strides")
        if t.mut:
            raise ValueError(
                "kffi.compile: outputs are written by definition; mut=True is for parameters"
            )
        self.tensor = t

    def symbols(self) -> list[SymInt]:
        return self.tensor.symbols()

    def render(self, names: _Names, default_device: str | None = None) -> str:
        return self.tensor.render(names, default_device, output=True)


def _outputs_of(outputs: FakeTensor | Iterable[FakeTensor] | None) -> list[_OutputTensor]:
    if outputs is None:
        return []
    if isinstance(outputs, FakeTensor):
        outputs = [outputs]
    return [_OutputTensor(o) for o in outputs]


def render_contract(
    *fake_args: Any,
    param_names: Iterable[str] | None = None,
    outputs: FakeTensor | Iterable[FakeTensor] | None = None,
    default_device: str | None = None,
) -> str:
    """The contract text of fake arguments: ``a0: Tensor([n0], float32), ...; n0: int64``."""
    args = [_as_fake(a) for a in fake_args]
    names = _param_names(param_names, len(args))
    outs = _outputs_of(outputs)
    sym_names, syms = _symbol_names(args, outs, names)
    inputs = {id(s) for a in args for s in a.symbols()}
    for o in outs:
        for s in o.symbols():
            if id(s) not in inputs:
                raise ValueError(
                    f"kffi.compile: output shape uses {sym_names[id(s)]}, which no input binds"
                )
    text = ", ".join(f"{n}: {a.render(sym_names, default_device)}" for n, a in zip(names, args))
    if outs:
        text += " -> " + ", ".join(o.render(sym_names, default_device) for o in outs)
    if syms:
        text += "; " + ", ".join(s.declaration(sym_names) for s in syms)
    if len(text.encode()) > MAX_CONTRACT_BYTES:
        raise ValueError(
            f"kffi.compile: the contract is {len(text.encode())} bytes long; at most "
            f"{MAX_CONTRACT_BYTES}"
        )
    return text


def _param_names(param_names: Iterable[str] | None, count: int) -> list[str]:
    if param_names is None:
        return [f"arg{i}" for i in range(count)]
    names = list(param_names)
    if len(names) != count:
        raise ValueError(f"kffi.compile: {len(names)} param_names for {count} fake arguments")
    for n in names:
        if not isinstance(n, str) or not _IDENT.fullmatch(n):
            raise ValueError(f"kffi.compile: parameter names are identifiers, got {n!r}")
    if len(set(names)) != len(names):
        raise ValueError(f"kffi.compile: duplicate parameter names in {names}")
    return names
