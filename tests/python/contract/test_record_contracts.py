"""tests/python/contract/test_record_contracts.py: contracts that constrain the fields of record
parameters (`cfg: rc.Config{alpha: float64[0, 1], n: int64[1, 64]}`), checked before every call on a
kffi object with fields, a KFFI_RECORD struct's object, and dataclasses and NamedTuples converted to
them; their metadata, their rendering and the contracts refused (kernels/
record_contract_kernels.cc)."""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import dataclasses
import re
import subprocess
import sys
from typing import NamedTuple

import kffi
import numpy as np
import pytest
from conftest import KERNELS, LibraryBuilder

SCORE_SIG = (
    "`score(cfg: rc.Config{alpha: float64[0, 1], n: int64[1, 64]}, x: Tensor([m], float32))`"
)


@pytest.fixture(scope="module")
def rc():
    return kffi.load_module(
        LibraryBuilder().build("record_contract_kernels", KERNELS / "record_contract_kernels.cc")
    )


@dataclasses.dataclass
class Config:  # undecorated: the parameter's type (rc.Config) says what it becomes
    alpha: float
    n: int
    flag: bool
    name: str


@kffi.register_record("rc.Config")
class Partial(NamedTuple):  # fields left out keep their C++ defaults (alpha 0.5)
    n: int


@dataclasses.dataclass
class Blend:
    alpha: float
    n: int


X = np.zeros(3, np.float32)


def message(call) -> str:
    with pytest.raises(Exception) as info:
        call()
    return f"{type(info.value).__name__}: {info.value}"


def test_passing_calls(rc):
    assert rc.score(rc.make_config(0.5, 4), X) == 5.0
    assert rc.score(Config(1.0, 64, False, "a"), X) == 67.0
    assert rc.score(Config(0.0, 1, True, ""), X) == 3.0
    assert rc.score(Partial(2), X) == 4.0
    assert rc.mix(Blend(0.5, 2), 4.0) == 4.0
    assert rc.mix(Blend(1.0, 8), 1.0) == 8.0
    assert rc.maybe_n(None) == -1
    assert rc.maybe_n(rc.make_config(0.5, 8)) == 8
    assert rc.flagged(Config(0.5, 1, True, "x")) is True
    # A subtype's object passes where its base type is declared, its inherited fields checked.
    assert rc.score(rc.make_sub(0.25, 4), X) == 4.0


def test_field_range_messages(rc):
    assert message(lambda: rc.score(rc.make_config(1.5, 4), X)) == (
        "ValueError: cfg.alpha: expected a value in range [0, 1], got 1.5 "
        f"(argument #0 of {SCORE_SIG})"
    )
    assert message(lambda: rc.score(Config(0.5, 65, False, ""), X)) == (
        f"ValueError: cfg.n: expected a value in range [1, 64], got 65 (argument #0 of {SCORE_SIG})"
    )
    assert message(lambda: rc.score(Partial(0), X)).startswith(
        "ValueError: cfg.n: expected a value in range [1, 64], got 0 (argument #0 of `score("
    )
    assert message(lambda: rc.score(rc.make_sub(-0.5, 4), X)).startswith(
        "ValueError: cfg.alpha: expected a value in range [0, 1], got -0.5 (argument #0"
    )
    assert message(lambda: rc.mix(Blend(0.5, 9), 1.0)) == (
        "ValueError: b.n: expected a value in range [1, 8], got 9 (argument #0 of "
        "`mix(b: rc.Blend{alpha: float[0.0, 1.0], n: int32[1, 8]}, y: float)`)"
    )
    assert message(lambda: rc.maybe_n(rc.make_config(0.5, 9))).startswith(
        "ValueError: cfg.n: expected a value in range [0, 8], got 9 (argument #0 of `maybe_n("
    )
    # The fields are checked before the other arguments that follow them.
    assert message(lambda: rc.score(rc.make_config(2.0, 4), "x")).startswith(
        "ValueError: cfg.alpha: expected a value in range [0, 1], got 2.0"
    )


def test_type_messages(rc):
    assert message(lambda: rc.score(3, X)) == (
        f"TypeError: cfg: expected rc.Config, got int (argument #0 of {SCORE_SIG})"
    )
    assert message(lambda: rc.maybe_n(4)).startswith(
        "TypeError: cfg: expected rc.Config or None, got int (argument #0 of `maybe_n("
    )
    # An object of another record type is refused by its type, not converted.
    assert message(lambda: rc.mix(rc.make_config(0.5, 1), 1.0)).startswith(
        "TypeError: b: expected rc.Blend, got Config (argument #0 of `mix("
    )


