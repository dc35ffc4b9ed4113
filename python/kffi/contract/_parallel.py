"""python/kffi/contract/_parallel.py: a contract's parallel symbols, and which of them split exactly.

A symbol declared ``parallel`` says the kernel computes each index along every dimension of that
size independently. The framework adapters turn that into a sharding rule (kffi.jax: a Shardy
rule; kffi.torch: DTensor strategies). Both split a symbol only where a shard's kernel produces
exactly its part of every result, so the test of that lives here once:

- the symbol appears at most once in each tensor's dimensions ([n, n] is not split);
- no output dimension is an expression of it (a shard cannot produce its part of [n * 2]).
"""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any


def parallel_symbols(meta: Mapping[str, Any] | None) -> dict[str, int]:
    """{name: divisibility} of the symbols a function's metadata marks ``"parallel": true``."""
    out: dict[str, int] = {}
    for s in (meta or {}).get("symbols") or []:
        if isinstance(s, dict) and s.get("parallel") is True and isinstance(s.get("name"), str):
            div = s.get("divisibility", 1)
            out[s["name"]] = div if isinstance(div, int) and div >= 1 else 1
    return out


def rpn_dim(d: Any) -> tuple[str | None, frozenset[str]]:
    """One dimension of a returned output's ``shape_rpn``: (the symbol it is exactly, else None;
    the symbols an expression mentions, else nothing)."""
    tokens = list(d) if isinstance(d, (list, tuple)) else [d]
    if len(tokens) == 1 and isinstance(tokens[0], str):
        return tokens[0], frozenset()
    return None, frozenset(t for t in tokens if isinstance(t, str))


def exact_parallel(
    parallel: Iterable[str], tensors: Iterable[Sequence[Any]], in_expr: Iterable[str]
) -> set[str]:
    """The parallel symbols that split exactly, given every tensor's dimensions (inputs and
    outputs: symbol names where a dimension is exactly one) and the symbols that output
    expressions mention."""
    usable = set(parallel) - set(in_expr)
    for dims in tensors:
        dims = list(dims)
        usable = {s for s in usable if dims.count(s) <= 1}
    return usable
