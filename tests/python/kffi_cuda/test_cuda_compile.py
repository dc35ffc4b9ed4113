"""tests/python/kffi_cuda/test_cuda_compile.py: kffi.cuda without a GPU: NVRTC compiles cubins and
PTX for several archs, the content-addressed cache (across processes, prebuilt and read-only,
damaged entries), NVRTC's errors, image picking by compute capability, kernels' contracts and launch
expressions, and a library that embeds a cubin (KFFI_EMBED_CUBIN). GPU runs are in
test_cuda_compile_gpu.py."""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import textwrap

import kffi
import pytest

try:
    import kffi.cuda as kcuda

    kcuda._nvrtc.nvrtc_library()
except (ImportError, RuntimeError) as e:  # pragma: no cover - CI installs nvidia-cuda-nvrtc
    pytest.skip(f"needs NVRTC (pip install nvidia-cuda-nvrtc): {e}", allow_module_level=True)

from fake_dlpack import FakeDeviceTensor

AXPY = r"""
extern "C" __global__ void axpy(const float* x, float* y, float a, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] += a * x[i];
}
"""

TEMPLATED = r"""
template <typename T>
__global__ void scale(T* x, T s, long long n) {
  long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (i < n) x[i] *= s;
}
"""


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """A fresh kffi cache root for this test (and its subprocesses), memory cache emptied."""
    root = tmp_path / "cache"
    monkeypatch.setenv("KFFI_CACHE_DIR", str(root))
    monkeypatch.delenv("KFFI_CUDA_PREBUILT", raising=False)
    kcuda.clear_memory_cache()
    yield root
    kcuda.clear_memory_cache()


def _kcubins(root):
    d = root / "nvrtc"
    return sorted(p.name for p in d.glob("*.kcubin")) if d.exists() else []


def test_nvrtc_compiles_cubins_and_ptx_for_several_archs_without_a_gpu(cache):
    archs = ["sm_80", "sm_90a", "sm_100", "compute_90"]
    prog = kcuda.nvrtc_compile(AXPY, ["axpy"], arch=archs)
    assert list(prog.images) == archs
    for a in archs[:3]:
        assert prog.images[a][:4] == b"\x7fELF", a  # a cubin is an ELF file
    ptx = prog.images["compute_90"].decode()
    assert ".target sm_90" in ptx and ".entry axpy" in ptx
    assert prog.lowered_names == {"axpy": "axpy"}
    assert prog.cache_path and os.path.exists(prog.cache_path)


def test_arch_spellings_and_unknown_archs(cache):
    prog = kcuda.nvrtc_compile(AXPY, ["axpy"], arch=["80", "9.0", "sm_90"])
    assert list(prog.images) == ["sm_80", "sm_90"]  # duplicates folded
    with pytest.raises(ValueError, match="cannot read the arch 'hopper'"):
        kcuda.nvrtc_compile(AXPY, ["axpy"], arch="hopper")
    with pytest.raises(ValueError, match=r"cannot target sm_50; it supports sm_"):
        kcuda.nvrtc_compile(AXPY, ["axpy"], arch="sm_50")
    with pytest.raises(ValueError, match="give targets with arch="):
        kcuda.nvrtc_compile(AXPY, ["axpy"], arch="sm_80", options=["-arch=sm_90"])


def test_template_kernels_get_their_lowered_names(cache):
    prog = kcuda.nvrtc_compile(TEMPLATED, ["scale<float>", "scale<double>"], arch="sm_80")
    assert prog.lowered_names["scale<float>"].startswith("_Z")
    assert prog.lowered_names["scale<float>"] != prog.lowered_names["scale<double>"]
    f = kcuda.compile(
        TEMPLATED,
        "scale<float>",
        "x: Tensor([n], float32, mut, device=cuda), s: float32, n: int64",
        grid="cdiv(n, 128)",
        block=128,
        arch="sm_80",
    )
    assert f.__name__ == "scale" and f.kernel_name == prog.lowered_names["scale<float>"]


