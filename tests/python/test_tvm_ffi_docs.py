"""tests/python/test_tvm_ffi_docs.py: docs/tvm_ffi.md's code runs, and examples/tvm_ffi runs.

The page's ```cpp block must be examples/tvm_ffi/scale_tvm.cc verbatim; its ```bash block builds
that file; its ```python blocks then run in order, in one fresh interpreter, in a folder holding
what the bash block built. A block after `<!-- test: cute -->` runs only where
nvidia-cutlass-dsl is installed, one after `<!-- test: gpu -->` only where CUDA is available
(and the CuTe block ran).
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest
import tvm_libs

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "tvm_ffi.md"
EXAMPLE = REPO / "examples" / "tvm_ffi"

pytestmark = pytest.mark.skipif(
    tvm_libs.tvm_ffi_dir() is None, reason="apache-tvm-ffi is not installed"
)


def blocks():
    """[(language, marker or None, code)] of the page's fenced blocks, in order."""
    pattern = re.compile(r"(?:<!-- test: (\w+) -->\n)?```(\w+)\n(.*?)```", re.DOTALL)
    return [(m.group(2), m.group(1), m.group(3)) for m in pattern.finditer(DOC.read_text())]


def cuda_available() -> bool:
    code = "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"
    return (
        subprocess.run([sys.executable, "-c", code], check=False, capture_output=True).returncode
        == 0
    )


def test_cpp_block_is_the_example_source():
    cpp = [code for lang, _, code in blocks() if lang == "cpp"]
    assert cpp == [(EXAMPLE / "scale_tvm.cc").read_text()]


def test_page_runs(tmp_path):
    (tmp_path / "scale_tvm.cc").write_text((EXAMPLE / "scale_tvm.cc").read_text())
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "cute_dsl").symlink_to(REPO / "tests" / "cute_dsl")
    for lang, _, code in blocks():
        if lang == "bash":
            subprocess.run(["bash", "-euo", "pipefail", "-c", code], cwd=tmp_path, check=True)
    have_cute = importlib.util.find_spec("cutlass") is not None
    have_gpu = have_cute and cuda_available()
    script, ran = [], []
    for lang, marker, code in blocks():
        if lang != "python":
            continue
        if (marker == "cute" and not have_cute) or (marker == "gpu" and not have_gpu):
            continue
        script.append(code)
        ran.append(marker or "cpu")
    proc = subprocess.run(
        [sys.executable, "-c", "\n".join(script)],
        cwd=tmp_path,
        check=False,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, f"blocks {ran}:\n{proc.stdout}\n{proc.stderr}"
    assert "scale(arg0: Tensor, arg1: Tensor, arg2: float) -> None" in proc.stdout
    assert "y = x * factor (float32, CPU)." in proc.stdout


def test_example_runs(tmp_path):
    proc = subprocess.run(
        [sys.executable, str(EXAMPLE / "run.py"), str(tmp_path)],
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "scale: [0.0, 2.5, 5.0, 7.5, 10.0]"
    assert lines[1] == "signature: scale(arg0: Tensor, arg1: Tensor, arg2: float) -> None"
    assert lines[2].startswith("TypeError: ") and "x must be float32, got float64" in lines[2]
    assert lines[3] == "apache-tvm-ffi loaded: False"
