"""tests/python/core/test_values.py: every value kind round-trips through testing.echo (Python ->
C++ -> Python), and kffi objects behave like the Python types they mirror."""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import math

import kffi
import pytest

INT64_MAX = 2**63 - 1
INT64_MIN = -(2**63)

# Static type indices of the C ABI, as the callee sees the argument.
NONE, INT, BOOL, FLOAT, DATATYPE, DEVICE = 0, 1, 2, 3, 5, 6
RAW_STR, SMALL_STR, SMALL_BYTES = 8, 11, 12
STR, BYTES, FUNCTION, SHAPE, ARRAY, MAP = 65, 66, 68, 69, 71, 72


# ---- plain values ---------------------------------------------------------------------------


def test_none_round_trips(t):
    assert t.echo(None) is None


@pytest.mark.parametrize("value", [True, False])
def test_bool_round_trips_as_bool(t, value):
    result = t.echo(value)
    assert result is value
    assert t.type_index(value) == BOOL


@pytest.mark.parametrize("value", [0, 1, -1, 42, 2**31, -(2**31) - 1, INT64_MAX, INT64_MIN])
def test_int_round_trips(t, value):
    result = t.echo(value)
    assert type(result) is int
    assert result == value


@pytest.mark.parametrize("value", [INT64_MAX + 1, INT64_MIN - 1, 2**100, -(2**100)])
def test_int_outside_int64_raises_overflow_error(t, value):
    with pytest.raises(
        OverflowError,
        match=r"^arg0: Python int too large to convert to "
        r"int64 \(kffi ints are 64-bit\) \(argument #0 of `testing.echo`\)$",
    ):
        t.echo(value)


def test_overflow_message_names_the_argument_position(t):
    with pytest.raises(OverflowError, match=r"^arg2: .*\(argument #2 of `testing.nop`\)$"):
        t.nop(1, 2, 2**64)


def test_int_subclasses_and_index_types_become_int(t):
    import enum

    class Color(enum.IntEnum):
        RED = 7

    assert t.echo(Color.RED) == 7
    assert type(t.echo(Color.RED)) is int
    np = pytest.importorskip("numpy")
    assert t.echo(np.int32(-5)) == -5
    assert type(t.echo(np.uint8(200))) is int


@pytest.mark.parametrize("value", [0.0, -0.0, 1.5, -2.25, 1e300, 5e-324, math.inf, -math.inf])
def test_float_round_trips(t, value):
    result = t.echo(value)
    assert type(result) is float
    assert result == value
    assert math.copysign(1.0, result) == math.copysign(1.0, value)


def test_float_nan_round_trips(t):
    assert math.isnan(t.echo(math.nan))


def test_numpy_float_becomes_float(t):
    np = pytest.importorskip("numpy")
    result = t.echo(np.float32(1.5))
    assert type(result) is float and result == 1.5


# ---- strings and bytes ----------------------------------------------------------------------


@pytest.mark.parametrize("value", ["", "a", "abcdefg"])
def test_short_str_travels_inline(t, value):
    assert len(value.encode()) <= 7
    assert t.type_index(value) == SMALL_STR
    result = t.echo(value)
    assert type(result) is str
    assert result == value


@pytest.mark.parametrize("value", ["abcdefgh", "x" * 1000, "a long string with spaces"])
def test_long_str_is_borrowed_and_round_trips(t, value):
    assert t.type_index(value) == RAW_STR
    assert t.echo(value) == value


@pytest.mark.parametrize(
    "value", ["héllo wörld ✓", "✓", "日本語のテキスト", "emoji 🎉 party", "\u00e9"]
)
def test_unicode_str_round_trips(t, value):
    assert t.echo(value) == value


@pytest.mark.parametrize("value", ["a\x00b", "\x00", "abc\x00defgh", "\x00" * 20])
def test_str_with_embedded_nul_round_trips(t, value):
    result = t.echo(value)
    assert result == value
    assert len(result) == len(value)


def test_long_str_with_nul_travels_as_str_object(t):
    assert t.type_index("abc\x00defgh") == STR


@pytest.mark.parametrize(
    "value", [b"", b"x", b"1234567", b"12345678", b"\x00\xff" * 100, bytes(range(256))]
)
def test_bytes_round_trip(t, value):
    result = t.echo(value)
    assert type(result) is bytes
    assert result == value


