"""tests/python/hostile/test_hostile_small.py: issue 29, class 10. An error raised without text
names the function and says so; metadata whose named and unnamed parameters go by one name is
refused naming the function and the module; a dtype of 0 bits or 0 lanes is refused by every entry
that takes a DLDataType from outside to make a tensor; a damaged entry of the build cache is built
again."""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import ctypes
import itertools
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import kffi
import pytest
from conftest import LibraryBuilder
from dlpack_util import (
    DLDataType,
    DLDevice,
    DLManagedTensorVersioned,
    DLPackVersion,
    capsule_new,
)
from kffi.runtime._objects import _annotate, _check_metadata

LIBS = Path(__file__).resolve().parent / "hostile_libs"


@pytest.fixture(scope="module")
def small():
    built = LibraryBuilder().build_all({"small": LIBS / "small_kernels.cc"})
    return kffi.load_module(built["small"])


# ---- errors without text ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    [
        "null_kind_null_message",
        "null_kind_empty_message",
        "empty_kind_empty_message",
        "runtime_error_null_message",
        "created_empty",
    ],
)
def test_an_error_without_text_names_the_function(small, name):
    with pytest.raises(RuntimeError) as info:
        small[name]()
    assert str(info.value) == (
        f"`{name}` raised {'RuntimeError' if 'runtime' in name else 'an error of no kind'} with "
        "no message: the library gave the error no text (a NULL or empty kind and message)"
    ) or str(info.value).startswith(f"`{name}` raised ")
    assert "no text" in str(info.value)


def test_an_error_without_a_kind_keeps_its_message(small):
    for name in ("null_kind_with_message", "created_empty_kind"):
        with pytest.raises(RuntimeError, match="it broke"):
            small[name]()
    with pytest.raises(RuntimeError, match=r"^`created_empty_kind` raised an error of no kind"):
        small.created_empty_kind()
    # A kind with an empty message is the library's choice: it comes as it was.
    with pytest.raises(ValueError) as info:
        small.value_error_empty_message()
    assert str(info.value) == ""


# ---- parameter names that collide -----------------------------------------------------------


def test_metadata_whose_parameters_go_by_one_name(small):
    for name, first, second in (("dup_unnamed_first", 0, 1), ("dup_named_first", 0, 1)):
        with pytest.raises(ValueError) as info:
            small[name]
        msg = str(info.value)
        assert msg.startswith(f"Malformed metadata of function `{name}` in module `{small.name}`")
        assert f"params[{first}]" in msg and f"params[{second}]" in msg
        assert f"params[{second}] repeats the parameter name 'arg" in msg
        assert "an unnamed parameter is called arg<index>" in msg


def test_every_mix_of_named_and_unnamed_parameters():
    """Up to four parameters, each unnamed or named arg0..arg3: either the metadata is refused
    naming where, or the function gets a signature (never inspect's bare ValueError)."""
    choices = [None, "arg0", "arg1", "arg2", "arg3"]
    where = "Malformed metadata of function `f` in module `m`"
    for n in range(1, 5):
        for names in itertools.product(choices, repeat=n):
            params = [{"type": "int"} if x is None else {"name": x, "type": "int"} for x in names]
            effective = [x or f"arg{i}" for i, x in enumerate(names)]
            meta = {"params": params}
            if len(set(effective)) < len(effective):
                with pytest.raises(ValueError, match=f"^{where}: params"):
                    _check_metadata(meta, where)
                continue
            _annotate(kffi.Function(lambda *a: None), _check_metadata(meta, where))


# ---- dtypes of 0 bits or 0 lanes --------------------------------------------------------------


class _Producer:
    """__dlpack__ of one 4-element CPU tensor with the given dtype, as a versioned capsule."""

    def __init__(self, code, bits, lanes):
        self.buffer = (ctypes.c_uint8 * 256)()
        self.shape = (ctypes.c_int64 * 1)(4)
        self.dtype = (code, bits, lanes)
        self.made = []

    def __dlpack_device__(self):
        return (1, 0)

    def __dlpack__(self, stream=None, max_version=None, dl_device=None, copy=None):
        mt = DLManagedTensorVersioned()
        mt.version = DLPackVersion(1, 0)
        t = mt.dl_tensor
        t.data = ctypes.addressof(self.buffer)
        t.device = DLDevice(1, 0)
        t.ndim = 1
        t.dtype = DLDataType(*self.dtype)
        t.shape = self.shape
        self.made.append(mt)
        return capsule_new(ctypes.addressof(mt), b"dltensor_versioned", None)


DTYPES = [
    (code, bits, lanes)
    for code in (0, 1, 2, 4, 5, 6)  # int, uint, float, bfloat, complex, bool
    for bits, lanes in ((0, 1), (8, 0), (0, 0), (32, 0), (0, 4))
]


@pytest.mark.parametrize("dtype", DTYPES)
def test_a_dtype_without_size_is_refused(small, t, dtype):
    code, bits, lanes = dtype
    why = "0 bits per lane" if bits == 0 else "0 lanes"
    with pytest.raises(ValueError, match=why):
        kffi.from_dlpack(_Producer(*dtype))
    with pytest.raises(ValueError, match=why):  # as a call argument
        t.tensor_flags(_Producer(*dtype))
    for env in (True, False):  # Tensor::FromEnvAlloc and Tensor::FromNDAlloc
        with pytest.raises(ValueError, match=f"Tensor::From(Env|ND)Alloc: dtype .*{why}"):
            small.alloc(code, bits, lanes, env)
    # The same dtype with a size is fine.
    ok = (code, bits or 8, lanes or 1)
    assert kffi.from_dlpack(_Producer(*ok)).shape == (4,)
    assert small.alloc(*ok, True).shape == (4,)


# ---- a damaged build cache ---------------------------------------------------------------------

_BUILD = textwrap.dedent("""
    import json, sys
    import kffi
    mod = kffi.cpp.load_inline(
        "hostile_cache", cpp_sources="int64_t twice(int64_t x) { return 2 * x; }",
        functions=["twice"], quiet=True)
    print(json.dumps([mod.name, mod.twice(21)]))
""")


def _build_in_process(cache):
    proc = subprocess.run(
        [sys.executable, "-c", _BUILD],
        capture_output=True,
        text=True,
        timeout=600,
        env=dict(os.environ, KFFI_CACHE_DIR=str(cache)),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


@pytest.mark.parametrize("damage", ["truncate", "overwrite", "no_record", "empty"])
def test_a_damaged_build_cache_entry_is_built_again(tmp_path, damage):
    cache = tmp_path / "cache"
    path, value = _build_in_process(cache)
    assert value == 42
    lib = open(path, "rb").read()
    record = path + ".sha256"
    if damage == "truncate":
        open(path, "wb").write(lib[: len(lib) // 2])
    elif damage == "overwrite":
        open(path, "wb").write(lib[:128] + bytes(len(lib) - 128))
    elif damage == "no_record":
        os.unlink(record)
    elif damage == "empty":
        open(path, "wb").write(b"")
    again, value = _build_in_process(cache)
    assert again == path and value == 42
    assert open(record).read().split()[0] == str(os.path.getsize(path))
