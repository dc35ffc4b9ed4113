"""tests/python/kffi_jax/test_jax_call.py: kffi.jax.call, the kffi_call primitive: eager and jit,
output shapes from contracts (hand-built structured metadata; kffi.compile contracts once they carry
it), outputs named in out_shapes without a contract, binding order, refusals of JAX inputs for
parameters the function may write, attributes, aliases, caching, missing rules."""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import os
import threading
from pathlib import Path

import numpy as np
import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp
import jax_support
import kffi
import kffi.jax
from jax_support import meta, out, scalar, tensor, with_contract

jk = jax_support.jk  # the test kernel library (a session fixture)


def sds(shape, dtype=jnp.float32):
    return jax.ShapeDtypeStruct(shape, dtype)


# ---- without a contract: outputs named in out_shapes ---------------------------------------------


def test_out_shapes_eager_and_jit(jk):
    x = jnp.arange(4, dtype=jnp.float32)
    y = kffi.jax.call(jk.add_one, x, out_shapes={"y": sds((4,))})
    assert isinstance(y, jax.Array)
    np.testing.assert_array_equal(y, np.arange(4) + 1)
    f = jax.jit(lambda a: kffi.jax.call(jk.add_one, a, out_shapes={"y": sds(a.shape)}) * 3)
    np.testing.assert_array_equal(f(x), (np.arange(4) + 1) * 3)


def test_output_first_kernel_leaves_the_jax_input_unchanged(jk):
    """Issue 23 item 3: scale_into(y, x, factor), the output first, called with the input
    positionally. The positional array binds to x (y is named as the output): the result is
    x * factor and the JAX input is unchanged, eagerly and under jit."""
    x = jnp.arange(4, dtype=jnp.float32)
    y = kffi.jax.call(jk.scale_into, x, factor=2.0, out_shapes={"y": sds((4,))})
    np.testing.assert_array_equal(y, np.arange(4) * 2)
    np.testing.assert_array_equal(x, np.arange(4))
    f = jax.jit(lambda a: kffi.jax.call(jk.scale_into, a, 3.0, out_shapes={"y": sds(a.shape)}))
    np.testing.assert_array_equal(f(x), np.arange(4) * 3)
    np.testing.assert_array_equal(x, np.arange(4))
    # By keyword, the same.
    y = kffi.jax.call(jk.scale_into, x=x, factor=0.5, out_shapes={"y": sds((4,))})
    np.testing.assert_array_equal(y, np.arange(4) * 0.5)


def test_unnamed_outputs_are_refused_while_a_tensor_parameter_is_unfilled(jk):
    """The exact call of the issue (an unnamed out_shapes, the input positional) used to bind x
    to y and write the JAX input: it is refused before XLA runs, saying how to name outputs."""
    x = jnp.arange(4, dtype=jnp.float32)
    with pytest.raises(TypeError) as e:
        kffi.jax.call(jk.scale_into, x, factor=2.0, out_shapes=sds((4,)))
    assert str(e.value) == (
        "kffi.jax: scale_into: name the outputs in out_shapes: without a contract, kffi cannot "
        "tell which tensor parameters are outputs, and this call gives no array to 1 of them; "
        "pass out_shapes={name: jax.ShapeDtypeStruct(shape, dtype), ...} naming the parameter "
        "that receives each output, one of scale_into's tensor parameters ('y', 'x'); "
        "positional arguments then bind, in order, to the parameters not named there (a "
        "ShapeDtypeStruct alone is for tensors the function returns)"
    )
    np.testing.assert_array_equal(x, np.arange(4))
    # Input first: refused the same way (kffi cannot tell the two conventions apart).
    with pytest.raises(TypeError, match="add_one: name the outputs in out_shapes"):
        jax.jit(lambda a: kffi.jax.call(jk.add_one, a, out_shapes=sds((4,))))(x)
    with pytest.raises(TypeError, match="add_one has no contract declaring its outputs.*'x', 'y'"):
        kffi.jax.call(jk.add_one, x)


