"""tests/python/contract/test_contract_render.py: kffi.compile's contracts declared with fake
tensors, rendered to the KFFI_EXPORT_CONTRACT text: symbols, names, dtypes, options, scalars and
the errors of bad declarations (no compiler runs; test_compile.py compiles them)."""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import kffi
import kffi.contract
import kffi.cpp
import numpy as np
import pytest


def render(*args, **kw):
    return kffi.contract.render_contract(*args, **kw)


def test_renders_the_seed_example_with_shared_symbol():
    n = kffi.sym_int()
    a = kffi.fake_tensor("float32", (n,), device="any")
    b = kffi.fake_tensor("float32", (n,), device="any")
    assert (
        render(a, b, param_names=["a", "b"])
        == "a: Tensor([n0], float32, contiguous), b: Tensor([n0], float32, contiguous); n0: int64"
    )


def test_symbols_are_named_in_order_of_appearance_and_keep_given_names():
    n, m, k = kffi.sym_int(), kffi.sym_int("m", width=32), kffi.sym_int(divisibility=16)
    text = render(
        kffi.fake_tensor("float16", (m, n)),
        kffi.fake_tensor("float16", (k, n)),
        param_names=["x", "y"],
    )
    assert text == (
        "x: Tensor([m, n0], float16, contiguous), y: Tensor([n1, n0], float16, contiguous); "
        "m: int32, n0: int64, n1: int64 % 16"
    )


def test_auto_names_skip_names_already_taken():
    n, given = kffi.sym_int(), kffi.sym_int("n0")
    text = render(kffi.fake_tensor("int8", (given, n)), param_names=["n1"])
    assert text == "n1: Tensor([n0, n2], int8, contiguous); n0: int64, n2: int64"


def test_default_parameter_names_and_device():
    t = kffi.fake_tensor("float32", (4,), contiguous=False)
    assert render(t, kffi.Int32) == "arg0: Tensor([4], float32), arg1: int32"
    assert render(t, default_device="cuda") == "arg0: Tensor([4], float32, device=cuda)"
    assert (
        render(kffi.fake_tensor("float32", (4,), device="cpu"), default_device="cuda")
        == "arg0: Tensor([4], float32, device=cpu, contiguous)"
    )
    assert (
        render(kffi.fake_tensor("float32", (4,), device=("cpu", "cuda"), contiguous=False))
        == "arg0: Tensor([4], float32, device=cpu|cuda)"
    )
    assert (
        render(kffi.fake_tensor("float32", (4,), device="any"), default_device="cuda")
        == "arg0: Tensor([4], float32, contiguous)"
    )


def test_dtypes_from_strings_numpy_torch_and_alternatives():
    torch = pytest.importorskip("torch")
    t = kffi.fake_tensor((np.float16, torch.bfloat16, "float32"), (2,))
    assert render(t) == "arg0: Tensor([2], float16|bfloat16|float32, contiguous)"
    t = kffi.fake_tensor(np.dtype("int64"), (2,))
    assert render(t) == "arg0: Tensor([2], int64, contiguous)"
    assert render(kffi.fake_tensor(None, (2,))) == "arg0: Tensor([2], *, contiguous)"
    assert render(kffi.fake_tensor("*", (2,))) == "arg0: Tensor([2], *, contiguous)"


def test_tensor_options_in_grammar_order():
    n, s = kffi.sym_int(), kffi.sym_int("s", divisibility=8)
    t = kffi.fake_tensor("float32", (n, 3), align=16, offset0=True, strides=[s, 1], device="cuda")
    assert (
        render(t, param_names=["x"])
        == "x: Tensor([n0, 3], float32, device=cuda, align=16, offset0, strides=[s, 1]); "
        "n0: int64, s: int64 % 8"
    )
    layouts = [
        ({}, ", contiguous"),  # compact row-major by default
        ({"contiguous": True}, ", contiguous"),
        ({"contiguous": False}, ""),  # any strides
        ({"stride_order": "row_major"}, ", row_major"),
        ({"stride_order": "col_major"}, ", col_major"),
        ({"stride_order": (1, 0)}, ", stride_order=(1,0)"),
        ({"strides": (3, 1)}, ", strides=[3, 1]"),  # the strides say it
        ({"strides": (3, 1), "contiguous": True}, ", contiguous, strides=[3, 1]"),
    ]
    for kw, text in layouts:
        assert (
            render(kffi.fake_tensor("float32", (2, 3), **kw))
            == f"arg0: Tensor([2, 3], float32{text})"
        )
    # An output's layout is what the function allocates: the default is left unsaid there.
    out = kffi.fake_tensor("float32", (2,))
    assert render(out, outputs=[out]) == (
        "arg0: Tensor([2], float32, contiguous) -> Tensor([2], float32)"
    )


