"""tests/python/test_bad_input_catalogue.py: the bad-input catalogue, from Python.

Every case raises one exception type, and its message names the argument it blames (by position,
by parameter name, or as the path, option or key) and, where the message has them, what was
expected and what was received. Cases cover every kind of argument (int, float, bool, str, bytes,
tensor, optional, tuple, array, map, stream, function, dtype, device, shape), every producer
available here (NumPy, torch CPU, JAX CPU, DLPack capsules, array.array, bytes, memoryview),
contracts, the loader, kffi.compile's options (those refused before compiling), containers,
hostile __index__/__float__/__dlpack__ that mutate or raise, deep nesting and malformed metadata.
After the whole catalogue the process still works.
"""

from __future__ import annotations

import array
import ctypes
import dataclasses
import importlib.util
import os
import sys

import kffi
import pytest

np = pytest.importorskip("numpy")

HAVE_TORCH = importlib.util.find_spec("torch") is not None
HAVE_JAX = importlib.util.find_spec("jax") is not None
needs_torch = pytest.mark.skipif(not HAVE_TORCH, reason="torch is not installed")
needs_jax = pytest.mark.skipif(not HAVE_JAX, reason="jax is not installed")


@dataclasses.dataclass
class Env:
    c: kffi.Module  # tests/python/kernels/catalogue_kernels.cc
    bad: kffi.Module  # tests/python/kernels/bad_metadata_kernels.cc
    k: kffi.Module  # tensor kernels
    t: object  # the testing.* globals
    tmp: object  # a temporary folder (pathlib.Path)


@pytest.fixture(scope="module")
def catalogue_module(library_paths):
    return kffi.load_module(library_paths["catalogue_kernels"])


@pytest.fixture(scope="module")
def bad_metadata_module(library_paths):
    return kffi.load_module(library_paths["bad_metadata_kernels"])


@pytest.fixture
def env(catalogue_module, bad_metadata_module, tensor_kernels, t, tmp_path):
    return Env(catalogue_module, bad_metadata_module, tensor_kernels, t, tmp_path)


def f32(*shape):
    return np.zeros(shape, np.float32)


def read_only(a):
    a = np.array(a)
    a.flags.writeable = False
    return a


def torch():
    import torch as _torch

    return _torch


def jnp():
    import jax.numpy as _jnp

    return _jnp


# ---- hostile objects ---------------------------------------------------------------------------


class RaisingIndex:
    def __index__(self):
        raise ValueError("__index__ refused")


class MutatingIndex:
    """Clears the list it sits in, then refuses: the converter must not read freed items."""

    def __init__(self, owner):
        self.owner = owner

    def __index__(self):
        self.owner.clear()
        self.owner.extend(object() for _ in range(100))
        raise ArithmeticError("__index__ mutated its list")


class MutatingDictIndex:
    def __init__(self, owner):
        self.owner = owner

    def __index__(self):
        self.owner.clear()
        raise LookupError("__index__ emptied its dict")


class RaisingFloat:
    def __float__(self):
        raise ArithmeticError("__float__ refused")


class StrFails(Exception):
    def __str__(self):
        raise RuntimeError("and so does its str()")


class DLPackRaisesUnprintable:
    def __dlpack__(self, **kwargs):
        raise StrFails()

    def __dlpack_device__(self):
        return (1, 0)


class DLPackReenters:
    """__dlpack__ calls the same kffi function again, until Python's recursion limit."""

    def __init__(self, fn):
        self.fn = fn

    def __dlpack__(self, **kwargs):
        return self.fn(self)

    def __dlpack_device__(self):
        return (1, 0)


class DLPackNotACapsule:
    def __dlpack__(self, **kwargs):
        return 42

    def __dlpack_device__(self):
        return (1, 0)


class DLPackWrongCapsule:
    def __dlpack__(self, **kwargs):
        return _capsule(b"not_a_dltensor")

    def __dlpack_device__(self):
        return (1, 0)


class DLPackRefuses:
    def __dlpack__(self, **kwargs):
        raise BufferError("the producer refuses to export")

    def __dlpack_device__(self):
        return (1, 0)