def test_positional_arguments_bind_in_order_to_the_parameters_not_named(jk):
    """fma(a, b, c, scale, z): z named, a b c scale positional, in order."""
    a = jnp.full((3,), 2.0, jnp.float32)
    b = jnp.full((3,), 3.0, jnp.float32)
    c = jnp.full((3,), 5.0, jnp.float32)
    z = kffi.jax.call(jk.fma, a, b, c, 0.5, out_shapes={"z": sds((3,))})
    np.testing.assert_array_equal(z, np.full(3, 2 * 3 + 5 * 0.5))
    # fma_bwd(a, b, c, g, scale, da, db, dc): three outputs, a tuple in the order of the dict.
    g = jnp.ones((3,), jnp.float32)
    shapes = {"dc": sds((3,)), "da": sds((3,)), "db": sds((3,))}
    dc, da, db = kffi.jax.call(jk.fma_bwd, a, b, c, g, scale=4.0, out_shapes=shapes)
    np.testing.assert_array_equal(da, np.full(3, 3.0))
    np.testing.assert_array_equal(db, np.full(3, 2.0))
    np.testing.assert_array_equal(dc, np.full(3, 4.0))
    with pytest.raises(TypeError) as e:
        kffi.jax.call(jk.fma_bwd, a, b, c, g, scale=4.0, out_shapes={"da": sds((3,))})
    assert str(e.value) == (
        "kffi.jax: fma_bwd missing array for tensor parameter(s) 'db', 'dc' (name them in "
        "out_shapes too if they are outputs); signature: fma_bwd(a: Tensor, b: Tensor, "
        "c: Tensor, g: Tensor, scale: float, da: Tensor(mut), db: Tensor(mut), dc: Tensor(mut))"
    )


def test_named_outputs_are_checked(jk):
    x = jnp.ones((2,), jnp.float32)
    with pytest.raises(
        TypeError,
        match=r"out_shapes names 'out', which is not a parameter of "
        r"scale_into\(y: Tensor\(mut\), x: Tensor, factor: float\)",
    ):
        kffi.jax.call(jk.scale_into, x, factor=2.0, out_shapes={"out": sds((2,))})
    with pytest.raises(TypeError, match="out_shapes names 'factor', a float parameter"):
        kffi.jax.call(jk.scale_into, x, x, out_shapes={"factor": sds((2,))})
    with pytest.raises(TypeError) as e:
        kffi.jax.call(jk.scale_into, x, 2.0, 3.0, out_shapes={"y": sds((2,))})
    assert str(e.value) == (
        "kffi.jax: scale_into takes 2 positional argument(s) (the outputs named in out_shapes, "
        "'y', take none), got 3"
    )
    with pytest.raises(
        TypeError,
        match=r"'y' is an output \(named in out_shapes\); pass nothing for it, or an array",
    ):
        kffi.jax.call(jk.scale_into, x, factor=2.0, y=1.0, out_shapes={"y": sds((2,))})
    with pytest.raises(
        TypeError, match=r"parameter 'factor' is a float \(a static attribute\), got an array"
    ):
        kffi.jax.call(jk.scale_into, x, x, out_shapes={"y": sds((2,))})
    with pytest.raises(TypeError, match=r"out_shapes\['y'\] have .shape and .dtype"):
        kffi.jax.call(jk.scale_into, x, factor=2.0, out_shapes={"y": (2,)})
    with pytest.raises(ValueError, match="scale_into: out_shapes names no output"):
        kffi.jax.call(jk.scale_into, x, factor=2.0, out_shapes={})
    with pytest.raises(TypeError) as e:  # no metadata: its layout is inputs, then outputs
        kffi.jax.call(jk.probe, x, out_shapes={"y": sds((2,))})
    assert "probe has no parameter names (no metadata), so out_shapes cannot name its" in str(
        e.value
    )


