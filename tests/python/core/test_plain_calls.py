"""tests/python/core/test_plain_calls.py: calls whose arguments are all ints, floats or str.

Such a call packs its arguments without a call context. The quick packing takes one-digit ints
and ASCII str of up to 7 bytes; a bigger int, a longer str (whose bytes are scanned for a NUL)
or a float go on to the full plain packing, and anything else (a non-ASCII str, a str longer than
7 bytes with a NUL, an int past int64, a bool) to the general conversion. Every test runs with
the GIL held and released (the two call paths after packing), and checks what reaches C++
byte for byte, the result, and the errors, which must not depend on the path taken.
"""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import traceback

import kffi
import pytest


@pytest.fixture(scope="module")
def mod(library_paths):
    return kffi.load_module(library_paths["plain_kernels"])


@pytest.fixture(params=["held", "released"])
def pk(request, mod):
    """The module, with every function set to hold or release the GIL for the call."""
    for name in ("echo", "length", "echo_int", "join", "sum4", "nothing", "refuse"):
        getattr(mod, name).release_gil = request.param == "released"
    return mod


STRINGS = [
    "",
    "a",
    "ab",
    "abc",
    "abcd",
    "hello",
    "1234567",  # the longest str packed inline
    "12345678",  # the shortest one borrowed
    "x" * 1000,
    "a\0b",  # a NUL in an inline str
    "abcdefgh\0ijk",  # a NUL past 7 bytes: an owned copy (a C string would end at the NUL)
    "\0" * 9,
    "h\u00e9llo",  # not ASCII: UTF-8 through the general conversion
    "\U0001f600" * 3,
]


@pytest.mark.parametrize("s", STRINGS)
def test_every_byte_of_a_str_arrives(pk, s):
    assert pk.echo(s) == s
    assert pk.length(s) == len(s.encode())


def test_a_str_subclass_and_a_str_made_at_run_time(pk):
    class Name(str):
        pass

    assert pk.echo(Name("subclass")) == "subclass"
    made = "".join(["ab", "cd", "ef", "gh"])  # not interned, built at run time
    assert pk.echo(made) == "abcdefgh"


INTS = [0, 1, -1, 7, 2**30 - 1, 2**30, -(2**30), 2**40, 2**62, -(2**62), 2**63 - 1, -(2**63)]


@pytest.mark.parametrize("v", INTS)
def test_every_int64_arrives(pk, v):
    assert pk.echo_int(v) == v


@pytest.mark.parametrize("v", [2**63, -(2**63) - 1, 2**200])
def test_an_int_past_int64_raises_naming_the_parameter(pk, v):
    with pytest.raises(OverflowError) as info:
        pk.echo_int(v)
    assert str(info.value).startswith("v: Python int too large to convert to int64")


def test_an_int_subclass_and_a_bool(pk):
    class Count(int):
        pass

    assert pk.echo_int(Count(41)) == 41
    assert pk.echo_int(True) == 1


def test_mixed_arguments_in_every_order_of_fallback(pk):
    assert pk.join("ab", 3, 0.5) == "ab|3|0.500000"
    assert pk.join("abcdefghij", 2**50, -1.25) == f"abcdefghij|{2**50}|-1.250000"
    assert pk.join("h\u00e9", -7, 2.0) == "h\u00e9|-7|2.000000"
    # The str is plain, the int is not: the first argument does not decide the path.
    with pytest.raises(OverflowError, match="^n: Python int too large"):
        pk.join("ab", 2**64, 0.0)
    # An int where the float goes: converted as the general path converts it.
    assert pk.join("s", 1, 2) == "s|1|2.000000"


def test_four_arguments(pk):
    assert pk.sum4(1, 2, 3, 4) == 10
    assert pk.sum4(2**40, 2**40, -1, 1) == 2**41
    assert pk.sum4(1, 2, 3, 2**62) == 6 + 2**62


def test_a_function_that_returns_nothing_returns_none(pk):
    assert pk.nothing(1, 2, 3) is None
    assert pk.nothing(2**60, -5, 0) is None


def test_a_wrong_type_names_the_argument_and_the_function(pk):
    with pytest.raises(TypeError) as info:
        pk.length(5)
    assert str(info.value) == "s: expected str, got int (argument #0 of `length(s: str) -> int`)"
    with pytest.raises(TypeError) as info:
        pk.sum4(1, 2, "three", 4)
    assert str(info.value) == (
        "c: expected int, got str (argument #2 of `sum4(a: int, b: int, c: int, d: int) -> int`)"
    )


def test_a_wrong_count_names_the_function(pk):
    with pytest.raises(TypeError) as info:
        pk.length("a", "b")
    assert str(info.value) == "length: expected 1 argument, got 2 (`length(s: str) -> int`)"
    with pytest.raises(TypeError) as info:
        pk.nothing(1, 2)
    assert str(info.value).startswith("nothing: expected 3 arguments, got 2")


def test_an_error_raised_in_cpp_carries_its_message_and_source_line(pk):
    with pytest.raises(ValueError) as info:
        pk.refuse(12)
    assert str(info.value) == "refused 12"
    # The export's frame (its name and the line of KFFI_EXPORT_DOC), then the throw's.
    frames = traceback.extract_tb(info.value.__traceback__)[-2:]
    assert [(f.name, f.line) for f in frames] == [
        ("refuse", 'KFFI_EXPORT_DOC(refuse, Refuse, "Raises ValueError.", "n");'),
        ("Refuse", 'void Refuse(int64_t n) { KFFI_THROW(ValueError) << "refused " << n; }'),
    ]
    assert all(f.filename.endswith("plain_kernels.cc") for f in frames)


def test_the_process_stays_healthy_after_errors(pk):
    for _ in range(100):
        with pytest.raises(ValueError):
            pk.refuse(1)
        with pytest.raises(TypeError):
            pk.length(1)
    assert pk.echo("still") == "still"
    assert pk.sum4(1, 1, 1, 1) == 4


def test_a_released_function_refuses_a_plain_call():
    f = kffi.Function(lambda s: s)
    assert f("ok") == "ok"
    f._release()
    with pytest.raises(ValueError, match="^Cannot call a released kffi.Function$"):
        f("ok")
    with pytest.raises(ValueError, match="^Cannot call a released kffi.Function$"):
        f(1, 2.0, "x")
