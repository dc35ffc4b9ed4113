"""python/kffi/runtime/_dtypes.py: kffi.float32, kffi.bfloat16, ...: one dtype per name the runtime
knows (``_core.DTYPE_NAMES``), equal to kffi.dtype("float32") and accepted wherever a dtype is.
The package face re-exports them with ``import *``."""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

from .. import _core
from ._types import dtype

globals().update({_name: dtype(_name) for _name in _core.DTYPE_NAMES})

__all__ = list(_core.DTYPE_NAMES)
# `from kffi import *` must not shadow the builtin bool (kffi.bool stays an attribute).
PUBLIC_NAMES = [_name for _name in _core.DTYPE_NAMES if _name != "bool"]
