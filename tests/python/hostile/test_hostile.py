"""tests/python/hostile/test_hostile.py: input that tries to break the extension: impossible sizes,
containers changed while they convert, exceptions that cannot be printed, deep nesting, and
memory that must not be written. Each case ends in a clear exception or a sane result."""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import ctypes
import gc
import re
import sys

import kffi
import pytest
from dlpack_util import DLPACK_FLAG_READ_ONLY, KDL_FLOAT, Producer

np = pytest.importorskip("numpy")

READ_ONLY = kffi._core.TENSOR_FLAG_READ_ONLY
HUGE = 2**60


# ---- impossible sizes ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "shape,strides,shown",
    [
        ((HUGE,), None, "1152921504606846976"),  # bytes overflow int64
        ((2**32, 2**32), None, "4294967296, 4294967296"),  # numel overflows
        ((-1,), None, "-1"),  # negative dimension
        ((3,), (2**62,), "3"),  # strides reach past int64
        ((2, 2**62), (2**62, 1), "2, 4611686018427387904"),
    ],
)
def test_impossible_tensor_sizes_are_value_errors_naming_the_shape(
    tensor_kernels, shape, strides, shown
):
    # The runtime's layout check (KFFITensorFromDLPack*) or the extension's (borrowed views)
    # refuses them before any kernel sees them; either message names the shape.
    producer = Producer(shape, strides)
    with pytest.raises(ValueError, match=r"^x: cannot import the Producer as a tensor: ") as info:
        tensor_kernels.describe(producer)
    assert str(info.value).endswith(" (argument #0 of `describe(x: Tensor) -> Array<Any>`)")
    assert re.search(r"shape [\[(]" + re.escape(shown), str(info.value))
    assert "too large" in str(info.value) or "impossible size" in str(info.value) or min(shape) < 0
    with pytest.raises(ValueError) as info:
        kffi.from_dlpack(producer)
    assert shown in str(info.value)
    # Inside a container (an owned import) too.
    with pytest.raises(ValueError):
        kffi.to_kffi([producer])
    assert tensor_kernels.sum(np.ones(3, np.float32)) == 3.0  # still healthy


def test_large_but_possible_shape_with_zero_extent_is_accepted(tensor_kernels):
    # A zero-size dimension: no memory at all, whatever the other dimensions say.
    producer = Producer((0, 5), None)
    assert kffi.from_dlpack(producer).shape == (0, 5)


class _ExchangeAPIHeader(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32), ("prev", ctypes.c_void_p)]


_SET_ERROR = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p)
_ALLOCATOR = ctypes.CFUNCTYPE(
    ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p, _SET_ERROR
)


def _kffi_tensor_allocator():
    """kffi.Tensor's DLPack exchange-API allocator, called the way a framework would."""
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype = ctypes.c_void_p
    get.argtypes = [ctypes.py_object, ctypes.c_char_p]
    api = get(kffi.Tensor.__dlpack_c_exchange_api__, b"dlpack_exchange_api")
    fn = ctypes.c_void_p.from_address(api + ctypes.sizeof(_ExchangeAPIHeader)).value
    return _ALLOCATOR(fn)


def test_kffi_tensor_allocator_refuses_impossible_sizes():
    from dlpack_util import DLDataType, DLDevice, DLTensor

    allocate = _kffi_tensor_allocator()
    errors = []
    set_error = _SET_ERROR(lambda ctx, kind, msg: errors.append((kind.decode(), msg.decode())))
    shape = (ctypes.c_int64 * 1)(HUGE)
    proto = DLTensor(None, DLDevice(1, 0), 1, DLDataType(KDL_FLOAT, 32, 1), shape, None, 0)
    out = ctypes.c_void_p()
    assert allocate(ctypes.addressof(proto), ctypes.byref(out), None, set_error) == -1
    assert errors[0][0] == "ValueError"
    assert "shape (1152921504606846976,)" in errors[0][1] and "impossible size" in errors[0][1]
    # A possible shape allocates.
    shape[0] = 16
    assert allocate(ctypes.addressof(proto), ctypes.byref(out), None, set_error) == 0
    mt = ctypes.cast(out, ctypes.POINTER(ctypes.c_void_p * 3))
    deleter = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(mt.contents[2])
    deleter(out.value)


# ---- containers and arguments that change while they convert ------------------------------------


def test_list_cleared_by_an_element_index_converts_the_snapshot(t):
    items = []

    class Clears:
        def __index__(self):
            items.clear()
            gc.collect()
            return 7

    items.extend([Clears(), 2, [3, 4], "five"])
    assert t.echo(items) == (7, 2, (3, 4), "five")
    assert items == []


def test_list_grown_and_shrunk_by_float_converts_the_snapshot(t):
    items = []

    class Mutates:
        def __float__(self):
            items[:] = [object() for _ in range(1000)]
            del items[:]
            return 1.5

    items.extend([Mutates(), Mutates(), 3])
    assert t.echo(items) == (1.5, 1.5, 3)


