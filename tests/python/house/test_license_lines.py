"""tests/python/house/test_license_lines.py: every tracked source file carries its SPDX line, after
its header.

scripts/spdx_lines.py holds the rule (which files, where the line goes) and writes the lines; this
test runs its --check over `git ls-files`, and pins where the writer puts the line.
"""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from script_module import load_script

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "scripts" / "spdx_lines.py"

pytestmark = pytest.mark.skipif(
    shutil.which("git") is None or not (ROOT / ".git").exists(),
    reason="needs a git checkout (the file list is `git ls-files`)",
)


def _spdx():
    return load_script(SCRIPT)


def test_every_source_file_has_its_spdx_line():
    r = subprocess.run(
        [sys.executable, str(SCRIPT), "--check"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr


def test_the_file_list_covers_every_kind_of_source():
    files = _spdx().source_files(ROOT)
    for path in (
        "include/kffi/c_api.h",
        "src/core/any.cc",
        "tests/abi/c_program.c",
        "examples/kernel_library/scale_cuda.cu",
        "python/kffi/__init__.py",
        "CMakeLists.txt",
        "cmake/kffiHelpers.cmake",
        "scripts/check_format.sh",
    ):
        assert path in files, path
    # Test data that must stay byte-exact is not a source.
    assert not any(p.startswith("tests/fuzz/corpus/") for p in files)


@pytest.mark.parametrize(
    ("path", "text", "index", "line"),
    [
        # A header over two lines stays in one piece; the shebang stays first.
        (
            "a.sh",
            "#!/bin/sh\n# a.sh: one\n# two\nset -e\n",
            3,
            "# SPDX-License-Identifier: Apache-2.0\n",
        ),
        (
            "a.cc",
            "// a.cc: one\n// two\n#include <x>\n",
            2,
            "// SPDX-License-Identifier: Apache-2.0\n",
        ),
        (
            "a.h",
            "/* a.h: one\n * two */\n#define X\n",
            2,
            "/* SPDX-License-Identifier: Apache-2.0 */\n",
        ),
        (
            "a.py",
            '"""a.py: one.\n\nMore.\n"""\nimport os\n',
            4,
            "# SPDX-License-Identifier: Apache-2.0\n",
        ),
        (
            "CMakeLists.txt",
            "# CMakeLists.txt: one\nproject(x)\n",
            1,
            "# SPDX-License-Identifier: Apache-2.0\n",
        ),
    ],
)
def test_the_line_goes_right_after_the_header(path, text, index, line):
    lines = text.splitlines(keepends=True)
    spdx = _spdx()
    assert spdx.expected_line(path, lines) == (index, line)
    assert not spdx.has_line(path, lines)
    lines.insert(index, line)
    assert spdx.has_line(path, lines)
    # Written once: the line it wrote is found where it looks, so a second run adds nothing.
    assert spdx.expected_line(path, lines) == (index, line)
