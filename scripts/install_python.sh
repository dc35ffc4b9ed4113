#!/usr/bin/env bash
# scripts/install_python.sh: installs the Python test/demo dependencies and kffi itself (pip).
# SPDX-License-Identifier: Apache-2.0
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PIP=(python3 -m pip install -q --disable-pip-version-check)
python3 -c "import numpy, pytest" 2>/dev/null || "${PIP[@]}" numpy pytest
# torch from the configured index: on plain PyPI the CUDA build (GBs); README.md says how to get
# the CPU build first.
python3 -c "import torch" 2>/dev/null || "${PIP[@]}" torch==2.13.0 || echo "torch unavailable: its tests skip"
python3 -c "import jax" 2>/dev/null || "${PIP[@]}" jax || echo "jax unavailable: its tests skip"
# flatbuffers: jax.export's serialization (kffi.jax.export round trips, docs/deploy.md).
python3 -c "import flatbuffers" 2>/dev/null || "${PIP[@]}" flatbuffers || echo "flatbuffers unavailable: the jax.export tests skip"
python3 -c "import scikit_build_core" 2>/dev/null || "${PIP[@]}" "scikit-build-core>=0.10"
# mypy (pinned in requirements-dev.txt): the stub tests check kffi-stubgen's output with it
# (test_aot_stubs, test_hostile_generated).
python3 -c "import mypy" 2>/dev/null || "${PIP[@]}" "$(grep '^mypy==' "$ROOT/requirements-dev.txt")" \
  || echo "mypy unavailable: its tests skip"
# ml_dtypes (comes with jax): the reference for the bfloat16/fp8 conversions (test_kernel_kit).
python3 -c "import ml_dtypes" 2>/dev/null || "${PIP[@]}" ml_dtypes || echo "ml_dtypes unavailable: its tests skip"
# The TVM-FFI anchors: bridge coexistence tests and the other direction (kffi -> tvm_ffi/jax).
python3 -c "import tvm_ffi" 2>/dev/null || "${PIP[@]}" apache-tvm-ffi || echo "apache-tvm-ffi unavailable: its tests skip"
python3 -c "import jax_tvm_ffi" 2>/dev/null || "${PIP[@]}" jax-tvm-ffi || echo "jax-tvm-ffi unavailable: its tests skip"
# NVRTC (libnvrtc, no GPU needed): kffi.cuda compiles cubins and PTX with it (test_cuda_compile,
# docs/runtime_compilation.md).
python3 -m pip show -q nvidia-cuda-nvrtc >/dev/null 2>&1 \
  || "${PIP[@]}" nvidia-cuda-nvrtc || echo "nvidia-cuda-nvrtc unavailable: the kffi.cuda tests skip"
# No build isolation: the build tools above are used as installed (no network round trip).
"${PIP[@]}" --no-build-isolation "$ROOT"
