#!/usr/bin/env bash
# examples/demo.sh: the demo. Installs what it needs (g++ and make from apt when missing; NumPy,
# the build tools and kffi with pip into the active Python environment: use a venv), builds the
# example kernel library with kffi-config, and calls it from Python: results, contract errors and
# call overhead. PyTorch is not installed here: the demo calls the kernel with torch tensors too
# when torch is already installed.
# SPDX-License-Identifier: Apache-2.0
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
phase() { printf '\n== demo: %s\n' "$*"; }
# shellcheck disable=SC1091  # checked on its own (scripts/check_format.sh checks every script)
source "$ROOT/scripts/pip_progress.sh"  # kffi_pip, kffi_pip_build: installs that show progress

phase "compiler (apt-get, only when g++ or make is missing)"
missing=()
command -v g++ >/dev/null 2>&1 || missing+=(g++)
command -v make >/dev/null 2>&1 || missing+=(make)
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi
echo "g++ $(g++ -dumpfullversion), $(make --version | head -1)"

phase "Python packages (pip: numpy, the build tools; in $(python3 -c 'import sys; print(sys.prefix)'))"
python3 -c "import numpy" 2>/dev/null || kffi_pip NumPy numpy
# No torch install: PyPI's torch is the CUDA build (GBs of NVIDIA packages); the demo uses torch
# only when it is already installed.
if TORCH="$(python3 -c 'import torch; print(torch.__version__)' 2>/dev/null)"; then
  echo "torch $TORCH: the demo calls the kernel with torch tensors too"
else
  echo "torch not installed: the demo uses NumPy only"
fi
python3 -c "import scikit_build_core, cmake, ninja" 2>/dev/null ||
  kffi_pip "the build tools" "scikit-build-core>=0.10" cmake ninja

phase "kffi (pip install .: libkffi, the Python extension, headers and kffi-config)"
kffi_pip_build "kffi (compiles libkffi and its extension: a few minutes)" --no-build-isolation "$ROOT"
echo "kffi $(python3 -c 'import kffi; print(kffi.__version__)') at $(kffi-config --prefix)"

phase "the example kernel library (examples/kernel_library, built with kffi-config)"
OUT="$ROOT/build/demo"
make -s -C examples/kernel_library OUT="$OUT" NVCC= KFFI_CONFIG=kffi-config
ls -l "$OUT"/libscale_cpu.so

phase "calling it from Python (examples/python_demo.py)"
python3 examples/python_demo.py "$OUT/libscale_cpu.so"
