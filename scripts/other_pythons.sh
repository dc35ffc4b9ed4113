#!/usr/bin/env bash
# scripts/other_pythons.sh: kffi on CPython versions beside the one that runs the test suite.
#
#   bash scripts/other_pythons.sh [--wheel] [--torch] [--arch aarch64] [--build-interpreters]
#                                 [VERSION ...] [-- PYTEST ARGS ...]   (default VERSION: 3.12)
#
# A VERSION is 3.X, or 3.Xt for the free-threaded build. For each one with an interpreter here
# (python3.12 on PATH, one of pyenv's, or one scripts/build_cpython.sh built into build/cpython),
# it builds that version's manylinux wheel with scripts/build_wheel.sh --smoke (auditwheel, then a
# fresh venv of that interpreter installs the wheel and calls a kernel built with its kffi-config)
# into build/wheels/py<VERSION>, installs the wheel into a venv of its own (build/py<VERSION>/venv)
# and runs the Python tests there. The venv has NumPy and pytest but neither torch nor JAX, so their
# tests skip: the core, hostile-input, reflection, contract and thread tests run (about 1100
# tests, 3 minutes on 2 cores, after a 5-minute build). A version without an interpreter is
# reported and skipped, not failed: CI runs this where the machine has one. Give pytest arguments
# after -- to run fewer tests.
#
# --wheel: the wheel and its smoke test only, no tests. Either way a table of the versions and
# their results ends the run.
# --torch: each wheel carries kffi.torch's glue for the torch of the python3 that runs this script
# (its headers and C++ libraries serve every Python version), and the smoke test then installs that
# torch release and JAX for the version (from PyPI: a few GB each) and runs the default path with
# no compiler. A version torch publishes no wheel for gets a wheel without the glue.
# --torch-release X.Y.Z (repeatable; implies --torch): the wheels also carry glue for torch X.Y,
# built against that release's headers and C++ libraries from its PyPI wheel. The smoke test
# runs the newest glue's torch.
# --arch aarch64 (with --wheel): cross-compiled wheels, smoke-tested under qemu-user with Debian's
# arm64 CPython of the version (3.11, 3.13, 3.14) or one build_cpython.sh cross-compiles (the
# others; build_wheel.sh --arch says more). With --torch, the glue is built against torch's
# aarch64 wheel of the same releases, which the smoke test imports under qemu with PyPI's aarch64
# JAX (build_wheel.sh --torch).
# --build-interpreters: a version with no interpreter here is built first (build_cpython.sh:
# 3.10 and 3.12 to 3.14, and the free-threaded builds of 3.13 and 3.14).
# SPDX-License-Identifier: Apache-2.0
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
# shellcheck source=scripts/pip_progress.sh
source "$ROOT/scripts/pip_progress.sh"
# shellcheck source=scripts/find_python.sh
source "$ROOT/scripts/find_python.sh"
JOBS="${KFFI_JOBS:-$(nproc)}"

WHEEL=0
TORCH=0
TORCH_RELEASES=()
ARCH="$(uname -m)"
BUILD_INTERPRETERS=0
while [ $# -gt 0 ]; do
  case "$1" in
    --wheel) WHEEL=1 ;;
    --torch) TORCH=1 ;;
    --torch-release)
      TORCH=1
      TORCH_RELEASES+=("${2:?--torch-release needs a torch version, such as 2.11.0}")
      shift
      ;;
    --build-interpreters) BUILD_INTERPRETERS=1 ;;
    --arch)
      ARCH="${2:?--arch needs aarch64}"
      shift
      ;;
    *) break ;;
  esac
  shift
done
ARCH_ARGS=()
DIST_SUFFIX=""
if [ "$ARCH" != "$(uname -m)" ]; then
  # A cross build is smoke-tested under qemu-user; the test suite runs natively only.
  [ "$WHEEL" = 1 ] || { echo "other_pythons: --arch $ARCH needs --wheel" >&2; exit 2; }
  ARCH_ARGS=(--arch "$ARCH")
  DIST_SUFFIX="-$ARCH"
