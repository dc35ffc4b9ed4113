"""tests/python/kffi_jax/test_jax_multiprocess.py: kffi kernels in a multi-process JAX job on one
machine, standing in for hosts: 2 processes x 2 CPU devices joined by jax.distributed, with gloo
collectives (jax_multiprocess_worker.py is one process). A job that runs past its limit is killed
and fails the test."""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

jax = pytest.importorskip("jax")

WORKER = Path(__file__).resolve().parent / "jax_multiprocess_worker.py"
LIMIT_S = 420


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_job(tmp_path: Path, nproc: int = 2) -> list[dict]:
    out = tmp_path / "reports"
    out.mkdir()
    env = {**os.environ, "KFFI_CACHE_DIR": str(tmp_path / "cache"), "JAX_PLATFORMS": "cpu"}
    env.pop("XLA_FLAGS", None)
    port = free_port()
    procs = [
        subprocess.Popen(
            [sys.executable, str(WORKER), str(i), str(nproc), str(port), str(out)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
        )
        for i in range(nproc)
    ]
    deadline = time.monotonic() + LIMIT_S
    logs = []
    try:
        for p in procs:
            try:
                logs.append(p.communicate(timeout=max(1.0, deadline - time.monotonic()))[0])
            except subprocess.TimeoutExpired:
                pytest.fail(f"the multi-process job ran past {LIMIT_S} s")
    finally:
        for p in procs:  # a hang, or one process failed and left the other waiting
            if p.poll() is None:
                p.kill()
                p.wait()
    reports = []
    for i in range(nproc):
        path = out / f"process{i}.json"
        assert path.exists(), f"process {i} wrote no report:\n" + "\n".join(logs)[-6000:]
        reports.append(json.loads(path.read_text()))
    return reports


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
