"""tests/python/support/script_module.py: a repository script (scripts/*.py) loaded as a module,
so that house tests can call its functions as well as run it.
"""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType


def load_script(path: Path) -> ModuleType:
    """The module the script at path defines, loaded under its file name (not run as __main__)."""
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
