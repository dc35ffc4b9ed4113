"""tests/python/kffi_torch/test_torch_register_module.py: kffi::torch::RegisterOps(module, ns), the
C++ registration of a kffi library's contract functions (through the glue library's export, in this
process): the same schemas and results as kffi.torch's ops, Meta kernels computed from the contract
in C++ (fake tensors and torch.export need no Python fake, and dynamic shapes stay symbolic), clear
errors, and kffi::torch::CheckPackage."""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import kffi
import kffi.torch
from kffi.torch import _glue
from test_torch_export import package  # noqa: F401  (the CPU .pt2, a cached fixture)
from torch_export_cases import NAMESPACE, library

CXX, PY = "kffi_regmod_cxx", "kffi_regmod_py"


@pytest.fixture(scope="module")
def ops():
    mod = kffi.load_module(library())
    py = mod.torch_ops(PY)
    assert _glue.glue().register_module_ops(mod, CXX) == 2
    return getattr(torch.ops, CXX), py


def test_same_schemas_and_results_as_kffi_torch(ops):
    cxx, py = ops
    for name in ("repeat2", "scale"):
        assert str(getattr(cxx, name).default._schema) == f"{CXX}::{name}{py[name].schema}"
    x = torch.linspace(-1, 1, 7)
    assert torch.equal(cxx.repeat2(x), py["repeat2"](x))
    y = torch.empty(7)
    cxx.scale(y, x, 2.0)
    assert torch.equal(y, x * 2)
    with pytest.raises(ValueError, match=r"x\.shape\[0\]"):  # the contract's check, as in Python
        cxx.scale(torch.empty(3), x, 2.0)


def test_meta_kernel_from_the_contract(ops):
    cxx, py = ops
    m = cxx.repeat2(torch.empty(3, device="meta"))
    assert m.shape == (6,) and m.dtype == torch.float32 and m.device.type == "meta"
    y = torch.empty(4, device="meta")
    assert cxx.scale(y, torch.empty(4, device="meta"), 1.0) is None
    with pytest.raises(ValueError, match="x.ndim: expected 1, got 2"):
        cxx.repeat2(torch.empty(2, 3, device="meta"))  # the rank hides n: said as the check does
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        a, b = cxx.repeat2(torch.empty(5)), py["repeat2"].default(torch.empty(5))
        assert a.shape == b.shape == (10,) and a.dtype == b.dtype


class _Model(torch.nn.Module):
    def forward(self, x):
        ops = getattr(torch.ops, CXX)
        y = ops.repeat2(torch.sin(x))
        out = torch.empty_like(y)
        ops.scale(out, y, 3.0)
        return out + 1


def test_export_with_dynamic_shapes_needs_no_python_fake(ops):
    ep = torch.export.export(
        _Model(),
        (torch.arange(4, dtype=torch.float32),),
        dynamic_shapes={"x": {0: torch.export.Dim("n")}},
    )
    (node,) = [n for n in ep.graph.nodes if "repeat2" in str(n.target)]
    (dim,) = node.meta["val"].shape
    assert not isinstance(dim, int) and str(dim).startswith("2*")  # symbolic: 2*n
    x = torch.linspace(0, 1, 6)
    assert torch.allclose(ep.module()(x), torch.sin(x).repeat_interleave(2) * 3 + 1)


def test_registration_errors(ops):
    glue, mod = _glue.glue(), kffi.load_module(library())
    with pytest.raises(ValueError, match=f"torch already has an op {CXX}::"):
        glue.register_module_ops(mod, CXX)
    with pytest.raises(ValueError, match='the op namespace is an identifier, got "a-b"'):
        glue.register_module_ops(mod, "a-b")


def test_check_package(ops, package, tmp_path):  # noqa: F811
    glue = _glue.glue()
    if not hasattr(getattr(torch.ops, NAMESPACE), "repeat2"):
        with pytest.raises(ValueError, match="calls ops this process has not registered"):
            glue.check_package(str(package))
        kffi.load_module(library()).torch_ops(NAMESPACE)
    assert glue.check_package(str(package)) == 2
    bad = tmp_path / "not.pt2"
    bad.write_text("x")
    with pytest.raises(ValueError, match="kffi::torch::CheckPackage: cannot read the package"):
        glue.check_package(str(bad))
