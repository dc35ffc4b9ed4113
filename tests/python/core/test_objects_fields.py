"""tests/python/core/test_objects_fields.py: kffi objects with fields (KFFI_OBJECT_DEF) from
Python."""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import gc
import sys
import threading

import kffi
import numpy as np
import pytest


@pytest.fixture(scope="module")
def mod(library_paths):
    return kffi.load_module(library_paths["object_kernels"])


def test_fields_read_as_attributes(mod):
    p = mod.make_point(3.0, 4.0, 7)
    assert p.type_key == "test.Point"
    assert (p.x, p.y, p.id, p.label) == (3.0, 4.0, 7, "p")
    assert isinstance(p, kffi.Object)
    assert type(p).__name__ == "Point"


def test_read_write_and_read_only(mod):
    p = mod.make_point(1.0, 2.0, 0)
    p.y = 5
    assert p.y == 5.0
    p.label = "a label longer than seven bytes"
    assert p.label == "a label longer than seven bytes"
    with pytest.raises(AttributeError, match=r"field `test\.Point\.x` is read-only"):
        p.x = 1.0
    with pytest.raises(TypeError, match=r"test\.Point\.y: expected float, got str"):
        p.y = "no"
    with pytest.raises(AttributeError, match="cannot be deleted"):
        del p.y
    with pytest.raises(AttributeError):
        p.not_a_field = 1
    assert p.y == 5.0  # a refused write changed nothing


def test_repr_shows_type_key_and_fields(mod):
    p = mod.make_point(1.5, 2.0, 3)
    assert repr(p) == "test.Point(x=1.5, y=2.0, id=3, label='p')"


def test_structural_equality_and_hash(mod):
    a = mod.make_point(1.0, 2.0, 3)
    b = mod.make_point(1.0, 2.0, 3)
    c = mod.make_point(1.0, 2.5, 3)
    assert not a.same_as(b)
    assert a == b and hash(a) == hash(b)
    assert a != c
    assert len({a, b, c}) == 2
    # label is declared compare_off(): == and hash leave it out.
    b.label = "another label"
    assert a == b and hash(a) == hash(b)
    assert [f[4] for f in kffi._reflection.fields_of(a.type_index)] == [True, True, True, False]


def test_identity_equality_without_the_declaration(mod):
    w = np.zeros(3, dtype=np.float32)
    p1, p2 = mod.make_plan(w), mod.make_plan(w)
    assert p1 != p2 and p1 == p1


def test_methods_and_inheritance(mod):
    p = mod.make_point(3.0, 4.0, 0)
    assert p.norm() == 5.0
    p.shift(1.0, 1.0)
    assert (p.x, p.y) == (4.0, 5.0)
    q = mod.make_point3(1.0, 2.0, 3.0)
    assert q.type_key == "test.Point3"
    assert (q.x, q.y, q.z) == (1.0, 2.0, 3.0)
    assert isinstance(q, type(p))  # the subtype's class derives from the parent's
    q.z = 9
    assert repr(q) == "test.Point3(x=1.0, y=2.0, id=0, label='p', z=9.0)"


def test_round_trip_back_into_the_library(mod):
    p = mod.make_point(1.25, 2.0, 0)
    assert mod.point_sum(p) == 3.25
    assert mod.point_sum(mod.make_point3(1.0, 1.0, 5.0)) == 2.0  # a subtype is a Point
    with pytest.raises(TypeError):
        mod.point_sum(mod.make_plan(np.zeros(1, np.float32)))


def test_objects_in_containers_come_back_with_fields(mod):
    pts = mod.make_points(3)
    assert [(p.x, p.y, p.id) for p in pts] == [(0.0, 0.0, 0), (1.0, 2.0, 1), (2.0, 4.0, 2)]


def test_object_tensor_and_any_fields(mod):
    w = np.arange(4, dtype=np.float32)
    plan = mod.make_plan(w)
    assert plan.name == "plan" and plan.tiles == 4
    assert plan.origin.id == 9 and plan.origin.x == 1.0
    np.testing.assert_array_equal(np.from_dlpack(plan.weight), w)
    assert plan.extra is None
    plan.extra = 5
    assert plan.extra == 5
    plan.extra = "text"
    assert plan.extra == "text"
    plan.origin = mod.make_point(7.0, 8.0, 1)
    assert plan.origin.x == 7.0
    with pytest.raises(TypeError, match=r"test\.Plan\.origin: expected test\.Point"):
        plan.origin = plan
    with pytest.raises(AttributeError, match="read-only"):
        plan.tiles = 1
    assert "test.Plan(name='plan'" in repr(plan)


