"""tests/python/test_public_types.py: a user's script typed with kffi's public classes passes
``mypy --strict`` (kffi ships py.typed), and the types are real: a wrong annotation is flagged.
Skipped where mypy is not installed."""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import re
import subprocess
import sys

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
