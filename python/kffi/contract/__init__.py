"""python/kffi/contract/__init__.py: the contract layer, public as kffi.contract: contracts
declared with fake arguments and compiled (_fakes.py: fake tensors, scalars, streams and
symbolic sizes; _render.py: a contract's text; _compile.py: kffi.compile), and the one shape evaluator every consumer uses
(_abstract.py: output shapes and dtypes from a function's contract metadata).

It imports the build and runtime layers and the base modules, never a higher layer.
"""
# SPDX-License-Identifier: Apache-2.0

from ._abstract import eval_shape_rpn
from ._compile import compile, has_contract_support
from ._fakes import (
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
    cpp_param_names,
    fake_record,
    fake_stream,
    fake_tensor,
    sym_int,
)
from ._render import render_contract

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
