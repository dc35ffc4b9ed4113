#!/usr/bin/env python3
"""bench/python/nvrtc_compile.py: what kffi.cuda (NVRTC) costs beside nvcc builds, cold and warm,
and what a launch through its cubin launcher costs beside a kffi.compile'd kernel.

Rows (median of --reps, each cold row in a fresh process with an empty cache):
  cold  kffi.cuda.compile        NVRTC -> cubin for one arch, module, contract launcher
  cold  kffi.compile (nvcc)      nvcc + host compiler + link of the same kernel (needs nvcc)
  cold  tvm_ffi.cpp.load_inline  the same kernel through apache-tvm-ffi (needs it and nvcc)
  warm  kffi.cuda.compile        a cache hit in a fresh process (`import kffi` not timed)
  gpu   call + launch            per call, kffi.cuda kernel vs kffi.compile'd kernel (torch
                                 tensors, 20000 calls, then one synchronize; needs a GPU)
Then the ratios, with issue 41's goal for the nvcc build (kffi.compile / load_inline <= 0.6).

The kernel is a 30-line elementwise kernel (a GELU with a bias and a residual). Compiles target
--arch (default: this machine's GPU, else sm_90). The cold rows time the call alone (the Python
start and `import kffi` are not counted: they are the same for all).

Usage: python3 bench/python/nvrtc_compile.py [--reps 3] [--arch sm_90] [--out FILE.json]
"""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap

KERNEL_BODY = r"""
  long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (i >= n) return;
  float v = x[i] + bias[i % cols];
  // tanh approximation of GELU, written out
  const float k0 = 0.7978845608f;
  const float k1 = 0.044715f;
  float inner = k0 * (v + k1 * v * v * v);
  float e = __expf(2.0f * inner);
  float t = (e - 1.0f) / (e + 1.0f);
  float g = 0.5f * v * (1.0f + t);
  // scaled residual, clamped
  float r = residual[i] * alpha + g;
  r = fminf(fmaxf(r, -clip), clip);
  out[i] = r;
"""

NVRTC_SOURCE = (
    'extern "C" __global__ void gelu_bias_residual(const float* x, const float* bias,\n'
    "    const float* residual, float* out, float alpha, float clip, long long cols,\n"
    "    long long n) {\n" + KERNEL_BODY + "}\n"
)

NVCC_SOURCE = (
    "#include <cuda_runtime.h>\n"
    "__global__ void gelu_kernel(const float* x, const float* bias, const float* residual,\n"
    "    float* out, float alpha, float clip, long long cols, long long n) {\n"
    + KERNEL_BODY
    + "}\n"
    "void gelu_bias_residual(kffi::ConstTensorView x, kffi::ConstTensorView bias,\n"
    "    kffi::ConstTensorView residual, kffi::TensorView out, float alpha, float clip,\n"
    "    int64_t cols, int64_t n, void* stream) {\n"
    "  gelu_kernel<<<(unsigned)((n + 255) / 256), 256, 0, (cudaStream_t)stream>>>(\n"
    "      x.const_data<float>(), bias.const_data<float>(), residual.const_data<float>(),\n"
    "      out.data<float>(), alpha, clip, cols, n);\n"
    "}\n"
)

TVM_SOURCE = (
    "#include <cuda_runtime.h>\n#include <tvm/ffi/container/tensor.h>\n"
    "#include <tvm/ffi/extra/c_env_api.h>\n"
    "__global__ void gelu_kernel(const float* x, const float* bias, const float* residual,\n"
    "    float* out, float alpha, float clip, long long cols, long long n) {\n"
    + KERNEL_BODY
    + "}\n"
    "void gelu_bias_residual(tvm::ffi::TensorView x, tvm::ffi::TensorView bias,\n"
    "    tvm::ffi::TensorView residual, tvm::ffi::TensorView out, double alpha, double clip,\n"
    "    int64_t cols, int64_t n) {\n"
    "  auto s = (cudaStream_t)TVMFFIEnvGetStream(x.device().device_type, x.device().device_id);\n"
    "  gelu_kernel<<<(unsigned)((n + 255) / 256), 256, 0, s>>>(\n"
    "      (const float*)x.data_ptr(), (const float*)bias.data_ptr(),\n"
    "      (const float*)residual.data_ptr(), (float*)out.data_ptr(), (float)alpha, (float)clip,\n"
    "      cols, n);\n"
    "}\n"
)

PRELUDE = textwrap.dedent(
    """
    import json, os, sys, time
    import kffi, kffi.cuda
    SRC = json.loads(sys.argv[1])
    ARCH = sys.argv[2]
    n = kffi.sym_int("n")
    c = kffi.sym_int("c")
    FAKES = (kffi.fake_tensor("float32", [n]), kffi.fake_tensor("float32", [c]),
             kffi.fake_tensor("float32", [n]), kffi.fake_tensor("float32", [n], mut=True),
             kffi.Float32, kffi.Float32, kffi.Int64, kffi.Int64)
    NAMES = ["x", "bias", "residual", "out", "alpha", "clip", "cols", "count"]
    """
)