def test_metadata_and_rendering(rc):
    meta = rc.metadata("score")
    cfg = meta["params"][0]
    assert cfg == {
        "name": "cfg",
        "type": "rc.Config",
        "kind": "record",
        "optional": False,
        "type_key": "rc.Config",
        "fields": [
            {
                "name": "alpha",
                "type": "float64[0, 1]",
                "kind": "float",
                "optional": False,
                "range": [0.0, 1.0],
            },
            {
                "name": "n",
                "type": "int64[1, 64]",
                "kind": "int",
                "optional": False,
                "range": [1, 64],
            },
        ],
    }
    assert meta["contract"].startswith("cfg: rc.Config{alpha: float64[0, 1], n: int64[1, 64]}")
    assert rc.metadata("maybe_n")["params"][0]["type"] == "Optional[rc.Config]"
    flag = rc.metadata("flagged")["params"][0]["fields"]
    assert flag == [{"name": "flag", "type": "bool", "kind": "bool", "optional": False}]
    # The metadata renders back into the contract's text.
    record = kffi.contract.FakeRecord.from_metadata(rc.metadata("mix")["params"][0])
    assert record.render() == "rc.Blend{alpha: float[0.0, 1.0], n: int32[1, 8]}"
    text = kffi.contract.render_contract(
        kffi.contract.fake_record(
            "rc.Config", alpha=kffi.Float64.range(0.0, 1.0), n=kffi.Int64.range(1, 64)
        ),
        kffi.Optional(kffi.contract.fake_record("rc.Blend", n=int)),
        kffi.contract.fake_record("rc.Config"),
        param_names=["cfg", "b", "c"],
    )
    assert text == (
        "cfg: rc.Config{alpha: float64[0.0, 1.0], n: int64[1, 64]}, "
        "b: Optional[rc.Blend{n: int}], c: rc.Config"
    )
    assert rc.parse(text) == f"f({text})"
    with pytest.raises(TypeError, match="field 'x' is a scalar"):
        kffi.contract.fake_record("rc.Config", x="float")
    with pytest.raises(ValueError, match="dotted identifiers"):
        kffi.contract.fake_record("rc..Config")


def test_stubgen_unaffected(rc):
    text = kffi.stubgen(rc)
    assert "def score(cfg: Config" in text or "def score(cfg: " in text


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "cfg: rc.Config{beta: float64}, x: Tensor([m], float32)",
            "ValueError: Invalid contract for `score`: parameter `cfg: rc.Config`: the type has no "
            "field `beta`",
        ),
        (
            "cfg: rc.Config{n: float64[0, 1]}, x: Tensor([m], float32)",
            "ValueError: Invalid contract for `score`: parameter `cfg: rc.Config`: field `n` is "
            "declared float64, but its C++ type is `int` (expected a floating-point type)",
        ),
        (
            "cfg: rc.Config{name: int}, x: Tensor([m], float32)",
            "ValueError: Invalid contract for `score`: parameter `cfg: rc.Config`: field `name` is "
            "declared int, but its C++ type is `str` (expected an integer type)",
        ),
        (
            "cfg: rc.Blend{n: int}, x: Tensor([m], float32)",
            "ValueError: Invalid contract for `score`: parameter #0 `cfg: rc.Blend{n: int}` cannot "
            "be passed to the C++ parameter of type `rc.Config`",
        ),
    ],
)
def test_contracts_refused_against_reflection(rc, text, expected):
    assert (
        message(lambda: rc.score_with(text, rc.make_config(0.5, 1), X)).splitlines()[0] == expected
    )


