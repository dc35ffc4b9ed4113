"""tests/python/kffi_torch/test_torch_export.py: a model with kffi ops, exported with torch.export
and packaged by AOTInductor (.pt2), runs in a fresh Python process once the kffi ops are registered
(``module.torch_ops(ns)``); without them, loading fails naming the op.

Packaging takes about a minute and a half on a 2-core host, so the package is cached in kffi's
build cache, keyed by torch's version and the contents of the kernel library and of the model's
script: later runs only load it (a few seconds per process)."""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import hashlib
import json
import shutil
import signal
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import pytest
from conftest import SUPPORT

torch = pytest.importorskip("torch")

import kffi
import kffi.cpp

HERE = Path(__file__).resolve().parent
CASES = HERE / "torch_export_cases.py"


def child(*args, timeout=600):
    return subprocess.run(
        [sys.executable, str(CASES), *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture(scope="module")
def package():
    lib = kffi.cpp.build(
        "kffi_test_deploy_kernels", [str(SUPPORT / "deploy_kernels.cc")], quiet=True
    )
    key = hashlib.sha256(
        torch.__version__.encode() + Path(lib).read_bytes() + CASES.read_bytes()
    ).hexdigest()[:16]
    path = Path(kffi.cpp.cache_dir()) / "deploy_pt2" / f"model_{key}.pt2"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{key}.partial.pt2")
        proc = child("package", tmp)
        if proc.returncode != 0:
            if "aoti" in proc.stderr.lower() and "not" in proc.stderr.lower():
                pytest.skip(f"AOTInductor is not usable here: {proc.stderr[-500:]}")
            raise AssertionError(proc.stderr[-4000:])
        made = json.loads(proc.stdout.strip().splitlines()[-1])
        assert made["model"] == pytest.approx(made["eager"], rel=1e-6)
        tmp.replace(path)  # atomic: a killed packaging leaves no package behind
    return path


def model_libraries_without_shared_libstdcxx(package: Path) -> list[str]:
    """The shared objects AOTInductor compiled into the package that carry their own libstdc++
    (no DT_NEEDED libstdc++.so.6): what a compiler whose folder holds only libstdc++.a makes."""
    readelf = shutil.which("readelf")
    if readelf is None:
        return []
    out = []
    with tempfile.TemporaryDirectory() as tmp, zipfile.ZipFile(package) as z:
        for name in z.namelist():
            if not name.endswith(".so"):
                continue
            path = z.extract(name, tmp)
            dynamic = subprocess.run([readelf, "-d", path], capture_output=True, text=True).stdout
            if "[libstdc++.so.6]" not in dynamic:
                out.append(name)
    return out


def test_pt2_runs_in_a_fresh_process_after_registration(package):
    proc = child("run", package, "register")
    if proc.returncode == -signal.SIGSEGV:
        private = model_libraries_without_shared_libstdcxx(package)
        if private:  # torch's own model code crashes (its std::regex on the shared locale)
            pytest.skip(
                f"AOTInductor compiled {private} with a private libstdc++ (a CXX whose folder "
                "holds only libstdc++.a); torch's model code crashes with it, before any kffi op"
            )
    assert proc.returncode == 0, proc.stderr[-4000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert len(got["model"]) == 10  # a dynamic n: packaged at n = 4, run at n = 5
    assert got["model"] == pytest.approx(got["eager"], rel=1e-6)


def test_pt2_without_registration_names_the_missing_op(package):
    proc = child("run", package, "none")
    assert proc.returncode != 0
    assert "Could not find schema for kffi_deploy_test::" in proc.stderr
    assert "Segmentation" not in proc.stderr and "Fatal" not in proc.stderr