class DLPackNegativeShape:
    """A versioned DLPack producer whose tensor claims a negative size."""

    def __init__(self, shape):
        self.producer = _Producer(shape)

    def __dlpack__(self, **kwargs):
        return self.producer.capsule()

    def __dlpack_device__(self):
        return (1, 0)


class BadEq:
    """A map key whose == raises (the lookup falls back to comparing keys)."""

    def __hash__(self):
        return 1

    def __eq__(self, other):
        raise TypeError("BadEq.__eq__ refused")


_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.restype = ctypes.py_object
_capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
_KEEP: list = []


def _capsule(name: bytes):
    buf = ctypes.create_string_buffer(64)
    _KEEP.append(buf)
    return _capsule_new(ctypes.addressof(buf), name, None)


class _DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device_type", ctypes.c_int32),
        ("device_id", ctypes.c_int32),
        ("ndim", ctypes.c_int32),
        ("code", ctypes.c_uint8),
        ("bits", ctypes.c_uint8),
        ("lanes", ctypes.c_uint16),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class _Versioned(ctypes.Structure):
    _fields_ = [
        ("major", ctypes.c_uint32),
        ("minor", ctypes.c_uint32),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", ctypes.c_void_p),
        ("flags", ctypes.c_uint64),
        ("dl_tensor", _DLTensor),
    ]


class _Producer:
    """Versioned DLPack tensors with any shape over a small host buffer (never read); no deleter
    (the structures live as long as the process)."""

    def __init__(self, shape, major=1):
        self.host = np.zeros(16, np.float32)
        self.shape = (ctypes.c_int64 * len(shape))(*shape)
        self.major = major

    def capsule(self):
        m = _Versioned()
        m.major, m.minor = self.major, 0
        m.dl_tensor.data = self.host.ctypes.data
        m.dl_tensor.device_type, m.dl_tensor.device_id = 1, 0
        m.dl_tensor.ndim = len(self.shape)
        m.dl_tensor.code, m.dl_tensor.bits, m.dl_tensor.lanes = 2, 32, 1
        m.dl_tensor.shape = self.shape
        _KEEP.append((m, self))
        return _capsule_new(ctypes.addressof(m), b"dltensor_versioned", None)


def nested_list(depth):
    x = 1
    for _ in range(depth):
        x = [x]
    return x


def nested_dict(depth):
    x = 1
    for _ in range(depth):
        x = {"k": x}
    return x


def self_list():
    a = [1]
    a.append(a)
    return a


def mutating_list():
    items = [1, 2]
    items.append(MutatingIndex(items))
    return items


def mutating_dict():
    d = {"a": 1}
    d["b"] = MutatingDictIndex(d)
    return d


def fifo(tmp):
    path = tmp / "a_fifo"
    os.mkfifo(path)
    return path


def text_file(tmp):
    path = tmp / "libnot_a_library.so"
    path.write_text("not a shared library\n")
    return path


MISMATCH = (
    "Mismatched type on argument #{i} when calling: `{sig}`. Expected `{exp}` but got `{got}`"
)


def mismatch(sig, exp, got, i=0):
    return MISMATCH.format(i=i, sig=sig, exp=exp, got=got)


SIG = {
    "int": "takes_int(n: int) -> int",
    "float": "takes_float(x: float) -> float",
    "bool": "takes_bool(flag: bool) -> bool",
    "str": "takes_str(s: str) -> str",
    "bytes": "takes_bytes(b: bytes) -> bytes",
    "int32": "takes_int32(n: int32) -> int",
    "uint8": "takes_uint8(n: uint8) -> int",
    "tensor": "takes_tensor(x: Tensor) -> int",
    "owned": "takes_owned_tensor(x: Tensor) -> int",
    "optional": "takes_optional(n: Optional<int>) -> int",
    "tuple": "takes_tuple(t: Tuple<int, str>) -> int",
    "array": "takes_array(xs: Array<int>) -> int",
    "map": "takes_map(m: Map<str, int>) -> int",
    "stream": "takes_stream(stream: void*) -> int",
    "function": "takes_function(f: Function) -> Any",
    "dtype": "takes_dtype(d: dtype) -> str",
    "device": "takes_device(dev: Device) -> int",
    "shape": "takes_shape(s: Shape) -> int",
    "two": "two_ints(a: int, b: int) -> int",
}


