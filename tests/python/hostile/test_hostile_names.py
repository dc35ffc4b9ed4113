"""tests/python/hostile/test_hostile_names.py: every name Module.functions() lists can be looked up,
and the global registry's likewise, whatever bytes the library gave the name (issue 29, class 8):
names that are not UTF-8 come back decoded with surrogateescape, and a lookup encodes them back to
the same bytes. The stub of such a module is valid Python too (class 7)."""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import subprocess
import sys

import kffi
import pytest

# Invalid UTF-8 of every kind (and two valid controls), each inside a function name.
BYTE_PATTERNS = [
    b"\x80",  # a lone continuation byte
    b"\xbf\xbf",
    b"\xc3",  # a 2-byte sequence cut short
    b"\xe2\x82",  # a 3-byte sequence cut short
    b"\xf0\x9f\x98",  # a 4-byte sequence cut short
    b"\xc0\xaf",  # an overlong encoding of '/'
    b"\xe0\x80\xaf",  # an overlong 3-byte encoding
    b"\xed\xa0\x80",  # an encoded surrogate (U+D800)
    b"\xf4\x90\x80\x80",  # past U+10FFFF
    b"\xf8\x88\x80\x80\x80",  # a 5-byte form
    b"\xfe",
    b"\xff",
    b"caf\xc3\xa9\xff",  # valid, then invalid
    b"\xc3\xa9",  # valid: e-acute
    b"\xf0\x9f\x98\x80",  # valid: an emoji
]


@pytest.fixture(scope="module")
def hostile_names_module(tmp_path_factory):
    """A library exporting f<i> under the name b"n" + BYTE_PATTERNS[i] + b"_<i>" (each returns
    i), renamed in the object file (objcopy) before linking so that the symbol hash tables are
    right for the bytes."""
    d = tmp_path_factory.mktemp("names")
    flags = subprocess.run(
        [sys.executable, "-m", "kffi.config", "--cxxflags", "--ldflags", "--libs"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    src = d / "names.cc"
    src.write_text(
        "#include <kffi/export.h>\n#include <cstdint>\n"
        + "".join(
            f"KFFI_EXPORT(P{i:02d}, []() {{ return int64_t{{{i}}}; }});\n"
            for i in range(len(BYTE_PATTERNS))
        )
    )
    obj = d / "names.o"
    subprocess.run(["c++", "-c", "-fPIC", "-o", obj, src, *flags], check=True)
    renames = []
    for i, pattern in enumerate(BYTE_PATTERNS):
        new = b"n" + pattern + b"_%d" % i
        for prefix in (b"__kffi_", b"__kffi__meta_"):
            renames += [b"--redefine-sym", prefix + b"P%02d=" % i + prefix + new]
    subprocess.run([b"objcopy", *renames, bytes(obj)], check=True)
    lib = d / "libnames.so"
    subprocess.run(["c++", "-shared", "-o", lib, obj, *flags], check=True)
    return kffi.load_module(lib)


def test_every_listed_name_can_be_looked_up(hostile_names_module):
    mod = hostile_names_module
    names = mod.functions()
    expected = [
        (b"n" + p + b"_%d" % i).decode("utf-8", "surrogateescape")
        for i, p in enumerate(BYTE_PATTERNS)
    ]
    assert sorted(names) == sorted(expected)
    for i, pattern in enumerate(BYTE_PATTERNS):
        name = expected[i]
        assert "\ufffd" not in name  # never a replacement character: it would match no name
        assert name.encode("utf-8", "surrogateescape") == b"n" + pattern + b"_%d" % i
        assert name in mod
        assert mod[name]() == i
        assert getattr(mod, name)() == i
        assert mod.get_function(name)() == i
        assert mod.metadata(name)["return"] == "int"
    # A str that no bytes decode to (a surrogate outside surrogateescape's range) names nothing.
    for odd in ["\ud800", "n\udfff_1", "\udc7f"]:
        assert odd not in mod
        assert mod.get_function(odd) is None
        assert mod.metadata(odd) is None
        with pytest.raises(KeyError):
            mod[odd]


def test_global_names_that_are_not_utf8(t):
    name = "testing.hostile\udcff\udcfe"
    kffi.register_global_func(name, lambda: 7)
    try:
        assert name in kffi.list_global_func_names()
        assert kffi.get_global_func(name)() == 7
    finally:
        assert kffi.remove_global_func(name)
    assert kffi.get_global_func(name, allow_missing=True) is None
    assert kffi.get_global_func("\ud800", allow_missing=True) is None
    assert kffi.remove_global_func("\ud800") is False
    with pytest.raises(ValueError, match="surrogate that no UTF-8 byte sequence decodes to"):
        kffi.register_global_func("\ud800", lambda: 7)


def test_the_stub_of_such_a_module_is_valid_python(hostile_names_module):
    text = kffi.stubgen(hostile_names_module)
    compile(text, "names.pyi", "exec")
    text.encode("utf-8")  # writable as UTF-8: no lone surrogate left in it
    for name in hostile_names_module.functions():
        assert f"# {name!r} is not a Python identifier: reach it as module[{name!r}]" in text or (
            f"def {name}(" in text
        )
