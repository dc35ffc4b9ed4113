"""tests/python/support/ranks.py: the two sides of a multi-process test, for kffi_torch's DDP, FSDP
and DTensor workers and kffi_jax's multi-process job.

A test runs the job with run_ranks: the worker processes start in sessions of their own, under one
time limit, and each rank's JSON report is read back. A rank writes its report with report_rank,
whatever happens to it, so a failure in any rank comes back as that rank's traceback.
"""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path

SUPPORT = Path(__file__).resolve().parent


def free_port() -> int:
    """A TCP port of 127.0.0.1 that was free a moment ago: a job's rendezvous."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def report_rank(path, body: Callable[[dict], None], cleanup=None, **first) -> None:
    """One rank. body(report) fills the report, which starts as {**first, "ok": False}: "ok"
    becomes true when body returns, and "error" holds the traceback when it raises (anything).
    The report is written to path either way, then cleanup() runs; a cleanup failure is printed,
    the report having said what failed. A rank whose report is not ok exits with status 1."""
    report = {**first, "ok": False}
    try:
        body(report)
        report["ok"] = True
    except BaseException:
        report["error"] = traceback.format_exc()
    finally:
        Path(path).write_text(json.dumps(report))
        if cleanup is not None:
            try:
                cleanup()
            except Exception as e:
                print(f"{Path(path).stem}: {cleanup.__name__}: {e}", file=sys.stderr)
    if not report["ok"]:
        sys.exit(1)


def _tail(logs: list[Path], chars: int) -> str:
    text = "\n".join(p.read_text(errors="replace") for p in logs if p.exists())
    return text[-chars:]


def run_ranks(commands, out: Path, names, *, limit_s, what, env=None, all_ok=True) -> list:
    """Runs a job's processes (one per command, support/ on their PYTHONPATH), all under one limit
    of limit_s seconds: past it every process still running is killed with its session (the ranks
    it spawned too) and the test fails, so a hung collective fails the test, not the suite.
    Returns the reports out/<name>.json, each asserted to exist; with all_ok, each asserted ok
    and every process asserted to have exited with status 0."""
    import pytest

    out.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ if env is None else env)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(SUPPORT), env.get("PYTHONPATH")]))
    logs = [out / f"job{i}.log" for i in range(len(commands))]
    procs = []
    for cmd, log in zip(commands, logs):
        with open(log, "w") as f:
            popen = subprocess.Popen(
                cmd, stdout=f, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )
            procs.append(popen)
    deadline = time.monotonic() + limit_s
    try:
        for p in procs:
            try:
                p.wait(timeout=max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pytest.fail(f"{what} ran past {limit_s} s:\n{_tail(logs, 6000)}")
    finally:
        for p in procs:  # a hang, or one process failed and left the others waiting
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
    codes = [p.returncode for p in procs]
    reports = []
    for name in names:
        path = out / f"{name}.json"
        assert path.exists(), f"{name} wrote no report (exit {codes}):\n{_tail(logs, 8000)}"
        reports.append(json.loads(path.read_text()))
    if all_ok:
        for name, r in zip(names, reports):
            assert r["ok"], f"{name} failed:\n{r.get('error')}\n{_tail(logs, 4000)}"
        assert codes == [0] * len(procs), f"exit {codes}:\n{_tail(logs, 8000)}"
    return reports
