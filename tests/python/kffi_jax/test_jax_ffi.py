"""tests/python/kffi_jax/test_jax_ffi.py: kffi.jax.register_ffi_target: kffi functions as XLA FFI
targets (CPU), called with jax.ffi.ffi_call, eagerly and under jax.jit."""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import itertools
import threading

import numpy as np
import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp
import jax_support
import kffi
import kffi.jax
from malloc_heap import mallinfo_used

jk = jax_support.jk  # the test kernel library (a session fixture)

_names = itertools.count()


def unique(prefix="t"):
    return f"kffi_test_{prefix}_{next(_names)}"


def sds(x):
    return jax.ShapeDtypeStruct(x.shape, x.dtype)


def test_eager_and_jit(jk):
    name = unique("add_one")
    capsule = kffi.jax.register_ffi_target(name, jk.add_one)
    assert type(capsule).__name__ == "PyCapsule"
    x = jnp.arange(6, dtype=jnp.float32).reshape(2, 3)
    f = jax.ffi.ffi_call(name, sds(x))
    np.testing.assert_array_equal(f(x), np.arange(6).reshape(2, 3) + 1)
    g = jax.jit(lambda a: f(f(a)) * 2)
    np.testing.assert_array_equal(g(x), (np.arange(6).reshape(2, 3) + 2) * 2)
    assert (name, "cpu") in kffi.jax.registered_targets()


def test_buffers_are_zero_copy_row_major_views(jk):
    name = unique("probe")
    kffi.jax.register_ffi_target(name, jk.probe)
    x = jnp.arange(24, dtype=jnp.float32).reshape(2, 3, 4)
    y = jax.ffi.ffi_call(name, jax.ShapeDtypeStruct((5,), jnp.int16))(x)
    assert y.shape == (5,) and y.dtype == jnp.int16
    seen = jk.last_probe()
    kind, ptr, flags, shape, strides, dtype, device, offset, has_strides = seen[0]
    assert (kind, tuple(shape), tuple(strides), str(dtype)) == (
        "tensor",
        (2, 3, 4),
        (12, 4, 1),
        "float32",
    )
    assert has_strides and offset == 0
    assert (device.device_type, device.index) == (1, 0)  # kDLCPU, 0
    assert ptr == x.unsafe_buffer_pointer()  # XLA's parameter buffer itself: no copy
    assert flags == 1  # kKFFITensorFlagReadOnly: an input XLA does not let us write
    kind, ptr, flags, shape, strides, dtype, _, _, _ = seen[1]
    assert (kind, tuple(shape), tuple(strides), str(dtype), flags) == (
        "tensor",
        (5,),
        (1,),
        "int16",
        0,
    )
    assert ptr == y.unsafe_buffer_pointer()


def test_scalar_buffers_and_dtypes(jk):
    name = unique("probe_dtypes")
    kffi.jax.register_ffi_target(name, jk.probe, arg_spec=["args"])
    args = [
        jnp.float32(1.5),
        jnp.array([True]),
        jnp.zeros((2,), jnp.bfloat16),
        jnp.zeros((1,), jnp.float16),
        jnp.zeros((1,), jnp.uint8),
        jnp.zeros((1,), jnp.int8),
        jnp.zeros((1,), jnp.complex64),
    ]
    jax.ffi.ffi_call(name, (), has_side_effect=True)(*args)  # no results: keep it from DCE
    seen = jk.last_probe()
    assert [str(s[5]) for s in seen] == [
        "float32",
        "bool",
        "bfloat16",
        "float16",
        "uint8",
        "int8",
        "complex64",
    ]
    assert tuple(seen[0][3]) == () and tuple(seen[0][4]) == ()


