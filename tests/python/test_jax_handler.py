"""tests/python/test_jax_handler.py: kffi.jax's prebuilt XLA handler: kffi's declaration of XLA's
FFI C API (python/kffi/jax/_xla_ffi.h) matches jaxlib's header, the handler ships in the package
and runs with no compiler, and a broken install says what is missing."""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

jax = pytest.importorskip("jax")
import kffi
import kffi.cpp
import kffi.jax
from kffi.jax import _glue

HERE = Path(__file__).resolve().parent
OURS = HERE.parent.parent / "python" / "kffi" / "jax" / "_xla_ffi.h"
# Structs that XLA allocates and hands over, which newer XLA may extend past what the handler
# reads: ours declares a prefix of them. Every other struct is declared whole.
PREFIX_STRUCTS = {"XLA_FFI_Api", "XLA_FFI_CallFrame", "XLA_FFI_Metadata"}
_COMPILERS = ("c++", "g++", "cc", "gcc", "clang", "clang++")


# ---- The declaration matches jaxlib's -----------------------------------------------------------


def _declarations(text: str):
    """(structs {name: [fields]}, enumerators [name], struct sizes [name]) declared in text."""
    text = re.sub(r"//[^\n]*", "", text)
    structs, enumerators, sizes = {}, [], []
    for m in re.finditer(r"(?:typedef\s+)?struct\s+(\w+)\s*\{(.*?)\}", text, re.S):
        # A field's name is the last word of its declaration.
        decls = [d.strip() for d in m[2].split(";") if d.strip()]
        structs[m[1]] = [re.search(r"(\w+)$", d)[1] for d in decls]
    for m in re.finditer(r"(?:typedef\s+)?enum\s*(\w*)\s*\{(.*?)\}", text, re.S):
        for name in re.findall(r"(\w+)\s*=", m[2]):
            if name.endswith("_STRUCT_SIZE"):
                sizes.append(name)
            elif not name.startswith("KFFI_"):
                enumerators.append(name)
    return structs, enumerators, sizes


def _jaxlib_header() -> Path:
    path = Path(jax.ffi.include_dir()) / "xla" / "ffi" / "api" / "c_api.h"
    if not path.is_file():
        pytest.skip(f"this jaxlib ships no XLA FFI header ({path})")
    return path


def _compiler() -> str:
    cxx = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++")
    if not cxx or not shutil.which(cxx):
        pytest.skip("no C++ compiler")
    return cxx


def _layout_check(ours_text: str, theirs: Path) -> str:
    """A translation unit that includes jaxlib's header and ours (in namespace ours) and
    static_asserts that every size, offset and value ours declares is jaxlib's.

    A name jaxlib's header lacks is left out: an older jaxlib has fewer data types, API slots and
    argument structs (the handler calls an appended slot only where XLA's struct_size covers it,
    and XLA never sends a data type it does not have), and a slot it names otherwise
    (XLA_FFI_TypeId_Register before API 0.2) is placed by the slots around it.
    """
    structs, enumerators, sizes = _declarations(ours_text)
    theirs_text = re.sub(r"//[^\n]*", "", theirs.read_text())
    api_body = re.search(r"struct XLA_FFI_Api \{(.*?)\};", theirs_text, re.S)
    assert api_body is not None, "jaxlib's header declares no XLA_FFI_Api"

    def known(name: str, text: str = theirs_text) -> bool:
        return re.search(rf"\b{name}\b", text) is not None

    lines = [
        "#include <stddef.h>",
        "#include <stdint.h>",
        '#include "xla/ffi/api/c_api.h"',
        "namespace ours {",
        '#include "_xla_ffi.h"',
        "}  // namespace ours",
    ]

    def check(cond: str, what: str) -> None:
        lines.append(f'static_assert({cond}, "{what} differs from jaxlib\'s");')

    for name, fields in structs.items():
        if not known(name):  # XLA_FFI_DeviceOrdinal_Get_Args before jaxlib 0.6
            continue
        body = api_body[1] if name == "XLA_FFI_Api" else theirs_text
        present = [f for f in fields if known(f, body)]
        if name not in PREFIX_STRUCTS:
            check(f"sizeof(ours::{name}) == sizeof(::{name})", f"the size of {name}")
        elif present == fields:
            check(f"sizeof(ours::{name}) <= sizeof(::{name})", f"the size of {name}")
        for f in present:
            check(
                f"offsetof(ours::{name}, {f}) == offsetof(::{name}, {f})",
                f"the offset of {name}::{f}",
            )
            check(f"sizeof(ours::{name}::{f}) == sizeof(::{name}::{f})", f"the size of {name}::{f}")
    for e in filter(known, enumerators):
        check(f"static_cast<long long>(ours::{e}) == static_cast<long long>(::{e})", e)
        check(f"sizeof(ours::{e}) == sizeof(::{e})", f"the size of {e}'s enum")
    for s in filter(known, sizes):
        check(f"static_cast<size_t>(ours::{s}) == static_cast<size_t>(::{s})", s)
    return "\n".join(lines) + "\n"


def _compile_layout_check(tmp_path: Path, ours_text: str) -> subprocess.CompletedProcess[str]:
    theirs = _jaxlib_header()
    (tmp_path / "_xla_ffi.h").write_text(ours_text)
    tu = tmp_path / "layout_check.cc"
    tu.write_text(_layout_check(ours_text, theirs))
    include = theirs.parents[3]  # .../include, above xla/ffi/api
    cmd = [_compiler(), "-std=c++17", "-fsyntax-only", f"-I{include}", f"-I{tmp_path}", str(tu)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)