def test_named_output_given_an_array_is_updated_in_place(jk):
    """An array given by keyword for a named output is its initial value: the input is aliased
    to the output (XLA hands the kernel a buffer of its own), and the JAX array is unchanged."""
    x = jnp.arange(3, dtype=jnp.float32)
    y = kffi.jax.call(jk.add_inplace, x=x, value=5.0, out_shapes={"x": sds((3,))})
    np.testing.assert_array_equal(y, np.arange(3) + 5)
    np.testing.assert_array_equal(x, np.arange(3))
    f = jax.jit(lambda a: kffi.jax.call(jk.add_inplace, 1.0, x=a, out_shapes={"x": sds((3,))}))
    np.testing.assert_array_equal(f(x), np.arange(3) + 1)
    np.testing.assert_array_equal(x, np.arange(3))
    with pytest.raises(ValueError) as e:
        kffi.jax.call(jk.add_inplace, x=x, value=5.0, out_shapes={"x": sds((4,))})
    assert str(e.value) == (
        "kffi.jax: add_inplace: the array given for output 'x' is float32[3], but out_shapes "
        "declares float32[4]"
    )


def test_outputs_that_the_function_returns(jk):
    """Item 3: a kernel that allocates its outputs, called on JAX arrays, gives JAX arrays (the
    kernel writes XLA's result buffer in place). Unnamed out_shapes: the returned tensors."""
    x = jnp.arange(5, dtype=jnp.float32)
    y = kffi.jax.call(jk.alloc_plus_one, x, out_shapes=sds((5,)))
    assert isinstance(y, jax.Array) and y.devices() == x.devices()
    np.testing.assert_array_equal(y, np.arange(5) + 1)
    a, b = kffi.jax.call(jk.alloc_two, x, out_shapes=(sds((5,)), sds((5,))))
    np.testing.assert_array_equal(a, np.arange(5) + 1)
    np.testing.assert_array_equal(b, np.arange(5) * 2)
    outs = kffi.jax.call(jk.alloc_two, x, out_shapes=[sds((5,)), {"dbl": sds((5,))}])
    assert isinstance(outs, list) and set(outs[1]) == {"dbl"}  # the pytree comes back
    np.testing.assert_array_equal(outs[1]["dbl"], np.arange(5) * 2)
    with pytest.raises(TypeError, match="out_shapes names 'inc', which is not a parameter"):
        kffi.jax.call(jk.alloc_two, x, out_shapes={"inc": sds((5,)), "dbl": sds((5,))})


def test_direct_eager_call_with_jax_arrays_returns_jax_arrays(jk):
    x = jnp.arange(3, dtype=jnp.float32)
    assert isinstance(jk.alloc_plus_one(x), jax.Array)


def test_attributes_positional_keyword_and_widened_floats(jk):
    import ml_dtypes

    x = jnp.zeros((2,), jnp.float32)
    kffi.jax.call(
        jk.probe,
        x,
        7,
        np.float16(1.5),
        h=ml_dtypes.bfloat16(2.5),
        b=True,
        s="hi",
        a=(1, 2),
        f=0.1,
        out_shapes=sds((2,)),
    )
    seen = list(jk.last_probe())
    assert seen[0][0] == "tensor"
    assert seen[1:3] == [7, 1.5]  # positional scalars: attributes arg1, arg2
    assert seen[3:8] == [2.5, True, "hi", seen[6], 0.1]  # float16 / bfloat16 arrive exactly
    assert list(seen[6]) == [1, 2]
    assert seen[7] == 0.1  # Python floats travel as float64, not float32
    assert seen[8][0] == "tensor"  # then the result ("rets" last without parameter names)


def test_attributes_must_be_static(jk):
    x = jnp.ones((2,), jnp.float32)
    with pytest.raises(TypeError) as e:
        jax.jit(
            lambda a, f: kffi.jax.call(jk.scale_into, x=a, factor=f, out_shapes={"y": sds((2,))})
        )(x, 2.0)
    assert "must be a static value, got a traced value" in str(e.value)
    with pytest.raises(TypeError, match="cannot pass dict"):
        kffi.jax.call(jk.probe, x, d={}, out_shapes=sds((2,)))
    with pytest.raises(OverflowError, match="does not fit int64"):
        kffi.jax.call(jk.probe, x, big=2**64, out_shapes=sds((2,)))