def test_scalars_optional_tuple_and_env_stream():
    n = kffi.sym_int()
    t = kffi.fake_tensor("float32", (n,))
    text = render(
        kffi.Optional(t),
        (t, kffi.Float32, (kffi.Int64, kffi.Bool)),
        kffi.Int32.range(0, 1024),
        kffi.Float64.range(-1.5, 2.0),
        kffi.fake_stream(),
        int,
        2.0,
        True,
        param_names=["bias", "x", "k", "alpha", "stream", "i", "f", "b"],
    )
    assert text == (
        "bias: Optional[Tensor([n0], float32, contiguous)], "
        "x: Tuple[Tensor([n0], float32, contiguous), float32, Tuple[int64, bool]], "
        "k: int32[0, 1024], alpha: float64[-1.5, 2.0], stream: EnvStream, i: int, f: float, "
        "b: bool; n0: int64"
    )


def test_outputs_are_expressions_of_input_symbols():
    n, m = kffi.sym_int("n"), kffi.sym_int("m")
    x = kffi.fake_tensor("float32", (n, m))
    out = [
        kffi.fake_tensor("float32", (n * 2, (m + 1) // 2)),
        kffi.fake_tensor("int64", (n - (m - 1), 3 * n + 1, 7)),
    ]
    assert render(x, outputs=out, param_names=["x"]) == (
        "x: Tensor([n, m], float32, contiguous) -> Tensor([n * 2, (m + 1) // 2], float32), "
        "Tensor([n - (m - 1), 3 * n + 1, 7], int64); n: int64, m: int64"
    )


def test_bad_declarations_are_clear_errors():
    n = kffi.sym_int()
    with pytest.raises(ValueError, match="align is a power of two in bytes, got 12"):
        kffi.fake_tensor("float32", (4,), align=12)
    with pytest.raises(ValueError, match="stride_order lists each dimension 0..1 once"):
        kffi.fake_tensor("float32", (4, 4), stride_order=(0, 0))
    with pytest.raises(ValueError, match="give contiguous= or a stride_order, not both"):
        kffi.fake_tensor("float32", (4, 4), stride_order="col_major", contiguous=True)
    with pytest.raises(ValueError, match="device is 'cpu', 'cuda', 'any'"):
        kffi.fake_tensor("float32", (4,), device="tpu")
    with pytest.raises(TypeError, match="cannot read dtype 'floaty'"):
        kffi.fake_tensor("floaty", (4,))
    with pytest.raises(ValueError, match="a dimension must be a non-negative int"):
        kffi.fake_tensor("float32", (-1,))
    with pytest.raises(ValueError, match="divisibility must be an int >= 1"):
        kffi.sym_int(divisibility=0)
    with pytest.raises(ValueError, match="width must be 32 or 64"):
        kffi.sym_int(width=16)
    with pytest.raises(ValueError, match="empty or not finite"):
        kffi.Int32.range(5, 1)
    with pytest.raises(TypeError, match="kffi.Bool has no range"):
        kffi.Bool.range(0, 1)
    with pytest.raises(ValueError, match="expressions .* are for output shapes"):
        render(kffi.fake_tensor("float32", (n * 2,)))
    with pytest.raises(ValueError, match="output shape uses n1, which no input binds"):
        render(
            kffi.fake_tensor("float32", (n,)),
            outputs=[kffi.fake_tensor("float32", (kffi.sym_int(),))],
        )
    with pytest.raises(TypeError, match="a stream cannot be inside a tuple"):
        render((kffi.fake_tensor("float32", (n,)), kffi.fake_stream()))
    with pytest.raises(TypeError, match="cannot use 'x' .* as a fake argument"):
        render("x")
    with pytest.raises(ValueError, match="two symbols .* are named 'a'"):
        render(kffi.fake_tensor("float32", (kffi.sym_int("a"),)), param_names=["a"])
    with pytest.raises(ValueError, match="1 param_names for 2 fake arguments"):
        render(kffi.Int32, kffi.Int32, param_names=["x"])
    with pytest.raises(TypeError, match="no value at compile time"):
        bool(n)


def test_parameter_names_are_read_from_the_cpp_definition():
    src = """
        // add_one(decoy, call) is a comment
        void helper() { add_one(x, y); }
        void add_one(kffi::ConstTensorView a, kffi::Optional<kffi::Tuple<int, float>> b = {},
                     /* inline */ int32_t c, void* stream) {}
    """
    assert kffi.contract.cpp_param_names(src, "add_one") == ["a", "b", "c", "stream"]
    assert kffi.contract.cpp_param_names("void f(kffi::ConstTensorView, int x) {}", "f") is None
    assert kffi.contract.cpp_param_names("void f(int x);", "f") is None  # no definition
    assert kffi.contract.cpp_param_names("void f() {}", "f") == []
