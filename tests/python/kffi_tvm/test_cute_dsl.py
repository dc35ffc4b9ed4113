"""tests/python/kffi_tvm/test_cute_dsl.py: CuTe DSL kernels exported for TVM-FFI, run through kffi.

The kernels (tests/cute_dsl/kernels.py, the add_one of the CuTe DSL guide) are compiled and
exported by tests/cute_dsl/build_kernels.py, which needs nvidia-cutlass-dsl but no GPU. Set
KFFI_CUTE_ARTIFACTS to a folder that script made (with --copy-runtime) to use prebuilt kernels,
e.g. on a GPU machine without the DSL; otherwise they are built here, or the tests skip.

Without a GPU the kernels' own argument checks still run (they precede any CUDA call): CPU
tensors, and tensors that only claim to be on CUDA (fake_dlpack.py), reach them. The GPU tests
(result, torch's current stream, CUDA graph capture, errors on real CUDA tensors) skip without
CUDA.
"""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import kffi
import numpy as np
import pytest
from conftest import SUPPORT
from cute_artifacts import artifacts_dir, load_library
from fake_dlpack import FakeDeviceTensor as Fake

SIGNATURE = "`add_one(a: Tensor([n0], float32), b: Tensor([n0], float32))`"
FLAVOURS = ["", "_tvm"]  # linked with the DSL runtime only / also with libtvm_ffi


@pytest.fixture(scope="session")
def cute_dir() -> Path:
    return artifacts_dir()


@pytest.fixture(scope="session")
def cute(cute_dir):
    """{"add_one": Module, "add_one_tvm": Module, ...}, loaded lazily."""
    loaded = {}

    def get(name):
        if name not in loaded:
            loaded[name] = load_library(cute_dir, name)
        return loaded[name]

    return get


def _cuda():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    return torch


def _fn(cute, variant, flavour):
    return cute(variant + flavour)[variant]


# ---- argument checks, no GPU needed ----------------------------------------------------------


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_loads_and_lists_the_export(cute, flavour):
    mod = cute("add_one" + flavour)
    assert mod.functions() == ["add_one"]


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_cpu_tensor_is_a_value_error_naming_the_device(cute, flavour):
    torch = pytest.importorskip("torch")
    with pytest.raises(ValueError) as info:
        _fn(cute, "add_one", flavour)(torch.zeros(8), torch.zeros(8))
    assert str(info.value) == (
        f"Mismatched Tensor on argument #0 when calling: {SIGNATURE}, expected device_type=cuda"
    )


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_not_a_tensor_is_a_type_error(cute, flavour):
    with pytest.raises(TypeError) as info:
        _fn(cute, "add_one", flavour)(1, Fake(4))
    assert str(info.value) == (
        f"Mismatched type on argument #0 when calling: {SIGNATURE}, expected Tensor"
    )


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_argument_count_is_a_type_error(cute, flavour):
    with pytest.raises(TypeError) as info:
        _fn(cute, "add_one", flavour)(Fake(4))
    assert str(info.value) == f"Expects 2 parameters when calling: {SIGNATURE}"


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_dtype_mismatch_is_a_value_error(cute, flavour):
    with pytest.raises(ValueError) as info:
        _fn(cute, "add_one", flavour)(Fake(4), Fake(4, "float16"))
    assert str(info.value) == (
        f"Mismatched Tensor on argument #1 when calling: {SIGNATURE}, expected dtype=float32"
    )


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_shape_and_device_index_mismatches(cute, flavour):
    f = _fn(cute, "add_one", flavour)
    with pytest.raises(
        ValueError,
        match=r"Mismatched b\.shape\[0\] on argument #1 .* expected "
        r"to match a\.shape\[0\]",
    ):
        f(Fake(4), Fake(5))
    with pytest.raises(
        ValueError,
        match=r"Mismatched device index on argument #1 .* expected to "
        r"match a\.device\.index",
    ):
        f(Fake(4), Fake(4, device=(2, 1)))


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_divisibility_and_alignment(cute, flavour):
    f = _fn(cute, "add_one_div", flavour)
    with pytest.raises(ValueError) as info:
        f(Fake(126), Fake(126))
    assert str(info.value) == (
        f"Invalid a.shape[0] on argument #0 when calling: {SIGNATURE}, "
        "expected to be divisible by 16"
    )
    with pytest.raises(ValueError) as info:
        f(Fake(128, offset=4), Fake(128))
    assert str(info.value) == (
        f"Misaligned Tensor data on argument #0 when calling: "
        f"{SIGNATURE}, expected data alignment=16 bytes"
    )


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_explicit_stream_argument_checked(cute, flavour):
    with pytest.raises(
        TypeError,
        match=r"Mismatched type on argument #2 .* expected handle or "
        r"int",
    ):
        _fn(cute, "add_one_stream", flavour)(Fake(4), Fake(4), "not a stream")


