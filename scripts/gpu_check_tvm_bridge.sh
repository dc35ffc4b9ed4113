#!/usr/bin/env bash
# scripts/gpu_check_tvm_bridge.sh: the GPU checks of the TVM-FFI bridge (issue 9), on a machine with
# an NVIDIA GPU. Run after scripts/gpu_check.sh (which installs apache-tvm-ffi from wheels/ and
# kffi from this tree), with the CuTe DSL kernels built on a machine that has nvidia-cutlass-dsl:
#
#   here:    python3 tests/cute_dsl/build_kernels.py build/cute_gpu --copy-runtime
#   device:  CUTE=build/cute_gpu OUT=<dir> bash scripts/gpu_check_tvm_bridge.sh
#
# build/cute_gpu holds the exported kernels linked two ways and libcute_dsl_runtime.so (about
# 44 MB; the kernels find it through $ORIGIN), so the device needs no DSL. Logs and JSON go to OUT.
# SPDX-License-Identifier: Apache-2.0
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
OUT="${OUT:-$ROOT/build/gpu}"
CUTE="$(cd "${CUTE:-$ROOT/build/cute_gpu}" && pwd)"
mkdir -p "$OUT"
cd "$ROOT" || exit
PY=python3
export KFFI_CUTE_ARTIFACTS="$CUTE"
$PY -c "import kffi, tvm_ffi, torch; print('kffi', kffi.__version__, 'tvm_ffi', tvm_ffi.__version__,
      'cuda', torch.cuda.is_available())" | tee "$OUT/tvm_bridge_env.txt"

echo "== TVM-FFI bridge tests (GPU) =="
$PY -m pytest tests/python/kffi_tvm/test_cute_dsl.py tests/python/kffi_tvm/test_tvm_bridge.py \
  tests/python/kffi_tvm/test_tvm_coexistence.py \
  'tests/python/house/test_docs.py::test_page_runs[docs/tvm_ffi.md]' \
  -q -rs -p no:cacheprovider >"$OUT/tvm_bridge_pytest.log" 2>&1
tail -25 "$OUT/tvm_bridge_pytest.log"

echo "== TVM-FFI bridge benchmark (GPU row: CuTe add_one, 2 CUDA tensors) =="
$PY bench/python/tvm_bridge.py --out "$OUT/bench_tvm_bridge_gpu.json" >"$OUT/tvm_bridge_bench.log" 2>&1
tail -12 "$OUT/tvm_bridge_bench.log"
