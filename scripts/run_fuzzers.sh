#!/usr/bin/env bash
# scripts/run_fuzzers.sh: builds kffi's libFuzzer targets (clang, ASan + UBSan) and runs each.
#
#   scripts/run_fuzzers.sh [--seconds S | --runs N] [--jobs J] [target...]
#
# Targets are tests/fuzz/*_fuzzer.cc (default: all; name them without the suffix). Each starts from
# its seed corpus tests/fuzz/corpus/<target>/ and writes the inputs it finds to a scratch copy
# under the build folder, so the repository's corpus changes only when someone copies inputs back.
# Exits non-zero on the first crash, leak or sanitizer report (the reproducer is kept in the
# build folder), and prints the executions of every target. Default: 60 seconds per target.
# SPDX-License-Identifier: Apache-2.0
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BUILD="${KFFI_FUZZ_BUILD_DIR:-$ROOT/build/fuzz}"
SECONDS_PER_TARGET=60
RUNS=""
JOBS=1
TARGETS=()
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) SECONDS_PER_TARGET="$2"; shift 2 ;;
    --runs) RUNS="$2"; shift 2 ;;
    --jobs) JOBS="$2"; shift 2 ;;
    -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
    *) TARGETS+=("$1"); shift ;;
  esac
done
if [ ${#TARGETS[@]} -eq 0 ]; then
  for f in "$ROOT"/tests/fuzz/*_fuzzer.cc; do
    TARGETS+=("$(basename "$f" _fuzzer.cc)")
  done
fi

GEN=()
command -v ninja >/dev/null 2>&1 && GEN=(-G Ninja)
CC=clang CXX=clang++ cmake -S "$ROOT" -B "$BUILD" "${GEN[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKFFI_WERROR="${KFFI_WERROR:-OFF}" \
  -DKFFI_BUILD_FUZZERS=ON -DKFFI_ENABLE_ASAN=ON -DKFFI_ENABLE_UBSAN=ON \
  -DKFFI_BUILD_TESTS=OFF -DKFFI_BUILD_EXAMPLES=OFF >/dev/null
cmake --build "$BUILD" -j "${KFFI_JOBS:-2}" --target "${TARGETS[@]/%/_fuzzer}"

export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
SUMMARY=()
for t in "${TARGETS[@]}"; do
  seeds="$ROOT/tests/fuzz/corpus/$t"
  work="$BUILD/corpus/$t"
  mkdir -p "$work" "$BUILD/artifacts/$t"
  if [ -d "$seeds" ]; then cp -n "$seeds"/* "$work"/ 2>/dev/null || true; fi
  limit=(-max_total_time="$SECONDS_PER_TARGET")
  [ -n "$RUNS" ] && limit=(-runs="$RUNS")
  log="$BUILD/$t.log"
  echo "== $t: ${limit[*]} (log: $log)"
  # -rss_limit_mb / -malloc_limit_mb: a reader that allocates what a hostile header claims fails.
  parallel=()
  [ "$JOBS" -gt 1 ] && parallel=(-jobs="$JOBS" -workers="$JOBS")
  rm -f "$BUILD"/fuzz-*.log
  if ! (cd "$BUILD" && "$BUILD/tests/fuzz/${t}_fuzzer" "${limit[@]}" "${parallel[@]}" \
      -rss_limit_mb=1024 -malloc_limit_mb=256 -timeout=10 -print_final_stats=1 \
      -artifact_prefix="$BUILD/artifacts/$t/" "$work" >"$log" 2>&1); then
    tail -40 "$log"
    echo "FAILED: $t (reproducer in $BUILD/artifacts/$t/)"
    exit 1
  fi
  # With --jobs the workers' logs hold the counts (the main log repeats them).
  logs=("$log")
  if [ "$JOBS" -gt 1 ]; then
    shopt -s nullglob
    logs=("$BUILD"/fuzz-*.log)
    shopt -u nullglob
  fi
  runs=$(awk '/stat::number_of_executed_units/ {s += $2} END {print s + 0}' "${logs[@]}")
  SUMMARY+=("$t: $runs executions, clean")
done
printf '%s\n' "${SUMMARY[@]}"
