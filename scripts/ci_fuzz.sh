#!/usr/bin/env bash
# scripts/ci_fuzz.sh: CI's short fuzzing step. Builds every libFuzzer target of tests/fuzz with
# clang (ASan + UBSan) and runs each for a few seconds, starting from the corpus kept in
# tests/fuzz/corpus/<target>/ (every kept input runs first, then new ones). A crash, a leak, a
# sanitizer report, an allocation beyond the limit or a hang fails the step and prints the
# reproducer's path. Long runs (10^7 executions and more) are scripts/run_fuzzers.sh's job.
#
#   bash scripts/ci_fuzz.sh [seconds per target]     (default 25, or $KFFI_CI_FUZZ_SECONDS)
#
# Needs clang with compiler-rt (Debian: clang, libclang-rt-dev); installed here when missing.
# SPDX-License-Identifier: Apache-2.0
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
SECONDS_PER_TARGET="${1:-${KFFI_CI_FUZZ_SECONDS:-25}}"

# shellcheck source=scripts/apt_install.sh
source "$ROOT/scripts/apt_install.sh"
# libclang-rt-dev: compiler-rt (libFuzzer, the sanitizers' runtimes), named in case clang was
# installed without its recommended packages.
kffi_apt_install clang libclang-rt-dev

start=$(date +%s)
bash "$ROOT/scripts/run_fuzzers.sh" --seconds "$SECONDS_PER_TARGET"
echo "ci_fuzz: all targets clean in $(($(date +%s) - start)) s (build included)"
