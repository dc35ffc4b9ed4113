"""tests/python/kffi_tvm/test_tvm_objects.py: kffi objects of every origin, read and written from
Python.

Objects reach Python from kffi itself (its built-in types, types registered in kffi's registry by
a kffi library), from a TVM-FFI library bound to apache-tvm-ffi (its own dynamic types, numbered
by that runtime's registry, and TVM-FFI's static types kffi lacks, such as ffi.BigInt), and from
the same library bound to kffi's shim (its types then live in kffi's registry). kffi's and
apache-tvm-ffi's registries number their dynamic types independently, so the same index can name
a kffi type and an apache-tvm-ffi type at once; a type key must come from the registry the object
belongs to, or be a clear placeholder, and reading it must never crash (it once read a NULL
record). Setting an attribute an object does not have is an AttributeError (it once succeeded
unseen by the native object); kffi.Function keeps a Python function's attributes.

Every scenario runs in a fresh interpreter with a timeout: where apache-tvm-ffi arrives (imported
before, after, or loaded by kffi for the library) changes the registries, and a crash must fail
the test rather than the session.
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
from conftest import SUPPORT, LibraryBuilder

pytestmark = pytest.mark.skipif(
    tvm_libs.tvm_ffi_dir() is None, reason="apache-tvm-ffi is not installed"
)


# (runtime, when tvm_ffi is imported): "installed" binds tvm_testlib to apache-tvm-ffi's runtime,
# which kffi loads for it (tvm_testlib is built with its C++ headers); "shim" keeps it on kffi's.
SCENARIOS = [
    ("installed", "never"),
    ("installed", "before"),
    ("installed", "after"),
    ("shim", "never"),
    ("shim", "after"),
]

# Where kffi's registry gets enough dynamic types of its own that its indices reach those of
# apache-tvm-ffi's types (tvm_testlib.Point's included).
NUM_KFFI_TYPES = 120

UNREGISTERED = 8000  # a type index no registry holds

SCRIPT = textwrap.dedent("""
    import gc, json, sys
    sys.path.insert(0, {support!r})
    import numpy as np
    import kffi
    if {tvm_import!r} == "before":
        import tvm_ffi
    tvm = kffi.load_module({tvm_lib!r})
    ko = kffi.load_module({kffi_lib!r})
    objects = {{
        "kffi_array": kffi.to_kffi((1, 2)),
        "kffi_tensor": kffi.from_dlpack(np.zeros(2)),
        "kffi_function": kffi.to_kffi(lambda: 1),
        "kffi_registered": ko.make_tagged(1),
        "kffi_unregistered": ko.make_unregistered({unregistered}),
        "tvm_static_shape": tvm.make_shape(1, 2),
        "tvm_static_bigint": tvm.make_big_int(),
        "tvm_dynamic": tvm.make_point(3, 4),
    }}
    point_index = objects["tvm_dynamic"].type_index
    last = ko.register_types({num_types})
    info = {{"point_index": point_index, "last_kffi_index": last,
             "bound_to_tvm_ffi": "libtvm_ffi" in open("/proc/self/maps").read()}}
    if info["bound_to_tvm_ffi"] and {runtime!r} == "installed":
        # A kffi object whose index is the Point's (kffi's registry numbered its own type there).
        objects["kffi_same_index"] = ko.make_of_type(point_index)
    if {tvm_import!r} == "after":
        import tvm_ffi
        objects["tvm_dynamic_after_import"] = tvm.make_point(5, 6)
    out = {{}}
    for name, obj in objects.items():
        r = {{"type_key": obj.type_key, "repr": repr(obj), "str": str(obj),
              "hash": hash(obj) == hash(obj), "type_index": obj.type_index}}
        try:
            obj.some_attribute = 5
            r["setattr"] = "set:" + str(obj.some_attribute)
        except AttributeError as e:
            r["setattr"] = "AttributeError: " + str(e)
        out[name] = r
    p = objects["tvm_dynamic"]
    info["point_x"] = tvm.point_x(p)  # the library still reads its object
    for name in list(objects):
        del objects[name]
    gc.collect()
    print(json.dumps({{"objects": out, "info": info}}))
