"""python/kffi/aot.py: the public name kffi.aot, which is kffi.toolchain.aot itself.

The same module object, so that what is set on one is seen by the other.
"""
# SPDX-License-Identifier: Apache-2.0

import sys
from typing import TYPE_CHECKING

from .toolchain import aot as _impl

if TYPE_CHECKING:  # what type checkers read: the module's names (at run time, the module itself)
    from .toolchain.aot import *  # noqa: F403

sys.modules[__name__] = _impl
