"""tests/python/toolchain/test_kernel_kit.py: the kernel author's kit (kffi/half.h, kffi/dispatch.h,
typed accessors) through tests/python/kernels/kit_kernels.cc.

Conversions are exhaustive: every bit pattern of float16 and bfloat16 (2^16) and of the two fp8
formats (256) to float, and from float every such value, each midpoint between neighbours (ties
round to even), the floats just either side of each midpoint, and values past the largest,
compared bit for bit with NumPy (float16) and ml_dtypes (bfloat16, fp8). NaN compares as NaN
with its sign (payloads differ between libraries); NumPy's float16 payloads are compared too.
"""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import subprocess
from pathlib import Path

import kffi
import pytest

np = pytest.importorskip("numpy")
try:  # comes with jax; scripts/install_python.sh installs it for CI
    import ml_dtypes
except ImportError:
    ml_dtypes = None

from fake_dlpack import FakeDeviceTensor

REPO = Path(__file__).resolve().parents[3]

# name: (NumPy dtype of the values, dtype of the bits); bfloat16 and fp8 need ml_dtypes.
FORMATS = {"float16": (np.float16, np.uint16)}
if ml_dtypes is not None:
    FORMATS["bfloat16"] = (ml_dtypes.bfloat16, np.uint16)
    FORMATS["float8_e4m3fn"] = (ml_dtypes.float8_e4m3fn, np.uint8)
    FORMATS["float8_e5m2"] = (ml_dtypes.float8_e5m2, np.uint8)


@pytest.fixture(scope="module")
def kit(library_paths):
    return kffi.load_module(library_paths["kit_kernels"])


def all_patterns(fmt):
    _, bits_dtype = FORMATS[fmt]
    return np.arange(np.iinfo(bits_dtype).max + 1, dtype=np.int64).astype(bits_dtype)


def to_float(kit, fmt, bits):
    y = np.empty(bits.shape, np.float32)
    kit.bits_to_float(y, bits, fmt)
    return y


def from_float(kit, fmt, x):
    out = np.empty(np.shape(x), np.uint8 if fmt.startswith("float8") else np.uint16)
    kit.float_to_bits(out, np.ascontiguousarray(x, np.float32), fmt)
    return out


def assert_same_floats(got, want):
    """Bit for bit, except that a NaN only needs to be a NaN of the same sign."""
    got_bits, want_bits = got.view(np.uint32), want.view(np.uint32)
    nan = np.isnan(want)
    np.testing.assert_array_equal(np.isnan(got), nan)
    np.testing.assert_array_equal(got_bits[~nan], want_bits[~nan])
    np.testing.assert_array_equal(got_bits[nan] >> 31, want_bits[nan] >> 31)


def assert_same_bits(fmt, got, want):
    values, _ = FORMATS[fmt]
    got_nan = np.isnan(got.view(values).astype(np.float32))
    want_nan = np.isnan(want.view(values).astype(np.float32))
    np.testing.assert_array_equal(got_nan, want_nan)
    np.testing.assert_array_equal(got[~want_nan], want[~want_nan])
    sign = np.array(1 << (8 * got.itemsize - 1), got.dtype)
    np.testing.assert_array_equal(got[want_nan] & sign, want[want_nan] & sign)


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_every_pattern_converts_to_float_exactly(kit, fmt):
    values, _ = FORMATS[fmt]
    bits = all_patterns(fmt)
    assert_same_floats(to_float(kit, fmt, bits), bits.view(values).astype(np.float32))


def test_float16_nan_payloads_convert_as_numpy_does(kit):
    bits = all_patterns("float16")
    np.testing.assert_array_equal(
        to_float(kit, "float16", bits).view(np.uint32),
        bits.view(np.float16).astype(np.float32).view(np.uint32),
    )


