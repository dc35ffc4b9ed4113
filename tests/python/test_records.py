"""tests/python/test_records.py: dataclass and NamedTuple arguments matched by the parameter's type
(no register_record), and plain C++ structs declared with KFFI_RECORD."""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import dataclasses
import gc
import sys
from pathlib import Path
from typing import NamedTuple

import kffi
import pytest
from conftest import LibraryBuilder

KERNELS = Path(__file__).resolve().parent / "kernels"


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
