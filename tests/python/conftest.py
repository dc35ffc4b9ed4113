"""tests/python/conftest.py: builds and loads the testing library and the test kernel libraries.

The tests are in folders by area: core (the runtime), hostile, contract, toolchain, kffi_cuda,
kffi_jax, kffi_torch, kffi_tvm and house (the repository's own rules). A folder is never named
like a module the tests import (torch, jax, cuda, tvm): pytest puts this folder on sys.path, and
where torch is not installed a folder tests/python/torch would be imported as torch instead.
Modules and kernel sources that one area uses sit in its folder (pytest puts a test's folder on
sys.path); those of several areas are in support/, which this file puts on sys.path, and
kernels/ holds the kernel libraries built here for every area.

The libraries are built by kffi.cpp.build (the flags `kffi-config` gives, exactly what a kernel
author uses) into a temporary folder, named by a hash of the sources, headers and flags so that
an unchanged library is not rebuilt by the next session.
"""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import concurrent.futures
import os
import sys
import tempfile
from pathlib import Path

import kffi
import kffi.cpp
import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
SUPPORT = HERE / "support"  # shared by several areas; a test's subprocess puts it on sys.path
KERNELS = HERE / "kernels"
TESTING_LIB_SOURCE = REPO / "tests" / "testing_lib" / "testing_lib.cc"
KERNEL_SOURCES = {p.stem: p for p in sorted(KERNELS.glob("*.cc"))}

if str(SUPPORT) not in sys.path:
    sys.path.insert(0, str(SUPPORT))


def _cache_dir() -> Path:
    root = os.environ.get("KFFI_TEST_LIB_DIR")
    if root:
        path = Path(root)
    else:
        path = Path(tempfile.gettempdir()) / f"kffi-test-libs-{os.getuid()}"
    path.mkdir(parents=True, exist_ok=True)
    return path


class LibraryBuilder:
    """Compiles .cc files into shared libraries with kffi.cpp.build, the one way the tests build
    a library: kffi-config's flags (exactly what a kernel author uses), keyed by the source,
    flags, compiler and kffi's headers, so an unchanged library is not rebuilt by the next
    session; with warnings on and the tests' quick -O1."""

    CFLAGS = ("-O1", "-Wall", "-Wextra")

    def __init__(self):
        self.dir = _cache_dir()

    def build(self, name: str, source: Path) -> Path:
        return Path(
            kffi.cpp.build(
                name, [source], extra_cflags=self.CFLAGS, build_directory=self.dir, quiet=True
            )
        )

    def build_all(self, sources: dict[str, Path]) -> dict[str, Path]:
        """Builds several libraries in parallel (a 2-core box builds 3 libraries in ~10 s)."""
        with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, len(sources))) as pool:
            futures = {name: pool.submit(self.build, name, src) for name, src in sources.items()}
            return {name: f.result() for name, f in futures.items()}


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
