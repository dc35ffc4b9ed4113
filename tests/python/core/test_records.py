"""tests/python/core/test_records.py: dataclass and NamedTuple arguments matched by the parameter's
type (no register_record), and plain C++ structs declared with KFFI_RECORD."""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import dataclasses
import gc
import sys
from typing import NamedTuple

import kffi
import pytest
from conftest import KERNELS, LibraryBuilder


@pytest.fixture(scope="module")
def rec():
    return kffi.load_module(LibraryBuilder().build("record_kernels", KERNELS / "record_kernels.cc"))


@pytest.fixture(scope="module")
def obj():
    return kffi.load_module(LibraryBuilder().build("object_kernels", KERNELS / "object_kernels.cc"))


@dataclasses.dataclass
class Config:
    alpha: float
    n: int
    flag: bool
    name: str


@dataclasses.dataclass(slots=True)
class SlotConfig:
    alpha: float
    n: int
    flag: bool
    name: str


class TupleConfig(NamedTuple):
    alpha: float
    n: int
    flag: bool
    name: str


class Pair(NamedTuple):
    x: float
    y: float


@dataclasses.dataclass
class ObjConfig:  # test.Config of object_kernels.cc (a KFFI_OBJECT_DEF type), undecorated
    tile_m: int
    tile_n: int
    alpha: float
    beta: float
    name: str = "dc"


@pytest.mark.parametrize("cls", [Config, SlotConfig, TupleConfig])
def test_plain_struct_takes_dataclass_and_namedtuple(rec, cls):
    assert rec.score(cls(0.5, 4, True, "a")) == 3.0
    assert rec.score(cls(0.5, 4, False, "a")) == 2.0
    assert rec.name_of(cls(1.0, 1, False, "a name longer than seven bytes")) == (
        "a name longer than seven bytes"
    )


def test_plain_struct_round_trips_as_object_with_fields(rec):
    c = rec.make_config(2.0, 3)
    assert c.type_key == "rec.Config"
    assert (c.alpha, c.n, c.flag, c.name) == (2.0, 3, True, "made")
    c.alpha = 0.5
    assert rec.score(c) == 2.5  # the object passes back as is
    assert rec.swap(Pair(1.0, 2.0)).x == 2.0
    assert rec.pair_sum(Pair(1.0, 2.0), Pair(3.0, 4.0)) == 10.0


def test_cpp_caller_passes_the_struct(rec):
    seen = []

    def callback(p):
        seen.append((p.type_key, p.x, p.y))
        return p.x * 10 + p.y

    assert rec.call_with_pair(callback, 1.0, 2.0) == 12.0
    assert seen == [("rec.Pair", 1.0, 2.0)]


def test_signature_and_metadata_name_the_record_type(rec):
    assert "score(cfg: rec.Config) -> float" in rec.score.__doc__
    assert rec.score._metadata["params"] == [{"name": "cfg", "type": "rec.Config"}]


def test_mismatches_name_param_and_field(rec):
    sig = r"\(argument #0 of `score\(cfg: rec\.Config\) -> float`\)"
    with pytest.raises(TypeError, match=r"^cfg\.n: expected int, got str " + sig):
        rec.score(Config(0.5, "x", True, "a"))

    @dataclasses.dataclass
    class Missing:
        alpha: float
        n: int
        flag: bool

    with pytest.raises(TypeError, match=r"^cfg\.name: expected a value \(str\), got a .*Missing"):
        rec.score(Missing(1.0, 1, True))

    @dataclasses.dataclass
    class Unknown:
        alpha: float
        n: int
        flag: bool
        name: str
        depth: int

    with pytest.raises(TypeError, match=r"^cfg\.depth: expected a field of rec\.Config"):
        rec.score(Unknown(1.0, 1, True, "a", 3))
    with pytest.raises(TypeError, match=r"^cfg\.x: expected a field of rec\.Config"):
        rec.score(Pair(1.0, 2.0))
    # Not a record at all: the ordinary type error.
    with pytest.raises(TypeError, match=r"^cfg: expected rec\.Config, got tuple"):
        rec.score((1.0, 1, True, "a"))
    with pytest.raises(TypeError, match=r"^cfg: expected rec\.Config, got int"):
        rec.score(3)
    # An int64 out of range, and a field whose getattr raises.
    with pytest.raises(OverflowError, match=r"^cfg\.n: Python int too large.*" + sig):
        rec.score(Config(1.0, 1 << 70, True, "a"))
    s = SlotConfig.__new__(SlotConfig)
    with pytest.raises(AttributeError, match=r"^cfg\.alpha: .*alpha"):
        rec.score(s)  # slots never assigned
    # The process stays healthy: a good call after the failures.
    assert rec.score(Config(1.0, 2, False, "a")) == 2.0


