"""python/kffi/toolchain/_source.py: reading and writing C++ source text for the builds: string
literals, comments, the parameter names of a definition, the export lines load_inline adds, and
what a compiler says of an undeclared name. Best effort: regular expressions, not a C++ parser.
"""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence


def names_undeclared(output: str, name: str) -> bool:
    """Whether a compiler's output says ``name`` is not declared (g++, clang and nvcc's words)."""
    n = re.escape(name)
    return bool(
        re.search(
            rf"['‘`]{n}['’`] (?:was not declared in this scope|has not been declared)"
            rf"|use of undeclared identifier ['‘`]{n}['’`]"
            rf'|identifier "{n}" is undefined',
            output,
        )
    )


_SIMPLE_ESCAPES = {
    "\\": "\\\\",
    '"': '\\"',
    "\n": "\\n",
    "\t": "\\t",
    "\r": "\\r",
    "?": "\\?",
}  # \? keeps "??=" from ever reading as a trigraph


def c_string_literal(text: str) -> str:
    r"""``text`` as a C/C++ string literal whose bytes are its UTF-8 encoding.

    Printable ASCII is kept; every other byte is a 3-digit octal escape (valid in C, C++ and CUDA, and unlike
    ``\u`` escapes it takes any character, including those outside the Basic Multilingual
    Plane). Lone surrogates cannot be encoded: ValueError.
    """
    try:
        data = text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise ValueError(f"kffi.cpp: cannot write {text!r} as UTF-8: {e.reason}") from None
    out = ['"']
    for byte in data:
        ch = chr(byte)
        if ch in _SIMPLE_ESCAPES:
            out.append(_SIMPLE_ESCAPES[ch])
        elif 0x20 <= byte < 0x7F:
            out.append(ch)
        else:
            out.append(f"\\{byte:03o}")
    out.append('"')
    return "".join(out)


_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_TYPE_WORDS = {
    "int",
    "float",
    "double",
    "bool",
    "char",
    "long",
    "short",
    "unsigned",
    "signed",
    "void",
    "auto",
    "const",
    "volatile",
    "size_t",
    "int32_t",
    "int64_t",
    "uint32_t",
    "uint64_t",
    "int8_t",
    "uint8_t",
    "int16_t",
    "uint16_t",
    "TensorView",
    "ConstTensorView",
    "Tensor",
    "Any",
    "String",
    "Array",
    "Optional",
    "Tuple",
    "Shape",
    "Function",
}


def strip_comments(source: str) -> str:
    """C++ source without its comments (each replaced by a space)."""
    src = re.sub(r"/\*.*?\*/", " ", source, flags=re.DOTALL)
    return re.sub(r"//[^\n]*", " ", src)


def _split_top_level(text: str) -> list[str]:
    parts: list[str] = []
    cur: list[str] = []
    depth = 0
    for ch in text:
        if ch in "<([{":
            depth += 1
        elif ch in ">)]}":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return [p.strip() for p in parts]


def _definitions(src: str, name: str) -> list[tuple[re.Match[str], int]]:
    """Where ``src`` (without comments) defines a function ``name``: the match of ``name(`` and the
    index just past the parameter list's ``)``, for each definition (not calls or declarations)."""
    out = []
    for m in re.finditer(r"(?<![\w.:>])" + re.escape(name) + r"\s*\(", src):
        depth, i = 1, m.end()
        while i < len(src) and depth:
            depth += {"(": 1, ")": -1}.get(src[i], 0)
            i += 1
        rest = src[i : i + 200]
        if re.match(r"\s*(const\s*)?(noexcept\s*)?(->\s*[\w:<>,\s*&]+)?\{", rest):
            out.append((m, i))
    return out


