"""python/kffi/_type_text.py: the one reader of the type texts in function metadata.

Two spellings reach it: the C++ type strings of KFFI_EXPORT metadata (``Optional<float>``,
``Array<int>``, ``DLTensor*``) and the contract types (``Tensor([n], float32)``,
``int32[0, 10]``, ``Optional[Tensor(...)]``). One grammar covers both: a head (an identifier,
``*`` allowed at its end), then, optionally, one bracket group (``<...>``, ``[...]`` or
``(...)``); the group holds comma-separated type texts after a generic head (``Optional``,
``Tuple``, ``Array``, ...), and a spec that is not a type after any other head (a tensor's shape
and dtype, an int's range). kffi.aot (C++ headers), kffi.stubgen (Python stubs), kffi.torch
(schemas) and kffi.jax (which parameters are tensors) read types here.

A base module: it imports nothing of kffi.
"""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import re

__all__ = ["MAX_TYPE_DEPTH", "is_optional", "is_tensor", "optional_inner", "parse_type"]


_GENERIC = {"Optional", "Tuple", "Array", "List", "Map", "Dict", "Variant", "Union"}
_OPEN = {"<": ">", "[": "]", "(": ")"}


def _match(text: str, i: int) -> int:
    """Index just past the bracket group opening at text[i]."""
    depth = 0
    for j in range(i, len(text)):
        if text[j] in "<[(":
            depth += 1
        elif text[j] in ">])":
            depth -= 1
            if depth == 0:
                return j + 1
    raise ValueError(f"unbalanced brackets in type {text!r}")


def _split_args(text: str) -> list[str]:
    parts: list[str] = []
    cur: list[str] = []
    depth = 0
    for ch in text:
        if ch in "<[(":
            depth += 1
        elif ch in ">])":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
    tail = "".join(cur).strip()
    if tail:
        parts.append(tail)
    return parts


# Type texts nest at most this deep: a deeper argument reads as Any (no RecursionError, and the
# Python and C++ types written from it stay readable).
MAX_TYPE_DEPTH = 32


TypeNode = tuple[str, list["TypeNode"]]  # (head, args)


def parse_type(text: str, _depth: int = 0) -> TypeNode:
    """``(head, args)`` of a type text: ``"Optional<float>"`` -> ``("Optional", [("float", [])])``;
    groups after other heads (a tensor's spec, an int's range) are skipped. An unreadable text
    gives ``("", [])`` (read as Any), and so does an argument nested deeper than
    :data:`MAX_TYPE_DEPTH`."""
    text = text.strip() if isinstance(text, str) else ""
    m = re.match(
        r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*\*?", text
    )  # object keys: a.B
    if not m:
        return ("", [])
    head, i = m.group(0), m.end()
    args: list[TypeNode] = []
    if i < len(text) and text[i] in _OPEN:
        try:
            end = _match(text, i)
        except ValueError:
            return ("", [])
        if head in _GENERIC:
            if _depth >= MAX_TYPE_DEPTH:
                return ("", [])
            args = [parse_type(a, _depth + 1) for a in _split_args(text[i + 1 : end - 1])]
    return (head, args)


def optional_inner(text: str) -> tuple[bool, str]:
    """``(True, inner text)`` for ``Optional<T>`` or ``Optional[T]``, else ``(False, text)``."""
    text = text.strip() if isinstance(text, str) else ""
    for open_, close in (("<", ">"), ("[", "]")):
        head = "Optional" + open_
        if text.startswith(head) and text.endswith(close):
            return True, text[len(head) : -1].strip()
    return False, text


def is_optional(text: object) -> bool:
    """Whether a type text is an Optional (either spelling): such a parameter defaults to None."""
    return isinstance(text, str) and optional_inner(text)[0]


_TENSOR_HEADS = ("Tensor", "DLTensor*", "DLTensor", "TensorView")


def is_tensor(text: object) -> bool:
    """Whether a type text names a tensor, or an Optional of one (``Tensor``, ``DLTensor*``,
    ``Tensor([n], float32)``, ``Optional<Tensor>``, ``Optional[Tensor(...)]``)."""
    if not isinstance(text, str):
        return False
    head, args = parse_type(text)
    if head == "Optional" and len(args) == 1:
        head = args[0][0]
    return head in _TENSOR_HEADS
