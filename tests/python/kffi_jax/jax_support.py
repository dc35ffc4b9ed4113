"""tests/python/kffi_jax/jax_support.py: shared fixtures of the kffi.jax tests (the test kernel
library)."""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

from pathlib import Path

import kffi
import pytest

HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="session")
def jk() -> kffi.Module:
    """tests/python/kffi_jax/jax_kernels.cc, built with kffi.cpp.build (cached on disk) and
    loaded."""
    path = kffi.cpp.build("kffi_test_jax_kernels", [str(HERE / "jax_kernels.cc")], quiet=True)
    return kffi.load_module(path)


# Hand-built metadata in the structured contract format (COMMON.md): params' kind / shape /
# dtypes / mutable, "mutates", outputs' shape_rpn.


def tensor(name, shape, dtypes=("float32",), mutable=False, optional=False):
    return {
        "name": name,
        "type": "Tensor",
        "kind": "tensor",
        "optional": optional,
        "shape": list(shape),
        "dtypes": list(dtypes),
        "device": "cpu",
        "mutable": mutable,
    }


def scalar(name, kind="int", **extra):
    return {"name": name, "type": kind, "kind": kind, "optional": False, **extra}


def out(name, rpn, dtype="float32"):
    return {
        "name": name,
        "type": "Tensor",
        "shape": [" ".join(map(str, d)) for d in rpn],
        "dtype": dtype,
        "shape_rpn": [list(d) for d in rpn],
    }


def meta(name, params, outputs=(), mutates=None):
    if mutates is None:
        mutates = [p["name"] for p in params if p.get("mutable")]
    return {
        "name": name,
        "params": list(params),
        "return": "None",
        "doc": "",
        "contract": "(hand-built)",
        "symbols": [],
        "outputs": list(outputs),
        "mutates": mutates,
    }


def with_contract(module, name, metadata):
    """A fresh Function object for module's `name` carrying hand-built structured metadata."""
    fn = module.get_function(name)
    fn._metadata = metadata
    return fn