def test_object_type_parameter_takes_undecorated_record(obj):
    assert obj.config_score(ObjConfig(2, 3, 0.5, 1.0)) == 4.0  # (2 * 3) * 0.5 + 1.0
    assert obj.config_name(ObjConfig(2, 3, 0.5, 1.0, "hello")) == "hello"

    @dataclasses.dataclass
    class NoName:  # `name` is writable in C++ and has no value here
        tile_m: int
        tile_n: int
        alpha: float
        beta: float

    with pytest.raises(TypeError, match=r"^arg0\.name: expected a value \(str\)"):
        obj.config_score(NoName(1, 1, 1.0, 1.0))

    @dataclasses.dataclass
    class WithReadOnly:
        tile_m: int
        tile_n: int
        alpha: float
        beta: float
        name: str
        fixed: int

    with pytest.raises(TypeError, match=r"^arg0\.fixed: expected a writable field"):
        obj.config_score(WithReadOnly(1, 1, 1.0, 1.0, "n", 3))


def test_register_record_keeps_its_rules_on_a_record_parameter(obj):
    @kffi.register_record("test.Config")
    @dataclasses.dataclass
    class Partial:  # register_record: left-out fields keep their C++ defaults
        tile_m: int
        tile_n: int

    assert obj.config_score(Partial(2, 3)) == 6.0


def test_subclass_and_changed_class_get_their_own_plan(rec):
    @dataclasses.dataclass
    class Sub(Config):
        pass

    assert rec.score(Sub(1.0, 3, False, "s")) == 3.0
    assert rec.score(Config(1.0, 5, False, "c")) == 5.0
    assert rec.score(TupleConfig(1.0, 7, False, "t")) == 7.0


def test_records_do_not_leak(rec, obj):
    values = [
        Config(0.5, 4, True, "a name longer than seven bytes"),
        SlotConfig(0.5, 4, True, "b"),
        TupleConfig(0.5, 4, True, "c"),
    ]
    oc = ObjConfig(2, 3, 0.5, 1.0, "a long name for the heap, too")
    bad = Config(0.5, "x", True, "a")

    def loop(n):
        for i in range(n):
            rec.score(values[i % 3])
            obj.config_score(oc)
            if i % 10 == 0:
                try:
                    rec.score(bad)
                except TypeError:
                    pass

    loop(2000)
    gc.collect()
    before = len(gc.get_objects())
    refs = [sys.getrefcount(v) for v in values] + [sys.getrefcount(oc)]
    loop(100_000)
    gc.collect()
    assert len(gc.get_objects()) - before < 100
    assert [sys.getrefcount(v) for v in values] + [sys.getrefcount(oc)] == refs


def test_hostile_record_params_are_ignored(rec):
    from kffi import _core

    f = rec.score
    with pytest.raises(TypeError):
        _core._set_record_params(f, [1, 2])
    _core._set_record_params(f, (10**9, -5))  # no such types: not record parameters
    with pytest.raises(TypeError, match="expected rec.Config, got"):
        f(Config(1.0, 1, False, "a"))
    # Put back as the metadata says.
    kffi._reflection._note_record_params(f, [{"type": "rec.Config"}])
    assert f(Config(1.0, 1, False, "a")) == 1.0


def test_stubgen_types_record_structs(rec):
    text = kffi.stubgen(rec)
    compile(text, "record_kernels.pyi", "exec")
    assert "class Config(Object):" in text and "    alpha: float\n    n: int\n" in text
    assert "def score(cfg: Config) -> float:" in text


def test_keyword_arguments_and_short_namedtuples(rec):
    assert rec.score(cfg=Config(1.0, 6, False, "k")) == 6.0
    assert rec.pair_sum(q=Pair(1.0, 2.0), p=Pair(3.0, 4.0)) == 10.0
    short = tuple.__new__(Pair, (1.0,))  # a NamedTuple made short behind its back
    with pytest.raises((AttributeError, IndexError), match=r"^p\.y: "):
        rec.pair_sum(short, Pair(1.0, 2.0))


@dataclasses.dataclass(init=False)
class DictPair:  # rec.Pair's fields, with instance dicts built in the order each test asks
    x: float
    y: float


def dict_pair(*order: str) -> DictPair:
    """A DictPair whose instance dict gets its entries in `order` (x = 1.0, y = 2.0, anything
    else -1.0); a name ending in '!' is stored under a new, equal but not identical, string."""
    p = DictPair.__new__(DictPair)
    for name in order:
        plain = name.rstrip("!")
        value = {"x": 1.0, "y": 2.0}.get(plain, -1.0)
        if name.endswith("!"):
            p.__dict__["".join(list(plain))] = value  # not the interned name
        else:
            setattr(p, plain, value)
    return p


