"""tests/python/house/test_other_pythons.py: scripts/other_pythons.sh reports a version whose wheel
fails to build as FAILED, and exits non-zero.

Its per-version steps run inside the condition of an `if`, where bash's `set -e` does not act, so
a failed build once went on to the `exit 0` of --wheel and was reported as passed. The real
matrix takes an hour (docs/packaging.md); here an interpreter that answers the script's questions
but fails at everything else stands in for a version, in a copy of the scripts whose repository
root is a temporary folder, so nothing of the checkout's build/ is touched.
"""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]

# Answers `-c 'import sys'` and the other -c checks with success, prints a version for the
# version query, makes a venv whose python3 is itself, and fails everything else (pip above all).
FAKE_PYTHON = r"""#!/bin/sh
case "$1" in
  -c)
    case "$2" in
      *python_version*) echo 3.99.0 ;;
    esac
    exit 0 ;;
  -m)
    if [ "$2" = venv ]; then
      mkdir -p "$3/bin"
      cp "$0" "$3/bin/python"
      cp "$0" "$3/bin/python3"
      printf 'PATH="%s/bin:$PATH"\n' "$3" >"$3/bin/activate"
      exit 0
    fi ;;
esac
echo "fake python: refusing $*" >&2
exit 3
"""


def test_a_failed_wheel_build_is_reported_failed(tmp_path):
    scripts = tmp_path / "repo" / "scripts"
    scripts.mkdir(parents=True)
    for name in ("other_pythons.sh", "build_wheel.sh", "pip_progress.sh", "find_python.sh"):
        shutil.copy(ROOT / "scripts" / name, scripts / name)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "python3.99"
    fake.write_text(FAKE_PYTHON)
    fake.chmod(0o755)
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    env.pop("KFFI_TORCH_ROOTS", None)
    run = subprocess.run(
        ["bash", str(scripts / "other_pythons.sh"), "--wheel", "3.99"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 1, run.stdout + run.stderr
    rows = [line for line in run.stdout.splitlines() if line.startswith("| 3.99")]
    assert len(rows) == 1, run.stdout
    assert rows[0].endswith("| FAILED |"), rows
    # It got as far as the wheel's build, which the fake interpreter refused.
    assert "fake python: refusing" in run.stderr + run.stdout