BODIES = {
    "kffi.cuda.compile": textwrap.dedent(
        """
        t = time.perf_counter()
        fn = kffi.cuda.compile(SRC["nvrtc"], "gelu_bias_residual", *FAKES, param_names=NAMES,
                               grid="cdiv(count, 256)", block=256, arch=ARCH)
        dt = time.perf_counter() - t
        extra = {"compiles": kffi.cuda.compile_count()}
        """
    ),
    "kffi.compile (nvcc)": textwrap.dedent(
        """
        os.environ.setdefault("KFFI_CUDA_ARCH", ARCH)
        t = time.perf_counter()
        fn = kffi.compile(SRC["nvcc"], "gelu_bias_residual", *FAKES, kffi.fake_stream(),
                          param_names=NAMES + ["stream"], options={"quiet": True})
        dt = time.perf_counter() - t
        extra = {"compiler_invocations": kffi.cpp.get_compiler_invocations()}
        """
    ),
    "tvm_ffi.cpp.load_inline": textwrap.dedent(
        """
        import tvm_ffi.cpp
        digits = ARCH.split("_")[1].rstrip("af")
        os.environ.setdefault("TVM_FFI_CUDA_ARCH_LIST", digits[:-1] + "." + digits[-1])
        t = time.perf_counter()
        mod = tvm_ffi.cpp.load_inline("gelu_bench_" + str(os.getpid()), cuda_sources=SRC["tvm"],
                                      functions=["gelu_bias_residual"],
                                      build_directory=os.environ["BENCH_BUILD_DIR"])
        dt = time.perf_counter() - t
        extra = {}
        """
    ),
}


def run_child(body: str, arch: str, env: dict) -> dict:
    code = PRELUDE + body + "\nprint('RESULT ' + json.dumps({'seconds': dt, **extra}))\n"
    srcs = json.dumps({"nvrtc": NVRTC_SOURCE, "nvcc": NVCC_SOURCE, "tvm": TVM_SOURCE})
    p = subprocess.run(
        [sys.executable, "-c", code, srcs, arch], env=env, capture_output=True, text=True
    )
    for line in p.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    tail = (p.stderr or p.stdout).strip().splitlines()[-3:]
    return {"error": " | ".join(tail)[:400]}


def cold(name: str, arch: str, reps: int) -> dict:
    times, last = [], {}
    for _ in range(reps):
        with tempfile.TemporaryDirectory(prefix="kffi-bench-nvrtc-") as d:
            env = dict(os.environ, KFFI_CACHE_DIR=d, BENCH_BUILD_DIR=os.path.join(d, "tvm"))
            env.pop("KFFI_CUDA_PREBUILT", None)
            env["CCACHE_DISABLE"] = "1"  # a cold build, not a ccache hit
            last = run_child(BODIES[name], arch, env)
            if "error" in last:
                return {"error": last["error"]}
            times.append(last["seconds"])
    return {"median_s": statistics.median(times), "runs_s": times, **last}


def warm(arch: str, reps: int) -> dict:
    times = []
    with tempfile.TemporaryDirectory(prefix="kffi-bench-nvrtc-") as d:
        env = dict(os.environ, KFFI_CACHE_DIR=d)
        env.pop("KFFI_CUDA_PREBUILT", None)
        first = run_child(BODIES["kffi.cuda.compile"], arch, env)
        if "error" in first:
            return first
        for _ in range(reps):
            r = run_child(BODIES["kffi.cuda.compile"], arch, env)
            if r.get("compiles") != 0:
                return {"error": f"a warm process compiled: {r}"}
            times.append(r["seconds"])
    return {"median_s": statistics.median(times), "runs_s": times}


GPU_CODE = textwrap.dedent(
    """
    import torch
    dev_arch = "sm_%d%d" % torch.cuda.get_device_capability()
    os.environ["KFFI_CUDA_ARCH"] = dev_arch
    nv = kffi.cuda.compile(SRC["nvrtc"], "gelu_bias_residual", *FAKES, param_names=NAMES,
                           grid="cdiv(count, 256)", block=256, arch=dev_arch)
    cc = kffi.compile(SRC["nvcc"], "gelu_bias_residual", *FAKES, kffi.fake_stream(),
                      param_names=NAMES + ["stream"], options={"quiet": True})
    N = 4096
    x = torch.randn(N, device="cuda"); b = torch.randn(64, device="cuda")
    r = torch.randn(N, device="cuda"); o1 = torch.empty_like(x); o2 = torch.empty_like(x)
    nv(x, b, r, o1, 0.5, 3.0, 64, N); cc(x, b, r, o2, 0.5, 3.0, 64, N)
    torch.cuda.synchronize()
    assert torch.allclose(o1, o2, atol=1e-5), "the two kernels disagree"
    res = {}
    for rnd in range(3):
        for name, f in (("kffi.cuda", nv), ("kffi.compile", cc)):
            calls = 20000
            torch.cuda.synchronize()
            t = time.perf_counter()
            for _ in range(calls):
                f(x, b, r, o1, 0.5, 3.0, 64, N)
            torch.cuda.synchronize()
            us = (time.perf_counter() - t) / calls * 1e6
            res[name] = min(res.get(name, 1e9), us)
    dt = 0.0
    extra = {"per_call_us": res, "device": torch.cuda.get_device_name()}
    """
)


