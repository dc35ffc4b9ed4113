"""tests/python/kffi_jax/test_jax_abstract.py: output shapes from contract metadata
(kffi.contract._abstract), with hand-built metadata in the structured format (params'
kind/shape/dtypes/mutable, mutates, outputs' shape_rpn)."""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import pytest
from jax_support import meta as support_meta
from jax_support import out, scalar, tensor
from kffi.contract import _abstract as A
from kffi.contract._abstract import ContractError


def meta(params, outputs=(), mutates=None):
    return support_meta("f", params, outputs, mutates)


# ---- eval_shape_rpn for an allocated dimension ---------------------------------------------------


def eval_alloc(tokens, env, **kw):
    return A.eval_shape_rpn(tokens, env, nonnegative=True, **kw)


@pytest.mark.parametrize(
    "tokens, expected",
    [
        ([7], 7),
        (["n"], 5),
        (["n", 2, "*"], 10),
        (["n", 1, "+", 2, "//"], 3),
        (["n", "m", "-"], 2),
        (["m", "n", "-", "neg"], 2),
        (["n", 3, "%"], 2),
        (["n", "m", "*", "n", "m", "+", "-"], 7),
        ([1, 2, 3, 4, "+", "+", "+"], 10),
    ],
)
def test_eval_rpn_values(tokens, expected):
    assert eval_alloc(tokens, {"n": 5, "m": 3}) == expected


def test_eval_rpn_uses_only_operators_so_symbolic_ints_work():
    class Sym:
        """A stand-in for a symbolic int (e.g. torch.SymInt): records the expression."""

        def __init__(self, text):
            self.text = text

        def _op(self, op, other, swap=False):
            o = other.text if isinstance(other, Sym) else str(other)
            return Sym(f"({o} {op} {self.text})" if swap else f"({self.text} {op} {o})")

        def __add__(self, o):
            return self._op("+", o)

        def __mul__(self, o):
            return self._op("*", o)

        def __rmul__(self, o):
            return self._op("*", o, swap=True)

        def __floordiv__(self, o):
            return self._op("//", o)

        def __neg__(self):
            return Sym(f"-{self.text}")

    r = eval_alloc([2, "n", "*", 1, "+", 2, "//"], {"n": Sym("s0")})
    assert isinstance(r, Sym)
    assert r.text == "(((2 * s0) + 1) // 2)"
    assert eval_alloc(["n", "neg"], {"n": Sym("s1")}).text == "-s1"


@pytest.mark.parametrize(
    "tokens, message",
    [
        (["k"], "symbol 'k' is not bound by any input (bound: m, n)"),
        (["n", "+"], "operator '+' needs two operands"),
        (["neg"], "operator 'neg' needs an operand"),
        (["n", "m"], "leaves 2 values instead of one"),
        ([], "leaves 0 values instead of one"),
        (["n", 0, "//"], "division by zero"),
        (["n", 0, "%"], "modulo by zero"),
        ([1 << 62, 4, "*"], "int64 overflow"),
        (["m", "n", "-"], "evaluates to -2 (negative)"),
        (["n", 1.5, "*"], "cannot read token 1.5"),
        (["n", True, "*"], "cannot read token True"),
        (["n", None, "*"], "cannot read token None"),
        (["n", "**", 2], "symbol '**' is not bound"),
    ],
)
def test_eval_rpn_errors(tokens, message):
    with pytest.raises(ContractError) as e:
        eval_alloc(tokens, {"n": 5, "m": 3}, what="output 'y' dimension 0")
    assert message in str(e.value)
    assert str(e.value).startswith("output 'y' dimension 0:")


def test_eval_rpn_bounds_hostile_input():
    long = [1] + [1, "+"] * A.MAX_RPN_TOKENS
    with pytest.raises(ContractError, match=r"tokens \(at most 1024\)"):
        eval_alloc(long, {})
    with pytest.raises(ContractError, match="shape_rpn must be a list of tokens, got str"):
        eval_alloc("n 2 *", {"n": 1})
    assert eval_alloc([1] + [1, "+"] * 511, {}) == 512  # long but within the bound


def test_eval_shape_rpn_refuses_negative_allocated_dimensions():
    # eval_shape_rpn evaluates what C++ evaluates (a negative value included); a dimension to
    # allocate (nonnegative=True, as kffi.jax and kffi.torch call it) must not be negative.
    assert A.eval_shape_rpn(["m", "n", "-"], {"n": 5, "m": 3}) == -2
    with pytest.raises(ContractError, match=r"^d: evaluates to -2 \(negative\)"):
        A.eval_shape_rpn(["m", "n", "-"], {"n": 5, "m": 3}, what="d", nonnegative=True)
    with pytest.raises(ContractError, match=r"^an output dimension: evaluates to -2 \(negative\)"):
        eval_alloc(["m", "n", "-"], {"n": 5, "m": 3}, what="an output dimension")


