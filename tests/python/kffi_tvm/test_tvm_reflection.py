"""tests/python/kffi_tvm/test_tvm_reflection.py: TVM-FFI reflected objects (refl::ObjectDef) through
kffi.

tvm_refl.cc declares `Point {x: int64 read-only, y: double read-write}` with apache-tvm-ffi's
refl::ObjectDef. Loaded through kffi, a Point shows its fields as attributes (y assignable, x
not), has a repr with its type key and fields, and goes back into the library unchanged: on
kffi's shim (the library's field registrations land in kffi's reflection registry) and with
apache-tvm-ffi loaded (the library is bound to it). A field record that points past the object
is refused with a message, never read. Each scenario runs in a fresh interpreter with a timeout:
which runtime is loaded depends on the process, and a crash must fail the test, not the session.
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

RUNTIMES = ["shim", "installed"]


@pytest.fixture(scope="module")
def libs():
    return {
        "refl": str(tvm_libs.build("tvm_refl", linked=False)),
        "hostile": str(tvm_libs.build("tvm_refl_hostile", linked=False)),
    }


def run(code: str, runtime: str, **paths) -> dict:
    """Runs code in a fresh interpreter on runtime ("shim": KFFI_TVM_RUNTIME=shim; "installed":
    apache-tvm-ffi, which kffi loads for the library); returns the JSON its last line prints."""
    body = f"import sys, json\nsys.path.insert(0, {str(SUPPORT)!r})\n" + textwrap.dedent(
        code
    ).format(**paths)
    env = {k: v for k, v in os.environ.items() if k != "KFFI_TVM_RUNTIME"}
    if runtime == "shim":
        env["KFFI_TVM_RUNTIME"] = "shim"
    proc = subprocess.run(
        [sys.executable, "-c", body], capture_output=True, text=True, timeout=180, env=env
    )
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


FIELDS = """
    import kffi
    m = kffi.load_module({refl!r})
    out = {{"bound_to_tvm_ffi": None}}
    p = m.make_point(3, 1.5)
    out["bound_to_tvm_ffi"] = "libtvm_ffi" in open("/proc/self/maps").read()
    out["type_key"] = p.type_key
    out["x"], out["y"] = p.x, p.y
    out["types"] = [type(p.x).__name__, type(p.y).__name__]
    out["repr"] = repr(p)
    try:
        p.x = 5
        out["set_x"] = "set"
    except AttributeError as e:
        out["set_x"] = "AttributeError: " + str(e)
    p.y = 2.25
    out["y_after"] = p.y
    out["library_y"] = m.point_y(p)      # the library reads what kffi wrote
    out["library_x"] = m.point_x(p)
    try:
        p.y = "no"
        out["set_y_str"] = "set"
    except TypeError as e:
        out["set_y_str"] = "TypeError: " + str(e)
    out["y_unchanged"] = m.point_y(p)
    try:
        p.z
        out["get_z"] = "got"
    except AttributeError as e:
        out["get_z"] = "AttributeError: " + str(e)
    q = m.identity(p)                    # round trip: the same native object back
    out["same_object"] = q.same_as(p) if hasattr(q, "same_as") else None
    out["q_fields"] = [q.x, q.y]
    out["in_array"] = [[r.x, r.y] for r in m.make_points(3)]
    for _ in range(2000):                # reads and writes leave the object as it should be
        p.y = p.y + 1.0
    out["y_loop"] = m.point_y(p)
    print(json.dumps(out))
"""


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_point_fields_repr_round_trip(libs, runtime):
    r = run(FIELDS, runtime, **libs)
    assert r["bound_to_tvm_ffi"] == (runtime == "installed")
    assert r["type_key"] == "tvm_refl.Point"
    assert (r["x"], r["y"]) == (3, 1.5)
    assert r["types"] == ["int", "float"]
    assert "tvm_refl.Point" in r["repr"] and "x=3" in r["repr"] and "y=1.5" in r["repr"], r
    assert r["set_x"].startswith("AttributeError") and "read-only" in r["set_x"], r["set_x"]
    assert r["y_after"] == 2.25 and r["library_y"] == 2.25 and r["library_x"] == 3
    assert r["set_y_str"].startswith("TypeError"), r["set_y_str"]
    assert r["y_unchanged"] == 2.25
    assert r["get_z"].startswith("AttributeError") and "z" in r["get_z"], r["get_z"]
    assert r["same_object"] in (True, None)
    assert r["q_fields"] == [3, 2.25]
    assert r["in_array"] == [[0, 0.0], [1, 0.5], [2, 1.0]]
    assert r["y_loop"] == 2002.25


HOSTILE = """
    import kffi
    try:
        m = kffi.load_module({hostile!r})
        p = m.make_point(1, 2.0)
        try:
            print(json.dumps({{"loaded": True, "far": p.far}}))
        except Exception as e:
            print(json.dumps({{"loaded": True, "error": type(e).__name__ + ": " + str(e)}}))
    except Exception as e:
        print(json.dumps({{"loaded": False, "error": type(e).__name__ + ": " + str(e)}}))
