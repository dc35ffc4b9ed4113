"""tests/python/contract/test_with_contract.py: kffi.with_contract, a contract for a function
without one.

A TVM-FFI export (tests/tvm_libs/tvm_testlib.cc's add_one(x, y): y = x + 1, no metadata about
shapes or what it writes) gets a contract from fake arguments or text: calls are checked first,
and the metadata makes it a torch op (mutates_args and the fake from the contract) that runs in
torch.compile(fullgraph=True), and a JAX op in jax.jit, with nothing written for the kernel.
"""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import inspect

import kffi
import numpy as np
import pytest
import tvm_libs

SIG = "`add_one(x: Tensor([n], float32, contiguous), y: Tensor([n], float32, contiguous, mut))`"


@pytest.fixture(scope="module")
def add_one():
    if tvm_libs.tvm_ffi_dir() is None:
        pytest.skip("apache-tvm-ffi's headers are not installed")
    return kffi.load_module(str(tvm_libs.build("tvm_testlib", linked=False))).add_one


@pytest.fixture(scope="module")
def checked(add_one):
    n = kffi.sym_int("n")
    return kffi.with_contract(
        add_one,
        kffi.fake_tensor("float32", (n,)),
        kffi.fake_tensor("float32", (n,), mut=True),
        param_names=["x", "y"],
    )


def test_calls_through_after_the_check(checked):
    x = np.arange(4, dtype=np.float32)
    y = np.zeros(4, np.float32)
    assert checked(x, y) is None
    assert y.tolist() == [1.0, 2.0, 3.0, 4.0]
    checked(y=y, x=x)  # keyword arguments from the contract's names
    assert y.tolist() == [1.0, 2.0, 3.0, 4.0]


def test_a_broken_contract_stops_the_call(checked):
    x = np.arange(4, dtype=np.float32)
    y = np.zeros(5, np.float32)
    with pytest.raises(ValueError) as e:
        checked(x, y)
    assert str(e.value) == (
        f"y.shape[0]: expected n = 4 (as x.shape[0]), got 5 (argument #1 of {SIG})"
    )
    assert not y.any()  # the function never ran
    with pytest.raises(TypeError, match=r"^x\.dtype: expected float32, got float64"):
        checked(x.astype(np.float64), np.zeros(4, np.float32))
    with pytest.raises(TypeError, match=r"^add_one: expected 2 arguments, got 1 "):
        checked(x)
    ro = np.zeros(4, np.float32)
    ro.setflags(write=False)
    with pytest.raises(ValueError, match=r"\by\b.*read-only"):
        checked(x, ro)


def test_fake_tensors_are_compact_unless_they_opt_out(add_one):
    """The export indexes its data as contiguous: a strided view is refused before it runs (it
    would read x[:4] for x[::2]); a fake tensor with contiguous=False lets one through."""
    n = kffi.sym_int("n")
    compact = kffi.with_contract(
        add_one,
        kffi.fake_tensor("float32", (n,)),
        kffi.fake_tensor("float32", (n,), mut=True),
        param_names=["x", "y"],
    )
    x = np.arange(8, dtype=np.float32)
    y = np.zeros(4, np.float32)
    with pytest.raises(ValueError) as e:
        compact(x[::2], y)
    assert "x.strides" in str(e.value) and "expected contiguous, got [2]" in str(e.value)
    with pytest.raises(ValueError, match=r"y\.strides"):
        compact(x[:4], np.zeros(8, np.float32)[::2])
    assert not y.any()  # the function never ran
    any_layout = kffi.with_contract(
        add_one,
        kffi.fake_tensor("float32", (n,), contiguous=False),
        kffi.fake_tensor("float32", (n,), mut=True),
        param_names=["x", "y"],
    )
    assert any_layout.contract.startswith("x: Tensor([n], float32), y: ")
    any_layout(x[::2], y)  # accepted: the contract no longer speaks for the layout
    assert y.any()


