#!/usr/bin/env bash
# scripts/find_python.sh: sourced by other_pythons.sh and build_cpython.sh; finds an interpreter.
#   kffi_find_python VERSION   prints the path of a CPython VERSION (3.X, or 3.Xt free-threaded)
#                              that runs: on PATH (a pyenv shim runs only for its active
#                              versions), else one of pyenv's installed versions, else the one
#                              scripts/build_cpython.sh built into build/cpython; nothing if none
# SPDX-License-Identifier: Apache-2.0

kffi_find_python() {
  local p pyenv_root
  pyenv_root="$(pyenv root 2>/dev/null || echo "$HOME/.pyenv")"
  for p in "$(command -v "python$1" || true)" "$pyenv_root"/versions/"$1".*/bin/"python$1" \
    "$ROOT/build/cpython/$1/bin/python$1"; do
    if [ -n "$p" ] && [ -x "$p" ] && "$p" -c 'import sys' >/dev/null 2>&1; then
      echo "$p"
      return
    fi
  done
}
