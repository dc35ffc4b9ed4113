#!/usr/bin/env bash
# scripts/free_threaded.sh: the Python tests on a free-threaded CPython (3.13t or 3.14t, no GIL).
#
#   bash scripts/free_threaded.sh [3.X] [pytest args...]     (default: 3.13, tests/python)
#
# No free-threaded interpreter comes from Debian or PyPI, and uv's managed Pythons are downloaded
# from GitHub, so scripts/build_cpython.sh builds one (3.13t or 3.14t) from the CPython source a
# distribution ships, with --disable-gil, once, into build/cpython. Then, in a venv of it
# ($KFFI_FT_HOME, default build/free_threaded/<3.X>t), scripts/build_wheel.sh --smoke builds and
# smoke-tests the cp3Xt wheel (into its dist folder), the venv installs that wheel, and pytest
# runs there: torch and JAX are not installed in it, so their tests skip. On 2 cores: about 8
# minutes for the interpreter, once, then about 10 for the wheel and the tests.
# SPDX-License-Identifier: Apache-2.0
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
VERSION=3.13
if [[ "${1:-}" =~ ^3\.[0-9]+$ ]]; then
  VERSION="$1"
  shift
fi
HOME_DIR="${KFFI_FT_HOME:-$ROOT/build/free_threaded/${VERSION}t}"
VENV="$HOME_DIR/venv"
mkdir -p "$HOME_DIR"
PY="$(bash "$ROOT/scripts/build_cpython.sh" "$VERSION" --disable-gil | tail -1)"
"$PY" -c 'import sysconfig, sys; assert sysconfig.get_config_var("Py_GIL_DISABLED"), sys.version'

[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
"$VENV/bin/python" -m pip install -q numpy pytest "scikit-build-core>=0.10"
# build_wheel.sh builds with the python3 on PATH: this venv's.
(
  # shellcheck source=/dev/null
  source "$VENV/bin/activate"
  KFFI_WHEEL_DIR="$HOME_DIR/dist" bash "$ROOT/scripts/build_wheel.sh" --smoke
)
"$VENV/bin/python" -m pip install -q --force-reinstall --no-deps "$HOME_DIR"/dist/kffi-*.whl
cd "$ROOT"
[ $# -eq 0 ] && set -- tests/python
exec "$VENV/bin/python" -m pytest -q -p no:cacheprovider "$@"