"""


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_field_offset_past_the_object_is_refused(libs, runtime):
    r = run(HOSTILE, runtime, **libs)
    assert "far" not in r, r  # never read
    assert "1048576" in r["error"] and "inside the object" in r["error"], r
    if runtime == "shim":
        assert not r["loaded"]  # kffi's registry refuses the record: the load fails with it


STRESS = """
    import gc, threading
    import kffi
    from malloc_heap import mallinfo_used
    m = kffi.load_module({refl!r})
    p = m.make_point(7, 0.0)
    errors = []

    def work():
        try:
            for i in range(2000):
                assert p.x == 7
                p.y = float(i)
                assert isinstance(p.y, float)
        except Exception as e:
            errors.append(repr(e))

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    def round_trips(n):
        for i in range(n):
            q = m.make_point(i, 1.0)
            q.y = 2.5
            _ = q.x, q.y
            m.point_y(m.identity(q))
            if i % 10 == 0:
                (r,) = m.make_points(1)
                _ = r.x, repr(r)

    keep = m.make_point(1, 1.0)
    base = keep._use_count
    round_trips(2000)
    gc.collect()
    objects_before, heap_before = len(gc.get_objects()), mallinfo_used()
    round_trips(50_000)
    gc.collect()
    heap_middle = mallinfo_used()
    round_trips(50_000)
    gc.collect()
    print(json.dumps({{"errors": errors[:3], "use_count": [base, keep._use_count],
                      "objects": len(gc.get_objects()) - objects_before,
                      "heap": [heap_before, heap_middle, mallinfo_used()]}}))
"""


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_threads_and_no_leak_over_many_round_trips(libs, runtime):
    """Fields read and written from 8 threads; 10^5 round trips (made, fields read and written,
    passed back, in containers) leave the use count, Python's objects and the native heap."""
    r = run(STRESS, runtime, **libs)
    assert r["errors"] == []
    assert r["use_count"][0] == r["use_count"][1]
    assert r["objects"] < 100
    before, middle, after = r["heap"]
    if before is not None:
        # One leaked small object per round trip would be >= 16 bytes * 50,000.
        assert after - middle < 256 * 1024, r["heap"]


METHODS_EQ = """
    import kffi
    m = kffi.load_module({refl!r})
    out = {{}}
    q = m.make_point3(1, 0.5, 2.0)  # a Point3 reaches Python before any Point
    p = m.make_point(3, 1.5)
    out["point3"] = [type(q).__qualname__, isinstance(q, type(p)), q.sum(), repr(q)]
    out["point_class"] = [type(p).__name__, type(p).__qualname__]
    out["sum"] = p.sum()                      # a method refl::ObjectDef declared (.def)
    q = m.make_point(3, 1.5)
    out["point_eq"] = [p == q, p == p, p != q]  # no structural kind: identity
    a, b, c = m.make_range(1, 4), m.make_range(1, 4), m.make_range(2, 4)
    out["range_repr"] = repr(a)
    out["range_eq"] = [a == b, a != b, a == c, hash(a) == hash(b), len({{a, b, c}})]
    out["length"] = a.length()
    a.hits = 5  # SEqHashIgnore: left out of == and hash (by apache-tvm-ffi's records)
    out["ignored_field"] = [a == b, hash(a) == hash(b)]
    try:
        a.length(1)
        out["bad_call"] = "called"
    except Exception as e:
        out["bad_call"] = type(e).__name__
    out["type_info"] = [list(m.type_info("tvm_refl.Point")), list(m.type_info("tvm_refl.Range"))]
    print(json.dumps(out))
"""


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_methods_structural_equality_and_type_info(libs, runtime):
    """Methods (`.def`) are callable on the object; a type declaring a structural equality kind
    compares and hashes by its fields, another by identity; the library reads its own types'
    fields, methods and size back through TVMFFIGetTypeInfo on either runtime."""
    r = run(METHODS_EQ, runtime, **libs)
    assert r["point_class"] == ["Point", "tvm_refl.Point"]
    assert r["sum"] == 4.5
    assert r["point_eq"] == [False, True, True]
    # Point3's class derives from Point's, made for it when the Point3 arrived first.
    assert r["point3"] == ["tvm_refl.Point3", True, 1.5, "tvm_refl.Point3(x=1, y=0.5, z=2.0)"]
    assert r["range_repr"] == "tvm_refl.Range(lo=1, hi=4, hits=0)"
    assert r["range_eq"] == [True, False, False, True, 2]
    assert r["length"] == 3
    # SEqHashIgnore leaves hits out of == and hash on both runtimes (the shim keeps the flag as
    # kKFFIFieldFlagCompareOff).
    assert r["ignored_field"] == [True, True]
    assert r["bad_call"] == "TypeError"
    point, rng = r["type_info"]
    assert point[:4] == ["x", "y", "|", "sum"] and point[4] == "|", point
    assert point[5] >= 16 + 8 + 8 and point[6] == 0, point  # header + x + y; kind unsupported
    # hits keeps its flag (SEqHashIgnore; the shim reports it as CompareOff) on both runtimes.
    assert rng[:5] == ["lo", "hi", "hits!", "|", "length"] and rng[7] == 1, rng  # a tree node