def test_attributes_of_each_type(jk):
    name = unique("attrs")
    keys = [
        "i8",
        "i16",
        "i32",
        "i64",
        "u8",
        "u32",
        "u64",
        "b",
        "f32",
        "f64",
        "short",
        "long",
        "ints",
        "floats",
    ]
    kffi.jax.register_ffi_target(name, jk.probe, arg_spec=[f"attrs.{k}" for k in keys])
    jax.ffi.ffi_call(name, (), has_side_effect=True)(
        i8=np.int8(-8),
        i16=np.int16(-16),
        i32=np.int32(-(2**31)),
        i64=np.int64(2**62),
        u8=np.uint8(255),
        u32=np.uint32(2**32 - 1),
        u64=np.uint64(2**63 - 1),
        b=np.bool_(True),
        f32=np.float32(0.25),
        f64=np.float64(1 / 3),
        short="abc",
        long="a longer string value",
        ints=np.array([1, -2, 3], np.int32),
        floats=np.array([0.5, 2.0], np.float64),
    )
    seen = list(jk.last_probe())
    assert seen[:10] == [-8, -16, -(2**31), 2**62, 255, 2**32 - 1, 2**63 - 1, True, 0.25, 1 / 3]
    assert type(seen[7]) is bool and type(seen[8]) is float and type(seen[0]) is int
    assert seen[10] == "abc" and seen[11] == "a longer string value"
    assert list(seen[12]) == [1, -2, 3] and list(seen[13]) == [0.5, 2.0]


def test_arg_spec_orders_and_single_buffers(jk):
    name = unique("scale")
    # scale_into(y, x, factor): the result first, then the input, then an attribute.
    kffi.jax.register_ffi_target(name, jk.scale_into, arg_spec=["rets", "args", "attrs.factor"])
    x = jnp.arange(4, dtype=jnp.float32)
    y = jax.ffi.ffi_call(name, sds(x))(x, factor=np.float64(2.5))
    np.testing.assert_array_equal(y, np.arange(4) * 2.5)
    name2 = unique("add_second")
    kffi.jax.register_ffi_target(name2, jk.add_one, arg_spec=["args.1", "rets.0"])
    z = jax.jit(jax.ffi.ffi_call(name2, sds(x)))(x, x * 10)
    np.testing.assert_array_equal(z, np.arange(4) * 10 + 1)


@pytest.mark.parametrize(
    "spec, error, message",
    [
        ("args", TypeError, "arg_spec is a list of str, got the str 'args'"),
        (["args", 3], TypeError, "arg_spec items are str, got 3"),
        (["argz"], ValueError, "arg_spec item 'argz' is not 'args', 'rets', 'attrs.<key>'"),
        (["attrs.1x"], ValueError, "the attribute name must be an identifier"),
        (["args.-1"], ValueError, "arg_spec item 'args.-1'"),
    ],
)
def test_bad_arg_spec(jk, spec, error, message):
    with pytest.raises(error) as e:
        kffi.jax.register_ffi_target(unique("bad"), jk.add_one, arg_spec=spec)
    assert message in str(e.value)


def test_bad_registration_arguments(jk):
    with pytest.raises(ValueError, match="platform is 'cpu' or 'gpu'"):
        kffi.jax.register_ffi_target(unique("p"), jk.add_one, platform="tpu")
    with pytest.raises(TypeError, match="a target name is a non-empty str"):
        kffi.jax.register_ffi_target("", jk.add_one)
    with pytest.raises(TypeError, match="expected a kffi.Function \\(or a callable\\), got int"):
        kffi.jax.register_ffi_target(unique("f"), 3)


def test_registering_again(jk):
    name = unique("again")
    a = kffi.jax.register_ffi_target(name, jk.add_one)
    assert kffi.jax.register_ffi_target(name, jk.add_one) is a  # the same: a no-op
    with pytest.raises(ValueError, match="already registered for cpu with another function"):
        kffi.jax.register_ffi_target(name, jk.square)
    with pytest.raises(ValueError, match="already registered"):
        kffi.jax.register_ffi_target(name, jk.add_one, arg_spec=["rets", "args"])


def test_missing_index_and_attribute_reach_python(jk):
    name = unique("missing")
    kffi.jax.register_ffi_target(name, jk.scale_into, arg_spec=["rets.0", "args.3", "attrs.factor"])
    x = jnp.ones((2,), jnp.float32)
    with pytest.raises(Exception) as e:
        jax.ffi.ffi_call(name, sds(x))(x, factor=np.float64(1))
    assert (
        f"IndexError: kffi.jax target `{name}`: arg_spec names args.3 but the call has 1 "
        "inputs" in str(e.value)
    )
    name = unique("missing_attr")
    kffi.jax.register_ffi_target(name, jk.scale_into, arg_spec=["rets", "args", "attrs.factor"])
    with pytest.raises(Exception) as e:
        jax.ffi.ffi_call(name, sds(x))(x, other=np.float64(1))
    assert (
        f"KeyError: kffi.jax target `{name}`: attribute 'factor' named in arg_spec is not "
        "given (attributes: other)" in str(e.value)
    )


