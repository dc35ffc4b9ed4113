"""tests/python/kffi_jax/jax_shard_cases.py: kffi.jax over a device mesh (parallel contract
symbols).

Runs with 4 virtual CPU devices: XLA_FLAGS=--xla_force_host_platform_device_count=4 must be set
before jax starts, so test_jax_shard.py runs this module in a subprocess (its name keeps pytest
from collecting it in the main process). The kernel is a row normalisation, y = x * scale /
sum(x's row): its rows are independent (n parallel) and its columns are not (m), so a result
computed on a column shard is wrong.
"""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import os
import re

import pytest

if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    pytest.skip(
        "run by test_jax_shard.py with XLA_FLAGS=--xla_force_host_platform_device_count=4",
        allow_module_level=True,
    )

import jax
import jax.numpy as jnp
import kffi
import kffi.jax
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

COLLECTIVES = ("all-gather", "all-to-all", "collective-permute", "all-reduce", "reduce-scatter")

SRC = r"""
#include <cstdint>

void rownorm(kffi::ConstTensorView x, kffi::TensorView y, double scale) {
  const int64_t n = x.shape()[0], m = x.shape()[1];
  const float* a = x.data<float>();
  float* b = y.data<float>();
  for (int64_t i = 0; i < n; ++i) {
    float s = 0;
    for (int64_t j = 0; j < m; ++j) s += a[i * m + j];
    for (int64_t j = 0; j < m; ++j) b[i * m + j] = static_cast<float>(a[i * m + j] * scale / s);
  }
}

// Returns the row sums: an output allocated by the kernel, its shape [n] evaluated per shard.
kffi::Tensor rowsum(kffi::ConstTensorView x) {
  const int64_t n = x.shape()[0], m = x.shape()[1];
  kffi::Tensor out = kffi::Tensor::FromEnvAlloc(kffi::IntArrayView({n}), x.dtype(), x.device());
  for (int64_t i = 0; i < n; ++i) {
    float s = 0;
    for (int64_t j = 0; j < m; ++j) s += x.data<float>()[i * m + j];
    out.data<float>()[i] = s;
  }
  return out;
}

// Repeats each row twice: an output of n * 2 rows, which a row shard cannot produce alone.
kffi::Tensor repeat_rows(kffi::ConstTensorView x) {
  const int64_t n = x.shape()[0], m = x.shape()[1];
  kffi::Tensor out =
      kffi::Tensor::FromEnvAlloc(kffi::IntArrayView({2 * n, m}), x.dtype(), x.device());
  for (int64_t i = 0; i < 2 * n; ++i)
    for (int64_t j = 0; j < m; ++j) out.data<float>()[i * m + j] = x.data<float>()[(i / 2) * m + j];
  return out;
}
"""

N, M = 16, 8


def _compile(name, *fakes, outputs=None):
    return kffi.compile(SRC, name, *fakes, outputs=outputs, options={"quiet": True})


@pytest.fixture(scope="module")
def rownorm():
    n, m = kffi.sym_int("n", parallel=True), kffi.sym_int("m")
    return _compile(
        "rownorm",
        kffi.fake_tensor("float32", (n, m)),
        kffi.fake_tensor("float32", (n, m), mut=True),
        kffi.Float64,
    )


@pytest.fixture(scope="module")
def rownorm_plain():
    """The same kernel, its contract without a parallel symbol: today's behaviour."""
    n, m = kffi.sym_int("n"), kffi.sym_int("m")
    return _compile(
        "rownorm",
        kffi.fake_tensor("float32", (n, m)),
        kffi.fake_tensor("float32", (n, m), mut=True),
        kffi.Float64,
    )


@pytest.fixture(scope="module")
def x():
    return np.random.default_rng(0).random((N, M), dtype=np.float32) + 0.5


def expected(x, scale=1.0):
    return x * scale / x.sum(1, keepdims=True)


def mesh_1d():
    return Mesh(np.array(jax.devices()[:4]), ("d",))


def mesh_2d():
    return Mesh(np.array(jax.devices()[:4]).reshape(2, 2), ("a", "b"))


def compiled_text(fn, *args) -> str:
    return jax.jit(fn).lower(*args).compile().as_text()


def collectives(text) -> list:
    return [c for c in COLLECTIVES if c in text]


def test_four_devices():
    assert len(jax.devices()) >= 4


def test_metadata_marks_the_parallel_symbol(rownorm, rownorm_plain):
    assert rownorm.contract.endswith("; n: int64 parallel, m: int64")
    syms = {s["name"]: s for s in rownorm._metadata["symbols"]}
    assert syms["n"]["parallel"] is True and "parallel" not in syms["m"]
    assert all("parallel" not in s for s in rownorm_plain._metadata["symbols"])


SPECS_1D = [P("d", None), P(None, "d"), P("d"), P(), P(None, None)]