def test_dict_cleared_by_a_value_converts_the_snapshot(t):
    d = {}

    class Clears:
        def __index__(self):
            d.clear()
            gc.collect()
            return 1

    d.update({"a": Clears(), "b": 2, "c": Clears()})
    m = t.echo(d)
    assert dict(m.items()) == {"a": 1, "b": 2, "c": 1}


def test_dict_key_whose_hash_and_eq_mutate_the_dict(t):
    d = {}

    class Key:
        def __hash__(self):
            return 1

        def __eq__(self, other):
            d.clear()
            return self is other

    key = Key()
    d[key] = 1
    d["x"] = Key()
    m = t.echo(d)
    assert len(m) == 2
    assert m[key] == 1  # found by == over a snapshot; the Map holds its own references


def test_dlpack_producer_that_empties_its_container(t):
    holder = []

    class Producer2:
        def __init__(self):
            self.arr = np.arange(4, dtype=np.float32)

        def __dlpack__(self, **kwargs):
            holder.clear()
            gc.collect()
            return self.arr.__dlpack__(**kwargs)

        def __dlpack_device__(self):
            return (1, 0)

    holder.extend([Producer2(), Producer2()])
    out = t.echo(holder)
    assert len(out) == 2 and all(isinstance(x, kffi.Tensor) for x in out)
    assert [np.from_dlpack(x).tolist() for x in out] == [[0, 1, 2, 3]] * 2


def test_numpy_argument_resized_by_a_later_argument(tensor_kernels):
    a = np.ones(1000, dtype=np.float32)

    class Shrinks:
        def __float__(self):
            a.resize(0, refcheck=False)  # frees the memory the first view pointed at
            return 2.0

    out = tensor_kernels.full_like(a, Shrinks())
    # The view of `a` was taken again after the Python code ran: the kernel saw its new shape.
    assert out.shape == (0,)


def test_torch_argument_resized_by_a_later_argument(tensor_kernels):
    torch = pytest.importorskip("torch")
    x = torch.ones(1000)

    class Shrinks:
        def __float__(self):
            x.resize_(0)
            return 2.0

    assert tensor_kernels.full_like(x, Shrinks()).shape == (0,)


def test_container_readers_refuse_another_container_kind():
    # _core's sequence readers once took any kffi object and read its cell as an Array's: a Map
    # handed to them read its entries' memory as a length and items.
    from kffi import _core

    m = kffi.to_kffi({"a": 1, "b": 2})
    seq = kffi.to_kffi([1, 2, 3])
    for read in (lambda: _core._seq_len(m), lambda: _core._seq_get(m, 0)):
        with pytest.raises(TypeError, match=r"expected a kffi\.Array or kffi\.List, got"):
            read()
    for read in (lambda: _core._map_len(seq), lambda: _core._map_items(seq)):
        with pytest.raises(TypeError, match=r"expected a kffi\.Map or kffi\.Dict, got"):
            read()
    assert _core._seq_len(seq) == 3 and _core._seq_get(seq, -1) == 3 and _core._map_len(m) == 2


def test_map_lookup_key_whose_eq_releases_the_map():
    m = kffi.to_kffi({(1, 2): "a", (3, 4): "b"})

    class Key:
        def __eq__(self, other):
            m._release()
            return False

        __hash__ = object.__hash__

    assert Key() not in m  # compared over a snapshot: no crash once the map is released
    with pytest.raises(ValueError, match="released"):
        m[(1, 2)]


# ---- exceptions that cannot be printed, and re-entry ----------------------------------------------


class _Unprintable(Exception):
    def __str__(self):
        raise ValueError("__str__ refuses")


def test_dlpack_error_whose_str_raises_is_chained(tensor_kernels):
    class Producer3:
        def __dlpack__(self, **kwargs):
            raise _Unprintable()

    with pytest.raises(TypeError) as info:
        tensor_kernels.describe(Producer3())
    text = str(info.value)
    assert text.startswith("x: cannot import the Producer3 as a tensor: <")
    assert "whose str() failed>" in text
    assert isinstance(info.value.__cause__, _Unprintable)
    with pytest.raises(_Unprintable):  # no argument to name: the producer's own exception
        kffi.from_dlpack(Producer3())


def test_dlpack_producer_reentering_kffi_until_recursion_error(tensor_kernels):
    class Reenters:
        def __dlpack__(self, **kwargs):
            return tensor_kernels.describe(self)

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(400)
    try:
        with pytest.raises(RecursionError):
            tensor_kernels.describe(Reenters())
    finally:
        sys.setrecursionlimit(limit)
    assert tensor_kernels.sum(np.ones(2, np.float32)) == 2.0


# ---- nesting ------------------------------------------------------------------------------------


