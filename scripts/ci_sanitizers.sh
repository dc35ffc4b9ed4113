#!/usr/bin/env bash
# scripts/ci_sanitizers.sh: CI's sanitizer and hardening steps (the ASan + UBSan run is
# scripts/test.sh --sanitize). Each part builds in its own folder under build/ and prints its time.
#
#   bash scripts/ci_sanitizers.sh [part...]      parts: tsan hardened tidy pytsan (default: all)
#
#   tsan      the C++ tests under ThreadSanitizer (GCC, KFFI_ENABLE_TSAN).
#   hardened  the C++ tests built by clang with KFFI_HARDENED (_GLIBCXX_ASSERTIONS,
#             _FORTIFY_SOURCE=2, stack protector), as distributions build.
#   tidy      scripts/clang_tidy.sh over the hardened build's compile database.
#   pytsan    the Python thread tests against a TSan-built extension and libkffi (GCC's shared
#             TSan runtime preloaded into an uninstrumented CPython: races inside kffi's code and
#             between kffi and libc are reported; CPython's own accesses are not seen).
#
# Suppressions: scripts/tsan_suppressions.txt (each one justified there). Any report fails.
# SPDX-License-Identifier: Apache-2.0
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
JOBS="${KFFI_JOBS:-$(nproc)}"
PARTS=("$@")
[ ${#PARTS[@]} -eq 0 ] && PARTS=(tsan hardened tidy pytsan)
GEN=()
command -v ninja >/dev/null 2>&1 && GEN=(-G Ninja)

# clang only for the parts that build with it (tsan and pytsan use GCC's runtime).
need=()
parts=" ${PARTS[*]} "
if [[ "$parts" == *" hardened "* || "$parts" == *" tidy "* ]]; then
  command -v clang++ >/dev/null 2>&1 || need+=(clang)
fi
if [[ "$parts" == *" tidy "* ]]; then
  command -v clang-tidy >/dev/null 2>&1 || need+=(clang-tidy)
fi
if [ ${#need[@]} -gt 0 ]; then
  # shellcheck source=scripts/apt_install.sh
  source "$ROOT/scripts/apt_install.sh"
  kffi_apt_install "${need[@]}"
fi
bash "$ROOT/scripts/install_deps.sh"

TSAN_SUPP="$ROOT/scripts/tsan_suppressions.txt"
# halt_on_error: the first report fails the test that made it; second_deadlock_stack: both stacks
# of a lock-order inversion.
TSAN_ENV="halt_on_error=1 second_deadlock_stack=1 suppressions=$TSAN_SUPP"

declare -a SUMMARY=()
timed() {
  local name="$1"
  shift
  local t0
  t0=$(date +%s)
  echo "== $name"
  "$@"
  SUMMARY+=("$name: $(($(date +%s) - t0)) s")
}

part_tsan() {
  local build="$ROOT/build/tsan"
  # GCC: its TSan runtime is a shared library, so a test that replaces operator new (as
  # test_object.cc does to count allocations) interposes it; clang's static runtime defines the
  # same operators and the link fails (and clang 14's shared one crashes at start-up).
  # -g1: line tables only, what a report's stacks need (file:line), about a fifth less compile
  # time than -g's full debug info. -O1 (TSan asks for -O1 or more): a quarter to a third
  # less compile time than -O2 (test_contract.cc: 13.6 s -> 9.3 s).
  CC=gcc CXX=g++ cmake -S "$ROOT" -B "$build" "${GEN[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKFFI_WERROR="${KFFI_WERROR:-OFF}" \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" \
    -DKFFI_ENABLE_TSAN=ON -DKFFI_BUILD_EXAMPLES=OFF >/dev/null
  cmake --build "$build" -j "$JOBS"
  # Every test runs (the examples are not built: the out-of-tree one would build a project
  # without the sanitizer runtime). apache-tvm-ffi's prebuilt libtvm_ffi.so is not instrumented:
  # races inside it are not seen, those between it and kffi's code are.
  TSAN_OPTIONS="$TSAN_ENV" ctest --test-dir "$build" --output-on-failure -j "$JOBS"
}

part_hardened() {
  local build="$ROOT/build/hardened"
  CC=clang CXX=clang++ cmake -S "$ROOT" -B "$build" "${GEN[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKFFI_WERROR="${KFFI_WERROR:-OFF}" \
    -DKFFI_HARDENED=ON -DCMAKE_EXPORT_COMPILE_COMMANDS=ON >/dev/null
  cmake --build "$build" -j "$JOBS"
  ctest --test-dir "$build" --output-on-failure -j "$JOBS"
}

part_tidy() {
  local build="$ROOT/build/hardened"
  if [ ! -f "$build/compile_commands.json" ]; then
    CC=clang CXX=clang++ cmake -S "$ROOT" -B "$build" "${GEN[@]}" \
      -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKFFI_WERROR="${KFFI_WERROR:-OFF}" -DKFFI_HARDENED=ON -DCMAKE_EXPORT_COMPILE_COMMANDS=ON \
      >/dev/null
  fi
  bash "$ROOT/scripts/clang_tidy.sh" "$build"
}

part_pytsan() {
  local build="$ROOT/build/pytsan"
  local venv="$build/venv"
  local runtime
  runtime="$(gcc -print-file-name=libtsan.so)"
  if [ ! -f "$runtime" ]; then
    echo "pytsan: GCC's shared TSan runtime (libtsan.so) is missing" >&2
    return 1
  fi
  mkdir -p "$build"
  # A throwaway environment on top of the system's packages (numpy, pytest, torch, jax).
  python3 -m venv --system-site-packages "$venv"
  CC=gcc CXX=g++ "$venv/bin/python" -m pip install -q --no-build-isolation \
    --config-settings=cmake.define.KFFI_ENABLE_TSAN=ON \
    --config-settings=cmake.build-type=RelWithDebInfo \
    --config-settings=build-dir="$build/wheel" "$ROOT"
  # The kernel libraries the tests compile are not instrumented (kffi-config gives no TSan
  # flags); their calls into libkffi are. Only the test process runs under TSan: LD_PRELOAD is
  # dropped from its environment once it has started, so the shells and compilers it runs do
  # not load the runtime (they fail under it). kffi-config is the installed shell script itself:
  # the Python entry point imports kffi._core, which needs the preloaded runtime.
  local platlib
  platlib="$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["platlib"])')"
  mkdir -p "$build/bin"
  ln -sf "$platlib/kffi/bin/kffi-config" "$build/bin/kffi-config"
  # Reports go to files (pytest captures the test process's stderr), printed on failure.
  rm -f "$build"/tsan-report.*
  local status=0
  (cd "$ROOT" && LD_PRELOAD="$runtime" TSAN_OPTIONS="$TSAN_ENV log_path=$build/tsan-report" \
    PATH="$build/bin:$venv/bin:$PATH" "$venv/bin/python" -c 'import os, sys, pytest
os.environ.pop("LD_PRELOAD", None)
try:  # imported once up front: under TSan a first import of torch inside a test thread takes
    import torch  # noqa: F401  (longer than the tests wait for their threads)
except ImportError:
    pass
sys.exit(pytest.main(["-q", "-p", "no:cacheprovider", *sys.argv[1:]]))' \
    tests/python/core/test_threads.py tests/python/core/test_cleanup_errors.py) || status=$?
  if compgen -G "$build/tsan-report.*" >/dev/null; then
    cat "$build"/tsan-report.*
    status=1
  fi
  return "$status"
}

for p in "${PARTS[@]}"; do
  case "$p" in
    tsan | hardened | tidy | pytsan) timed "$p" "part_$p" ;;
    *)
      echo "unknown part: $p (tsan, hardened, tidy, pytsan)" >&2
      exit 2
      ;;
  esac
done
printf '%s\n' "${SUMMARY[@]}"