def test_out_shapes_required_without_contract(jk):
    x = jnp.ones((2,), jnp.float32)
    with pytest.raises(TypeError) as e:
        kffi.jax.call(jk.add_one, x)
    assert "add_one has no contract declaring its outputs" in str(e.value)
    assert "pass out_shapes=jax.ShapeDtypeStruct" in str(e.value)
    with pytest.raises(TypeError, match="missing argument 'factor'"):
        kffi.jax.call(jk.scale_into, x=x, out_shapes={"y": sds((2,))})
    with pytest.raises(TypeError, match="got an unexpected keyword argument 'z'"):
        kffi.jax.call(jk.add_one, x, z=1, out_shapes={"y": sds((2,))})
    with pytest.raises(TypeError) as e:
        kffi.jax.call(jk.returns_nothing, x, out_shapes=sds((2,)))
    assert str(e.value).startswith(
        "kffi.jax: returns_nothing: out_shapes gives 1 output(s) to be returned, but "
        "returns_nothing returns nothing; pass out_shapes={name: "
    )
    with pytest.raises(TypeError, match="out_shapes leaves have .shape and .dtype"):
        kffi.jax.call(jk.alloc_plus_one, x, out_shapes=[3])
    with pytest.raises(TypeError, match="expected a kffi.Function, got function"):
        kffi.jax.call(lambda a: a, x)


def test_explicit_arg_spec_and_aliases(jk):
    x = jnp.arange(3, dtype=jnp.float32)
    y = kffi.jax.call(
        jk.scale_into,
        x,
        factor=4.0,
        out_shapes=sds((3,)),
        arg_spec=["rets", "args", "attrs.factor"],
    )
    np.testing.assert_array_equal(y, np.arange(3) * 4)
    z = jax.jit(
        lambda a: kffi.jax.call(
            jk.add_inplace,
            a,
            value=1.0,
            out_shapes=sds((3,)),
            input_output_aliases={0: 0},
            arg_spec=["rets", "attrs.value"],
        )
    )(x)
    np.testing.assert_array_equal(z, np.arange(3) + 1)


def test_kernel_errors_reach_python(jk):
    x = jnp.ones((2,), jnp.float32)
    with pytest.raises(jax.errors.JaxRuntimeError, match="ValueError: from call"):
        kffi.jax.call(jk.fail, x, message="from call", out_shapes={"y": sds((2,))})


# ---- with a contract (hand-built structured metadata) ------------------------------------------


def add_one_contract(jk):
    return with_contract(
        jk, "add_one", meta("add_one", [tensor("x", ["n"]), tensor("y", ["n"], mutable=True)])
    )


def test_host_contract_refuses_a_gpu_lowering(jk):
    """A contract fixing tensors to the CPU refuses a computation lowered for CUDA (which would
    hand the host kernel device memory): a ValueError naming the function and both places."""
    f = add_one_contract(jk)
    traced = jax.jit(lambda a: kffi.jax.call(f, a)).trace(sds((8,)))
    with pytest.raises(ValueError, match=r"add_one takes cpu tensors .* runs on cuda"):
        traced.lower(lowering_platforms=("cuda",))
    assert traced.lower(lowering_platforms=("cpu",)) is not None


def test_contract_outputs_need_no_declaration(jk):
    f = add_one_contract(jk)
    x = jnp.arange(6, dtype=jnp.float32)
    np.testing.assert_array_equal(kffi.jax.call(f, x), np.arange(6) + 1)
    g = jax.jit(lambda a: kffi.jax.call(f, kffi.jax.call(f, a)))
    np.testing.assert_array_equal(g(x), np.arange(6) + 2)
    assert jax.eval_shape(lambda a: kffi.jax.call(f, a), sds((11,))).shape == (11,)


def test_contract_output_first_and_scalars(jk):
    m = meta(
        "scale_into",
        [tensor("y", ["n"], mutable=True), tensor("x", ["n"]), scalar("factor", "float")],
    )
    f = with_contract(jk, "scale_into", m)
    x = jnp.arange(4, dtype=jnp.float32)
    np.testing.assert_array_equal(kffi.jax.call(f, x, 0.5), np.arange(4) * 0.5)
    np.testing.assert_array_equal(
        jax.jit(lambda a: kffi.jax.call(f, a, factor=3.0))(x), np.arange(4) * 3
    )


