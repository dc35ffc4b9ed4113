"""tests/python/contract/test_contract_parallel.py: parallel contract symbols (`; n: int64
parallel`).

A parallel symbol declares that the kernel computes each index along every dimension of that size
independently. It is a fact for frameworks (kffi.jax's partitioning and vmap: test_jax_shard.py),
not a check: the metadata's symbol entry says `"parallel": true`, calls are checked as before.
"""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import kffi
import kffi.contract
import numpy as np
import pytest

needs_contracts = pytest.mark.skipif(
    not kffi.contract.has_contract_support(), reason="installed headers lack KFFI_EXPORT_CONTRACT"
)

SRC = r"""
void scale_rows(kffi::ConstTensorView x, kffi::TensorView y) {
  for (int64_t i = 0; i < x.numel(); ++i) y.data<float>()[i] = 2 * x.data<float>()[i];
}
"""


def render(*args, **kw):
    return kffi.contract.render_contract(*args, **kw)


def test_sym_int_parallel_renders_in_the_symbol_list():
    n = kffi.sym_int("n", parallel=True)
    m = kffi.sym_int("m", divisibility=16, width=32, parallel=True)
    k = kffi.sym_int("k")
    text = render(kffi.fake_tensor("float32", (n, m, k)), param_names=["x"])
    assert text.endswith("; n: int64 parallel, m: int32 % 16 parallel, k: int64")
    assert repr(n) == "kffi.sym_int(name='n', divisibility=1, width=64, parallel=True)"
    assert repr(k) == "kffi.sym_int(name='k', divisibility=1, width=64)"
    assert n.parallel is True and k.parallel is False


def test_sym_int_parallel_must_be_a_bool():
    with pytest.raises(TypeError, match="parallel must be a bool, got 'yes'"):
        kffi.sym_int("n", parallel="yes")
    with pytest.raises(TypeError, match="parallel must be a bool, got 1"):
        kffi.sym_int(parallel=1)


@pytest.fixture(scope="module")
def scale_rows():
    if not kffi.contract.has_contract_support():
        pytest.skip("installed headers lack KFFI_EXPORT_CONTRACT")
    n, m = kffi.sym_int("n", parallel=True), kffi.sym_int("m", divisibility=2)
    return kffi.compile(
        SRC,
        "scale_rows",
        kffi.fake_tensor("float32", (n, m)),
        kffi.fake_tensor("float32", (n, m), mut=True),
        options={"quiet": True},
    )


@needs_contracts
def test_metadata_says_parallel_only_where_declared(scale_rows):
    assert scale_rows.contract.endswith("; n: int64 parallel, m: int64 % 2")
    assert scale_rows._metadata["symbols"] == [
        {"name": "n", "width": "int64", "divisibility": 1, "parallel": True},
        {"name": "m", "width": "int64", "divisibility": 2},
    ]


@needs_contracts
def test_parallel_changes_no_check(scale_rows):
    x = np.ones((3, 4), np.float32)
    y = np.zeros_like(x)
    scale_rows(x, y)
    np.testing.assert_array_equal(y, 2 * x)
    with pytest.raises(ValueError, match=r"y.shape\[0\]: expected n = 3"):
        scale_rows(x, np.zeros((2, 4), np.float32))
    with pytest.raises(ValueError, match="divisible by 2"):
        scale_rows(np.ones((3, 3), np.float32), np.zeros((3, 3), np.float32))


@needs_contracts
def test_with_contract_takes_parallel_in_text_and_fakes(scale_rows):
    text = "x: Tensor([n, m], float32), y: Tensor([n, m], float32, mut); n: int64 parallel"
    wrapped = kffi.with_contract(scale_rows, text, name="rows")
    assert [s.get("parallel", False) for s in wrapped._metadata["symbols"]] == [True, False]
    n, m = kffi.sym_int("n", parallel=True), kffi.sym_int("m")
    from_fakes = kffi.with_contract(
        scale_rows,
        kffi.fake_tensor("float32", (n, m)),
        kffi.fake_tensor("float32", (n, m), mut=True),
        param_names=["x", "y"],
        name="rows2",
    )
    assert from_fakes.contract.endswith("; n: int64 parallel, m: int64")
    assert from_fakes._metadata["symbols"][0]["parallel"] is True
    x = np.ones((2, 2), np.float32)
    y = np.zeros_like(x)
    from_fakes(x, y)
    np.testing.assert_array_equal(y, 2 * x)


@needs_contracts
@pytest.mark.parametrize(
    "text, message",
    [
        ("x: Tensor([n], float32); n: parallel", "expected `int32` or `int64`"),
        ("x: Tensor([n], float32); n parallel % 4", "expected `,`"),
        ("x: Tensor([n], float32); n: int64 parallel parallel", "expected `,`"),
    ],
)
def test_malformed_parallel_declarations_name_the_column(scale_rows, text, message):
    with pytest.raises(ValueError, match=f"at column [0-9]+: {message}"):
        kffi.with_contract(scale_rows, text, name="bad")
