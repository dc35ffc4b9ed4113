#!/usr/bin/env python3
"""scripts/spdx_lines.py: writes (default) or checks (--check) each source file's SPDX line.

The rule (the repository has no style document, so it is written here): a file's first line
stays its header (path: purpose), after a shebang where there is one, and the SPDX line comes
right after the header comment: the first run of `//` or `#` lines, the `/* ... */` block, or
the Python module docstring, so that a header that runs over several lines is not split.
Run from anywhere inside the repository; it lists files with `git ls-files`, so re-run it after
a merge that brings new files:  python3 scripts/spdx_lines.py  (then --check to confirm).
"""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import ast
import fnmatch
import subprocess
import sys
from pathlib import Path

LICENSE = "Apache-2.0"  # pyproject.toml's license and LICENSE
TAG = f"SPDX-License-Identifier: {LICENSE}"

C_LIKE = ("*.h", "*.c", "*.cc", "*.cu", "*.cuh")
HASH = ("*.py", "*.sh", "*.cmake", "*.cmake.in", "CMakeLists.txt", "*/CMakeLists.txt")
# Other sources with `#` comments that match no pattern above.
HASH_FILES = ("cmake/kffi-config.in", "examples/kernel_library/Makefile")


def _matches(path: str, patterns: tuple[str, ...]) -> bool:
    return any(fnmatch.fnmatch(path, p) for p in patterns)


def source_files(root: Path) -> list[str]:
    """Tracked source files that carry an SPDX line (test data and corpora are not sources)."""
    out = subprocess.run(
        ["git", "ls-files"], cwd=root, check=True, capture_output=True, text=True
    ).stdout.split("\n")
    return [p for p in out if p and (_matches(p, C_LIKE + HASH) or p in HASH_FILES)]


def expected_line(path: str, lines: list[str]) -> tuple[int, str]:
    """(index in lines, text) where the SPDX line of this file goes."""
    start = 1 if lines and lines[0].startswith("#!") else 0
    first = lines[start] if start < len(lines) else ""
    if path.endswith(".py") and first.lstrip().startswith(('"""', "'''")):
        tree = ast.parse("".join(lines))
        doc = tree.body[0]
        assert isinstance(doc, ast.Expr) and doc.end_lineno is not None, path
        return doc.end_lineno, f"# {TAG}\n"
    if first.startswith("/*"):
        end = start
        while "*/" not in lines[end]:
            end += 1
        return end + 1, f"/* {TAG} */\n"
    marker = "//" if _matches(path, C_LIKE) else "#"
    end = start
    while end < len(lines) and lines[end].startswith(marker) and TAG not in lines[end]:
        end += 1
    return end, f"{marker} {TAG}\n"


def has_line(path: str, lines: list[str]) -> bool:
    index, text = expected_line(path, lines)
    return index < len(lines) and lines[index] == text


def main(argv: list[str]) -> int:
    check = "--check" in argv
    root = Path(
        subprocess.run(
            ["git", "rev-parse", "--show-toplevel"], check=True, capture_output=True, text=True
        ).stdout.strip()
    )
    bad = []
    for path in source_files(root):
        file = root / path
        lines = file.read_text(encoding="utf-8").splitlines(keepends=True)
        if has_line(path, lines):
            continue
        if check or any(TAG in line for line in lines):
            # A misplaced line is reported, never moved: moving it could split a header block.
            bad.append(path)
            continue
        index, text = expected_line(path, lines)
        lines.insert(index, text)
        file.write_text("".join(lines), encoding="utf-8")
    for path in bad:
        print(f"{path}: no '{TAG}' line right after the header", file=sys.stderr)
    if bad:
        print("fix: python3 scripts/spdx_lines.py (the rule is in its docstring)", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
