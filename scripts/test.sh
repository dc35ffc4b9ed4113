#!/usr/bin/env bash
# scripts/test.sh: builds everything and runs all tests (ABI, C++, examples).
#   --sanitize   build and run the C++ tests with AddressSanitizer + UndefinedBehaviorSanitizer,
#                hardened as distributions build (KFFI_HARDENED: _GLIBCXX_ASSERTIONS, so an
#                out-of-range operator[] on a standard container aborts the test)
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
  cmake -S "$ROOT" -B "$BUILD" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Debug -DKFFI_ENABLE_ASAN=ON \
    -DKFFI_ENABLE_UBSAN=ON -DKFFI_HARDENED=ON -DKFFI_BUILD_EXAMPLES=OFF "${WERROR[@]}" >/dev/null
  cmake --build "$BUILD" -j "$JOBS"
  # Leak checking is on: every test must release what it allocates.
  ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
    ctest --test-dir "$BUILD" --output-on-failure -j "$JOBS" -E 'examples_out_of_tree'
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
