"""python/kffi/contract/_compile.py: kffi.compile: a C++/CUDA function compiled from Python with
a contract declared by fake arguments (_fakes.py), rendered to text (_render.py) and checked in
compiled code on every call."""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterable, Mapping
from typing import Any

from .. import libinfo
from .._lazy import lazy
from ..runtime._api import load_module
from ..runtime._objects import Function
from ..toolchain import aot as _aot
from ..toolchain import cpp as _cpp
from ..toolchain._source import cpp_declaration, names_undeclared, strip_comments
from ._fakes import FakeTensor
from ._render import render_contract

# ---------------------------------------------------------------------------------------------
# kffi.compile
# ---------------------------------------------------------------------------------------------


@lazy
def has_contract_support() -> bool:
    """Whether the installed headers define KFFI_EXPORT_CONTRACT (kffi/contract_export.h; in
    kffi/contract.h in older installations)."""
    inc = os.path.join(libinfo.include_dir(), "kffi")
    for header in ("contract_export.h", "contract.h"):
        path = os.path.join(inc, header)
        if not os.path.exists(path):
            continue
        with open(path, encoding="utf-8", errors="replace") as f:
            if "#define KFFI_EXPORT_CONTRACT" in f.read():
                return True
    return False


_OPTION_KEYS = {
    "cuda",
    "extra_cflags",
    "extra_cuda_cflags",
    "extra_ldflags",
    "extra_include_paths",
    "build_directory",
    "verbose",
    "quiet",
    "doc",
    "depends",
}


def _is_cuda_source(source: str) -> bool:
    return re.search(r"__global__|<<<", strip_comments(source)) is not None


# What a CUDA source may name in namespace kffi to compile against kffi/tensor_view.h alone, and
# the parameter types its function may take there (tests/cpp/core/test_tensor_view_header.cc
# compiles each against that header alone).
_VIEW_HEADER_NAMES = frozenset(
    {"TensorView", "ConstTensorView", "IntArrayView", "StrideArray", "TensorAccessor", "dtypes"}
    | {"DataTypeBits", "DataTypeBytes", "DataTypeIs", "TryDataTypeStorageBytes"}
    | {"TryGetDataSize", "kMaxTensorNdim"}
)
_VIEW_PARAM_TYPES = frozenset({"TensorView", "ConstTensorView"})


def _split_cuda_declaration(source: str, name: str) -> str | None:
    """The declaration of ``name`` for a C++ file that exports it, when the CUDA source can be
    compiled against kffi/tensor_view.h alone; None when it needs the whole of <kffi/kffi.h>.

    nvcc parses every header three times (cudafe++, cicc and the host compiler): <kffi/kffi.h>
    and the contract's export cost it about as much as the kernel file itself, the view header
    next to nothing. So a CUDA source that names nothing else of kffi is compiled with that header
    alone, and its contract export goes into a C++ file that g++ compiles beside it.
    """
    src = strip_comments(source)
    if re.search(r"#\s*include\s*[<\"]kffi/|\bKFFI_\w+|\busing\s+namespace\s+kffi\b", src):
        return None
    if any(n not in _VIEW_HEADER_NAMES for n in re.findall(r"\bkffi\s*::\s*(\w+)", src)):
        return None
    return cpp_declaration(source, name, _VIEW_PARAM_TYPES)