@pytest.mark.parametrize("spec", SPECS_1D, ids=str)
def test_results_right_for_every_input_sharding(rownorm, x, spec):
    xs = jax.device_put(x, NamedSharding(mesh_1d(), spec))
    y = jax.jit(lambda a: kffi.jax.call(rownorm, a, scale=2.0))(xs)
    np.testing.assert_allclose(np.asarray(y), expected(x, 2.0), rtol=1e-5)


def test_rows_sharded_compile_without_collectives_and_stay_sharded(rownorm, x):
    sharding = NamedSharding(mesh_1d(), P("d", None))
    xs = jax.device_put(x, sharding)

    def f(a):
        return kffi.jax.call(rownorm, a, scale=1.0)

    text = compiled_text(f, xs)
    assert collectives(text) == [], text
    assert re.search(r"kffi[._][\w.]*rownorm", text)
    # Each device runs the kernel on its own rows: the custom call sees a (4, 8) shard.
    assert "f32[4,8]" in text
    y = jax.jit(f)(xs)
    assert y.sharding.is_equivalent_to(sharding, 2)
    assert {s.data.shape for s in y.addressable_shards} == {(N // 4, M)}
    np.testing.assert_allclose(np.asarray(y), expected(x), rtol=1e-5)


def test_columns_sharded_are_replicated_first(rownorm, x):
    """A split along m would normalise each column block by its own sum; XLA gathers m."""
    xs = jax.device_put(x, NamedSharding(mesh_1d(), P(None, "d")))

    def f(a):
        return kffi.jax.call(rownorm, a, scale=1.0)

    assert collectives(compiled_text(f, xs))  # the gather this layout needs
    np.testing.assert_allclose(np.asarray(jax.jit(f)(xs)), expected(x), rtol=1e-5)


def test_a_contract_without_parallel_symbols_keeps_todays_behaviour(rownorm_plain, x):
    xs = jax.device_put(x, NamedSharding(mesh_1d(), P("d", None)))

    def f(a):
        return kffi.jax.call(rownorm_plain, a, scale=1.0)

    text = compiled_text(f, xs)
    assert "all-gather" in text and "f32[16,8]" in text  # the whole input on each device
    np.testing.assert_allclose(np.asarray(jax.jit(f)(xs)), expected(x), rtol=1e-5)


@pytest.mark.parametrize(
    "spec", [P("a", "b"), P(("a", "b"), None), P("b", None), P(None, ("a", "b"))], ids=str
)
def test_two_dimensional_mesh(rownorm, x, spec):
    mesh = mesh_2d()
    xs = jax.device_put(x, NamedSharding(mesh, spec))

    def f(a):
        return kffi.jax.call(rownorm, a, scale=3.0)

    y = jax.jit(f)(xs)
    np.testing.assert_allclose(np.asarray(y), expected(x, 3.0), rtol=1e-5)
    rows = spec[0] if len(spec) else None
    if rows is not None and (len(spec) < 2 or spec[1] is None):
        assert collectives(compiled_text(f, xs)) == []
        assert y.sharding.is_equivalent_to(NamedSharding(mesh, P(rows, None)), 2)


def test_two_dimensional_mesh_rows_over_one_axis_replicated_over_the_other(rownorm, x):
    mesh = mesh_2d()
    xs = jax.device_put(x, NamedSharding(mesh, P("a", None)))

    def f(a):
        return kffi.jax.call(rownorm, a, scale=1.0)

    assert collectives(compiled_text(f, xs)) == []
    y = jax.jit(f)(xs)
    assert y.sharding.is_equivalent_to(NamedSharding(mesh, P("a", None)), 2)
    np.testing.assert_allclose(np.asarray(y), expected(x), rtol=1e-5)


def test_in_place_update_aliases_its_shard(rownorm, x):
    """Given y as well, the mut parameter is updated in place (an input aliased to the output);
    the alias holds per shard."""
    sharding = NamedSharding(mesh_1d(), P("d", None))
    xs = jax.device_put(x, sharding)
    ys = jax.device_put(np.zeros_like(x), sharding)

    def f(a, b):
        return kffi.jax.call(rownorm, a, b, scale=1.0)

    text = compiled_text(f, xs, ys)
    assert collectives(text) == []
    np.testing.assert_allclose(np.asarray(jax.jit(f)(xs, ys)), expected(x), rtol=1e-5)


def test_returned_output_shape_is_evaluated_per_shard(x):
    n, m = kffi.sym_int("n", parallel=True), kffi.sym_int("m")
    rowsum = _compile(
        "rowsum", kffi.fake_tensor("float32", (n, m)), outputs=[kffi.fake_tensor("float32", (n,))]
    )
    sharding = NamedSharding(mesh_1d(), P("d", None))
    xs = jax.device_put(x, sharding)

    def f(a):
        return kffi.jax.call(rowsum, a)

    text = compiled_text(f, xs)
    assert collectives(text) == [] and "f32[4]" in text
    s = jax.jit(f)(xs)
    assert s.shape == (N,) and s.sharding.is_equivalent_to(NamedSharding(mesh_1d(), P("d")), 1)
    np.testing.assert_allclose(np.asarray(s), x.sum(1), rtol=1e-5)


def test_an_output_of_an_expression_of_the_symbol_is_not_split(x):
    """repeat_rows returns n * 2 rows: a shard's kernel cannot produce its piece of that, so n
    is not split (XLA gathers) and the result is still right."""
    n, m = kffi.sym_int("n", parallel=True), kffi.sym_int("m")
    rep = _compile(
        "repeat_rows",
        kffi.fake_tensor("float32", (n, m)),
        outputs=[kffi.fake_tensor("float32", (n * 2, m))],
    )
    xs = jax.device_put(x, NamedSharding(mesh_1d(), P("d", None)))
    y = jax.jit(lambda a: kffi.jax.call(rep, a))(xs)
    np.testing.assert_array_equal(np.asarray(y), np.repeat(x, 2, axis=0))


def test_cuda_graph_trait_is_kept(rownorm, x):
    xs = jax.device_put(x, NamedSharding(mesh_1d(), P("d", None)))

    def f(a):
        return kffi.jax.call(rownorm, a, scale=1.0, allow_cuda_graph=True)

    text = compiled_text(f, xs)
    assert collectives(text) == []
    np.testing.assert_allclose(np.asarray(jax.jit(f)(xs)), expected(x), rtol=1e-5)
    names = [name for name, platform in kffi.jax.registered_targets() if platform == "cpu"]
    traits = {kffi.jax.handler_traits(name, "cpu") for name in names if "rownorm" in name}
    assert 1 in traits  # the target the graph-safe call registered


def test_with_contract_makes_a_function_row_parallel(rownorm_plain, x):
    wrapped = kffi.with_contract(
        rownorm_plain,
        "x: Tensor([n, m], float32), y: Tensor([n, m], float32, mut), scale: float"
        "; n: int64 parallel",
        name="rownorm_rows",
    )
    assert {s["name"]: s.get("parallel", False) for s in wrapped._metadata["symbols"]} == {
        "n": True,
        "m": False,
    }
    xs = jax.device_put(x, NamedSharding(mesh_1d(), P("d", None)))

    def f(a):
        return kffi.jax.call(wrapped, a, scale=1.0)

    assert collectives(compiled_text(f, xs)) == []
    np.testing.assert_allclose(np.asarray(jax.jit(f)(xs)), expected(x), rtol=1e-5)


def test_eager_call_on_a_sharded_array(rownorm, x):
    sharding = NamedSharding(mesh_1d(), P("d", None))
    y = kffi.jax.call(rownorm, jax.device_put(x, sharding), scale=1.0)
    np.testing.assert_allclose(np.asarray(y), expected(x), rtol=1e-5)


def test_vmap_over_a_parallel_leading_dimension_is_one_call(rownorm, x):
    batch = np.stack([x, 2 * x, 3 * x])

    def f(a):
        return kffi.jax.call(rownorm, a, scale=1.0)

    y = jax.jit(jax.vmap(f))(batch)
    np.testing.assert_allclose(np.asarray(y), np.stack([expected(x)] * 3), rtol=1e-5)
    # folded into the rows: one custom call on (3 * 16, 8), no loop
    text = jax.jit(jax.vmap(f)).lower(batch).as_text()
    assert len(re.findall(r"kffi[._][\w.]*rownorm", text)) == 1
    assert "48x8" in text and "while" not in text
    # batch axis elsewhere, and vmap over a sharded batch
    y1 = jax.vmap(f, in_axes=1, out_axes=1)(np.moveaxis(batch, 0, 1))
    np.testing.assert_allclose(np.asarray(y1), np.stack([expected(x)] * 3, axis=1), rtol=1e-5)


def test_vmap_with_an_unbatched_operand_broadcasts_it(rownorm, x):
    ys = np.zeros((2, N, M), np.float32)
    out = jax.vmap(lambda b: kffi.jax.call(rownorm, x, b, scale=1.0))(ys)
    np.testing.assert_allclose(np.asarray(out), np.stack([expected(x)] * 2), rtol=1e-5)


def test_vmap_without_a_parallel_leading_dimension_is_refused(rownorm_plain, x):
    with pytest.raises(NotImplementedError, match="no batching rule"):
        jax.vmap(lambda a: kffi.jax.call(rownorm_plain, a, scale=1.0))(np.stack([x, x]))


def test_shard_map_by_hand_still_works(rownorm, x):
    mesh = mesh_1d()
    f = jax.shard_map(
        lambda a: kffi.jax.call(rownorm, a, scale=1.0),
        mesh=mesh,
        in_specs=P("d", None),
        out_specs=P("d", None),
    )
    y = jax.jit(f)(jax.device_put(x, NamedSharding(mesh, P("d", None))))
    np.testing.assert_allclose(np.asarray(y), expected(x), rtol=1e-5)


def test_grad_through_a_sharded_call_keeps_its_message(rownorm, x):
    with pytest.raises(NotImplementedError, match="differentiation rule"):
        jax.grad(lambda a: jnp.sum(kffi.jax.call(rownorm, a, scale=1.0)))(x)
