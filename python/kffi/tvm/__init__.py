"""python/kffi/tvm/__init__.py: the TVM bridge's Python side (docs/tvm_ffi.md): kffi values handed
to apache-tvm-ffi, the bridge's hooks for the runtime's loader (_bridge.py), and contracts for
functions that carry none (_with_contract.py, kffi.with_contract).

Importing it does not import tvm_ffi. It imports the contract, build and runtime layers and the
base modules, never a framework integration; the package face imports it, which puts its loader
hooks in place (runtime/_hooks.py).
"""
# SPDX-License-Identifier: Apache-2.0

from . import _bridge as _bridge  # its import puts the loader hooks in place
from ._with_contract import with_contract

__all__ = ["with_contract"]