def compile(
    source: str,
    name: str,
    *fake_args: Any,
    options: Mapping[str, Any] | None = None,
    param_names: Iterable[str] | None = None,
    outputs: FakeTensor | Iterable[FakeTensor] | None = None,
    **build_options: Any,
) -> Function:
    """Compiles C++ (or CUDA) ``source`` defining the function ``name`` and exports it with the
    contract that ``fake_args`` declare. Returns the loaded kffi.Function (cached on disk like
    :func:`kffi.cpp.build`), which takes torch / NumPy / JAX / CuPy arrays directly and checks
    each call in compiled code.

    The C++ function takes ``kffi::ConstTensorView`` for the tensors it reads and
    ``kffi::TensorView`` for the ones it writes (``mut=True``), ``int32_t``/``int64_t``/``float``/
    ``double``/``bool`` for scalars, ``kffi::Optional<T>`` and ``kffi::Tuple<...>``, and
    ``void* stream`` where a :func:`fake_stream` stands (the environment stream, or with
    ``env=False`` an explicit stream argument).

    ``param_names``: names in the signature and messages (default: read from the C++
    definition, else arg0, arg1, ...). ``outputs``: output fake tensors whose shapes are expressions
    of the inputs' symbols (metadata for framework integration). ``options``: a dict of
    ``cuda`` (default: True when the source has ``__global__``), ``extra_cflags``,
    ``extra_cuda_cflags``, ``extra_ldflags``, ``extra_include_paths``, ``build_directory``,
    ``verbose``, ``quiet``, ``doc``, ``depends``. They may be given as keywords too, the way
    :func:`kffi.cpp.build` takes them (``kffi.compile(src, "f", x, extra_cflags=["-O3"])``);
    an option given both ways is a TypeError.

    The result has ``.contract`` (the text), ``.library_path``, ``.export(path)`` (copies the
    library; ``kffi.load_module(path)`` gives the function back with its contract) and a
    ``__signature__`` for ``help()``.
    """
    if not isinstance(source, str):
        raise TypeError(f"kffi.compile: source is C++ text, got {type(source).__name__}")
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z][A-Za-z0-9_]*", name):
        raise ValueError(
            f"kffi.compile: name is a C++ identifier not starting with '_', got {name!r}"
        )
    options = dict(options or {})
    twice = sorted(set(options) & set(build_options))
    if twice:
        raise TypeError(f"kffi.compile: options {twice} given both in options= and as keywords")
    options.update(build_options)
    unknown = set(options) - _OPTION_KEYS
    if unknown:
        raise TypeError(
            f"kffi.compile: unknown options {sorted(unknown)}; known: {sorted(_OPTION_KEYS)}"
        )
    if not has_contract_support():
        raise RuntimeError(
            "kffi.compile needs KFFI_EXPORT_CONTRACT (kffi/contract_export.h), which "
            "this kffi installation does not have"
        )
    cuda = options.get("cuda")
    if cuda is None:
        cuda = _is_cuda_source(source)
    if param_names is None:
        guessed = _cpp.cpp_param_names(source, name)
        if guessed is not None and len(guessed) == len(fake_args):
            param_names = guessed
    text = render_contract(
        *fake_args,
        param_names=param_names,
        outputs=outputs,
        default_device="cuda" if cuda else "cpu",
    )
    doc = options.get("doc") or ""
    epilogue = (
        f"KFFI_EXPORT_CONTRACT_DOC({name}, {name}, {_cpp.c_string_literal(text)}, "
        f"{_cpp.c_string_literal(doc)});\n"
    )
    path = _build_split(source, name, epilogue, options) if cuda else None
    cpp_source, cuda_source = (None, source) if cuda else (source, None)
    try:
        if path is None:
            path = _build_inline(
                name,
                cpp_source,
                cuda_source,
                epilogue,
                options,
                _cpp._str_list(options.get("extra_ldflags"), "extra_ldflags"),
                ("kffi/kffi.h",),  # the contract compiler too
            )
    except _cpp.BuildError as e:
        # The export line names the function; a misspelt name fails inside the macro, where the
        # compiler's words point at kffi's headers. Say what is wrong first.
        if not names_undeclared(e.output, name):
            raise
        raise e.with_summary(
            f"kffi.compile: the source defines no function named {name!r} (the second "
            "argument names the C++ function to export: check its spelling, and that the source "
            "defines it at namespace scope)"
        ) from None
    func = load_module(path)[name]
    func.contract = text
    func.library_path = path
    func.export = (
        _aot.Exporter(  # .o: object + header; else the shared library (kffi/toolchain/aot.py)
            _aot.BuildSpec(name, source, cuda, text, doc, path, func._metadata, options)
        )
    )
    return func


def _build_inline(
    name: str,
    cpp_source: str | None,
    cuda_source: str | None,
    epilogue: str,
    options: Mapping[str, Any],
    extra_ldflags: list[str],
    pre_includes: tuple[str, ...],
    announce_failure: bool = True,
) -> str:
    return _cpp.build_inline(
        name,
        cpp_source,
        cuda_source,
        epilogue,
        extra_cflags=options.get("extra_cflags"),
        extra_cuda_cflags=options.get("extra_cuda_cflags"),
        extra_ldflags=extra_ldflags,
        extra_include_paths=options.get("extra_include_paths"),
        build_directory=options.get("build_directory"),
        verbose=bool(options.get("verbose")),
        quiet=options.get("quiet"),
        pre_includes=pre_includes,
        depends=options.get("depends"),
        announce_failure=announce_failure,
    )


def _build_split(source: str, name: str, epilogue: str, options: Mapping[str, Any]) -> str | None:
    """Builds a CUDA source against kffi/tensor_view.h, with its export in a C++ file compiled
    beside it (see _split_cuda_declaration); None when it cannot, and the caller builds it whole.
    A source the split cannot build (it named something the view header lacks) is built whole
    instead, which also gives its errors as the whole header gives them."""
    declaration = _split_cuda_declaration(source, name)
    if declaration is None:
        return None
    exporter = (
        "// The export of the CUDA file beside this one, which kffi.compile built against\n"
        "// kffi/tensor_view.h alone.\n"
        f"#include <kffi/kffi.h>\n\n{declaration}\n"
    )
    ldflags = _cpp._str_list(options.get("extra_ldflags"), "extra_ldflags")
    if sys.platform.startswith("linux"):
        ldflags.append("-Wl,--no-undefined")  # a declaration that is not the definition fails here
    try:
        return _build_inline(
            name, exporter, source, epilogue, options, ldflags, ("kffi/tensor_view.h",), False
        )
    except _cpp.BuildError:
        return None
