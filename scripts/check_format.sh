#!/usr/bin/env bash
# scripts/check_format.sh: fails when a C/C++ source differs from clang-format's output.
set -euo pipefail
cd "$(dirname "$0")/.."
files=$(git ls-files '*.h' '*.c' '*.cc' '*.cu' '*.cuh' | grep -v '^include/kffi/dlpack.h$' || true)
[ -z "$files" ] && exit 0
# shellcheck disable=SC2086
clang-format --dry-run --Werror $files
echo "clang-format: $(echo "$files" | wc -l) files clean"
