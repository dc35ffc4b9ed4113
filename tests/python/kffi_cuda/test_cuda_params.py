"""tests/python/kffi_cuda/test_cuda_params.py: kernel parameters that are not the contract's
arguments one to one (params=): structs passed by value, such as CuTe DSL tensors {data, shape...,
stride...}, and constants; and the check of the packed sizes against the kernel's own, read from the
cubin with no GPU. A CuTe DSL kernel is compiled to a cubin here when nvidia-cutlass-dsl is
installed. GPU runs are in test_cuda_params_gpu.py."""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

try:
    import kffi.cuda as kcuda

    kcuda._nvrtc.nvrtc_library()
except (ImportError, RuntimeError) as e:  # pragma: no cover - CI installs nvidia-cuda-nvrtc
    pytest.skip(f"needs NVRTC (pip install nvidia-cuda-nvrtc): {e}", allow_module_level=True)

from fake_dlpack import FakeDeviceTensor

# A kernel taking a CuTe-like tensor descriptor by value: {data, shape[0] (int), stride (long)}.
DESC = r"""
struct Desc { float* data; int n; long long stride; };
struct Pair { int a; double b; char c; };
extern "C" __global__ void scaled(Desc x, Desc y, float s, Pair p, long long pad) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < x.n) y.data[i * y.stride] = s * x.data[i * x.stride] + p.a + p.b + p.c;
}
"""
CONTRACT = (
    "x: Tensor([n], float32, device=cuda), y: Tensor([n], float32, mut, "
    "device=cuda), s: float32, k: int32, b: float64"
)
PARAMS = [
    "{x.data, x.shape[0]:i32, x.stride[0]:i64}",
    "{y.data, y.shape[-1]:i32, y.stride[0]:i64}",
    "s",
    "{k, b, 0:i32}",  # a bool-sized field is not expressible: an int32 fills the char's bytes
    "null",
]


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("KFFI_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("KFFI_CUDA_PREBUILT", raising=False)
    kcuda.clear_memory_cache()
    yield
    kcuda.clear_memory_cache()


def _make(params=PARAMS, contract=CONTRACT, **kw):
    kw.setdefault("grid", "cdiv(n, 128)")
    return kcuda.compile(DESC, "scaled", contract, block=128, arch="sm_80", params=params, **kw)


def test_structs_by_value_are_laid_out_as_c_does(cache):
    f = _make()
    # The kernel's own sizes, read from the cubin: Desc is {ptr, int, (pad), long long}: 24 bytes;
    # Pair {int, (pad), double, char, (pad)}: 24.
    info = f.cubin_module.param_info("scaled")["sm_80"]
    assert [size for _, size in info] == [24, 24, 4, 24, 8]
    assert f.param_sizes == [24, 24, 4, 24, 8]


def test_param_info_reads_offsets_and_sizes(cache):
    prog = kcuda.nvrtc_compile(DESC, ["scaled"], arch=["sm_80", "sm_90a", "compute_90"])
    mod = prog.load()
    info = mod.param_info("scaled")
    assert set(info) == {"sm_80", "sm_90a"}  # PTX has no ELF attributes
    assert info["sm_80"] == [(0, 24), (24, 24), (48, 4), (56, 24), (80, 8)]
    with pytest.raises(ValueError, match="has no kernel `nope`; its kernels: scaled"):
        mod.param_info("nope")


def test_a_size_mismatch_names_the_parameter_and_both_sizes(cache):
    bad = list(PARAMS)
    bad[1] = "{y.data, y.shape[0]:i32}"  # the stride is missing: 16 bytes, not 24
    with pytest.raises(
        ValueError,
        match=r"parameter 1 \(`\{y.data, y.shape\[0\]:i32\}`\) is 24 bytes in `scaled` .*, 16 "
        "bytes as the contract packs it",
    ):
        _make(bad)
    with pytest.raises(ValueError, match=r"takes 5 parameters, the contract packs 4: parameter 4"):
        _make(PARAMS[:4])
    with pytest.raises(ValueError, match=r"packs 6 kernel parameters.*parameter 5 \(`0:i64`"):
        _make([*PARAMS, "0:i64"])
    # Without params=, each contract argument is one parameter: 8 bytes for x, not 24.
    with pytest.raises(ValueError, match=r"parameter 0 \(`x`\) is 24 bytes in `scaled`"):
        _make(None)


def test_bad_params_are_clear_errors(cache):
    cases = [
        (["{x.data, q.shape[0]:i32}"], ValueError, "names `q`, which is not a parameter"),
        (["{s.data}"], TypeError, r"cannot pass `s` \(`float32`\) as a pointer"),
        (["{x.shape[0]}"], ValueError, r"says its type \(:i32 or :i64\)"),
        (["{x.shape:i32}"], ValueError, r"names no dimension"),
        (["{x.data:i32}"], TypeError, "as an int32"),
        (["{s:i32}"], TypeError, "as an int32"),
        (["{k:f32}"], TypeError, "as a float32"),
        (["{x.data, x.shape[0]:u8}"], ValueError, "unknown type 'u8'"),
        (["{x.data"], ValueError, "no closing"),
        (["x + 1"], ValueError, "cannot read 'x \\+ 1'"),
        (["99999999999999999999"], ValueError, "overflows int64"),
        ("x", TypeError, "not one str"),
        ([3], TypeError, "is a str"),
    ]
    for params, exc, msg in cases:
        with pytest.raises(exc, match=msg):
            _make(params)


def test_checks_precede_the_launch_and_descriptors_read_the_call(cache):
    f = _make()
    # A CPU tensor fails the contract before any driver call.
    import numpy as np

    x = np.ones(4, np.float32)
    with pytest.raises(ValueError, match="x.device: expected cuda"):
        f(x, x.copy(), 1.0, 1, 1.0)
    # Tensors that only claim to be on CUDA reach the packing, then the driver (absent here).
    if not __import__("os").path.exists("/dev/nvidia0"):
        with pytest.raises(RuntimeError, match="CUDA driver"):
            f(FakeDeviceTensor(4), FakeDeviceTensor(4), 1.0, 1, 1.0)


def test_int32_fields_are_range_checked(cache):
    # k is an int64 in this contract, packed as an int32: a value that does not fit is an error
    # naming the kernel parameter, raised before the driver is touched.
    contract = CONTRACT.replace("k: int32", "k: int64")
    params = [*PARAMS[:3], "{k:i32, b, 0:i32}", "null"]
    f = _make(params, contract=contract, grid=1)
    with pytest.raises(ValueError, match=r"parameter `\{k:i32, b, 0:i32\}`: 4294967296 does not"):
        f(FakeDeviceTensor(4), FakeDeviceTensor(4), 1.0, 2**32, 1.0)


CUTE_SCRIPT = textwrap.dedent(
    """
    import os, sys
    os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")
    import cutlass
    from cutlass import cute
    from cuda.bindings.driver import CUstream

    @cute.kernel
    def add_s(a: cute.Tensor, b: cute.Tensor, s: cutlass.Float32):
        bx, _, _ = cute.arch.block_idx()
        tx, _, _ = cute.arch.thread_idx()
        i = bx * 128 + tx
        if i < a.shape[0]:
            b[i] = a[i] + s

    @cute.jit
    def host(a: cute.Tensor, b: cute.Tensor, s: cutlass.Float32, stream: CUstream):
        add_s(a, b, s).launch(grid=((a.shape[0] + 127) // 128, 1, 1), block=(128, 1, 1),
                              stream=stream)

    out = sys.argv[1]
    n = cute.sym_int()
    a = cute.runtime.make_fake_compact_tensor(cute.Float32, (n,))
    b = cute.runtime.make_fake_compact_tensor(cute.Float32, (n,))
    c = cute.compile(host, a, b, cutlass.Float32(1.0), cute.runtime.make_fake_stream(),
                     options=f"--keep-cubin --keep-ptx --dump-dir={out}")
    (name,) = c.kernel_info
    with open(os.path.join(out, "kernel_name"), "w") as f:
        f.write(name)
    """
)


def build_cute_cubin(out_dir) -> tuple:
    """(cubin path, PTX text, kernel name) of a CuTe DSL kernel add_s(a, b, s) compiled here (no
    GPU; skips without nvidia-cutlass-dsl), or taken from $KFFI_CUTE_CUBIN_DIR (a folder that
    ``python tests/python/kffi_cuda/test_cuda_params.py DIR`` made, for a GPU host without the
    DSL). A separate interpreter: the DSL loads its own CUDA bindings."""
    prebuilt = os.environ.get("KFFI_CUTE_CUBIN_DIR")
    if prebuilt:
        out_dir = Path(prebuilt)
        (cubin,) = out_dir.glob("*.cubin")
        (ptx,) = out_dir.glob("*.ptx")
        return cubin, ptx.read_text(), (out_dir / "kernel_name").read_text()
    if importlib.util.find_spec("cutlass") is None:
        pytest.skip("nvidia-cutlass-dsl is not installed and KFFI_CUTE_CUBIN_DIR is not set")
    out_dir.mkdir(parents=True, exist_ok=True)
    script = out_dir / "build_cute.py"  # the DSL reads its kernels' source from a file
    script.write_text(CUTE_SCRIPT)
    proc = subprocess.run(
        [sys.executable, str(script), str(out_dir)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (cubin,) = out_dir.glob("*.cubin")
    (ptx,) = out_dir.glob("*.ptx")
    return cubin, ptx.read_text(), (out_dir / "kernel_name").read_text()


CUTE_CONTRACT = (
    "a: Tensor([n], float32, device=cuda), b: Tensor([n], float32, mut, device=cuda), s: float32"
)
# A compact 1-D CuTe tensor of dynamic shape: {data, shape[0] as int32} (its stride is static).
CUTE_PARAMS = ["{a.data, a.shape[0]:i32}", "{b.data, b.shape[0]:i32}", "s"]


def test_cute_dsl_cubin_parameters(tmp_path):
    cubin, ptx, name = build_cute_cubin(tmp_path / "cute")
    # The PTX shows what the launcher must pack: two 16-byte structs and a float.
    assert f".param .align 8 .b8 {name}_param_0[16]" in ptx
    assert f".param .f32 {name}_param_2" in ptx
    mod = kcuda.load_cubin(cubin, arch="sm_90a")
    assert mod.param_info(name) == {"sm_90a": [(0, 16), (16, 16), (32, 4)]}
    f = mod.kernel(name, CUTE_CONTRACT, params=CUTE_PARAMS, grid="cdiv(n, 128)", block=128)
    assert f.param_sizes == [16, 16, 4]
    with pytest.raises(ValueError, match=r"parameter 0 \(`a`\) is 16 bytes .* 8 bytes"):
        mod.kernel(name, CUTE_CONTRACT, grid="cdiv(n, 128)", block=128)


def test_param_info_of_damaged_cubins_is_none_or_a_value_error(cache):
    import random

    from kffi.cuda._cubin_info import kernel_params

    good = kcuda.nvrtc_compile(DESC, ["scaled"], arch="sm_80").images["sm_80"]
    assert kernel_params(good, "scaled") == [(0, 24), (24, 24), (48, 4), (56, 24), (80, 8)]
    assert kernel_params(b"not an ELF file", "scaled") is None
    rng = random.Random(28)
    cases = [good[:n] for n in range(0, len(good), 97)]
    for _ in range(300):
        b = bytearray(good)
        for _ in range(rng.randint(1, 8)):
            b[rng.randrange(len(b))] = rng.randrange(256)
        cases.append(bytes(b))
    for data in cases:
        try:
            info = kernel_params(data, "scaled")
        except ValueError as e:
            assert "has no kernel `scaled`" in str(e)
        else:
            assert info is None or all(0 <= s < 1 << 14 for _, s in info)


if __name__ == "__main__":  # builds the CuTe cubin into a folder for KFFI_CUTE_CUBIN_DIR
    print(build_cute_cubin(Path(sys.argv[1]).resolve())[0])
