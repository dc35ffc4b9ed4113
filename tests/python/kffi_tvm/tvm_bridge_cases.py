"""tests/python/kffi_tvm/tvm_bridge_cases.py: what a TVM-FFI library loaded through kffi must do.

Each case takes the kffi Module of tests/tvm_libs/tvm_testlib.cc and asserts. The same cases run
with the library bound to a loaded apache-tvm-ffi (test_tvm_bridge.py, in-process) and to kffi's
own shim in a process that never loads libtvm_ffi (test_tvm_bridge.py, in a subprocess): the
behaviour must not depend on the runtime.
"""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import gc
import sys
import traceback
import weakref

import kffi
import numpy as np


def _raises(exc_type, fragment, fn, *args):
    try:
        fn(*args)
    except exc_type as e:
        assert fragment in str(e), f"{fragment!r} not in {str(e)!r}"
        return e
    raise AssertionError(f"{exc_type.__name__} not raised")


def case_scalars(mod):
    assert mod.add_int(2, 40) == 42
    assert mod.add_int(-(2**62), 2**62 - 1) == -1
    assert mod.scale_float(1.5, 2.0) == 3.0
    assert mod.negate(True) is False
    assert mod.negate(False) is True
    _raises(TypeError, "Mismatched type on argument #0 when calling: `add_int", mod.add_int, "x", 1)


def case_strings(mod):
    assert mod.concat("short", "!") == "short!"
    long = "a string longer than seven bytes"
    assert mod.concat(long, "/" + long) == long + "/" + long
    assert mod.concat("é", "ü") == "éü"
    assert mod.bytes_len(b"0123456789abc") == 13
    assert mod.bytes_len(b"") == 0


def case_containers(mod):
    r = mod.make_range(5)
    assert r == (0, 1, 2, 3, 4)  # Array results arrive as tuples
    assert mod.sum_array([1, 2, 3]) == 6
    assert mod.sum_array((4, 5)) == 9
    assert mod.sum_array(r) == 10
    assert [list(x) for x in mod.nested(3)] == [[], [0], [0, 1]]
    assert tuple(mod.make_shape(2, 3)) == (2, 3)
    assert mod.dtype_name(kffi.dtype("bfloat16")) == "bfloat16"
    echoed = mod.echo([1, "two", 3.5])
    assert list(echoed) == [1, "two", 3.5]


def case_numpy_tensors(mod):
    x = np.arange(6, dtype=np.float32)
    y = np.zeros(6, dtype=np.float32)
    assert mod.add_one(x, y) is None
    np.testing.assert_array_equal(y, x + 1)
    assert mod.tensor_sum(x) == 15.0
    _raises(
        TypeError,
        "add_one expects float32, got int32",
        mod.add_one,
        np.zeros(3, np.int32),
        np.zeros(3, np.int32),
    )
    _raises(
        ValueError,
        "x has 3 elements, y has 4",
        mod.add_one,
        np.zeros(3, np.float32),
        np.zeros(4, np.float32),
    )


def case_torch_tensors(mod):
    import torch

    x = torch.arange(5, dtype=torch.float32)
    y = torch.empty(5)
    mod.add_one(x, y)
    assert y.tolist() == [1.0, 2.0, 3.0, 4.0, 5.0]
    assert mod.tensor_sum(x[1:]) == 10.0
    _raises(
        TypeError,
        "add_one expects float32, got float64",
        mod.add_one,
        torch.zeros(2, dtype=torch.float64),
        torch.zeros(2, dtype=torch.float64),
    )


def case_allocated_tensor(mod):
    t = mod.iota(4)
    assert isinstance(t, kffi.Tensor)
    assert t.shape == (4,) and str(t.dtype) == "float32"
    np.testing.assert_array_equal(np.from_dlpack(t), np.arange(4, dtype=np.float32))


def case_callbacks(mod):
    assert mod.call_twice(lambda v: v * 2, 3) == 12
    add5 = mod.make_adder(5)
    assert isinstance(add5, kffi.Function)
    assert add5(10) == 15
    assert mod.apply(add5, 1) == 6
    assert mod.call_twice(add5, 0) == 10
    # A kffi function passed in and handed back is the same function.
    f = kffi.to_kffi(lambda v: v - 1)
    assert mod.echo(f)(10) == 9
    assert mod.apply(lambda s: s + "!", "hi") == "hi!"


def case_callback_errors(mod):
    original = KeyError("raised inside the callback")

    def fail(v):
        raise original

    try:
        mod.call_twice(fail, 1)
    except KeyError as e:
        assert e is original
    else:
        raise AssertionError("KeyError not raised")
    # An error from a function the library made, called by kffi.
    _raises(TypeError, "Mismatched type on argument #0", mod.make_adder(1), "not an int")
    # The same error, raised inside the library by a call through that function.
    _raises(TypeError, "Mismatched type on argument #0", mod.apply, mod.make_adder(1), "x")


