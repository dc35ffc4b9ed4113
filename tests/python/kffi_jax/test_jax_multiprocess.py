"""tests/python/kffi_jax/test_jax_multiprocess.py: kffi kernels in a multi-process JAX job on one
machine, standing in for hosts: 2 processes x 2 CPU devices joined by jax.distributed, with gloo
collectives (jax_multiprocess_worker.py is one process). A job that runs past its limit is killed
and fails the test."""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest
from ranks import free_port, run_ranks

jax = pytest.importorskip("jax")

WORKER = Path(__file__).resolve().parent / "jax_multiprocess_worker.py"
LIMIT_S = 420


def run_job(tmp_path: Path, nproc: int = 2) -> list[dict]:
    out = tmp_path / "reports"
    env = {**os.environ, "KFFI_CACHE_DIR": str(tmp_path / "cache"), "JAX_PLATFORMS": "cpu"}
    env.pop("XLA_FLAGS", None)
    port = free_port()
    cmds = [
        [sys.executable, str(WORKER), str(i), str(nproc), str(port), str(out)] for i in range(nproc)
    ]
    names = [f"process{i}" for i in range(nproc)]
    # Not all_ok: test_every_process_ran asserts each process's report.
    return run_ranks(
        cmds, out, names, limit_s=LIMIT_S, what="the multi-process job", env=env, all_ok=False
    )


@pytest.fixture(scope="module")
def reports(tmp_path_factory) -> list[dict]:
    return run_job(tmp_path_factory.mktemp("job"))


def test_every_process_ran(reports):
    for r in reports:
        assert r["ok"], f"process {r['process']} failed:\n{r.get('error')}"
        assert r["devices"] == 4 and r["local_devices"] == 2


def test_row_parallel_kernel_runs_on_each_process_shard(reports):
    for r in reports:
        # The same result as one process on the whole input, bit for bit.
        assert r["sharded_equals_one_process"], r
        assert r["sharded_error"] < 1e-6
        # No collective: each device's kernel got its own 4 of the 16 rows.
        assert r["sharded_collectives"] == []
        assert r["local_shard_shapes"] == [[4, 6], [4, 6]]
        assert r["output_sharding_kept"]


def test_kernel_without_parallel_symbols_still_right(reports):
    for r in reports:
        assert r["plain_error"] == 0.0
        assert "all-gather" in r["plain_collectives"]  # XLA gathers the rows first


def test_error_reaches_the_process_whose_kernel_raised(reports):
    first, last = reports
    # Row 13 of 16 lives on the last process's second device (rows 12-15): its kernel refuses it,
    # at its local row 1.
    assert first["bad_input"] == "ran"
    assert "INVALID_ARGUMENT: ValueError: row 1 of 4 sums to -6" in last["bad_input"]
    assert re.search(r"\(in kffi\.jax target `kffi\.v1\.[0-9a-f]{16}\.rownorm\.", last["bad_input"])
    for r in reports:
        assert r["after_error_ok"]