def test_compile_errors_carry_nvrtc_log_and_line_numbers(cache):
    src = (
        'extern "C" __global__ void bad(float* x) {\n  x[0] = 1.0f;\n  x[1] = undefined_name;\n}\n'
    )
    with pytest.raises(kcuda.NVRTCError) as info:
        kcuda.compile(src, "bad", "x: Tensor([n], float32, mut)", grid=1, block=1, arch="sm_80")
    e = info.value
    assert isinstance(e, kffi.cpp.BuildError) and isinstance(e, RuntimeError)
    assert e.errors == [(3, 'identifier "undefined_name" is undefined')]
    assert "bad.cu(3): error" in str(e) and e.arch == "sm_80"
    assert "--gpu-architecture=sm_80" in str(e)
    # Nothing was cached for the failed source; the process compiles the next one as usual.
    assert _kcubins(cache) == []
    assert kcuda.nvrtc_compile(AXPY, ["axpy"], arch="sm_80").images


def test_a_missing_kernel_name_is_an_error(cache):
    with pytest.raises(RuntimeError, match="nvrtcGetLoweredName|nvrtcAddNameExpression|error"):
        kcuda.nvrtc_compile(AXPY, ["no_such_kernel"], arch="sm_80")


def test_memory_cache_and_key(cache):
    n0 = kcuda.compile_count()
    a = kcuda.nvrtc_compile(AXPY, ["axpy"], arch="sm_80")
    b = kcuda.nvrtc_compile(AXPY, ["axpy"], arch="sm_80")
    assert kcuda.compile_count() == n0 + 1 and a.cache_path == b.cache_path
    # Each part of the key makes a new entry: source, options, archs.
    kcuda.nvrtc_compile(AXPY + "\n// changed", ["axpy"], arch="sm_80")
    kcuda.nvrtc_compile(AXPY, ["axpy"], arch="sm_80", options=["-std=c++17", "-lineinfo"])
    kcuda.nvrtc_compile(AXPY, ["axpy"], arch=["sm_80", "sm_90"])
    assert kcuda.compile_count() == n0 + 4
    assert len(_kcubins(cache)) == 4
    kcuda.nvrtc_compile(AXPY, ["axpy"], arch="sm_80", cache=False)
    assert kcuda.compile_count() == n0 + 5 and len(_kcubins(cache)) == 4


RUN_ONE = textwrap.dedent(
    """
    import json, sys, time
    import kffi.cuda as kcuda
    src = sys.argv[1]
    t = time.perf_counter()
    prog = kcuda.nvrtc_compile(src, ["axpy"], arch=["sm_80", "sm_90"])
    print(json.dumps({"compiles": kcuda.compile_count(), "path": prog.cache_path,
                      "archs": list(prog.images)}))
    """
)


def _run(env_root, src=AXPY, extra_env=None):
    env = dict(os.environ, KFFI_CACHE_DIR=str(env_root), **(extra_env or {}))
    return subprocess.Popen(
        [sys.executable, "-c", RUN_ONE, src], env=env, stdout=subprocess.PIPE, text=True
    )


def test_cache_hit_in_another_process(cache):
    first = json.loads(_run(cache).communicate(timeout=120)[0])
    second = json.loads(_run(cache).communicate(timeout=120)[0])
    assert first["compiles"] == 1 and second["compiles"] == 0
    assert first["path"] == second["path"] and second["archs"] == ["sm_80", "sm_90"]


def test_processes_compiling_at_once_compile_once(cache):
    procs = [_run(cache) for _ in range(4)]
    results = [json.loads(p.communicate(timeout=180)[0]) for p in procs]
    assert sum(r["compiles"] for r in results) == 1
    assert len({r["path"] for r in results}) == 1 and len(_kcubins(cache)) == 1


