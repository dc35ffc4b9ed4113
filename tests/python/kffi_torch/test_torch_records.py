"""tests/python/kffi_torch/test_torch_records.py: record parameters (a KFFI_RECORD struct, a
KFFI_OBJECT_DEF type) of kffi.torch ops: the schema takes their fields (`cfg_alpha`), the op takes
the record (or its fields by keyword), the dispatcher kernel rebuilds the object; eager, torch.ops,
torch.compile(fullgraph=True), torch.export; refusals name `param.field`."""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import dataclasses
import itertools
from typing import NamedTuple

import pytest

torch = pytest.importorskip("torch")
import kffi
import kffi.torch
from conftest import KERNELS, LibraryBuilder
from record_support import Blend

_names = itertools.count()


@pytest.fixture(scope="module")
def rk():
    return kffi.load_module(
        LibraryBuilder().build("record_op_kernels", KERNELS / "record_op_kernels.cc")
    )


def _fake_like_last(*args, **kwargs):
    return torch.empty_like(args[-1])


@pytest.fixture(scope="module")
def blended(rk):
    return kffi.torch.register_op(
        rk.blended, "kffi_rec::blended", mutates_args=(), fake=_fake_like_last
    )


@pytest.fixture(scope="module")
def knobbed(rk):
    return kffi.torch.register_op(rk.knobbed, "kffi_rec::knobbed", mutates_args=("y",))


class TupleBlend(NamedTuple):
    alpha: float
    n: int
    flag: bool
    tag: str


@dataclasses.dataclass
class Knobs:
    scale: float
    shift: int


def factor(b) -> float:
    return b.alpha * b.n + (1.0 if b.flag else 0.0) + len(b.tag)


X = torch.arange(4, dtype=torch.float32)


def test_schema_takes_the_fields(blended, knobbed):
    assert (
        blended.schema == "(float b_alpha, SymInt b_n, bool b_flag, str b_tag, Tensor x) -> Tensor"
    )
    # A read-only field (version) is not an argument: it keeps its C++ default.
    assert knobbed.schema == "(Tensor(a!) y, Tensor x, float k_scale, SymInt k_shift) -> ()"
    assert knobbed.mutates_args == ("y",)


@pytest.mark.parametrize("cls", [Blend, TupleBlend])
def test_eager_equals_direct_call(rk, blended, cls):
    b = cls(0.5, 3, True, "ab")
    assert torch.equal(blended(b, X), rk.blended(b, X))
    assert torch.allclose(blended(b, X), X * factor(b))


def test_flattened_keywords_and_torch_ops(rk, blended):
    b = Blend(0.25, 4, False, "q")
    want = rk.blended(b, X)
    assert torch.equal(blended(x=X, b_alpha=0.25, b_n=4, b_flag=False, b_tag="q"), want)
    assert torch.equal(blended(b=b, x=X), want)
    # torch.ops takes the schema's arguments: the kernel builds the object in C++.
    assert torch.equal(torch.ops.kffi_rec.blended(0.25, 4, False, "q", X), want)
    assert torch.equal(blended.default(0.25, 4, False, "q", X), want)


def test_object_of_the_type_and_object_type_record(rk, blended, knobbed):
    made = rk.make_blend(0.5, 3)  # a flat.Blend object from C++
    assert torch.allclose(blended(made, X), X * (1.5 + 1 + 4))
    y = torch.empty(4)
    knobbed(y, X, Knobs(2.0, 1))
    assert y.tolist() == (X * 2 + 1).tolist()
    y2 = torch.empty(4)
    rk.knobbed(y2, X, Knobs(2.0, 1))
    assert torch.equal(y, y2)


def test_through_the_dispatcher_with_grad(blended):
    # requires_grad sends the eager call through the dispatcher (no autograd rule: refused).
    with pytest.raises(RuntimeError, match="has no autograd rule"):
        blended(Blend(1.0, 1, False, ""), X.clone().requires_grad_())
    with torch.no_grad():
        got = blended(Blend(1.0, 2, False, ""), X.clone().requires_grad_())
    assert got.tolist() == (X * 2).tolist()