def gpu(arch: str) -> dict:
    try:
        import torch

        if not torch.cuda.is_available():
            return {"skipped": "no CUDA GPU"}
    except ImportError:
        return {"skipped": "torch is not installed"}
    with tempfile.TemporaryDirectory(prefix="kffi-bench-nvrtc-") as d:
        r = run_child(GPU_CODE, arch, dict(os.environ, KFFI_CACHE_DIR=d))
    return r


def default_arch() -> str:
    from kffi import cpp

    gpus = cpp._machine_gpu_archs()
    return "sm_" + gpus[-1] if gpus else "sm_90"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--arch", default=None)
    ap.add_argument("--out", default="build/bench_nvrtc_compile.json")
    ap.add_argument("--no-gpu", action="store_true")
    args = ap.parse_args()
    arch = args.arch or default_arch()
    results = {"arch": arch, "python": sys.version.split()[0], "machine": platform.machine()}
    import kffi.cuda

    results["nvrtc"] = ".".join(map(str, kffi.cuda.nvrtc_version()))
    results["nvcc"] = shutil.which("nvcc")
    rows = {}
    rows["cold kffi.cuda.compile"] = cold("kffi.cuda.compile", arch, args.reps)
    rows["cold kffi.compile (nvcc)"] = (
        cold("kffi.compile (nvcc)", arch, args.reps)
        if shutil.which("nvcc")
        else {"skipped": "no nvcc"}
    )
    try:
        import tvm_ffi  # noqa: F401

        have_tvm = True
    except ImportError:
        have_tvm = False
    rows["cold tvm_ffi.cpp.load_inline"] = (
        cold("tvm_ffi.cpp.load_inline", arch, args.reps)
        if have_tvm and shutil.which("nvcc")
        else {"skipped": "needs apache-tvm-ffi and nvcc"}
    )
    rows["warm kffi.cuda.compile (fresh process)"] = warm(arch, max(args.reps, 5))
    rows["gpu call + launch"] = {"skipped": "--no-gpu"} if args.no_gpu else gpu(arch)
    results["rows"] = rows

    def ratio(a, b):
        ra, rb = rows.get(a, {}).get("median_s"), rows.get(b, {}).get("median_s")
        return None if not ra or not rb else ra / rb

    results["ratios"] = {
        "nvrtc / nvcc (cold)": ratio("cold kffi.cuda.compile", "cold kffi.compile (nvcc)"),
        "nvrtc / tvm_ffi load_inline (cold)": ratio(
            "cold kffi.cuda.compile", "cold tvm_ffi.cpp.load_inline"
        ),
        "nvcc: kffi.compile / load_inline (cold)": ratio(
            "cold kffi.compile (nvcc)", "cold tvm_ffi.cpp.load_inline"
        ),
    }
    # Issue 41's goal for the nvcc build of the same kernel (the NVRTC rows have none).
    goals = {"nvcc: kffi.compile / load_inline (cold)": 0.6}
    results["goals"] = goals
    g = rows["gpu call + launch"].get("per_call_us")
    if g:
        results["ratios"]["kffi.cuda / kffi.compile (call + launch)"] = (
            g["kffi.cuda"] / g["kffi.compile"]
        )

    print(f"arch {arch}, NVRTC {results['nvrtc']}, nvcc {results['nvcc']}")
    print(f"{'row':42} {'result':>14}")
    for name, r in rows.items():
        if "median_s" in r:
            val = f"{r['median_s'] * 1e3:10.1f} ms"
        elif "per_call_us" in r:
            val = ", ".join(f"{k} {v:.2f} us" for k, v in r["per_call_us"].items())
        else:
            val = r.get("skipped") or ("ERROR: " + str(r.get("error")))
        print(f"{name:42} {val:>14}")
    for k, v in results["ratios"].items():
        goal = goals.get(k)
        verdict = (
            "" if goal is None or v is None else f"  <= {goal} {'PASS' if v <= goal else 'MISS'}"
        )
        print(f"{k:42} {'n/a' if v is None else f'{v:10.3f}x':>14}{verdict}")
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(results, f, indent=2)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
