"""tests/python/kffi_jax/test_jax_handler.py: kffi.jax's prebuilt XLA handler: kffi's declaration of
XLA's FFI C API (python/kffi/jax/_xla_ffi.h) matches jaxlib's header, the handler ships in the
package and runs with no compiler, and a broken install says what is missing."""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import ctypes
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
from kffi.runtime.stream import get_current_stream

HERE = Path(__file__).resolve().parent
OURS = HERE.parents[2] / "python" / "kffi" / "jax" / "_xla_ffi.h"
# Structs that XLA allocates and hands over, which newer XLA may extend past what the handler
# reads: ours declares a prefix of them. Every other struct is declared whole.
PREFIX_STRUCTS = {"XLA_FFI_Api", "XLA_FFI_CallFrame", "XLA_FFI_Metadata"}
_COMPILERS = ("c++", "g++", "cc", "gcc", "clang", "clang++")


# ---- The declaration matches jaxlib's ------------------------------------------------------------


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


# ---- The handler's side of the API version, driven through a mock XLA ----------------------------
#
# XLA only ever shows the handler its own version; these calls hand it other ones (and a table
# without XLA_FFI_DeviceOrdinal_Get, as jaxlib 0.5 has) through ctypes mirrors of _xla_ffi.h.


class _ExtBase(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("type", ctypes.c_int), ("next", ctypes.c_void_p)]


class _Version(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("extension_start", ctypes.c_void_p),
        ("major_version", ctypes.c_int),
        ("minor_version", ctypes.c_int),
    ]


class _Metadata(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("api_version", _Version),
        ("traits", ctypes.c_uint32),
    ]


class _MetadataExt(ctypes.Structure):
    _fields_ = [("extension_base", _ExtBase), ("metadata", ctypes.POINTER(_Metadata))]


class _List(ctypes.Structure):  # XLA_FFI_Args and XLA_FFI_Rets
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("extension_start", ctypes.c_void_p),
        ("size", ctypes.c_int64),
        ("types", ctypes.c_void_p),
        ("items", ctypes.c_void_p),
    ]


class _Attrs(ctypes.Structure):
    _fields_ = [*_List._fields_, ("attrs", ctypes.c_void_p)]


class _Frame(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("extension_start", ctypes.c_void_p),
        ("api", ctypes.c_void_p),
        ("ctx", ctypes.c_void_p),
        ("stage", ctypes.c_int),
        ("args", _List),
        ("rets", _List),
        ("attrs", _Attrs),
    ]


class _ErrorCreateArgs(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("extension_start", ctypes.c_void_p),
        ("message", ctypes.c_char_p),
        ("errc", ctypes.c_int),
    ]


class _CtxArgs(ctypes.Structure):  # XLA_FFI_Stream_Get_Args, XLA_FFI_DeviceOrdinal_Get_Args
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("extension_start", ctypes.c_void_p),
        ("ctx", ctypes.c_void_p),
        ("out", ctypes.c_void_p),  # void* stream, or int32_t device_ordinal in its first bytes
    ]


_ERROR_CREATE = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.POINTER(_ErrorCreateArgs))
_GETTER = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.POINTER(_CtxArgs))
_SLOTS = [  # XLA_FFI_Api's function slots, in order (_xla_ffi.h)
    "Error_Create", "Error_GetMessage", "Error_Destroy", "Handler_Register", "Stream_Get",
    "Type_Register", "ExecutionContext_Get", "State_Set", "State_Get", "DeviceMemory_Allocate",
    "DeviceMemory_Free", "ThreadPool_Schedule", "ThreadPool_NumThreads", "Future_Create",
    "Future_SetAvailable", "Future_SetError", "RunId_Get", "DeviceOrdinal_Get",
]  # fmt: skip


class _Api(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("extension_start", ctypes.c_void_p),
        ("api_version", _Version),
        ("internal_api", ctypes.c_void_p),
        *[(s, ctypes.c_void_p) for s in _SLOTS],
    ]


