#!/usr/bin/env bash
# scripts/free_threaded.sh: the Python tests on a free-threaded CPython (3.13t, no GIL).
#
#   bash scripts/free_threaded.sh [pytest args...]     (default: tests/python)
#
# No free-threaded interpreter comes from Debian bookworm or PyPI, and uv's managed Pythons are
# downloaded from GitHub, so this builds one from the CPython source Debian ships (trixie's
# python3.13 source package, checked against the SHA-256 its Sources index gives) with
# --disable-gil, once, into $KFFI_FT_HOME (default build/free_threaded). Then, in a venv of it,
# scripts/build_wheel.sh --smoke builds and smoke-tests the cp313t wheel (into
# $KFFI_FT_HOME/dist), the venv installs that wheel, and pytest runs there: torch and JAX have no
# cp313t wheels, so their tests skip. Takes about 15 minutes on 2 cores the first time (the
# interpreter), then about 10.
# SPDX-License-Identifier: Apache-2.0
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
HOME_DIR="${KFFI_FT_HOME:-$ROOT/build/free_threaded}"
PY="$HOME_DIR/py313t/bin/python3.13t"
VENV="$HOME_DIR/venv"
MIRROR="${KFFI_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
JOBS="${KFFI_JOBS:-$(nproc)}"
mkdir -p "$HOME_DIR"

if [ ! -x "$PY" ]; then
  cd "$HOME_DIR"
  # The newest python3.13 source in trixie: its orig tarball's name and SHA-256 from the index.
  curl -fsSL "$MIRROR/dists/trixie/main/source/Sources.xz" | xz -dc >Sources
  read -r sha name < <(awk '/^Package: python3.13$/ {p=1} p && /^Checksums-Sha256:/ {c=1; next}
    p && c && /orig\.tar\.xz$/ {print $1, $3; exit} /^$/ {p=0; c=0}' Sources)
  [ -n "${name:-}" ] || { echo "no python3.13 source in trixie's index" >&2; exit 1; }
  curl -fsSL -o "$name" "$MIRROR/pool/main/p/python3.13/$name"
  echo "$sha  $name" | sha256sum -c -
  rm -rf src && mkdir src && tar xf "$name" -C src --strip-components=1
  (cd src && ./configure --disable-gil --prefix="$HOME_DIR/py313t" >configure.log 2>&1 &&
    make -j"$JOBS" >make.log 2>&1 && make install >install.log 2>&1) ||
    { tail -30 src/*.log >&2; exit 1; }
fi
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
