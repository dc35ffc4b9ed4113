#!/usr/bin/env bash
# examples/demo.sh: the main job. Installs kffi, builds the example kernel library with
# kffi-config, and calls it from Python with NumPy and PyTorch tensors.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
bash scripts/install_deps.sh
bash scripts/install_python.sh
OUT="$ROOT/build/demo"
make -s -C examples/kernel_library OUT="$OUT" NVCC= KFFI_CONFIG=kffi-config
python3 examples/python_demo.py "$OUT/libscale_cpu.so"