def test_contract_returned_output_shape_from_rpn(jk):
    m = meta(
        "concat_alloc",
        [tensor("a", ["n", "k"]), tensor("b", ["m", "k"])],
        outputs=[out("out", [["n", "m", "+"], ["k"]])],
    )
    f = with_contract(jk, "concat_alloc", m)
    a = jnp.ones((2, 3), jnp.float32)
    b = jnp.zeros((4, 3), jnp.float32)
    y = jax.jit(lambda p, q: kffi.jax.call(f, p, q))(a, b)
    assert y.shape == (6, 3)
    np.testing.assert_array_equal(y, np.concatenate([np.ones((2, 3)), np.zeros((4, 3))]))


def test_contract_in_place_update(jk):
    m = meta("add_inplace", [tensor("x", ["n"], mutable=True), scalar("value", "float")])
    f = with_contract(jk, "add_inplace", m)
    x = jnp.arange(3, dtype=jnp.float32)
    np.testing.assert_array_equal(kffi.jax.call(f, x, 5.0), np.arange(3) + 5)
    np.testing.assert_array_equal(
        jax.jit(lambda a: kffi.jax.call(f, a, value=1.0))(x), np.arange(3) + 1
    )
    np.testing.assert_array_equal(x, np.arange(3))  # JAX values never change under the user


def test_contract_in_place_or_output_by_array_count(jk):
    # With y mut: one array -> y is an output; two arrays -> y is updated in place.
    f = add_one_contract(jk)
    x = jnp.arange(3, dtype=jnp.float32)
    np.testing.assert_array_equal(kffi.jax.call(f, x, jnp.zeros(3, jnp.float32)), np.arange(3) + 1)
    with pytest.raises(TypeError) as e:
        kffi.jax.call(f, x, x, x)
    assert str(e.value) == (
        "kffi.jax: add_one takes 1 input array(s) (or 2, to update its mut "
        "parameters in place), got 3; signature: add_one(x: Tensor, "
        "y: Tensor(mut))"
    )
    with pytest.raises(TypeError, match="'y' is an output \\(declared mut\\)"):
        kffi.jax.call(f, x=x, y=3)


def test_contract_checks_at_trace_time(jk):
    m = meta(
        "concat_alloc",
        [tensor("a", ["n", "k"]), tensor("b", ["m", "k"])],
        outputs=[out("out", [["n", "m", "+"], ["k"]])],
    )
    f = with_contract(jk, "concat_alloc", m)
    with pytest.raises(ValueError) as e:
        jax.jit(lambda p, q: kffi.jax.call(f, p, q)).lower(sds((2, 3)), sds((4, 5)))
    assert str(e.value) == (
        "kffi.jax: concat_alloc: b.shape[1] = 5: expected to match a.shape[1] = 3 (symbol k)"
    )
    with pytest.raises(TypeError) as e:
        kffi.jax.call(f, jnp.ones((2, 3), jnp.int32), jnp.ones((1, 3), jnp.float32))
    assert str(e.value) == (
        "kffi.jax: concat_alloc: parameter 'a' expects dtype float32, got int32"
    )
    with pytest.raises(ValueError, match="expected 2 dimensions \\[n, k\\], got shape \\(3,\\)"):
        kffi.jax.call(f, jnp.ones((3,)), jnp.ones((1, 3)))


def test_contract_optional_default_and_stream_parameters(jk):
    m = meta(
        "add_bias",
        [
            tensor("x", ["n"]),
            tensor("bias", ["n"], optional=True),
            tensor("y", ["n"], mutable=True),
        ],
    )
    m["params"][1]["default"] = None
    f = with_contract(jk, "add_bias", m)
    x = jnp.arange(3, dtype=jnp.float32)
    np.testing.assert_array_equal(kffi.jax.call(f, x), np.arange(3))
    np.testing.assert_array_equal(kffi.jax.call(f, x, bias=x), np.arange(3) * 2)
    probe = with_contract(
        jk,
        "probe",
        meta(
            "probe",
            [
                tensor("x", ["n"]),
                {"name": "stream", "type": "Stream", "kind": "stream"},
                scalar("k", "int", default=9),
                tensor("y", ["n"], mutable=True),
            ],
        ),
    )
    kffi.jax.call(probe, x)
    seen = list(jk.last_probe())
    assert seen[1] is None and seen[2] == 9  # no stream on CPU; the default filled in
    assert [s[0] for s in (seen[0], seen[3])] == ["tensor", "tensor"]


