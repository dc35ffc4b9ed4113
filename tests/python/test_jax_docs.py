"""tests/python/test_jax_docs.py: the code of docs/jax.md and examples/jax/ runs as written.

docs/jax.md's ```python blocks (```python contract ones included) run in order in one namespace.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("jax")


ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "jax.md"
BLOCK = re.compile(r"^```python( contract)?\n(.*?)^```", re.DOTALL | re.MULTILINE)


def _blocks():
    return [(bool(m.group(1)), m.group(2)) for m in BLOCK.finditer(DOC.read_text())]


def test_doc_has_code():
    blocks = _blocks()
    assert len(blocks) >= 5
    assert sum(contract for contract, _ in blocks) >= 1


def test_doc_code_blocks_run():
    namespace = {"__name__": "jax_docs"}
    blocks = _blocks()
    for i, (_, code) in enumerate(blocks):
        exec(compile(code, f"{DOC}:block{i}", "exec"), namespace)  # noqa: S102 (the doc's code)
    assert len(blocks) >= 5


def test_example_runs():
    proc = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "jax" / "jax_demo.py")],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "d/dx sum(square(x))   [-4. -2.  0.  2.  4.]" in proc.stdout
    assert proc.stdout.rstrip().endswith("ok")