def test_the_declaration_covers_what_the_handler_uses():
    structs, enumerators, sizes = _declarations(OURS.read_text())
    assert {"XLA_FFI_Api", "XLA_FFI_CallFrame", "XLA_FFI_Buffer", "XLA_FFI_Metadata"} <= set(
        structs
    )
    assert structs["XLA_FFI_Api"][-1] == "XLA_FFI_DeviceOrdinal_Get"
    assert "XLA_FFI_DataType_F32" in enumerators and "XLA_FFI_Extension_Metadata" in enumerators
    assert "XLA_FFI_CallFrame_STRUCT_SIZE" in sizes


def test_the_declaration_matches_jaxlibs_header(tmp_path):
    r = _compile_layout_check(tmp_path, OURS.read_text())
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize(
    ("old", "new"),
    [
        # Two slots of the API table swapped: each name lands at the other's offset.
        (
            "  XLA_FFI_DeviceMemory_Allocate* XLA_FFI_DeviceMemory_Allocate;\n"
            "  XLA_FFI_DeviceMemory_Free* XLA_FFI_DeviceMemory_Free;\n",
            "  XLA_FFI_DeviceMemory_Free* XLA_FFI_DeviceMemory_Free;\n"
            "  XLA_FFI_DeviceMemory_Allocate* XLA_FFI_DeviceMemory_Allocate;\n",
        ),
        ("  int64_t rank;\n", "  int32_t rank;\n"),  # a field of another width
        ("XLA_FFI_DataType_BF16 = 16,", "XLA_FFI_DataType_BF16 = 17,"),  # a wrong value
    ],
    ids=["api-slots", "field-width", "enum-value"],
)
def test_the_layout_check_fails_on_a_drifted_declaration(tmp_path, old, new):
    text = OURS.read_text()
    assert text.count(old) == 1
    r = _compile_layout_check(tmp_path, text.replace(old, new))
    assert r.returncode != 0
    assert "differs from jaxlib's" in r.stderr


# ---- Shipped, loaded, never built ----------------------------------------------------------------


def test_the_handler_is_the_packages_own():
    lib = Path(kffi.__file__).resolve().parent / "jax" / "lib" / "libkffi_jax_handler.so"
    assert Path(_glue.HANDLER_PATH).resolve() == lib
    assert lib.is_file()
    assert _glue.handler_module().target_count() >= 0


def test_a_missing_handler_says_to_reinstall(monkeypatch, tmp_path):
    missing = str(tmp_path / "lib" / "libkffi_jax_handler.so")
    monkeypatch.setattr(_glue, "HANDLER_PATH", missing)
    with pytest.raises(RuntimeError) as e:
        _glue.handler_module.__wrapped__()  # the loader itself, past the loaded singleton
    assert str(e.value).startswith("kffi.jax: kffi was installed without its JAX handler (no ")
    assert missing in str(e.value) and "reinstall kffi" in str(e.value)


_NO_COMPILER_RUN = r"""
import json, os, shutil, sys
assert not any(shutil.which(c) for c in sys.argv[2].split(",")), "a compiler is on PATH"
import jax, jax.numpy as jnp, numpy as np
jax.config.update("jax_default_device", jax.devices("cpu")[0])
import kffi, kffi.jax
mod = kffi.load_module(sys.argv[1])
x = jnp.arange(6, dtype=jnp.float32)
f = jax.jit(lambda a: kffi.jax.call(
    mod.add_one, a, out_shapes={"y": jax.ShapeDtypeStruct(a.shape, a.dtype)}) * 2)
np.testing.assert_array_equal(f(x), (np.arange(6) + 1) * 2)
with open("/proc/self/maps") as maps:
    loaded = sorted({l.split()[-1] for l in maps if "libkffi_jax_handler" in l})
print(json.dumps({"loaded": loaded, "package": os.path.dirname(kffi.__file__)}))
"""


def _without_compilers(path: str) -> str:
    keep = [
        d
        for d in path.split(os.pathsep)
        if d and not any(os.path.exists(os.path.join(d, c)) for c in _COMPILERS)
    ]
    return os.pathsep.join(keep)


def test_first_call_needs_no_compiler_and_builds_nothing(tmp_path):
    # The kernel library is the test's input, built here (the child has no compiler).
    kernels = kffi.cpp.build("kffi_test_jax_kernels", [str(HERE / "jax_kernels.cc")], quiet=True)
    cache = tmp_path / "cache"
    cache.mkdir()
    env = dict(os.environ)
    env.update(
        PATH=_without_compilers(env.get("PATH", "")),
        CXX="/nonexistent/c++",
        CC="/nonexistent/cc",
        KFFI_CACHE_DIR=str(cache),
        JAX_PLATFORMS="cpu",
    )
    r = subprocess.run(
        [sys.executable, "-c", _NO_COMPILER_RUN, kernels, ",".join(_COMPILERS)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert r.returncode == 0, r.stderr
    seen = json.loads(r.stdout.strip().splitlines()[-1])
    package_lib = os.path.join(seen["package"], "jax", "lib")
    assert seen["loaded"] == [os.path.join(package_lib, "libkffi_jax_handler.so")]
    built = [p for p in cache.rglob("*") if p.suffix == ".so" or ".so." in p.name]
    assert built == []