def test_register_object_names_a_class(mod):
    mod.make_point(0.0, 0.0, 0)  # the library is loaded: the key exists

    @kffi.register_object("test.Point3")
    class Point3(kffi.Object):
        def volume_hint(self):
            return self.x * self.y * self.z

        def __repr__(self):
            return f"P3<{self.z}>"

    q = mod.make_point3(2.0, 3.0, 4.0)
    assert type(q) is Point3
    assert isinstance(q, Point3)
    assert q.volume_hint() == 24.0
    assert q.norm() == pytest.approx(13**0.5)  # the native method too
    assert repr(q) == "P3<4.0>"  # the class's own repr wins
    with pytest.raises(AttributeError, match="read-only"):
        q.x = 1.0


def test_register_object_refuses_bad_input():
    with pytest.raises(KeyError, match="not registered"):
        kffi.register_object("test.NoSuchType")(type("X", (kffi.Object,), {}))
    with pytest.raises(TypeError, match="subclass of kffi.Object"):
        kffi.register_object("test.Point")(int)
    with pytest.raises(TypeError, match="must be a str"):
        kffi.register_object(5)


def test_reassigned_class_cannot_read_another_types_memory(mod):
    p = mod.make_point(1.0, 2.0, 0)
    plan = mod.make_plan(np.zeros(1, np.float32))
    plan.__class__ = type(p)
    with pytest.raises(TypeError, match="cannot be read from a `test.Plan` object"):
        plan.x  # noqa: B018


def test_released_object_field_read_is_an_error(mod):
    p = mod.make_point(1.0, 2.0, 0)
    p._release()
    with pytest.raises(ValueError, match="released"):
        p.x  # noqa: B018


def test_field_access_from_many_threads(mod):
    p = mod.make_point(1.0, 2.0, 5)
    errors = []

    def work():
        try:
            for i in range(2000):
                assert p.x == 1.0 and p.id == 5
                p.y = float(i)
                assert isinstance(p.label, str)
        except Exception as e:
            errors.append(e)

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_no_leak_over_many_round_trips(mod):
    """10^5 round trips (made, fields read and written, passed back, in containers) leave the
    native heap, Python's object count and the use count where they were."""
    from malloc_heap import mallinfo_used

    def round_trips(n):
        for i in range(n):
            p = mod.make_point(1.0, 2.0, i)
            p.label = "a label longer than seven bytes"
            _ = p.label, p.x, p.id
            p.y = 3.0
            mod.point_sum(p)
            if i % 10 == 0:
                (q,) = mod.make_points(1)
                _ = q.x, repr(q), hash(q)

    keep = mod.make_point(1.0, 2.0, 0)
    base_count = keep._use_count
    round_trips(2000)  # warm caches (classes, descriptors, interned strings)
    gc.collect()
    objects_before, heap_before = len(gc.get_objects()), mallinfo_used()
    round_trips(50_000)
    gc.collect()
    heap_middle = mallinfo_used()
    round_trips(50_000)
    gc.collect()
    objects_after, heap_after = len(gc.get_objects()), mallinfo_used()
    assert keep._use_count == base_count
    assert objects_after - objects_before < 100
    if heap_before is not None:
        # One leaked small object per round trip would be >= 16 bytes * 50,000.
        assert heap_after - heap_middle < 256 * 1024, (heap_middle - heap_before, heap_after)


def test_stubgen_writes_classes_with_typed_fields(mod):
    text = kffi.stubgen(mod)
    compile(text, "object_kernels.pyi", "exec")
    assert "class Point(Object):" in text
    assert "class Point3(Point):" in text
    assert "    y: float\n" in text and "    def x(self) -> float: ..." in text
    assert "    origin: Point\n" in text
    assert "def make_point(arg0: float, arg1: float, arg2: int) -> Point:" in text
    assert "def make_points(arg0: int) -> tuple[Point, ...]:" in text


# ---- records: dataclass and NamedTuple arguments -------------------------------------------------


def _record_classes():
    import dataclasses
    from typing import NamedTuple

    @kffi.register_record("test.Config")
    @dataclasses.dataclass
    class ConfigDC:
        tile_m: int
        tile_n: int
        alpha: float
        beta: float

    class ConfigNT(NamedTuple):
        tile_m: int
        tile_n: int
        alpha: float
        name: str

    ConfigNT.__kffi_type__ = "test.Config"
    return ConfigDC, ConfigNT