""")


@pytest.fixture(scope="module")
def libs():
    builder = LibraryBuilder()
    kffi_lib = builder.build("kffi_objects", tvm_libs.SOURCES / "kffi_objects.cc")
    return {"tvm": str(tvm_libs.build("tvm_testlib", linked=False)), "kffi": str(kffi_lib)}


def run_scenario(libs, runtime: str, tvm_import: str) -> dict:
    code = SCRIPT.format(
        support=str(SUPPORT),
        tvm_import=tvm_import,
        runtime=runtime,
        tvm_lib=libs["tvm"],
        kffi_lib=libs["kffi"],
        num_types=NUM_KFFI_TYPES,
        unregistered=UNREGISTERED,
    )
    env = {k: v for k, v in os.environ.items() if k != "KFFI_TVM_RUNTIME"}
    if runtime == "shim":
        env["KFFI_TVM_RUNTIME"] = "shim"
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=180, env=env
    )
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


EXPECTED_KEYS = {
    "kffi_array": "ffi.Array",
    "kffi_tensor": "ffi.Tensor",
    "kffi_function": "ffi.Function",
    "kffi_registered": "kffi_objects.Tagged",
    "kffi_unregistered": f"<unknown type index {UNREGISTERED}>",
    "tvm_static_shape": "ffi.Shape",
    "tvm_static_bigint": "ffi.BigInt",
    "tvm_dynamic": "tvm_testlib.Point",
    "tvm_dynamic_after_import": "tvm_testlib.Point",
}


@pytest.fixture(scope="module")
def results(libs):
    return {s: run_scenario(libs, *s) for s in SCENARIOS}


@pytest.mark.parametrize("scenario", SCENARIOS, ids=["-".join(s) for s in SCENARIOS])
def test_type_keys_repr_str_hash(results, scenario):
    runtime, _ = scenario
    res = results[scenario]
    info, objects = res["info"], res["objects"]
    # The library ran where the scenario says.
    if runtime == "installed":
        assert info["bound_to_tvm_ffi"]
    assert info["point_x"] == 3
    for name, r in objects.items():
        if name == "kffi_same_index":
            # kffi's registry gave its own type the Point's index: each object still reports the
            # type of the registry it belongs to.
            assert r["type_index"] == info["point_index"] <= info["last_kffi_index"]
            below_last = info["last_kffi_index"] - r["type_index"]  # T<n-1> has the last index
            expected = f"kffi_objects.T{NUM_KFFI_TYPES - 1 - below_last}"
        else:
            expected = EXPECTED_KEYS[name]
        assert r["type_key"] == expected, (name, r)
        assert r["hash"], name
        assert r["str"] == r["repr"], name
        if name.startswith(("kffi_registered", "kffi_unregistered", "kffi_same", "tvm_")):
            if name != "tvm_static_shape":  # a kffi.Shape shows its values
                assert expected in r["repr"], (name, r["repr"])
    if runtime == "installed":
        # With apache-tvm-ffi's registry in use, the Point's index is that runtime's, and kffi
        # numbered one of its own types at the same index: the sweep covered the collision.
        assert "kffi_same_index" in objects


@pytest.mark.parametrize("scenario", SCENARIOS, ids=["-".join(s) for s in SCENARIOS])
def test_setting_an_unknown_attribute_raises(results, scenario):
    for name, r in results[scenario]["objects"].items():
        if name == "kffi_function":
            assert r["setattr"] == "set:5"  # a function keeps a Python function's attributes
            continue
        assert r["setattr"].startswith("AttributeError: "), (name, r["setattr"])
        assert "some_attribute" in r["setattr"], r["setattr"]


def test_attribute_rules_in_process():
    """The rules without a subprocess: kffi's own objects."""
    np = pytest.importorskip("numpy")
    import kffi

    t = kffi.from_dlpack(np.zeros(3))
    with pytest.raises(AttributeError, match="has no attribute 'extra'.*native object"):
        t.extra = 1
    with pytest.raises(AttributeError):
        t.shape = (4,)  # a read-only property stays read-only
    with pytest.raises(AttributeError, match="'numel' is read-only"):
        t.numel = 3  # a method is not an attribute to replace
    arr = kffi.to_kffi((1, 2))
    with pytest.raises(AttributeError, match="kffi type `ffi.Array`"):
        arr.x = 1
    with pytest.raises(AttributeError):
        del arr.x
    f = kffi.to_kffi(lambda: 7)
    f.note = "kept"  # functions: like Python functions
    assert f.note == "kept" and f() == 7
    f.release_gil = False  # a data descriptor of the class
    assert f.release_gil is False
