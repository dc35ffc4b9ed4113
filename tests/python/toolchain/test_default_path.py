"""tests/python/toolchain/test_default_path.py: what a user gets by default. A process with no C++
compiler on PATH (CXX and CC name files that do not exist) and an empty kffi build cache calls a
kernel with torch tensors, calls kffi.torch ops eagerly, through torch.ops and under torch.compile,
and calls kffi.jax.call under jax.jit (default_path_check.py), and kffi's counters show that nothing
was compiled: the glue kffi was built with serves all of it. Where kffi has no glue for the running
torch, the fallback builds it and says so in one line."""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import kffi
import pytest
from toolchain_support import env_without_compiler

HERE = Path(__file__).resolve().parent
TORCH_TESTS = HERE.parent / "kffi_torch"


@pytest.fixture(scope="module")
def library() -> str:
    """default_path_kernels.cc, built here (with a compiler) before the compiler-less process."""
    return kffi.cpp.build("kffi_default_path", [str(HERE / "default_path_kernels.cc")], quiet=True)


def run_check(library: str, which: str, tmp_path: Path) -> dict:
    cache = tmp_path / "cache"
    cache.mkdir()
    env = env_without_compiler(tmp_path / "bin", KFFI_CACHE_DIR=str(cache))
    env["XLA_PYTHON_CLIENT_PREALLOCATE"] = "false"
    proc = subprocess.run(
        [sys.executable, str(HERE / "default_path_check.py"), library, which],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    assert "kffi.torch: no prebuilt glue" not in proc.stderr, proc.stderr[-3000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["compiler_invocations"] == 0
    assert not any(cache.rglob("*.so")), list(cache.rglob("*"))
    return report


def test_torch_without_a_compiler(library, tmp_path):
    pytest.importorskip("torch")
    report = run_check(library, "torch", tmp_path)
    assert "torch" in report


def test_jax_without_a_compiler(library, tmp_path):
    pytest.importorskip("jax")
    report = run_check(library, "jax", tmp_path)
    assert "jax" in report


def test_prebuilt_glue_is_what_loads():
    """The glue comes from the installed package (the folder of this torch's minor version), and
    glue.json says what it was built against."""
    torch = pytest.importorskip("torch")
    import kffi.torch
    from kffi.torch import _glue

    folder, _ = _glue._prebuilt()
    assert folder is not None, "kffi was built without glue for this torch"
    assert Path(folder).parent == Path(kffi.torch.__file__).parent / "lib"
    assert Path(folder).name == "torch-" + ".".join(torch.__version__.split(".")[:2])
    stamp = json.loads((Path(folder) / "glue.json").read_text())
    assert stamp["torch"].split("+")[0] == torch.__version__.split("+")[0]
    assert stamp["kffi"] == kffi.__version__
    assert Path(_glue.glue().name).resolve() == (Path(folder) / "libkffi_torch.so").resolve()
    assert kffi.torch.fast_tensor_import(build=False)


def test_prebuilt_glue_runs_with_torchs_libstdcxx():
    """The glue names libstdc++.so.6 as a needed library, so it binds to the one torch runs with.
    Built by a GCC whose library folder has only libstdc++.a, it used to carry a private copy, and
    torch.ops calls that raised an error with a number in its message crashed the process."""
    pytest.importorskip("torch")
    from kffi.torch import _glue

    readelf = shutil.which("readelf")
    if readelf is None:
        pytest.skip("no readelf")
    folder, _ = _glue._prebuilt()
    assert folder is not None, "kffi was built without glue for this torch"
    for lib in sorted(Path(folder).glob("*.so")):
        dynamic = subprocess.run([readelf, "-d", str(lib)], capture_output=True, text=True)
        assert "[libstdc++.so.6]" in dynamic.stdout, (lib.name, dynamic.stdout)


FALLBACK = r"""
import sys
import torch
torch.__version__ = "2.99.0+other"  # a torch kffi was not built for
import pytest
sys.exit(pytest.main(sys.argv[1:]))
"""


def test_fallback_builds_and_says_so_in_one_line(tmp_path):
    """No glue for this torch: the first op builds it (against torch's headers, into the build
    cache) after one line saying what it builds and why. The build links the libstdc++ torch runs
    even under a toolchain whose own library directory has only the static one (a GCC unpacked
    in /opt with CXX set to it): a private libstdc++ cut the glue's error messages at their first
    number (torch 2.13) or crashed the process (torch 2.11). The allocate test's messages hold
    numbers."""
    pytest.importorskip("torch")
    env = dict(os.environ, KFFI_CACHE_DIR=str(tmp_path / "cache"))
    env["CXX"] = f"{os.environ.get('CXX') or 'c++'} -static-libstdc++"
    ops = TORCH_TESTS / "test_torch_ops.py"
    nodes = [
        f"{ops}::test_allocate_moves_mut_parameters_to_the_returns",  # the dispatcher glue
        f"{ops}::test_eager_mutating_and_returning_ops",  # the eager extension
    ]
    proc = subprocess.run(
        # (pytest's logging plugin off: the line goes to stderr, as in a user's process)
        [sys.executable, "-c", FALLBACK, "-q", "-s", *nodes]
        + ["-p", "no:cacheprovider", "-p", "no:logging"],
        capture_output=True,
        text=True,
        env=env,
        cwd=TORCH_TESTS,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    said = [line for line in proc.stderr.splitlines() if line.startswith("kffi.torch: no prebuilt")]
    assert len(said) == 2, proc.stderr[-3000:]  # the dispatcher glue, the eager extension
    assert said[0].startswith("kffi.torch: no prebuilt glue for torch 2.99.0+other (this kffi has ")
    assert all("building its" in line and "Build kffi with this torch" in line for line in said)
    assert not [line for line in proc.stderr.splitlines() if line.startswith("kffi.cpp:")]
    built = sorted(p.name.rsplit("_", 1)[0] for p in (tmp_path / "cache").rglob("kffi_torch_*.so"))
    assert built == ["kffi_torch_dispatch", "kffi_torch_eager"], built


NO_GLUE = r"""
import sys
import torch
torch.__version__ = "2.99.0+other"  # a torch kffi was not built for
import kffi, kffi.torch
sys.path.insert(0, sys.argv[2])
from default_path_check import check_plain_torch_call
mod = kffi.load_module(sys.argv[1])
assert not kffi.torch.fast_tensor_import(build=False)
check_plain_torch_call(mod)  # torch's exchange API and Python methods: slower, the same result
try:
    mod.torch_ops("kffi_no_glue")
except RuntimeError as e:
    print("REFUSED:", str(e).splitlines()[0])
else:
    raise AssertionError("ops were registered without the dispatcher glue")
"""


def test_no_glue_and_no_compiler_degrades_clearly(library, tmp_path):
    """A torch kffi has no glue for, and no compiler: plain calls still work (the slower read,
    lazy views still refused), and registering an op is a clear error, after one line saying
    what kffi.torch tried to build and why."""
    pytest.importorskip("torch")
    env = env_without_compiler(tmp_path / "bin", KFFI_CACHE_DIR=str(tmp_path / "cache"))
    proc = subprocess.run(
        [sys.executable, "-c", NO_GLUE, library, str(HERE)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    refused = proc.stdout.split("REFUSED: ", 1)[1]
    assert refused.startswith("kffi.torch: building the dispatcher glue"), refused
    assert "this kffi was not built for this torch: build kffi with this torch installed" in refused
    said = [line for line in proc.stderr.splitlines() if line.startswith("kffi.torch: no prebuilt")]
    assert len(said) == 1 and "building its dispatcher glue" in said[0], proc.stderr[-3000:]
