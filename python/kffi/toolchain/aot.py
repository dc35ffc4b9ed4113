"""python/kffi/toolchain/aot.py: ahead of time: export compiled functions as objects with a C/C++ header.

    add = kffi.compile(SOURCE, "add_one", kffi.fake_tensor(...), kffi.fake_tensor(...))
    add.export("add_one.o")      # relocatable object + add_one.h (C safe call, typed C++ entry)
    add.export("libadd.so")      # shared library (kffi.load_module)
    kffi.load_object("add_one.o").add_one(a, b)

The object is compiled with ``-DKFFI_EXPORT_TO_SYSTEM_LIB=1`` (kffi/system_lib.h): linked into a
program, its export registers itself in the system library. Its other global definitions (the
kernel function itself, helpers) are made local to the object, so that two exports of the same
source (say with two contracts, or two dtypes) link into one program; ``function_name`` and
``prefix`` name the export itself. docs/aot.md has the whole flow.
"""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .. import _core
from .._type_text import TypeNode, parse_type
from ..runtime._api import __version__
from ..runtime._objects import Module
from . import cpp as _cpp
from ._compilers import _cxx, _run
from ._files import _cache_entry_intact, _keep_record, _locked, _write_atomic

__all__ = ["export", "load_object", "parse_type", "render_header"]

_EXPORT_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]*")
_PREFIX = re.compile(r"[A-Za-z][A-Za-z0-9_]*|")


@dataclass
class BuildSpec:
    """What kffi.compile built: enough to build the same function again as an object."""

    name: str
    source: str
    cuda: bool
    contract: str
    doc: str
    library_path: str
    metadata: dict[str, Any]
    options: dict[str, Any] = field(default_factory=dict)


class Exporter:
    """``compiled.export(path, *, function_name=None, prefix="")``.

    ``path`` ending in ``.o``: a relocatable object plus a header beside it (``x.o`` -> ``x.h``);
    anything else: the shared library (a folder: the library keeps its file name). The export is
    named ``prefix + (function_name or the compiled name)``. Returns the path written.
    """

    __slots__ = ("spec",)

    def __init__(self, spec: BuildSpec) -> None:
        self.spec = spec

    def __call__(
        self, path: _cpp.StrPath, *, function_name: str | None = None, prefix: str = ""
    ) -> str:
        return export(self.spec, path, function_name=function_name, prefix=prefix)

    @property
    def library_path(self) -> str:
        return self.spec.library_path

    def __repr__(self) -> str:
        return f"<export of {self.spec.name!r} ({self.spec.library_path})>"


def _export_name(spec: BuildSpec, function_name: object, prefix: object) -> str:
    name = spec.name if function_name is None else function_name
    if not isinstance(name, str) or not _EXPORT_NAME.fullmatch(name):
        raise ValueError(
            f"export: function_name is a C identifier not starting with '_', got {name!r}"
        )
    if not isinstance(prefix, str) or not _PREFIX.fullmatch(prefix):
        raise ValueError(
            f"export: prefix is empty or a C identifier not starting with '_', got {prefix!r}"
        )
    return prefix + name


def _epilogue(spec: BuildSpec, export_name: str) -> str:
    lit = _cpp.c_string_literal
    return (
        f"KFFI_EXPORT_CONTRACT_DOC({export_name}, {spec.name}, {lit(spec.contract)}, "
        f"{lit(spec.doc)});\n"
    )


def _plan(spec: BuildSpec, export_name: str, extra_flags: Sequence[str] = ()) -> _cpp._Plan:
    opts = spec.options
    cpp_source, cuda_source = (None, spec.source) if spec.cuda else (spec.source, None)
    return _cpp._inline_plan(
        spec.name,
        cpp_source,
        cuda_source,
        _epilogue(spec, export_name),
        _cpp._str_list(opts.get("extra_cflags"), "extra_cflags") + list(extra_flags),
        _cpp._str_list(opts.get("extra_cuda_cflags"), "extra_cuda_cflags") + list(extra_flags),
        opts.get("extra_ldflags"),
        opts.get("extra_include_paths"),
        opts.get("build_directory"),
        ("kffi/kffi.h",),
        opts.get("depends"),
    )


def _copy(src: str, dest: str) -> None:
    tmp = f"{dest}.tmp-{os.getpid()}"
    shutil.copyfile(src, tmp)
    shutil.copymode(src, tmp)
    os.replace(tmp, dest)