def test_contract_error_is_a_value_error():
    assert issubclass(ContractError, ValueError)


# ---- bind_symbols -----------------------------------------------------------------------------


def test_bind_symbols_binds_and_checks():
    m = meta([tensor("a", ["n", 4]), tensor("b", ["n", "k"]), scalar("alpha", "float")])
    assert A.bind_symbols(m, {"a": (3, 4), "b": (3, 9)}) == {"n": 3, "k": 9}
    with pytest.raises(ContractError) as e:
        A.bind_symbols(m, {"a": (3, 4), "b": (5, 9)})
    assert str(e.value) == "b.shape[0] = 5: expected to match a.shape[0] = 3 (symbol n)"
    with pytest.raises(ContractError, match=r"a.shape\[1\]: expected 4, got 5 \(shape \(3, 5\)\)"):
        A.bind_symbols(m, {"a": (3, 5)})
    with pytest.raises(
        ContractError, match=r"parameter 'a': expected 2 dimensions \[n, 4\], got shape \(3,\)"
    ):
        A.bind_symbols(m, {"a": (3,)})


def test_bind_symbols_wildcards_and_missing_params():
    m = meta([tensor("a", ["*", "n"]), tensor("b", ["n"])])
    assert A.bind_symbols(m, {"a": (7, 2)}) == {"n": 2}
    assert A.bind_symbols(m, {"b": (5,)}) == {"n": 5}
    with pytest.raises(ContractError, match="cannot read dimension 2.5"):
        A.bind_symbols(meta([tensor("a", [2.5])]), {"a": (2,)})


# ---- infer_outputs ----------------------------------------------------------------------------


def test_mut_parameters_and_returned_outputs():
    m = meta(
        [
            tensor("a", ["n", "k"]),
            tensor("b", ["m", "k"]),
            tensor("out", ["n", "k"], mutable=True),
            scalar("alpha", "float"),
        ],
        outputs=[
            out("cat", [["n", "m", "+"], ["k"]]),
            out("half", [["n", 1, "+", 2, "//"]], dtype="int32"),
        ],
    )
    assert A.has_structured_contract(m)
    specs = A.output_specs(m)
    assert [(s.name, s.param_index, s.returned) for s in specs] == [
        ("out", 2, False),
        ("cat", None, True),
        ("half", None, True),
    ]
    got = A.infer_outputs(m, {"a": (3, 4), "b": (5, 4)}, {"a": "float32", "b": "float32"})
    assert got == [("out", (3, 4), "float32"), ("cat", (8, 4), "float32"), ("half", (2,), "int32")]


def test_mutates_list_marks_outputs_without_mutable_flag():
    m = meta([tensor("x", ["n"]), tensor("y", ["n"])], mutates=["y"])
    assert A.infer_outputs(m, {"x": (6,)}, {"x": "float32"}) == [("y", (6,), "float32")]


def test_in_place_parameters_take_the_given_shape_and_dtype():
    m = meta(
        [tensor("x", ["n"], dtypes=["float32", "float16"], mutable=True), scalar("v", "float")]
    )
    assert A.infer_outputs(m, {"x": (9,)}, {"x": "float16"}) == [("x", (9,), "float16")]


def test_output_dtype_resolution():
    # Several allowed dtypes: the first input whose dtype the output allows decides.
    m = meta(
        [
            tensor("x", ["n"], dtypes=["float32", "float16"]),
            tensor("y", ["n"], dtypes=["float32", "float16"], mutable=True),
        ]
    )
    assert A.infer_outputs(m, {"x": (2,)}, {"x": "float16"}) == [("y", (2,), "float16")]
    # Any dtype: the first input's.
    m = meta([tensor("x", ["n"], dtypes=["bfloat16"]), tensor("y", ["n"], dtypes=[], mutable=True)])
    assert A.infer_outputs(m, {"x": (2,)}, {"x": "bfloat16"}) == [("y", (2,), "bfloat16")]
    # Alternatives in an output's dtype text.
    m = meta([tensor("x", ["n"], dtypes=["int8"])], outputs=[out("o", [["n"]], "float32|int8")])
    assert A.infer_outputs(m, {"x": (2,)}, {"x": "int8"}) == [("o", (2,), "int8")]
    # Nothing decides.
    m = meta(
        [
            tensor("x", ["n"], dtypes=["int8"]),
            tensor("y", ["n"], dtypes=["float32", "float16"], mutable=True),
        ]
    )
    with pytest.raises(ContractError) as e:
        A.infer_outputs(m, {"x": (2,)}, {"x": "int8"})
    assert str(e.value) == (
        "output 'y': its dtype (float32|float16) is not fixed by the "
        "contract nor by an input's dtype"
    )


