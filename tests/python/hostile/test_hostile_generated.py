"""tests/python/hostile/test_hostile_generated.py: generated code is valid whatever the names and
texts it is made from (issue 29, class 7). kffi.stubgen's .pyi compiles and mypy --strict accepts it
for hostile function names (colliding after NFKC normalisation, named like the stub's own imports
and builtins, keywords, not identifiers), hostile texts (quotes, backslashes, text that was not
UTF-8, control characters and line separators, a 3000-deep type) and hostile parameters and
defaults; the AOT header of an export named with any C or C++ keyword is refused at export time,
clearly, and the header of every other tricky name compiles as C++ and as C."""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import itertools
import math
import shutil
import subprocess
import sys

import kffi
import pytest
from kffi._type_text import MAX_TYPE_DEPTH, parse_type
from kffi.aot import (
    _KEYWORDS,
    check_header_compiles,
    check_header_name,
    render_header,
)
from kffi.toolchain.stubgen import python_type, render_stub

needs_mypy = pytest.mark.skipif(
    subprocess.run([sys.executable, "-m", "mypy", "--version"], capture_output=True).returncode
    != 0,
    reason="needs mypy (pip install mypy)",
)

DEEP = 3000
HOSTILE_TEXTS = [
    'ends in a quote"',
    'ends in two quotes""',
    'has """ three quotes """ inside',
    "ends in a backslash\\",
    "has \\n and \\x00 and \\N{DASH} escapes written out",
    "real control characters: \x00 \x01 \x07 \x1b \x7f",
    "line ends of every kind: \r \r\n \x0b \x0c \x1c \x1d \x1e \x85 \u2028 \u2029 end",
    "not UTF-8: \udcff\udcfe and \udc80",  # as surrogateescape decodes such bytes
    "a lone high surrogate \ud800",
    "zero width \u200b and a byte order mark \ufeff",
    "emoji \U0001f600 and combining e\u0301",
    "tabs\tand trailing spaces   ",
    "",
    "#",
    "'''",
]
HOSTILE_TYPES = [
    "Optional<" * DEEP + "int" + ">" * DEEP,
    "Array<" * DEEP + "float" + ">" * DEEP,
    "Tuple[" * DEEP + "int" + "]" * DEEP,
    "Map<str, " * DEEP + "int" + ">" * DEEP,
    "Optional<int",  # unbalanced
    'int"',
    "Array<int>\"'",
    "Optional<\udcff>",
    "\x00",
]
# Function names: collide after NFKC normalisation, shadow the stub's imports and builtins,
# keywords and soft keywords, not identifiers, not NFKC-normal.
HOSTILE_NAMES = [
    "fix",
    "\ufb01x",  # 'fix' after NFKC normalisation
    "\u210c",  # 'H'
    "\uff46\uff55\uff4c\uff4c",  # full width 'full'
    "Any",
    "Sequence",
    "Callable",
    "Mapping",
    "TensorLike",
    "StreamLike",
    "_Any",  # the alias the stub would pick first for Any
    "__Any",
    "int",
    "float",
    "bool",
    "str",
    "bytes",
    "tuple",
    "None",
    "lambda",
    "match",
    "case",
    "type",
    "_",
    "1abc",
    "a-b",
    "",
    "n\udcff",
    "print",
    "kffi",
]


def _meta(name, i):
    types = HOSTILE_TYPES + ["int", "float", "Tensor", "Optional<float>", "Array<int>"]
    texts = HOSTILE_TEXTS
    params = [
        {"name": "x", "type": types[i % len(types)]},
        {"name": "\ufb01x", "type": "int"},  # collides with the next once normalised
        {"name": "fix", "type": "float"},
        {"name": "Any", "type": "Any"},
        {"name": "y", "type": "int", "default": "not an int"},  # mismatched default
        {"name": "z", "type": "float", "default": math.nan},
        {"name": "w", "type": "int", "default": 10**5000},  # too long to write out
        {"name": "v", "type": "str", "default": texts[i % len(texts)]},
        {"name": "u", "type": "Optional<int>", "default": None},
        {"name": "a", "type": "Any", "default": [math.nan, {"k": math.inf}]},  # no literal
        {"name": "b", "type": "Any", "default": -math.inf},
        {"name": "s", "type": "Stream", "kind": "stream", "default": None},
    ]
    if i % 3 == 1:
        params = [{"name": "from", "type": types[(i + 3) % len(types)]}, {"type": "int"}]
    if i % 3 == 2:
        params = [{"name": "ok", "type": types[(i + 5) % len(types)], "default": 1}]
    return {
        "name": name,
        "params": params,
        "return": types[(i + 1) % len(types)],
        "doc": texts[i % len(texts)] + "\n" + texts[(i + 1) % len(texts)],
        "contract": texts[(i + 2) % len(texts)],
    }