def test_short_and_long_bytes_use_their_own_type_indices(t):
    assert t.type_index(b"abc") == SMALL_BYTES
    assert t.type_index(b"abcdefgh") == BYTES


def test_bytearray_arrives_as_bytes(t):
    assert t.echo(bytearray(b"xyz")) == b"xyz"


# ---- dtype ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "float32",
        "float16",
        "bfloat16",
        "int8",
        "uint64",
        "bool",
        "float32x4",
        "float8_e4m3fn",
        "complex64",
    ],
)
def test_dtype_from_string_round_trips(t, text):
    d = kffi.dtype(text)
    assert d == text
    result = t.echo(d)
    assert isinstance(result, kffi.dtype)
    assert result == d
    assert t.type_index(d) == DATATYPE


def test_dtype_fields(t):
    d = kffi.dtype("float32x4")
    assert (d.code, d.bits, d.lanes, d.itemsize) == (2, 32, 4, 16)
    assert repr(d) == "dtype('float32x4')"
    assert kffi.dtype(d) is d


def test_dtype_from_torch_dtype(t):
    torch = pytest.importorskip("torch")
    assert kffi.dtype(torch.float32) == "float32"
    assert kffi.dtype(torch.bfloat16) == "bfloat16"
    # Passed directly, a torch.dtype arrives as a DataType and comes back as kffi.dtype.
    assert t.type_index(torch.int64) == DATATYPE
    result = t.echo(torch.float16)
    assert isinstance(result, kffi.dtype) and result == "float16"


def test_dtype_from_numpy(t):
    np = pytest.importorskip("numpy")
    assert kffi.dtype(np.dtype("int16")) == "int16"
    assert kffi.dtype(np.float64) == "float64"
    assert kffi.dtype(np.dtype(np.bool_)) == "bool"
    result = t.echo(np.dtype("uint8"))
    assert isinstance(result, kffi.dtype) and result == "uint8"


@pytest.mark.parametrize("bad", ["floaty32", "", "float", "int8x0", "x4", "float32 ", "dtype("])
def test_bad_dtype_string_raises_value_error_naming_it(bad):
    with pytest.raises(ValueError) as info:
        kffi.dtype(bad)
    assert f"`{bad}`" in str(info.value)


def test_dtype_of_unrelated_object_is_type_error():
    with pytest.raises(TypeError, match="as a dtype"):
        kffi.dtype(3)


def test_dtype_is_hashable_and_equal_to_its_string():
    assert hash(kffi.dtype("int32")) == hash("int32")
    assert {kffi.dtype("int32"): 1}["int32"] == 1


# ---- device ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text,device_type,index",
    [("cpu", 1, 0), ("cuda:0", 2, 0), ("cuda:3", 2, 3), ("gpu:1", 2, 1), ("rocm:2", 10, 2)],
)
def test_device_from_string_round_trips(t, text, device_type, index):
    d = kffi.Device(text)
    assert (d.device_type, d.index) == (device_type, index)
    result = t.echo(d)
    assert isinstance(result, kffi.Device)
    assert result == d
    assert t.type_index(d) == DEVICE


def test_device_str_repr_and_dlpack_device():
    d = kffi.Device("cuda:1")
    assert str(d) == "cuda:1"
    assert repr(d) == "Device('cuda:1')"
    assert d.__dlpack_device__() == (2, 1)
    assert d == "cuda:1"
    assert hash(d) == hash(kffi.Device("cuda", 1))


def test_device_from_torch_device(t):
    torch = pytest.importorskip("torch")
    assert kffi.Device(torch.device("cuda:1")) == kffi.Device("cuda:1")
    assert kffi.Device(torch.device("cpu")) == kffi.Device("cpu")
    assert t.type_index(torch.device("cpu")) == DEVICE
    assert t.echo(torch.device("cuda", 2)) == kffi.Device("cuda:2")


def test_dtype_and_device_pickle_round_trip():
    import pickle

    d = pickle.loads(pickle.dumps(kffi.dtype("bfloat16")))
    assert type(d) is kffi.dtype and d == "bfloat16" and d.bits == 16
    v = pickle.loads(pickle.dumps(kffi.Device("cuda:2")))
    assert v == kffi.Device("cuda:2")