def contract_sig(name, text):
    return f"`{name}({text})`"


C_SHAPE = contract_sig("c_shape", "a: Tensor([n, 4], float32), b: Tensor([n], float32)")
C_TUPLE = contract_sig("c_tuple", "t: Tuple[Tensor([n], float32), int]")
C_SCALARS = contract_sig("c_scalars", "k: int32[0, 10], s: float, flag: bool")
NOT_A_TENSOR = "`x: Tensor`"  # every tensor-kind mismatch names x in the signature

# (id, action(env), exception type, fragments that must all appear in the message)
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
        [mismatch(SIG["int"], "int", "Array")],
    ),
    (
        "int_above_int64",
        lambda e: e.c.takes_int(2**63),
        OverflowError,
        ["Argument #0 (`n`)", "too large to convert to int64"],
    ),
    (
        "int_below_int64",
        lambda e: e.c.takes_int(-(2**63) - 1),
        OverflowError,
        ["Argument #0 (`n`)", "int64"],
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
        [mismatch(SIG["float"], "float", "DLTensor*")],
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
        ["surrogates not allowed", "Argument #0 (`s`)"],
    ),
    (
        "str_long_lone_surrogate",
        lambda e: e.c.takes_str("x" * 20 + "\udfff"),
        UnicodeEncodeError,
        ["surrogates not allowed", "Argument #0 (`s`)"],
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
        [mismatch(SIG["tensor"], "Tensor", "Array")],
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
        [mismatch(SIG["tuple"], "Tuple<int, str>", "Array[size 1]")],
    ),
    (
        "tuple_wrong_element",
        lambda e: e.c.takes_tuple(("a", "b")),
        TypeError,
        [mismatch(SIG["tuple"], "Tuple<int, str>", "Array[index 0: str]")],
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
        [mismatch(SIG["array"], "Array<int>", "Array[index 1: str]")],
    ),
    (
        "array_element_overflow",
        lambda e: e.c.takes_array([1, 2**70]),
        OverflowError,
        ["Argument #0 (`xs`)", "too large to convert to int64"],
    ),
    (
        "map_from_list",
        lambda e: e.c.takes_map([("a", 1)]),
        TypeError,
        [mismatch(SIG["map"], "Map<str, int>", "Array")],
    ),
    (
        "map_wrong_key",
        lambda e: e.c.takes_map({1: 2}),
        TypeError,
        [mismatch(SIG["map"], "Map<str, int>", "Map[key 1: int]")],
    ),
    (
        "map_wrong_value",
        lambda e: e.c.takes_map({"a": "b"}),
        TypeError,
        [mismatch(SIG["map"], "Map<str, int>", "Map['a': str]")],
    ),
    (
        "map_value_overflow",
        lambda e: e.c.takes_map({"a": 2**64}),
        OverflowError,
        ["Argument #0 (`m`)", "too large"],
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
        ["Invalid argument #0 when calling: `takes_dtype(d: dtype) -> str`", "`flot32`"],
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
        [mismatch(SIG["shape"], "Shape", "Array[index 0: float]")],
    ),
    (
        "too_few_arguments",
        lambda e: e.c.two_ints(1),
        TypeError,
        ["Mismatched number of arguments", SIG["two"], "Expected 2 but got 1"],
    ),
    (
        "too_many_arguments",
        lambda e: e.c.two_ints(1, 2, 3),
        TypeError,
        ["Mismatched number of arguments", SIG["two"], "Expected 2 but got 3"],
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
        [
            "argument #0 when calling: `" + SIG["tensor"] + "`",
            "Expected `Tensor` but got `array.array` (a Python object)",
        ],
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
        [
            "argument #0 when calling: `" + SIG["tensor"] + "`",
            "Expected `Tensor` but got `memoryview` (a Python object)",
        ],
    ),
    (
        "bytearray_as_tensor",
        lambda e: e.c.takes_tensor(bytearray(4)),
        TypeError,
        [mismatch(SIG["tensor"], "Tensor", "bytes")],
    ),
    (
        "numpy_read_only_to_writer",
        lambda e: e.c.writes_tensor(read_only(f32(4))),
        ValueError,
        ["Argument `x`: expected writable memory, got a read-only tensor"],
    ),
    (
        "numpy_frombuffer_bytes_to_writer",
        lambda e: e.c.writes_tensor(np.frombuffer(b"\0" * 16, np.float32)),
        ValueError,
        ["Argument `x`: expected writable memory"],
    ),
    (
        "numpy_wrong_ndim",
        lambda e: e.c.checked(f32(3)),
        ValueError,
        ["Argument `x`: expected a 2-d tensor, got 1-d with shape [3]"],
    ),
    (
        "numpy_wrong_dtype",
        lambda e: e.c.checked(np.zeros((2, 2), np.float64)),
        ValueError,
        ["Argument `x`: expected dtype float32, got float64"],
    ),
    (
        "numpy_not_contiguous",
        lambda e: e.c.checked(f32(4, 4)[:, ::2]),
        ValueError,
        ["Argument `x`: expected a contiguous tensor, got strides [4, 2] for shape [4, 2]"],
    ),
    (
        "numpy_misaligned",
        lambda e: e.c.checked(np.zeros(17, np.float32)[1:].reshape(4, 4)),
        ValueError,
        ["Argument `x`", "16"],
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
        ["Argument #0 (`x`)", "shape (2, 2)", "impossible size"],
    ),
    (
        "numpy_object_array",
        lambda e: e.c.takes_tensor(np.array([object()])),
        (TypeError, BufferError),
        ["Argument #0 (`x`"],
    ),
    (
        "numpy_big_endian_to_checked",
        lambda e: e.c.checked(np.zeros((2, 2), ">f4")),
        (ValueError, BufferError, TypeError),
        ["`x`"],
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
        ["Argument `x`: expected a 2-d tensor, got 1-d with shape [3]"],
        marks=needs_torch,
    ),
    pytest.param(
        "torch_conj_view",
        lambda e: e.c.takes_tensor(torch().zeros(2, dtype=torch().complex64).conj()),
        ValueError,
        ["Argument #0 (`x`)", "lazy conjugate view", "resolve_conj()"],
        marks=needs_torch,
    ),
    pytest.param(
        "torch_neg_view",
        lambda e: e.c.takes_tensor(torch().zeros(2, dtype=torch().complex64).conj().imag),
        ValueError,
        ["Argument #0 (`x`)", "lazy negative view", "resolve_neg()"],
        marks=needs_torch,
    ),
    pytest.param(
        "torch_meta_device",
        lambda e: e.c.takes_tensor(torch().zeros(2, device="meta")),
        ValueError,
        ["Argument #0 (`x`)", "meta device"],
        marks=needs_torch,
    ),
    pytest.param(
        "torch_wrong_dtype_contract",
        lambda e: e.c.c_dtype(torch().zeros(3, dtype=torch().int64)),
        ValueError,
        ["x.dtype: expected float32|float64, got int64 (argument #0"],
        marks=needs_torch,
    ),
    pytest.param(
        "jax_to_writer",
        lambda e: e.c.writes_tensor(jnp().zeros(4, jnp().float32)),
        ValueError,
        ["Argument `x`: expected writable memory, got a read-only tensor"],
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
        ["Argument #0 (`x`", "did not return a DLPack capsule"],
    ),
    (
        "dlpack_not_a_capsule",
        lambda e: e.c.takes_tensor(DLPackNotACapsule()),
        TypeError,
        ["Argument #0 (`x`", "did not return a DLPack capsule"],
    ),
    (
        "dlpack_producer_refuses",
        lambda e: e.c.takes_tensor(DLPackRefuses()),
        BufferError,
        ["Argument #0 (`x`", "the producer refuses to export"],
    ),
    (
        "dlpack_negative_shape",
        lambda e: e.c.takes_tensor(DLPackNegativeShape([4, -1])),
        ValueError,
        ["Argument #0 (`x`", "negative size in shape [4, -1]"],
    ),
    (
        "dlpack_overflowing_shape",
        lambda e: e.c.takes_tensor(DLPackNegativeShape([2**62, 2**62])),
        ValueError,
        ["Argument #0 (`x`", "[4611686018427387904, 4611686018427387904]", "overflows int64"],
    ),
    (
        "dlpack_unknown_major_version",
        lambda e: e.c.takes_tensor(_MajorTwo()),
        ValueError,
        ["Argument #0 (`x`", "Unsupported DLPack major version 2"],
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
        ValueError,
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
    # ---- the loader ---------------------------------------------------------------------------
    (
        "load_missing_file",
        lambda e: kffi.load_module(e.tmp / "missing.so"),
        FileNotFoundError,
        ["no such file", "missing.so"],
    ),
    (
        "load_directory",
        lambda e: kffi.load_module(e.tmp),
        RuntimeError,
        [f"Cannot load module `{os.sep}", "it is a directory, not a regular file"],
    ),
    (
        "load_fifo",
        lambda e: kffi.load_module(fifo(e.tmp)),
        RuntimeError,
        ["a_fifo`", "it is a FIFO (named pipe), not a regular file"],
    ),
    (
        "load_text_file",
        lambda e: kffi.load_module(text_file(e.tmp)),
        RuntimeError,
        ["libnot_a_library.so`: not a loadable shared library: not an ELF file"],
    ),
    (
        "load_nul_in_path",
        lambda e: kffi.load_module(str(e.tmp / "a\0b.so")),
        ValueError,
        ["contains a NUL byte"],
    ),
    (
        "load_plain_shared_library",
        lambda e: kffi.load_module(_libm()),
        RuntimeError,
        ["it is not a kffi library", "__kffi__abi_version"],
    ),
    (
        "module_missing_function",
        lambda e: e.c["no_such_function"],
        KeyError,
        ["has no function 'no_such_function'", "takes_int"],
    ),
    (
        "module_missing_attribute",
        lambda e: e.c.no_such_function,
        AttributeError,
        ["no_such_function"],
    ),
    (
        "global_function_missing",
        lambda e: kffi.get_global_func("catalogue.no_such"),
        ValueError,
        ["Global function 'catalogue.no_such' is not registered"],
    ),
    # ---- malformed metadata in a library --------------------------------------------------------
    (
        "metadata_not_json",
        lambda e: e.bad.not_json,
        ValueError,
        [
            "Malformed metadata of function `not_json` in module `",
            "bad_metadata_kernels",
            "not valid JSON",
        ],
    ),
    (
        "metadata_not_object",
        lambda e: e.bad.not_object,
        ValueError,
        ["function `not_object`", "expected a JSON object, got list"],
    ),
    (
        "metadata_params_not_list",
        lambda e: e.bad.params_not_list,
        ValueError,
        ["function `params_not_list`", "`params` must be a list, got dict"],
    ),
    (
        "metadata_param_not_object",
        lambda e: e.bad.param_not_object,
        ValueError,
        ["function `param_not_object`", "params[0] must be an object, got int"],
    ),
    (
        "metadata_bad_param_name",
        lambda e: e.bad.bad_param_name,
        ValueError,
        ["function `bad_param_name`", "params[0] has name 'a b', expected a Python identifier"],
    ),
    (
        "metadata_keyword_param_name",
        lambda e: e.bad.keyword_param_name,
        ValueError,
        ["function `keyword_param_name`", "params[0] has name 'class'"],
    ),
    (
        "metadata_duplicate_param_name",
        lambda e: e.bad.duplicate_param_name,
        ValueError,
        ["function `duplicate_param_name`", "params[1] repeats the parameter name 'a'"],
    ),
    (
        "metadata_param_type_not_str",
        lambda e: e.bad.param_type_not_str,
        ValueError,
        ["function `param_type_not_str`", "params[0] (`a`) has type 3, expected a str"],
    ),
    (
        "metadata_doc_not_str",
        lambda e: e.bad.doc_not_str,
        ValueError,
        ["function `doc_not_str`", "`doc` must be a str, got int"],
    ),
    (
        "metadata_deeply_nested_json",
        lambda e: e.bad.deep_json,
        ValueError,
        ["function `deep_json`", "not valid JSON"],
    ),
    (
        "metadata_symbol_returns_int",
        lambda e: e.bad.meta_is_int,
        TypeError,
        ["The metadata symbol `__kffi__meta_meta_is_int` returned `int`, expected a str"],
    ),
    # ---- kffi.compile: options and fake arguments refused before compiling ---------------------
    (
        "compile_source_not_text",
        lambda e: kffi.compile(3, "f"),
        TypeError,
        ["kffi.compile: source is C++ text, got int"],
    ),
    (
        "compile_bad_name",
        lambda e: kffi.compile("", "1f"),
        ValueError,
        ["kffi.compile: name is a C++ identifier", "got '1f'"],
    ),
    (
        "compile_unknown_option",
        lambda e: kffi.compile("", "f", options={"opt_level": 3}),
        TypeError,
        ["kffi.compile: unknown options ['opt_level']", "extra_cflags"],
    ),
    (
        "compile_param_names_count",
        lambda e: kffi.compile("", "f", kffi.fake_tensor("float32", [4]), param_names=["a", "b"]),
        ValueError,
        ["kffi.compile: 2 param_names for 1 fake arguments"],
    ),
    (
        "compile_param_name_not_identifier",
        lambda e: kffi.compile("", "f", kffi.fake_tensor("float32", [4]), param_names=["a b"]),
        ValueError,
        ["parameter names are identifiers, got 'a b'"],
    ),
    (
        "compile_duplicate_param_names",
        lambda e: kffi.compile("", "f", 1, 2, param_names=["a", "a"]),
        ValueError,
        ["duplicate parameter names in ['a', 'a']"],
    ),
    (
        "compile_cflags_not_strings",
        lambda e: kffi.compile("void f() {}", "f", options={"extra_cflags": ["-O2", 3]}),
        TypeError,
        ["extra_cflags must be a str or a list of str, got int 3 at index 1"],
    ),
    (
        "compile_build_directory_int",
        lambda e: kffi.compile("void f() {}", "f", options={"build_directory": 3}),
        TypeError,
        ["build_directory must be a str or an os.PathLike, got int"],
    ),
    (
        "fake_tensor_bad_dtype",
        lambda e: kffi.fake_tensor("flot32", [4]),
        TypeError,
        ["kffi.fake_tensor: cannot read dtype 'flot32'"],
    ),
    (
        "fake_tensor_negative_dim",
        lambda e: kffi.fake_tensor("float32", [-4]),
        ValueError,
        ["kffi.fake_tensor: a dimension must be a non-negative int or a kffi.sym_int(), got -4"],
    ),
    (
        "fake_tensor_align_not_power_of_two",
        lambda e: kffi.fake_tensor("float32", [4], align=3),
        ValueError,
        ["kffi.fake_tensor: align is a power of two in bytes, got 3"],
    ),
    (
        "fake_tensor_bad_device",
        lambda e: kffi.fake_tensor("float32", [4], device="tpu"),
        ValueError,
        ["kffi.fake_tensor: device is 'cpu', 'cuda', 'any' or a tuple of them, got 'tpu'"],
    ),
    (
        "fake_tensor_bad_stride_order",
        lambda e: kffi.fake_tensor("float32", [4, 4], stride_order=(0, 0)),
        ValueError,
        ["kffi.fake_tensor: stride_order lists each dimension 0..1 once", "got (0, 0)"],
    ),
    (
        "fake_tensor_too_many_dims",
        lambda e: kffi.fake_tensor("float32", [1] * 33),
        ValueError,
        ["kffi.fake_tensor: 33 dimensions; a contract tensor has at most 32"],
    ),
    (
        "sym_int_bad_name",
        lambda e: kffi.sym_int("1n"),
        ValueError,
        ["kffi.sym_int: name must be an identifier, got '1n'"],
    ),
    (
        "sym_int_zero_divisibility",
        lambda e: kffi.sym_int("n", divisibility=0),
        ValueError,
        ["kffi.sym_int: divisibility must be an int >= 1, got 0"],
    ),
    (
        "int32_empty_range",
        lambda e: kffi.Int32.range(5, 1),
        ValueError,
        ["kffi.Int32.range: [5, 1] is empty"],
    ),
    # ---- containers ---------------------------------------------------------------------------
    (
        "array_index_out_of_range",
        lambda e: kffi.to_kffi([1, 2, 3])[5],
        IndexError,
        ["index out of range for a sequence of length 3"],
    ),
    ("map_missing_str_key", lambda e: kffi.to_kffi({"a": 1})["zz"], KeyError, ["zz"]),
    ("map_missing_int_key", lambda e: kffi.to_kffi({1: "a"})[2], KeyError, ["2"]),
    (
        "released_array_argument",
        lambda e: e.t.echo(_released([1, 2])),
        ValueError,
        ["Argument #0: the Array object is null (destroyed)"],
    ),
    (
        "released_tensor_argument",
        lambda e: e.c.takes_tensor(_released_tensor()),
        ValueError,
        ["Argument #0 (`x`): the Tensor object is null (destroyed)"],
    ),
    # ---- hostile __index__ / __float__ / __dlpack__ -------------------------------------------
    (
        "index_raises",
        lambda e: e.c.takes_int(RaisingIndex()),
        ValueError,
        ["Argument #0 (`n`)", "__index__ refused"],
    ),
    (
        "index_mutates_its_list_and_raises",
        lambda e: e.c.takes_array(mutating_list()),
        ArithmeticError,
        ["Argument #0 (`xs`)", "__index__ mutated its list"],
    ),
    (
        "index_mutates_its_dict_and_raises",
        lambda e: e.c.takes_map(mutating_dict()),
        LookupError,
        ["Argument #0 (`m`)", "__index__ emptied its dict"],
    ),
    (
        "float_raises",
        lambda e: e.c.takes_float(RaisingFloat()),
        ArithmeticError,
        ["Argument #0 (`x`)", "__float__ refused"],
    ),
    (
        "float_raises_in_second_argument",
        lambda e: e.c.c_scalars(1, RaisingFloat(), True),
        ArithmeticError,
        ["Argument #1 (`s`)", "__float__ refused"],
    ),
    (
        "dlpack_raises_unprintable",
        lambda e: e.c.takes_tensor(DLPackRaisesUnprintable()),
        TypeError,
        ["Argument #0 (`x`", "StrFails whose str() failed"],
    ),
    (
        "index_in_tuple_raises",
        lambda e: e.c.takes_tuple((RaisingIndex(), "s")),
        ValueError,
        ["Argument #0 (`t`)", "__index__ refused"],
    ),
    # ---- deep nesting -------------------------------------------------------------------------
    (
        "list_nested_beyond_the_limit",
        lambda e: e.c.takes_array(nested_list(kffi.MAX_CONTAINER_DEPTH + 5)),
        RecursionError,
        ["Argument #0 (`xs`)", "while converting a container for kffi"],
    ),
    (
        "dict_nested_beyond_the_limit",
        lambda e: e.t.echo(nested_dict(kffi.MAX_CONTAINER_DEPTH + 5)),
        RecursionError,
        ["Argument #0", "while converting a container for kffi"],
    ),
    (
        "list_holding_itself",
        lambda e: e.c.takes_array(self_list()),
        RecursionError,
        ["Argument #0 (`xs`)", "while converting a container for kffi"],
    ),
    (
        "list_nested_10000_deep_with_raised_limit",
        lambda e: _with_recursion_limit(100_000, lambda: e.t.echo(nested_list(10_000))),
        RecursionError,
        ["Argument #0", "kffi's limit of"],
    ),
]


