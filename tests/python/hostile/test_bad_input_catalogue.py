"""tests/python/hostile/test_bad_input_catalogue.py: the bad-input catalogue, from Python: every
kind of argument, every producer of tensors available here, and contracts.

Every case raises one exception type, and its message names the argument it blames (by position
and parameter name) and, where the message has them, what was expected and what was received.
The loader, metadata, kffi.compile, containers, hostile objects and deep nesting are in
test_bad_input_catalogue_system.py; the fixtures and hostile objects in bad_input_support.py.
"""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import array

import kffi
import pytest
from bad_input_support import (  # noqa: F401  (fixtures)
    C_SCALARS,
    C_SHAPE,
    C_TUPLE,
    SIG,
    DLPackMajorTwo,
    DLPackNegativeShape,
    DLPackNotACapsule,
    DLPackRefuses,
    DLPackWrongCapsule,
    as_param,
    bad_metadata_module_fixture,
    case_id,
    catalogue_module_fixture,
    check_case,
    env_fixture,
    f32,
    jnp,
    mismatch,
    needs_jax,
    needs_torch,
    np,
    read_only,
    run_all,
    torch,
)

CASES = [
    # ---- every kind of argument, to a typed export (the signature names the parameter) --------
    ("int_from_str", lambda e: e.c.takes_int("1"), TypeError, [mismatch(SIG["int"], "int", "str")]),
    (
        "int_from_float",
        lambda e: e.c.takes_int(1.5),
        TypeError,
        [mismatch(SIG["int"], "int", "float")],
    ),
    (
        "int_from_none",
        lambda e: e.c.takes_int(None),
        TypeError,
        [mismatch(SIG["int"], "int", "None")],
    ),
    (
        "int_from_list",
        lambda e: e.c.takes_int([1]),
        TypeError,
        [mismatch(SIG["int"], "int", "list")],
    ),
    (
        "int_above_int64",
        lambda e: e.c.takes_int(2**63),
        OverflowError,
        [
            "n: Python int too large to convert to int64 (kffi ints are 64-bit) (argument #0 of `"
            + SIG["int"]
            + "`)"
        ],
    ),
    (
        "int_below_int64",
        lambda e: e.c.takes_int(-(2**63) - 1),
        OverflowError,
        ["n: Python int too large to convert to int64", "(argument #0 of `" + SIG["int"]],
    ),
    (
        "int32_out_of_range",
        lambda e: e.c.takes_int32(2**40),
        TypeError,
        [mismatch(SIG["int32"], "int32", "int (1099511627776 is out of range for int32)")],
    ),
    (
        "uint8_negative",
        lambda e: e.c.takes_uint8(-1),
        TypeError,
        [mismatch(SIG["uint8"], "uint8", "int (-1 is out of range for uint8)")],
    ),
    (
        "uint8_too_big",
        lambda e: e.c.takes_uint8(256),
        TypeError,
        [mismatch(SIG["uint8"], "uint8", "int (256 is out of range for uint8)")],
    ),
    (
        "float_from_str",
        lambda e: e.c.takes_float("x"),
        TypeError,
        [mismatch(SIG["float"], "float", "str")],
    ),
    (
        "float_from_none",
        lambda e: e.c.takes_float(None),
        TypeError,
        [mismatch(SIG["float"], "float", "None")],
    ),
    (
        "float_from_tensor",
        lambda e: e.c.takes_float(f32(2)),
        TypeError,
        [mismatch(SIG["float"], "float", "numpy.ndarray")],
    ),
    (
        "bool_from_str",
        lambda e: e.c.takes_bool("yes"),
        TypeError,
        [mismatch(SIG["bool"], "bool", "str")],
    ),
    (
        "bool_from_none",
        lambda e: e.c.takes_bool(None),
        TypeError,
        [mismatch(SIG["bool"], "bool", "None")],
    ),
    ("str_from_int", lambda e: e.c.takes_str(3), TypeError, [mismatch(SIG["str"], "str", "int")]),
    (
        "str_from_bytes",
        lambda e: e.c.takes_str(b"x"),
        TypeError,
        [mismatch(SIG["str"], "str", "bytes")],
    ),
    (
        "str_lone_surrogate",
        lambda e: e.c.takes_str("ab\ud800cd"),
        UnicodeEncodeError,
        ["s: surrogates not allowed (argument #0 of `" + SIG["str"] + "`)"],
    ),
    (
        "str_long_lone_surrogate",
        lambda e: e.c.takes_str("x" * 20 + "\udfff"),
        UnicodeEncodeError,
        ["s: surrogates not allowed (argument #0 of `" + SIG["str"] + "`)"],
    ),
    (
        "bytes_from_str",
        lambda e: e.c.takes_bytes("x"),
        TypeError,
        [mismatch(SIG["bytes"], "bytes", "str")],
    ),
    (
        "bytes_from_int",
        lambda e: e.c.takes_bytes(1),
        TypeError,
        [mismatch(SIG["bytes"], "bytes", "int")],
    ),
    (
        "tensor_from_int",
        lambda e: e.c.takes_tensor(3),
        TypeError,
        [mismatch(SIG["tensor"], "Tensor", "int")],
    ),
    (
        "tensor_from_list",
        lambda e: e.c.takes_tensor([1.0, 2.0]),
        TypeError,
        [mismatch(SIG["tensor"], "Tensor", "list")],
    ),
    (
        "tensor_from_none",
        lambda e: e.c.takes_tensor(None),
        TypeError,
        [mismatch(SIG["tensor"], "Tensor", "None")],
    ),
    (
        "optional_from_str",
        lambda e: e.c.takes_optional("x"),
        TypeError,
        [mismatch(SIG["optional"], "Optional<int>", "str")],
    ),
    (
        "optional_from_float",
        lambda e: e.c.takes_optional(1.5),
        TypeError,
        [mismatch(SIG["optional"], "Optional<int>", "float")],
    ),
    (
        "tuple_from_int",
        lambda e: e.c.takes_tuple(3),
        TypeError,
        [mismatch(SIG["tuple"], "Tuple<int, str>", "int")],
    ),
    (
        "tuple_too_short",
        lambda e: e.c.takes_tuple((1,)),
        TypeError,
        [mismatch(SIG["tuple"], "Tuple<int, str>", "tuple[size 1]")],
    ),
    (
        "tuple_wrong_element",
        lambda e: e.c.takes_tuple(("a", "b")),
        TypeError,
        [mismatch(SIG["tuple"], "Tuple<int, str>", "tuple[index 0: str]")],
    ),
    (
        "array_from_int",
        lambda e: e.c.takes_array(3),
        TypeError,
        [mismatch(SIG["array"], "Array<int>", "int")],
    ),
    (
        "array_wrong_element",
        lambda e: e.c.takes_array([1, "b"]),
        TypeError,
        [mismatch(SIG["array"], "Array<int>", "list[index 1: str]")],
    ),
    (
        "array_element_overflow",
        lambda e: e.c.takes_array([1, 2**70]),
        OverflowError,
        ["xs: Python int too large to convert to int64", "(argument #0 of `" + SIG["array"]],
    ),
    (
        "map_from_list",
        lambda e: e.c.takes_map([("a", 1)]),
        TypeError,
        [mismatch(SIG["map"], "Map<str, int>", "list")],
    ),
    (
        "map_wrong_key",
        lambda e: e.c.takes_map({1: 2}),
        TypeError,
        [mismatch(SIG["map"], "Map<str, int>", "dict[key 1: int]")],
    ),
    (
        "map_wrong_value",
        lambda e: e.c.takes_map({"a": "b"}),
        TypeError,
        [mismatch(SIG["map"], "Map<str, int>", "dict['a': str]")],
    ),
    (
        "map_value_overflow",
        lambda e: e.c.takes_map({"a": 2**64}),
        OverflowError,
        ["m: Python int too large", "(argument #0 of `" + SIG["map"]],
    ),
    (
        "stream_from_str",
        lambda e: e.c.takes_stream("s"),
        TypeError,
        [mismatch(SIG["stream"], "void*", "str")],
    ),
    (
        "stream_from_float",
        lambda e: e.c.takes_stream(1.5),
        TypeError,
        [mismatch(SIG["stream"], "void*", "float")],
    ),
    (
        "function_from_int",
        lambda e: e.c.takes_function(3),
        TypeError,
        [mismatch(SIG["function"], "Function", "int")],
    ),
    (
        "dtype_from_int",
        lambda e: e.c.takes_dtype(3),
        TypeError,
        [mismatch(SIG["dtype"], "dtype", "int")],
    ),
    (
        "dtype_from_bad_str",
        lambda e: e.c.takes_dtype("flot32"),
        ValueError,
        ["d: Cannot parse data type from string `flot32` (argument #0 of `" + SIG["dtype"] + "`)"],
    ),
    (
        "device_from_str",
        lambda e: e.c.takes_device("cuda"),
        TypeError,
        [mismatch(SIG["device"], "Device", "str")],
    ),
    (
        "shape_from_str",
        lambda e: e.c.takes_shape("x"),
        TypeError,
        [mismatch(SIG["shape"], "Shape", "str")],
    ),
    (
        "shape_from_floats",
        lambda e: e.c.takes_shape([1.5]),
        TypeError,
        [mismatch(SIG["shape"], "Shape", "list[index 0: float]")],
    ),
    (
        "too_few_arguments",
        lambda e: e.c.two_ints(1),
        TypeError,
        ["two_ints: expected 2 arguments, got 1 (`" + SIG["two"] + "`)"],
    ),
    (
        "too_many_arguments",
        lambda e: e.c.two_ints(1, 2, 3),
        TypeError,
        ["two_ints: expected 2 arguments, got 3 (`" + SIG["two"] + "`)"],
    ),
    (
        "unknown_keyword",
        lambda e: e.c.two_ints(1, c=2),
        TypeError,
        ["unexpected keyword argument 'c'"],
    ),
    (
        "duplicate_keyword",
        lambda e: e.c.two_ints(1, a=2),
        TypeError,
        ["multiple values for argument 'a'"],
    ),
    ("missing_keyword", lambda e: e.c.two_ints(b=2), TypeError, ["missing required argument 'a'"]),
    (
        "second_argument_wrong",
        lambda e: e.c.two_ints(1, "2"),
        TypeError,
        [mismatch(SIG["two"], "int", "str", i=1)],
    ),
    # ---- producers of tensors -----------------------------------------------------------------
    (
        "array_array_as_tensor",
        lambda e: e.c.takes_tensor(array.array("f", [1, 2])),
        TypeError,
        [mismatch(SIG["tensor"], "Tensor", "array.array")],
    ),
    (
        "bytes_as_tensor",
        lambda e: e.c.takes_tensor(b"\0\0\0\0"),
        TypeError,
        [mismatch(SIG["tensor"], "Tensor", "bytes")],
    ),
    (
        "memoryview_as_tensor",
        lambda e: e.c.takes_tensor(memoryview(b"abcd")),
        TypeError,
        [mismatch(SIG["tensor"], "Tensor", "memoryview")],
    ),
    (
        "bytearray_as_tensor",
        lambda e: e.c.takes_tensor(bytearray(4)),
        TypeError,
        [mismatch(SIG["tensor"], "Tensor", "bytearray")],
    ),
    (
        "numpy_read_only_to_writer",
        lambda e: e.c.writes_tensor(read_only(f32(4))),
        ValueError,
        [
            "x: expected a writable tensor (the function may write it), got a read-only tensor "
            "(argument #0 of `writes_tensor(x: Tensor(mut)) -> None`)"
        ],
    ),
    (
        "numpy_frombuffer_bytes_to_writer",
        lambda e: e.c.writes_tensor(np.frombuffer(b"\0" * 16, np.float32)),
        ValueError,
        ["x: expected a writable tensor", "got a read-only tensor (argument #0 of `writes_tensor("],
    ),
    (
        "numpy_wrong_ndim",
        lambda e: e.c.checked(f32(3)),
        ValueError,
        ["x.ndim: expected 2, got 1 (shape [3])"],
    ),
    (
        "numpy_wrong_dtype",
        lambda e: e.c.checked(np.zeros((2, 2), np.float64)),
        TypeError,
        ["x.dtype: expected float32, got float64"],
    ),
    (
        "numpy_not_contiguous",
        lambda e: e.c.checked(f32(4, 4)[:, ::2]),
        ValueError,
        ["x.strides: expected contiguous, got [4, 2] for shape [4, 2]"],
    ),
    (
        "numpy_misaligned",
        lambda e: e.c.checked(np.zeros(17, np.float32)[1:].reshape(4, 4)),
        ValueError,
        ["x: expected data aligned to 16 bytes, got data aligned to 4 bytes"],
    ),
    (
        "numpy_int_to_float_kernel",
        lambda e: e.k.fill(np.zeros(3, np.int32), 1.0),
        TypeError,
        ["fill expects a float32 or float64 tensor, got int32"],
    ),
    (
        "numpy_huge_strides",
        lambda e: e.c.takes_tensor(
            np.lib.stride_tricks.as_strided(f32(2), shape=(2, 2), strides=(2**62, 4))
        ),
        ValueError,
        [
            "x: a tensor of shape (2, 2) and dtype float32 has an impossible size",
            "(argument #0 of `" + SIG["tensor"] + "`)",
        ],
    ),
    (
        "numpy_object_array",
        lambda e: e.c.takes_tensor(np.array([object()])),
        (TypeError, BufferError),
        ["x: cannot import the numpy.ndarray as a tensor: ", "(argument #0 of `" + SIG["tensor"]],
    ),
    (
        "numpy_big_endian_to_checked",
        lambda e: e.c.checked(np.zeros((2, 2), ">f4")),
        (ValueError, BufferError, TypeError),
        ["x: cannot import the numpy.ndarray as a tensor: "],
    ),
    pytest.param(
        "torch_int_to_float_kernel",
        lambda e: e.k.fill(torch().zeros(3, dtype=torch().int32), 1.0),
        TypeError,
        ["fill expects a float32 or float64 tensor, got int32"],
        marks=needs_torch,
    ),
    pytest.param(
        "torch_wrong_ndim",
        lambda e: e.c.checked(torch().zeros(3)),
        ValueError,
        ["x.ndim: expected 2, got 1 (shape [3])"],
        marks=needs_torch,
    ),
    pytest.param(
        "torch_conj_view",
        lambda e: e.c.takes_tensor(torch().zeros(2, dtype=torch().complex64).conj()),
        ValueError,
        [
            "x: the torch tensor is a lazy conjugate view",
            "resolve_conj() (argument #0 of `" + SIG["tensor"],
        ],
        marks=needs_torch,
    ),
    pytest.param(
        "torch_neg_view",
        lambda e: e.c.takes_tensor(torch().zeros(2, dtype=torch().complex64).conj().imag),
        ValueError,
        [
            "x: the torch tensor is a lazy negative view",
            "resolve_neg() (argument #0 of `" + SIG["tensor"],
        ],
        marks=needs_torch,
    ),
    pytest.param(
        "torch_meta_device",
        lambda e: e.c.takes_tensor(torch().zeros(2, device="meta")),
        ValueError,
        [
            "x: a torch tensor on the meta device",
            "shapes alone) (argument #0 of `" + SIG["tensor"] + "`)",
        ],
        marks=needs_torch,
    ),
    pytest.param(
        "torch_wrong_dtype_contract",
        lambda e: e.c.c_dtype(torch().zeros(3, dtype=torch().int64)),
        TypeError,
        ["x.dtype: expected float32|float64, got int64 (argument #0"],
        marks=needs_torch,
    ),
    pytest.param(
        "jax_to_writer",
        lambda e: e.c.writes_tensor(jnp().zeros(4, jnp().float32)),
        ValueError,
        ["x: expected a writable tensor (the function may write it), got a read-only tensor"],
        marks=needs_jax,
    ),
    pytest.param(
        "jax_to_mut_contract",
        lambda e: e.c.c_mut(jnp().zeros(4, jnp().float32)),
        ValueError,
        [
            "y: expected a writable tensor (the parameter is declared `mut`), got a read-only tensor (argument #0"
        ],
        marks=needs_jax,
    ),
    pytest.param(
        "jax_wrong_ndim_contract",
        lambda e: e.c.c_shape(jnp().zeros(3, jnp().float32), jnp().zeros(3, jnp().float32)),
        ValueError,
        ["a.ndim: expected 2, got 1 (argument #0"],
        marks=needs_jax,
    ),
    (
        "dlpack_capsule_wrong_name",
        lambda e: e.c.takes_tensor(DLPackWrongCapsule()),
        TypeError,
        [
            "x: cannot import the DLPackWrongCapsule as a tensor: DLPackWrongCapsule.__dlpack__() did not return a DLPack capsule (argument #0 of `"
            + SIG["tensor"]
            + "`)"
        ],
    ),
    (
        "dlpack_not_a_capsule",
        lambda e: e.c.takes_tensor(DLPackNotACapsule()),
        TypeError,
        [
            "x: cannot import the DLPackNotACapsule as a tensor: DLPackNotACapsule.__dlpack__() did not return a DLPack capsule (argument #0 of `"
            + SIG["tensor"]
            + "`)"
        ],
    ),
    (
        "dlpack_producer_refuses",
        lambda e: e.c.takes_tensor(DLPackRefuses()),
        BufferError,
        [
            "x: cannot import the DLPackRefuses as a tensor: the producer refuses to export (argument #0 of `"
            + SIG["tensor"]
            + "`)"
        ],
    ),
    (
        "dlpack_negative_shape",
        lambda e: e.c.takes_tensor(DLPackNegativeShape([4, -1])),
        ValueError,
        [
            "x: cannot import the DLPackNegativeShape as a tensor: ",
            "negative size in shape [4, -1] (argument #0 of `" + SIG["tensor"] + "`)",
        ],
    ),
    (
        "dlpack_overflowing_shape",
        lambda e: e.c.takes_tensor(DLPackNegativeShape([2**62, 2**62])),
        ValueError,
        [
            "x: cannot import the DLPackNegativeShape as a tensor: ",
            "[4611686018427387904, 4611686018427387904]",
            "overflows int64 (argument #0 of `" + SIG["tensor"] + "`)",
        ],
    ),
    (
        "dlpack_unknown_major_version",
        lambda e: e.c.takes_tensor(DLPackMajorTwo()),
        ValueError,
        [
            "x: cannot import the DLPackMajorTwo as a tensor: Unsupported DLPack major version 2",
            "(argument #0 of `" + SIG["tensor"] + "`)",
        ],
    ),
    (
        "from_dlpack_int",
        lambda e: kffi.from_dlpack(3),
        TypeError,
        ["Expected a tensor (an object with __dlpack__), got int"],
    ),
    (
        "from_dlpack_memoryview",
        lambda e: kffi.from_dlpack(memoryview(b"abcd")),
        TypeError,
        ["Expected a tensor (an object with __dlpack__), got memoryview"],
    ),
    (
        "from_dlpack_array_array",
        lambda e: kffi.from_dlpack(array.array("f", [1.0])),
        TypeError,
        ["got array.array"],
    ),
    (
        "from_dlpack_negative_shape",
        lambda e: kffi.from_dlpack(DLPackNegativeShape([-3])),
        ValueError,
        ["negative size in shape [-3]"],
    ),
    # ---- contracts ----------------------------------------------------------------------------
    (
        "contract_count",
        lambda e: e.c.c_shape(f32(3, 4)),
        TypeError,
        ["c_shape: expected 2 arguments, got 1", C_SHAPE],
    ),
    (
        "contract_type",
        lambda e: e.c.c_shape(3, f32(3)),
        TypeError,
        ["a: expected Tensor, got int (argument #0 of " + C_SHAPE],
    ),
    (
        "contract_symbol_mismatch",
        lambda e: e.c.c_shape(f32(3, 4), f32(2)),
        ValueError,
        ["b.shape[0]: expected n = 3 (as a.shape[0]), got 2 (argument #1 of " + C_SHAPE],
    ),
    (
        "contract_literal_dim",
        lambda e: e.c.c_shape(f32(3, 5), f32(3)),
        ValueError,
        ["a.shape[1]: expected 4, got 5 (argument #0 of " + C_SHAPE],
    ),
    (
        "contract_ndim",
        lambda e: e.c.c_shape(f32(3), f32(3)),
        ValueError,
        ["a.ndim: expected 2, got 1 (argument #0 of " + C_SHAPE],
    ),
    (
        "contract_dtype",
        lambda e: e.c.c_dtype(np.zeros(3, np.int32)),
        TypeError,
        ["x.dtype: expected float32|float64, got int32 (argument #0"],
    ),
    (
        "contract_device",
        lambda e: e.c.c_device(f32(3)),
        ValueError,
        ["x.device: expected cuda, got cpu (argument #0"],
    ),
    (
        "contract_align",
        lambda e: e.c.c_align(f32(9)[1:]),
        ValueError,
        ["x: expected data aligned to 64 bytes, got data aligned to 4 bytes (argument #0"],
    ),
    (
        "contract_divisibility",
        lambda e: e.c.c_div(f32(6)),
        ValueError,
        ["x.shape[0]: expected n divisible by 4, got 6 (argument #0"],
    ),
    (
        "contract_mut_read_only",
        lambda e: e.c.c_mut(read_only(f32(4))),
        ValueError,
        [
            "y: expected a writable tensor (the parameter is declared `mut`), got a read-only tensor (argument #0"
        ],
    ),
    (
        "contract_mut_bytes_buffer",
        lambda e: e.c.c_mut(np.frombuffer(b"\0" * 16, np.float32)),
        ValueError,
        ["y: expected a writable tensor", "(argument #0"],
    ),
    (
        "contract_contiguous",
        lambda e: e.c.c_contig(f32(4, 4)[:, ::2]),
        ValueError,
        ["x.strides: expected contiguous, got [4, 2] for shape [4, 2] (argument #0"],
    ),
    (
        "contract_scalar_range",
        lambda e: e.c.c_scalars(11, 1.0, True),
        ValueError,
        ["k: expected a value in range [0, 10], got 11 (argument #0 of " + C_SCALARS],
    ),
    (
        "contract_scalar_below_range",
        lambda e: e.c.c_scalars(-1, 1.0, True),
        ValueError,
        ["k: expected a value in range [0, 10], got -1 (argument #0"],
    ),
    (
        "contract_scalar_type",
        lambda e: e.c.c_scalars(1, "x", True),
        TypeError,
        ["s: expected float, got str (argument #1 of " + C_SCALARS],
    ),
    (
        "contract_bool_type",
        lambda e: e.c.c_scalars(1, 1.0, "x"),
        TypeError,
        ["flag: expected bool, got str (argument #2 of " + C_SCALARS],
    ),
    (
        "contract_optional_shape",
        lambda e: e.c.c_optional(f32(5)),
        ValueError,
        ["b.shape[0]: expected 4, got 5 (argument #0"],
    ),
    (
        "contract_optional_type",
        lambda e: e.c.c_optional(1),
        TypeError,
        ["b: expected", "got int (argument #0"],
    ),
    (
        "contract_tuple_element_type",
        lambda e: e.c.c_tuple((f32(3), "x")),
        TypeError,
        ["t[1]: expected int, got str (in argument #0 of " + C_TUPLE],
    ),
    (
        "contract_tuple_element_ndim",
        lambda e: e.c.c_tuple((f32(3, 3), 1)),
        ValueError,
        ["t[0].ndim: expected 1, got 2 (in argument #0 of " + C_TUPLE],
    ),
    ("contract_tuple_size", lambda e: e.c.c_tuple((f32(3),)), TypeError, ["t", "argument #0"]),
    (
        "contract_stream_type",
        lambda e: e.c.c_stream(f32(3), "x"),
        TypeError,
        ["s: expected Stream (an opaque pointer, an int handle or None), got str (argument #1"],
    ),
]


def test_ids_are_unique_and_the_catalogue_is_large():
    from test_bad_input_catalogue_system import CASES as SYSTEM_CASES
    from test_bad_input_catalogue_system import OTHER_CASES

    ids = [case_id(c) for c in CASES + SYSTEM_CASES + OTHER_CASES]
    assert len(ids) == len(set(ids))
    assert len(CASES) + len(SYSTEM_CASES) >= 150


@pytest.mark.parametrize("action,exc_type,fragments", [as_param(c) for c in CASES])
def test_bad_input(env, action, exc_type, fragments):
    check_case(env, action, exc_type, fragments)


def test_process_is_healthy_after_the_catalogue(env):
    run_all(env, CASES)
    assert env.c.takes_int(41) == 41
    assert env.c.two_ints(a=1, b=2) == 3
    assert env.c.takes_array([1, 2, 3]) == 6
    x = np.zeros(3, np.float32)
    env.k.fill(x, 2.0)
    assert x.tolist() == [2.0, 2.0, 2.0]