fi
CROSS_TORCH=()
if [ "$TORCH" = 1 ] && [ ${#ARCH_ARGS[@]} -gt 0 ]; then
  # The releases, built against their aarch64 wheels by build_wheel.sh.
  TORCH_RELEASE="${TORCH_RELEASES[0]:-}"
  [ -n "$TORCH_RELEASE" ] ||
    TORCH_RELEASE="$(python3 -c 'import torch; print(torch.__version__.split("+")[0])')" || {
    echo "other_pythons: --torch needs a torch where this runs, or --torch-release" >&2
    exit 2
  }
  for release in "$TORCH_RELEASE" "${TORCH_RELEASES[@]}"; do
    [[ " ${CROSS_TORCH[*]} " == *" $release "* ]] || CROSS_TORCH+=(--torch "$release")
  done
elif [ "$TORCH" = 1 ]; then
  KFFI_TORCH_ROOTS="$(python3 -c 'import os, torch; print(os.path.dirname(torch.__file__))')" || {
    echo "other_pythons: --torch needs a torch where this runs (python3 -c 'import torch')" >&2
    exit 2
  }
  TORCH_RELEASE="$(python3 -c 'import torch; print(torch.__version__.split("+")[0])')"
  # Another release's headers and C++ libraries, from its wheel on PyPI (any Python's: they are
  # the same), unpacked once into build/torch/<release>.
  for release in "${TORCH_RELEASES[@]}"; do
    dest="$ROOT/build/torch/$release"
    if [ ! -f "$dest/torch/version.py" ]; then
      rm -rf "$dest" "$ROOT/build/torch/download"
      python3 -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: \
        --python-version 3.12 --platform manylinux_2_28_x86_64 -d "$ROOT/build/torch/download" \
        "torch==$release"
      python3 - "$ROOT"/build/torch/download/torch-*.whl "$dest" <<'PY'
import sys, zipfile
keep = ("torch/version.py", "torch/lib/libc10.so", "torch/lib/libtorch_cpu.so")
with zipfile.ZipFile(sys.argv[1]) as z:
    z.extractall(sys.argv[2], [n for n in z.namelist() if n in keep or n.startswith("torch/include/")])
PY
      rm -rf "$ROOT/build/torch/download"
    fi
    KFFI_TORCH_ROOTS="$KFFI_TORCH_ROOTS;$dest/torch"
  done
  export KFFI_TORCH_ROOTS
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

status=0
ROWS=()
for v in "${VERSIONS[@]}"; do
  PY="$(kffi_find_python "$v")"
  if [ -z "$PY" ] && [ "$BUILD_INTERPRETERS" = 1 ]; then
    FT_ARG=()
    [ "${v%t}" != "$v" ] && FT_ARG=(--disable-gil)
    PY="$(bash "$ROOT/scripts/build_cpython.sh" "${v%t}" "${FT_ARG[@]}" | tail -1)" || PY=""
  fi
  if [ -z "$PY" ]; then
    echo "other_pythons: no CPython $v here: skipped"
    ROWS+=("| $v | $ARCH | - | - | no interpreter here: skipped |")
    continue
  fi
  VENV="$ROOT/build/py$v/venv"
  version="$("$PY" -c 'import platform, sysconfig
print(platform.python_version() + ("t" if sysconfig.get_config_var("Py_GIL_DISABLED") else ""))')"
  echo "other_pythons: CPython $version ($PY)"
  [ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
  # set -e does not act inside the condition of an if, so each step exits on its own failure.
  if (
    # shellcheck source=/dev/null
    source "$VENV/bin/activate"
    python3 -c "import numpy, pytest, xdist, scikit_build_core" 2>/dev/null ||
      kffi_pip "NumPy, pytest and scikit-build-core" numpy pytest pytest-xdist \
        "scikit-build-core>=0.10" || exit 1
    export CMAKE_BUILD_PARALLEL_LEVEL="$JOBS"
    # Glue for a torch release that has no wheel for this Python would serve nobody and could not
    # be smoke-tested (torch 2.13 has none for 3.13t): such a wheel goes without. pip reads only
    # the index and the wheel's metadata here.
    PLATFORM=()
    [ ${#ARCH_ARGS[@]} = 0 ] ||
      PLATFORM=(--only-binary=:all: --platform "manylinux_2_28_$ARCH" --target "$VENV/dry-run")
    if [ "$TORCH" = 1 ] && ! python3 -m pip install -q --disable-pip-version-check \
      --dry-run --no-deps "${PLATFORM[@]}" "torch==$TORCH_RELEASE" >/dev/null 2>&1; then
      echo "other_pythons: torch $TORCH_RELEASE has no $ARCH wheel for CPython $version: no glue"
      unset KFFI_TORCH_ROOTS
      CROSS_TORCH=()
    fi
    # build_wheel.sh builds with the python3 on PATH: this venv's, in a build folder of its own
    # (build/cp3XX-...), beside the main one: only sources are shared.
    KFFI_WHEEL_DIR="$ROOT/build/wheels/py$v$DIST_SUFFIX" bash "$ROOT/scripts/build_wheel.sh" \
      --smoke "${ARCH_ARGS[@]}" "${CROSS_TORCH[@]}" || exit 1
    [ "$WHEEL" = 1 ] && exit 0
    # The tests run on the wheel itself, as installed from it.
    python3 -m pip install -q --disable-pip-version-check --force-reinstall --no-deps \
      "$ROOT"/build/wheels/py"$v"/kffi-*.whl || exit 1
    cd "$ROOT"
    python3 -m pytest -q -n "$JOBS" -p no:cacheprovider "${TESTS[@]}"
  ); then
    result=passed
  else
    result=FAILED
    status=1
  fi
  # The wheel, and the torch its glue is for (the smoke test ran the default path with it).
  DIST="$ROOT/build/wheels/py$v$DIST_SUFFIX"
  whl=""
  for f in "$DIST"/kffi-*.whl; do
    [ -f "$f" ] && whl="$(basename "$f")"
  done
  glue="-"
  if [ -n "$whl" ]; then
    glue="$(python3 -m zipfile -l "$DIST/$whl" |
      grep -o 'kffi/torch/lib/torch-[0-9.]*/glue.json' | sed 's|.*/torch-\([0-9.]*\)/.*|\1|' |
      tr '\n' ' ' || true)"
    glue="${glue% }"
  fi
  ROWS+=("| $version | $ARCH | ${whl:-none} | ${glue:--} | $result |")
done
echo
echo "| CPython | arch | wheel | torch glue | smoke test$([ "$WHEEL" = 1 ] || echo ", and the tests on it") |"
echo "| --- | --- | --- | --- | --- |"
printf '%s\n' "${ROWS[@]}"
exit $status
