"""tests/python/hostile/bad_input_support.py: fixtures, hostile objects and helpers of the bad-input
catalogue (test_bad_input_catalogue.py, test_bad_input_catalogue_system.py).

Every case of the catalogue raises one exception type, and its message names the argument it blames (by position,
by parameter name, or as the path, option or key) and, where the message has them, what was
expected and what was received. Cases cover every kind of argument (int, float, bool, str, bytes,
tensor, optional, tuple, array, map, stream, function, dtype, device, shape), every producer
available here (NumPy, torch CPU, JAX CPU, DLPack capsules, array.array, bytes, memoryview),
contracts, the loader, kffi.compile's options (those refused before compiling), containers,
hostile __index__/__float__/__dlpack__ that mutate or raise, deep nesting and malformed metadata.
After the whole catalogue the process still works.
"""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

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


@pytest.fixture(scope="module", name="catalogue_module")
def catalogue_module_fixture(library_paths):
    return kffi.load_module(library_paths["catalogue_kernels"])


@pytest.fixture(scope="module", name="bad_metadata_module")
def bad_metadata_module_fixture(library_paths):
    return kffi.load_module(library_paths["bad_metadata_kernels"])


@pytest.fixture(name="env")
def env_fixture(catalogue_module, bad_metadata_module, tensor_kernels, t, tmp_path):
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


from dlpack_util import capsule_new as _capsule_new

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


# kffi's one format of argument errors; got is the Python type the caller passed.
MISMATCH = "{param}: expected {exp}, got {got} (argument #{i} of `{sig}`)"


def param_name(sig, i):
    """The name of parameter #i in a signature "f(a: T, b: Map<str, int>) -> R"."""
    params, depth, start = [], 0, sig.index("(") + 1
    for at in range(start, len(sig)):
        ch = sig[at]
        if ch in "<[(":
            depth += 1
        elif ch in ">])" and depth > 0:
            depth -= 1
        elif (ch == "," and depth == 0) or (ch == ")" and depth == 0):
            params.append(sig[start:at].strip())
            start = at + 1
            if ch == ")":
                break
    return params[i].split(":")[0]


def mismatch(sig, exp, got, i=0):
    return MISMATCH.format(param=param_name(sig, i), i=i, sig=sig, exp=exp, got=got)


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


class DLPackMajorTwo:
    """A versioned capsule of DLPack major version 2 (a layout this consumer cannot read)."""

    producer = _Producer([4], major=2)

    def __dlpack__(self, **kwargs):
        return self.producer.capsule()

    def __dlpack_device__(self):
        return (1, 0)


def libm_path():
    import ctypes.util

    name = ctypes.util.find_library("m")
    for d in ("/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib64"):
        if name and os.path.exists(os.path.join(d, name)):
            return os.path.join(d, name)
    pytest.skip("libm not found")


def released(value):
    obj = kffi.to_kffi(value)
    obj._release()
    return obj


def released_tensor():
    x = kffi.from_dlpack(np.zeros(2, np.float32))
    x._release()
    return x


def with_recursion_limit(limit, fn):
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(limit)
    try:
        return fn()
    finally:
        sys.setrecursionlimit(old)


def case_id(case):
    return case.values[0] if hasattr(case, "values") else case[0]


def as_param(case):
    if hasattr(case, "values"):
        return pytest.param(*case.values[1:], marks=case.marks, id=case.values[0])
    return pytest.param(*case[1:], id=case[0])


def check_case(env, action, exc_type, fragments):
    """Runs one case: the exception type, and every fragment in its message."""
    with pytest.raises(exc_type) as info:
        action(env)
    message = str(info.value)
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} not in {message!r}"


def run_all(env, cases):
    """Runs every case again in one go (skipping those whose framework is missing)."""
    for case in cases:
        if hasattr(case, "values"):
            if any(m.args and m.args[0] for m in case.marks):
                continue
            _, action, exc_type, _ = case.values
        else:
            _, action, exc_type, _ = case
        with pytest.raises(exc_type):
            action(env)