def test_metadata_signature_and_docs(add_one, checked):
    meta = checked._metadata
    assert meta["name"] == "add_one"
    assert meta["mutates"] == ["y"]
    assert [p["name"] for p in meta["params"]] == ["x", "y"]
    assert meta["params"][1]["shape"] == ["n"] and meta["params"][1]["mutable"] is True
    assert checked.contract == (
        "x: Tensor([n], float32, contiguous), y: Tensor([n], float32, contiguous, mut); n: int64"
    )
    assert list(inspect.signature(checked).parameters) == ["x", "y"]
    assert checked.__doc__.startswith(
        "add_one(x: Tensor([n], float32, contiguous), y: Tensor([n], float32, contiguous, mut))"
    )
    assert checked.wrapped is add_one


def test_contract_text_name_and_doc(add_one):
    f = kffi.with_contract(
        add_one,
        "x: Tensor([n], float32, device=cpu), y: Tensor([n], float32, mut)",
        name="inc",
        doc="y = x + 1",
    )
    assert f.__name__ == "inc" and f._metadata["doc"] == "y = x + 1"
    y = np.zeros(3, np.float32)
    f(np.ones(3, np.float32), y)
    assert y.tolist() == [2.0, 2.0, 2.0]
    with pytest.raises(ValueError, match=r"^x\.shape\[0\]|^y\.shape\[0\]"):
        f(np.ones(3, np.float32), np.zeros(2, np.float32))


def test_bad_uses(add_one):
    with pytest.raises(TypeError, match="expected a kffi.Function, got function"):
        kffi.with_contract(lambda x: x, "x: int")
    with pytest.raises(ValueError, match=r"Invalid contract for `add_one` at column 23"):
        kffi.with_contract(add_one, "x: Tensor([n], float32")
    with pytest.raises(ValueError, match="reads the environment stream itself"):
        kffi.with_contract(add_one, kffi.fake_tensor("float32", (4,)), kffi.fake_stream())
    with pytest.raises(TypeError, match="go with fake arguments"):
        kffi.with_contract(add_one, "x: int", param_names=["x"])
    with pytest.raises(ValueError, match="name must be an identifier"):
        kffi.with_contract(add_one, "x: int", name="not a name")


def test_torch_op_in_compile_fullgraph(checked):
    """The wave's end state on the CPU: a TVM-FFI export with a contract given at run time is a
    torch op (schema, mutates_args, fake from the contract) in torch.compile(fullgraph=True)."""
    torch = pytest.importorskip("torch")
    import kffi.torch

    op = kffi.torch.register_op(checked, "with_contract_test::add_one")
    assert str(op) == ("<kffi.torch op with_contract_test::add_one(Tensor x, Tensor(a!) y) -> ()>")
    functional = kffi.torch.register_op(checked, "with_contract_test::add_one_alloc", allocate=True)
    assert functional is not None

    def model(x):
        y = torch.empty_like(x)
        torch.ops.with_contract_test.add_one(x, y)
        return torch.ops.with_contract_test.add_one_alloc(y * 2) + y

    x = torch.arange(6, dtype=torch.float32)
    expected = (x + 1) * 2 + 1 + (x + 1)
    torch._dynamo.reset()
    assert torch.equal(torch.compile(model, fullgraph=True)(x), expected)
    torch._dynamo.reset()
    dynamic = torch.compile(model, fullgraph=True, dynamic=True)
    x9 = torch.arange(9, dtype=torch.float32)
    assert torch.equal(dynamic(x9), (x9 + 1) * 2 + 1 + (x9 + 1))
    with pytest.raises(TypeError, match=r"^x\.dtype: expected float32, got float64"):
        dynamic(torch.arange(9, dtype=torch.float64))
    torch.library.opcheck(torch.ops.with_contract_test.add_one.default, (x, torch.empty_like(x)))


def test_jax_jit(checked):
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp
    import kffi.jax

    step = jax.jit(lambda x: kffi.jax.call(checked, x, jnp.zeros_like(x)) * 2)
    x = jax.device_put(jnp.arange(5, dtype=jnp.float32), jax.devices("cpu")[0])  # a CPU kernel
    assert step(x).tolist() == [2.0, 4.0, 6.0, 8.0, 10.0]
