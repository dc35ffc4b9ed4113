"""tests/python/kffi_torch/test_torch_dtensor.py: kffi.torch ops called on DTensors
(torch.distributed.tensor).

register_op declares each op's sharding to DTensor from its contract's parallel symbols
(kffi/torch/_dtensor.py). The two-rank test runs torch_dtensor_worker.py (gloo, CPU) in a
subprocess with a timeout, so a hung collective fails the test instead of the suite, and checks
what each rank reported. The other tests read the rules themselves, in this process.
"""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from ranks import run_ranks

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")

import kffi
from kffi.torch._dtensor import rule_of
from kffi.torch._schema import signature_of

WORKER = Path(__file__).resolve().parent / "torch_dtensor_worker.py"
RANKS = ["rank0", "rank1"]  # the reports rank<r>.json
TIMEOUT_S = 600
TOL = 1e-6


def run_job(tmp_path) -> list:
    out = tmp_path / "ranks"
    cmd = [sys.executable, str(WORKER), "--out", str(out)]
    return run_ranks([cmd], out, RANKS, limit_s=TIMEOUT_S, what="the DTensor ranks")


@pytest.mark.skipif(not dist.is_gloo_available(), reason="torch without gloo")
def test_dtensor_two_ranks(tmp_path):
    for r in run_job(tmp_path):
        # Registering an op does not import DTensor (its rule waits for DTensor's import).
        assert not r["dtensor_before"] and not r["dtensor_after_register"], r
        res = r["results"]
        for name in ("rownorm", "rows_seen"):
            # Shard(0), the parallel rows: each rank's kernel ran on its own 4 rows, no
            # collective, and the result is Shard(0) too.
            got = res[f"{name}_shard0"]
            assert got["dtensor"] and got["placements"] == ["S(0)"], got
            assert got["local_shape"] == [4, 6] and got["comms"] == 0, got
            # Shard(1): the columns are not parallel, so DTensor gathered the input first.
            got = res[f"{name}_shard1"]
            assert got["placements"] == ["R"] and got["local_shape"] == [8, 6], got
            assert got["comms"] > 0, got
            got = res[f"{name}_replicate"]
            assert got["placements"] == ["R"] and got["comms"] == 0, got
        assert res["rows_seen_shard0"]["seen"] == [4.0], res  # the kernel saw only local rows
        assert res["rows_seen_shard1"]["seen"] == [8.0], res
        for key in ("rownorm_shard0", "rownorm_shard1", "rownorm_replicate"):
            assert res[key]["err"] < TOL, (key, res[key])
        # No parallel symbol: right on Replicate, and on Shard(0) (gathered).
        for key in ("plain_replicate", "plain_shard0"):
            assert res[key]["placements"] == ["R"] and res[key]["err"] < TOL, (key, res[key])
        # In place: the written tensor kept its placement and its local storage.
        for key, placement in (("mut_shard0", "S(0)"), ("mut_replicate", "R")):
            got = res[key]
            assert got["returned"] == "None" and got["placements"] == [placement], got
            assert got["same_local"] and got["err"] < TOL, got
        err = res["mut_shard1_error"]
        assert err is not None and "kffi_dt::rownorm_mut writes its argument 'y'" in err, err
        assert ".to_local()" in err, err
        grad = res["grad"]
        assert grad["placements"] == ["S(0)"] and grad["local_shape"] == [4, 32], grad
        assert grad["err"] < TOL, grad


# ---- the rules, read from contracts (one process, no DTensor needed) ----------------------------

SRC = r"""
void f(kffi::ConstTensorView x, kffi::TensorView y) {}
int64_t rows(kffi::ConstTensorView x) { return x.size(0); }
"""


@pytest.fixture(scope="module")
def base():
    a, b = kffi.sym_int(), kffi.sym_int()
    t = kffi.fake_tensor
    return kffi.compile(
        SRC, "f", t("float32", (a, b)), t("float32", (a, b), mut=True), options={"quiet": True}
    )


def rule(base, contract, allocate=True, **kw):
    fn = kffi.with_contract(base, contract, name="f", **kw)
    return rule_of(signature_of(fn, "kffi_dt_rules::f", allocate=allocate))


def test_rule_parallel_rows(base):
    r = rule(base, "x: Tensor([n, m], float32), y: Tensor([n, m], float32, mut); n: int64 parallel")
    assert r.symbols == {"n": 1} and r.refusal is None
    assert r.args == {"x": ("n", None)} and r.returns == [("n", None)]
    r = rule(
        base, "x: Tensor([n, m], float32), y: Tensor([n, m], float32, mut); n: int64 % 4 parallel"
    )
    assert r.symbols == {"n": 4}
    r = rule(
        base,
        "x: Tensor([n, m], float32), y: Tensor([n, m], float32, mut); n: int64 parallel",
        allocate=False,
    )
    assert r.written == ["y"] and r.args == {"x": ("n", None), "y": ("n", None)}


@pytest.mark.parametrize(
    "contract",
    [
        # no parallel symbol
        "x: Tensor([n, m], float32), y: Tensor([n, m], float32, mut)",
        # twice in one tensor
        "x: Tensor([n, n], float32), y: Tensor([n, n], float32, mut); n: int64 parallel",
        # an output without it (each rank would reduce its own rows only)
        "x: Tensor([n, m], float32), y: Tensor([m, m], float32, mut); n: int64 parallel",
    ],
)
def test_rule_all_replicate(base, contract):
    r = rule(base, contract)
    assert r.symbols == {} and r.refusal is None
    assert all(d is None or set(d) == {None} for d in r.args.values()), r.args


def test_rule_output_expression(base):
    n, m = kffi.sym_int("n", parallel=True), kffi.sym_int("m")
    t = kffi.fake_tensor
    fn = kffi.with_contract(
        base,
        t("float32", (n, m)),
        t("float32", (n, m), mut=True),
        param_names=["x", "y"],
        outputs=[t("float32", (n * 2,))],
        name="f",
    )
    r = rule_of(signature_of(fn, "kffi_dt_rules::f", allocate=True))
    assert r.symbols == {}, r.symbols  # a shard's kernel cannot make its part of n * 2 rows
    assert r.returns == [(None, None), (None,)]


def test_rule_scalar_return_refused():
    n = kffi.sym_int("n", parallel=True)
    fn = kffi.compile(SRC, "rows", kffi.fake_tensor("float32", (n,)), options={"quiet": True})
    r = rule_of(signature_of(fn, "kffi_dt_rules::rows"))
    assert r.refusal is not None and "returns SymInt" in r.refusal, r.refusal
    assert "kffi_dt_rules::rows" in r.refusal and ".to_local()" in r.refusal
    with pytest.raises(ValueError, match="DTensor cannot place"):
        r.strategies()
