"""kffi.jax: kffi functions inside JAX: XLA FFI targets and JAX primitives (jit, CPU and CUDA).

    import kffi.jax
    y = kffi.jax.call(fn, x)                          # eager or under jax.jit
    exp = kffi.jax.export(jax.jit(f))(x)              # jax.export, kffi targets allowed
    kffi.jax.register_module(mod)                     # in another process, before exp.call
    kffi.jax.register_ffi_target("my_op", fn, platform="gpu", allow_cuda_graph=True)
    y = jax.ffi.ffi_call("my_op", jax.ShapeDtypeStruct(x.shape, x.dtype))(x)

Importing kffi does not import this package (nor jax).
"""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

from . import _export
from ._export import UnregisteredTargetError, deserialize, export, register_module
from ._ffi import (
    handler_traits,
    parse_arg_spec,
    register_ffi_target,
    registered_targets,
    target_count,
)
from ._op import Op, primitive
from ._primitive import CallPlan, call, kffi_call_p

__all__ = [
    "CallPlan",
    "Op",
    "UnregisteredTargetError",
    "call",
    "deserialize",
    "export",
    "handler_traits",
    "kffi_call_p",
    "parse_arg_spec",
    "primitive",
    "register_ffi_target",
    "register_module",
    "registered_targets",
    "target_count",
]

_export._install_hook()  # a deserialized Exported finds its kffi targets (or says what is missing)
