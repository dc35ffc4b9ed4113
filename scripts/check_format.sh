#!/usr/bin/env bash
# scripts/check_format.sh: fails when a C/C++ source differs from clang-format's output, or when
# Python fails ruff (lint and format, configured in pyproject.toml), or when a source file lacks
# its SPDX license line (scripts/spdx_lines.py), or when shellcheck reports on a shell script.
# SPDX-License-Identifier: Apache-2.0
set -euo pipefail
cd "$(dirname "$0")/.."
files=$(git ls-files '*.h' '*.c' '*.cc' '*.cu' '*.cuh' | grep -v '^include/kffi/dlpack.h$' || true)
[ -z "$files" ] && exit 0
# shellcheck disable=SC2086
clang-format --dry-run --Werror $files
echo "clang-format: $(echo "$files" | wc -l) files clean"
python3 -m ruff --version >/dev/null 2>&1 || python3 -m pip install -q --disable-pip-version-check ruff
python3 -m ruff check --no-cache .
python3 -m ruff format --no-cache --check .
python3 scripts/spdx_lines.py --check
echo "SPDX lines: present"
# Every tracked shell script: scripts/, .ci/run (no .sh suffix) and the examples' scripts.
mapfile -t shell_files < <(git ls-files '*.sh' .ci/run)
shellcheck "${shell_files[@]}"
echo "shellcheck: ${#shell_files[@]} scripts clean"
