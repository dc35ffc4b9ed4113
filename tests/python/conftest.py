"""tests/python/conftest.py: builds and loads the testing library and the test kernel libraries.

The libraries are compiled with the flags `kffi-config` gives (exactly what a kernel author
uses) into a temporary folder, named by a hash of the sources, headers and flags so that an
unchanged library is not rebuilt by the next session.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import kffi
import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
TESTING_LIB_SOURCE = REPO / "tests" / "testing_lib" / "testing_lib.cc"
KERNEL_SOURCES = {p.stem: p for p in sorted((HERE / "kernels").glob("*.cc"))}


def _kffi_config_flags() -> list[str]:
    exe = shutil.which("kffi-config")
    cmd = [exe] if exe else [sys.executable, "-m", "kffi.config"]
    out = subprocess.run(
        cmd + ["--cxxflags", "--ldflags", "--libs"], check=True, capture_output=True, text=True
    ).stdout
    return out.split()


def _headers_digest() -> bytes:
    h = hashlib.sha256()
    for path in sorted(Path(kffi.libinfo.include_dir()).rglob("*.h")):
        h.update(str(path).encode())
        h.update(path.read_bytes())
    return h.digest()


def _cache_dir() -> Path:
    root = os.environ.get("KFFI_TEST_LIB_DIR")
    if root:
        path = Path(root)
    else:
        path = Path(tempfile.gettempdir()) / f"kffi-test-libs-{os.getuid()}"
    path.mkdir(parents=True, exist_ok=True)
    return path


class LibraryBuilder:
    """Compiles one .cc file into a shared library with `g++ -shared -O1 $(kffi-config ...)`."""

    def __init__(self):
        self.flags = _kffi_config_flags()
        self.dir = _cache_dir()
        self._base = hashlib.sha256(_headers_digest() + " ".join(self.flags).encode()).digest()

    def output_path(self, source: Path) -> Path:
        digest = hashlib.sha256(self._base + source.read_bytes()).hexdigest()[:16]
        return self.dir / f"lib{source.stem}-{digest}.so"

    def start(self, source: Path):
        """Starts compiling source unless a library for this exact source exists.

        Returns (path, process or None).
        """
        out = self.output_path(source)
        if out.exists():
            return out, None
        tmp = out.with_suffix(f".{os.getpid()}.tmp")
        cmd = ["g++", "-shared", "-O1", "-Wall", "-Wextra", "-o", str(tmp), str(source)]
        cmd += self.flags
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        proc._kffi_tmp = tmp
        proc._kffi_cmd = cmd
        return out, proc

    @staticmethod
    def finish(out: Path, proc) -> Path:
        if proc is None:
            return out
        output, _ = proc.communicate()
        if proc.returncode != 0:
            raise RuntimeError(f"building {out.name} failed:\n{' '.join(proc._kffi_cmd)}\n{output}")
        os.replace(proc._kffi_tmp, out)  # atomic: a concurrent session sees all or nothing
        return out

    def build_all(self, sources: dict[str, Path]) -> dict[str, Path]:
        """Builds several libraries in parallel (a 2-core box builds 3 libraries in ~10 s)."""
        started = {name: self.start(src) for name, src in sources.items()}
        return {name: self.finish(out, proc) for name, (out, proc) in started.items()}


class TestingGlobals:
    """The testing.* globals by attribute: ``t.echo`` is kffi.get_global_func("testing.echo")."""

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        f = kffi.get_global_func("testing." + name)
        setattr(self, name, f)
        return f


@pytest.fixture(scope="session")
def library_paths() -> dict[str, Path]:
    """Paths of the built libraries: "testing_lib" and one per tests/python/kernels/*.cc."""
    sources = {"testing_lib": TESTING_LIB_SOURCE, **KERNEL_SOURCES}
    return LibraryBuilder().build_all(sources)


@pytest.fixture(scope="session")
def testing_module(library_paths) -> kffi.Module:
    """The testing library, loaded: its static initialisers register the testing.* globals."""
    return kffi.load_module(library_paths["testing_lib"])


@pytest.fixture(scope="session")
def t(testing_module) -> TestingGlobals:
    return TestingGlobals()


@pytest.fixture(scope="session")
def tensor_kernels(library_paths) -> kffi.Module:
    return kffi.load_module(library_paths["tensor_kernels"])


@pytest.fixture(scope="session")
def pyext_kernels(library_paths) -> kffi.Module:
    return kffi.load_module(library_paths["pyext_kernels"])


@pytest.fixture(scope="session")
def module_kernels_path(library_paths) -> Path:
    return library_paths["module_kernels"]


@pytest.fixture(scope="session")
def module_kernels(module_kernels_path) -> kffi.Module:
    return kffi.load_module(module_kernels_path)


@pytest.fixture
def restore_default_release_gil():
    """Puts kffi's global release-GIL default back after a test that changes it."""
    before = kffi.get_default_release_gil()
    yield
    kffi.set_default_release_gil(before)


@pytest.fixture(autouse=True)
def _jax_tests_on_their_device(request):
    """The kffi.jax tests run host kernels (test_jax_gpu: CUDA kernels): their arrays and jitted
    computations go to the matching JAX device, whatever JAX's default is on this machine."""
    name = request.module.__name__.rpartition(".")[2]
    if not name.startswith("test_jax") or "jax" not in sys.modules:
        yield
        return
    import jax

    # test_jax_gpu's kernels are CUDA kernels: its arrays go to the GPU, whatever an earlier
    # test (a doc block, say) made the process-wide default.
    platform = "gpu" if name == "test_jax_gpu" else "cpu"
    try:
        device = jax.devices(platform)[0]
    except RuntimeError:  # no GPU backend: test_jax_gpu skips itself
        yield
        return
    with jax.default_device(device):
        yield
