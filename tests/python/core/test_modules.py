"""tests/python/core/test_modules.py: loading kernel libraries with kffi.load_module and calling
their exports by attribute, by item, by keyword; signatures and docstrings from the export
metadata."""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import contextlib
import gc
import inspect
import io
import os
import pydoc
import sys
import traceback
from pathlib import Path

import kffi
import pytest


def test_load_module_returns_a_module(module_kernels, module_kernels_path):
    assert isinstance(module_kernels, kffi.Module)
    assert module_kernels.name == os.path.realpath(module_kernels_path)
    assert repr(module_kernels) == f"kffi.Module({module_kernels.name!r})"


def test_load_module_accepts_path_objects_and_returns_the_same_native_module(
    module_kernels, module_kernels_path
):
    again = kffi.load_module(Path(module_kernels_path))
    assert again.same_as(module_kernels)


def test_functions_lists_the_exports_sorted(module_kernels):
    assert module_kernels.functions() == ["affine", "fail", "greet", "subtract"]


def test_call_by_attribute_and_by_item(module_kernels):
    assert module_kernels.affine(2.0, 3.0, 1.0) == 7.0
    assert module_kernels["affine"](2.0, 3.0, 1.0) == 7.0
    assert module_kernels.subtract(10, 4) == 6
    assert module_kernels.greet("ada", 2) == "hello ada, hello ada"


def test_get_function_and_contains(module_kernels):
    assert isinstance(module_kernels.get_function("greet"), kffi.Function)
    assert module_kernels.get_function("missing") is None
    assert "greet" in module_kernels
    assert "missing" not in module_kernels
    assert {"affine", "fail", "greet", "subtract"} <= set(dir(module_kernels))


def test_metadata_of_documented_export(module_kernels):
    assert module_kernels.metadata("affine") == {
        "name": "affine",
        "params": [
            {"name": "a", "type": "float"},
            {"name": "scale", "type": "float"},
            {"name": "offset", "type": "float"},
        ],
        "return": "float",
        "doc": "Returns a * scale + offset.",
    }


def test_metadata_of_export_without_names_uses_positional_names(module_kernels):
    meta = module_kernels.metadata("subtract")
    assert [p["name"] for p in meta["params"]] == ["arg0", "arg1"]
    assert [p["type"] for p in meta["params"]] == ["int", "int"]
    assert meta["return"] == "int" and meta["doc"] == ""


def test_metadata_of_missing_function_is_none(module_kernels):
    assert module_kernels.metadata("missing") is None


def test_keyword_arguments_by_parameter_name(module_kernels):
    assert module_kernels.affine(a=2.0, scale=3.0, offset=1.0) == 7.0
    assert module_kernels.affine(2.0, offset=1.0, scale=3.0) == 7.0
    assert module_kernels.greet(times=1, name="bo") == "hello bo"


def test_keyword_errors(module_kernels):
    with pytest.raises(TypeError, match="got an unexpected keyword argument 'bogus'"):
        module_kernels.affine(1.0, 2.0, bogus=3.0)
    with pytest.raises(TypeError, match="got multiple values for argument 'a'"):
        module_kernels.affine(1.0, 2.0, 3.0, a=1.0)
    with pytest.raises(TypeError, match="missing required argument 'offset'"):
        module_kernels.affine(1.0, scale=2.0)


def test_signature_from_metadata(module_kernels):
    sig = inspect.signature(module_kernels.affine)
    assert list(sig.parameters) == ["a", "scale", "offset"]
    assert [p.annotation for p in sig.parameters.values()] == ["float", "float", "float"]
    assert sig.return_annotation == "float"
    assert str(sig) == "(a: 'float', scale: 'float', offset: 'float') -> 'float'"


def test_name_and_docstring_from_metadata(module_kernels):
    f = module_kernels.greet
    assert f.__name__ == "greet"
    assert f.__doc__ == (
        "greet(name: str, times: int) -> str\n\n"
        "Greets name, times times.\nSecond line of the docstring."
    )


