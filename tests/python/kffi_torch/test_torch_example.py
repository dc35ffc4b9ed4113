"""tests/python/kffi_torch/test_torch_example.py: examples/torch/torch_demo.py runs as written."""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[3]


def test_example_runs():
    proc = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "torch" / "torch_demo.py")],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert "demo::add_bias (Tensor x, Tensor bias, Tensor(a!) out) -> ()" in out
    assert "compiled [[20.0, 44.0], [26.0, 40.0]]" in out
    assert "compiled, 5 rows, same graph: ok" in out
    assert "d/dv sum(square(v)) [1.0, -2.0, 6.0]" in out
    assert "gradcheck: ok" in out
    assert "opcheck: test_schema SUCCESS, test_autograd_registration SUCCESS" in out