def probe_floats(fmt):
    """Every finite value, the midpoints between neighbours and the floats just beside them,
    the infinities, NaNs and the float32 extremes."""
    values, _ = FORMATS[fmt]
    v = all_patterns(fmt).view(values).astype(np.float32)
    finite = np.unique(v[np.isfinite(v)]).astype(np.float64)  # sorted, one zero
    mids = (finite[:-1] + finite[1:]) / 2  # exact in float64
    top = finite[-1]
    beyond = top + (finite[-1] - finite[-2]) * np.array([0.25, 0.5, 0.75, 1, 1.5, 2, 1e3])
    with np.errstate(over="ignore"):  # bfloat16's largest values go past float32: inf
        probes = np.concatenate([finite, mids, beyond, -beyond]).astype(np.float32)
    near = np.concatenate(
        [
            np.nextafter(probes, np.float32(np.inf)),
            np.nextafter(probes, np.float32(-np.inf)),
        ]
    )
    special = np.array(
        [0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, 1e-45, -1e-45, 1e-38, 3.4e38, -3.4e38],
        np.float32,
    )
    payload_nans = np.array([0x7F800001, 0xFFC01234, 0x7FBFFFFF], np.uint32).view(np.float32)
    out = np.concatenate([probes, near, special, payload_nans, -probes])
    assert mids.size + 1 == finite.size and (mids.astype(np.float32) == mids).all()
    return out


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_floats_round_to_nearest_even(kit, fmt):
    values, _ = FORMATS[fmt]
    x = probe_floats(fmt)
    with np.errstate(invalid="ignore", over="ignore"):
        want = x.astype(values).view(FORMATS[fmt][1])
    assert_same_bits(fmt, from_float(kit, fmt, x), want)


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_every_value_survives_a_round_trip(kit, fmt):
    bits = all_patterns(fmt)
    back = from_float(kit, fmt, to_float(kit, fmt, bits))
    values, _ = FORMATS[fmt]
    nan = np.isnan(bits.view(values).astype(np.float32))
    np.testing.assert_array_equal(back[~nan], bits[~nan])


def test_ml_dtypes_is_there_for_the_exhaustive_tests():
    if ml_dtypes is None:
        pytest.skip("ml_dtypes is missing: bfloat16 and fp8 are not compared exhaustively")
    assert len(FORMATS) == 4


def test_ties_go_to_even_and_overflow_as_the_formats_say(kit):
    # 1 + 2^-11 lies halfway between 1 and the next half (odd mantissa 1): rounds down to even.
    assert from_float(kit, "float16", np.array([1 + 2**-11, 1 + 3 * 2**-11]))[0] == 0x3C00
    assert from_float(kit, "float16", np.array([1 + 3 * 2**-11]))[0] == 0x3C02
    assert from_float(kit, "float16", np.array([65504, 65519, 65520]))[2] == 0x7C00  # inf
    assert list(from_float(kit, "float8_e4m3fn", np.array([448, 464, 465, np.inf]))) == [
        0x7E,
        0x7E,
        0x7F,  # NaN: e4m3fn has no infinity
        0x7F,
    ]
    assert list(from_float(kit, "float8_e5m2", np.array([57344, 61439, 61440]))) == [
        0x7B,
        0x7B,
        0x7C,
    ]
    # The smallest subnormal half and half of it (a tie with zero: rounds to even zero).
    assert list(from_float(kit, "float16", np.array([2**-24, 2**-25, 3 * 2**-26]))) == [1, 0, 1]


ALL_DTYPES = {
    "bool": "bool:1",
    "int8": "int8_t:1",
    "int16": "int16_t:2",
    "int32": "int32_t:4",
    "int64": "int64_t:8",
    "uint8": "uint8_t:1",
    "uint16": "uint16_t:2",
    "uint32": "uint32_t:4",
    "uint64": "uint64_t:8",
    "float16": "kffi::half:2",
    "float32": "float:4",
    "float64": "double:8",
    "bfloat16": "kffi::bfloat16:2",
    "float8_e4m3fn": "kffi::float8_e4m3fn:1",
    "float8_e5m2": "kffi::float8_e5m2:1",
}


def cpu_tensor(dtype, n=4):
    return FakeDeviceTensor(n, dtype, device=(1, 0))


@pytest.mark.parametrize("dtype", sorted(ALL_DTYPES))
def test_every_listed_dtype_reaches_its_instantiation(kit, dtype):
    assert kit.dispatch_all(cpu_tensor(dtype)) == ALL_DTYPES[dtype]


def test_an_unlisted_dtype_is_a_type_error_in_the_argument_format(kit):
    with pytest.raises(TypeError) as e:
        kit.dispatch_all(cpu_tensor("float8_e4m3fnuz"))
    assert str(e.value).startswith("x.dtype: expected bool|int8|int16|int32|int64|uint8|")
    assert str(e.value).endswith("float8_e5m2, got float8_e4m3fnuz")
    message = r"^x\.dtype: expected float32\|float16\|bfloat16, got int32$"
    with pytest.raises(TypeError, match=message):
        kit.dispatch_floats(np.zeros(3, np.int32))


def test_dispatch_reads_the_elements_as_the_dispatched_type(kit):
    assert kit.dispatch_floats(np.array([1.5, 2.25, -4], np.float32)) == pytest.approx(-0.25)
    assert kit.dispatch_floats(np.array([1.5, 2.25, -4], np.float16)) == pytest.approx(-0.25)


