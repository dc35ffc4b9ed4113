"""python/kffi/runtime/__init__.py: the runtime layer: kffi's objects (Module, Function, Tensor,
containers), dtypes and devices, errors, streams, loading and the global function registry.

It imports only the extension (kffi._core) and the base modules; higher layers (build, contract,
tvm, the framework integrations) plug in through runtime/_hooks.py. What it knows of each array
framework (torch, NumPy, JAX, CuPy) is that framework's row in runtime/_frameworks.py.
"""
# SPDX-License-Identifier: Apache-2.0
