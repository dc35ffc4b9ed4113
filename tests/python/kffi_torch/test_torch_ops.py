"""tests/python/kffi_torch/test_torch_ops.py: kffi.torch.register_op and module.torch_ops: schemas
from metadata, eager calls (the direct kffi path and the dispatcher path agree), errors."""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
import kffi
import kffi.torch
import torch_support
from torch_support import fresh

tk = torch_support.tk
ns = torch_support.ns


def test_import_kffi_does_not_import_torch():
    code = "import sys, kffi; print('torch' in sys.modules, 'kffi.torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


def test_schema_from_contract_names_types_mutation_and_returns(tk, ns):
    y_op = kffi.torch.register_op(fresh(tk, "scale_into"), f"{ns}::scale_into")
    assert y_op.schema == "(Tensor(a!) y, Tensor x, float factor) -> ()"
    assert y_op.mutates_args == ("y",)
    assert kffi.torch.register_op(fresh(tk, "add_row"), f"{ns}::add_row").schema == (
        "(Tensor a, Tensor b) -> Tensor"
    )
    assert kffi.torch.register_op(fresh(tk, "two_out"), f"{ns}::two_out").schema == (
        "(Tensor x) -> (Tensor, Tensor)"
    )
    # Optional parameters default to None; the stream parameter is filled by the op.
    bias = kffi.torch.register_op(fresh(tk, "add_bias"), f"{ns}::add_bias")
    assert bias.schema == "(Tensor x, Tensor(a!) y, Tensor? bias=None, SymInt? shift=None) -> ()"
    assert kffi.torch.register_op(fresh(tk, "streams"), f"{ns}::streams").schema == (
        "(Tensor(a!) out) -> ()"
    )
    # torch reads the same schema back.
    schema = str(getattr(torch.ops, ns).scale_into.default._schema)
    assert schema == f"{ns}::scale_into(Tensor(a!) y, Tensor x, float factor) -> ()"


def test_allocate_moves_mut_parameters_to_the_returns(tk, ns):
    op = kffi.torch.register_op(fresh(tk, "mul_bwd"), f"{ns}::mul_bwd", allocate=True)
    assert op.schema == "(Tensor a, Tensor b, Tensor g, float scale) -> (Tensor, Tensor)"
    assert op.mutates_args == ()
    a = torch.tensor([1.0, 2.0], dtype=torch.float64)
    b = torch.tensor([3.0, 4.0], dtype=torch.float64)
    g = torch.tensor([1.0, 0.5], dtype=torch.float64)
    da, db = op(a, b, g, 2.0)
    assert da.tolist() == [6.0, 4.0] and db.tolist() == [2.0, 2.0]
    da2, db2 = getattr(torch.ops, ns).mul_bwd(a, b, g, 2.0)  # the C++ kernel allocates too
    assert torch.equal(da, da2) and torch.equal(db, db2)
    scalar = torch.tensor(1.0, dtype=torch.float64)
    for call in (op, getattr(torch.ops, ns).mul_bwd):  # the output's size cannot be read
        with pytest.raises(
            ValueError,
            match=rf"{ns}::mul_bwd: the shape of an allocated output reads dimension 0 of "
            r"argument #0, which has 0 dimension\(s\)",
        ):
            call(scalar, b, g, 1.0)
    only_da = kffi.torch.register_op(fresh(tk, "mul_bwd"), f"{ns}::mul_bwd_da", allocate=["da"])
    assert only_da.schema == (
        "(Tensor a, Tensor b, Tensor g, float scale, Tensor(a!) db) -> Tensor"
    )


def test_eager_mutating_and_returning_ops(tk, ns):
    ops = tk.torch_ops(ns)
    x = torch.arange(4, dtype=torch.float32)
    y = torch.zeros(4)
    assert ops.scale_into(y, x, 2.5) is None
    assert y.tolist() == [0.0, 2.5, 5.0, 7.5]
    out = ops.add_row(torch.ones(2, 3), torch.tensor([1.0, 2.0, 3.0]))
    assert out.tolist() == [[2.0, 3.0, 4.0], [2.0, 3.0, 4.0]]
    a, b = ops.two_out(x)
    assert a.tolist() == [1.0, 2.0, 3.0, 4.0] and b.tolist() == [0.0, 2.0, 4.0, 6.0]
    # Keyword arguments and defaults.
    y2 = torch.zeros(4)
    ops.add_bias(x, y2)
    assert y2.tolist() == x.tolist()
    ops.add_bias(x, y2, torch.ones(4), 10)
    assert y2.tolist() == [11.0, 12.0, 13.0, 14.0]
    ops.add_bias(x, y=y2, shift=1)
    assert y2.tolist() == [1.0, 2.0, 3.0, 4.0]
    getattr(torch.ops, ns).add_bias(x, y2, shift=2)
    assert y2.tolist() == [2.0, 3.0, 4.0, 5.0]


