"""tests/python/kffi_jax/test_jax_export.py: kffi.jax.export, content-named targets, and round trips
of serialized computations into fresh processes (tests/python/kffi_jax/jax_export_cases.py)."""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import SUPPORT
from toolchain_support import env_without_compiler

jax = pytest.importorskip("jax")
pytest.importorskip("flatbuffers")  # jax.export's serialization needs it

import jax.numpy as jnp
import kffi
import kffi.jax
import numpy as np
from jax_export_cases import serve_in_workers

HERE = Path(__file__).resolve().parent
CASES = HERE / "jax_export_cases.py"
sds = jax.ShapeDtypeStruct


def child(*args, timeout=300, env=None):
    """Runs jax_export_cases.py in a fresh process; (returncode, last stdout line, stderr)."""
    proc = subprocess.run(
        [sys.executable, str(CASES), *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )
    lines = proc.stdout.strip().splitlines()
    return proc.returncode, (lines[-1] if lines else ""), proc.stderr


def child_json(*args, env=None):
    rc, line, err = child(*args, env=env)
    assert rc == 0, err[-4000:]
    return json.loads(line)


@pytest.fixture(autouse=True)
def _on_the_cpu():
    """This file's kernels are host code, and on a GPU host JAX's default device is a GPU: the
    tests place their arrays on the CPU and export for it (test_jax_export_gpu.py: CUDA)."""
    with jax.default_device(jax.devices("cpu")[0]):
        yield


@pytest.fixture(scope="module")
def mod():
    path = kffi.cpp.build(
        "kffi_test_deploy_kernels", [str(SUPPORT / "deploy_kernels.cc")], quiet=True
    )
    return kffi.load_module(path)


@pytest.fixture(scope="module")
def exported_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("exported")
    original = child_json("export", out, "cpu")
    x = np.arange(4, dtype=np.float32)
    assert original["original"] == (np.repeat(x, 2) * 3 + 1).tolist()
    return out


def test_target_names_are_the_same_in_every_process(mod):
    first = child_json("names", "-", "cpu")["names"]
    second = child_json("names", "-", "cpu")["names"]
    assert first == second and len(first) == 3
    digest = hashlib.sha256(Path(mod.name).read_bytes()).hexdigest()[:16]
    # Named by the library's content, the function's name and the call layout.
    assert first[0] == f"kffi.v1.{digest}.repeat2.a0"
    assert first[1] == f"kffi.v1.{digest}.scale.r0.a0.kfactor"
    assert first[2].startswith("kffi.v1.") and first[2].endswith(".add_one.r0.a0")


def test_round_trip_in_a_fresh_process(exported_dir):
    got = child_json("run", exported_dir, "cpu", "register")
    x = np.arange(5, dtype=np.float32)
    assert got["fixed"] == (np.repeat(x[:4], 2) * 3 + 1).tolist()
    assert got["symbolic5"] == (np.repeat(x, 2) * 3 + 1).tolist()  # n = 5 in a blob made for n
    assert got["symbolic3_jit"] == (np.repeat(x[:3], 2) * 3 + 1).tolist()


def test_a_process_that_compiles_the_kernels_again_serves_the_blob(tmp_path):
    # Reproducible builds: the exporting process and the serving one each build the libraries
    # (kffi.cpp.build and kffi.compile) into an empty cache of their own. The blob's target names
    # are content addresses of those files, so the rebuilt files must be the same bytes.
    caches = [tmp_path / "cache_a", tmp_path / "cache_b"]
    envs = [{**os.environ, "KFFI_CACHE_DIR": str(c)} for c in caches]
    out = tmp_path / "blob"
    out.mkdir()
    original = child_json("export", out, "cpu", env=envs[0])
    got = child_json("run", out, "cpu", "register", env=envs[1])
    assert got["fixed"] == original["original"]
    x = np.arange(5, dtype=np.float32)
    assert got["symbolic5"] == (np.repeat(x, 2) * 3 + 1).tolist()
    built = [sorted(p.name for p in c.rglob("*.so")) for c in caches]
    assert built[0] == built[1] and len(built[0]) == 2  # both built both libraries
    for name in built[0]:
        a, b = (next(c.rglob(name)).read_bytes() for c in caches)
        assert hashlib.sha256(a).hexdigest() == hashlib.sha256(b).hexdigest(), name


def test_many_workers_serve_one_blob(tmp_path):
    """One blob, exported once, served by 3 fresh worker processes at the same time: two build
    the kernels again into one shared empty cache (racing for it), and one loads the libraries
    shipped with the blob, in an environment without a compiler."""
    out = tmp_path / "blob"
    out.mkdir()
    original = child_json("export", out, "cpu")
    shared = {**os.environ, "KFFI_CACHE_DIR": str(tmp_path / "workers_cache")}
    no_compiler = env_without_compiler(
        tmp_path / "bin", KFFI_CACHE_DIR=str(tmp_path / "shipped_cache")
    )
    runs = [("register", shared), ("register", shared), ("shipped", no_compiler)]
    x = np.arange(5, dtype=np.float32)
    pids = set()
    for rc, got, stderr in serve_in_workers(out, "cpu", runs):
        assert rc == 0, stderr[-4000:]
        assert got["fixed"] == original["original"]
        assert got["symbolic5"] == (np.repeat(x, 2) * 3 + 1).tolist()
        pids.add(got["pid"])
    assert len(pids) == 3
    assert len(list((tmp_path / "workers_cache").rglob("*.so"))) == 2  # built once each
    assert not list((tmp_path / "shipped_cache").rglob("*.so"))  # nothing built


def test_unregistered_target_says_what_to_register(exported_dir):
    rc, _, err = child("run", exported_dir, "cpu", "none")
    assert rc != 0
    assert "UnregisteredTargetError" in err
    assert "kffi function `repeat2`" in err
    assert "kffi.jax.register_module(module_or_function)" in err
    assert "Fatal" not in err and "Segmentation" not in err


def test_round_trip_in_the_same_process(mod):
    def f(x):
        return kffi.jax.call(mod.scale, kffi.jax.call(mod.repeat2, x), factor=0.5)

    (n,) = jax.export.symbolic_shape("n")
    exp = kffi.jax.export(f, platforms=["cpu"])(sds((n,), jnp.float32))
    assert [str(a) for a in exp.out_avals] == ["float32[2*n]"]
    back = jax.export.deserialize(exp.serialize())
    x = jnp.arange(6, dtype=jnp.float32)
    np.testing.assert_array_equal(back.call(x), np.repeat(np.arange(6), 2) * 0.5)
    np.testing.assert_array_equal(back.call(x), jax.jit(f)(x))


def test_foreign_custom_call_is_still_refused(mod):
    def f(x):
        y = kffi.jax.call(mod.repeat2, x)
        return jax.ffi.ffi_call("some_foreign_target", sds(y.shape, y.dtype))(y)

    with pytest.raises(ValueError, match="custom calls whose targets have no compatibility") as e:
        kffi.jax.export(f, platforms=["cpu"])(sds((4,), jnp.float32))
    assert "some_foreign_target" in str(e.value)
    # Only the foreign call is refused (newer jax lists the exempted targets after the refused).
    refused = str(e.value).split("disabled_checks")[0]
    assert "kffi.v1." not in refused


def test_plain_jax_export_still_refuses_kffi_targets(mod):
    with pytest.raises(ValueError, match="custom calls whose targets have no compatibility"):
        jax.export.export(jax.jit(lambda x: kffi.jax.call(mod.repeat2, x)), platforms=["cpu"])(
            sds((4,), jnp.float32)
        )


def test_function_without_a_library_is_refused(mod):
    fn = kffi.to_kffi(lambda y, x: None)
    fn._metadata = mod.scale._metadata  # a contract, but no library file holds the function

    def f(x):
        return kffi.jax.call(fn, x, factor=1.0)

    with pytest.raises(TypeError, match="not a function of a library file"):
        kffi.jax.export(f, platforms=["cpu"])(sds((4,), jnp.float32))


def test_register_module_checks_its_argument(mod):
    with pytest.raises(TypeError, match="expected a kffi.Module or kffi.Function, got str"):
        kffi.jax.register_module("libkernels.so")
    with pytest.raises(TypeError, match="was not loaded from a library"):
        kffi.jax.register_module(kffi.to_kffi(lambda: None))
    assert kffi.jax.register_module(mod) is mod
    assert kffi.jax.register_module(mod.scale) is mod.scale


def test_same_content_other_path_shares_the_target(mod, tmp_path):
    """A copy of the library is the same library: its functions get the same targets."""
    copy = tmp_path / "copy.so"
    copy.write_bytes(Path(mod.name).read_bytes())
    other = kffi.load_module(str(copy))
    x = jnp.arange(3, dtype=jnp.float32)
    a = jax.jit(lambda v: kffi.jax.call(mod.repeat2, v))
    b = jax.jit(lambda v: kffi.jax.call(other.repeat2, v))
    np.testing.assert_array_equal(a(x), b(x))
    name_a = kffi.jax._export.targets_in_text(a.lower(x).as_text())
    name_b = kffi.jax._export.targets_in_text(b.lower(x).as_text())
    assert name_a == name_b and len(name_a) == 1


def test_kffi_deserialize_reports_a_missing_library_at_once(mod, tmp_path):
    """kffi.jax.deserialize registers the targets when it deserializes; a library that is not
    registered is reported then, before any call."""
    copy = tmp_path / "unregistered.so"
    copy.write_bytes(Path(mod.name).read_bytes() + b"\0another library")
    other = kffi.load_module(str(copy))
    blob = kffi.jax.export(lambda x: kffi.jax.call(other.repeat2, x), platforms=["cpu"])(
        sds((3,), jnp.float32)
    )
    blob = blob.serialize()
    back = kffi.jax.deserialize(blob)  # registered already: made in this process
    np.testing.assert_array_equal(back.call(jnp.ones(3, jnp.float32)), np.ones(6))
    digest = hashlib.sha256(copy.read_bytes()).hexdigest()[:16]
    foreign = blob.replace(digest.encode(), b"0123456789abcdef")  # a library never loaded
    with pytest.raises(kffi.jax.UnregisteredTargetError, match="kffi function `repeat2`"):
        kffi.jax.deserialize(foreign)


def test_one_export_for_cpu_and_cuda(tmp_path):
    """Exported for two platforms on a host without a GPU: one target name serves both."""
    n = kffi.sym_int()
    add_one = kffi.compile(
        r"""
void add_one(kffi::TensorView y, kffi::ConstTensorView x) {
  for (int64_t i = 0; i < x.numel(); ++i) y.data<float>()[i] = x.data<float>()[i] + 1;
}""",
        "add_one",
        kffi.fake_tensor("float32", (n,), mut=True, device="any"),
        kffi.fake_tensor("float32", (n,), device="any"),
        options={"quiet": True},
    )
    exp = kffi.jax.export(lambda x: kffi.jax.call(add_one, x), platforms=["cpu", "cuda"])(
        sds((3,), jnp.float32)
    )
    assert exp.platforms == ("cpu", "cuda")
    (name,) = kffi.jax._export.targets_of(exp)
    assert {(name, "cpu"), (name, "gpu")} <= set(kffi.jax.registered_targets())
    back = jax.export.deserialize(exp.serialize())
    np.testing.assert_array_equal(back.call(jnp.ones(3, jnp.float32)), np.full(3, 2.0))


WITH_CONTRACT = """
import sys, jax, jax.numpy as jnp, kffi, kffi.jax
jax.config.update("jax_platforms", "cpu")  # the kernel is host code
mod = kffi.load_module(sys.argv[1])
checked = kffi.with_contract(
    mod.scale, "y: Tensor([n], float32, mut), x: Tensor([n], float32), factor: float",
    name="scale_checked")
if sys.argv[2] == "export":
    f = lambda x: kffi.jax.call(checked, x, factor=2.0)
    (n,) = jax.export.symbolic_shape("n")
    open(sys.argv[3], "wb").write(kffi.jax.export(f)(jax.ShapeDtypeStruct((n,), jnp.float32))
                                  .serialize())
else:
    if sys.argv[2] == "register":
        kffi.jax.register_module(checked)
    exported = jax.export.deserialize(open(sys.argv[3], "rb").read())
    print(exported.call(jnp.ones(3, jnp.float32)).tolist())
"""


def test_with_contract_function_round_trip(mod, tmp_path):
    """A library function under kffi.with_contract: its targets are named by the library, the
    function and the contract; the serving process registers the same with_contract function."""

    def run(*args):
        return subprocess.run(
            [sys.executable, "-c", WITH_CONTRACT, mod.name, *map(str, args)],
            capture_output=True,
            text=True,
            timeout=300,
        )

    blob = tmp_path / "checked.jax"
    made = run("export", blob)
    assert made.returncode == 0, made.stderr[-4000:]
    served = run("register", blob)
    assert served.returncode == 0, served.stderr[-4000:]
    assert served.stdout.strip().splitlines()[-1] == "[2.0, 2.0, 2.0]"
    missing = run("none", blob)
    assert missing.returncode != 0
    assert "kffi function `scale` under a kffi.with_contract contract" in missing.stderr
    assert "to kffi.jax.register_module" in missing.stderr