# Errors that name no argument because none is at fault: the callee's own (a kernel's C++
# exception, a callback's exception), the interpreter's recursion limit, a lookup's key.
OTHER_CASES = [
    ("function_that_raises", lambda e: e.c.takes_function(lambda x: {}[x]), KeyError, ["1"]),
    (
        "dlpack_reenters_until_recursion_limit",
        lambda e: e.c.takes_tensor(DLPackReenters(e.c.takes_tensor)),
        RecursionError,
        ["maximum recursion depth"],
    ),
    (
        "callback_returns_deep_list",
        lambda e: e.c.takes_function(lambda x: nested_list(10_000)),
        RecursionError,
        ["while converting a container for kffi"],
    ),
    (
        "map_key_with_raising_eq",
        lambda e: kffi.to_kffi({(1,): 1})[BadEq()],
        TypeError,
        ["BadEq.__eq__ refused"],
    ),
    (
        "kernel_std_runtime_error",
        lambda e: e.c.throws_std("runtime"),
        RuntimeError,
        ["the kernel's runtime_error text"],
    ),
    (
        "kernel_std_invalid_argument",
        lambda e: e.c.throws_std("invalid"),
        ValueError,
        ["the kernel's invalid_argument text"],
    ),
    (
        "kernel_std_out_of_range",
        lambda e: e.c.throws_std("range"),
        IndexError,
        ["the kernel's out_of_range text"],
    ),
    ("kernel_std_bad_alloc", lambda e: e.c.throws_std("alloc"), MemoryError, ["Out of memory"]),
    ("load_int_path", lambda e: kffi.load_module(3), TypeError, ["int"]),
]


