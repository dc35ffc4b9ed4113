"""tests/python/hostile/test_bad_input.py: a catalogue of bad inputs. Each raises a precise Python
exception with a helpful message, and afterwards the process is still healthy."""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import dataclasses

import kffi
import pytest

np = pytest.importorskip("numpy")


@dataclasses.dataclass
class Env:
    t: object  # the testing.* globals
    k: kffi.Module  # tensor kernels
    m: kffi.Module  # module kernels
    tmp: object  # a temporary folder (pathlib.Path)


@pytest.fixture
def env(t, tensor_kernels, module_kernels, tmp_path):
    return Env(t, tensor_kernels, module_kernels, tmp_path)


def released(value):
    """A kffi object (value converted by kffi) whose native object was released."""
    obj = kffi.to_kffi(value) if not isinstance(value, kffi.Object) else value
    obj._release()
    return obj


def released_function():
    f = kffi.Function(lambda: 1)
    f._release()
    return f


def released_tensor():
    x = kffi.from_dlpack(np.zeros(2, np.float32))
    x._release()
    return x


def released_module(e):
    # A second Python handle of the module: releasing it leaves the session's handle intact.
    mod = kffi.load_module(e.m.name)
    mod._release()
    return mod


def not_a_library(e):
    path = e.tmp / "fake.so"
    path.write_bytes(b"\x7fELF but not really")
    return kffi.load_module(path)


def self_referential_list():
    items = [1]
    items.append(items)
    return items


def self_referential_dict():
    d = {}
    d["me"] = d
    return d


class ReturnsNoCapsule:
    def __dlpack__(self, **kwargs):
        return 3

    def __dlpack_device__(self):
        return (1, 0)


class ProducerFails:
    def __dlpack__(self, **kwargs):
        raise BufferError("the producer refused")

    def __dlpack_device__(self):
        return (1, 0)


class BadIndex:
    def __index__(self):
        raise ValueError("__index__ failed")


class BadFloat:
    def __float__(self):
        raise ArithmeticError("__float__ failed")


def f32(n=2):
    return np.zeros(n, np.float32)


# kffi's one format of argument errors: "<param>: expected <E>, got <G> (argument #k of `SIG`)",
# where G is the Python type the caller passed.
MISMATCH = "{}: expected {}, got {} (argument #{} of `{}`)"
ADD_ONE = "testing.add_one(arg0: int) -> int"
FILL = "fill(x: Tensor(mut), value: float) -> None"

