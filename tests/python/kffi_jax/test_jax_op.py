"""tests/python/kffi_jax/test_jax_op.py: kffi.jax.primitive: custom VJP / JVP made of other kffi
functions (checked with jax.grad against numerical gradients) and batching rules."""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import numpy as np
import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp
import jax_support
import kffi.jax
from jax_support import meta, scalar, tensor, with_contract

jk = jax_support.jk  # the test kernel library (a session fixture)


def sds(x):
    return jax.ShapeDtypeStruct(x.shape, x.dtype)


def numerical_grad(f, x, eps=1e-2):
    """Central differences of the scalar function f at x, in float64 on the host."""
    x = np.asarray(x, np.float64)
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        d = np.zeros_like(x)
        d[i] = eps
        g[i] = (
            float(f(jnp.asarray(x + d, jnp.float32))) - float(f(jnp.asarray(x - d, jnp.float32)))
        ) / (2 * eps)
    return g


X = np.array([[0.5, -1.25, 2.0], [3.0, 0.75, -0.5]], np.float32)


def test_vjp_from_kffi_functions_matches_numerical_gradient(jk):
    op = kffi.jax.primitive(
        jk.square,
        out_shapes={"y": jax.ShapeDtypeStruct(X.shape, jnp.float32)},
        vjp=(None, jk.square_bwd),  # square_bwd(x, g, dx): dx, left unfilled, is the output
    )
    x = jnp.asarray(X)
    np.testing.assert_array_equal(op(x), X * X)

    def loss(a):
        return (op(a) * jnp.sin(a)).sum()

    g = jax.grad(loss)(x)
    np.testing.assert_allclose(g, numerical_grad(loss, X), rtol=2e-3, atol=2e-3)
    np.testing.assert_allclose(jax.jit(jax.grad(loss))(x), g, rtol=1e-6)


def test_vjp_with_several_inputs_and_a_static_parameter(jk):
    out = {"z": jax.ShapeDtypeStruct(X.shape, jnp.float32)}
    op = kffi.jax.primitive(jk.fma, out_shapes=out, vjp=(None, jk.fma_bwd))
    a, b, c = jnp.asarray(X), jnp.asarray(X[::-1].copy()), jnp.asarray(X * 3)
    np.testing.assert_allclose(op(a, b, c, scale=0.5), X * X[::-1] + X * 1.5)
    ga, gb, gc = jax.grad(lambda p, q, r: op(p, q, r, scale=0.5).sum(), argnums=(0, 1, 2))(a, b, c)
    np.testing.assert_allclose(
        ga, numerical_grad(lambda p: op(p, b, c, scale=0.5).sum(), X), rtol=2e-3
    )
    np.testing.assert_allclose(
        gb, numerical_grad(lambda q: op(a, q, c, scale=0.5).sum(), X[::-1]), rtol=2e-3
    )
    np.testing.assert_allclose(gc, np.full(X.shape, 0.5), rtol=1e-6)
    # Another static value: another custom_vjp, the right scale in the backward kernel.
    np.testing.assert_allclose(
        jax.grad(lambda r: op(a, b, r, scale=4.0).sum())(c), np.full(X.shape, 4.0)
    )


def test_vjp_with_a_forward_kernel_keeping_residuals(jk):
    shape = jax.ShapeDtypeStruct(X.shape, jnp.float32)
    fwd_op = with_contract(
        jk,
        "square_fwd",
        meta(
            "square_fwd",
            [
                tensor("x", ["n", "k"]),
                tensor("y", ["n", "k"], mutable=True),
                tensor("r", ["n", "k"], mutable=True),
            ],
        ),
    )
    op = kffi.jax.primitive(jk.square, out_shapes={"y": shape}, vjp=(fwd_op, jk.mul_bwd))
    x = jnp.asarray(X)
    g = jax.jit(jax.grad(lambda a: (op(a) ** 2).sum()))(x)
    np.testing.assert_allclose(g, 4 * X**3, rtol=1e-5)


def test_vjp_with_python_rules_calling_kffi(jk):
    shape = jax.ShapeDtypeStruct(X.shape, jnp.float32)

    def fwd(a):
        y = kffi.jax.call(jk.square, a, out_shapes={"y": shape})
        return y, (a,)

    def bwd(res, g):
        (a,) = res
        return (kffi.jax.call(jk.square_bwd, a, g, out_shapes={"dx": shape}),)

    op = kffi.jax.primitive(jk.square, out_shapes={"y": shape}, vjp=(fwd, bwd))
    np.testing.assert_allclose(jax.grad(lambda a: op(a).sum())(jnp.asarray(X)), 2 * X)


