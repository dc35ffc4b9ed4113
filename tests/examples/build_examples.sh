#!/bin/sh
# tests/examples/build_examples.sh: builds the examples the way a user outside the kffi tree does.
#   build_examples.sh <kffi build dir> <kffi source dir> <work dir> [<generator> [<extra flags>]]
# Installs kffi into <work dir>/prefix (cmake --install), builds examples/kernel_library twice
# (its Makefile with kffi-config flags, and its CMakeLists.txt with find_package(kffi CONFIG)),
# builds examples/cpp_app with the CMake package, and runs cpp_app on each kernel build. The CUDA
# kernel is built where nvcc exists and run where a GPU exists. <extra flags> (sanitizers) are
# added to every compile and to the program's link, matching how libkffi was built.
# SPDX-License-Identifier: Apache-2.0
set -eu

if [ $# -lt 3 ]; then
  echo "usage: $0 <kffi build dir> <kffi source dir> <work dir> [<generator> [<extra flags>]]" >&2
  exit 2
fi
build=$1
src=$2
work=$3
generator=${4:-Unix Makefiles}
extra=${5:-}
cmake=${CMAKE:-cmake}

step() { printf '\n==== %s\n' "$*"; }

rm -rf "$work"
mkdir -p "$work"
prefix="$work/prefix"

step "install kffi into $prefix"
"$cmake" --install "$build" --prefix "$prefix" >"$work/install.log"
config="$prefix/bin/kffi-config"
"$config" --version --cxxflags --ldflags --libs

# CUDA where nvcc exists, but not with sanitizers (the CUDA runtime needs its own ASan setup).
cuda=ON
nvcc_var=
if ! command -v nvcc >/dev/null 2>&1; then
  cuda=OFF
  echo "(no nvcc: the CUDA kernel is skipped)"
elif [ -n "$extra" ]; then
  cuda=OFF
  echo "(sanitizer flags: the CUDA kernel is skipped)"
fi
[ "$cuda" = ON ] || nvcc_var="NVCC="

kernel_builds="$work/cmake_kernels"
if command -v make >/dev/null 2>&1; then
  step "kernel library: Makefile with kffi-config"
  # shellcheck disable=SC2086 # nvcc_var is empty or one word
  make -C "$src/examples/kernel_library" KFFI_CONFIG="$config" OUT="$work/make" \
    EXTRA_CXXFLAGS="$extra" $nvcc_var
  kernel_builds="$work/make $kernel_builds"
else
  echo "(no make: the Makefile build is skipped)"
fi

step "kernel library: CMake package"
"$cmake" -S "$src/examples/kernel_library" -B "$work/cmake_kernels" -G "$generator" \
  -Dkffi_DIR="$("$config" --cmakedir)" -DCMAKE_CXX_FLAGS="$extra" -DKFFI_EXAMPLE_CUDA="$cuda"
"$cmake" --build "$work/cmake_kernels"

step "cpp_app: CMake package (found through CMAKE_PREFIX_PATH)"
"$cmake" -S "$src/examples/cpp_app" -B "$work/cmake_app" -G "$generator" \
  -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_CXX_FLAGS="$extra" -DCMAKE_EXE_LINKER_FLAGS="$extra" \
  -DKFFI_EXAMPLE_CUDA="$cuda"
"$cmake" --build "$work/cmake_app"

app="$work/cmake_app/cpp_app"
for kernels in $kernel_builds; do
  step "run cpp_app on $kernels"
  if [ -e "$kernels/libscale_cuda.so" ]; then
    "$app" "$kernels/libscale_cpu.so" "$kernels/libscale_cuda.so"
  else
    "$app" "$kernels/libscale_cpu.so"
  fi
done
step "all example builds passed"
