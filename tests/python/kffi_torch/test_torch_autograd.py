"""tests/python/kffi_torch/test_torch_autograd.py: kffi.torch.register_autograd (kffi backward
kernels, gradcheck, compiled backward), ops without a rule refusing inputs that require grad (never
a silent grad_fn=None), and version counters of tensors an op writes."""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
import kffi.torch
import torch_support
from torch_support import fresh

tk = torch_support.tk
ns = torch_support.ns


def f64(*values, grad=True):
    return torch.tensor(values, dtype=torch.float64, requires_grad=grad)


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield


def test_without_a_rule_inputs_that_require_grad_are_refused(tk, ns):
    op = kffi.torch.register_op(fresh(tk, "square"), f"{ns}::square")
    x = f64(1.0, 2.0)
    for call in (op, op.default):  # never a silent grad_fn=None
        with pytest.raises(
            RuntimeError,
            match=rf"{ns}::square has no autograd rule, but its argument 'x' requires grad. "
            r"Give it a backward with kffi.torch.register_autograd",
        ):
            call(x)
    with torch.no_grad():
        assert op(x).tolist() == [1.0, 4.0]  # nothing to differentiate
    assert op(x.detach()).grad_fn is None


def test_mutating_op_refuses_inputs_that_require_grad(tk, ns):
    op = kffi.torch.register_op(fresh(tk, "scale_into"), f"{ns}::scale_into")
    y, x = torch.zeros(3, dtype=torch.float64), f64(1.0, 2.0, 3.0)
    for call in (op, op.default):
        with pytest.raises(
            RuntimeError,
            match=rf"{ns}::scale_into writes y in place \(declared mut\) and torch cannot "
            r"differentiate that, but its argument 'x' requires grad",
        ):
            call(y, x, 2.0)
    assert y.tolist() == [0.0, 0.0, 0.0]  # refused before the kernel ran
    with torch.no_grad():
        op(y, x, 2.0)
    op(y, x.detach(), 2.0)
    assert y.tolist() == [2.0, 4.0, 6.0]


@pytest.mark.parametrize("path", ["default", "eager"])
def test_mutation_bumps_the_version_of_saved_tensors(tk, ns, path):
    op = kffi.torch.register_op(fresh(tk, "scale_into"), f"{ns}::scale_into")
    call = op.default if path == "default" else op
    w = f64(1.0, 2.0)
    y = torch.ones(2, dtype=torch.float64)
    z = (w * y).sum()  # saves y for backward
    call(y, torch.ones(2, dtype=torch.float64), 3.0)  # rewrites y in place
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        z.backward()


def test_version_counters_count_the_written_tensors_only(tk, ns):
    # scale_into(y mut, x, factor): each successful call bumps y's version once, never x's; a
    # call the contract refuses bumps nothing; inference tensors (no version counter) work.
    op = kffi.torch.register_op(fresh(tk, "scale_into"), f"{ns}::scale_into")
    y = torch.ones(3, dtype=torch.float64)
    x = torch.full((3,), 2.0, dtype=torch.float64)
    v_y, v_x = y._version, x._version
    op.default(y, x, 3.0)  # the dispatcher's kernel
    op(y, x, 3.0)  # the eager gate (C), straight to kffi
    op(y, x=x, factor=3.0)  # keyword arguments: the eager gate in Python
    assert (y._version - v_y, x._version - v_x) == (3, 0)
    assert y.tolist() == [6.0, 6.0, 6.0]
    with pytest.raises(ValueError, match="scale_into"):
        op.default(y, torch.ones(4, dtype=torch.float64), 3.0)
    with pytest.raises(ValueError, match="scale_into"):
        op(y, torch.ones(4, dtype=torch.float64), 3.0)
    assert y._version - v_y == 3
    with torch.inference_mode():
        yi = torch.ones(3, dtype=torch.float64)
        op.default(yi, torch.ones(3, dtype=torch.float64), 5.0)
        op(yi, torch.ones(3, dtype=torch.float64), factor=5.0)
        assert yi.tolist() == [5.0, 5.0, 5.0]


def test_kffi_backward_gradcheck(tk, ns):
    op = kffi.torch.register_op(fresh(tk, "square"), f"{ns}::square")
    kffi.torch.register_autograd(op, backward=fresh(tk, "square_bwd"))
    assert op.has_autograd
    x = f64(0.5, -1.5, 2.0, 3.0)
    y = op(x)
    y.sum().backward()  # the gradient arrives expanded (stride 0): made dense for the kernel
    assert x.grad.tolist() == [1.0, -3.0, 4.0, 6.0]
    assert torch.autograd.gradcheck(op, (f64(0.25, 1.0, -2.0),))
    assert torch.autograd.gradgradcheck is not None
    result = torch.library.opcheck(op.default, (f64(1.0, 2.0),))
    assert set(result.values()) == {"SUCCESS"}, result