def test_dataclass_and_namedtuple_arrive_with_their_fields(mod):
    ConfigDC, ConfigNT = _record_classes()
    assert mod.config_score(ConfigDC(2, 3, 0.5, 1.0)) == 4.0
    assert mod.config_score(ConfigNT(4, 5, 2.0, "nt")) == 40.0  # beta keeps its C++ default
    assert mod.config_name(ConfigNT(1, 1, 1.0, "a name longer than seven")) == (
        "a name longer than seven"
    )
    back = mod.config_echo(ConfigDC(7, 8, 1.0, 0.0))
    assert back.type_key == "test.Config" and (back.tile_m, back.tile_n, back.fixed) == (7, 8, 3)


def test_each_record_object_starts_from_the_cpp_defaults(mod):
    # Record objects reuse the memory of the last one freed: each is constructed afresh, so a
    # field one record set never shows in the next (name is left to its C++ default here).
    ConfigDC, ConfigNT = _record_classes()
    long_name = "a name long enough to live on the heap"
    for _ in range(3):
        assert mod.config_name(ConfigNT(1, 1, 1.0, long_name)) == long_name
        assert mod.config_name(ConfigDC(1, 1, 1.0, 0.0)) == "default"
        assert mod.config_echo(ConfigDC(2, 2, 1.0, 0.0)).fixed == 3


def test_const_ref_object_parameters_borrow_and_copies_keep(mod):
    ConfigDC, ConfigNT = _record_classes()
    assert mod.config_score_ref(ConfigDC(2, 3, 0.5, 1.0)) == 4.0
    assert mod.config_score_ref(ConfigNT(4, 5, 2.0, "nt")) == 40.0
    mod.config_keep(ConfigNT(7, 8, 1.0, "kept by the callee"))
    for i in range(5):  # later records: new objects, none of them the kept one
        assert mod.config_score_ref(ConfigDC(i, 1, 1.0, 0.0)) == float(i)
        assert mod.config_name(ConfigDC(i, 1, 1.0, 0.0)) == "default"
    kept = mod.config_kept()
    assert (kept.tile_m, kept.tile_n, kept.name) == (7, 8, "kept by the callee")
    p = mod.config_echo(ConfigDC(1, 2, 3.0, 4.0))
    mod.config_keep(p)  # a kffi object passed straight through: the same object comes back
    assert mod.config_kept().same_as(p)
    mod.config_keep(None)
    assert mod.config_kept() is None
    with pytest.raises(TypeError, match="test.Config"):
        mod.config_score_ref(mod.make_point(1.0, 2.0, 0))


def test_record_field_errors_name_param_and_field(mod):
    ConfigDC, _ = _record_classes()
    with pytest.raises(TypeError, match=r"arg0\.alpha: expected float, got str"):
        mod.config_score(ConfigDC(1, 1, "no", 0.0))

    import dataclasses

    @kffi.register_record("test.Config")
    @dataclasses.dataclass
    class Unknown:
        tile_m: int
        depth: int

    with pytest.raises(TypeError, match="field 'depth' is not a field of kffi type `test.Config`"):
        mod.config_score(Unknown(1, 2))

    @kffi.register_record("test.Config")
    @dataclasses.dataclass
    class ReadOnly:
        fixed: int

    with pytest.raises(TypeError, match="field 'fixed' is a read-only field"):
        mod.config_score(ReadOnly(1))

    @kffi.register_record("test.Point")  # no default constructor
    @dataclasses.dataclass
    class NoCtor:
        y: float

    with pytest.raises(TypeError, match="no default constructor"):
        mod.point_sum(NoCtor(1.0))

    @kffi.register_record("test.NoSuchType")
    @dataclasses.dataclass
    class NoType:
        y: float

    with pytest.raises(KeyError, match="not registered"):
        mod.point_sum(NoType(1.0))


def test_records_do_not_leak(mod):
    ConfigDC, ConfigNT = _record_classes()
    dc, nt = ConfigDC(2, 3, 0.5, 1.0), ConfigNT(4, 5, 2.0, "a long name for the heap")
    for _ in range(2000):
        mod.config_score(dc)
        mod.config_name(nt)
    gc.collect()
    before = len(gc.get_objects())
    refs = sys.getrefcount(dc), sys.getrefcount(nt)
    for _ in range(100_000):
        mod.config_score(dc)
        mod.config_name(nt)
    gc.collect()
    assert len(gc.get_objects()) - before < 100
    assert (sys.getrefcount(dc), sys.getrefcount(nt)) == refs