def case_error_kinds(mod):
    kinds = {
        "ValueError": ValueError,
        "TypeError": TypeError,
        "IndexError": IndexError,
        "KeyError": KeyError,
        "RuntimeError": RuntimeError,
        "AttributeError": AttributeError,
        "NotImplementedError": NotImplementedError,
    }
    for kind, cls in kinds.items():
        message = f"a {kind} from TVM-FFI code"
        try:
            mod.raise_error(kind, message)
        except cls as e:
            text = e.args[0] if kind == "KeyError" else str(e)
            assert text == message, (kind, text)
            frames = "".join(traceback.format_exception(type(e), e, e.__traceback__))
            assert "tvm_testlib.cc" in frames and "RaiseError" in frames, frames
        else:
            raise AssertionError(f"{kind} not raised")
    _raises(
        ValueError, "check_positive: expected a positive number, got -1", mod.check_positive, -1
    )
    assert mod.check_positive(1) is None


def case_maps_do_not_cross(mod):
    _raises(
        TypeError,
        "returned a Map (kffi and TVM-FFI lay out hash maps differently",
        mod.make_map,
        "k",
        1,
    )
    _raises(
        TypeError, "Argument #0 of the TVM-FFI function `map_size` is a Map", mod.map_size, {"a": 1}
    )
    _raises(TypeError, "is a sequence holding a Map or Dict", mod.echo, [[{"a": 1}]])
    assert mod.add_int(1, 2) == 3  # the module is fine afterwards


def case_metadata(mod):
    meta = mod.metadata("add_int")
    assert meta["name"] == "add_int"
    assert [(p["name"], p["type"]) for p in meta["params"]] == [("arg0", "int"), ("arg1", "int")]
    assert meta["return"] == "int" and meta["doc"] == "Adds two integers."
    assert mod.add_int.__doc__.startswith("add_int(arg0: int, arg1: int) -> int")
    assert "Adds two integers." in mod.add_int.__doc__
    one = mod.metadata("add_one")
    assert [p["type"] for p in one["params"]] == ["Tensor", "Tensor"]
    assert one["return"] == "None"
    assert mod.metadata("make_range")["return"] == "Array<int>"
    assert mod.metadata("make_map")["return"] == "Map<str, int>"
    assert mod.metadata("call_twice")["params"][0]["type"] == "Function"
    assert mod.add_int(arg0=1, arg1=2) == 3
    try:
        mod.metadata("bad_meta")
    except ValueError as e:
        assert "metadata of function `bad_meta`" in str(e) and "malformed" in str(e), str(e)
    else:
        raise AssertionError("malformed metadata accepted")


def case_listing(mod):
    names = mod.functions()
    assert "add_int" in names and "raise_error" in names and "three_tensors" in names
    assert not any(n.startswith("_") for n in names)
    assert "add_int" in mod
    try:
        getattr(mod, "no_such_function")  # noqa: B009 (the attribute access is tested)
    except AttributeError as e:
        assert "no_such_function" in str(e)
    else:
        raise AssertionError("AttributeError not raised")


# ---- ffi::Tensor parameters (FlashInfer's style): owning Tensors, zero-copy -----------------------
# The same checks run on every library build, with metadata (only `ffi::Tensor` parameters get
# owning Tensors) and without (every tensor argument does, as apache-tvm-ffi passes them).


def _owned_tensor_params(mod, make):
    x = make([1.0, 2.0, 3.0, 4.0])
    assert mod.owned_sum(x) == 10.0
    assert mod.owned_sum(x[1:]) == 9.0  # a view: its offset and shape, not a copy's
    y = make([0.0] * 4)
    assert mod.owned_add_one(x, y) is None
    assert [float(v) for v in y] == [2.0, 3.0, 4.0, 5.0]  # written in place: zero-copy
    assert mod.mixed_sum(x, make([5.0])) == 15.0  # a TensorView and an ffi::Tensor parameter
    assert mod.optional_sum(None) == -1.0 and mod.optional_sum(x) == 10.0
    assert mod.owned_identity(x) is x  # handed back: the caller's own tensor
    _raises(
        TypeError, "owned_sum expects float32, got float64", mod.owned_sum, make([1.0], "float64")
    )
    # The callee holds one reference for the call, none after it.
    before = sys.getrefcount(x)
    for _ in range(100):
        mod.owned_sum(x)
    assert sys.getrefcount(x) == before


def _array(values, dtype="float32"):
    return np.array(values, dtype=dtype)


