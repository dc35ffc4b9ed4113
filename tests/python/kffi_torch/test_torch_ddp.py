"""tests/python/kffi_torch/test_torch_ddp.py: a kffi.torch op in a two-rank DistributedDataParallel
program.

torch_ddp_worker.py runs the ranks (torch.multiprocessing.spawn), each in its own process; this
test starts it in a subprocess with a timeout, so a hung collective fails the test instead of the
suite, and checks what each rank reported. The CUDA case (NCCL, one GPU per rank) needs two GPUs;
the CPU case (gloo) runs anywhere torch does.
"""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from ranks import run_ranks

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")

WORKER = Path(__file__).resolve().parent / "torch_ddp_worker.py"
RANKS = ["rank0", "rank1"]  # the reports rank<r>.json
TIMEOUT_S = 900
TOL = 1e-4


def run_job(device, tmp_path, backend="inductor") -> list:
    out = tmp_path / "ranks"
    cmd = [sys.executable, str(WORKER), "--device", device, "--out", str(out), "--backend", backend]
    return run_ranks([cmd], out, RANKS, limit_s=TIMEOUT_S, what="the DDP ranks")


def check_matches_torch(reports):
    for r in reports:
        errs = r["errors"]
        assert errs["out"] < TOL and errs["loss"] < TOL, (r["rank"], errs)
        assert errs["grad"] < TOL and errs["param"] < TOL, (r["rank"], errs)
        assert r["ranks_agree"] < 1e-6, r  # DDP averaged the gradients of both ranks


@pytest.mark.skipif(not dist.is_gloo_available(), reason="torch without gloo")
def test_ddp_compiled_cpu_two_ranks(tmp_path):
    # aot_eager: the same dynamo and AOT autograd graphs as inductor (DDP's bucketed graphs, the
    # op's fake implementation and its backward op), without compiling C++ on a small CPU host.
    check_matches_torch(run_job("cpu", tmp_path, backend="aot_eager"))


@pytest.mark.skipif(
    not torch.cuda.is_available() or torch.cuda.device_count() < 2,
    reason="needs 2 CUDA GPUs",
)
@pytest.mark.skipif(not dist.is_nccl_available(), reason="torch without NCCL")
def test_ddp_compiled_nccl_two_gpus(tmp_path):
    reports = run_job("cuda", tmp_path)
    check_matches_torch(reports)
    for r in reports:
        rank = r["rank"]
        assert r["kernel_device"] == rank, r  # each rank's kernel on its own GPU
        assert r["kernel_stream"] == r["side_stream"] != 0, r  # and on its current stream
        assert r["output_device"] == f"cuda:{rank}", r
        assert r["side_stream_result"] < TOL, r