def test_compile_fullgraph(rk, blended, knobbed):
    def model(b, k, x):
        y = torch.empty_like(x)
        knobbed(y, x, k)
        return blended(b, y) + 1

    compiled = torch.compile(model, fullgraph=True)
    b, k = Blend(0.5, 2, True, "ab"), Knobs(3.0, -1)
    want = model(b, k, X)
    assert torch.equal(compiled(b, k, X), want)
    b2 = Blend(2.0, 1, False, "")  # another record: guards on its fields recompile or pass it
    assert torch.equal(compiled(b2, k, X), model(b2, k, X))


def test_compile_error_names_the_field(blended):
    compiled = torch.compile(lambda b, x: blended(b, x), fullgraph=True)
    with pytest.raises(Exception, match=r"b\.alpha: expected float, got str"):
        compiled(Blend("fast", 2, True, ""), X)


def test_export(blended):
    class M(torch.nn.Module):
        def forward(self, x):
            return blended(Blend(0.5, 2, False, "z"), x)

    ep = torch.export.export(M(), (X,))
    text = str(ep.graph)
    assert "kffi_rec.blended.default" in text
    assert torch.equal(ep.module()(X), X * (1.0 + 1))


@pytest.mark.parametrize(
    "value, exc, match",
    [
        (
            Blend("fast", 2, True, ""),
            TypeError,
            r"^b\.alpha: expected float, got str \(argument #0 of `blended\(b: flat\.Blend",
        ),
        (Blend(0.5, 2.5, True, ""), TypeError, r"^b\.n: expected int, got float"),
        (Blend(0.5, 2, True, 7), TypeError, r"^b\.tag: expected str, got int"),
        (Blend(0.5, 2**70, True, ""), OverflowError, r"^b\.n: "),
        ((0.5, 2, True, ""), TypeError, r"^b: expected flat\.Blend, got tuple"),
    ],
)
def test_wrong_field_types_name_the_field(blended, value, exc, match):
    with pytest.raises(exc, match=match):
        blended(value, X)


def test_missing_and_extra_fields(blended, knobbed):
    class Short(NamedTuple):
        alpha: float
        n: int

    with pytest.raises(
        TypeError, match=r"^b\.flag: expected a value \(bool\), got a Short without"
    ):
        blended(Short(0.5, 2), X)

    @dataclasses.dataclass
    class WithVersion:
        scale: float
        shift: int
        version: int

    with pytest.raises(
        TypeError, match=r"^k\.version: expected a (writable )?field of flat\.Knobs"
    ):
        knobbed(torch.empty(4), X, WithVersion(1.0, 2, 3))
    with pytest.raises(TypeError, match=r"missing required argument 'b' .*no b\.tag"):
        blended(x=X, b_alpha=0.5, b_n=2, b_flag=True)
    with pytest.raises(TypeError, match=r"got 'b' and its field 'b_n'"):
        blended(Blend(0.5, 2, True, ""), X, b_n=3)


def test_kernel_names_the_field_of_a_bad_value(rk):
    # torch.ops takes the schema's values as they are: a value the C++ field cannot hold (an
    # int32 field) is refused by its setter in the kernel, naming the field.
    op = kffi.torch.register_op(
        rk.small_add, "kffi_rec::small_add", mutates_args=(), fake=_fake_like_last
    )
    assert op.schema == "(SymInt s_k, Tensor x) -> Tensor"
    assert op.default(7, X).tolist() == (X + 7).tolist()
    with pytest.raises((ValueError, TypeError, OverflowError), match=r"^s\.k: "):
        op.default(2**40, X)