@pytest.mark.parametrize(
    "bad,fragment",
    [
        ("tpu:0", "Unknown device type 'tpu'"),
        ("cuda:x", "Bad device index in 'cuda:x'"),
        (99, "Unknown device type 99"),
    ],
)
def test_bad_device_raises_value_error(bad, fragment):
    with pytest.raises(ValueError, match=fragment):
        kffi.Device(bad)


# ---- containers -----------------------------------------------------------------------------


def test_tuple_becomes_array_and_comes_back_a_tuple(t):
    result = t.echo((1, "two", 3.0, None, True))
    assert type(result) is tuple
    assert result == (1, "two", 3.0, None, True)
    assert t.type_index((1,)) == ARRAY


def test_list_becomes_array(t):
    assert t.type_index([1, 2]) == ARRAY
    assert t.echo([1, 2, 3]) == (1, 2, 3)


def test_nested_containers_round_trip(t):
    value = [1, [2, [3, "deep"]], {"k": (4, 5)}]
    result = t.echo(value)
    assert result[0] == 1
    assert result[1] == (2, (3, "deep"))  # nested Arrays are tuples too
    assert isinstance(result[2], kffi.Map) and result[2]["k"] == (4, 5)
    assert isinstance(result[2]["k"], kffi.Array)  # inside a Map, an Array stays a kffi.Array


def test_empty_containers_round_trip(t):
    assert len(t.echo(())) == 0
    assert len(t.echo({})) == 0


def test_dict_becomes_map(t):
    result = t.echo({"a": 1, "b": "two", 3: 4.5})
    assert isinstance(result, kffi.Map)
    assert result == {"a": 1, "b": "two", 3: 4.5}
    assert t.type_index({"a": 1}) == MAP


def test_map_with_non_str_keys(t):
    value = {1: "int", 2.5: "float", None: "none", (1, 2): "tuple", b"raw": "bytes"}
    m = t.echo(value)
    assert len(m) == 5
    assert m[1] == "int" and m[2.5] == "float" and m[None] == "none" and m[b"raw"] == "bytes"
    assert m[(1, 2)] == "tuple"  # the key came back as a kffi.Array, equal to the tuple


def test_deeply_nested_containers_round_trip(t):
    deep = "bottom"
    for _ in range(200):
        deep = [deep]
    result = t.echo(deep)
    for _ in range(200):
        result = result[0]
    assert result == "bottom"


def test_functions_inside_containers_stay_callable(t):
    result = t.echo({"f": lambda x: x + 1, "fs": [len]})
    assert result["f"](1) == 2
    assert result["fs"][0]("abc") == 3


def test_map_keeps_insertion_order(t):
    keys = [f"key{i}" for i in range(20)]
    result = t.echo({k: i for i, k in enumerate(keys)})
    assert list(result) == keys


def test_array_behaves_like_tuple(t):
    a = kffi.to_kffi((10, 20, 30))
    assert len(a) == 3
    assert a[0] == 10 and a[-1] == 30
    assert a[1:] == [20, 30]
    assert list(a) == [10, 20, 30]
    assert list(reversed(a)) == [30, 20, 10]
    assert 20 in a and 40 not in a
    assert a.index(30) == 2 and a.count(10) == 1
    assert a == (10, 20, 30) and a == [10, 20, 30]
    assert a != (10, 20)
    assert hash(a) == hash((10, 20, 30))
    assert repr(a) == "Array([10, 20, 30])"


@pytest.mark.parametrize("index", [3, -4, 100])
def test_array_index_out_of_range_is_index_error(t, index):
    a = kffi.to_kffi((1, 2, 3))
    with pytest.raises(IndexError, match="out of range"):
        a[index]


def test_array_index_with_str_is_type_error(t):
    a = kffi.to_kffi((1, 2, 3))
    with pytest.raises(TypeError):
        a["x"]


def test_map_behaves_like_dict(t):
    m = t.echo({"a": 1, "b": 2})
    assert len(m) == 2
    assert m["a"] == 1
    assert "a" in m and "z" not in m
    assert list(m) == ["a", "b"]
    assert list(m.keys()) == ["a", "b"]
    assert list(m.values()) == [1, 2]
    assert list(m.items()) == [("a", 1), ("b", 2)]
    assert m.get("z", 9) == 9
    assert dict(m) == {"a": 1, "b": 2}
    assert m == {"a": 1, "b": 2}
    assert m != {"a": 1}
    assert repr(m) == "Map({'a': 1, 'b': 2})"
    with pytest.raises(TypeError):
        hash(m)  # like dict