# ---- kffi.compile'd kernels -------------------------------------------------------------------

COMPILED_SRC = r"""
void twice(kffi::ConstTensorView x, kffi::TensorView y) {
  const float* a = x.data<float>();
  float* b = y.data<float>();
  for (int64_t i = 0; i < x.numel(); ++i) b[i] = 2 * a[i];
}
"""


@pytest.fixture(scope="module")
def compiled_twice():
    n = kffi.sym_int()
    return kffi.compile(
        COMPILED_SRC,
        "twice",
        kffi.fake_tensor("float32", (n,)),
        kffi.fake_tensor("float32", (n,), mut=True),
        options={"quiet": True},
    )


def test_compiled_kernel_inside_jit(compiled_twice):
    x = jnp.arange(8, dtype=jnp.float32)
    f = jax.jit(lambda a: kffi.jax.call(compiled_twice, a, out_shapes={"y": sds(a.shape)}) + 1)
    np.testing.assert_array_equal(f(x), np.arange(8) * 2 + 1)
    # The contract's own checks still run inside XLA; their message reaches Python.
    with pytest.raises(jax.errors.JaxRuntimeError) as e:
        kffi.jax.call(compiled_twice, x, out_shapes={"y": sds((3,))})
    assert "ValueError" in str(e.value) and "y.shape[0]" in str(e.value)


def _has_structured_metadata(fn) -> bool:
    return isinstance(getattr(fn, "_metadata", None), dict) and "mutates" in fn._metadata


def test_compiled_contract_gives_output_shapes(compiled_twice):
    """Outputs from kffi.compile's own contract metadata (`mut` tensors, returned outputs)."""
    if not _has_structured_metadata(compiled_twice):
        pytest.skip("kffi.compile metadata has no 'mutates' yet (the contracts helper's change)")
    n = kffi.sym_int()
    f = kffi.compile(
        COMPILED_SRC,
        "twice",
        kffi.fake_tensor("float32", (n,)),
        kffi.fake_tensor("float32", (n,), mut=True),
        options={"quiet": True},
    )
    assert f._metadata["mutates"] == ["y"]
    x = jnp.arange(5, dtype=jnp.float32)
    np.testing.assert_array_equal(jax.jit(lambda a: kffi.jax.call(f, a))(x), np.arange(5) * 2)
    src = (
        COMPILED_SRC
        + r"""
kffi::Tensor twice_alloc(kffi::ConstTensorView x) {
  kffi::Tensor out = kffi::Tensor::FromEnvAlloc(kffi::IntArrayView({x.shape()[0] * 2}),
                                                x.dtype(), x.device());
  for (int64_t i = 0; i < 2 * x.numel(); ++i) out.data<float>()[i] = x.data<float>()[i / 2];
  return out;
}
"""
    )
    g = kffi.compile(
        src,
        "twice_alloc",
        kffi.fake_tensor("float32", (n,)),
        outputs=[kffi.fake_tensor("float32", (n * 2,))],
        options={"quiet": True},
    )
    y = jax.jit(lambda a: kffi.jax.call(g, a))(x)
    np.testing.assert_array_equal(y, np.repeat(np.arange(5), 2))


# ---- parameters the function may write (metadata "mutable": true) ------------------------------

WRITER_SRC = r"""
void scale_out(kffi::TensorView y, kffi::ConstTensorView x, double factor) {
  const float* a = x.data<float>();
  float* b = y.data<float>();
  for (int64_t i = 0; i < x.numel(); ++i) b[i] = static_cast<float>(a[i] * factor);
}
void bump(kffi::TensorView x, double value) {
  float* a = x.data<float>();
  for (int64_t i = 0; i < x.numel(); ++i) a[i] += static_cast<float>(value);
}
"""