def test_unsupported_field_type_refused_at_registration(rk):
    with pytest.raises(TypeError, match=r"record field s\.dims \(flat\.Shaped\) has type"):
        kffi.torch.register_op(
            rk.shaped, f"kffi_rec::shaped{next(_names)}", mutates_args=(), fake=lambda *a: 0.0
        )


def test_contract_metadata_record_param(rk):
    # A contract's record parameter (metadata with `type`: the type key) derives the same
    # schema, in the C++ derivation kffi::torch::RegisterOps shares.
    from kffi.torch._schema import signature_of

    class Fn:
        _metadata = {
            "name": "g",
            "params": [
                {"name": "b", "kind": "record", "type": "flat.Blend"},
                {"name": "x", "kind": "tensor", "shape": ["n"], "dtypes": "float32"},
            ],
            "mutates": [],
            "outputs": [],
        }

    sig = signature_of(Fn(), "kffi_rec::g")
    assert sig.schema() == "(float b_alpha, SymInt b_n, bool b_flag, str b_tag, Tensor x) -> ()"
    assert [p.name for p in sig.schema_args] == ["b_alpha", "b_n", "b_flag", "b_tag", "x"]


def test_field_name_clash_refused(rk):
    from kffi.torch._schema import signature_of

    class Fn:
        _metadata = {
            "name": "h",
            "params": [{"name": "b", "type": "flat.Blend"}, {"name": "b_n", "type": "int"}],
        }

    with pytest.raises(ValueError, match=r"h: schema argument 'b_n'.* is not a unique identifier"):
        signature_of(Fn(), "kffi_rec::h", mutates_args=())


_REGISTER_SRC = r"""
#include <kffi/kffi.h>
#include <kffi/reflection.h>

namespace regrec {
struct Blend {
  double alpha;
  int64_t n;
};
KFFI_RECORD(Blend, "regrec.Blend", alpha, n);
}  // namespace regrec

namespace {
void Scale(kffi::TensorView y, regrec::Blend b, kffi::ConstTensorView x) {
  const float* in = x.data<float>();
  float* out = y.data<float>();
  for (int64_t i = 0; i < x.numel(); ++i) out[i] = static_cast<float>(in[i] * b.alpha * b.n);
}
}  // namespace

KFFI_EXPORT_CONTRACT(scale, Scale,
                     "y: Tensor([m], float32, mut), b: regrec.Blend{alpha: float64[0, 1], "
                     "n: int64[1, 8]}, x: Tensor([m], float32)");
"""


def test_register_ops_from_cpp_takes_a_record_contract(tmp_path_factory):
    # kffi::torch::RegisterOps(module, ns): the C++ registration derives the same schema as
    # kffi.torch (the record's fields as <param>_<field>), rebuilds the record in its kernel, and
    # the contract's field ranges are checked, with messages naming b.alpha.
    from kffi.torch import _glue

    src = tmp_path_factory.mktemp("regrec") / "regrec.cc"
    src.write_text(_REGISTER_SRC)
    mod = kffi.load_module(LibraryBuilder().build("regrec_kernels", src))
    assert _glue.glue().register_module_ops(mod, "kffi_regrec_cxx") == 1
    py = mod.torch_ops("kffi_regrec_py")
    cxx = torch.ops.kffi_regrec_cxx
    schema = str(cxx.scale.default._schema)
    assert schema == f"kffi_regrec_cxx::scale{py['scale'].schema}"
    assert "float b_alpha, SymInt b_n" in schema or "float b_alpha, int b_n" in schema
    x = torch.arange(4, dtype=torch.float32)
    y = torch.empty(4)
    cxx.scale(y, 0.5, 4, x)
    assert torch.equal(y, x * 2)
    with pytest.raises(ValueError, match=r"b\.alpha"):
        cxx.scale(y, 1.5, 4, x)
    with pytest.raises(ValueError, match=r"b\.n"):
        cxx.scale(y, 0.5, 9, x)