def test_map_missing_key_is_key_error(t):
    m = t.echo({"a": 1})
    with pytest.raises(KeyError) as info:
        m["missing"]
    assert info.value.args == ("missing",)


def test_shape_behaves_like_tuple_of_ints(t):
    s = t.make_shape(2, 3, 4)
    assert isinstance(s, kffi.Shape)
    assert len(s) == 3
    assert s[0] == 2 and s[-1] == 4
    assert tuple(s) == (2, 3, 4)
    assert s == (2, 3, 4) and s == [2, 3, 4]
    assert hash(s) == hash((2, 3, 4))
    assert repr(s) == "Shape((2, 3, 4))"
    with pytest.raises(IndexError):
        s[3]
    assert t.type_index(s) == SHAPE
    assert t.echo(s).same_as(s)


def test_list_and_dict_objects_mirror_list_and_dict(t):
    lst = t.make_list(1, "x")
    assert isinstance(lst, kffi.List) and isinstance(lst, kffi.Array)
    assert lst == [1, "x"]
    with pytest.raises(TypeError):
        hash(lst)  # mutable, like list
    d = t.make_dict("k", 1, 2, "v")
    assert isinstance(d, kffi.Dict) and isinstance(d, kffi.Map)
    assert d == {"k": 1, 2: "v"}


def test_kffi_objects_keep_identity_of_native_object_through_echo(t):
    a = kffi.to_kffi({1: 2})
    b = t.echo(a)
    assert b.same_as(a)
    assert b._handle == a._handle


def test_to_kffi_shows_the_converted_value():
    assert isinstance(kffi.to_kffi((1, 2)), kffi.Array)
    assert isinstance(kffi.to_kffi({"a": 1}), kffi.Map)
    assert kffi.to_kffi(5) == 5


# ---- functions and opaque objects -------------------------------------------------------------


def test_callable_becomes_function(t):
    f = t.echo(lambda x: x * 2)
    assert isinstance(f, kffi.Function)
    assert f(21) == 42
    assert t.type_index(len) == FUNCTION


def test_function_round_trips_as_same_native_function(t):
    result = t.echo(t.add_one)
    assert isinstance(result, kffi.Function)
    assert result.same_as(t.add_one)
    assert result(1) == 2


def test_function_equality_and_hash_follow_the_native_object(t):
    f1 = kffi.get_global_func("testing.add_one")
    f2 = kffi.get_global_func("testing.add_one")
    assert f1 == f2 and hash(f1) == hash(f2)
    assert f1 != t.echo
    assert "ffi.Function" in repr(f1)


def test_kffi_function_constructor_wraps_callables():
    f = kffi.Function(lambda a, b: a - b)
    assert f(5, 3) == 2
    assert kffi.Function(f) is f


def test_arbitrary_python_object_comes_back_as_itself(t):
    class Thing:
        pass

    thing = Thing()
    assert t.echo(thing) is thing
    sentinel = object()
    assert t.echo(sentinel) is sentinel
    assert t.echo([sentinel])[0] is sentinel


def test_count_args_sees_every_argument(t):
    assert t.count_args() == 0
    assert t.count_args(1, "a", None, 2.0, b"x", (1,), {}) == 7
    assert t.count_args(*range(50)) == 50


def test_tensor_object_equality_and_hash_follow_identity(t):
    np = pytest.importorskip("numpy")
    x = kffi.from_dlpack(np.zeros(3))
    y = kffi.from_dlpack(np.zeros(3))
    assert t.echo(x) is x
    assert x == x and x != y  # like torch.Tensor objects in a dict: by identity
    assert len({x: 1, y: 2}) == 2
    assert repr(x) == "kffi.Tensor(shape=(3,), dtype=float64, device=cpu)"


@pytest.mark.parametrize(
    "make",
    [
        lambda t: kffi.to_kffi((1, 2)),
        lambda t: t.echo({"a": 1}),
        lambda t: t.make_shape(1),
        lambda t: kffi.Function(len),
    ],
    ids=["array", "map", "shape", "function"],
)
def test_released_object_has_a_safe_repr_and_no_handle(t, make):
    obj = make(t)
    obj._release()
    assert obj._handle == 0 and obj._use_count == 0 and obj.type_key is None
    text = repr(obj)
    assert "released" in text or "null" in text