def _hostile_functions():
    functions = {name: _meta(name, i) for i, name in enumerate(HOSTILE_NAMES)}
    functions["no_metadata"] = None
    functions["Mapping_no_metadata"] = None
    return functions


def test_parse_type_falls_back_to_any_past_its_depth():
    for text in HOSTILE_TYPES[:4]:
        parsed = parse_type(text)  # no RecursionError
        assert "Any" in python_type(parsed)
    k = MAX_TYPE_DEPTH
    within = "Array<" * k + "int" + ">" * k
    assert python_type(parse_type(within)) == "Sequence[" * k + "int" + "]" * k
    beyond = "Array<" * (k + 1) + "int" + ">" * (k + 1)
    assert python_type(parse_type(beyond)) == "Sequence[" * k + "Any" + "]" * k
    assert parse_type(5) == ("", [])  # not a str: Any


@needs_mypy
def test_stub_of_hostile_names_and_texts_is_valid(tmp_path):
    module_docs = [
        'Stubs of the kffi module `/tmp/a"""b\\c\\`.',
        "Stubs of the kffi module `C:\\new\\table\\`",
        'Stubs of `x"`',
        "Stubs of `\udcff\x00\u2028`",
    ]
    stubs = []
    for i, doc in enumerate(module_docs):
        text = render_stub(_hostile_functions(), doc)
        compile(text, f"hostile{i}.pyi", "exec")
        (tmp_path / f"hostile{i}.pyi").write_text(text, encoding="utf-8")  # no lone surrogate
        stubs.append(f"hostile{i}.pyi")
    text = render_stub(_hostile_functions(), module_docs[0])
    # Each name Python source can spell is a def; every other one a comment that says why.
    assert "def fix(" in text and "def Any(" in text and "def int(" in text
    assert "# '\ufb01x' reads as 'fix' in Python source: reach it as module['\ufb01x']" in text
    assert "# 'lambda' is not a Python identifier" in text
    assert "# 'n\\udcff' is not a Python identifier" in text
    # The module-level docstring is the first statement, whatever the module's path.
    namespace: dict = {}
    exec(compile(text, "hostile.pyi", "exec"), namespace)  # noqa: S102 (the stub under test)
    assert namespace["__doc__"].startswith('Stubs of the kffi module `/tmp/a"""b\\c\\`.')
    assert namespace["fix"].__doc__.startswith("fix(")
    proc = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-error-summary", *stubs],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


@needs_mypy
def test_stub_of_every_pair_of_colliding_names(tmp_path):
    """Each stub-own name (import or builtin) as a function, with and without the alias taken."""
    owned = ["Any", "Callable", "Mapping", "Sequence", "TensorLike", "StreamLike", "int", "float"]
    owned += ["bool", "str", "bytes", "tuple"]
    files = []
    for i, (a, b) in enumerate(itertools.combinations(owned, 2)):
        functions = {
            a: {"name": a, "params": [{"name": "x", "type": "Map<str, Array<int>>"}], "return": b},
            b: {"name": b, "params": [{"name": "s", "type": "Stream"}], "return": "Tensor"},
            "_" + a: None,
            "g": {"name": "g", "params": [{"name": "f", "type": "Callable"}], "return": "bytes"},
        }
        text = render_stub(functions)
        compile(text, f"pair{i}.pyi", "exec")
        (tmp_path / f"pair{i}.pyi").write_text(text)
        files.append(f"pair{i}.pyi")
    proc = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-error-summary", *files],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_stub_of_a_library_whose_path_has_quotes_and_backslashes(tmp_path, module_kernels_path):
    d = tmp_path / 'a"""b\\c\\'
    d.mkdir()
    lib = d / "libkernels.so"
    shutil.copyfile(module_kernels_path, lib)
    text = kffi.stubgen(kffi.load_module(lib))
    namespace: dict = {}
    exec(compile(text, "kernels.pyi", "exec"), namespace)  # noqa: S102 (the stub under test)
    assert str(lib) in namespace["__doc__"]


# ---- the AOT header ---------------------------------------------------------------------------

