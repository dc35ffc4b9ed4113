"""tests/python/kffi_torch/test_torch_fsdp.py: a kffi.torch op in a two-rank FSDP2 (fully_shard)
program.

torch_fsdp_worker.py runs the ranks (torch.multiprocessing.spawn), each in its own process; this
test starts it in a subprocess with a timeout, so a hung collective fails the test instead of the
suite, and checks what each rank reported: outputs, loss, gradients and parameters after several
Adam steps match the same model of torch ops trained on the whole batch. The CUDA case (NCCL, one
GPU per rank) needs two GPUs; the CPU case (gloo) runs anywhere torch does.
"""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from ranks import run_ranks

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")

WORKER = Path(__file__).resolve().parent / "torch_fsdp_worker.py"
RANKS = ["rank0", "rank1"]  # the reports rank<r>.json
TIMEOUT_S = 600
TOL = 1e-5  # CPU; GPUs sum in other orders (and reduce-scatter), hence TOL_CUDA
TOL_CUDA = 1e-4


def run_job(device, tmp_path) -> list:
    out = tmp_path / "ranks"
    cmd = [sys.executable, str(WORKER), "--device", device, "--out", str(out)]
    return run_ranks([cmd], out, RANKS, limit_s=TIMEOUT_S, what="the FSDP ranks")


def check_matches_torch(reports, tol=TOL):
    for r in reports:
        assert r["sharded"] and r["local_rows"] == 16, r  # FSDP2 split lin1's 32 rows in two
        assert r["kffi_calls"] == 4, r  # every step's forward called the kffi op
        errs = r["errors"]
        assert errs["out"] < tol and errs["loss"] < tol, (r["rank"], errs)
        assert errs["grad"] < tol and errs["param"] < tol, (r["rank"], errs)


@pytest.mark.skipif(not dist.is_gloo_available(), reason="torch without gloo")
def test_fsdp2_cpu_two_ranks(tmp_path):
    check_matches_torch(run_job("cpu", tmp_path))


@pytest.mark.skipif(
    not torch.cuda.is_available() or torch.cuda.device_count() < 2,
    reason="needs 2 CUDA GPUs",
)
@pytest.mark.skipif(not dist.is_nccl_available(), reason="torch without NCCL")
def test_fsdp2_nccl_two_gpus(tmp_path):
    check_matches_torch(run_job("cuda", tmp_path), tol=TOL_CUDA)
