"""tests/python/core/test_type_text.py: kffi._type_text, the one reader of metadata type texts,
reads both spellings (C++ metadata ``Optional<float>``, contract ``Optional[Tensor(...)]``)
alike."""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import pytest
from kffi._type_text import MAX_TYPE_DEPTH, is_optional, is_tensor, optional_inner, parse_type


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Optional<float>", (True, "float")),
        ("Optional[Tensor([n], float32)]", (True, "Tensor([n], float32)")),
        (" Optional< Tensor > ", (True, "Tensor")),
        ("float", (False, "float")),
        ("Optional", (False, "Optional")),
        ("Optional<float]", (False, "Optional<float]")),
    ],
)
def test_optional_inner_reads_both_spellings(text, expected):
    assert optional_inner(text) == expected
    assert is_optional(text) == expected[0]


@pytest.mark.parametrize(
    "text",
    [
        "Tensor",
        "DLTensor*",
        "TensorView",
        "Tensor([n], float32, mut)",
        "Optional<Tensor>",
        "Optional[Tensor([n], float32)]",
    ],
)
def test_tensor_types(text):
    assert is_tensor(text)


@pytest.mark.parametrize("text", ["float", "Optional<float>", "Array<Tensor>", "", None, 3])
def test_not_tensor_types(text):
    assert not is_tensor(text)
    assert not is_optional(text) or text == "Optional<float>"


def test_parse_type_grammar_and_depth():
    assert parse_type("Optional<float>") == ("Optional", [("float", [])])
    assert parse_type("Optional[Tensor([n], float32)]") == ("Optional", [("Tensor", [])])
    assert parse_type("int32[0, 10]") == ("int32", [])
    assert parse_type("Map<str, Array<int>>") == (
        "Map",
        [("str", []), ("Array", [("int", [])])],
    )
    assert parse_type("Optional<float") == ("", [])  # unbalanced: Any
    deep = "Optional<" * (MAX_TYPE_DEPTH + 5) + "int" + ">" * (MAX_TYPE_DEPTH + 5)
    node, depth = parse_type(deep), 0
    while node[1]:
        node, depth = node[1][0], depth + 1
    assert depth == MAX_TYPE_DEPTH and node == ("", [])
