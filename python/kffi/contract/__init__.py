"""python/kffi/contract/__init__.py: the contract layer, public as kffi.contract: contracts
declared with fake arguments and compiled (_compile.py: fake tensors, scalars and streams, the
rendering of a contract's text, kffi.compile), and the one shape evaluator every consumer uses
(_abstract.py: output shapes and dtypes from a function's contract metadata).

It imports the build and runtime layers and the base modules, never a higher layer.
"""
# SPDX-License-Identifier: Apache-2.0

from ._abstract import eval_shape_rpn
from ._compile import (
    MAX_CONTRACT_BYTES,
    Bool,
    FakeRecord,
    FakeStream,
    FakeTensor,
    Float32,
    Float64,
    Int32,
    Int64,
    Optional,
    ScalarType,
    SymInt,
    compile,
    cpp_param_names,
    fake_record,
    fake_stream,
    fake_tensor,
    has_contract_support,
    render_contract,
    sym_int,
)

__all__ = [
    "MAX_CONTRACT_BYTES",
    "Bool",
    "FakeRecord",
    "FakeStream",
    "FakeTensor",
    "Float32",
    "Float64",
    "Int32",
    "Int64",
    "Optional",
    "ScalarType",
    "SymInt",
    "compile",
    "cpp_param_names",
    "eval_shape_rpn",
    "fake_record",
    "fake_stream",
    "fake_tensor",
    "has_contract_support",
    "render_contract",
    "sym_int",
]