def export(
    spec: BuildSpec, path: _cpp.StrPath, *, function_name: str | None = None, prefix: str = ""
) -> str:
    """Writes the compiled function of ``spec`` to ``path``; see :class:`Exporter`."""
    export_name = _export_name(spec, function_name, prefix)
    dest = os.fspath(path)
    if dest.endswith(".o"):
        check_header_name(export_name)  # before anything is built
    if not dest.endswith(".o"):
        library = spec.library_path
        if export_name != spec.name:
            plan = _plan(spec, export_name)
            library = _cpp._build(
                plan, bool(spec.options.get("verbose")), spec.options.get("quiet")
            )
        if os.path.isdir(dest):
            dest = os.path.join(dest, os.path.basename(library))
        _copy(library, dest)
        return dest
    obj = build_object(spec, export_name)
    meta = dict(spec.metadata)
    meta["name"] = export_name
    text = render_header(meta, os.path.basename(dest))
    check_header_compiles(text, export_name, spec)
    _copy(obj, dest)
    _write_atomic(os.path.abspath(dest[:-2] + ".h"), text)
    return dest


def check_header_compiles(text: str, name: str, spec: BuildSpec | None = None) -> None:
    """ValueError naming the first compiler error unless the header ``text`` compiles as C++.

    It is compiled with the C++ compiler kffi builds with: a name that is fine as a C identifier may still collide
    with what the C and C++ libraries declare at global scope on this platform (`stdin`,
    `FILE`, `pid_t`), which check_header_name cannot know. Checked once per header text (a
    marker in the build cache).
    """
    import hashlib

    cxx = _cxx()
    digest = hashlib.sha256(
        "\0".join([text, _cpp._kffi_identity(), *cxx.argv, cxx.version or ""]).encode(
            "utf-8", "surrogateescape"
        )
    ).hexdigest()[:24]
    marker = os.path.join(_cpp.cache_dir(), ".headers", f"{digest}.ok")
    if os.path.exists(marker):
        return
    os.makedirs(os.path.dirname(marker), exist_ok=True)
    fd, path = tempfile.mkstemp(dir=os.path.dirname(marker), prefix=".check-", suffix=".cc")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        cmd = [*cxx.argv, *_cpp._config_flags()["cxx"], "-fsyntax-only", path]
        if spec is not None:
            include_paths = spec.options.get("extra_include_paths") or []
            cmd += ["-I" + os.path.abspath(os.fspath(p)) for p in include_paths]
        proc = _run(cmd)
    finally:
        os.unlink(path)
    if proc.returncode != 0:
        errors = [line for line in proc.stdout.splitlines() if "error" in line]
        first = errors[0].split("error:", 1)[-1].strip() if errors else proc.stdout.strip()
        raise ValueError(
            f"export: the header of {name!r} does not compile here: {first}; the name likely "
            f"collides with a declaration of the C or C++ library at global scope: export it "
            f"under another name (function_name=..., prefix=...)"
        )
    _write_atomic(marker, "")


# ---------------------------------------------------------------------------------------------
# The object.
# ---------------------------------------------------------------------------------------------


def build_object(spec: BuildSpec, export_name: str) -> str:
    """Compiles ``spec`` with the export named ``export_name`` into a relocatable object.

    Cached like kffi.cpp builds; returns its path.
    """
    flags = ["-DKFFI_EXPORT_TO_SYSTEM_LIB=1"]
    plan = _plan(spec, export_name, flags)
    if len(plan.sources) != 1:
        raise RuntimeError("kffi export: an object is built from one source")
    out = plan.output[: -len(".so")] + ".o"
    if _cache_entry_intact(out):
        return out
    quiet = _cpp._quiet(spec.options.get("quiet"))
    verbose = bool(spec.options.get("verbose"))
    with _locked(plan, quiet):
        if _cache_entry_intact(out):
            return out
        if not quiet:
            print(
                f"kffi: building object {export_name!r} in {plan.dir}", file=sys.stderr, flush=True
            )
        src = plan.sources[0]
        src_path = os.path.join(plan.dir, src.filename)
        _write_atomic(src_path, src.text)
        fd, tmp = tempfile.mkstemp(dir=plan.dir, prefix=".obj-", suffix=".o")
        os.close(fd)
        try:
            _run_checked(plan, plan.compile_command(src, src_path, tmp), verbose)
            _localize(plan, tmp, verbose)
            os.chmod(tmp, 0o644)
            os.replace(tmp, out)
            _keep_record(out)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise
    return out