def test_damaged_entry_is_compiled_again(cache):
    prog = kcuda.nvrtc_compile(AXPY, ["axpy"], arch="sm_80")
    with open(prog.cache_path, "r+b") as f:
        f.truncate(100)
    kcuda.clear_memory_cache()
    n0 = kcuda.compile_count()
    again = kcuda.nvrtc_compile(AXPY, ["axpy"], arch="sm_80")
    assert kcuda.compile_count() == n0 + 1 and again.images == prog.images


def test_prebuilt_read_only_cache_compiles_nothing(cache, tmp_path):
    shipped = tmp_path / "shipped"
    paths = kcuda.precompile(
        [{"source": AXPY, "name": "axpy", "arch": ["sm_80", "sm_90"]}], cache_dir=shipped
    )
    assert len(paths) == 1 and paths[0].startswith(str(shipped))
    for p in [shipped, shipped / "nvrtc", *(shipped / "nvrtc").iterdir()]:
        p.chmod(p.stat().st_mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))
    try:
        empty = tmp_path / "empty"
        out = _run(empty, extra_env={"KFFI_CUDA_PREBUILT": str(shipped)}).communicate(timeout=120)
        r = json.loads(out[0])
        assert r["compiles"] == 0 and r["path"] == paths[0]
        assert _kcubins(empty) == []  # nothing written to the writable cache
    finally:
        for p in [shipped, shipped / "nvrtc", *(shipped / "nvrtc").iterdir()]:
            p.chmod(p.stat().st_mode | stat.S_IWUSR)


def test_precompile_fills_the_given_cache_after_an_in_memory_compile(cache, tmp_path):
    kcuda.nvrtc_compile(AXPY, ["axpy"], arch="sm_80")  # now in memory and in the default cache
    n0 = kcuda.compile_count()
    [path] = kcuda.precompile([{"source": AXPY, "name": "axpy", "arch": "sm_80"}], tmp_path / "s")
    assert path.startswith(str(tmp_path / "s")) and os.path.exists(path)
    assert kcuda.compile_count() == n0  # written from memory, not compiled again
    with pytest.raises(TypeError, match="takes source, name"):
        kcuda.precompile([{"source": AXPY, "archs": "sm_80"}])