# (id, action(env), exception type, message fragment)
CATALOGUE = [
    # -- wrong types for typed functions
    (
        "int_param_given_str",
        lambda e: e.t.add_one("1"),
        TypeError,
        MISMATCH.format("arg0", "int", "str", 0, ADD_ONE),
    ),
    (
        "int_param_given_float",
        lambda e: e.t.add_one(1.0),
        TypeError,
        MISMATCH.format("arg0", "int", "float", 0, ADD_ONE),
    ),
    (
        "int_param_given_none",
        lambda e: e.t.add_one(None),
        TypeError,
        MISMATCH.format("arg0", "int", "None", 0, ADD_ONE),
    ),
    (
        "int_param_given_tuple",
        lambda e: e.t.add_one((1,)),
        TypeError,
        MISMATCH.format("arg0", "int", "tuple", 0, ADD_ONE),
    ),
    (
        "int_param_given_ndarray",
        lambda e: e.t.add_one(f32()),
        TypeError,
        MISMATCH.format("arg0", "int", "numpy.ndarray", 0, ADD_ONE),
    ),
    (
        "str_param_given_int",
        lambda e: e.t.raise_error(1, "m"),
        TypeError,
        "arg0: expected str, got int (argument #0 of `testing.raise_error(",
    ),
    (
        "str_param_given_bytes",
        lambda e: e.m.greet(b"x", 1),
        TypeError,
        MISMATCH.format("name", "str", "bytes", 0, "greet(name: str, times: int) -> str"),
    ),
    (
        "float_param_given_str",
        lambda e: e.k.fill(f32(), "x"),
        TypeError,
        MISMATCH.format("value", "float", "str", 1, FILL),
    ),
    (
        "dtype_param_given_int",
        lambda e: e.k.full((2,), 3, 1.0),
        TypeError,
        "dtype: expected dtype, got int (argument #1 of `full(",
    ),
    (
        "function_param_given_int",
        lambda e: e.t.apply(3),
        TypeError,
        "Cannot convert from type `int` to `Function`",
    ),
    (
        "shape_element_given_str",
        lambda e: e.t.make_shape("x"),
        TypeError,
        "Cannot convert from type `str` to `int`",
    ),
    # -- wrong argument counts
    (
        "too_few_arguments",
        lambda e: e.t.add_one(),
        TypeError,
        f"testing.add_one: expected 1 argument, got 0 (`{ADD_ONE}`)",
    ),
    (
        "too_many_arguments",
        lambda e: e.t.add_one(1, 2),
        TypeError,
        f"testing.add_one: expected 1 argument, got 2 (`{ADD_ONE}`)",
    ),
    (
        "too_many_for_export",
        lambda e: e.m.greet("a", 1, 2),
        TypeError,
        "greet: expected 2 arguments, got 3 (`greet(name: str, times: int) -> str`)",
    ),
    (
        "packed_function_without_arguments",
        lambda e: e.t.apply(),
        TypeError,
        "testing.apply expects a function and its arguments",
    ),
    # -- integer overflow
    (
        "int_above_int64",
        lambda e: e.t.echo(2**63),
        OverflowError,
        "arg0: Python int too large to convert to int64 (kffi ints are 64-bit) "
        "(argument #0 of `testing.echo`)",
    ),
    (
        "int_below_int64",
        lambda e: e.t.echo(-(2**63) - 1),
        OverflowError,
        "arg0: Python int too large to convert to int64",
    ),
    (
        "overflow_names_its_argument",
        lambda e: e.t.nop(0, 0, 2**64),
        OverflowError,
        "arg2: Python int too large to convert to int64 (kffi ints are 64-bit) "
        "(argument #2 of `testing.nop`)",
    ),
    (
        "overflow_inside_tuple_names_its_argument",
        lambda e: e.t.nop(0, (1, 2**70)),
        OverflowError,
        "arg1: Python int too large to convert to int64 (kffi ints are 64-bit) "
        "(argument #1 of `testing.nop`)",
    ),
    (
        "overflow_inside_dict_value",
        lambda e: e.t.echo({"k": [2**70]}),
        OverflowError,
        "arg0: Python int too large to convert to int64 (kffi ints are 64-bit) "
        "(argument #0 of `testing.echo`)",
    ),
    (
        "overflow_in_callback_result",
        lambda e: e.t.apply(lambda: 2**70),
        OverflowError,
        "Python int too large to convert to int64",
    ),
    (
        "index_type_that_fails",
        lambda e: e.t.add_one(BadIndex()),
        ValueError,
        "arg0: __index__ failed (argument #0 of `testing.add_one`)",
    ),
    (
        "float_type_that_fails",
        lambda e: e.m.affine(BadFloat(), 1.0, 1.0),
        ArithmeticError,
        "a: __float__ failed (argument #0 of `affine(a: float, scale: float, offset: float)",
    ),
    # -- containers that hold themselves (would recurse without end)
    (
        "self_referential_list",
        lambda e: e.t.echo(self_referential_list()),
        RecursionError,
        "while converting them for kffi (argument #0 of `testing.echo`)",
    ),
    (
        "self_referential_dict",
        lambda e: e.t.nop(1, self_referential_dict()),
        RecursionError,
        "while converting them for kffi (argument #1 of `testing.nop`)",
    ),
    (
        "self_referential_callback_result",
        lambda e: e.t.apply(self_referential_list),
        RecursionError,
        "while converting them for kffi",
    ),
    # -- strings that cannot be encoded
    (
        "lone_surrogate_short_str",
        lambda e: e.t.echo("\ud800"),
        UnicodeEncodeError,
        "arg0: surrogates not allowed (argument #0 of `testing.echo`)",
    ),
    (
        "lone_surrogate_long_str",
        lambda e: e.t.echo("abcdefgh\ud800"),
        UnicodeEncodeError,
        "arg0: surrogates not allowed (argument #0 of `testing.echo`)",
    ),
    # -- released objects
    (
        "released_array_as_argument",
        lambda e: e.t.echo(released((1, 2))),
        ValueError,
        "arg0: the Array object is null (destroyed) (argument #0 of `testing.echo`)",
    ),
    (
        "released_array_len",
        lambda e: len(released((1, 2))),
        ValueError,
        "Cannot use a released Array",
    ),
    (
        "released_array_index",
        lambda e: released((1, 2))[0],
        ValueError,
        "Cannot use a released Array",
    ),
    (
        "released_array_iteration",
        lambda e: list(released((1, 2))),
        ValueError,
        "Cannot use a released Array",
    ),
    (
        "released_map_lookup",
        lambda e: released({"a": 1})["a"],
        ValueError,
        "Cannot use a released Map",
    ),
    (
        "released_shape_len",
        lambda e: len(released(e.t.make_shape(1, 2))),
        ValueError,
        "Cannot use a released Shape",
    ),
    (
        "released_tensor_shape",
        lambda e: released_tensor().shape,
        ValueError,
        "Cannot use a released Tensor",
    ),
    (
        "released_tensor_dlpack",
        lambda e: np.from_dlpack(released_tensor()),
        ValueError,
        "Cannot use a released Tensor",
    ),
    (
        "released_module_functions",
        lambda e: released_module(e).functions(),
        ValueError,
        "Cannot use a released Module",
    ),
    (
        "released_function_call",
        lambda e: released_function()(),
        ValueError,
        "Cannot call a released kffi.Function",
    ),
    (
        "released_function_as_callback",
        lambda e: e.t.apply(released_function()),
        ValueError,
        "arg0: the kffi.Function object is null (destroyed) (argument #0 of `testing.apply`)",
    ),
    (
        "released_function_registered",
        lambda e: kffi.register_global_func("pytest.bad_input.released", released_function()),
        ValueError,
        "Cannot use a released kffi.Function",
    ),
    # -- global registry
    (
        "unknown_global",
        lambda e: kffi.get_global_func("pytest.no.such.function"),
        ValueError,
        "Global function 'pytest.no.such.function' is not registered",
    ),
    (
        "global_name_not_str",
        lambda e: kffi.get_global_func(42),
        TypeError,
        "name must be a str, got int",
    ),
    (
        "remove_global_name_not_str",
        lambda e: kffi.remove_global_func(None),
        TypeError,
        "name must be a str, got None",
    ),
    (
        "register_non_callable",
        lambda e: kffi.register_global_func("pytest.bad_input.x", 5),
        TypeError,
        "register_global_func expects a callable, got int",
    ),
    (
        "register_taken_name",
        lambda e: kffi.register_global_func("testing.echo", print),
        KeyError,
        "Global function `testing.echo` is already registered",
    ),
    (
        "function_of_non_callable",
        lambda e: kffi.Function(3),
        TypeError,
        "kffi.Function expects a callable, got int",
    ),
    # -- dtypes
    (
        "bad_dtype_string",
        lambda e: kffi.dtype("floaty32"),
        ValueError,
        "Cannot parse data type from string `floaty32`",
    ),
    (
        "empty_dtype_string",
        lambda e: kffi.dtype(""),
        ValueError,
        "Cannot parse data type from string ``",
    ),
    ("dtype_zero_lanes", lambda e: kffi.dtype("float32x0"), ValueError, "`float32x0`"),
    (
        "dtype_of_a_float",
        lambda e: kffi.dtype(1.5),
        TypeError,
        "Cannot interpret 1.5 (of type float) as a dtype",
    ),
    (
        "bad_dtype_string_into_kernel",
        lambda e: e.k.full((2,), "notadtype", 1.0),
        ValueError,
        "Cannot parse data type from string `notadtype`",
    ),
    (
        "negative_shape_into_allocating_kernel",
        lambda e: e.k.full((-1,), "float32", 1.0),
        ValueError,
        "negative size in shape",
    ),
    # -- devices
    (
        "unknown_device_type",
        lambda e: kffi.Device("tpu:0"),
        ValueError,
        "Unknown device type 'tpu' in 'tpu:0'",
    ),
    (
        "bad_device_index",
        lambda e: kffi.Device("cuda:x"),
        ValueError,
        "Bad device index in 'cuda:x'",
    ),
    (
        "negative_device_index",
        lambda e: kffi.Device("cuda:-1"),
        ValueError,
        "Bad device index in 'cuda:-1'",
    ),
    (
        "conflicting_device_index",
        lambda e: kffi.Device("cuda:1", 2),
        ValueError,
        "given with a different index 2",
    ),
    ("unknown_device_code", lambda e: kffi.Device(99), ValueError, "Unknown device type 99"),
    (
        "bad_stream_object",
        lambda e: kffi.use_stream("stream").__enter__(),
        TypeError,
        "use_stream expects a torch.cuda.Stream",
    ),
    # -- non-tensors where a Tensor is expected
    (
        "str_as_tensor",
        lambda e: e.k.fill("abc", 1.0),
        TypeError,
        MISMATCH.format("x", "Tensor(mut)", "str", 0, FILL),
    ),
    (
        "list_as_tensor",
        lambda e: e.k.fill([1.0, 2.0], 1.0),
        TypeError,
        MISMATCH.format("x", "Tensor(mut)", "list", 0, FILL),
    ),
    (
        "object_as_tensor",
        lambda e: e.k.fill(object(), 1.0),
        TypeError,
        MISMATCH.format("x", "Tensor(mut)", "object", 0, FILL),
    ),
    (
        "array_module_array_as_tensor",
        lambda e: e.k.fill(__import__("array").array("f", [1.0]), 1.0),
        TypeError,
        MISMATCH.format("x", "Tensor(mut)", "array.array", 0, FILL),
    ),
    (
        "none_as_tensor",
        lambda e: e.k.fill(None, 1.0),
        TypeError,
        MISMATCH.format("x", "Tensor(mut)", "None", 0, FILL),
    ),
    (
        "module_as_tensor",
        lambda e: e.k.fill(e.m, 1.0),
        TypeError,
        MISMATCH.format("x", "Tensor(mut)", "Module", 0, FILL),
    ),
    (
        "dlpack_without_capsule",
        lambda e: e.k.fill(ReturnsNoCapsule(), 1.0),
        TypeError,
        "x: cannot import the ReturnsNoCapsule as a tensor: ReturnsNoCapsule.__dlpack__() did not "
        f"return a DLPack capsule (argument #0 of `{FILL}`)",
    ),
    (
        "dlpack_producer_fails",
        lambda e: e.k.fill(ProducerFails(), 1.0),
        BufferError,
        "x: cannot import the ProducerFails as a tensor: the producer refused "
        f"(argument #0 of `{FILL}`)",
    ),
    (
        "from_dlpack_of_int",
        lambda e: kffi.from_dlpack(3),
        TypeError,
        "Expected a tensor (an object with __dlpack__), got int",
    ),
    (
        "non_native_byte_order",
        lambda e: e.k.describe(np.zeros(2, ">f4")),
        BufferError,
        "x: cannot import the numpy.ndarray as a tensor: ",
    ),
    (
        "kernel_rejects_dtype",
        lambda e: e.k.sum(np.zeros(2, np.int64)),
        TypeError,
        "sum expects a float32 or float64 tensor, got int64",
    ),
    (
        "dlpack_copy_refused",
        lambda e: kffi.from_dlpack(f32()).__dlpack__(copy=True),
        BufferError,
        "does not copy",
    ),
    # -- keywords
    (
        "keyword_without_param_names",
        lambda e: e.t.add_one(x=1),
        TypeError,
        "this function takes no keyword arguments",
    ),
    (
        "unexpected_keyword",
        lambda e: e.m.affine(1.0, 2.0, bogus=3.0),
        TypeError,
        "got an unexpected keyword argument 'bogus'",
    ),
    (
        "duplicate_keyword",
        lambda e: e.m.affine(1.0, 2.0, 3.0, a=1.0),
        TypeError,
        "got multiple values for argument 'a'",
    ),
    (
        "missing_keyword",
        lambda e: e.m.greet(name="x"),
        TypeError,
        "missing required argument 'times'",
    ),
    # -- modules and containers
    (
        "module_missing_file",
        lambda e: kffi.load_module(e.tmp / "missing.so"),
        FileNotFoundError,
        "Cannot load kffi module: no such file",
    ),
    ("module_not_a_library", not_a_library, RuntimeError, "not a loadable shared library"),
    (
        "module_path_not_a_path",
        lambda e: kffi.load_module(123),
        TypeError,
        "expected str, bytes or os.PathLike object, not int",
    ),
    (
        "module_missing_function_attribute",
        lambda e: e.m.missing_function,
        AttributeError,
        "has no function 'missing_function'",
    ),
    (
        "module_missing_function_item",
        lambda e: e.m["missing_function"],
        KeyError,
        "has no function 'missing_function'",
    ),
    (
        "array_index_out_of_range",
        lambda e: kffi.to_kffi((1, 2))[5],
        IndexError,
        "index out of range for a sequence of length 2",
    ),
    (
        "array_index_not_int",
        lambda e: kffi.to_kffi((1, 2))["0"],
        TypeError,
        "Array indices must be integers or slices, not str",
    ),
    ("map_missing_key", lambda e: kffi.to_kffi({"a": 1})["b"], KeyError, "b"),
    ("unhashable_map", lambda e: hash(kffi.to_kffi({"a": 1})), TypeError, "unhashable"),
    # -- native errors of every kind
    (
        "native_value_error",
        lambda e: e.t.raise_error("ValueError", "bad value"),
        ValueError,
        "bad value",
    ),
    ("native_unknown_kind", lambda e: e.t.raise_error("WeirdError", "odd"), kffi.Error, "odd"),
    (
        "register_error_non_class",
        lambda e: kffi.register_error("X", "not a class"),
        TypeError,
        "register_error expects an exception class",
    ),
]