def cpp_param_names(source: str, name: str) -> list[str] | None:
    """The parameter names of the definition of ``name`` in C++ source, or None.

    None when they cannot be read (an unnamed parameter, no definition, several different ones).
    Best effort: a regular-expression reading, not a C++ parser.
    """
    src = strip_comments(source)
    found: list[list[str] | None] = []
    for m, i in _definitions(src, name):
        params = src[m.end() : i - 1].strip()
        if params in ("", "void"):
            found.append([])
            continue
        names: list[str] = []
        readable = True  # every parameter named
        for p in _split_top_level(params):
            p = p.split("=", 1)[0].strip()
            p = re.sub(r"\[[^\]]*\]\s*$", "", p).strip()  # float x[4]
            tokens = re.findall(r"[A-Za-z_]\w*|::|[^\sA-Za-z_]", p)
            if (
                len(tokens) < 2
                or not _IDENT.fullmatch(tokens[-1])
                or tokens[-2] == "::"
                or tokens[-1] in _TYPE_WORDS
            ):
                readable = False
                break
            names.append(tokens[-1])
        found.append(names if readable else None)
    if not found or any(f != found[0] for f in found) or found[0] is None:
        return None
    return found[0]


# What a declaration that cpp_declaration writes may name besides its parameters: the words of the
# built-in types, the fixed-width integers, and the namespaces kffi and std.
_DECLARATION_WORDS = frozenset(
    {"void", "bool", "char", "short", "int", "long", "float", "double", "signed", "unsigned"}
    | {"const", "size_t", "std", "kffi"}
    | {f"{u}int{n}_t" for u in ("", "u") for n in (8, 16, 32, 64)}
)


def cpp_declaration(source: str, name: str, types: frozenset[str]) -> str | None:
    """``<return type> name(<parameters>);``: a declaration of the one definition of ``name`` in
    C++ source, for another translation unit to call it; None unless it can be written safely.

    It can when the definition is at namespace scope, is neither a template nor ``static`` or
    ``inline`` (the other unit could not link to it), and names nothing but its parameters, the
    built-in and fixed-width types, ``std``, ``kffi`` and ``types``, so that the declaration means
    the same wherever those are declared.
    """
    src = strip_comments(source)
    src = re.sub(r'"(?:\\.|[^"\\\n])*"', '""', src)  # braces in string literals do not count
    src = re.sub(r"'(?:\\.|[^'\\\n])*'", "''", src)
    src = re.sub(r"^[ \t]*#.*$", " ", src, flags=re.MULTILINE)  # preprocessor lines
    found = _definitions(src, name)
    if len(found) != 1:
        return None
    m, close = found[0]
    if not re.match(r"\s*\{", src[close:]):
        return None  # const, noexcept or a trailing return type: not a plain function
    before = src[: m.start()]
    if before.count("{") != before.count("}"):
        return None  # inside a namespace, class or function
    start = max(before.rfind(";"), before.rfind("}"), before.rfind("{")) + 1
    ret = before[start:].strip()
    params = src[m.end() : close - 1].strip()
    if not ret or re.search(r"[^\w\s:*&]", ret) or re.search(r"[^\w\s:*&,]", params):
        return None  # templates, arrays, default arguments, attributes
    allowed = _DECLARATION_WORDS | types
    if any(w not in allowed for w in re.findall(r"[A-Za-z_]\w*", ret)):
        return None
    if params not in ("", "void"):
        for p in _split_top_level(params):
            words = re.findall(r"[A-Za-z_]\w*", p)
            if len(words) < 2 or any(w not in allowed for w in words[:-1]):
                return None  # unnamed, or a name the other unit may not know
    ret = " ".join(ret.split())
    params = " ".join(params.split())
    return f"{ret} {name}({params});"


def export_lines(functions: Sequence[str] | Mapping[str, str] | None, source: str = "") -> str:
    """KFFI_EXPORT_DOC lines for ``functions`` (a list of names, or {name: docstring}).

    They name the parameters as the definitions in ``source`` do (arg0, arg1, ... where they
    cannot be read).
    """
    if functions is None:
        return ""
    items = functions.items() if isinstance(functions, dict) else ((f, None) for f in functions)
    lines = []
    for fname, doc in items:
        if not isinstance(fname, str) or not re.fullmatch(r"[A-Za-z][A-Za-z0-9_]*", fname):
            raise ValueError(
                f"kffi.cpp.load_inline: function names to export are C++ "
                f"identifiers not starting with '_', got {fname!r}"
            )
        names = cpp_param_names(source, fname) if source else None
        lines.append(
            f"KFFI_EXPORT_DOC({fname}, {fname}, {c_string_literal(doc or '')}, "
            f"{c_string_literal(', '.join(names or []))});"
        )
    return (
        "// Exports added by kffi.cpp.load_inline(functions=...)\n" + "\n".join(lines) + "\n"
        if lines
        else ""
    )