def test_output_shape_errors():
    m = meta([tensor("x", ["n"]), tensor("y", ["k"], mutable=True)])
    with pytest.raises(ContractError) as e:
        A.infer_outputs(m, {"x": (2,)}, {"x": "float32"})
    assert str(e.value) == (
        "output 'y' dimension 0: symbol 'k' is not bound by any input (bound: n)"
    )
    m = meta([tensor("x", ["n"]), tensor("y", ["*"], mutable=True)])
    with pytest.raises(ContractError, match="output 'y' dimension 0: '\\*' is not fixed"):
        A.infer_outputs(m, {"x": (2,)}, {"x": "float32"})
    m = meta([tensor("x", ["n"])], outputs=[{"name": "o", "shape": ["n"], "dtype": "float32"}])
    with pytest.raises(ContractError, match="output 'o' has no shape_rpn"):
        A.infer_outputs(m, {"x": (2,)}, {"x": "float32"})
    m = meta([tensor("x", ["n"])], outputs=[out("o", [["n", 5, "-"]])])
    with pytest.raises(ContractError, match=r"output 'o' dimension 0: evaluates to -3"):
        A.infer_outputs(m, {"x": (2,)}, {"x": "float32"})


def test_metadata_without_structured_contract():
    old = {
        "name": "f",
        "params": [{"name": "x", "type": "Tensor"}],
        "return": "None",
        "contract": "x: Tensor([n], float32)",
        "outputs": [],
    }
    assert not A.has_structured_contract(old)
    assert not A.has_structured_contract(None)
    with pytest.raises(ContractError, match="no structured contract"):
        A.output_specs(old)


# ---- the evaluator is C++ (kffi/contract/shape_rpn.h through _core): Python's words, exactly -------


@pytest.mark.parametrize(
    "tokens, symbols, message",
    [
        (["n", "+"], {"n": 5}, "w: operator '+' needs two operands in ['n', '+']"),
        (["n", 0, "//"], {"n": 5}, "w: division by zero in ['n', 0, '//'] with {'n': 5}"),
        ((1 << 63,), {}, "w: int64 overflow in (9223372036854775808,) with {}"),
        (["n"], {"n": 1 << 64}, "w: int64 overflow in ['n'] with {'n': 18446744073709551616}"),
        (["n"], {"n": True}, "w: symbol 'n' is bound to True, not an integer"),
        (["n"], {"n": 2.0}, "w: symbol 'n' is bound to 2.0, not an integer"),
        (["k"], {}, "w: symbol 'k' is not bound by any input (bound: none)"),
        (["n", "m"], {"n": 1, "m": 2}, "w: ['n', 'm'] leaves 2 values instead of one"),
    ],
)
def test_eval_rpn_messages_are_exact(tokens, symbols, message):
    with pytest.raises(ContractError) as e:
        A.eval_shape_rpn(tokens, symbols, what="w")
    assert str(e.value) == message


def test_eval_rpn_reads_numpy_ints_and_python_floor_semantics():
    np = pytest.importorskip("numpy")
    assert A.eval_shape_rpn(["n", 2, "*"], {"n": np.int64(4)}) == 8
    assert type(A.eval_shape_rpn(["n"], {"n": np.int32(3)})) is int
    assert A.eval_shape_rpn([-7, 2, "//"], {}) == -4 and A.eval_shape_rpn([-7, 2, "%"], {}) == 1
    assert A.eval_shape_rpn([7, -2, "%"], {}) == -1


def test_eval_rpn_passes_a_symbolic_value_s_own_error_through():
    class Bad:
        def __mul__(self, other):
            raise ArithmeticError("no products here")

    with pytest.raises(ArithmeticError, match="no products here"):
        A.eval_shape_rpn(["n", 2, "*"], {"n": Bad()})


def test_eval_rpn_reads_the_tokens_given_even_when_an_operator_changes_the_list():
    tokens = ["n", 2, "*", 3, "+"]

    class Clears:
        def __mul__(self, other):
            tokens.clear()  # Python code running mid-evaluation: no stale read, no crash
            return 10

    assert A.eval_shape_rpn(tokens, {"n": Clears()}) == 13