def test_kernel_errors_reach_python_eager_and_jit(jk):
    name = unique("fail")
    kffi.jax.register_ffi_target(name, jk.fail, arg_spec=["args", "rets", "attrs.message"])
    x = jnp.ones((3,), jnp.float32)
    f = jax.ffi.ffi_call(name, sds(x))
    with pytest.raises(jax.errors.JaxRuntimeError) as e:
        f(x, message="the kernel says no")
    assert f"INVALID_ARGUMENT: ValueError: the kernel says no (in kffi.jax target `{name}`)" in str(
        e.value
    )
    with pytest.raises(jax.errors.JaxRuntimeError) as e:
        jax.jit(lambda a: f(a, message="inside jit") + 1)(x).block_until_ready()
    assert "ValueError: inside jit" in str(e.value)
    # The process stays healthy: the next call works.
    ok = unique("after_fail")
    kffi.jax.register_ffi_target(ok, jk.add_one)
    np.testing.assert_array_equal(jax.ffi.ffi_call(ok, sds(x))(x), np.full(3, 2.0))


def test_argument_errors_of_the_kffi_function_reach_python(jk):
    name = unique("arity")
    kffi.jax.register_ffi_target(name, jk.add_one, arg_spec=["args"])  # one argument short
    x = jnp.ones((2,), jnp.float32)
    with pytest.raises(jax.errors.JaxRuntimeError) as e:
        jax.ffi.ffi_call(name, (), has_side_effect=True)(x)
    assert "INVALID_ARGUMENT: TypeError:" in str(e.value) and "add_one" in str(e.value)


def test_aliased_input_is_writable(jk):
    name = unique("inplace_probe")
    kffi.jax.register_ffi_target(name, jk.probe, arg_spec=["args", "rets"])
    x = jnp.arange(3, dtype=jnp.float32)
    f = jax.ffi.ffi_call(name, (sds(x), sds(x)), input_output_aliases={1: 0})
    jax.jit(f)(x + 0, x + 1)
    flags = [t[2] for t in jk.last_probe()]
    # Input 0 is read-only; input 1 is result 0's memory (aliased): writable, like the results.
    assert flags == [1, 0, 0, 0]
    name = unique("inplace")
    kffi.jax.register_ffi_target(name, jk.add_inplace, arg_spec=["rets", "attrs.value"])
    g = jax.ffi.ffi_call(name, sds(x), input_output_aliases={0: 0})
    np.testing.assert_array_equal(jax.jit(lambda a: g(a, value=np.float64(5)))(x), np.arange(3) + 5)
    np.testing.assert_array_equal(x, np.arange(3))  # the caller's array is untouched


def test_allocating_kernel_writes_xla_result_buffer(jk):
    name = unique("alloc")
    kffi.jax.register_ffi_target(name, jk.alloc_plus_one, arg_spec=["args"])
    x = jnp.arange(5, dtype=jnp.float32)
    y = jax.ffi.ffi_call(name, sds(x))(x)
    np.testing.assert_array_equal(y, np.arange(5) + 1)
    assert jk.last_alloc() == y.unsafe_buffer_pointer()  # Tensor::FromEnvAlloc got XLA's buffer
    two = unique("alloc_two")
    kffi.jax.register_ffi_target(two, jk.alloc_two, arg_spec=["args"])
    a, b = jax.jit(jax.ffi.ffi_call(two, (sds(x), sds(x))))(x)
    np.testing.assert_array_equal(a, np.arange(5) + 1)
    np.testing.assert_array_equal(b, np.arange(5) * 2)


def test_returned_tensor_in_own_memory_is_copied_on_cpu(jk):
    name = unique("own")
    kffi.jax.register_ffi_target(name, jk.own_host_times_three, arg_spec=["args"])
    x = jnp.arange(4, dtype=jnp.float32)
    np.testing.assert_array_equal(jax.jit(jax.ffi.ffi_call(name, sds(x)))(x), np.arange(4) * 3)


