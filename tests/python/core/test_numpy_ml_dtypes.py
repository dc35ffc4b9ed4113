"""tests/python/core/test_numpy_ml_dtypes.py: NumPy arrays of ml_dtypes' bfloat16 and float8 types
(the host arrays JAX and data loaders use) reach kernels zero-copy, as their DLPack dtypes: NumPy's
own __dlpack__ refuses them, so kffi reads the array's fields itself, knowing the types by their
names (their NumPy type numbers depend on the order ml_dtypes registered them). Every byte-sized
ml_dtypes type is swept as an argument (borrowed) and inside a container (an owned tensor that keeps
the array alive); sub-byte types, which ml_dtypes keeps one per byte, stay refused."""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import gc

import kffi
import numpy as np
import pytest
from conftest import KERNELS, LibraryBuilder

ml_dtypes = pytest.importorskip("ml_dtypes")

# ml_dtypes' name: kffi's dtype name (DLPack's), each byte-sized.
BYTE_TYPES = {
    "bfloat16": "bfloat16",
    "float8_e3m4": "float8_e3m4",
    "float8_e4m3": "float8_e4m3",
    "float8_e4m3b11fnuz": "float8_e4m3b11fnuz",
    "float8_e4m3fn": "float8_e4m3fn",
    "float8_e4m3fnuz": "float8_e4m3fnuz",
    "float8_e5m2": "float8_e5m2",
    "float8_e5m2fnuz": "float8_e5m2fnuz",
    "float8_e8m0fnu": "float8_e8m0fnu",
}
# Types kffi's kernel kit instantiates (kit_kernels.cc's dispatch_all).
KIT = {
    "bfloat16": "kffi::bfloat16",
    "float8_e4m3fn": "kffi::float8_e4m3fn",
    "float8_e5m2": "kffi::float8_e5m2",
}

SOURCE = r"""
#include <kffi/kffi.h>
#include <kffi/half.h>
#include <cstdint>
#include <string>
// The dtype and data pointer of each tensor, as the kernel sees them.
std::string Describe(kffi::ConstTensorView x) {
  return kffi::DataTypeToString(x.dtype()) + "@" +
         std::to_string(reinterpret_cast<uintptr_t>(x.data_ptr())) + "/" +
         std::to_string(x.ndim() > 0 ? x.stride(0) : 0);
}
std::string DescribeAll(kffi::Array<kffi::Tensor> xs) {
  std::string out;
  for (const kffi::Tensor& x : xs) out += Describe(x) + ";";
  return out;
}
// y[i] = i + 0.5 as bfloat16, written in place.
void FillBf16(kffi::TensorView y) {
  for (int64_t i = 0; i < y.numel(); ++i) y.data<kffi::bfloat16>()[i] = kffi::bfloat16(i + 0.5f);
}
KFFI_EXPORT_DOC(describe, Describe, "", "x");
KFFI_EXPORT_DOC(describe_all, DescribeAll, "", "xs");
KFFI_EXPORT_DOC(fill_bf16, FillBf16, "", "y");
"""


@pytest.fixture(scope="module")
def mod():
    return kffi.cpp.load_inline("ml_dtypes_probe", cpp_sources=SOURCE, quiet=True)


@pytest.fixture(scope="module")
def kit():
    return kffi.load_module(LibraryBuilder().build("kit_kernels", KERNELS / "kit_kernels.cc"))


@pytest.mark.parametrize("name", sorted(BYTE_TYPES))
def test_every_byte_sized_type_arrives_zero_copy(mod, name):
    t = getattr(ml_dtypes, name, None)
    if t is None:
        pytest.skip(f"this ml_dtypes has no {name}")
    x = np.zeros(6, dtype=t)
    dtype, rest = mod.describe(x).split("@")
    assert dtype == BYTE_TYPES[name]
    ptr, stride = rest.split("/")
    assert int(ptr) == x.ctypes.data and stride == "1"  # the array's memory, no copy
    v = x[1::2]  # a strided view: strides count elements of the dtype's size
    assert mod.describe(v).split("@")[1] == f"{v.ctypes.data}/2"
    # Inside a container: owned tensors that keep the arrays alive.
    held = [np.zeros(3, dtype=t), np.ones(2, dtype=t)]
    addrs = [a.ctypes.data for a in held]
    desc = kffi.to_kffi(held)
    del held
    gc.collect()
    assert mod.describe_all(desc) == "".join(f"{BYTE_TYPES[name]}@{p}/1;" for p in addrs)


@pytest.mark.parametrize("name", sorted(KIT))
def test_the_kits_instantiations_are_reachable_from_numpy(kit, name):
    x = np.arange(4).astype(getattr(ml_dtypes, name))
    assert kit.dispatch_all(x).startswith(KIT[name])


def test_a_kernel_writes_a_bfloat16_array_in_place(mod):
    y = np.zeros(4, dtype=ml_dtypes.bfloat16)
    mod.fill_bf16(y)
    assert y.astype(np.float32).tolist() == [0.5, 1.5, 2.5, 3.5]
    y.flags.writeable = False
    with pytest.raises(ValueError, match=r"^y: expected a writable tensor"):
        mod.fill_bf16(y)


def test_an_owned_tensor_keeps_the_array_alive(mod):
    x = np.array([1.5, -2.0, 3.25], dtype=ml_dtypes.bfloat16)
    t = kffi.from_dlpack(x)
    ptr = x.ctypes.data
    del x
    gc.collect()
    assert t.dtype == "bfloat16" and t.shape == (3,) and t.data_ptr == ptr
    assert mod.describe(t) == f"bfloat16@{ptr}/1"


def test_sub_byte_types_stay_refused(mod):
    t = getattr(ml_dtypes, "int4", None)
    if t is None:
        pytest.skip("this ml_dtypes has no int4")
    with pytest.raises(BufferError, match=r"^x: cannot import the numpy\.ndarray as a tensor"):
        mod.describe(np.zeros(4, dtype=t))
