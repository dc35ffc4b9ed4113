"""python/kffi/build.py: ``kffi.build``, the former name of :mod:`kffi.toolchain`, kept importable.

The package was renamed because a folder named ``build`` reads as build output (ignore files and
tools skip it). ``kffi.build`` and ``kffi.build.cpp``, ``.aot``, ``.glue`` and ``.stubgen`` are the
very modules of kffi.toolchain, so old imports keep working; new code imports kffi.toolchain.
"""
# SPDX-License-Identifier: Apache-2.0

import sys

from . import toolchain as _toolchain
from .toolchain import aot, cpp, glue, stubgen

__all__ = ["aot", "cpp", "glue", "stubgen"]

for _name in __all__:  # `import kffi.build.cpp` finds these once this module is imported
    sys.modules[f"{__name__}.{_name}"] = getattr(_toolchain, _name)