def _run_checked(plan: _cpp._Plan, cmd: list[str], verbose: bool) -> str:
    if verbose:
        print("kffi:", " ".join(cmd), file=sys.stderr, flush=True)
    proc = _run(cmd, cwd=plan.dir)
    if proc.returncode != 0:
        raise _cpp.BuildError(plan.name, cmd, proc.stdout, proc.returncode, plan.dir)
    return proc.stdout


def _tool(name: str) -> str:
    found = shutil.which(os.environ.get(name.upper()) or name)
    if found is None:
        raise RuntimeError(f"kffi export: cannot find {name!r} (binutils; set {name.upper()})")
    return found


def _localize(plan: _cpp._Plan, obj: str, verbose: bool) -> None:
    """Makes every strong global definition of obj local but the `__kffi_*` exports.

    Two objects built from the same source then link into one program. Weak and unique definitions (inline
    functions, templates, the ABI record) stay: the linker keeps one of each.
    """
    out = subprocess.run(
        [_tool("nm"), "-P", "-g", "--defined-only", obj],
        capture_output=True,
        text=True,
        check=False,
    )
    if out.returncode != 0:
        raise _cpp.BuildError(plan.name, ["nm", obj], out.stderr, out.returncode, plan.dir)
    names = []
    for line in out.stdout.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[1] in "TDBRGS" and not parts[0].startswith("__kffi_"):
            names.append(parts[0])
    if not names:
        return
    with tempfile.NamedTemporaryFile("w", dir=plan.dir, suffix=".syms", delete=False) as f:
        f.write("\n".join(names) + "\n")
    try:
        _run_checked(plan, [_tool("objcopy"), f"--localize-symbols={f.name}", obj], verbose)
    finally:
        os.unlink(f.name)


def load_object(path: str | os.PathLike[str]) -> Module:
    """Loads a relocatable object with kffi exports (``compiled.export("x.o")``) as a Module.

    The object is linked once with the system's C++ driver into a shared object, cached under a
    hash of the object's bytes (docs/aot.md), then loaded like :func:`kffi.load_module`.
    """
    path = os.fspath(path)
    if isinstance(path, bytes):
        path = os.fsdecode(path)
    if "\0" in path:
        raise ValueError(f"Cannot load object: the path {path!r} contains a NUL byte")
    if not os.path.exists(path):
        raise FileNotFoundError(f"Cannot load kffi object: no such file {path!r}")
    return _core.load_object(os.path.abspath(path))


# ---------------------------------------------------------------------------------------------
# The header.
# ---------------------------------------------------------------------------------------------

_CPP_INT = {
    "int": "int64_t",
    "int64": "int64_t",
    "int32": "int32_t",
    "int16": "int16_t",
    "int8": "int8_t",
    "uint64": "uint64_t",
    "uint32": "uint32_t",
    "uint16": "uint16_t",
    "uint8": "uint8_t",
}
_CPP_SIMPLE = {
    "bool": "bool",
    "float": "double",
    "float64": "double",
    "float32": "float",
    "Tensor": "kffi::ConstTensorView",
    "str": "kffi::String",
    "bytes": "kffi::Bytes",
    "void*": "void*",
    "Stream": "void*",
    "dtype": "DLDataType",
    "Device": "DLDevice",
    "Shape": "kffi::Shape",
    "Function": "kffi::Function",
    "Callable": "kffi::Function",
}
_CPP_RETURN = {"Tensor": "kffi::Tensor", "Any": "kffi::Any"}


def cpp_type(parsed: TypeNode, result: bool = False) -> str:
    """The C++ type of a parsed type text (parameters: views; results: owned values)."""
    head, args = parsed
    if result and head in _CPP_RETURN:
        return _CPP_RETURN[head]
    if head == "None":
        return "void" if result else "std::nullptr_t"
    if head in _CPP_INT:
        return _CPP_INT[head]
    if head in _CPP_SIMPLE:
        return _CPP_SIMPLE[head]
    inner = [cpp_type(a, result) for a in args]
    if head == "Optional" and len(inner) == 1:
        return f"kffi::Optional<{inner[0]}>"
    if head in ("Array", "List") and len(inner) == 1:
        return f"kffi::{head}<{inner[0]}>"
    if head in ("Map", "Dict") and len(inner) == 2:
        return f"kffi::{head}<{inner[0]}, {inner[1]}>"
    if head == "Tuple" and inner:
        return f"kffi::Tuple<{', '.join(inner)}>"
    return "kffi::Any"


