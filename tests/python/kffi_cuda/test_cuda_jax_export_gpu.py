"""tests/python/kffi_cuda/test_cuda_jax_export_gpu.py: a kffi.cuda kernel exported with
kffi.jax.export runs in a fresh process that builds the same kernel and registers it. Skipped
without a CUDA JAX backend."""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

jax = pytest.importorskip("jax")
pytest.importorskip("flatbuffers")
try:
    if jax.default_backend() != "gpu":
        pytest.skip("needs a CUDA JAX backend", allow_module_level=True)
except RuntimeError:  # pragma: no cover
    pytest.skip("needs a CUDA JAX backend", allow_module_level=True)

from test_cuda_jax_export import export, make

CHILD = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, sys.argv[3])
    import jax, jax.numpy as jnp, kffi.jax
    from test_cuda_jax_export import make

    kffi.jax.register_module(make(arch=sys.argv[2]))
    exp = jax.export.deserialize(open(sys.argv[1], "rb").read())
    print(exp.call(jnp.arange(128, dtype=jnp.float32)).tolist())
    """
)


def test_exported_kernel_runs_in_a_fresh_process(tmp_path):
    major, minor = jax.devices()[0].compute_capability.split(".")
    arch = f"sm_{major}{minor}"
    f = make(arch=arch)
    blob = tmp_path / "exported.bin"
    blob.write_bytes(export(f).serialize())
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    proc = subprocess.run(
        [sys.executable, str(script), str(blob), arch, str(Path(__file__).parent)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[-1] == str([2.0 * i for i in range(128)])
