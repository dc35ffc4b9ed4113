"""tests/python/hostile/test_hostile_messages.py: every refusal of an argument says where, in the
one argument-error format (`x: ... (argument #k of `sig`)`), with no foreign C++ backtrace: torch
tensors kffi cannot pass (sparse layouts, nested, quantized, meta), and record fields whose values
Python itself refuses to convert (a lone surrogate in a str field, as in a plain str parameter).
Manifests name the file, the line and the op (test_torch_manifest_hostile.py)."""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import warnings

import kffi
import pytest
from record_support import Blend, record_kernels

FOREIGN = ("Exception raised from", "frame #0", "frame #1")


@pytest.fixture(scope="module")
def rk():
    return kffi.load_module(record_kernels())


NOOP = r"""
#include <kffi/kffi.h>
void Take(kffi::ConstTensorView x) {}
int64_t Length(kffi::String s) { return static_cast<int64_t>(s.size()); }
KFFI_EXPORT_DOC(take, Take, "", "x");
KFFI_EXPORT_DOC(length, Length, "", "tag");
"""


def _bad_torch_tensors():
    torch = pytest.importorskip("torch")
    dense = torch.eye(4)
    cases = {
        "sparse_coo": lambda: dense.to_sparse(),
        "sparse_csr": lambda: dense.to_sparse_csr(),
        "sparse_csc": lambda: dense.to_sparse_csc(),
        "sparse_bsr": lambda: dense.to_sparse_bsr((2, 2)),
        "nested": lambda: torch.nested.nested_tensor([torch.ones(2), torch.ones(3)]),
        "meta": lambda: torch.empty(3, device="meta"),
        "quantized": lambda: torch.quantize_per_tensor(dense, 0.1, 0, torch.qint8),
    }
    out = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # beta-layout warnings
        for name, make in cases.items():
            try:
                out[name] = make()
            except (RuntimeError, NotImplementedError):  # this torch cannot make it
                continue
    return out


@pytest.mark.parametrize(
    "name", ["sparse_coo", "sparse_csr", "sparse_csc", "sparse_bsr", "nested", "meta", "quantized"]
)
def test_torch_tensors_kffi_cannot_pass_are_refused_in_kffis_words(name):
    bad = _bad_torch_tensors()
    if name not in bad:
        pytest.skip(f"this torch cannot make a {name} tensor")
    mod = kffi.cpp.load_inline("hostile_messages_take", cpp_sources=NOOP, quiet=True)
    with pytest.raises((TypeError, ValueError, BufferError)) as e:
        mod.take(bad[name])
    text = str(e.value)
    assert text.startswith("x: "), text
    assert text.endswith("(argument #0 of `take(x: Tensor) -> None`)"), text
    assert not any(f in text for f in FOREIGN), text
    if name.startswith("sparse"):
        assert f"layout torch.{name}" in text and "pass x.to_dense()" in text


@pytest.mark.parametrize(
    ("tag", "kind", "expected"),
    [
        ("a\udc80b", UnicodeEncodeError, "b.tag: surrogates not allowed (argument #0 of `"),
        (b"bytes", TypeError, "b.tag: expected str, got bytes (argument #0 of `"),
        (7, TypeError, "b.tag: expected str, got int (argument #0 of `"),
    ],
)
def test_a_record_fields_refusal_names_the_field(rk, tag, kind, expected):
    with pytest.raises(kind) as e:
        rk.blend_factor(Blend(1.0, 2, False, tag))
    assert expected in str(e.value), str(e.value)
    assert not any(f in str(e.value) for f in FOREIGN)


def test_the_same_value_in_a_plain_parameter_says_the_same(rk):
    mod = kffi.cpp.load_inline("hostile_messages_take", cpp_sources=NOOP, quiet=True)
    with pytest.raises(UnicodeEncodeError) as plain:
        mod.length("a\udc80b")
    with pytest.raises(UnicodeEncodeError) as field:
        rk.blend_factor(Blend(1.0, 2, False, "a\udc80b"))
    assert "tag: surrogates not allowed (argument #0 of `" in str(plain.value)
    assert "b.tag: surrogates not allowed (argument #0 of `" in str(field.value)