def test_catalogue_is_large_and_ids_are_unique():
    ids = [entry[0] for entry in CATALOGUE]
    assert len(ids) >= 40
    assert len(set(ids)) == len(ids)


@pytest.mark.parametrize(
    "action,exc_type,fragment", [c[1:] for c in CATALOGUE], ids=[c[0] for c in CATALOGUE]
)
def test_bad_input_raises(env, action, exc_type, fragment):
    with pytest.raises(exc_type) as info:
        action(env)
    assert fragment in str(info.value)


def test_process_is_healthy_after_the_catalogue(env):
    # Run the whole catalogue again in one go, then make ordinary calls.
    for _, action, exc_type, _ in CATALOGUE:
        with pytest.raises(exc_type):
            action(env)
    assert env.t.add_one(41) == 42
    assert env.t.echo("still fine") == "still fine"
    assert env.t.apply(lambda x: x * 2, 21) == 42
    a = np.zeros(3, np.float32)
    env.k.fill(a, 1.0)
    assert a.tolist() == [1.0, 1.0, 1.0]
    assert env.m.affine(a=1.0, scale=2.0, offset=3.0) == 5.0
    assert "testing.echo" in kffi.list_global_func_names()
    for name in ("pytest.bad_input.x", "pytest.bad_input.released"):
        assert kffi.get_global_func(name, allow_missing=True) is None