def test_jvp_from_a_kffi_function_gives_forward_and_reverse_mode(jk):
    shape = jax.ShapeDtypeStruct(X.shape, jnp.float32)
    op = kffi.jax.primitive(jk.square, out_shapes={"y": shape}, jvp=jk.square_jvp)
    x = jnp.asarray(X)
    t = jnp.ones_like(x)
    y, dy = jax.jvp(op, (x,), (t,))
    np.testing.assert_array_equal(y, X * X)
    np.testing.assert_allclose(dy, 2 * X)
    with pytest.raises(NotImplementedError) as e:  # a kffi kernel cannot be transposed
        jax.grad(lambda a: op(a).sum())(x)
    assert "square_jvp cannot be transposed: JAX sees a kffi call as opaque" in str(e.value)
    # A jvp rule of JAX operations (linear in the tangents) serves reverse mode as well.
    op2 = kffi.jax.primitive(
        jk.square, out_shapes={"y": shape}, jvp=lambda p, t: (op(p[0]), 2 * p[0] * t[0])
    )
    np.testing.assert_allclose(jax.grad(lambda a: op2(a).sum())(x), 2 * X)


def test_vmap_sequential_and_custom_rule(jk):
    shape = jax.ShapeDtypeStruct((3,), jnp.float32)
    seq = kffi.jax.primitive(jk.square, out_shapes={"y": shape}, vmap="sequential")
    xs = jnp.asarray(X)
    np.testing.assert_array_equal(jax.vmap(seq)(xs), X * X)
    np.testing.assert_array_equal(jax.jit(jax.vmap(seq, in_axes=1))(xs.T.copy()), X * X)

    calls = []

    def rule(args, dims, **params):  # the kernel is elementwise: call it once on the batch
        calls.append(dims)
        (a,) = args
        return [kffi.jax.call(jk.square, a, out_shapes={"y": sds(a)})], [dims[0]]

    batched = kffi.jax.primitive(jk.square, out_shapes={"y": shape}, vmap=rule)
    np.testing.assert_array_equal(jax.vmap(batched)(xs), X * X)
    assert calls == [(0,)]


def test_vmap_applies_inside_vjp_rules(jk):
    shape = jax.ShapeDtypeStruct((3,), jnp.float32)
    op = kffi.jax.primitive(
        jk.square, out_shapes={"y": shape}, vjp=(None, jk.square_bwd), vmap="sequential"
    )
    g = jax.vmap(jax.grad(lambda a: op(a).sum()))(jnp.asarray(X))
    np.testing.assert_allclose(g, 2 * X)


def test_contract_function_as_op(jk):
    sq = with_contract(
        jk, "square", meta("square", [tensor("x", ["n"]), tensor("y", ["n"], mutable=True)])
    )
    bwd = with_contract(
        jk,
        "square_bwd",
        meta(
            "square_bwd",
            [tensor("x", ["n"]), tensor("g", ["n"]), tensor("dx", ["n"], mutable=True)],
        ),
    )
    op = kffi.jax.primitive(sq, vjp=(None, bwd))
    x = jnp.arange(4, dtype=jnp.float32)
    np.testing.assert_allclose(jax.grad(lambda a: op(a).sum())(x), 2 * np.arange(4))
    assert "vjp" in repr(op) and op.__name__ == "square"


def test_rules_are_required_and_checked(jk):
    shape = jax.ShapeDtypeStruct((3,), jnp.float32)
    plain = kffi.jax.primitive(jk.square, out_shapes={"y": shape})
    x = jnp.ones((3,), jnp.float32)
    with pytest.raises(NotImplementedError, match="square has no differentiation rule"):
        jax.grad(lambda a: plain(a).sum())(x)
    with pytest.raises(NotImplementedError, match="square has no batching rule"):
        jax.vmap(plain)(jnp.ones((2, 3), jnp.float32))
    with pytest.raises(ValueError, match="give jvp or vjp, not both"):
        kffi.jax.primitive(jk.square, jvp=jk.square_jvp, vjp=(None, jk.square_bwd))
    with pytest.raises(TypeError, match="vjp is a pair \\(fwd, bwd\\)"):
        kffi.jax.primitive(jk.square, vjp=jk.square_bwd)
    with pytest.raises(TypeError, match="vmap is 'sequential' or a batching rule"):
        kffi.jax.primitive(jk.square, vmap="parallel")
    with pytest.raises(TypeError, match="expected a kffi.Function, got str"):
        kffi.jax.primitive("square")
    with_static = kffi.jax.primitive(
        with_contract(
            jk,
            "scale_into",
            meta(
                "scale_into",
                [tensor("y", ["n"], mutable=True), tensor("x", ["n"]), scalar("factor", "float")],
            ),
        ),
        jvp=lambda primals, tangents: (primals[0] * 2, tangents[0] * 2),
    )
    np.testing.assert_array_equal(with_static(x, 2.0), np.full(3, 2.0))