@pytest.fixture(scope="module")
def writers():
    """Contract functions (kffi.compile) whose metadata marks their `mut` tensors mutable."""
    n = kffi.sym_int("n")
    scale_out = kffi.compile(
        WRITER_SRC,
        "scale_out",
        kffi.fake_tensor("float32", (n,), mut=True),
        kffi.fake_tensor("float32", (n,)),
        kffi.Float64,
        options={"quiet": True},
    )
    bump = kffi.compile(
        WRITER_SRC,
        "bump",
        kffi.fake_tensor("float32", (n,), mut=True),
        kffi.Float64,
        options={"quiet": True},
    )
    assert [p.get("mutable") for p in scale_out._metadata["params"]] == [True, False, None]
    return scale_out, bump


def test_contract_output_first_binds_the_input_and_leaves_it_unchanged(writers):
    scale_out, _ = writers
    x = jnp.arange(4, dtype=jnp.float32)
    np.testing.assert_array_equal(kffi.jax.call(scale_out, x, 2.0), np.arange(4) * 2)
    f = jax.jit(lambda a: kffi.jax.call(scale_out, a, factor=3.0))
    np.testing.assert_array_equal(f(x), np.arange(4) * 3)
    np.testing.assert_array_equal(x, np.arange(4))


def test_a_jax_input_for_a_mutable_parameter_is_refused_at_trace_time(writers):
    """A JAX input that would land on a parameter the function writes is refused, naming the
    parameter, before XLA runs anything (jax.jit(...).lower traces and lowers only)."""
    scale_out, bump = writers
    x = jnp.arange(4, dtype=jnp.float32)
    # out_shapes naming x: the positional array binds to y, which the function writes.
    with pytest.raises(ValueError) as e:
        kffi.jax.call(scale_out, x, factor=2.0, out_shapes={"x": sds((4,))})
    assert str(e.value) == (
        "kffi.jax: scale_out: parameter 'y' may be written by the function (its metadata marks "
        "it mutable), so it cannot take a JAX input array: JAX arrays are immutable and XLA "
        "may share their buffers. Make it an output (out_shapes={'y': "
        "jax.ShapeDtypeStruct(shape, dtype)}, with y=array to start from an array's values), "
        "alias its input to an output (input_output_aliases), or, if the function only reads "
        "it, declare it read-only (kffi::ConstTensorView in C++, no `mut` in a contract)"
    )
    # An explicit arg_spec giving y an input: the same refusal, under jit at trace time.
    with pytest.raises(ValueError, match="scale_out: parameter 'y' may be written"):
        jax.jit(
            lambda a: kffi.jax.call(
                scale_out,
                a,
                factor=2.0,
                out_shapes=sds((4,)),
                arg_spec=["args", "rets", "attrs.factor"],
            )
        ).lower(x)
    with pytest.raises(ValueError, match="bump: parameter 'x' may be written"):
        kffi.jax.call(bump, x, 1.0, out_shapes=sds((4,)), arg_spec=["args", "attrs.value"])
    np.testing.assert_array_equal(x, np.arange(4))