def test_scratch_allocation_on_cpu_uses_host_memory(jk):
    name = unique("scratch")
    kffi.jax.register_ffi_target(name, jk.alloc_scratch, arg_spec=["args"])
    x = jnp.ones((4,), jnp.float32)
    assert jax.ffi.ffi_call(name, (), has_side_effect=True)(x) == ()


def test_return_value_mismatches(jk):
    x = jnp.ones((2,), jnp.float32)
    name = unique("none")
    kffi.jax.register_ffi_target(name, jk.returns_nothing, arg_spec=["args"])
    with pytest.raises(Exception) as e:
        jax.ffi.ffi_call(name, sds(x))(x)
    assert (
        f"ValueError: kffi.jax target `{name}`: the function returned None, but 1 XLA "
        "result(s) were neither arguments (arg_spec 'rets') nor returned" in str(e.value)
    )
    name = unique("count")
    kffi.jax.register_ffi_target(name, jk.alloc_two, arg_spec=["args"])
    with pytest.raises(Exception) as e:
        jax.ffi.ffi_call(name, (sds(x),) * 3)(x)
    assert "the function returned 2 values for 3 XLA result(s)" in str(e.value)
    name = unique("shape")
    kffi.jax.register_ffi_target(name, jk.alloc_plus_one, arg_spec=["args"])
    with pytest.raises(Exception) as e:
        jax.ffi.ffi_call(name, jax.ShapeDtypeStruct((3,), jnp.float32))(x)
    assert "returned a tensor whose shape or dtype differs from its XLA result" in str(e.value)


def test_optional_and_stream_items_on_cpu(jk):
    name = unique("bias_none")
    kffi.jax.register_ffi_target(name, jk.add_bias, arg_spec=["args.0", "none", "rets"])
    x = jnp.arange(3, dtype=jnp.float32)
    np.testing.assert_array_equal(jax.ffi.ffi_call(name, sds(x))(x), np.arange(3))
    name = unique("bias")
    kffi.jax.register_ffi_target(name, jk.add_bias)
    np.testing.assert_array_equal(jax.ffi.ffi_call(name, sds(x))(x, x), np.arange(3) * 2)
    name = unique("stream")
    kffi.jax.register_ffi_target(name, jk.probe, arg_spec=["stream", "args"])
    jax.ffi.ffi_call(name, (), has_side_effect=True)(x)
    assert jk.last_probe()[0] is None  # no stream on the CPU


def test_cpu_environment_during_the_call(jk):
    name2 = unique("env2")
    env = jk.env_on_cpu

    def record(x):  # a Python callable as the target: runs with the GIL on XLA's thread
        record.seen = list(env(x))

    kffi.jax.register_ffi_target(name2, record, arg_spec=["args"])
    x = jnp.ones((2,), jnp.float32)
    jax.ffi.ffi_call(name2, (), has_side_effect=True)(x)
    assert record.seen == [0, 0]  # no stream on CPU; no allocator when all results are passed


def test_python_callable_target():
    calls = []

    def fill(x, y):
        calls.append((tuple(x.shape), str(x.dtype)))
        np.from_dlpack(y)[...] = 4  # a writable result view

    name = unique("py")
    kffi.jax.register_ffi_target(name, fill)
    x = jnp.zeros((2, 2), jnp.float32)
    np.testing.assert_array_equal(jax.ffi.ffi_call(name, sds(x))(x), np.full((2, 2), 4.0))
    assert calls == [((2, 2), "float32")]


def test_graph_trait_is_declared_only_when_asked(jk):
    plain, graph = unique("nograph"), unique("graph")
    kffi.jax.register_ffi_target(plain, jk.add_one)
    kffi.jax.register_ffi_target(graph, jk.add_one, allow_cuda_graph=True)
    assert kffi.jax.handler_traits(plain) == 0
    assert kffi.jax.handler_traits(graph) == 1  # XLA_FFI_HANDLER_TRAITS_COMMAND_BUFFER_COMPATIBLE
    x = jnp.ones((3,), jnp.float32)
    np.testing.assert_array_equal(jax.jit(jax.ffi.ffi_call(graph, sds(x)))(x), np.full(3, 2.0))
    with pytest.raises(KeyError, match="no target 'nope' registered for cpu"):
        kffi.jax.handler_traits("nope")