def test_dispatcher_path_matches_eager_path(tk, ns):
    ops = tk.torch_ops(ns)
    torch_ns = getattr(torch.ops, ns)
    x = torch.linspace(-1, 1, 5)
    y1, y2 = torch.zeros(5), torch.zeros(5)
    ops.scale_into(y1, x, 3.0)
    torch_ns.scale_into(y2, x, 3.0)
    assert torch.equal(y1, y2)
    a, b = torch.rand(3, 2), torch.rand(4, 2)
    assert torch.equal(ops.concat(a, b), torch_ns.concat(a, b))
    assert torch.equal(torch_ns.concat(a, b), torch.cat([a, b]))
    assert [torch.equal(p, q) for p, q in zip(ops.two_out(x), torch_ns.two_out(x))] == [True, True]
    # An int result goes through both paths too.
    assert ops.numel(x) == torch_ns.numel(x) == 5


def _dispatched(call) -> list:
    """The ops that went through torch's dispatcher during call() (as the profiler records)."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        call()
    return [e.name for e in prof.events() if "kffi_test" in e.name]


@pytest.mark.parametrize("gate", ["C", "Python"])
def test_eager_calls_skip_the_dispatcher_unless_something_traces(tk, ns, gate):
    op = kffi.torch.register_op(fresh(tk, "add_row"), f"{ns}::add_row")
    if gate == "Python":
        op._eager = op._call_python
    name = f"{ns}::add_row"
    a, b = torch.ones(2, 3), torch.ones(3)
    assert _dispatched(lambda: op(a, b)) == []  # plain tensors: straight to kffi
    assert _dispatched(lambda: op(a=a, b=b)) == []  # keywords too
    assert _dispatched(lambda: op.default(a, b)) == [name]  # (the profiler sees ops)
    with torch.no_grad():
        assert _dispatched(lambda: op(torch.ones(2, 3, requires_grad=True), b)) == []
    with pytest.raises(RuntimeError, match="has no autograd rule"):
        op(a.clone().requires_grad_(), b)  # autograd needs the op (which refuses: no rule)
    param = torch.nn.Parameter(torch.ones(2, 3), requires_grad=False)
    assert _dispatched(lambda: op(param, b)) == [name]  # a tensor subclass: the dispatcher
    from torch.utils._python_dispatch import TorchDispatchMode

    seen = []

    class Log(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            seen.append(str(func))
            return func(*args, **(kwargs or {}))

    with Log():
        op(a, b)
    assert seen == [f"{ns}.add_row.default"]
    with torch.device("cpu"):  # a torch function mode
        assert _dispatched(lambda: op(a, b)) == [name]
    # functorch: vmap's tensors are plain torch.Tensor objects, but the call goes to the op
    # (torch's batching fallback runs it once per row).
    rows = torch.arange(12.0).reshape(4, 3)
    out = torch.func.vmap(lambda r: op(r.unsqueeze(0), b))(rows)
    assert torch.equal(out, (rows + 1).unsqueeze(1))


def test_contract_errors_are_the_same_on_both_paths(tk, ns):
    ops = tk.torch_ops(ns)
    x = torch.ones(4)
    for call in (ops.scale_into, getattr(torch.ops, ns).scale_into):
        with pytest.raises(
            ValueError, match=r"y\.shape\[0\]: expected n = 4 \(as x\.shape\[0\]\), got 3"
        ):
            call(torch.zeros(3), x, 1.0)
        with pytest.raises(ValueError, match=r"x\.strides: expected contiguous"):
            call(torch.zeros(4), torch.ones(8)[::2], 1.0)
    for call in (ops.fail, getattr(torch.ops, ns).fail):  # the kernel's own error, its kind kept
        with pytest.raises(IndexError, match="kernel failure on 4"):
            call(x)


def test_stream_parameters_are_filled_by_the_op(tk, ns):
    op = kffi.torch.register_op(fresh(tk, "streams"), f"{ns}::streams")
    for call in (op, getattr(torch.ops, ns).streams):
        out = torch.full((2,), -1, dtype=torch.int64)
        call(out)
        assert out.tolist() == [0, 0]  # CPU: no stream, explicit or from the environment


def test_plain_exports_need_mutates_args_and_a_fake_when_they_return(tk, ns):
    with pytest.raises(
        TypeError, match=r"no contract saying which tensors it writes; pass mutates_args"
    ):
        kffi.torch.register_op(fresh(tk, "scale_plain"), f"{ns}::scale_plain")
    with pytest.raises(
        ValueError, match=r"mutates_args names 'factor', which is not one of its tensor"
    ):
        kffi.torch.register_op(
            fresh(tk, "scale_plain"), f"{ns}::scale_plain", mutates_args=["factor"]
        )
    op = kffi.torch.register_op(fresh(tk, "scale_plain"), f"{ns}::scale_plain", mutates_args=["y"])
    assert op.schema == "(Tensor(a!) y, Tensor x, float factor) -> ()"
    y = torch.zeros(3)
    op(y, torch.ones(3), 4.0)
    assert y.tolist() == [4.0, 4.0, 4.0]
    with pytest.raises(
        TypeError,
        match=r"plus_one_plain has no contract, so kffi cannot say what it returns \(Tensor\)",
    ):
        kffi.torch.register_op(fresh(tk, "plus_one_plain"), f"{ns}::plus_one", mutates_args=())
    plus = kffi.torch.register_op(
        fresh(tk, "plus_one_plain"), f"{ns}::plus_one", mutates_args=(), fake=torch.empty_like
    )
    assert plus.schema == "(Tensor x) -> Tensor"
    assert plus(torch.zeros(2)).tolist() == [1.0, 1.0]
    compiled = torch.compile(lambda t: plus(t) * 2, fullgraph=True)
    assert compiled(torch.zeros(2)).tolist() == [2.0, 2.0]


def test_plain_exports_with_lists_strings_bools_and_tensor_lists(tk, ns):
    fill = kffi.torch.register_op(fresh(tk, "fill_plain"), f"{ns}::fill", mutates_args=["y"])
    assert fill.schema == "(Tensor(a!) y, SymInt[] values, str label, bool negate) -> ()"
    for call in (fill, getattr(torch.ops, ns).fill):
        y = torch.zeros(3)
        call(y, [1, 2, 3], "ab", True)
        assert y.tolist() == [1.0, 0.0, -1.0]
    pair = kffi.torch.register_op(
        fresh(tk, "pair_plain"),
        f"{ns}::pair",
        mutates_args=(),
        fake=lambda x: [torch.empty_like(x), torch.empty_like(x)],
    )
    assert pair.schema == "(Tensor x) -> Tensor[]"
    x = torch.arange(3.0)
    for call in (pair, getattr(torch.ops, ns).pair):
        out = call(x)
        assert isinstance(out, list) and [t.tolist() for t in out] == [[1, 2, 3], [0, 2, 4]]
    compiled = torch.compile(lambda t: pair(t)[1] + 1, fullgraph=True)
    assert compiled(x).tolist() == [1.0, 3.0, 5.0]


def test_contract_and_mutates_args_must_agree(tk, ns):
    f = fresh(tk, "scale_into")
    with pytest.raises(
        ValueError, match=r"mutates_args=\['x'\] contradicts its contract, which marks \['y'\]"
    ):
        kffi.torch.register_op(f, f"{ns}::s", mutates_args=["x"])
    assert kffi.torch.register_op(f, f"{ns}::s", mutates_args=["y"]).mutates_args == ("y",)


def test_bad_registrations(tk, ns):
    f = fresh(tk, "add_row")
    with pytest.raises(TypeError, match="expected a kffi.Function, got function"):
        kffi.torch.register_op(lambda x: x, f"{ns}::f")
    for bad in ("noname", "a::b::c", "ns::1x", "ns::f.default", 3):
        with pytest.raises(ValueError, match='the op name is "namespace::name"'):
            kffi.torch.register_op(f, bad)
    with pytest.raises(ValueError, match="allocate= names 'a', which is not a `mut` tensor"):
        kffi.torch.register_op(f, f"{ns}::f", allocate=["a"])
    op = kffi.torch.register_op(f, f"{ns}::f")
    assert kffi.torch.register_op(f, f"{ns}::f") is op  # the same function again: the same op
    with pytest.raises(ValueError, match="already registered"):  # other options: not the same
        kffi.torch.register_op(f, f"{ns}::f", mutates_args=())
    with pytest.raises(ValueError, match=rf"{ns}::f is already registered \(to add_row\)"):
        kffi.torch.register_op(fresh(tk, "concat"), f"{ns}::f")
    with pytest.raises(ValueError, match="torch already has an op aten::add"):
        kffi.torch.register_op(fresh(tk, "concat"), "aten::add")


def test_functions_without_metadata_are_refused(ns):
    fn = kffi.to_kffi(lambda x: x)
    with pytest.raises(TypeError, match="has no metadata"):
        kffi.torch.register_op(fn, f"{ns}::f")


def test_int_result_without_fake_explains_under_tracing(tk, ns):
    op = kffi.torch.register_op(fresh(tk, "numel"), f"{ns}::numel")
    assert op.schema == "(Tensor x) -> SymInt"
    assert op(torch.zeros(3, 1).flatten()) == 3
    from torch._subclasses.fake_tensor import FakeTensorMode

    with (
        FakeTensorMode(),
        pytest.raises(
            NotImplementedError, match=r"returns SymInt, which its contract cannot predict"
        ),
    ):
        op(torch.zeros(3))


def test_torch_ops_registers_contract_functions_only(tk, ns):
    ops = tk.torch_ops(ns)
    assert "scale_into" in ops and "concat" in ops
    assert "scale_plain" not in ops and "plus_one_plain" not in ops  # no contract
    assert ops["concat"] is ops.concat
    assert ops.concat.qualname == f"{ns}::concat"
    with pytest.raises(AttributeError, match=r"has no op 'nope'; ops: add_bias, add_row"):
        ops.nope  # noqa: B018
    assert tk.torch_ops(ns).concat is ops.concat  # registered once
    assert kffi.torch.registered_ops()[f"{ns}::concat"] is ops.concat
