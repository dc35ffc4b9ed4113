"""python/kffi/toolchain/stubgen.py: write .pyi stubs for the functions of a kffi module (kffi-stubgen).

    kffi-stubgen libadd.so -o add.pyi
    kffi.stubgen(kffi.load_module("libadd.so"), "add.pyi")

Each function becomes a typed ``def`` with Python types (``float | None``, not the C++ text
``Optional<float>`` that metadata holds), its parameter names and defaults, and a docstring
with its signature, documentation and contract. Put the stub beside a Python module that binds
the functions (``add_one = kffi.load_module(...).add_one``) and mypy checks every call.
"""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import keyword
import math
import os
import re
import sys
import unicodedata
from collections.abc import Iterable
from typing import Any

from .. import _core
from .._reflection import _chain, _info, _known, fields_of
from .._type_text import TypeNode, is_optional, parse_type
from ..runtime._api import __version__, load_module
from ..runtime._objects import Module
from .aot import load_object, signature_text

__all__ = ["main", "python_type", "render_stub", "stubgen"]

_INTS = {"int", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"}
_FLOATS = {"float", "float16", "float32", "float64", "double", "bfloat16"}
_SIMPLE = {"bool": "bool", "str": "str", "bytes": "bytes", "None": "None"}
# Reflected object types the stub being written has classes for: {type key: class name}.
_OBJECT_CLASSES: dict[str, str] = {}


def python_type(parsed: TypeNode, *, result: bool = False) -> str:
    """The Python annotation of a parsed type text (kffi.aot.parse_type).

    Parameters take what the converter accepts (``TensorLike``, ``Sequence[int]``); results are what a call returns
    (arrays come back as tuples; a tensor as the caller's array type: ``Any``).
    """
    head, args = parsed
    if head in _INTS:
        return "int"
    if head in _FLOATS:
        return "float"
    if head in _SIMPLE:
        return _SIMPLE[head]
    if head in _OBJECT_CLASSES:
        return _OBJECT_CLASSES[head]
    if head == "Tensor":
        return "Any" if result else "TensorLike"
    if head in ("Stream", "void*"):
        return "Any" if result else "StreamLike"
    if head == "Shape":
        return "tuple[int, ...]" if result else "Sequence[int]"
    if head in ("Function", "Callable"):
        return "Callable[..., Any]"
    inner = [python_type(a, result=result) for a in args]
    if head == "Optional" and len(inner) == 1:
        return inner[0] if inner[0] in ("Any", "None") else f"{inner[0]} | None"
    if head == "Tuple" and inner:
        return f"tuple[{', '.join(inner)}]"
    if head in ("Array", "List") and len(inner) == 1:
        return f"tuple[{inner[0]}, ...]" if result else f"Sequence[{inner[0]}]"
    if head in ("Map", "Dict") and len(inner) == 2:
        return f"Mapping[{inner[0]}, {inner[1]}]"
    return "Any"


def _param_type(p: dict[str, Any]) -> str:
    kind = p.get("kind")
    simple = {"tensor": "TensorLike", "int": "int", "float": "float", "bool": "bool"}
    if kind in simple:
        t = simple[kind]
        return f"{t} | None" if p.get("optional") else t
    if kind == "stream":
        return "StreamLike"
    return python_type(parse_type(p.get("type", "")))


# The default values a stub writes, by the annotation they must fit (a default of another type
# is written `...`: mypy refuses an incompatible default).
_DEFAULT_FITS = {bool: ("bool", "int", "float"), int: ("int", "float"), float: ("float",)}


def _default_text(value: object, annotation: str) -> str:
    base = annotation.removesuffix(" | None")
    if value is None:
        fits = annotation in ("Any", "StreamLike") or annotation.endswith("| None")
    elif not isinstance(value, (bool, int, float, str)):
        fits = False  # a container: written out, it could hold what has no literal
    elif isinstance(value, float) and not math.isfinite(value):
        fits = False  # nan and inf have no literal
    elif annotation == "Any":
        fits = True
    elif isinstance(value, str):
        fits = base == "str"
    else:
        fits = base in _DEFAULT_FITS.get(type(value), ())
    if not fits:
        return "..."
    try:
        return repr(value)
    except ValueError:  # an int too long to convert to text
        return "..."


def _literal_text(text: str) -> str:
    """text, escaped for the inside of a triple-quoted str literal.

    Backslashes and quotes, and every character that would end a line, a comment or a source file early or not survive the
    trip to a UTF-8 file (control characters, line separators, lone surrogates from names and
    texts that were not UTF-8), as escapes. Newlines and tabs stay.
    """
    out = []
    for ch in text:
        if ch in '\\"':
            out.append("\\" + ch)
        elif ch in "\n\t":
            out.append(ch)
        elif unicodedata.category(ch) in ("Cc", "Cs", "Zl", "Zp"):
            out.append(repr(ch)[1:-1])
        else:
            out.append(ch)
    return "".join(out)


def _docstring(text: str, indent: str) -> str:
    lines = _literal_text(text).split("\n")
    out = [f'{indent}"""{lines[0]}']
    out += [f"{indent}{line}".rstrip() for line in lines[1:]]
    if len(lines) > 1:
        out.append(f'{indent}"""')
    else:
        out[-1] += '"""'
    return "\n".join(out)


def _reachable(name: object) -> bool:
    """Whether Python source can name it: an identifier, not a keyword, and NFKC-normal.

    The parser reads identifiers normalised: `mod.\ufb01x` looks up "fix".
    """
    return (
        isinstance(name, str)
        and name.isidentifier()
        and not keyword.iskeyword(name)
        and unicodedata.normalize("NFKC", name) == name
    )


# The names annotations use, and the module each comes from.
_ANNOTATION_NAMES = {
    "Any": "typing",
    "Callable": "collections.abc",
    "Mapping": "collections.abc",
    "Sequence": "collections.abc",
    "StreamLike": "kffi.typing",
    "TensorLike": "kffi.typing",
    "bool": "builtins",
    "bytes": "builtins",
    "float": "builtins",
    "int": "builtins",
    "str": "builtins",
    "tuple": "builtins",
}
_NAME_TOKEN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class _Annotations:
    """Spells annotations with the stub's own names for the types, and keeps the names used.

    An alias where a function of the module has the type's name (`def Any(...)` or
    `def int(...)` would shadow it); the names used make the imports.
    """

    def __init__(self, function_names: Iterable[str]) -> None:
        taken = set(function_names)
        self.alias: dict[str, str] = {}
        for n in _ANNOTATION_NAMES:
            if n in taken:
                a = f"_{n}"
                while a in taken:
                    a = "_" + a
                self.alias[n] = a
        self.used: set[str] = set()

    def __call__(self, annotation: str) -> str:
        def one(m: re.Match[str]) -> str:
            n = m.group(0)
            if n in _ANNOTATION_NAMES:
                self.used.add(n)
                return self.alias.get(n, n)
            return n

        return _NAME_TOKEN.sub(one, annotation)

    def imports(self) -> list[str]:
        lines: list[str] = []
        for module in ("builtins", "collections.abc", "typing", "kffi.typing"):
            names = sorted(n for n in self.used if _ANNOTATION_NAMES[n] == module)
            if module == "builtins":
                names = [n for n in names if n in self.alias]  # the others need no import
            parts = [f"{n} as {self.alias[n]}" if n in self.alias else n for n in names]
            if parts:
                if module == "kffi.typing" and lines:
                    lines.append("")
                lines.append(f"from {module} import {', '.join(parts)}")
        return lines


def _render_function(name: str, meta: dict[str, Any] | None, spell: _Annotations) -> str:
    if not _reachable(name):
        why = (
            "is not a Python identifier"
            if not (isinstance(name, str) and name.isidentifier() and not keyword.iskeyword(name))
            else f"reads as {unicodedata.normalize('NFKC', name)!r} in Python source"
        )
        return f"# {name!r} {why}: reach it as module[{name!r}]\n"
    if meta is None:
        return (
            f"def {name}(*args: {spell('Any')}, **kwargs: {spell('Any')}) -> {spell('Any')}: ...\n"
        )
    params = meta.get("params") or []
    # Trailing parameters with a default may be left out (the call path fills them in); an
    # Optional without an explicit default defaults to None, as kffi.runtime._objects reads it.
    defaults: list[Any] = [None] * len(params)
    has_default = [False] * len(params)
    for i in range(len(params) - 1, -1, -1):
        p = params[i]
        if "default" in p:
            defaults[i], has_default[i] = p["default"], True
        elif p.get("optional") or is_optional(p.get("type")):
            has_default[i] = True
        else:
            break
    names = [p.get("name") or f"arg{i}" for i, p in enumerate(params)]
    # Keyword names the source cannot spell apart (not identifiers, or equal once normalised)
    # make the parameters positional-only.
    positional_only = any(not _reachable(n) for n in names) or len(
        {unicodedata.normalize("NFKC", n) for n in names}
    ) != len(names)
    parts = []
    for i, (n, p) in enumerate(zip(names, params)):
        pname = f"_arg{i}" if positional_only else n
        annotation = _param_type(p)
        text = f"{pname}: {spell(annotation)}"
        if has_default[i]:
            text += f" = {_default_text(defaults[i], annotation)}"
        parts.append(text)
    if positional_only and parts:
        parts.append("/")
    ret = spell(python_type(parse_type(meta.get("return", "None")), result=True))
    doc = signature_text({**meta, "name": name})
    if meta.get("doc"):
        doc += "\n\n" + str(meta["doc"]).strip()
    if meta.get("contract"):
        doc += "\n\nContract: " + str(meta["contract"])
    return f"def {name}({', '.join(parts)}) -> {ret}:\n{_docstring(doc, '    ')}\n    ...\n"


def render_stub(functions: dict[str, Any], module_doc: str | None = None, classes: str = "") -> str:
    """The .pyi text of ``functions`` ({name: metadata dict or None}).

    Valid Python that mypy accepts whatever the names and texts: a name Python source cannot spell (not an
    identifier, or not NFKC-normal) becomes a comment, a function named like a type the stub
    uses gets that type under an alias, and the texts are escaped.
    """
    names = sorted(functions, key=str)
    spell = _Annotations(n for n in names if _reachable(n))
    bodies = [_render_function(n, functions[n], spell) for n in names]
    text = "\n\n".join(bodies)
    header = module_doc or "Stubs of a kffi module's functions."
    lines = [_docstring(f"{header} Generated by kffi-stubgen (kffi {__version__}).", ""), ""]
    if classes:
        spell.used.add("Any")
    lines += spell.imports()
    if classes:
        lines += ["from kffi import Object", "", "", classes.rstrip()]
    return "\n".join(lines) + "\n\n\n" + text


# Moved from kffi/_reflection.py (a runtime module: it must not import this build-layer one).
def stub_classes(
    type_texts: Iterable[object], taken: Iterable[str] = ()
) -> tuple[dict[str, str], str]:
    """For kffi-stubgen: the reflected object types named in type_texts, and their ancestors.

    type_texts are metadata type strings such as "test.Point" or "Array<test.Point>"; the result
    is ({type key: class name}, the classes' .pyi text). A type whose short name is no identifier or
    is taken (a function's name, another type's) is left out (it stays Any).
    """
    import keyword
    import re

    keys: list[str] = []
    for text in type_texts:
        for token in re.findall(r"[A-Za-z_][\w]*(?:\.[\w]+)+", str(text)):
            try:
                index = _core._type_key_to_index(token)
            except KeyError:
                continue
            for at in _chain(index):
                key = _known(at)[0]
                if key not in keys and fields_of(at) is not None:
                    keys.append(key)
    names: dict[str, str] = {}
    used = set(taken) | {"Object"}
    for key in keys:
        name = key.rsplit(".", 1)[-1]
        if name.isidentifier() and not keyword.iskeyword(name) and name not in used:
            names[key] = name
            used.add(name)
    blocks = []
    for key, name in names.items():
        index = _core._type_key_to_index(key)
        parent = _known(index)[1]
        parent_key = _known(parent)[0] if parent >= 0 and _info(parent) else None
        base = names.get(parent_key, "Object") if parent_key is not None else "Object"
        lines = [f"class {name}({base}):", f'    """kffi object type `{key}`."""', ""]
        for fname, ftype, _, writable, _compared in _known(index)[3]:
            ann = python_type(parse_type(ftype), result=True)
            ann = names.get(ftype, ann)
            if writable:
                lines.append(f"    {fname}: {ann}")
            else:
                lines += ["    @property", f"    def {fname}(self) -> {ann}: ...", ""]
        for mname, _ in _known(index)[4]:
            lines.append(f"    def {mname}(self, *args: Any, **kwargs: Any) -> Any: ...")
        blocks.append("\n".join(lines).rstrip() + "\n")
    return names, "\n\n".join(blocks)


def _as_module(module: Module | str | os.PathLike[str]) -> Module:
    if isinstance(module, Module):
        return module
    path = os.fspath(module)
    return load_object(path) if str(path).endswith(".o") else load_module(path)


def stubgen(
    module: Module | str | os.PathLike[str],
    path: str | os.PathLike[str] | None = None,
    *,
    module_doc: str | None = None,
) -> str:
    """The .pyi stub of the functions of ``module``; written to ``path`` too when given.

    ``module``: a kffi.Module, or the path of a library or object file.
    """
    mod = _as_module(module)
    functions = {name: mod.metadata(name) for name in mod.functions()}
    # Classes for the reflected object types the functions take or return (kffi._reflection).
    texts = [p.get("type") for m in functions.values() if m for p in m.get("params") or []]
    texts += [m.get("return") for m in functions.values() if m]
    names, classes = stub_classes(texts, taken=functions)
    _OBJECT_CLASSES.update(names)
    try:
        text = render_stub(
            functions, module_doc or f"Stubs of the kffi module `{mod.name}`.", classes
        )
    finally:
        _OBJECT_CLASSES.clear()
    if path is not None:
        with open(os.fspath(path), "w", encoding="utf-8") as f:
            f.write(text)
    return text


def main(argv: list[str] | None = None) -> int:
    """The kffi-stubgen command (``argv`` defaults to sys.argv[1:]); returns its exit status."""
    import argparse  # only the command needs it: importing kffi stays light

    ap = argparse.ArgumentParser(
        prog="kffi-stubgen",
        description="Write a .pyi stub of the functions a kffi library (.so) or object (.o) "
        "exports: Python types, names, defaults, contracts in the docstrings.",
    )
    ap.add_argument("library", help="a kffi library (.so) or object file (.o)")
    ap.add_argument("-o", "--output", help="the .pyi file to write (default: standard output)")
    args = ap.parse_args(argv)
    try:
        text = stubgen(args.library, args.output)
    except (OSError, RuntimeError, ValueError) as e:
        print(f"kffi-stubgen: {e}", file=sys.stderr)
        return 1
    if args.output is None:
        sys.stdout.write(text)
    return 0


# kffi.stubgen, the public name, is the function above (the face re-exports it): documented as
# kffi's own.
stubgen.__module__ = "kffi"

# Run it as `kffi-stubgen` (the console script): `python -m kffi.toolchain.stubgen` works too, but
# runpy warns, because importing kffi imports this module.
if __name__ == "__main__":
    sys.exit(main())