def _torch(values, dtype="float32"):
    import torch

    return torch.tensor(values, dtype=getattr(torch, dtype))


def case_owned_tensor_params_numpy(mod):
    _owned_tensor_params(mod, _array)


def case_owned_tensor_params_torch(mod):
    _owned_tensor_params(mod, _torch)


def _kept_tensor(mod, make):
    """The callee keeps the Tensor after the call: the framework tensor's memory stays alive until
    the callee drops it, then the tensor is freed (nothing leaks)."""
    x = make([1.0, 2.0, 3.0])
    alive = weakref.ref(x)
    before = sys.getrefcount(x)
    mod.keep_tensor(x)
    assert sys.getrefcount(x) == before + 1  # the kept Tensor holds the framework tensor
    assert mod.kept_use_count() == 1  # and the library holds the only reference to it
    del x
    gc.collect()
    assert alive() is not None
    garbage = [make([-7.0] * 3) for _ in range(64)]  # would reuse freed memory
    assert mod.kept_sum() == 6.0
    kept = mod.kept_tensor()  # the stored Tensor, returned after its owner was dropped
    assert isinstance(kept, kffi.Tensor)
    assert np.from_dlpack(kept).tolist() == [1.0, 2.0, 3.0]
    assert mod.kept_use_count() == 2
    del kept, garbage
    mod.release_kept()
    gc.collect()
    assert alive() is None  # released with the callee's last reference


def _reused_tensor_objects(mod, make):
    """The Tensor objects made for calls are reused once no callee holds them: each call still
    sees its own tensor (every rank, above the reused objects' room too), and a kept one is never
    reused under its keeper."""
    shapes = [(4,), (2, 3), (1, 2, 1, 3, 1, 1), (1, 1, 2, 1, 1, 1, 3), (2, 1, 1, 1, 1, 1, 1, 1, 2)]
    for _ in range(3):
        for shape in shapes:
            a = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
            assert mod.owned_sum(make(a.tolist())) == float(a.sum()), shape
            assert mod.mixed_sum(make(a.tolist()), make((a + 1).tolist())) == float(
                2 * a.sum() + a.size
            )
    kept = make([1.0, 2.0, 3.0])
    mod.keep_tensor(kept)
    for i in range(20):  # later calls on this thread must not repoint the kept Tensor
        assert mod.owned_sum(make([float(i)] * 5)) == 5.0 * i
    assert mod.kept_sum() == 6.0
    assert mod.kept_use_count() == 1
    mod.release_kept()


def case_reused_tensor_objects_numpy(mod):
    _reused_tensor_objects(mod, _array)


def case_reused_tensor_objects_torch(mod):
    _reused_tensor_objects(mod, _torch)


def case_kept_tensor_numpy(mod):
    _kept_tensor(mod, _array)


def case_kept_tensor_torch(mod):
    _kept_tensor(mod, _torch)


def _layernorm(mod, make, to_numpy):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 8)).astype(np.float32)
    gamma = rng.standard_normal(8).astype(np.float32)
    beta = rng.standard_normal(8).astype(np.float32)
    out = make(np.zeros((3, 8), np.float32))
    mod.layernorm(out, make(x), make(gamma), make(beta), 1e-5)
    mean = x.mean(axis=1, keepdims=True)
    ref = (x - mean) / np.sqrt(x.var(axis=1, keepdims=True) + 1e-5) * gamma + beta
    np.testing.assert_allclose(to_numpy(out), ref, rtol=1e-4, atol=1e-5)


def case_layernorm_numpy(mod):
    _layernorm(mod, lambda a: a.copy(), lambda a: a)


def case_layernorm_torch(mod):
    import torch

    _layernorm(mod, torch.from_numpy, lambda t: t.numpy())


# ---- objects of the library's own types ---------------------------------------------------------


def case_objects_of_library_types(mod):
    p = mod.make_point(3, 4)
    assert p.type_key == "tvm_testlib.Point"
    assert "tvm_testlib.Point" in repr(p) and str(p) == repr(p)
    assert hash(p) == hash(p) and p == p
    assert mod.point_x(p) == 3
    _raises(AttributeError, "has no attribute 'x'", setattr, p, "x", 5)
    assert mod.point_x(p) == 3
    big = mod.make_big_int()  # ffi.BigInt: a static TVM-FFI type kffi's registry lacks
    assert big.type_key == "ffi.BigInt" and "ffi.BigInt" in repr(big)
    _raises(AttributeError, "has no attribute 'value'", setattr, big, "value", 1)


CASES = {
    name[len("case_") :]: fn
    for name, fn in sorted(globals().items())
    if name.startswith("case_") and callable(fn)
}
