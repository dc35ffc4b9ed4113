"""tests/python/kffi_tvm/test_tvm_runtime_parity.py: what apache-tvm-ffi's runtime provides beyond
calls, on kffi's runtime and on apache-tvm-ffi's, with the same answers.

tests/tvm_libs/tvm_runtime_parity.cc uses, through apache-tvm-ffi's own headers: a type attribute
column, an overloaded __ffi_init__, overloaded and static methods, a field default, the global
functions libtvm_ffi registers (`ffi.ArrayContains`, the global-name listing, function metadata,
the kwargs marker), big integers in a Map, a strided view (TVMFFITensorCreateUnsafeView),
init-once with an init that yields NULL, dtype aliases and scalable vectors, and a structural
visit and a structural mutation of nested Arrays, with and without a Map in them (the shim reads
TVM-FFI's hash-map layout for that: src/tvm_bridge/tvm_map.h). Each runtime must give the same
results. Each scenario runs in a fresh interpreter: which runtime a library binds to depends on the process,
and a crash must fail the test.
"""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
import tvm_libs
from conftest import SUPPORT

pytestmark = pytest.mark.skipif(
    tvm_libs.tvm_ffi_dir() is None, reason="apache-tvm-ffi is not installed"
)


PROBE = """
    import sys, json
    sys.path.insert(0, {support!r})
    import numpy as np, kffi, tvm_libs
    {prelude}
    m = kffi.load_module({lib!r})
    out = {{}}
    for name in ["type_attr", "methods", "field_default", "globals", "big_ints", "init_once",
                 "dtype_aliases"]:
        v = getattr(m, name)()
        out[name] = v if isinstance(v, (int, str, float)) else list(v)
    out["strided"] = list(m.strided_view(np.arange(8, dtype=np.int32)))
    out["visit"] = m.visit_leaves(False)
    try:
        out["visit_map"] = m.visit_leaves(True)
    except RuntimeError as e:
        out["visit_map"] = "RuntimeError: " + str(e)
    out["mutate"] = list(m.mutate_add_ten(False))
    try:
        out["mutate_map"] = list(m.mutate_add_ten(True))
    except RuntimeError as e:
        out["mutate_map"] = "RuntimeError: " + str(e)
    out["on_libtvm_ffi"] = tvm_libs.libtvm_ffi_mapped()
    print(json.dumps(out))
"""

EXPECTED = {
    "type_attr": 42,
    # __ffi_init__(int), __ffi_init__(float), plus(int), plus(str), scale(int), scale(float)
    "methods": [5, -1, 6, "n=5", 42, 1.5],
    "field_default": 7,
    # contains 2, contains 9, own name listed, metadata has a type schema, one kwargs marker,
    # its own type and ffi.String among the registered type keys
    "globals": [True, False, True, True, True, True, True],
    # a BigInt object, its key, equal, same hash, found in a Map by the other
    "big_ints": [True, "ffi.BigInt", True, True, 3],
    # TVMFFIHandleInitOnce fails when the init yields NULL, and leaves the handle unset
    "init_once": [-1, 1],
    "dtype_aliases": ["bfloat16", "float8_e4m3fnx2", "int32xvscalex4"],
    # as_strided((2, 2), (1, 2), offset 1) of arange(8): shape, strides, first items, offset
    "strided": [2, 2, 1, 2, 1, 2, 3, 1],
    "visit": 3,
    # mutated inner items, mutated int, the untouched string leaf, the source's int (unchanged),
    # the source's inner item (unchanged), whether the result is the shared source
    "mutate": [11, 12, 13, "leaf", 3, 1, False],
    # the same with a Map {"k": 4} in the root: its value is visited, and mapped too
    "visit_map": 4,
    "mutate_map": [11, 12, 13, "leaf", 3, 1, False],
}


@pytest.fixture(scope="module")
def lib():
    return str(tvm_libs.build("tvm_runtime_parity", linked=False))


def probe(lib: str, runtime: str) -> dict:
    prelude = "import tvm_ffi" if runtime == "apache-tvm-ffi" else ""
    body = textwrap.dedent(PROBE).format(support=str(SUPPORT), prelude=prelude, lib=lib)
    env = {k: v for k, v in os.environ.items() if k != "KFFI_TVM_RUNTIME"}
    if runtime == "shim":
        env["KFFI_TVM_RUNTIME"] = "shim"
    proc = subprocess.run(
        [sys.executable, "-c", body], capture_output=True, text=True, timeout=180, env=env
    )
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_kffi_runtime_answers_as_apache_tvm_ffi_does(lib):
    shim = probe(lib, "shim")
    real = probe(lib, "apache-tvm-ffi")
    assert not shim["on_libtvm_ffi"] and real["on_libtvm_ffi"]
    for key, want in EXPECTED.items():
        assert real[key] == want, (key, real[key])
        assert shim[key] == want, (key, shim[key])