def test_10000_deep_list_with_a_raised_recursion_limit_is_a_recursion_error(t):
    deep = []
    for _ in range(10_000):
        deep = [deep]
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(100_000)
    try:
        with pytest.raises(RecursionError, match=r"kffi's limit of 512 levels"):
            t.echo(deep)
        with pytest.raises(RecursionError, match=r"kffi's limit of 512 levels"):
            kffi.to_kffi({"k": deep})
    finally:
        sys.setrecursionlimit(limit)
    assert kffi.MAX_CONTAINER_DEPTH == kffi._core.MAX_CONTAINER_DEPTH == 512
    assert t.echo([[[1]]]) == (((1,),),)


def test_results_nested_past_the_limit_stay_kffi_arrays(t):
    a = kffi.to_kffi(("bottom",))
    for _ in range(600):
        a = kffi.to_kffi((a,))  # an Array element is a kffi object: no recursion to build
    result = t.echo(a)
    depth = 0
    while type(result) is tuple:
        result = result[0]
        depth += 1
    assert depth == 512 and isinstance(result, kffi.Array)


# ---- read-only memory -----------------------------------------------------------------------------


def test_writable_numpy_array_has_no_flags(t):
    assert t.tensor_flags(np.zeros(3, np.float32)) == 0


def test_read_only_numpy_array_is_flagged(t):
    a = np.arange(3, dtype=np.float32)
    a.flags.writeable = False
    assert t.tensor_flags(a) == READ_ONLY
    assert t.tensor_flags(np.frombuffer(b"\0" * 16, dtype=np.float32)) == READ_ONLY
    # The view path for a dtype NumPy's fast path does not read (__dlpack__) keeps it too.
    b = np.zeros(4, dtype=np.float16)
    b.flags.writeable = False
    assert t.tensor_flags(b) == READ_ONLY


def test_read_only_through_kffi_tensor_and_containers(t):
    a = np.arange(3, dtype=np.float32)
    a.flags.writeable = False
    x = kffi.from_dlpack(a)
    assert x.is_read_only
    assert t.tensor_flags(x) == READ_ONLY
    writable = np.zeros(2, np.float32)
    assert t.tensor_flags((a, writable, x)) == (1, 0, 1)
    assert t.tensor_flags([np.frombuffer(b"\0" * 8, dtype=np.float32)]) == (1,)


def test_dlpack_read_only_flag_is_kept(t):
    producer = Producer((4,), flags=DLPACK_FLAG_READ_ONLY)
    assert t.tensor_flags(producer) == READ_ONLY
    assert kffi.from_dlpack(producer).is_read_only
    assert t.tensor_flags(Producer((4,))) == 0


def test_every_jax_array_is_read_only(t):
    jnp = pytest.importorskip("jax.numpy")
    a = jnp.arange(4, dtype=jnp.float32)
    assert t.tensor_flags(a) == READ_ONLY
    assert t.tensor_flags((a,)) == (1,)
    assert kffi.from_dlpack(a).is_read_only


def test_torch_tensors_are_writable(t):
    torch = pytest.importorskip("torch")
    assert t.tensor_flags(torch.zeros(3)) == 0
    assert t.tensor_flags((torch.zeros(3),)) == (0,)


# ---- torch lazy views ------------------------------------------------------------------------------


def test_torch_conj_view_is_refused_naming_the_argument(tensor_kernels):
    torch = pytest.importorskip("torch")
    x = torch.tensor([1 + 2j, 3 - 4j], dtype=torch.complex64).conj()
    with pytest.raises(
        ValueError,
        match=r"^x: the torch tensor is a lazy conjugate view.*resolve_conj\(\) "
        r"\(argument #0 of `describe\(",
    ):
        tensor_kernels.describe(x)
    with pytest.raises(ValueError, match="lazy conjugate view"):
        kffi.from_dlpack(x)
    assert tensor_kernels.describe(x.resolve_conj())[0] == [2]


def test_torch_neg_view_is_refused_naming_the_argument(tensor_kernels):
    torch = pytest.importorskip("torch")
    z = torch.tensor([1 + 2j, 3 - 4j], dtype=torch.complex64)
    y = z.conj().imag
    assert y.is_neg()
    with pytest.raises(
        ValueError,
        match=r"^x: the torch tensor is a lazy negative view.*resolve_neg\(\) "
        r"\(argument #0 of `sum\(x: Tensor\) -> float`\)$",
    ):
        tensor_kernels.sum(y)
    assert tensor_kernels.sum(y.resolve_neg()) == pytest.approx(2.0)  # -2 + 4
    # Plain tensors, including strided float views that are not neg views, pass.
    assert tensor_kernels.sum(torch.arange(6, dtype=torch.float32)[1::2]) == 9.0
    assert tensor_kernels.sum(z.imag) == pytest.approx(-2.0)