def test_unregistered_type_fails_at_the_call(rc):
    # The type may be registered later in a library's load, so an unknown key fails when a call
    # meets it (with the same message each time), not at parse time.
    text = "cfg: no.Such{n: int}, x: Tensor([m], float32)"
    assert rc.parse(text) == f"f({text})"
    helper = kffi.cpp.load_inline(
        "record_contract_unregistered",
        cpp_sources="""
        #include <kffi/contract.h>
        void f(kffi::ObjectRef cfg, kffi::ConstTensorView x) {}
        kffi::Function make(std::string text) {
          return kffi::Contract::Parse("f", text).Wrap(kffi::Function::FromTyped(
              [](kffi::Any cfg, kffi::Any x) {}, "f"));
        }
        """,
        functions=["make"],
    )
    f = helper.make(text)
    for _ in range(2):
        assert message(lambda: f(rc.make_config(0.5, 1), X)).startswith(
            "ValueError: Invalid contract for `f`: parameter `cfg: no.Such`: the type is not "
            "registered"
        )


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("c: rc.Config{n: int, n: int}", "column 22: field `n` is constrained twice"),
        ("c: rc.Config{n: Tensor([n], float32)}", "column 17: expected a field type"),
        ("c: rc.Config{n: int[5, 1]}", "column 20: the range is empty (low > high)"),
        (
            "c: rc.Config{n: int[0, 99999999999999999999]}",
            "column 24: integer literal out of range",
        ),
        ("c: rc.Config{n: float[0, 1e999]}", "column 26: a range bound must be finite"),
        ("c: rc.Config{n: int32[0, 4294967296]}", "column 22: the range of an int32 must lie"),
        ("c: rc.Config{n: int", "column 20: expected `}`"),
        ("c: rc.{n: int}", "column 7: expected a type key part"),
        ("c: rc.Config{: int}", "column 14: expected a field name"),
        ("c: rc.Config{n: int}.x", "column 21: expected `,`"),
        ("c: rc.Config{n: Optional[int]}", "column 17: expected a field type"),
        ("c: rc.Config{n\xe9: int}", "column 15: unexpected character `\\xc3`"),
    ],
)
def test_malformed_record_contracts(rc, text, expected):
    got = message(lambda: rc.parse(text)).splitlines()[0]
    assert got.startswith(f"ValueError: Invalid contract for `f` at {expected}"), got


def test_hostile_record_contracts(rc):
    too_many = "c: rc.Config{" + ", ".join(f"f{i}: int" for i in range(65)) + "}"
    assert "too many fields (at most 64)" in message(lambda: rc.parse(too_many))
    deep = "c: " + "Optional[" * 17 + "rc.Config{n: int}" + "]" * 17
    assert "nest more than 16 deep" in message(lambda: rc.parse(deep))
    nested = "c: rc.Config{n: rc.Config{n: int}}"
    assert "expected a field type" in message(lambda: rc.parse(nested))
    huge = "c: rc.Config{n: int[-9223372036854775808, 9223372036854775807]}"
    assert rc.parse(huge) == f"f({huge})"
    # Bytes that are not UTF-8 are refused with a message that is.
    raw = kffi.cpp.load_inline(
        "record_contract_raw_bytes",
        cpp_sources="""
        #include <kffi/contract.h>
        std::string parse_bytes(kffi::Bytes text) {
          return kffi::Contract::Parse("f", std::string(text.data(), text.size())).signature();
        }
        """,
        functions=["parse_bytes"],
    )
    got = message(lambda: raw.parse_bytes(b"c: rc.Config{n\xff: int}"))
    assert "column 15: unexpected character `\\xff`" in got
    many = ", ".join(f"r{i}: rc.Config{{n: int}}" for i in range(40))
    assert rc.parse(many) == f"f({many})"  # records share one frame: no limit of 31 here


def test_records_in_many_calls_and_threads(rc):
    import threading

    cfg = rc.make_config(0.5, 4)
    errors = []

    def work():
        try:
            for i in range(2000):
                assert rc.score(cfg, X) == 5.0
                if i % 100 == 0:
                    with pytest.raises(ValueError):
                        rc.score(Config(2.0, 1, False, ""), X)
        except Exception as e:
            errors.append(e)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_type_registered_after_the_export_is_validated_at_the_first_call(tmp_path):
    # The export comes before the type's registration in its library: the contract is checked
    # against the type's reflection when the first call meets the record.
    src = tmp_path / "late_record.cc"
    src.write_text(
        """
        #include <kffi/kffi.h>
        #include <kffi/reflection.h>
        struct Late;
        double Use(kffi::ObjectRef cfg) { return 1.0; }
        KFFI_EXPORT_CONTRACT(use, Use, "cfg: late.Cfg{n: int64[0, 4]}");
        namespace {
        class LateObj : public kffi::Object {
         public:
          KFFI_DECLARE_OBJECT_INFO("late.Cfg", LateObj, kffi::Object)
          int64_t n = 9;
        };
        KFFI_OBJECT_DEF(LateObj).field_rw("n", &LateObj::n);
        kffi::ObjectRef Make() { return kffi::ObjectRef(kffi::make_object<LateObj>()); }
        }  // namespace
        KFFI_EXPORT(make, Make);
        """
    )
    script = (
        "import kffi, sys\n"
        f"m = kffi.load_module({str(LibraryBuilder().build('late_record', src))!r})\n"
        "try:\n"
        "    m.use(m.make())\n"
        "except ValueError as e:\n"
        "    print(e)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False
    )
    assert re.match(r"cfg\.n: expected a value in range \[0, 4\], got 9", out.stdout), (
        out.stdout + out.stderr
    )
