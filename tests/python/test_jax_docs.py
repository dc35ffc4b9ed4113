"""tests/python/test_jax_docs.py: the code of docs/jax.md and examples/jax/ runs as written.

docs/jax.md's ```python blocks run in order in one namespace; ```python contract blocks need
contract metadata with `mut` outputs (kffi.compile's structured contract) and run where it exists.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("jax")

import kffi

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "jax.md"
BLOCK = re.compile(r"^```python( contract)?\n(.*?)^```", re.DOTALL | re.MULTILINE)


def _blocks():
    return [(bool(m.group(1)), m.group(2)) for m in BLOCK.finditer(DOC.read_text())]


def _compile_has_mut() -> bool:
    """Whether kffi.compile takes mut outputs and its metadata says so ('mutates')."""
    try:
        n = kffi.sym_int()
        f = kffi.compile(
            "void probe_mut(kffi::TensorView x, kffi::TensorView y) {}",
            "probe_mut",
            kffi.fake_tensor("float32", (n,)),
            kffi.fake_tensor("float32", (n,), mut=True),
            options={"quiet": True},
        )
    except TypeError:
        return False
    return "mutates" in (getattr(f, "_metadata", None) or {})


def test_doc_has_code():
    blocks = _blocks()
    assert len(blocks) >= 5
    assert sum(contract for contract, _ in blocks) >= 1


def test_doc_code_blocks_run():
    namespace = {"__name__": "jax_docs"}
    run_contract = _compile_has_mut()
    ran = 0
    for i, (contract, code) in enumerate(_blocks()):
        if contract and not run_contract:
            continue
        exec(compile(code, f"{DOC}:block{i}", "exec"), namespace)  # noqa: S102 (the doc's code)
        ran += 1
    assert ran >= 5


def test_doc_contract_blocks_run_with_structured_contracts():
    if not _compile_has_mut():
        pytest.skip("kffi.compile has no mut outputs in its metadata yet (contracts helper)")
    namespace = {"__name__": "jax_docs"}
    for i, (_, code) in enumerate(_blocks()):
        exec(compile(code, f"{DOC}:block{i}", "exec"), namespace)  # noqa: S102


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
