#!/usr/bin/env bash
# scripts/test.sh: builds everything and runs all tests (ABI, C++, examples).
#   --sanitize   build and run the C++ tests with AddressSanitizer + UndefinedBehaviorSanitizer,
#                hardened as distributions build (KFFI_HARDENED: _GLIBCXX_ASSERTIONS, so an
#                out-of-range operator[] on a standard container aborts the test)
#   --aarch64    cross-compile the C++ tests for aarch64 and run them under qemu-user
# SPDX-License-Identifier: Apache-2.0
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
JOBS="${KFFI_JOBS:-$(nproc)}"
# The C++ tests need GTest (and the build tools): installed here when missing, so this command
# works on a fresh machine on its own.
bash "$ROOT/scripts/install_deps.sh"
GEN=()
command -v ninja >/dev/null 2>&1 && GEN=(-G Ninja)
# Warnings as errors when asked (KFFI_WERROR=ON: CI and developers), never by default, so that a
# newer compiler's new warning does not stop a user's test run.
WERROR=(-DKFFI_WERROR="${KFFI_WERROR:-OFF}")

if [ "${1:-}" = "--sanitize" ]; then
  BUILD="${KFFI_BUILD_DIR:-$ROOT/build/asan}"
  # -g1: line tables only, what a report's stacks need (file:line), for less compile time than
  # -g's full debug info.
  cmake -S "$ROOT" -B "$BUILD" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Debug -DKFFI_ENABLE_ASAN=ON \
    -DCMAKE_CXX_FLAGS_DEBUG=-g1 -DCMAKE_C_FLAGS_DEBUG=-g1 \
    -DKFFI_ENABLE_UBSAN=ON -DKFFI_HARDENED=ON -DKFFI_BUILD_EXAMPLES=OFF "${WERROR[@]}" >/dev/null
  cmake --build "$BUILD" -j "$JOBS"
  # Leak checking is on: every test must release what it allocates.
  ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
    ctest --test-dir "$BUILD" --output-on-failure -j "$JOBS" -E 'examples_out_of_tree'
  exit 0
fi

if [ "${1:-}" = "--aarch64" ]; then
  # The C++ and ABI tests cross-compiled for 64-bit Arm Linux and run under qemu-user (CMake's
  # emulator): the atomics, the ELF reader and the layout checks on a second architecture. The
  # examples are left out: their tests run the build machine's compilers (CUDA, out-of-tree CMake).
  # shellcheck source=scripts/aarch64_root.sh
  source "$ROOT/scripts/aarch64_root.sh"
  BUILD="${KFFI_BUILD_DIR:-$AARCH64_DIR/test}"
  cmake -S "$ROOT" -B "$BUILD" "${GEN[@]}" -DCMAKE_TOOLCHAIN_FILE="$AARCH64_TOOLCHAIN" \
    -DKFFI_TVM_FFI_CONFIG="$AARCH64_TVM_FFI_CONFIG" -DKFFI_BUILD_EXAMPLES=OFF \
    -DCMAKE_BUILD_TYPE=Release "${WERROR[@]}" >/dev/null
  cmake --build "$BUILD" -j "$JOBS"
  ctest --test-dir "$BUILD" --output-on-failure -j "$JOBS"
  exit 0
fi

# The Python packages first: the C++ build looks for apache-tvm-ffi (the TVM bridge's tests run
# against it) and the configure step would skip those tests where it is not yet installed. Then
# kffi itself, installed the way a user installs it.
bash "$ROOT/scripts/install_python.sh"

# Release, as users build it (Debian 12's g++ 12 warns differently there than at -O2 -g).
BUILD="${KFFI_BUILD_DIR:-$ROOT/build/test}"
cmake -S "$ROOT" -B "$BUILD" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release "${WERROR[@]}" >/dev/null
cmake --build "$BUILD" -j "$JOBS"
ctest --test-dir "$BUILD" --output-on-failure -j "$JOBS"

cd "$ROOT"
# On every core (pytest-xdist, installed by install_python.sh); each test file's fixtures build
# into the shared cache under its lock.
python3 -m pytest tests/python -q -p no:cacheprovider -n "$JOBS"
