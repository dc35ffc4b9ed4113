#!/usr/bin/env bash
# scripts/pip_progress.sh: pip installs that show progress (sourced by scripts/install_python.sh
# and examples/demo.sh), so that a first run is not minutes of silence.
#   kffi_pip LABEL ARGS...       one line naming what is installed and where, pip's own download
#                                lines, then the time it took
#   kffi_pip_build LABEL ARGS... the same for a package that compiles (kffi itself): the build's
#                                steps, "[12/80] Building CXX object ...", as they happen
# SPDX-License-Identifier: Apache-2.0

_kffi_pip_run() {
  local label="$1" filter="$2"
  shift 2
  local t0=$SECONDS
  echo "pip: installing $label into $(python3 -c 'import sys; print(sys.prefix)') ..."
  # awk passes the lines on as they come (a progress line is worth nothing late) and always
  # succeeds; pip's own exit status decides.
  python3 -m pip install --disable-pip-version-check "$@" 2>&1 | awk "$filter { print; fflush() }"
  local rc=${PIPESTATUS[0]}
  if [ "$rc" -eq 0 ]; then
    echo "pip: $label installed ($((SECONDS - t0)) s)"
  else
    echo "pip: installing $label failed (exit status $rc)"
  fi
  return "$rc"
}

kffi_pip() {
  local label="$1"
  shift
  _kffi_pip_run "$label" '!/^(Requirement already satisfied|WARNING: Location|  [a-z])/' "$@"
}

kffi_pip_build() {
  local label="$1"
  shift
  # -v: the build backend's output, of which the build tool's numbered steps and errors are kept.
  _kffi_pip_run "$label" '/^ *\[[0-9]+\/[0-9]+\]|error:|^ERROR|^Successfully/' -v "$@"
}