# Names a header's C++ entry point cannot have. The C and C++ keywords (C23, C++23, the
# alternative operator tokens, GNU's `typeof`): `inline void delete(...)` does not compile.
_KEYWORDS = frozenset(
    """
    alignas alignof and and_eq asm auto bitand bitor bool break case catch char char8_t char16_t
    char32_t class compl concept const consteval constexpr constinit const_cast continue co_await
    co_return co_yield decltype default delete do double dynamic_cast else enum explicit export
    extern false float for friend goto if inline int long mutable namespace new noexcept not
    not_eq nullptr operator or or_eq private protected public register reinterpret_cast requires
    restrict return short signed sizeof static static_assert static_cast struct switch template
    this thread_local throw true try typedef typeid typename typeof typeof_unqual union unsigned
    using virtual void volatile wchar_t while xor xor_eq _Alignas _Alignof _Atomic _BitInt _Bool
    _Complex _Decimal128 _Decimal32 _Decimal64 _Generic _Imaginary _Noreturn _Static_assert
    _Thread_local
    """.split()
)
# The names the header spells at global scope (its namespaces and the types of its entry point):
# `using kffi::aot::int64_t;` would collide with them.
_HEADER_NAMES = frozenset(
    """
    kffi std size_t ptrdiff_t nullptr_t int8_t int16_t int32_t int64_t uint8_t uint16_t uint32_t
    uint64_t DLDataType DLDevice DLTensor KFFIAny KFFIByteArray KFFIObjectHandle
    """.split()
)
_C_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def check_header_name(name: str) -> None:
    """ValueError unless ``name`` can name the C++ entry point of a header (render_header).

    That is a C identifier that is neither a C or C++ keyword nor a name the header itself needs.
    """
    if not isinstance(name, str) or not _C_IDENTIFIER.fullmatch(name):
        raise ValueError(f"export: the function name {name!r} is not a C identifier")
    if name in _KEYWORDS:
        raise ValueError(
            f"export: the function name {name!r} is a C or C++ keyword: the header's C++ entry "
            f"point (kffi::aot::{name}) cannot be named so; export it under another name "
            f"(function_name=..., prefix=...)"
        )
    if name in _HEADER_NAMES:
        raise ValueError(
            f"export: the function name {name!r} is a name the generated header uses itself "
            f"(`using kffi::aot::{name};` would collide with it); export it under another name "
            f"(function_name=..., prefix=...)"
        )


def _comment_safe(text: object) -> str:
    """Text for a comment, so that the comment ends where the header ends it.

    Control characters (line ends included) and lone surrogates (texts that were not UTF-8) become
    escapes.
    """
    out = []
    for ch in str(text):
        cat = unicodedata.category(ch)
        out.append(repr(ch)[1:-1] if cat in ("Cc", "Cs", "Zl", "Zp") and ch != "\t" else ch)
    return "".join(out)


def _c_comment(text: str) -> str:
    return _comment_safe(text).replace("*/", "* /")


def _line_comment(text: str) -> str:
    # A backslash at the end of a // comment would splice the next line into it.
    out = _comment_safe(text)
    return out + " " if out.endswith("\\") else out


def _cpp_default(value: object) -> str | None:
    if value is None:
        return "std::nullopt"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return f"int64_t{{{value}}}"
    if isinstance(value, float) and value == value and abs(value) != float("inf"):
        return repr(value)
    return None


def signature_text(meta: dict[str, Any]) -> str:
    params = meta.get("params") or []
    rendered = ", ".join(f"{p.get('name')}: {p.get('type')}" for p in params)
    return f"{meta.get('name')}({rendered}) -> {meta.get('return', 'None')}"