def test_runs_with_kffi_alone(cute_dir):
    """The export linked without libtvm_ffi loads and checks its arguments in a process that
    never maps libtvm_ffi (kffi provides the TVM-FFI functions it imports)."""
    code = textwrap.dedent(f"""
        import json, sys
        sys.path.insert(0, {str(SUPPORT)!r})
        import kffi, tvm_libs
        from fake_dlpack import FakeDeviceTensor as Fake
        manifest = json.load(open({str(cute_dir / "manifest.json")!r}))
        mod = kffi.load_module({str(cute_dir)!r} + "/" + manifest["libraries"]["add_one_div"])
        try:
            mod.add_one_div(Fake(126), Fake(126))
        except ValueError as e:
            print("ValueError:", e)
        print("mapped:", tvm_libs.libtvm_ffi_mapped())
    """)
    proc = subprocess.run(
        [sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert lines[-2].endswith("expected to be divisible by 16"), lines
    assert lines[-1] == "mapped: False"


# ---- on a GPU ----------------------------------------------------------------------------------


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_gpu_result(cute, flavour):
    torch = _cuda()
    a = torch.arange(1000, dtype=torch.float32, device="cuda")
    b = torch.empty_like(a)
    _fn(cute, "add_one", flavour)(a, b)
    torch.cuda.synchronize()
    assert torch.equal(b, a + 1)
    a16 = torch.arange(1024, dtype=torch.float32, device="cuda")
    b16 = torch.empty_like(a16)
    _fn(cute, "add_one_div", flavour)(a16, b16)
    torch.cuda.synchronize()
    assert torch.equal(b16, a16 + 1)


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_gpu_torch_current_stream_is_the_kernels(cute, flavour):
    torch = _cuda()
    f = _fn(cute, "add_one", flavour)
    s = torch.cuda.Stream()
    a = torch.arange(1 << 20, dtype=torch.float32, device="cuda")
    b = torch.zeros_like(a)
    torch.cuda.synchronize()
    with torch.cuda.stream(s):
        f(a, b)
        # Queued on s behind the kernel: had the kernel gone to another stream, this event
        # would not order after it.
        done = torch.cuda.Event()
        done.record(s)
    done.synchronize()
    assert torch.equal(b, a + 1)
    # Capture proves it: a launch on any stream but the capturing one fails capture.
    g = torch.cuda.CUDAGraph()
    out = torch.zeros_like(a)
    with torch.cuda.graph(g):
        f(a, out)
    a.fill_(41.0)
    g.replay()
    torch.cuda.synchronize()
    assert torch.all(out == 42.0).item()


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_gpu_explicit_stream(cute, flavour):
    torch = _cuda()
    s = torch.cuda.Stream()
    a = torch.arange(256, dtype=torch.float32, device="cuda")
    b = torch.zeros_like(a)
    torch.cuda.synchronize()
    _fn(cute, "add_one_stream", flavour)(a, b, s)
    s.synchronize()
    assert torch.equal(b, a + 1)


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_gpu_argument_errors(cute, flavour):
    torch = _cuda()
    f = _fn(cute, "add_one_div", flavour)
    a = torch.zeros(129, dtype=torch.float32, device="cuda")
    with pytest.raises(ValueError, match="expected to be divisible by 16"):
        f(a[:126], a[:126])
    with pytest.raises(ValueError, match="expected data alignment=16 bytes"):
        f(a[1:], a[1:])
    h = torch.zeros(128, dtype=torch.float16, device="cuda")
    with pytest.raises(ValueError, match="expected dtype=float32"):
        f(h, h)
    with pytest.raises(ValueError, match="expected device_type=cuda"):
        f(torch.zeros(128), torch.zeros(128))
    # The module and the device are fine afterwards.
    b = torch.empty(128, device="cuda")
    f(a[:128], b)
    torch.cuda.synchronize()
    assert torch.equal(b, a[:128] + 1)


def test_gpu_numpy_on_cpu_still_refused(cute):
    _cuda()
    with pytest.raises(ValueError, match="expected device_type=cuda"):
        _fn(cute, "add_one", "")(np.zeros(4, np.float32), np.zeros(4, np.float32))


# ---- kffi.with_contract: CuTe DSL exports as torch ops and in jax.jit ----------------------------


def _with_contract(cute, flavour):
    n = kffi.sym_int("n")
    return kffi.with_contract(
        _fn(cute, "add_one", flavour),
        kffi.fake_tensor("float32", (n,)),
        kffi.fake_tensor("float32", (n,), mut=True),
        param_names=["a", "b"],
        device="cuda",
        name=f"cute_add_one{flavour}",
    )


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_with_contract_checks_before_the_dsl(cute, flavour):
    f = _with_contract(cute, flavour)
    assert f._metadata["mutates"] == ["b"]
    with pytest.raises(ValueError, match=r"a\.device: expected cuda, got cpu") as e:
        f(np.zeros(8, np.float32), np.zeros(8, np.float32))
    assert "cute_add_one" in str(e.value)


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_gpu_with_contract_in_torch_compile_fullgraph(cute, flavour):
    """The wave's end state, torch half: a CuTe DSL export made a torch op with nothing written
    per kernel (its contract from fakes; mutates_args and the fake implementation from it) runs
    inside torch.compile(fullgraph=True), also under CUDA graphs (reduce-overhead)."""
    torch = _cuda()
    import kffi.torch

    kffi.torch.register_op(_with_contract(cute, flavour), f"cute_test::add_one{flavour}")
    op = getattr(torch.ops.cute_test, f"add_one{flavour}")

    def model(x):
        y = torch.empty_like(x)
        op(x * 2, y)
        return y + 1

    x = torch.arange(4096, dtype=torch.float32, device="cuda")
    for mode in ("default", "reduce-overhead"):
        torch._dynamo.reset()
        compiled = torch.compile(model, fullgraph=True, mode=mode)
        for _ in range(3):  # reduce-overhead records, then replays its graph
            out = compiled(x)
        torch.cuda.synchronize()
        assert torch.equal(out, x * 2 + 2), mode


JAX_CUTE_SCRIPT = textwrap.dedent("""
    import os, sys
    os.environ["XLA_PYTHON_CLIENT_PREALLOCATE"] = "false"
    import jax, jax.numpy as jnp, kffi, kffi.jax
    if jax.default_backend() != "gpu":
        print("no jax gpu"); sys.exit(0)
    n = kffi.sym_int("n")
    f = kffi.with_contract(
        kffi.load_module(sys.argv[1]).add_one,
        kffi.fake_tensor("float32", (n,)), kffi.fake_tensor("float32", (n,), mut=True),
        param_names=["a", "b"], device="cuda")
    step = jax.jit(lambda x: kffi.jax.call(f, x * 2, jnp.zeros_like(x)) + 1)
    x = jnp.arange(4096, dtype=jnp.float32)
    assert bool((step(x) == x * 2 + 2).all())
    print("jax ok")
""")


def test_gpu_with_contract_in_jax_jit(cute, cute_dir):
    """The end state, JAX half: the same CuTe export, with the same contract, inside jax.jit."""
    _cuda()
    pytest.importorskip("jax")
    manifest = json.loads((cute_dir / "manifest.json").read_text())
    lib = cute_dir / manifest["libraries"]["add_one"]
    proc = subprocess.run(
        [sys.executable, "-c", JAX_CUTE_SCRIPT, str(lib)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    if "no jax gpu" in proc.stdout:
        pytest.skip("JAX has no GPU backend here")
    assert "jax ok" in proc.stdout
