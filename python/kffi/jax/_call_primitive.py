"""python/kffi/jax/_call_primitive.py: the ``kffi_call`` primitive object, without its rules.

The rules (abstract evaluation, lowering, batching) live in ``_primitive``, which imports
``_export`` and ``_shard``; those two only need to recognise and bind the primitive, so they
import it from here and the package has no import cycle.
"""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import jax.extend

__all__ = ["kffi_call_p"]

kffi_call_p = jax.extend.core.Primitive("kffi_call")
kffi_call_p.multiple_results = True
