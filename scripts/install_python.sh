#!/usr/bin/env bash
# scripts/install_python.sh: installs the Python test/demo dependencies and kffi itself (pip).
# SPDX-License-Identifier: Apache-2.0
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
# shellcheck disable=SC1091  # checked on its own (scripts/check_format.sh checks every script)
source "$ROOT/scripts/pip_progress.sh"
# pytest-xdist: scripts/test.sh runs the Python tests on every core.
python3 -c "import numpy, pytest, xdist" 2>/dev/null || kffi_pip "NumPy and pytest" numpy pytest pytest-xdist
# torch from the configured index: on plain PyPI the CUDA build (GBs); README.md says how to get
# the CPU build first.
python3 -c "import torch" 2>/dev/null || kffi_pip "torch" torch==2.13.0 || echo "torch unavailable: its tests skip"
python3 -c "import jax" 2>/dev/null || kffi_pip "jax" jax || echo "jax unavailable: its tests skip"
# flatbuffers: jax.export's serialization (kffi.jax.export round trips, docs/deploy.md).
python3 -c "import flatbuffers" 2>/dev/null || kffi_pip "flatbuffers" flatbuffers || echo "flatbuffers unavailable: the jax.export tests skip"
python3 -c "import scikit_build_core" 2>/dev/null || kffi_pip "scikit-build-core" "scikit-build-core>=0.10"
# mypy (pinned in requirements-dev.txt): the stub tests check kffi-stubgen's output with it
# (test_aot_stubs, test_hostile_generated).
python3 -c "import mypy" 2>/dev/null || kffi_pip "mypy" "$(grep '^mypy==' "$ROOT/requirements-dev.txt")" \
  || echo "mypy unavailable: its tests skip"
# ml_dtypes (comes with jax): the reference for the bfloat16/fp8 conversions (test_kernel_kit).
python3 -c "import ml_dtypes" 2>/dev/null || kffi_pip "ml_dtypes" ml_dtypes || echo "ml_dtypes unavailable: its tests skip"
# The TVM-FFI anchors: bridge coexistence tests and the other direction (kffi -> tvm_ffi/jax).
python3 -c "import tvm_ffi" 2>/dev/null || kffi_pip "apache-tvm-ffi" apache-tvm-ffi || echo "apache-tvm-ffi unavailable: its tests skip"
python3 -c "import jax_tvm_ffi" 2>/dev/null || kffi_pip "jax-tvm-ffi" jax-tvm-ffi || echo "jax-tvm-ffi unavailable: its tests skip"
# NVRTC (libnvrtc, no GPU needed): kffi.cuda compiles cubins and PTX with it (test_cuda_compile,
# docs/runtime_compilation.md).
python3 -m pip show -q nvidia-cuda-nvrtc >/dev/null 2>&1 \
  || kffi_pip "nvidia-cuda-nvrtc" nvidia-cuda-nvrtc || echo "nvidia-cuda-nvrtc unavailable: the kffi.cuda tests skip"
# No build isolation: the build tools above are used as installed (no network round trip).
kffi_pip_build "kffi (compiles libkffi and its extension: a few minutes)" --no-build-isolation "$ROOT"
