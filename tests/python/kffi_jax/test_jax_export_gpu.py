"""tests/python/kffi_jax/test_jax_export_gpu.py: the jax.export round trip of CUDA kernels (a module
and a kffi.compile function) into a fresh process, on a CUDA JAX backend (skipped elsewhere)."""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

jax = pytest.importorskip("jax")
pytest.importorskip("flatbuffers")  # jax.export's serialization needs it

import kffi
from jax_export_cases import serve_in_workers

HERE = Path(__file__).resolve().parent


def _cuda_backend() -> bool:
    try:
        return jax.default_backend() == "gpu" and "cuda" in jax.devices()[0].client.platform_version
    except Exception:
        return False


pytestmark = pytest.mark.skipif(not _cuda_backend(), reason="needs a CUDA JAX backend")


def child_json(*args):
    proc = subprocess.run(
        [sys.executable, str(HERE / "jax_export_cases.py"), *map(str, args)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_cuda_round_trip_in_a_fresh_process(tmp_path):
    if not kffi.cpp.nvcc_available():
        pytest.skip("needs nvcc")
    original = child_json("export", tmp_path, "cuda")
    got = child_json("run", tmp_path, "cuda", "register")
    x = np.arange(5, dtype=np.float32)
    assert got["platform"] == "gpu"
    assert original["original"] == got["fixed"] == (np.repeat(x[:4], 2) * 3 + 1).tolist()
    assert got["symbolic5"] == (np.repeat(x, 2) * 3 + 1).tolist()
    assert got["symbolic3_jit"] == (np.repeat(x[:3], 2) * 3 + 1).tolist()


def test_cuda_blob_served_by_many_workers(tmp_path):
    """The CUDA blob, exported once, served by 3 fresh processes at once: two build the kernels
    again into one shared empty cache, one loads the libraries shipped with the blob."""
    if not kffi.cpp.nvcc_available():
        pytest.skip("needs nvcc")
    original = child_json("export", tmp_path, "cuda")
    shared = {**os.environ, "KFFI_CACHE_DIR": str(tmp_path / "workers_cache")}
    shipped = {**os.environ, "KFFI_CACHE_DIR": str(tmp_path / "shipped_cache")}
    runs = [("register", shared), ("register", shared), ("shipped", shipped)]
    for rc, got, stderr in serve_in_workers(tmp_path, "cuda", runs, timeout=600):
        assert rc == 0, stderr[-4000:]
        assert got["platform"] == "gpu" and got["fixed"] == original["original"]
    assert not list((tmp_path / "shipped_cache").rglob("*.so"))