def test_the_contract_list_is_the_instantiated_list(kit):
    meta = kit.metadata("cast_contract")
    x = next(p for p in meta["params"] if p["name"] == "x")
    assert kit.contract_list_names() == "|".join(x["dtypes"])
    assert x["dtypes"] == ["float16", "bfloat16", "float8_e4m3fn", "int8"]


def test_contract_driven_dispatch_refuses_what_the_contract_refuses(kit):
    for dtype in ALL_DTYPES:
        allowed = dtype in ("float16", "bfloat16", "float8_e4m3fn", "int8")
        x = cpu_tensor(dtype)
        if allowed:
            assert kit.contract_dispatch_name(x) == ALL_DTYPES[dtype].rsplit(":", 1)[0]
            kit.cast_contract(cpu_tensor("float32"), x)
            continue
        with pytest.raises(TypeError, match=r"^x\.dtype: expected float16\|bfloat16\|"):
            kit.contract_dispatch_name(x)
        # The contract's own check comes first, and names the list as the contract writes it.
        with pytest.raises(TypeError, match=r"^x\.dtype: expected float16 \| bfloat16 \| float8"):
            kit.cast_contract(cpu_tensor("float32"), x)


def test_contract_driven_dispatch_computes(kit):
    x = np.array([1.5, -2, 65504], np.float16)
    y = np.zeros(3, np.float64)
    kit.cast_contract(y, x)
    np.testing.assert_array_equal(y, [1.5, -2, 65504])
    y32 = np.zeros(3, np.float32)
    kit.cast_contract(y32, np.array([-3, 7, 127], np.int8))
    np.testing.assert_array_equal(y32, [-3, 7, 127])


def test_accessor_follows_strides_and_byte_offset(kit):
    base = np.arange(48, dtype=np.float32).reshape(6, 8)
    for view in [base, base.T, base[1:5:2, 3:7], base[::-1, ::3], base.T[2:, 1:4]]:
        rows, cols = view.shape
        want = sum(float(view[i, j]) * (i + 1) * 10.0**j for i in range(rows) for j in range(cols))
        assert kit.accessor_weighted(view) == pytest.approx(want)


def test_accessor_writes_through_strides(kit):
    base = np.zeros((5, 6), np.float32)
    kit.accessor_fill(base[1:4, ::2])
    want = np.zeros((5, 6), np.float32)
    want[1:4, ::2] = np.arange(3)[:, None] * 100 + np.arange(3)[None, :]
    np.testing.assert_array_equal(base, want)


def test_accessor_refuses_a_wrong_ndim_and_checks_indices(kit):
    with pytest.raises(ValueError, match=r"^accessor<T, N>\(\)\.ndim: expected 2, got 1$"):
        kit.accessor_weighted(np.zeros(3, np.float32))
    assert kit.accessor_at(np.array([1, 2, 3], np.float32), 2) == 3
    with pytest.raises(IndexError, match="index 3 is out of bounds for a dimension of size 3"):
        kit.accessor_at(np.array([1, 2, 3], np.float32), 3)
    with pytest.raises(IndexError, match="index -1 is out of bounds"):
        kit.accessor_at(np.array([1, 2, 3], np.float32), -1)


def test_debug_data_checks_the_element_type(kit):
    assert kit.first_as_float(np.array([2.5], np.float32)) == 2.5
    message = r"^data<float32>\(\): expected a tensor of float32, got a tensor of float64$"
    with pytest.raises(TypeError, match=message):
        kit.first_as_float(np.array([2.5], np.float64))
    with pytest.raises(TypeError, match=r"got a tensor of int32$"):
        kit.accessor_weighted(np.zeros((2, 2), np.float64).astype(np.int32))


@pytest.mark.skipif(not kffi.cpp.nvcc_available(), reason="no nvcc found")
def test_the_cuda_kit_test_compiles_with_nvcc(tmp_path):
    """tests/cuda/test_kernel_kit.cu (device code using the types, their __half/__nv_bfloat16/
    fp8 conversions and DispatchDtype) builds with nvcc; CTest's cuda.kernel_kit runs it on a
    GPU."""
    src = REPO / "tests" / "cuda" / "test_kernel_kit.cu"
    cmd = ["nvcc", "-std=c++17", "-c", f"-I{kffi.libinfo.include_dir()}", str(src)]
    cmd += ["-Xcompiler=-Wall,-Wextra,-Werror", "-o", str(tmp_path / "kit.o")]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