# Names that are not keywords but that the header must survive (or refuse): macros of the headers
# it includes, names the C library declares at global scope (`stdin` is a macro and a variable),
# its own namespaces and types, names of the standard library, keyword look-alikes.
TRICKY_HEADER_NAMES = [
    "errno",
    "assert",
    "NULL",
    "EOF",
    "offsetof",
    "INT64_MAX",
    "KFFI_INLINE",
    "KFFI_DLL",
    "stdin",
    "FILE",
    "pid_t",
    "va_list",
    "timezone",
    "intptr_t",
    "main",
    "aot",
    "Module",
    "Tensor",
    "String",
    "nullopt",
    "printf",
    "strlen",
    "final",
    "override",
    "import",
    "module",
    "delete_",
    "Delete",
    "new1",
    "cast",
]
# The C library's global names above: their headers cannot compile, so export refuses them.
COLLIDING = {"stdin", "FILE", "pid_t", "va_list", "timezone", "intptr_t"}


def _header_meta(name, pnames=("x", "y")):
    return {
        "name": name,
        "params": [
            {"name": pnames[0], "type": "Tensor", "kind": "tensor"},
            {"name": pnames[1], "type": "int", "default": 3},
        ],
        "return": "int",
        "doc": "ends with a backslash \\\nand \udcff bytes that were not UTF-8 \x00",
        "contract": "x: Tensor([n], float32) \\",
    }


def test_every_keyword_is_refused_clearly_at_export_time():
    keywords = sorted(_KEYWORDS)
    assert {"delete", "new", "class", "and", "xor_eq", "restrict", "typeof", "_Bool"} <= set(
        keywords
    )
    for kw in keywords:
        with pytest.raises(ValueError, match=f"the function name '{kw}' is a C or C\\+\\+ keyword"):
            check_header_name(kw)
        with pytest.raises(ValueError, match="is a C or C\\+\\+ keyword"):
            render_header(_header_meta(kw), "x.o")
    for name in ["kffi", "std", "int64_t", "size_t", "DLDataType"]:
        with pytest.raises(ValueError, match="a name the generated header uses itself"):
            check_header_name(name)


@pytest.mark.skipif(shutil.which("c++") is None or shutil.which("cc") is None, reason="no compiler")
def test_every_other_tricky_name_gives_a_header_that_compiles(tmp_path):
    cxxflags = subprocess.run(
        [sys.executable, "-m", "kffi.config", "--cxxflags"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    include = [f for f in cxxflags if f.startswith("-I")]
    # Keywords as parameter names come out as arg<i>; the names themselves as the function.
    keywords = sorted(_KEYWORDS)
    headers = []
    for i, name in enumerate(TRICKY_HEADER_NAMES):
        pnames = (keywords[i % len(keywords)], TRICKY_HEADER_NAMES[-1 - i])
        if pnames[1] == name:
            pnames = (pnames[0], "y")
        try:
            check_header_name(name)
        except ValueError as e:
            assert name in COLLIDING, e
            continue
        text = render_header(_header_meta(name, pnames), f"h{i}.o")
        # What export does before it writes anything: the header compiles, or a clear refusal.
        if name in COLLIDING:
            with pytest.raises(ValueError, match=f"the header of '{name}' does not compile here"):
                check_header_compiles(text, name)
            continue
        check_header_compiles(text, name)
        header = tmp_path / f"h{i}.h"
        header.write_text(text, encoding="utf-8")
        headers.append(header)
    includes = "".join(f'#include "{h.name}"\n' for h in headers)
    # Everything at once, with the macros the names collide with defined before and after.
    cpp = tmp_path / "all.cc"
    cpp.write_text(
        "#include <cassert>\n#include <cerrno>\n#include <cstdio>\n#include <cstdint>\n"
        + includes
        + "int use() { assert(1); return errno + EOF + static_cast<int>(INT64_MAX % 7); }\n"
        + "int32_t call(kffi::ConstTensorView t) { return int32_t(kffi::aot::Delete(t)); }\n"
    )
    proc = subprocess.run(
        ["c++", "-std=c++17", "-fsyntax-only", *include, str(cpp)],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    # The C part, as C.
    c = tmp_path / "all.c"
    c.write_text("#include <errno.h>\n#include <assert.h>\n" + includes)
    proc = subprocess.run(
        ["cc", "-std=c11", "-fsyntax-only", *include, str(c)], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr[-4000:]


def test_export_refuses_a_keyword_before_building(tmp_path):
    spec = kffi.aot.BuildSpec(
        name="k", source="", cuda=False, contract="", doc="", library_path="", metadata={}
    )
    with pytest.raises(ValueError, match="'delete' is a C or C\\+\\+ keyword"):
        kffi.aot.export(spec, tmp_path / "x.o", function_name="delete")
    assert not (tmp_path / "x.o").exists()


def test_header_names_the_texts_safely():
    header = render_header(_header_meta("fine"), "fine.o")
    for line in header.splitlines():
        assert "\x00" not in line and "\udcff" not in line
        if line.startswith("///"):
            assert not line.endswith("\\")