class _MajorTwo:
    """A versioned capsule of DLPack major version 2 (a layout this consumer cannot read)."""

    producer = _Producer([4], major=2)

    def __dlpack__(self, **kwargs):
        return self.producer.capsule()

    def __dlpack_device__(self):
        return (1, 0)


def _libm():
    import ctypes.util

    name = ctypes.util.find_library("m")
    for d in ("/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib64"):
        if name and os.path.exists(os.path.join(d, name)):
            return os.path.join(d, name)
    pytest.skip("libm not found")


def _released(value):
    obj = kffi.to_kffi(value)
    obj._release()
    return obj


def _released_tensor():
    x = kffi.from_dlpack(np.zeros(2, np.float32))
    x._release()
    return x


def _with_recursion_limit(limit, fn):
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(limit)
    try:
        return fn()
    finally:
        sys.setrecursionlimit(old)


def _id(case):
    return case.values[0] if hasattr(case, "values") else case[0]


def _as_param(case):
    if hasattr(case, "values"):
        return pytest.param(*case.values[1:], marks=case.marks, id=case.values[0])
    return pytest.param(*case[1:], id=case[0])


def test_ids_are_unique_and_the_catalogue_is_large():
    ids = [_id(c) for c in CASES + OTHER_CASES]
    assert len(ids) == len(set(ids))
    assert len(CASES) >= 150


