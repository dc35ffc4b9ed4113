"""tests/python/kffi_jax/test_jax_records.py: record parameters (a KFFI_RECORD struct, a
KFFI_OBJECT_DEF type) through kffi.jax.call: fields as static attributes `<param>_<field>`, the
object rebuilt by the XLA handler, eagerly and under jax.jit; refusals name `param.field`."""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import numpy as np
import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp
import kffi
import kffi.jax
from conftest import KERNELS, LibraryBuilder


@pytest.fixture(scope="module")
def rk():
    return kffi.load_module(
        LibraryBuilder().build("record_op_kernels", KERNELS / "record_op_kernels.cc")
    )


class Blend(NamedTuple):
    alpha: float
    n: int
    flag: bool
    tag: str


@dataclasses.dataclass(frozen=True)
class FrozenBlend:
    alpha: float
    n: int
    flag: bool
    tag: str


@dataclasses.dataclass(frozen=True)
class Knobs:
    scale: float
    shift: int


def sds(shape, dtype=jnp.float32):
    return jax.ShapeDtypeStruct(shape, dtype)


def factor(b) -> float:
    return b.alpha * b.n + (1.0 if b.flag else 0.0) + len(b.tag)


X = np.arange(4, dtype=np.float32)


@pytest.mark.parametrize("cls", [Blend, FrozenBlend])
def test_record_eager_equals_direct_call(rk, cls):
    b = cls(0.5, 3, True, "ab")
    got = kffi.jax.call(rk.blended, b, jnp.asarray(X), out_shapes=sds((4,)))
    np.testing.assert_array_equal(got, rk.blended(b, X))
    np.testing.assert_allclose(got, X * factor(b))


def test_record_object_of_the_type_passes(rk):
    made = rk.make_blend(0.5, 3)  # a flat.Blend object from C++
    got = kffi.jax.call(rk.blended, made, jnp.asarray(X), out_shapes=sds((4,)))
    np.testing.assert_allclose(got, X * (1.5 + 1 + 4))


def test_object_type_record(rk):
    k = Knobs(2.0, 1)
    y = kffi.jax.call(rk.knobbed, jnp.asarray(X), k, out_shapes={"y": sds((4,))})
    np.testing.assert_array_equal(y, X * 2 + 1)


def test_record_under_jit_is_static_and_retraces(rk):
    traces = []

    def f(b, x):
        traces.append(b)
        return kffi.jax.call(rk.blended, b, x, out_shapes=sds(x.shape)) + 1

    jf = jax.jit(f, static_argnames="b")
    x = jnp.asarray(X)
    b = Blend(0.5, 2, False, "")
    np.testing.assert_allclose(jf(b, x), X * factor(b) + 1)
    np.testing.assert_allclose(jf(b, x), X * factor(b) + 1)
    assert len(traces) == 1  # the same record: the same computation
    b2 = b._replace(n=5, tag="xyz")
    np.testing.assert_allclose(jf(b2, x), X * factor(b2) + 1)
    assert len(traces) == 2  # a field changed: traced again


def test_record_fields_are_attributes_named_param_field(rk):
    lowered = jax.jit(
        lambda x: kffi.jax.call(rk.blended, Blend(0.25, 4, True, "q"), x, out_shapes=sds((4,)))
    ).lower(jnp.asarray(X))
    text = lowered.as_text()
    for name in ("b_alpha", "b_n", "b_flag", "b_tag"):
        assert name in text


def test_primitive_op_takes_the_record(rk):
    op = kffi.jax.primitive(rk.blended, out_shapes=sds((4,)), vmap="sequential")
    b = Blend(0.5, 2, True, "")
    np.testing.assert_allclose(op(b, jnp.asarray(X)), X * factor(b))
    batched = jax.vmap(lambda x: op(b, x))(jnp.stack([jnp.asarray(X), jnp.asarray(X) + 1]))
    np.testing.assert_allclose(batched, np.stack([X, X + 1]) * factor(b))


def test_traced_record_field_refused(rk):
    f = jax.jit(
        lambda a, x: kffi.jax.call(rk.blended, Blend(a, 2, True, ""), x, out_shapes=sds((4,)))
    )
    with pytest.raises(TypeError, match=r"^b\.alpha: a record's fields are static attributes"):
        f(jnp.float32(0.5), jnp.asarray(X))


@pytest.mark.parametrize(
    "value, match",
    [
        (
            Blend("fast", 2, True, ""),
            r"^b\.alpha: expected float, got str \(argument #0 of `blended\(",
        ),
        (Blend(0.5, 2.5, True, ""), r"^b\.n: expected int, got float"),
        (Blend(0.5, 2, True, 7), r"^b\.tag: expected str, got int"),
        ((0.5, 2, True, ""), r"^b: expected flat\.Blend, got tuple"),
    ],
)
def test_wrong_field_types_name_the_field(rk, value, match):
    with pytest.raises(TypeError, match=match):
        kffi.jax.call(rk.blended, value, jnp.asarray(X), out_shapes=sds((4,)))


def test_missing_and_extra_fields(rk):
    class Short(NamedTuple):
        alpha: float
        n: int

    with pytest.raises(
        TypeError, match=r"^b\.flag: expected a value \(bool\), got a Short without"
    ):
        kffi.jax.call(rk.blended, Short(0.5, 2), jnp.asarray(X), out_shapes=sds((4,)))

    @dataclasses.dataclass(frozen=True)
    class Long:
        scale: float
        shift: int
        extra: int

    with pytest.raises(TypeError, match=r"^k\.extra: expected a field of flat\.Knobs"):
        kffi.jax.call(rk.knobbed, jnp.asarray(X), Long(1.0, 2, 3), out_shapes={"y": sds((4,))})


def test_read_only_field_is_not_an_attribute(rk):
    @dataclasses.dataclass(frozen=True)
    class WithVersion:
        scale: float
        shift: int
        version: int

    with pytest.raises(
        TypeError, match=r"^k\.version: expected a (writable )?field of flat\.Knobs"
    ):
        kffi.jax.call(
            rk.knobbed, jnp.asarray(X), WithVersion(1.0, 2, 3), out_shapes={"y": sds((4,))}
        )


def test_unsupported_field_type_refused(rk):
    @dataclasses.dataclass(frozen=True)
    class Shaped:
        alpha: float
        dims: tuple

    with pytest.raises(TypeError, match=r"^s\.dims: kffi\.jax passes a record's fields as static"):
        kffi.jax.call(rk.shaped, Shaped(1.0, (1, 2)), out_shapes=sds(()))


def test_handler_names_the_field_a_setter_refuses(rk):
    class Small(NamedTuple):
        k: int

    got = kffi.jax.call(rk.small_add, Small(3), jnp.asarray(X), out_shapes=sds((4,)))
    np.testing.assert_array_equal(got, X + 3)
    # Fits int64 (the attribute), not the C++ int32 field: the handler's setter call refuses.
    with pytest.raises(jax.errors.JaxRuntimeError, match=r"s\.k: "):
        jax.block_until_ready(
            kffi.jax.call(rk.small_add, Small(2**40), jnp.asarray(X), out_shapes=sds((4,)))
        )


def test_record_arg_spec_item_is_checked():
    from kffi.jax import _ffi

    with pytest.raises(ValueError, match="is not 'record.<param>:<type key>:<field>,...'"):
        _ffi.parse_arg_spec(["record.cfg"])
    assert _ffi.parse_arg_spec(["record.cfg:flat.Knobs:scale,shift"])[0][2] == (
        "cfg:flat.Knobs:scale,shift"
    )
