"""tests/python/kffi_cuda/test_cuda_jax_export.py: kffi.cuda kernels in kffi.jax.export without a
GPU: their XLA targets are named by content (the images, kernel, contract, parameter layout and
launch configuration), the same in every process, and a fresh process that builds the same kernel
registers them (kffi.jax.register_module). Exported for CUDA on a host without one."""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

jax = pytest.importorskip("jax")
pytest.importorskip("flatbuffers")  # jax.export's serialization needs it

import jax.numpy as jnp
import kffi
import kffi.jax

try:
    import kffi.cuda as kcuda

    kcuda._nvrtc.nvrtc_library()
except (ImportError, RuntimeError) as e:  # pragma: no cover - CI installs nvidia-cuda-nvrtc
    pytest.skip(f"needs NVRTC (pip install nvidia-cuda-nvrtc): {e}", allow_module_level=True)

from kffi.jax._export import targets_of

SRC = (
    'extern "C" __global__ void scaled(const float* x, float* y, float a, int count) {\n'
    "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i < count) y[i] = a * x[i];\n}\n"
)


def make(arch="sm_80", block=128):
    n = kffi.sym_int("n")
    return kcuda.compile(
        SRC,
        "scaled",
        kffi.fake_tensor("float32", [n]),
        kffi.fake_tensor("float32", [n], mut=True),
        kffi.Float32,
        kffi.Int32,
        param_names=["x", "y", "a", "count"],
        grid=(n + block - 1) // block,
        block=block,
        arch=arch,
    )


def export(f):
    sds = jax.ShapeDtypeStruct((128,), jnp.float32)

    def call(a):
        return kffi.jax.call(f, a, a=2.0, count=128, out_shapes={"y": sds})

    return kffi.jax.export(call, platforms=["cuda"])(sds)


# A fresh process: builds the same kernel (this file's make), then deserializes an export of it.
CHILD = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, sys.argv[3])
    import kffi.jax
    from kffi.jax._export import targets_of
    from test_cuda_jax_export import export, make

    blob = open(sys.argv[1], "rb").read()
    f = make()
    if sys.argv[2] == "register":
        kffi.jax.register_module(f)
    try:
        exp = kffi.jax.deserialize(blob, platforms=["cuda"])
    except kffi.jax.UnregisteredTargetError as e:
        print("unregistered:", e)
        sys.exit(0)
    print("name:", targets_of(export(f))[0], "registered:", targets_of(exp)[0])
    """
)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("KFFI_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("KFFI_CUDA_PREBUILT", raising=False)
    kcuda.clear_memory_cache()
    yield
    kcuda.clear_memory_cache()


def test_targets_are_named_by_content(cache):
    f = make()
    (name,) = targets_of(export(f))
    assert name.startswith("kffi.v1.") and ".scaled." in name
    assert targets_of(export(make())) == [name]  # another build, same name
    # Another image or launch configuration is another kernel.
    assert targets_of(export(make(arch="sm_90")))[0] != name
    assert targets_of(export(make(block=256)))[0] != name


def test_a_launch_callback_has_no_content_name(cache):
    src = 'extern "C" __global__ void k(float* x) {}'
    f = kcuda.compile(
        src, "k", "x: Tensor([n], float32, mut, device=cuda)", launch=lambda x: (1, 1), arch="sm_80"
    )
    assert not hasattr(f, "_content_origin")
    g = kcuda.compile(
        src, "k", "x: Tensor([n], float32, mut, device=cuda)", grid=1, block=1, arch="sm_80"
    )
    assert g._content_origin[1] == "k"


def test_a_fresh_process_registers_the_kernel(cache, tmp_path):
    f = make()
    exp = export(f)
    (name,) = targets_of(exp)
    blob = tmp_path / "exported.bin"
    blob.write_bytes(exp.serialize())
    script = tmp_path / "child.py"
    script.write_text(CHILD)

    def run(mode):
        proc = subprocess.run(
            [sys.executable, str(script), str(blob), mode, str(Path(__file__).parent)],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        return proc.stdout.strip().splitlines()[-1]

    assert run("register") == f"name: {name} registered: {name}"
    missing = run("none")
    assert missing.startswith("unregistered:") and "`scaled`" in missing and name in missing
