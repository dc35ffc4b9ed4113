"""tests/python/kffi_jax/test_jax_shard.py: kffi.jax over 4 virtual CPU devices, in a subprocess.

XLA_FLAGS=--xla_force_host_platform_device_count=4 takes effect only before jax starts, and this
process may have started it already, so jax_shard_cases.py runs in one child pytest with the flag
set; each case there is reported here as its own test (from the child's JUnit XML).
"""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

pytest.importorskip("jax")

HERE = Path(__file__).resolve().parent
CASES = HERE / "jax_shard_cases.py"
TIMEOUT_S = 900


def _case_names() -> list:
    """The test functions of the cases module (parametrized ones appear once)."""
    import ast

    tree = ast.parse(CASES.read_text())
    return [
        n.name for n in tree.body if isinstance(n, ast.FunctionDef) and n.name.startswith("test_")
    ]


@pytest.fixture(scope="module")
def child(tmp_path_factory):
    """{case name: [(outcome, message)]} from one child run."""
    tmp = tmp_path_factory.mktemp("jax_shard")
    report = tmp / "report.xml"
    env = dict(os.environ)
    env["XLA_FLAGS"] = (
        env.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=4"
    ).strip()
    env["JAX_PLATFORMS"] = "cpu"
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        f"--junitxml={report}",
        str(CASES),
    ]
    try:
        proc = subprocess.run(
            cmd, cwd=tmp, env=env, capture_output=True, text=True, timeout=TIMEOUT_S, check=False
        )
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"the child pytest ran past {TIMEOUT_S} s: {(e.stdout or '')[-4000:]}")
    if not report.exists():
        pytest.fail(
            f"the child pytest wrote no report (rc {proc.returncode}):\n{proc.stdout[-8000:]}"
            f"\n{proc.stderr[-4000:]}"
        )
    results: dict = {}
    for case in ET.parse(report).getroot().iter("testcase"):
        name = case.get("name", "").split("[")[0]
        outcome, message = "passed", ""
        for tag in ("failure", "error", "skipped"):
            el = case.find(tag)
            if el is not None:
                outcome = tag
                message = (el.get("message") or "") + "\n" + (el.text or "")
                break
        results.setdefault(name, []).append((outcome, message))
    return results


@pytest.mark.parametrize("name", _case_names())
def test_case(child, name):
    runs = child.get(name)
    assert runs, f"{name} did not run in the child pytest (collected: {sorted(child)})"
    for outcome, message in runs:
        if outcome == "skipped":
            pytest.skip(message.strip().splitlines()[0] if message.strip() else "skipped")
        assert outcome == "passed", message[-8000:]
