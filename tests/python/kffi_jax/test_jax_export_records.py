"""tests/python/kffi_jax/test_jax_export_records.py: content-named kffi targets round-trip, record
parameters included.

The target name's grammar is swept both ways: every layout item the exporter can write (inputs,
results, attributes, stream, none, records with dotted type keys and empty field lists, the CUDA
graph mark) is read back as the same arg_spec, and names the exporter cannot have written are
refused. Then the case that failed: a kffi.jax.export of a function with a record parameter is
deserialized and run in a fresh process that registered the library (the serving side refused
its `.rb:<type>:<fields>` item)."""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from pathlib import Path

import pytest

jax = pytest.importorskip("jax")
pytest.importorskip("flatbuffers")  # jax.export's serialization needs it

import kffi
import kffi.jax
from kffi.jax import _export
from record_support import record_kernels

HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="module")
def record_lib() -> str:
    return record_kernels()


ITEMS = [
    "args",
    "rets",
    "stream",
    "none",
    "args.0",
    "args.17",
    "rets.3",
    "attrs.factor",
    "attrs._x9",
    "record.b:flat.Blend:alpha,n,flag,tag",
    "record.cfg:a.b.c.Deep:x",
    "record.k:flat.Knobs:",
    "record._p9:T:f_1,g",
]


def test_every_layout_item_round_trips(record_lib):
    fn = kffi.load_module(record_lib).blend_factor
    for n in range(4):
        for spec in itertools.permutations(ITEMS, n):
            for graph in (False, True):
                name = _export.stable_target_name(fn, list(spec), graph)
                assert name is not None and _export._NAME.fullmatch(name), name
                digest, fname, back, g = _export.parse_target_name(name)
                assert (fname, back, g) == ("blend_factor", list(spec), graph), name
                assert digest == _export.origin_of(fn)[0]


@pytest.mark.parametrize(
    "item", ["args.x", "attrs.1bad", "record.b:flat.Blend", "record.1:T:x", "foo", "args.-1"]
)
def test_items_without_a_code_are_refused_when_written(record_lib, item):
    fn = kffi.load_module(record_lib).blend_factor
    with pytest.raises(ValueError, match="has no layout code"):
        _export.stable_target_name(fn, [item], False)


@pytest.mark.parametrize(
    "code", ["b", "b0", "bzz", "b" + b"b:flat.Blend".hex(), "b" + b"1:T:x".hex(), "q1", "a", "k9"]
)
def test_codes_the_exporter_cannot_write_are_refused_when_read(code):
    with pytest.raises(ValueError, match="unknown layout item"):
        _export.parse_target_name(f"kffi.v1.{'0' * 16}.f.{code}")


SERVE = r"""
import dataclasses, json, sys
import jax, jax.numpy as jnp, numpy as np
import kffi, kffi.jax
jax.config.update("jax_platforms", "cpu")
lib, blob_path, what = sys.argv[1], sys.argv[2], sys.argv[3]

@dataclasses.dataclass
class Blend:
    alpha: float
    n: int
    flag: bool
    tag: str

x = jnp.arange(4, dtype=jnp.float32)
if what == "export":
    m = kffi.load_module(lib)
    def f(v):
        return kffi.jax.call(m.blended, Blend(0.5, 4, True, "ab"), v,
                             out_shapes=jax.ShapeDtypeStruct(v.shape, v.dtype))
    exported = kffi.jax.export(f)(jax.ShapeDtypeStruct((4,), jnp.float32))
    open(blob_path, "wb").write(exported.serialize())
    print(json.dumps({"names": kffi.jax._export.targets_in_text(exported.mlir_module()),
                      "eager": np.asarray(jax.jit(f)(x)).tolist()}))
else:
    kffi.jax.register_module(kffi.load_module(lib))
    exported = jax.export.deserialize(open(blob_path, "rb").read())
    print(json.dumps({"served": np.asarray(exported.call(x)).tolist()}))
"""


def test_an_export_with_a_record_parameter_is_served_by_another_process(record_lib, tmp_path):
    def run(what):
        proc = subprocess.run(
            [sys.executable, "-c", SERVE, record_lib, str(tmp_path / "blob.bin"), what],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert proc.returncode == 0, proc.stderr[-4000:]
        return json.loads(proc.stdout.strip().splitlines()[-1])

    made = run("export")
    (name,) = made["names"]
    assert _export.parse_target_name(name)[2][0] == "record.b:flat.Blend:alpha,n,flag,tag"
    factor = 0.5 * 4 + 1 + 2
    assert made["eager"] == [i * factor for i in range(4)]
    assert run("serve")["served"] == made["eager"]
