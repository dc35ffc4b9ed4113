#!/usr/bin/env bash
# scripts/gpu_check.sh: the GPU run (CUDA tests, GPU Python tests, GPU benchmark) on a machine
# with an NVIDIA GPU and no package index: everything is built from this tree.
#   OUT=<dir for logs and JSON> bash scripts/gpu_check.sh
# SPDX-License-Identifier: Apache-2.0
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
OUT="${OUT:-$ROOT/build/gpu}"
mkdir -p "$OUT"
cd "$ROOT" || exit 1
PY=python3
nvidia-smi -L | tee "$OUT/gpu.txt"
$PY -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name(0))" | tee -a "$OUT/gpu.txt"

echo "== C++ build with CUDA, ctest ==" | tee "$OUT/ctest.log"
{
  cmake -S . -B build/gpu -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CUDA_ARCHITECTURES=90
  cmake --build build/gpu -j 16
  ctest --test-dir build/gpu -j 8 --output-on-failure
} >>"$OUT/ctest.log" 2>&1
tail -8 "$OUT/ctest.log"

echo "== Python package, pytest ==" | tee "$OUT/pytest.log"
{
  $PY -m pip install -q --no-deps wheels/apache_tvm_ffi-*.whl
  $PY -m pip install -q --no-build-isolation .
  KFFI_CUDA_ARCH=90 $PY -m pytest tests/python -q -p no:cacheprovider -rs
} >>"$OUT/pytest.log" 2>&1
tail -15 "$OUT/pytest.log"

echo "== call overhead (GPU host) =="
$PY bench/python/call_overhead.py --out "$OUT/bench_python_gpu.json" >"$OUT/bench.log" 2>&1
tail -40 "$OUT/bench.log"
$PY bench/python/contract_overhead.py --out "$OUT/bench_contract_gpu.json" >>"$OUT/bench.log" 2>&1
tail -6 "$OUT/bench.log"