def test_help_shows_signature_and_docstring(module_kernels):
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        help(module_kernels.affine)
    text = buf.getvalue()
    # The annotations are strings; pydoc quotes them through 3.13 and shows them bare from 3.14.
    q = "'" if sys.version_info < (3, 14) else ""
    assert f"affine(a: {q}float{q}, scale: {q}float{q}, offset: {q}float{q}) -> {q}float{q}" in text
    assert "Returns a * scale + offset." in text
    rendered = pydoc.render_doc(module_kernels.greet, renderer=pydoc.plaintext)
    assert "Second line of the docstring." in rendered


def test_export_errors_keep_kind_message_and_frame(module_kernels):
    with pytest.raises(ValueError, match="^module_kernels failed: boom$") as info:
        module_kernels.fail("boom")
    files = [f.filename for f in traceback.extract_tb(info.value.__traceback__)]
    assert any(f.endswith("module_kernels.cc") for f in files)


def test_export_type_mismatch_message(module_kernels):
    with pytest.raises(TypeError) as info:
        module_kernels.subtract(1, "2")
    assert str(info.value) == (
        "arg1: expected int, got str (argument #1 of `subtract(arg0: int, arg1: int) -> int`)"
    )


def test_export_argument_count_message(module_kernels):
    # The export names its parameters (KFFI_EXPORT_DOC), so the signature in the message does too.
    with pytest.raises(
        TypeError,
        match=r"^greet: expected 2 arguments, got 3 \(`greet\(name: str, times: int\) -> str`\)$",
    ):
        module_kernels.greet("a", 1, 2)


def test_function_keeps_working_after_module_is_dropped(module_kernels_path):
    f = kffi.load_module(module_kernels_path).affine
    gc.collect()
    assert f(1.0, 2.0, 3.0) == 5.0


# ---- errors -----------------------------------------------------------------------------------


def test_missing_file_is_file_not_found(tmp_path):
    missing = tmp_path / "nope.so"
    with pytest.raises(FileNotFoundError, match="Cannot load kffi module: no such file"):
        kffi.load_module(missing)


def test_file_that_is_not_a_library(tmp_path):
    fake = tmp_path / "fake.so"
    fake.write_text("this is not an ELF file")
    with pytest.raises(RuntimeError, match="not a loadable shared library"):
        kffi.load_module(fake)


def test_directory_is_not_a_library(tmp_path):
    with pytest.raises(RuntimeError, match="not a loadable shared library"):
        kffi.load_module(tmp_path)


def test_shared_library_without_kffi_exports(tmp_path):
    import ctypes.util

    name = ctypes.util.find_library("m")
    folders = (
        "/lib/x86_64-linux-gnu",
        "/usr/lib/x86_64-linux-gnu",
        "/lib/aarch64-linux-gnu",
        "/usr/lib/aarch64-linux-gnu",
        "/lib64",
        "/usr/lib64",
        "/lib",
        "/usr/lib",
    )
    candidates = [Path(d) / name for d in folders] if name else []
    libm = next((p for p in candidates if p.exists()), None)
    if libm is None:
        pytest.skip("no libm found to load")
    with pytest.raises(RuntimeError, match="it is not a kffi library"):
        kffi.load_module(libm)


def test_missing_function_by_attribute_is_attribute_error(module_kernels):
    with pytest.raises(
        AttributeError, match="has no function 'nope'; available: affine, fail, greet, subtract"
    ):
        module_kernels.nope  # noqa: B018 (the lookup itself is under test)


def test_missing_function_by_item_is_key_error(module_kernels):
    with pytest.raises(KeyError, match="has no function 'nope'"):
        module_kernels["nope"]


def test_dunder_lookup_is_plain_attribute_error(module_kernels):
    with pytest.raises(AttributeError):
        module_kernels.__wrapped__  # noqa: B018 (pydoc and inspect probe such names)


def test_testing_library_is_a_module_with_its_export(testing_module):
    assert testing_module.functions() == ["testing_ping"]
    assert testing_module.testing_ping(x=5) == 5