def render_header(meta: dict[str, Any], object_name: str) -> str:
    """The header of an exported object.

    The C declarations of its safe-call and metadata symbols, and (for C++) a typed inline entry
    point that throws kffi::Error, with the signature and contract as its doc comment.
    """
    name = meta["name"]
    check_header_name(name)
    guard = "KFFI_AOT_" + re.sub(r"[^A-Za-z0-9]", "_", name).upper() + "_H_"
    params = meta.get("params") or []
    # Parameter names as C++ spells them: one that cannot be (not an identifier, a keyword, a
    # name of the header, or a repeat) is arg<i>.
    pnames: list[str] = []
    for i, p in enumerate(params):
        n = p.get("name")
        ok = isinstance(n, str) and _C_IDENTIFIER.fullmatch(n) and not n.startswith("__")
        if not ok or n in _KEYWORDS or n in _HEADER_NAMES or n == name or n in pnames:
            n = f"arg{i}"
            while n in pnames or n == name or any(q.get("name") == n for q in params):
                n += "_"
        pnames.append(n)
    # The C++ parameters: a contract's EnvStream is no argument (the metadata lists call
    # arguments only). Defaults only where every later parameter has one too.
    cpp_params = []
    defaults: list[str | None] = [None] * len(params)
    for i in range(len(params) - 1, -1, -1):
        p = params[i]
        if "default" not in p:
            break
        defaults[i] = _cpp_default(p["default"])
        if defaults[i] is None:
            break
    for p, pname, default in zip(params, pnames, defaults):
        ctype = cpp_type(parse_type(p.get("type", "")))
        if p.get("kind") == "tensor" and not p.get("optional"):
            ctype = "kffi::ConstTensorView"
        if p.get("mutable"):  # the function may write it: only writable memory (kffi/tensor.h)
            ctype = ctype.replace("kffi::ConstTensorView", "kffi::TensorView")
        cpp_params.append(f"{ctype} {pname}" + (f" = {default}" if default else ""))
    ret = cpp_type(parse_type(meta.get("return", "None")), result=True)
    args = ", ".join(pnames)
    call = f"kffi::Module::InvokeSafeCall<&__kffi_{name}>({args})"
    body = f"  {call};" if ret == "void" else f"  return {call}.cast<{ret}>();"
    contract = meta.get("contract")
    doc = (meta.get("doc") or "").strip()
    lines = [
        f"/* {name}.h: the C and C++ interface of {object_name}. Generated by kffi {__version__}",
        " * (kffi.compile(...).export); do not edit.",
        " *",
        f" *   {_c_comment(signature_text(meta))}",
    ]
    if contract:
        lines += [" *", " * Contract (checked on every call):", f" *   {_c_comment(contract)}"]
    if doc:
        lines += [" *"] + [f" * {_c_comment(line)}".rstrip() for line in doc.splitlines()]
    lines += [
        " *",
        f" * Link {object_name} into the program together with libkffi (kffi-config --ldflags",
        " * --libs; add -lcudart for CUDA code). At start-up the export registers itself in the",
        f' * system library: kffi::Module::SystemLib().GetFunction("{name}").',
        " */",
        f"#ifndef {guard}",
        f"#define {guard}",
        "",
        "#include <kffi/c_api.h>",
        "",
        "#ifdef __cplusplus",
        'extern "C" {',
        "#endif",
        "/* The safe call (c_api.h): handle NULL, args borrowed. Returns 0 with the result in",
        " * *result (owned; None for no result), or -1 with the error raised",
        " * (KFFIErrorMoveFromRaised). */",
        f"int __kffi_{name}(void* handle, const KFFIAny* args, int32_t num_args, KFFIAny* result);",
        "/* The metadata: a JSON str (owned) in *result, as Module::GetFunctionMetadata gives it. */",
        f"int __kffi__meta_{name}(void* handle, const KFFIAny* args, int32_t num_args,",
        "                    KFFIAny* result);",
        "#ifdef __cplusplus",
        '}  /* extern "C" */',
        "",
        "#include <kffi/container/containers.h>",
        "#include <kffi/module.h>",
        "#include <kffi/optional.h>",
        "#include <kffi/tensor.h>",
        "",
        "",
        "/* A macro of the same name (errno, assert, NULL, ...) would rewrite the entry point and",
        " * its parameters: set aside while they are declared. */",
        *(f'#pragma push_macro("{n}")\n#undef {n}' for n in dict.fromkeys([name, *pnames])),
        f"/// {_line_comment(signature_text(meta))}",
    ]
    if contract:
        lines.append(f"/// Contract: {_line_comment(contract)}")
    lines += [
        "/// Throws kffi::Error (TypeError, ValueError, ...) when the arguments do not fit.",
        "/// (It has the kernel's name and parameters; its namespace keeps its symbol apart from",
        "/// the kernel's own, so a program that also has the kernel never calls it unchecked.)",
        "namespace kffi::aot {",
        f"inline {ret} {name}({', '.join(cpp_params)}) {{",
        body,
        "}",
        "}  // namespace kffi::aot",
        f"using kffi::aot::{name};",
        *(f'#pragma pop_macro("{n}")' for n in reversed(dict.fromkeys([name, *pnames]))),
        "#endif /* __cplusplus */",
        "",
        f"#endif /* {guard} */",
        "",
    ]
    return "\n".join(lines)