class _MockXla:
    """An XLA_FFI_Api of a given version whose functions record what the handler asks."""

    def __init__(self, major, minor, *, with_device_ordinal=True):
        self.errors, self.asked = [], []

        def error_create(args):
            self.errors.append((args.contents.errc, args.contents.message.decode()))
            return 0x1000 + len(self.errors)  # an opaque error the handler only returns

        def stream_get(args):
            self.asked.append("stream")
            args.contents.out = 0x5EED
            return None

        def device_ordinal_get(args):
            self.asked.append("device_ordinal")
            args.contents.out = 1
            return None

        self._callbacks = [
            _ERROR_CREATE(error_create),
            _GETTER(stream_get),
            _GETTER(device_ordinal_get),
        ]
        self.api = _Api(api_version=_Version(ctypes.sizeof(_Version), None, major, minor))
        self.api.Error_Create = ctypes.cast(self._callbacks[0], ctypes.c_void_p).value
        self.api.Stream_Get = ctypes.cast(self._callbacks[1], ctypes.c_void_p).value
        last = "DeviceOrdinal_Get" if with_device_ordinal else "Stream_Get"
        # jaxlib 0.5's table ends its struct_size at XLA_FFI_Stream_Get.
        self.api.struct_size = getattr(_Api, last).offset + ctypes.sizeof(ctypes.c_void_p)
        if with_device_ordinal:
            self.api.DeviceOrdinal_Get = ctypes.cast(self._callbacks[2], ctypes.c_void_p).value


def _target(device_type, fn=None):
    """A handler address for a target (not registered with XLA): fn with arg_spec ["stream"]."""
    fn = kffi.runtime._api.to_kffi(fn or (lambda stream: None))
    return _glue.handler_module().make_target(fn, [5], [0], [""], device_type, 1, "mock")


def _call(address, frame):
    handler = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.POINTER(_Frame))(address)
    return handler(ctypes.byref(frame))


def _ask_metadata(address, api):
    md = _Metadata(struct_size=_Metadata.traits.offset + 4)
    ext = _MetadataExt(_ExtBase(ctypes.sizeof(_MetadataExt), 1, None), ctypes.pointer(md))
    frame = _Frame(struct_size=_Frame.attrs.offset + ctypes.sizeof(_Attrs))
    frame.extension_start = ctypes.addressof(ext)
    frame.api = ctypes.addressof(api) if api is not None else None
    frame.stage = 3
    err = _call(address, frame)
    return err, (md.api_version.major_version, md.api_version.minor_version), md.traits


@pytest.mark.parametrize(("minor"), [1, 2, 3, 9])
def test_metadata_reports_the_runtimes_own_version(minor):
    xla = _MockXla(0, minor)
    assert _ask_metadata(_target(1), xla.api) == (None, (0, minor), 1)
    assert xla.errors == []


def test_metadata_asked_without_a_table_reports_api_0_1():
    # XLA of API 0.1 (jaxlib 0.4.33 to 0.7) asks with no table and accepts exactly 0.1.
    assert _ask_metadata(_target(1), None) == (None, (0, 1), 1)


def test_metadata_refuses_api_0_0_naming_both_versions():
    xla = _MockXla(0, 0)
    err, _, _ = _ask_metadata(_target(1), xla.api)
    assert err is not None
    assert xla.errors == [
        (
            9,  # XLA_FFI_Error_Code_FAILED_PRECONDITION
            "kffi.jax handler: this jaxlib's XLA FFI API is 0.0; kffi's handler needs API 0.1 "
            "or a later minor version (a newer jaxlib)",
        )
    ]


def test_metadata_of_another_major_calls_nothing_and_reports_0_1():
    # A table of API 1.x may be laid out otherwise: nothing in it is called, and XLA's own
    # version check decides (its message names both versions).
    xla = _MockXla(1, 0)
    xla.api.Error_Create = None  # a call would crash the test
    assert _ask_metadata(_target(1), xla.api) == (None, (0, 1), 1)


def _execute(address, api):
    frame = _Frame(struct_size=_Frame.attrs.offset + ctypes.sizeof(_Attrs))
    frame.api = ctypes.addressof(api)
    frame.ctx = 0xC7
    frame.stage = 3
    return _call(address, frame)


def test_a_gpu_call_reads_the_device_ordinal_where_the_table_has_it():
    seen = []

    def kernel(stream):  # XLA's stream, as an argument and as device 1's environment stream
        seen.append((stream.value, get_current_stream("cuda:1"), get_current_stream("cuda:0")))

    xla = _MockXla(0, 3)
    assert _execute(_target(2, kernel), xla.api) is None
    assert xla.asked == ["device_ordinal", "stream"] and xla.errors == []
    assert seen == [(0x5EED, 0x5EED, 0)]


def test_a_gpu_call_without_the_device_ordinal_slot_is_refused():
    xla = _MockXla(0, 1, with_device_ordinal=False)
    assert _execute(_target(2), xla.api) is not None
    assert xla.asked == []
    assert xla.errors == [
        (
            12,  # XLA_FFI_Error_Code_UNIMPLEMENTED
            "RuntimeError: kffi.jax target `mock`: this jaxlib's XLA FFI cannot tell which "
            "device a call runs on (XLA_FFI_DeviceOrdinal_Get is missing); GPU targets need "
            "jaxlib 0.6 or later",
        )
    ]
