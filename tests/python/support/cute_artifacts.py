"""tests/python/support/cute_artifacts.py: the CuTe DSL kernels of tests/cute_dsl, exported for
TVM-FFI, for kffi_tvm (test_cute_dsl), kffi_cuda (test_two_gpus) and kffi_jax (test_jax_shard_gpu).
"""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import kffi
import pytest

CUTE = Path(__file__).resolve().parents[2] / "cute_dsl"


def _build_here() -> Path:
    if importlib.util.find_spec("cutlass") is None:
        pytest.skip("nvidia-cutlass-dsl is not installed and KFFI_CUTE_ARTIFACTS is not set")
    h = hashlib.sha256()
    for p in sorted(CUTE.glob("*.py")):
        h.update(p.read_bytes())
    import importlib.metadata as md

    h.update(md.version("nvidia-cutlass-dsl").encode())
    root = os.environ.get("KFFI_TEST_LIB_DIR") or os.path.join(
        tempfile.gettempdir(), f"kffi-test-libs-{os.getuid()}"
    )
    out = Path(root) / f"cute-{h.hexdigest()[:16]}"
    if not (out / "manifest.json").exists():
        # A separate interpreter: the DSL loads CUDA bindings and apache-tvm-ffi, which the
        # tests below must not find already loaded.
        proc = subprocess.run(
            [sys.executable, str(CUTE / "build_kernels.py"), str(out)],
            check=False,
            capture_output=True,
            text=True,
            timeout=900,
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr
    return out


def artifacts_dir() -> Path:
    """The folder of the exported kernels: KFFI_CUTE_ARTIFACTS, else built here (or skip)."""
    prebuilt = os.environ.get("KFFI_CUTE_ARTIFACTS")
    return Path(prebuilt) if prebuilt else _build_here()


def load_library(cute_dir: Path, name: str) -> kffi.Module:
    """The exported library `name` of the manifest in cute_dir."""
    manifest = json.loads((cute_dir / "manifest.json").read_text())
    return kffi.load_module(cute_dir / manifest["libraries"][name])
