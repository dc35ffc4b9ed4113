"""tests/python/core/test_public_types.py: kffi is a typed package, checked by ``mypy --strict``.

The package itself (python/kffi with the extension's stub, _core.pyi) passes with the
configuration of pyproject.toml's [tool.mypy]; a user's script typed with kffi's public classes
passes (kffi ships py.typed), and the types are real: a wrong annotation is flagged. Skipped where
mypy is not installed (CI installs it from requirements-dev.txt).
"""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

USER = """\
from __future__ import annotations

import kffi
import kffi.cpp


def load(path: str) -> kffi.Module:
    mod: kffi.Module = kffi.load_module(path)
    return mod


def first(path: str) -> kffi.Function | None:
    mod = load(path)
    f: kffi.Function | None = mod.get_function("scale")
    return f


def jit() -> kffi.Module:
    return kffi.cpp.load_inline("user_typed", cpp_sources="int one() { return 1; }")


def tensor(value: kffi.Tensor) -> kffi.Tensor:
    return value


LIB: kffi.Module = kffi.system_lib()
VERSION: str = kffi.__version__
"""

WRONG = """\
import kffi

n: int = kffi.load_module("libx.so")
"""


def _mypy_available() -> bool:
    probe = [sys.executable, "-m", "mypy", "--version"]
    return subprocess.run(probe, capture_output=True).returncode == 0


needs_mypy = pytest.mark.skipif(not _mypy_available(), reason="needs mypy (pip install mypy)")

REPO = Path(__file__).resolve().parents[3]


def _mypy(tmp_path, name: str, text: str) -> subprocess.CompletedProcess:
    (tmp_path / name).write_text(text)
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-error-summary", name],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )


@needs_mypy
def test_a_script_annotated_with_kffi_classes_passes_mypy_strict(tmp_path):
    ok = _mypy(tmp_path, "user.py", USER)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    wrong = _mypy(tmp_path, "wrong.py", WRONG)
    assert wrong.returncode == 1, wrong.stdout + wrong.stderr
    # mypy versions differ in quoting the expression's type.
    assert re.search(r'expression has type "?Module"?, variable has type "int"', wrong.stdout)


@needs_mypy
def test_the_package_passes_mypy_strict():
    # pyproject.toml's [tool.mypy] names the files (python/kffi) and sets strict. The cache lives
    # in the build tree (ignored by git): a warm run takes seconds, a cold one under a minute.
    cache = REPO / "build" / "mypy-cache"
    cache.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--cache-dir", str(cache)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert re.search(r"^Success: no issues found in \d+ source files", proc.stdout, re.M), (
        proc.stdout
    )
