#!/usr/bin/env bash
# scripts/install_python.sh: installs the Python test/demo dependencies and kffi itself (pip).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PIP=(python3 -m pip install -q --disable-pip-version-check)
python3 -c "import numpy, pytest" 2>/dev/null || "${PIP[@]}" numpy pytest
# The CPU build of torch (a plain `torch` would pull GBs of CUDA packages).
python3 -c "import torch" 2>/dev/null || "${PIP[@]}" torch==2.13.0 || echo "torch unavailable: its tests skip"
python3 -c "import jax" 2>/dev/null || "${PIP[@]}" jax || echo "jax unavailable: its tests skip"
python3 -c "import scikit_build_core" 2>/dev/null || "${PIP[@]}" "scikit-build-core>=0.10"
# No build isolation: the build tools above are used as installed (no network round trip).
"${PIP[@]}" --no-build-isolation "$ROOT"