REGISTER = """
    import kffi
    m = kffi.load_module({refl!r})

    @kffi.register_object("tvm_refl.Point")  # before any Point reaches Python
    class Point(kffi.Object):
        def norm1(self):
            return abs(self.x) + abs(self.y)

        def sum(self):  # the class's own method wins over the native one
            return "mine"

    p = m.make_point(-2, 0.5)
    out = {{"isinstance": isinstance(p, Point), "norm1": p.norm1(), "sum": p.sum(),
            "repr": repr(p), "fields": [p.x, p.y]}}
    p.y = 4.0
    out["library_y"] = m.point_y(m.identity(p))
    out["in_array"] = [type(r).__name__ for r in m.make_points(2)]
    q = m.make_point3(-1, 2.0, 3.0)  # a subclass of Point the library declares
    out["subclass"] = [type(q).__qualname__, isinstance(q, Point), q.norm1(), q.sum(),
                       [q.x, q.y, q.z], m.point_y(q)]
    q.z = 5.0
    out["subclass_z"] = q.z
    try:
        kffi.register_object("tvm_refl.NoSuchType")(type("N", (kffi.Object,), {{}}))
        out["unknown"] = "registered"
    except KeyError as e:
        out["unknown"] = "KeyError: " + str(e)
    print(json.dumps(out))
"""


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_register_object_for_a_tvm_type_key(libs, runtime):
    """kffi.register_object names the class for a TVM-FFI type key on either runtime: objects
    come back as it (isinstance, its own methods), keep their fields and go back unchanged."""
    r = run(REGISTER, runtime, **libs)
    assert r["isinstance"] and r["norm1"] == 2.5 and r["sum"] == "mine"
    assert r["repr"] == "tvm_refl.Point(x=-2, y=0.5)" and r["fields"] == [-2, 0.5]
    assert r["library_y"] == 4.0
    assert r["in_array"] == ["Point", "Point"]
    # Point3's class derives from the class registered for Point: isinstance, the Python method
    # and the class's own sum() reach it; its fields are its own and Point's.
    assert r["subclass"] == ["tvm_refl.Point3", True, 3.0, "mine", [-1, 2.0, 3.0], 2.0], r
    assert r["subclass_z"] == 5.0
    assert r["unknown"].startswith("KeyError") and "NoSuchType" in r["unknown"], r


def test_bridge_is_reached_without_ctypes():
    """The Python side of the bridge calls libkffi_tvm through kffi's extension only."""
    import kffi.tvm._bridge as bridge

    assert "ctypes" not in vars(bridge)


METHOD_STRESS = """
    import gc, threading
    import kffi
    from malloc_heap import mallinfo_used
    m = kffi.load_module({refl!r})
    errors = []

    def work(k):
        try:
            for i in range(1000):
                # The first objects of each type may reach Python on several threads at once:
                # each gets a working class either way.
                r = m.make_range(k, k + i)
                assert r.length() == i and r == m.make_range(k, k + i)
                p = m.make_point(i, 0.5)
                assert p.sum() == i + 0.5
        except Exception as e:
            errors.append(repr(e))

    threads = [threading.Thread(target=work, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    def round_trips(n):
        for i in range(n):
            r = m.make_range(0, i)
            _ = r.length(), hash(r), r == r, repr(r), m.make_point(i, 1.0).sum()

    keep = m.make_range(0, 1)
    base = keep._use_count
    round_trips(2000)
    gc.collect()
    objects_before, heap_before = len(gc.get_objects()), mallinfo_used()
    round_trips(50_000)
    gc.collect()
    heap_middle = mallinfo_used()
    round_trips(50_000)
    gc.collect()
    print(json.dumps({{"errors": errors[:3], "use_count": [base, keep._use_count],
                      "objects": len(gc.get_objects()) - objects_before,
                      "classes": sorted({{type(m.make_range(0, 1)).__qualname__,
                                         type(m.make_point(0, 1.0)).__qualname__}}),
                      "heap": [heap_before, heap_middle, mallinfo_used()]}}))
"""


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_methods_and_equality_from_threads_without_leaks(libs, runtime):
    """Methods and structural ==/hash from 8 threads (the types' classes made while they run);
    10^5 round trips through methods, hash and repr leave the heap and Python's objects."""
    r = run(METHOD_STRESS, runtime, **libs)
    assert r["errors"] == []
    assert r["classes"] == ["tvm_refl.Point", "tvm_refl.Range"]
    assert r["use_count"][0] == r["use_count"][1]
    assert r["objects"] < 100
    before, middle, after = r["heap"]
    if before is not None:
        assert after - middle < 256 * 1024, r["heap"]
