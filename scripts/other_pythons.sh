#!/usr/bin/env bash
# scripts/other_pythons.sh: kffi on CPython versions beside the one that runs the test suite.
#
#   bash scripts/other_pythons.sh [--wheel] [VERSION ...] [-- PYTEST ARGS ...]  (default: 3.12)
#
# For each VERSION with an interpreter here (python3.12 on PATH, or one of pyenv's), it builds
# that version's manylinux wheel with scripts/build_wheel.sh --smoke (auditwheel, then a fresh venv
# of that interpreter installs the wheel and calls a kernel built with its kffi-config) into
# build/wheels/py<VERSION>, installs the wheel into a venv of its own (build/py<VERSION>/venv) and
# runs the Python tests there. The venv has NumPy and pytest but neither torch nor JAX, so their
# tests skip: the core, hostile-input, reflection, contract and thread tests run (about 1100
# tests, 3 minutes on 2 cores, after a 5-minute build). A version without an interpreter is
# reported and skipped, not failed: CI runs this where the machine has one. Give pytest arguments
# after -- to run fewer tests.
#
# --wheel: the wheel and its smoke test only, no tests. Either way a table of the versions and
# their results ends the run.
# SPDX-License-Identifier: Apache-2.0
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
# shellcheck source=scripts/pip_progress.sh
source "$ROOT/scripts/pip_progress.sh"
JOBS="${KFFI_JOBS:-$(nproc)}"

WHEEL=0
if [ "${1:-}" = "--wheel" ]; then
  WHEEL=1
  shift
fi
VERSIONS=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do
  VERSIONS+=("$1")
  shift
done
[ "${1:-}" = "--" ] && shift
[ ${#VERSIONS[@]} -gt 0 ] || VERSIONS=(3.12)
TESTS=("$@")
[ ${#TESTS[@]} -gt 0 ] || TESTS=(tests/python)

# An interpreter of version $1 that runs: on PATH (a pyenv shim runs only for its active
# versions), else one of pyenv's installed versions.
find_python() {
  local p root
  root="$(pyenv root 2>/dev/null || echo "$HOME/.pyenv")"
  for p in "$(command -v "python$1" || true)" "$root"/versions/"$1".*/bin/"python$1"; do
    if [ -n "$p" ] && [ -x "$p" ] && "$p" -c 'import sys' >/dev/null 2>&1; then
      echo "$p"
      return
    fi
  done
}

status=0
ROWS=()
for v in "${VERSIONS[@]}"; do
  PY="$(find_python "$v")"
  if [ -z "$PY" ]; then
    echo "other_pythons: no CPython $v here: skipped"
    ROWS+=("| $v | $(uname -m) | no interpreter here: skipped |")
    continue
  fi
  VENV="$ROOT/build/py$v/venv"
  version="$("$PY" -c 'import platform; print(platform.python_version())')"
  echo "other_pythons: CPython $version ($PY)"
  [ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
  if (
    # shellcheck source=/dev/null
    source "$VENV/bin/activate"
    python3 -c "import numpy, pytest, xdist, scikit_build_core" 2>/dev/null ||
      kffi_pip "NumPy, pytest and scikit-build-core" numpy pytest pytest-xdist \
        "scikit-build-core>=0.10"
    export CMAKE_BUILD_PARALLEL_LEVEL="$JOBS"
    # build_wheel.sh builds with the python3 on PATH: this venv's, in a build folder of its own
    # (build/cp3XX-...), beside the main one: only sources are shared.
    KFFI_WHEEL_DIR="$ROOT/build/wheels/py$v" bash "$ROOT/scripts/build_wheel.sh" --smoke
    [ "$WHEEL" = 1 ] && exit 0
    # The tests run on the wheel itself, as installed from it.
    python3 -m pip install -q --disable-pip-version-check --force-reinstall --no-deps \
      "$ROOT"/build/wheels/py"$v"/kffi-*.whl
    cd "$ROOT"
    python3 -m pytest -q -n "$JOBS" -p no:cacheprovider "${TESTS[@]}"
  ); then
    ROWS+=("| $version | $(uname -m) | passed |")
  else
    ROWS+=("| $version | $(uname -m) | FAILED |")
    status=1
  fi
done
echo
echo "| CPython | arch | wheel, smoke-tested$([ "$WHEEL" = 1 ] || echo ", and the tests on it") |"
echo "| --- | --- | --- |"
printf '%s\n' "${ROWS[@]}"
exit $status
