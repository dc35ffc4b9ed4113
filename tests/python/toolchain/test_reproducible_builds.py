"""tests/python/toolchain/test_reproducible_builds.py: kffi.compile and kffi.cpp builds are the same
bytes in every cache, build folder and process (same toolchain, same kffi installation).

The library's SHA-256 is what kffi.jax.export's target names are made of, so a process that
builds a kernel again can serve a blob made elsewhere only when the bytes match
(test_jax_export.py: test_a_process_that_compiles_the_kernels_again_serves_the_blob)."""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import kffi
import kffi.cpp
import pytest

HERE = Path(__file__).resolve().parent

# kffi.compile in a fresh process: prints the library's path and SHA-256.
COMPILE = r"""
import hashlib, json, kffi
n = kffi.sym_int("n")
f = kffi.compile(
    "void add_one(kffi::ConstTensorView a, kffi::TensorView b) {"
    "  for (int64_t i = 0; i < a.numel(); ++i) b.data<float>()[i] = a.data<float>()[i] + 1;"
    "}",
    "add_one",
    kffi.fake_tensor("float32", (n,)),
    kffi.fake_tensor("float32", (n,), mut=True),
    options={"quiet": True},
)
data = open(f.library_path, "rb").read()
print(json.dumps([f.library_path, hashlib.sha256(data).hexdigest()]))
"""

CUDA_SOURCE = r"""
#include <kffi/kffi.h>
__global__ void AddOneKernel(float* x, int64_t n) {
  int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) x[i] += 1.0f;
}
void AddOne(kffi::TensorView x) {
  const int64_t n = x.numel();
  if (n) AddOneKernel<<<(n + 255) / 256, 256>>>(x.data<float>(), n);
}
KFFI_EXPORT(add_one, AddOne);
"""


def sha256(path: str | Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def compile_in_a_fresh_process(cache: Path) -> tuple[str, str]:
    proc = subprocess.run(
        [sys.executable, "-c", COMPILE],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "KFFI_CACHE_DIR": str(cache)},
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    path, digest = json.loads(proc.stdout.strip().splitlines()[-1])
    return path, digest


def test_kffi_compile_gives_the_same_bytes_in_two_fresh_caches(tmp_path):
    (path_a, a), (path_b, b) = (compile_in_a_fresh_process(tmp_path / c) for c in ("a", "b"))
    assert path_a != path_b  # two builds, not one found twice
    assert a == b
    # The build folder's path is not in the file; its content-addressed name may be.
    for path in (path_a, path_b):
        assert str(tmp_path).encode() not in Path(path).read_bytes()


def test_kffi_cpp_build_gives_the_same_bytes_in_two_build_directories(tmp_path):
    src = tmp_path / "kernels.cc"
    src.write_text(
        "#include <kffi/kffi.h>\n"
        "double twice(double x) { return 2 * x; }\n"
        "KFFI_EXPORT(twice, twice);\n"
    )
    paths = [
        kffi.cpp.build("repro_twice", [str(src)], build_directory=tmp_path / d, quiet=True)
        for d in ("one", "two")
    ]
    assert paths[0] != paths[1]
    assert sha256(paths[0]) == sha256(paths[1])
    assert kffi.load_module(paths[1]).twice(1.5) == 3.0
    # -g puts the folders into the debug info: mapped there too.
    debug = [
        kffi.cpp.build(
            "repro_twice_g",
            [str(src)],
            extra_cflags=["-g"],
            build_directory=tmp_path / d,
            quiet=True,
        )
        for d in ("one_g", "two_g")
    ]
    assert sha256(debug[0]) == sha256(debug[1])
    assert b"one_g" not in Path(debug[0]).read_bytes()


@pytest.mark.skipif(not kffi.cpp.nvcc_available(), reason="no nvcc found")
def test_nvcc_builds_give_the_same_bytes_in_two_build_directories(tmp_path):
    # nvcc's temporary files are named after its process ID unless they go beside the object.
    src = tmp_path / "add_one.cu"
    src.write_text(CUDA_SOURCE)
    paths = [
        kffi.cpp.build("repro_add_one_cuda", [str(src)], build_directory=tmp_path / d, quiet=True)
        for d in ("one", "two")
    ]
    assert sha256(paths[0]) == sha256(paths[1])
    assert b"tmpxft_" not in Path(paths[0]).read_bytes()
