"""tests/python/house/test_other_pythons.py: the wheel scripts' own mistakes, caught without a build.

- scripts/other_pythons.sh reports a version whose wheel fails to build as FAILED, and exits
  non-zero. Its per-version steps run inside the condition of an `if`, where bash's `set -e` does
  not act, so a failed build once went on to the `exit 0` of --wheel and was reported as passed.
- scripts/build_wheel.sh tells the build which torch glue to build every time, even when that is
  none: the build folder is kept between builds, and its CMake cache kept an earlier build's
  KFFI_BUILD_TORCH_GLUE=OFF, so a later build given an aarch64 torch silently built no glue.

The real matrix takes an hour (docs/packaging.md); here an interpreter that answers the scripts'
questions but fails at everything else stands in for a version (and writes down what pip was
asked), in a copy of the scripts whose repository root is a temporary folder, so nothing of the
checkout's build/ is touched.
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
[ -z "$FAKE_PYTHON_LOG" ] || printf '%s\n' "$@" >>"$FAKE_PYTHON_LOG"
echo "fake python: refusing $*" >&2
exit 3
"""


def fake_repo(tmp_path):
    """A copy of the wheel scripts in a temporary repository, and PATH with the fake python3.99
    (also as python3) and auditwheel and patchelf that do nothing, ahead of the machine's."""
    scripts = tmp_path / "repo" / "scripts"
    scripts.mkdir(parents=True)
    for name in ("other_pythons.sh", "build_wheel.sh", "pip_progress.sh", "find_python.sh"):
        shutil.copy(ROOT / "scripts" / name, scripts / name)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in [
        ("python3.99", FAKE_PYTHON),
        ("python3", FAKE_PYTHON),
        ("auditwheel", "#!/bin/sh\nexit 0\n"),
        ("patchelf", "#!/bin/sh\nexit 0\n"),
    ]:
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    env.pop("KFFI_TORCH_ROOTS", None)
    return scripts, env


def run_script(scripts, env, name, *args):
    """Runs one of the copied scripts with env; its exit status and output."""
    return subprocess.run(
        ["bash", str(scripts / name), *args], env=env, capture_output=True, text=True, timeout=120
    )


def test_a_failed_wheel_build_is_reported_failed(tmp_path):
    scripts, env = fake_repo(tmp_path)
    run = run_script(scripts, env, "other_pythons.sh", "--wheel", "3.99")
    assert run.returncode == 1, run.stdout + run.stderr
    rows = [line for line in run.stdout.splitlines() if line.startswith("| 3.99")]
    assert len(rows) == 1, run.stdout
    assert rows[0].endswith("| FAILED |"), rows
    # It got as far as the wheel's build, which the fake interpreter refused.
    assert "fake python: refusing" in run.stderr + run.stdout


def wheel_build_args(tmp_path, extra_env):
    """What build_wheel.sh asked `pip wheel` for (one argument per line), with extra_env set."""
    scripts, env = fake_repo(tmp_path)
    log = tmp_path / "pip.log"
    env.update(extra_env, FAKE_PYTHON_LOG=str(log))
    run = run_script(scripts, env, "build_wheel.sh")
    # The fake interpreter refused the build itself, after it was asked.
    assert run.returncode == 3, run.stdout + run.stderr
    args = log.read_text().splitlines()
    assert args[:2] == ["-m", "pip"] and "wheel" in args, args
    return args


def test_the_wheel_build_names_its_torch_glue_every_time(tmp_path):
    # No torch named: the glue is for the building Python's torch (ON, no roots), said out loud
    # so that a kept build folder forgets an earlier build's roots or OFF.
    args = wheel_build_args(tmp_path / "plain", {})
    assert "--config-settings=cmake.define.KFFI_BUILD_TORCH_GLUE=ON" in args, args
    assert "--config-settings=cmake.define.KFFI_TORCH_ROOTS=" in args, args
    # Roots named: exactly those.
    args = wheel_build_args(tmp_path / "roots", {"KFFI_TORCH_ROOTS": "/a/torch;/b/torch"})
    assert "--config-settings=cmake.define.KFFI_TORCH_ROOTS=/a/torch;/b/torch" in args, args
    assert "--config-settings=cmake.define.KFFI_BUILD_TORCH_GLUE=ON" in args, args


def test_torch_releases_are_for_cross_builds_only(tmp_path):
    scripts, env = fake_repo(tmp_path)
    run = run_script(scripts, env, "build_wheel.sh", "--torch", "2.13.0")
    assert run.returncode == 2, run.stdout + run.stderr
    assert "--torch is for --arch aarch64" in run.stderr