@pytest.mark.parametrize(
    "order",
    [
        ("x", "y"),
        ("y", "x"),
        ("extra", "x", "y"),
        ("x", "extra", "y"),
        ("x", "y", "extra"),
        ("x!", "y"),
        ("x", "y!"),
    ],
)
def test_dataclass_fields_arrive_whatever_the_dict_order(rec, order):
    # Fields are read in one walk over the instance dict while its entries are the fields in
    # order; any other order, another attribute or an equal but not identical key must fall back
    # to lookups, never pair a value with the wrong field.
    p = dict_pair(*order)
    assert rec.pair_sum(p, Pair(0.0, 0.0)) == 3.0
    swapped = rec.swap(p)
    assert (swapped.x, swapped.y) == (2.0, 1.0)


def test_dataclass_field_deleted_and_set_again(rec):
    p = dict_pair("x", "y")
    del p.x
    with pytest.raises(AttributeError, match=r"^p\.x: "):
        rec.swap(p)
    p.x = 5.0  # now after y in the dict
    swapped = rec.swap(p)
    assert (swapped.x, swapped.y) == (2.0, 5.0)


@kffi.register_record("rec.Pair")
@dataclasses.dataclass
class BoxPair:
    x: float
    y: float


@kffi.register_record("rec.Pair")
@dataclasses.dataclass
class HalfPair:  # rec.Pair's x only: y keeps the struct's default
    x: float


def test_record_boxes_are_reused_only_when_nothing_holds_them(rec):
    # A KFFI_RECORD box the call left as it came is written again for the next call instead of
    # made anew; every value still arrives as passed.
    first = rec.box_address(BoxPair(1.0, 2.0))
    assert rec.box_address(BoxPair(3.0, 4.0)) == first
    for i in range(50):
        assert rec.pair_sum(Pair(float(i), 2.0 * i), Pair(0.0, 0.0)) == 3.0 * i
        assert rec.pair_sum(dict_pair("x", "y"), Pair(0.0, float(i))) == 3.0 + i
    # A box the callee keeps is never handed to a later call.
    rec.keep(BoxPair(5.0, 6.0))
    kept = rec.kept()
    assert (kept.x, kept.y) == (5.0, 6.0)
    assert rec.box_address(BoxPair(7.0, 8.0)) != rec.box_address(kept)
    rec.box_address(BoxPair(9.0, 10.0))
    assert (kept.x, kept.y) == (5.0, 6.0)
    rec.keep(None)


def test_a_record_that_leaves_a_field_out_gets_a_fresh_box(rec):
    # HalfPair's plan writes x only: reusing a box would hand it the last call's y.
    for v in (1.0, 2.0, 3.0):
        rec.set_y(HalfPair(v), 100.0)  # the callee changes y of the box and lets it go
        swapped = rec.swap(HalfPair(v))
        assert (swapped.x, swapped.y) == (0.0, v)
    # A plan that writes every field may reuse the box: the changed y is written again.
    rec.set_y(BoxPair(1.0, 2.0), 100.0)
    swapped = rec.swap(BoxPair(1.0, 2.0))
    assert (swapped.x, swapped.y) == (2.0, 1.0)


def test_a_failed_record_conversion_leaves_no_stale_field(rec):
    assert rec.pair_sum(BoxPair(1.0, 2.0), Pair(0.0, 0.0)) == 3.0
    with pytest.raises(TypeError, match=r"^p\.y: "):
        rec.pair_sum(BoxPair(5.0, "not a float"), Pair(0.0, 0.0))
    assert rec.swap(BoxPair(7.0, 8.0)).y == 7.0
    assert rec.pair_sum(BoxPair(1.5, 2.5), Pair(0.0, 0.0)) == 4.0


def test_python_code_run_by_a_field_conversion_sees_fields_read_after_it(rec):
    # n's __index__ runs Python code in the middle of the conversion and replaces the name the
    # dict walk already saw (its only reference: it is freed). The fields after n are read again
    # after it, so the call gets the new name, never the freed one.
    cfg = Config(0.5, 0, False, "".join(["an old name, long enough for the heap"] * 2))

    class Sneaky:
        def __index__(self) -> int:
            cfg.name = "".join(["the new name, also on the heap"] * 2)
            return 4

    cfg.n = Sneaky()
    assert rec.name_of(cfg) == "the new name, also on the heap" * 2
    assert cfg.name == "the new name, also on the heap" * 2