def test_two_thousand_targets_all_callable(jk):
    """No cap on targets (jax-tvm-ffi stops at 1024): 2000 targets, each its own function
    (y = x + k), all called in one jitted program; each result proves its own routing."""
    n = 2000
    before = kffi.jax.target_count()
    names = []
    for k in range(n):
        name = unique("many")
        kffi.jax.register_ffi_target(name, jk.make_adder(k))
        names.append(name)
    assert kffi.jax.target_count() - before == n
    x = jnp.zeros((1,), jnp.float32)
    calls = [jax.ffi.ffi_call(name, sds(x)) for name in names]

    @jax.jit
    def all_targets(a):
        return jnp.concatenate([c(a) for c in calls])

    np.testing.assert_array_equal(all_targets(x), np.arange(n, dtype=np.float32))
    # And one by one, eagerly, a sample from the end (past 1024).
    for k in (1023, 1024, 1999):
        assert float(calls[k](x)[0]) == k


def test_concurrent_registration_and_calls(jk):
    errors, results = [], {}

    cpu = jax.devices("cpu")[0]

    def work(i):
        try:
            name = unique(f"thread{i}")
            kffi.jax.register_ffi_target(name, jk.make_adder(i))
            # The targets are host code; jax's default device is per thread (a GPU on a GPU host).
            with jax.default_device(cpu):
                x = jnp.full((4,), float(i), jnp.float32)
                results[i] = np.asarray(jax.jit(jax.ffi.ffi_call(name, sds(x)))(x))
        except Exception as e:
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert {i: r.tolist() for i, r in results.items()} == {i: [2.0 * i] * 4 for i in range(8)}


def test_import_kffi_does_not_import_jax():
    import subprocess
    import sys

    code = (
        "import sys, kffi\n"
        "assert 'jax' not in sys.modules and 'kffi.jax' not in sys.modules\n"
        "mod = kffi.jax\n"
        "assert 'jax' in sys.modules and mod.register_ffi_target\n"
        "print('ok')\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr


def test_calls_leak_neither_memory_nor_references(jk):
    """Attributes that make owned values (long strings, arrays), allocating kernels, returned
    tuples and errors, many times: the native heap and the function's references stay flat."""
    if mallinfo_used() is None:
        pytest.skip("needs glibc's mallinfo2")
    names = [unique(p) for p in ("leak_attrs", "leak_alloc", "leak_two", "leak_fail")]
    kffi.jax.register_ffi_target(names[0], jk.probe, arg_spec=["args", "attrs.s", "attrs.a"])
    kffi.jax.register_ffi_target(names[1], jk.alloc_plus_one, arg_spec=["args"])
    kffi.jax.register_ffi_target(names[2], jk.alloc_two, arg_spec=["args"])
    kffi.jax.register_ffi_target(names[3], jk.fail, arg_spec=["args", "rets", "attrs.message"])
    x = jnp.ones((16,), jnp.float32)
    probe = jax.ffi.ffi_call(names[0], (), has_side_effect=True)
    alloc = jax.ffi.ffi_call(names[1], sds(x))
    two = jax.ffi.ffi_call(names[2], (sds(x), sds(x)))
    fail = jax.jit(lambda a: jax.ffi.ffi_call(names[3], sds(x))(a, message="leak check " * 8))

    @jax.jit
    def work(a):
        for _ in range(10):
            probe(a, s="a string longer than seven bytes", a=np.arange(6, dtype=np.int64))
            a = alloc(a)
            b, c = two(a)
            a = b + c
        return a

    def window(n):
        for i in range(n):
            work(x).block_until_ready()
            if i % 20 == 0:
                with pytest.raises(jax.errors.JaxRuntimeError):
                    fail(x).block_until_ready()

    fn_refs = [jk.probe._use_count, jk.alloc_plus_one._use_count, jk.alloc_two._use_count]
    window(300)
    start = mallinfo_used()
    window(1500)
    middle = mallinfo_used()
    window(1500)
    end = mallinfo_used()
    # A leak of one small block per kernel call would be >= 16 bytes * 45,000 calls per window.
    assert end - middle < 256 * 1024, (middle - start, end - middle)
    assert [jk.probe._use_count, jk.alloc_plus_one._use_count, jk.alloc_two._use_count] == fn_refs
