"""python/kffi/config.py: the kffi-config command of the Python package.

The flags have one source: the kffi-config script that CMake installs beside the library
(kffi/bin/kffi-config); this entry point runs it, so a pip install and a CMake install answer
the same.
"""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import os
import subprocess
import sys

_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin", "kffi-config")


def main(argv: list[str] | None = None) -> int:
    """The kffi-config command: runs the installed script with ``argv`` and returns its status."""
    args = sys.argv[1:] if argv is None else list(argv)
    if not os.path.exists(_SCRIPT):
        print(
            f"kffi-config: the installed script {_SCRIPT} is missing; reinstall kffi",
            file=sys.stderr,
        )
        return 2
    return subprocess.call(["sh", _SCRIPT, *args])


if __name__ == "__main__":
    sys.exit(main())
