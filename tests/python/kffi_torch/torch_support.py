"""tests/python/kffi_torch/torch_support.py: shared fixtures of the kffi.torch tests (the kernel
library and unique op namespaces: an op name is registered once per process)."""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import itertools
from pathlib import Path

import kffi
import pytest

HERE = Path(__file__).resolve().parent
_counter = itertools.count()


def tk_path() -> str:
    """tests/python/kffi_torch/torch_kernels.cc, built with kffi.cpp.build (cached on disk)."""
    return str(
        kffi.cpp.build("kffi_test_torch_kernels", [str(HERE / "torch_kernels.cc")], quiet=True)
    )


@pytest.fixture(scope="session")
def tk() -> kffi.Module:
    """The library of tk_path(), loaded."""
    return kffi.load_module(tk_path())


@pytest.fixture
def ns() -> str:
    """A fresh op namespace for one test."""
    return f"kffi_test_{next(_counter)}"


def fresh(module: kffi.Module, name: str):
    """A new Function object for module's `name` (registrations do not share Python objects)."""
    return module.get_function(name)
