"""tests/python/kffi_torch/test_torch_compile.py: kffi ops under torch.compile (fullgraph, no graph
break, dynamic shapes), fake tensors from contracts, opcheck, and contract messages in compiled
code."""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
import kffi.torch
import torch_support
from torch._subclasses.fake_tensor import FakeTensorMode
from torch_support import fresh

tk = torch_support.tk
ns = torch_support.ns


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


class Recorder:
    """A torch.compile backend that keeps the graphs dynamo hands it (then runs them eagerly)."""

    def __init__(self):
        self.graphs = []

    def __call__(self, gm, example_inputs):
        self.graphs.append(gm)
        return gm.forward

    def targets(self):
        return [
            str(n.target) for g in self.graphs for n in g.graph.nodes if n.op == "call_function"
        ]


def _model(ops):
    """A small module using a mutating op (scale_into) and a returning op (add_row)."""

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.bias = torch.nn.Parameter(
                torch.arange(4, dtype=torch.float32), requires_grad=False
            )

        def forward(self, a):
            scaled = torch.empty_like(self.bias)
            ops.scale_into(scaled, self.bias, 2.0)
            return ops.add_row(a.relu(), scaled) * 3

    return Model()


def test_fullgraph_with_a_mutating_and_a_returning_op(tk, ns):
    ops = tk.torch_ops(ns)
    model = _model(ops)
    a = torch.randn(3, 4)
    expected = (a.relu() + 2 * torch.arange(4.0)) * 3
    rec = Recorder()
    out = torch.compile(model, backend=rec, fullgraph=True)(a)
    assert torch.allclose(out, expected)
    assert len(rec.graphs) == 1  # one graph: no break
    targets = rec.targets()
    assert f"{ns}.scale_into.default" in targets and f"{ns}.add_row.default" in targets
    # The default backend (inductor) too.
    assert torch.allclose(torch.compile(model, fullgraph=True)(a), expected)


def test_dynamic_shapes_on_a_symbolic_contract_dimension(tk, ns):
    ops = tk.torch_ops(ns)

    def f(a, b):
        return ops.concat(a, b) * 2

    compiled = torch.compile(f, fullgraph=True)
    a, b = torch.randn(3, 4), torch.randn(2, 4)
    torch._dynamo.mark_dynamic(a, 0)  # n in a: Tensor([n, k])
    assert torch.equal(compiled(a, b), torch.cat([a, b]) * 2)
    before = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    for n in (5, 9, 17):  # (1 would be specialized by torch)
        a = torch.randn(n, 4)
        out = compiled(a, b)
        assert out.shape == (n + 2, 4) and torch.equal(out, torch.cat([a, b]) * 2)
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == before  # no recompile


def test_dynamic_true_with_both_ops(tk, ns):
    ops = tk.torch_ops(ns)
    model = _model(ops)
    compiled = torch.compile(model, fullgraph=True, dynamic=True)
    for n in (2, 6):
        a = torch.randn(n, 4)
        assert torch.allclose(compiled(a), (a.relu() + 2 * torch.arange(4.0)) * 3)


def test_fake_outputs_follow_the_contract_expressions(tk, ns):
    ops = tk.torch_ops(ns)
    with FakeTensorMode() as mode:
        a = mode.from_tensor(torch.empty(3, 4))
        b = mode.from_tensor(torch.empty(5, 4))
        out = ops.concat(a, b)
        assert out.shape == (8, 4) and out.dtype == torch.float32
        x = mode.from_tensor(torch.empty(6, dtype=torch.float64))
        sq = ops.square(x)  # dtype "*": the input's
        assert sq.shape == (6,) and sq.dtype == torch.float64
        p, q = ops.two_out(mode.from_tensor(torch.empty(7)))
        assert p.shape == q.shape == (7,)
    alloc = kffi.torch.register_op(fresh(tk, "mul_bwd"), f"{ns}::mul_bwd_alloc", allocate=True)
    with FakeTensorMode() as mode:
        t = mode.from_tensor(torch.empty(4, dtype=torch.float64))
        da, db = alloc(t, t, t, 1.0)
        assert da.shape == db.shape == (4,) and da.dtype == torch.float64


@pytest.mark.parametrize(
    "name, make_args",
    [
        ("scale_into", lambda: (torch.zeros(5), torch.randn(5), 1.5)),
        ("add_row", lambda: (torch.randn(3, 4), torch.randn(4))),
        ("concat", lambda: (torch.randn(3, 2), torch.randn(1, 2))),
        ("two_out", lambda: (torch.randn(4),)),
        ("add_bias", lambda: (torch.randn(4), torch.zeros(4), torch.randn(4), 2)),
        ("square", lambda: (torch.randn(6, dtype=torch.float64),)),
    ],
)
def test_opcheck(tk, ns, name, make_args):
    ops = tk.torch_ops(ns)
    result = torch.library.opcheck(ops[name].default, make_args())
    assert set(result.values()) == {"SUCCESS"}, result


def test_contract_messages_survive_compilation(tk, ns):
    ops = tk.torch_ops(ns)

    def f(y, x):
        ops.scale_into(y, x, 2.0)
        return y + 1

    compiled = torch.compile(f, fullgraph=True)
    for y, x, kind, pattern in [
        (
            torch.zeros(3),
            torch.ones(4),
            ValueError,
            r"y\.shape\[0\]: expected n = 4 \(as x\.shape\[0\]\), got 3",
        ),
        (torch.zeros(4), torch.ones(8)[::2], ValueError, r"x\.strides: expected contiguous"),
        (
            torch.zeros(4, dtype=torch.int32),
            torch.ones(4, dtype=torch.int32),
            TypeError,
            r"y\.dtype: expected float32\|float64, got int32",
        ),
    ]:
        with pytest.raises(kind, match=pattern) as eager:
            f(y, x)
        with pytest.raises(kind, match=pattern) as traced:
            compiled(y, x)
        assert str(traced.value) == str(eager.value)

    def g(a, b):
        return ops.add_row(a, b) * 2

    compiled_g = torch.compile(g, fullgraph=True)
    with pytest.raises(
        ValueError, match=r"b\.shape\[0\]: expected m = 3 \(as a\.shape\[1\]\), got 4"
    ):
        compiled_g(torch.ones(2, 3), torch.ones(4))
    # A rank the output shape cannot be read from fails while tracing, in the contract's words.
    with pytest.raises(ValueError) as eager:
        g(torch.ones(6), torch.ones(6))
    with pytest.raises(torch._dynamo.exc.TorchRuntimeError) as traced:
        compiled_g(torch.ones(6), torch.ones(6))
    assert str(eager.value).startswith("a.ndim: expected 2, got 1 (argument #0 of `add_row(")
    assert str(eager.value) in str(traced.value)


def test_export_keeps_the_op(tk, ns):
    ops = tk.torch_ops(ns)

    class M(torch.nn.Module):
        def forward(self, a, b):
            return ops.concat(a, b).sum(0)

    ep = torch.export.export(M(), (torch.randn(3, 2), torch.randn(2, 2)))
    targets = [str(n.target) for n in ep.graph.nodes if n.op == "call_function"]
    assert f"{ns}.concat.default" in targets
    a, b = torch.randn(3, 2), torch.randn(2, 2)
    assert torch.allclose(ep.module()(a, b), torch.cat([a, b]).sum(0))