@pytest.mark.parametrize("action,exc_type,fragments", [_as_param(c) for c in CASES + OTHER_CASES])
def test_bad_input(env, action, exc_type, fragments):
    with pytest.raises(exc_type) as info:
        action(env)
    message = str(info.value)
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} not in {message!r}"


def test_process_is_healthy_after_the_catalogue(env):
    for case in CASES + OTHER_CASES:
        if hasattr(case, "values"):
            if any(m.args and m.args[0] for m in case.marks):
                continue  # skipped (a framework missing)
            _, action, exc_type, _ = case.values
        else:
            _, action, exc_type, _ = case
        with pytest.raises(exc_type):
            action(env)
    assert env.c.takes_int(41) == 41
    assert env.c.two_ints(a=1, b=2) == 3
    assert env.c.takes_array([1, 2, 3]) == 6
    x = np.zeros(3, np.float32)
    env.k.fill(x, 2.0)
    assert x.tolist() == [2.0, 2.0, 2.0]
    assert env.bad.fine(7) == 7


def test_kernel_runtime_error_arrives_as_runtime_error_with_its_what_text(env):
    # A kernel body that throws std::runtime_error: the what() text is the message, whole.
    with pytest.raises(RuntimeError) as info:
        env.c.throws_std("runtime")
    assert type(info.value) is RuntimeError
    assert str(info.value) == "the kernel's runtime_error text"
    # And the C++ side of a callback sees the same kind and text.
    assert list(env.t.catch_error(env.c.throws_std, "runtime")) == [
        "RuntimeError",
        "the kernel's runtime_error text",
    ]


def test_unknown_cpp_exception_arrives_as_kffi_error(env):
    with pytest.raises(kffi.Error) as info:
        env.c.throws_std("other")
    assert "unknown C++ exception" in str(info.value)