def test_aliased_inputs_are_still_written(writers):
    """An input aliased to an output may reach a mutable parameter: XLA hands the function the
    output's buffer (a copy where the input lives on), and the result holds what it wrote."""
    scale_out, bump = writers
    x = jnp.arange(4, dtype=jnp.float32)
    # The contract's in-place call: x given for the `mut` parameter, aliased to the output.
    np.testing.assert_array_equal(kffi.jax.call(bump, x, 1.0), np.arange(4) + 1)
    # y (mutable) takes input 0, aliased to output 0: XLA gives both the one buffer, which
    # starts as x and ends as y = 2 x.
    y = kffi.jax.call(
        scale_out,
        x,
        factor=2.0,
        out_shapes=sds((4,)),
        arg_spec=["args", "rets", "attrs.factor"],
        input_output_aliases={0: 0},
    )
    np.testing.assert_array_equal(y, np.arange(4) * 2)
    z = jax.jit(lambda a: kffi.jax.call(bump, x=a, value=3.0, out_shapes={"x": sds((4,))}))(x)
    np.testing.assert_array_equal(z, np.arange(4) + 3)
    w = kffi.jax.call(scale_out, x, 2.0, y=jnp.zeros(4, jnp.float32), out_shapes={"y": sds((4,))})
    np.testing.assert_array_equal(w, np.arange(4) * 2)
    np.testing.assert_array_equal(x, np.arange(4))
    with pytest.raises(ValueError, match="input 0 is aliased twice"):
        kffi.jax.call(
            bump, x=x, value=1.0, out_shapes={"x": sds((4,))}, input_output_aliases={0: 0}
        )
    with pytest.raises(ValueError, match="input_output_aliases \\{0: 1\\}: the call has 1 input"):
        kffi.jax.call(
            bump,
            x,
            value=1.0,
            out_shapes=sds((4,)),
            arg_spec=["args", "attrs.value"],
            input_output_aliases={0: 1},
        )


# ---- caching and threads ----------------------------------------------------------------------


def fresh_library(jk, tmp_path, tag: str) -> kffi.Module:
    """A copy of jk's library with bytes of its own appended (ignored by the loader): another
    content, so its XLA targets (named by content) are new to this process."""
    path = tmp_path / f"jk_{tag}.so"
    path.write_bytes(Path(jk.name).read_bytes() + f"\0kffi test {tag} {os.getpid()}".encode())
    return kffi.load_module(str(path))


def test_one_target_per_function_and_layout(jk, tmp_path):
    f = add_one_contract(fresh_library(jk, tmp_path, "one_target"))
    before = kffi.jax.target_count()
    for shape in ((2,), (3,), (4,), (2,)):
        kffi.jax.call(f, jnp.ones(shape, jnp.float32))
        jax.jit(lambda a: kffi.jax.call(f, a))(jnp.ones(shape, jnp.float32))
    # Shapes, dtypes and attribute values are read per call: one target serves them all.
    assert kffi.jax.target_count() - before == 1
    kffi.jax.call(f, jnp.ones((2,), jnp.float32), jnp.ones((2,), jnp.float32))  # in place
    # In place, the parameters take the same buffers (the alias is XLA's): the same target.
    assert kffi.jax.target_count() - before == 1


def test_concurrent_calls_register_once(jk, tmp_path):
    f = add_one_contract(fresh_library(jk, tmp_path, "concurrent"))
    before = kffi.jax.target_count()
    errors, results = [], []
    cpu = jax.devices("cpu")[0]  # jax.default_device is per thread: place the inputs explicitly

    def work(i):
        try:
            x = jax.device_put(jnp.full((3,), float(i), jnp.float32), cpu)
            results.append(float(jax.jit(lambda a: kffi.jax.call(f, a))(x)[0]) - i)
        except Exception as e:
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and results == [1.0] * 8
    assert kffi.jax.target_count() - before == 1


# ---- transformations without rules --------------------------------------------------------------


def test_grad_jvp_vmap_raise_clear_errors(jk):
    f = add_one_contract(jk)
    x = jnp.ones((3,), jnp.float32)
    with pytest.raises(NotImplementedError) as e:
        jax.grad(lambda a: kffi.jax.call(f, a).sum())(x)
    assert str(e.value) == (
        "kffi.jax: add_one has no differentiation rule (jax.grad / jax.jvp). "
        "Attach one with kffi.jax.primitive(add_one, vjp=(fwd, bwd)) or "
        "jvp=..."
    )
    with pytest.raises(NotImplementedError, match="add_one has no differentiation rule"):
        jax.jvp(lambda a: kffi.jax.call(f, a), (x,), (x,))
    with pytest.raises(NotImplementedError) as e:
        jax.vmap(lambda a: kffi.jax.call(f, a))(jnp.ones((2, 3), jnp.float32))
    assert str(e.value) == (
        "kffi.jax: add_one has no batching rule (jax.vmap). Pass "
        "vmap='sequential' or a rule to kffi.jax.primitive(add_one, vmap=...)"
    )