def test_kffi_backward_with_mut_outputs_and_scalar_params(tk, ns):
    # Forward and backward written kffi-style (outputs as `mut` parameters), allocated by the ops.
    sq = kffi.torch.register_op(fresh(tk, "square_into"), f"{ns}::square_into", allocate=True)
    kffi.torch.register_autograd(sq, backward=fresh(tk, "square_bwd_into"))
    assert torch.autograd.gradcheck(sq, (f64(0.5, -2.0, 3.0),))
    mul = kffi.torch.register_op(fresh(tk, "mul"), f"{ns}::mul")
    kffi.torch.register_autograd(mul, backward=fresh(tk, "mul_bwd"))  # scale passed by name
    a, b = f64(1.0, 2.0, -1.0), f64(0.5, 3.0, 2.0)
    assert torch.autograd.gradcheck(lambda a, b: mul(a, b, 1.5), (a, b))
    result = torch.library.opcheck(mul.default, (a, b, 1.5))
    assert set(result.values()) == {"SUCCESS"}, result


def test_compiled_forward_and_backward(tk, ns):
    mul = kffi.torch.register_op(fresh(tk, "mul"), f"{ns}::mul")
    kffi.torch.register_autograd(mul, backward=fresh(tk, "mul_bwd"))
    sq = kffi.torch.register_op(fresh(tk, "square"), f"{ns}::square")
    kffi.torch.register_autograd(sq, backward=fresh(tk, "square_bwd"))

    def loss(a, b):
        return (mul(a, b, 2.0) * sq(a)).sum()

    a, b = f64(1.0, 2.0, 3.0), f64(-1.0, 0.5, 2.0)
    ga, gb = torch.autograd.grad(loss(a, b), (a, b))
    ca, cb = torch.autograd.grad(torch.compile(loss, fullgraph=True)(a, b), (a, b))
    # d/da (2 a b a^2) = 6 a^2 b; d/db = 2 a^3
    assert torch.allclose(ga, 6 * a.detach() ** 2 * b.detach())
    assert torch.allclose(gb, 2 * a.detach() ** 3)
    assert torch.allclose(ca, ga) and torch.allclose(cb, gb)


def test_custom_setup_context_saves_other_residuals(tk, ns):
    # Save the output instead of the input: d(x^2)/dx = 2x = 2 * sqrt(y) for x > 0; the backward
    # kernel reads its first residual as "x", so save sqrt(y) (= x) explicitly.
    op = kffi.torch.register_op(fresh(tk, "square"), f"{ns}::square")
    saved = []

    def setup(ctx, inputs, output):
        saved.append(output.shape)
        ctx.save_for_backward(output.sqrt())

    kffi.torch.register_autograd(op, backward=fresh(tk, "square_bwd"), setup_context=setup)
    x = f64(1.0, 4.0)
    (gx,) = torch.autograd.grad(op(x).sum(), (x,))
    assert gx.tolist() == [2.0, 8.0] and saved == [torch.Size([2])]


def test_python_backward(tk, ns):
    op = kffi.torch.register_op(fresh(tk, "square"), f"{ns}::square")
    kffi.torch.register_autograd(op, backward=lambda ctx, g: (2 * ctx.saved_tensors[0] * g,))
    assert torch.autograd.gradcheck(op, (f64(0.5, 2.0),))


def test_register_autograd_errors(tk, ns):
    sq = kffi.torch.register_op(fresh(tk, "square"), f"{ns}::square")
    with pytest.raises(TypeError, match="expected an op from kffi.torch.register_op"):
        kffi.torch.register_autograd(fresh(tk, "square"), backward=fresh(tk, "square_bwd"))
    with pytest.raises(TypeError, match="the backward kffi function scale_plain needs a contract"):
        kffi.torch.register_autograd(sq, backward=fresh(tk, "scale_plain"))
    with pytest.raises(
        ValueError, match=r"has 1 tensor input\(s\), but its backward two_out produces 2"
    ):
        kffi.torch.register_autograd(sq, backward=fresh(tk, "two_out"))
    with pytest.raises(
        TypeError, match="backward is a kffi function or a Python function, got int"
    ):
        kffi.torch.register_autograd(sq, backward=3)
    mut = kffi.torch.register_op(fresh(tk, "scale_into"), f"{ns}::scale_into")
    with pytest.raises(
        TypeError,
        match=r"writes \['y'\] in place, and torch differentiates only functional ops; .*allocate=\('y',\)",
    ):
        kffi.torch.register_autograd(mut, backward=fresh(tk, "square_bwd"))
    # A failed registration leaves the op as it was: still no rule, still the clear error.
    with pytest.raises(RuntimeError, match="has no autograd rule"):
        sq(f64(1.0))
    kffi.torch.register_autograd(f"{ns}::square", backward=fresh(tk, "square_bwd"))  # by name
    with pytest.raises(ValueError, match="already has a rule"):
        kffi.torch.register_autograd(sq, backward=fresh(tk, "square_bwd"))