def test_importing_kffi_loads_neither_nvrtc_nor_the_driver():
    code = (
        "import kffi, kffi.cuda\n"
        "maps = open('/proc/self/maps').read()\n"
        "assert 'libnvrtc' not in maps and 'libcuda.so' not in maps, 'loaded'\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "ok", out.stderr


def test_image_picking_by_compute_capability(cache):
    fake = b"\x7fELF-not-loaded-until-launch"
    mod = kcuda.load_cubin({"sm_80": fake, "sm_90a": fake, "sm_100f": fake, "compute_75": fake})
    assert mod.pick((8, 0)) == "sm_80"
    assert mod.pick((8, 6)) == "sm_80"  # a cubin runs on its major version, minor >= its own
    assert mod.pick((9, 0)) == "sm_90a"  # arch-specific: only on 9.0 exactly
    assert mod.pick((10, 3)) == "sm_100f"  # family: 10.x from 10.0 on
    assert mod.pick((12, 0)) == "compute_75"  # no cubin runs: the PTX, compiled by the driver
    assert mod.pick("7.5") == "compute_75"
    only = kcuda.load_cubin({"sm_90a": fake, "sm_100": fake})
    with pytest.raises(RuntimeError, match=r"no image for sm_89; it has: sm_90a, sm_100"):
        only.pick((8, 9))
    with pytest.raises(RuntimeError, match="no image for sm_91"):
        only.pick(91)  # sm_90a is for 9.0 only


def test_load_cubin_inputs(tmp_path, cache):
    prog = kcuda.nvrtc_compile(AXPY, ["axpy"], arch="sm_90")
    path = tmp_path / "axpy.cubin"
    path.write_bytes(prog.images["sm_90"])
    for m in (kcuda.load_cubin(path), kcuda.load_cubin(str(path)), kcuda.load_cubin(path, "sm_90")):
        assert list(m.images.values()) == [prog.images["sm_90"]]
    with pytest.raises(FileNotFoundError, match="cannot read the image"):
        kcuda.load_cubin(tmp_path / "missing.cubin")
    with pytest.raises(TypeError, match="bytes or a path"):
        kcuda.load_cubin(3)
    with pytest.raises(ValueError, match="cannot read the arch"):
        kcuda.load_cubin({"sm_9x": b"x"})
    with pytest.raises(ValueError, match="is empty"):
        kcuda.load_cubin(b"")


def _axpy(**kw):
    n = kffi.sym_int("n")
    args = (
        kffi.fake_tensor("float32", [n]),
        kffi.fake_tensor("float32", [n], mut=True),
        kffi.Float32,
        kffi.Int32,
    )
    kw.setdefault("grid", (n + 255) // 256)
    kw.setdefault("block", 256)
    return kcuda.compile(
        AXPY, "axpy", *args, param_names=["x", "y", "a", "count"], arch="sm_80", **kw
    )


def test_compiled_kernel_is_a_function_with_a_contract(cache):
    f = _axpy()
    assert isinstance(f, kffi.Function) and f.__name__ == "axpy"
    assert f.contract.startswith("x: Tensor([n], float32, device=cuda, contiguous)")
    assert f._metadata["mutates"] == ["y"]
    assert [p["name"] for p in f._metadata["params"]] == ["x", "y", "a", "count"]
    # The contract is checked before anything is launched (no GPU is needed to see these).
    import numpy as np

    x = np.ones(4, np.float32)
    with pytest.raises(ValueError, match=r"x.device: expected cuda, got cpu"):
        f(x, x.copy(), 2.0, 4)
    with pytest.raises(TypeError):
        f(x, x)
    cuda_x = FakeDeviceTensor(4)
    with pytest.raises(ValueError, match=r"y.shape\[0\]"):
        f(cuda_x, FakeDeviceTensor(5), 2.0, 4)


def test_launch_without_a_driver_is_a_clear_error(cache):
    if os.path.exists("/dev/nvidia0"):
        pytest.skip("this machine has a GPU driver")
    f = _axpy()
    # No driver at all, or a driver package without a GPU (cuInit fails).
    no_driver = r"cannot open the CUDA driver \(libcuda.so.1\)|driver failed to initialise"
    with pytest.raises(RuntimeError, match=no_driver):
        f(FakeDeviceTensor(4), FakeDeviceTensor(4), 2.0, 4)
    with pytest.raises(RuntimeError, match=no_driver):
        f(FakeDeviceTensor(4), FakeDeviceTensor(4), 2.0, 4)  # and again: the process is fine


def test_launch_expressions_are_checked(cache):
    text = "x: Tensor([n], float32, mut, device=cuda), count: int32, s: float32"
    src = 'extern "C" __global__ void k(float* x, int count, float s) {}'

    def make(**kw):
        return kcuda.compile(src, "k", text, arch="sm_80", **kw)

    make(grid="cdiv(n, 128) * 2 - n % 3", block=("count", 1, 1), shared_mem="n * 4")
    with pytest.raises(ValueError, match="uses `m`, which is neither a symbol nor a parameter"):
        make(grid="cdiv(m, 128)", block=1)
    with pytest.raises(ValueError, match="the parameter `s`, which is not an integer"):
        make(grid="s", block=1)
    with pytest.raises(ValueError, match="only ints, symbols"):
        make(grid="n ** 2", block=1)
    with pytest.raises(ValueError, match="1 to 3 dimensions"):
        make(grid=(1, 1, 1, 1), block=1)
    with pytest.raises(TypeError, match="block is required"):
        make(grid=1)
    with pytest.raises(TypeError, match="sym_int arithmetic"):
        make(grid=kffi.sym_int("n") + 1, block=1)
    with pytest.raises(TypeError, match="either launch= or grid"):
        make(grid=1, block=1, launch=lambda *a: (1, 1))
    make(launch=lambda x, count, s: ((x.shape[0] + 127) // 128, 128))


def test_contract_shapes_that_cannot_be_kernel_parameters(cache):
    src = 'extern "C" __global__ void k(float* x) {}'
    with pytest.raises(ValueError, match="declares no stream"):
        kcuda.compile(
            src,
            "k",
            kffi.fake_tensor("float32", [4]),
            kffi.fake_stream(),
            grid=1,
            block=1,
            arch="sm_80",
        )
    with pytest.raises(TypeError, match="cannot be passed to a kernel"):
        kcuda.compile(
            src,
            "k",
            "x: Tensor([4], float32), t: Tuple[int32, int32]",
            grid=1,
            block=1,
            arch="sm_80",
        )
    with pytest.raises(ValueError, match="Invalid contract"):
        kcuda.compile(src, "k", "x: Tensor([4], float33)", grid=1, block=1, arch="sm_80")


def test_default_archs(monkeypatch):
    monkeypatch.setenv("KFFI_CUDA_ARCH", "80;9.0a,100+PTX")
    assert kcuda.default_archs() == ["sm_80", "sm_90a", "sm_100", "compute_100"]
    monkeypatch.delenv("KFFI_CUDA_ARCH")
    if not kffi.cpp._machine_gpu_archs():
        with pytest.raises(ValueError, match="no GPU found to compile for: pass arch="):
            kcuda.default_archs()


EMBED_SOURCE = r"""
#include <kffi/cuda.h>
#include <kffi/cuda/cubin.h>
#include <kffi/kffi.h>

KFFI_EMBED_CUBIN(axpy_image, "@CUBIN@");

namespace {
const kffi::cuda::CubinModule& Module() {
  static const kffi::cuda::CubinModule mod(KFFI_EMBEDDED_CUBIN(axpy_image), "embedded axpy");
  return mod;
}
}  // namespace

int64_t embedded_size() { return static_cast<int64_t>(KFFI_EMBEDDED_CUBIN(axpy_image).size()); }

int64_t embedded_checksum() {
  uint64_t h = 1469598103934665603ULL;  // FNV-1a
  for (unsigned char c : KFFI_EMBEDDED_CUBIN(axpy_image)) h = (h ^ c) * 1099511628211ULL;
  return static_cast<int64_t>(h >> 1);
}

// Launches the embedded kernel on the environment stream of x's device (GPU test).
void embedded_axpy(kffi::ConstTensorView x, kffi::TensorView y, float a) {
  void* xp = const_cast<float*>(x.const_data<float>());
  void* yp = y.data<float>();
  int n = static_cast<int>(x.shape()[0]);
  void* params[] = {&xp, &yp, &a, &n};
  const int dev = x.device().device_id;
  Module()["axpy"].Launch(dev, {static_cast<uint32_t>((n + 255) / 256)}, {256}, params,
                          kffi::cuda::current_stream_handle(dev));
}

KFFI_EXPORT(embedded_size, embedded_size);
KFFI_EXPORT(embedded_checksum, embedded_checksum);
KFFI_EXPORT(embedded_axpy, embedded_axpy);
"""


def build_embedding_library(tmp_path, archs):
    """A library built with the host compiler alone (no nvcc) that embeds NVRTC's image for
    archs[0] with KFFI_EMBED_CUBIN and launches it through kffi::cuda::CubinModule."""
    prog = kcuda.nvrtc_compile(AXPY, ["axpy"], arch=archs)
    image = prog.images[archs[0]]
    path = tmp_path / "axpy.img"
    path.write_bytes(image)
    src = EMBED_SOURCE.replace("@CUBIN@", str(path))
    mod = kffi.cpp.load_inline(
        "kffi_embed_cubin", cpp_sources=src, build_directory=str(tmp_path / "build"), quiet=True
    )
    return mod, image


def test_embedded_cubin_is_in_the_library(tmp_path, cache):
    mod, image = build_embedding_library(tmp_path, ["sm_80"])
    assert mod.embedded_size() == len(image)
    h = 1469598103934665603
    for c in image:
        h = ((h ^ c) * 1099511628211) % (1 << 64)
    assert mod.embedded_checksum() == h >> 1
