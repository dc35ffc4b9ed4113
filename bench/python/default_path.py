#!/usr/bin/env python3
"""bench/python/default_path.py: what a user gets by default, against apache-tvm-ffi.

Every row runs in fresh processes with an empty kffi build cache and no C++ compiler on PATH
(CXX and CC name files that do not exist), and nothing is tuned: no kffi.torch import, no
fast_tensor_import(). So the rows show what the first process of a serving container gets.

Per call (one fresh process per device, kffi and tvm-ffi side by side in it):
  3 torch tensors   the no-op kernels of call_overhead.py (kffi: KFFI_EXPORT; tvm-ffi:
                    TVM_FFI_DLL_EXPORT_TYPED_FUNC), three torch tensors, CPU and (where CUDA is)
                    CUDA, with the GIL held and released
  scale kernel      (CUDA, with nvcc and apache-tvm-ffi) a TVM-FFI CUDA kernel y = x * factor
                    written against tvm-ffi's headers, loaded once through kffi's bridge
                    (kffi.load_module) and once with tvm_ffi.load_module: call + launch
Times are thread CPU time per call; the ratio is the median of per-round ratios (each round
samples both bindings, in alternating order), so drift between rounds cancels. On CUDA the
calls are timed in bursts of 128 with the stream drained between bursts (outside the timing),
so that a full launch queue never makes the loop time the GPU's work instead of the call's.

First use (each measured in --first-reps fresh processes; medians):
  import kffi + first call with torch tensors, after `import torch`        goal <= 0.3 s
  first kffi.torch op call (module.torch_ops + one eager call)             goal < 1 s
  first kffi.jax.call under jax.jit, over XLA's compile of the same jitted
  function without the kffi call                                           goal < 1 s

Goals of the per-call rows: 3 torch tensors <= 0.5x tvm-ffi; scale kernel <= 0.95x. Prints a
table and writes JSON (--out); never fails on a missed goal. call_overhead.py prints the per-call
rows beside its tuned rows (it calls percall_rows()).

Usage: python3 bench/python/default_path.py [--out build/bench_default_path.json] [--reps 15]
                                            [--first-reps 5] [--no-first-use]
"""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT / "tests" / "python" / "support"))

import call_overhead as co  # the kernels and their cached builds
from toolchain_support import env_without_compiler

GOALS = {"torch3": 0.5, "scale": 0.95, "scale_call_only": None}
FIRST_GOALS = {"first_call_s": 0.3, "first_op_s": 1.0, "first_jax_s": 1.0}

# A TVM-FFI CUDA kernel, as a kernel library written for tvm-ffi is: y = x * factor for float32,
# launched on the caller's stream (TVMFFIEnvGetStream).
TVM_SCALE_CU = r"""
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/extra/c_env_api.h>
#include <tvm/ffi/function.h>
#include <cuda_runtime.h>
#include <cstdint>
__global__ void ScaleKernel(float* y, const float* x, float factor, int64_t n) {
  int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) y[i] = x[i] * factor;
}
void Scale(tvm::ffi::TensorView y, tvm::ffi::TensorView x, double factor) {
  int64_t n = x.numel();
  auto stream = static_cast<cudaStream_t>(
      TVMFFIEnvGetStream(x.device().device_type, x.device().device_id));
  int threads = 256;
  int64_t blocks = (n + threads - 1) / threads;
  ScaleKernel<<<blocks, threads, 0, stream>>>(static_cast<float*>(y.data_ptr()),
                                             static_cast<const float*>(x.data_ptr()),
                                             static_cast<float>(factor), n);
}
// The same call without the launch: what the two bindings cost around the kernel.
void ScaleCallOnly(tvm::ffi::TensorView y, tvm::ffi::TensorView x, double factor) {
  static volatile void* sink;
  sink = TVMFFIEnvGetStream(x.device().device_type, x.device().device_id);
  (void)y;
  (void)factor;
}
TVM_FFI_DLL_EXPORT_TYPED_FUNC(scale, Scale);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(scale_call_only, ScaleCallOnly);
"""


def build_tvm_scale():
    """The TVM-FFI CUDA kernel, built with nvcc and tvm-ffi's flags (cached)."""
    import shutil

    import tvm_ffi
    from tvm_ffi import libinfo

    nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    inc = libinfo.find_include_path()
    libdir = os.path.dirname(libinfo.find_libtvm_ffi())
    cfg = [sys.executable, "-m", "tvm_ffi.config", "--cxxflags", "--ldflags", "--libs"]
    flags = subprocess.run(cfg, capture_output=True, text=True, check=True).stdout.split()
    flags = [f for f in flags if not f.startswith("-std=")]

    def cmd(s, o):
        cu = Path(s).with_suffix(".cu")
        cu.write_text(Path(s).read_text())
        return [
            nvcc,
            "-O3",
            "-std=c++17",
            "-shared",
            "-Xcompiler",
            "-fPIC",
            str(cu),
            "-o",
            str(o),
        ] + [
            *flags,
            f"-Xlinker=-rpath,{libdir}",
        ]

    return co.cached_build(
        "kbench_tvm_scale", TVM_SCALE_CU, cmd, [tvm_ffi.__version__, inc, co.tree_hash(inc)]
    )


# ---- the per-call worker: a fresh process --------------------------------------------------------

WORKER = r"""
import gc, json, statistics, sys, time
args = json.loads(sys.argv[1])
import torch
import kffi, tvm_ffi
dev = args["device"]
k, t = kffi.load_module(args["kffi"]), tvm_ffi.load_module(args["tvm"])
cells = {}
xs = tuple(torch.zeros(16, device=dev) for _ in range(3))
for gil in ("held", "released"):
    fk, ft = k.get_function(args["fn"]), t.get_function(args["fn"])
    fk.release_gil = ft.release_gil = gil == "released"
    cells[("torch3", gil)] = (fk, ft, xs)
if args.get("scale"):
    ks, ts = kffi.load_module(args["scale"]), tvm_ffi.load_module(args["scale"])
    x = torch.rand(1 << 12, device=dev)
    y = torch.empty_like(x)
    cells[("scale", "default")] = (ks.scale, ts.scale, (y, x, 2.0))
    cells[("scale_call_only", "default")] = (ks.scale_call_only, ts.scale_call_only, (y, x, 2.0))
    ks.scale(y, x, 2.0)
    torch.cuda.synchronize()
    assert torch.equal(y, x * 2)

BURST = 128  # calls timed between two synchronizations on CUDA

def loop(fn, a, n, clock=time.thread_time_ns):
    if dev != "cuda":
        t0 = clock()
        for _ in range(n):
            fn(*a)
        return (clock() - t0) / n
    # On CUDA the launches are timed in bursts well below the launch queue's depth, with the
    # stream drained between bursts and outside the timed region: a loop that fills the queue
    # waits for the GPU, and then times the kernel's run rather than the call and launch.
    total, done = 0, 0
    while done < n:
        m = min(BURST, n - done)
        torch.cuda.synchronize()
        t0 = clock()
        for _ in range(m):
            fn(*a)
        total += clock() - t0
        done += m
    return total / n

out = {}
gc.disable()
for (case, gil), (fk, ft, a) in cells.items():
    for _ in range(3):
        loop(fk, a, 2000); loop(ft, a, 2000)
    n = 64
    while loop(fk, a, n) * n < 4e6 and n < 1 << 22:
        n *= 2
    cell = {"n": n}
    # Thread CPU time (the table's), and wall time of the same rounds kept beside it.
    for name, clock in (("", time.thread_time_ns), ("wall_", time.perf_counter_ns)):
        ks_, ts_, ratios = [], [], []
        for r in range(args["reps"]):
            if dev == "cuda":
                torch.cuda.synchronize()
            if r % 2:
                b = loop(ft, a, n, clock); x = loop(fk, a, n, clock)
            else:
                x = loop(fk, a, n, clock); b = loop(ft, a, n, clock)
            ks_.append(x); ts_.append(b); ratios.append(x / b)
        cell.update({f"{name}kffi_ns": statistics.median(ks_),
                     f"{name}tvm_ffi_ns": statistics.median(ts_),
                     f"{name}ratio": statistics.median(ratios)})
    out[f"{case}/{gil}"] = cell
# What the default path used: kffi.torch's reader, loaded by the first torch tensor.
reader = "kffi.torch" in sys.modules and sys.modules["kffi.torch"]._glue._tensor_import.done
print(json.dumps({"rows": out, "torch_reader": "kffi.torch (prebuilt)" if reader else "exchange API",
                  "compiler_invocations": kffi.cpp.get_compiler_invocations(),
                  "torch": torch.__version__, "tvm_ffi": tvm_ffi.__version__}))
"""


def fresh_env(tmp: Path) -> dict[str, str]:
    """A process with an empty build cache and no compiler on PATH (what a serving container
    has); the Python stays this one."""
    cache = tmp / "cache"
    cache.mkdir(parents=True, exist_ok=True)
    return env_without_compiler(tmp / "bin", KFFI_CACHE_DIR=str(cache))


def percall_rows(reps: int = 15, cuda: bool | None = None) -> dict:
    """The per-call rows, each device in its own fresh process. {device: worker report}."""
    import torch

    if cuda is None:
        cuda = torch.cuda.is_available()
    kffi_lib, tvm_lib = str(co.build_kffi()), str(co.build_tvm())
    scale = None
    if cuda:
        try:
            scale = str(build_tvm_scale())
        except Exception as e:  # no nvcc, say: the row is skipped and named
            co.log(f"  ! scale kernel: {type(e).__name__}: {str(e)[:300]}")
    report = {}
    for device in ("cpu", "cuda") if cuda else ("cpu",):
        fn = "tensors3_stream" if device == "cuda" else "tensors3"
        spec = {"device": device, "kffi": kffi_lib, "tvm": tvm_lib, "fn": fn, "reps": reps}
        if device == "cuda" and scale:
            spec["scale"] = scale
        with tempfile.TemporaryDirectory(prefix="kffi-default-") as tmp:
            proc = subprocess.run(
                [sys.executable, "-c", WORKER, json.dumps(spec)],
                capture_output=True,
                text=True,
                env=fresh_env(Path(tmp)),
                timeout=900,
            )
        if proc.returncode != 0:
            co.log(f"  ! default path on {device}: {proc.stderr[-2000:]}")
            continue
        report[device] = json.loads(proc.stdout.strip().splitlines()[-1])
    return report


# ---- first use --------------------------------------------------------------------------------

FIRST = {
    "import_torch": "import torch; x = [torch.zeros(4) for _ in range(3)]",
    "first_call": (
        "import torch; x = [torch.zeros(4) for _ in range(3)]; t0 = time.perf_counter()\n"
        "import kffi; m = kffi.load_module(LIB); m.tensors3(*x)"
    ),
    "first_op": (
        "import torch, kffi; m = kffi.load_module(OPS); t0 = time.perf_counter()\n"
        "ops = m.torch_ops('kbench_first'); y = torch.empty(4); ops.scale(y, torch.ones(4), 2.0)\n"
        "assert y.tolist() == [2.0] * 4"
    ),
    # Both on JAX's CPU device (the kernels are host code), where a GPU is JAX's default too.
    "plain_jit": (
        "import jax, jax.numpy as jnp\n"
        "jax.config.update('jax_default_device', jax.devices('cpu')[0])\n"
        "a = jnp.arange(4, dtype=jnp.float32)\n"
        "t0 = time.perf_counter(); jax.jit(lambda v: (v + 1) * 2)(a).block_until_ready()"
    ),
    "first_jax": (
        "import jax, jax.numpy as jnp, kffi, kffi.jax\n"
        "jax.config.update('jax_default_device', jax.devices('cpu')[0])\n"
        "a = jnp.arange(4, dtype=jnp.float32)\n"
        "m = kffi.load_module(OPS); t0 = time.perf_counter()\n"
        "jax.jit(lambda v: kffi.jax.call(m.plus_one, v) * 2)(a).block_until_ready()"
    ),
}


def first_use(reps: int) -> dict:
    """Medians over reps fresh processes of each snippet's seconds from its t0 (the snippet's
    start, or where it resets t0)."""
    import kffi

    kernels = ROOT / "tests" / "python" / "toolchain" / "default_path_kernels.cc"
    ops_lib = kffi.cpp.build("kffi_default_path", [str(kernels)], quiet=True)
    names = {"LIB": repr(str(co.build_kffi())), "OPS": repr(ops_lib)}
    wants = {"import_torch", "first_call", "first_op"}
    try:
        import jax  # noqa: F401

        wants |= {"plain_jit", "first_jax"}
    except ImportError:
        pass
    times: dict[str, list[float]] = {k: [] for k in FIRST if k in wants}
    failed: set[str] = set()
    for _ in range(reps):
        for key in times:
            if key in failed:
                continue
            code = FIRST[key]
            for name, value in names.items():
                code = code.replace(name, value)
            # t0 = the interpreter's start (close enough: `python -c` before the first import).
            script = (
                f"import time; t0 = time.perf_counter()\n{code}\nprint(time.perf_counter() - t0)"
            )
            with tempfile.TemporaryDirectory(prefix="kffi-first-") as tmp:
                proc = subprocess.run(
                    [sys.executable, "-c", script],
                    capture_output=True,
                    text=True,
                    env=fresh_env(Path(tmp)),
                    timeout=600,
                )
            if proc.returncode != 0:
                co.log(f"  ! first use {key}: {(proc.stderr or proc.stdout)[-1500:]}")
                failed.add(key)
                continue
            times[key].append(float(proc.stdout.strip().splitlines()[-1]))
    med = {k: statistics.median(v) for k, v in times.items() if v}
    out = {"medians_s": med, "reps": reps}
    if "first_call" in med:
        out["first_call_s"] = med["first_call"]
    if "first_op" in med:
        out["first_op_s"] = med["first_op"]
    if "first_jax" in med and "plain_jit" in med:
        out["first_jax_s"] = med["first_jax"] - med["plain_jit"]
    return out


def print_percall(report: dict) -> None:
    print("\ndefault path: a fresh process, an empty build cache, no compiler, nothing tuned")
    print(f"{'row':<48}{'kffi ns':>10}{'tvm-ffi ns':>12}{'kffi/tvm':>10}{'goal':>8}")
    for device, r in report.items():
        for key, cell in r["rows"].items():
            case, gil = key.split("/")
            label = {
                "torch3": f"3 torch tensors, {device}, GIL {gil}",
                "scale": f"scale kernel (bridge), {device}, call + launch",
                "scale_call_only": "  the same, call only (no launch)",
            }[case]
            goal = GOALS[case]
            mark = (
                "" if goal is None else f"{goal:>6.2f}x {'ok' if cell['ratio'] <= goal else 'MISS'}"
            )
            print(
                f"{label:<48}{cell['kffi_ns']:>10.0f}{cell['tvm_ffi_ns']:>12.0f}"
                f"{cell['ratio']:>9.3f}x{mark}"
            )
        print(
            f"  ({device}: torch tensors read by {r['torch_reader']}; "
            f"{r['compiler_invocations']} compiler runs)"
        )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=str(ROOT / "build" / "bench_default_path.json"))
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--first-reps", type=int, default=5)
    ap.add_argument("--no-first-use", action="store_true")
    ap.add_argument("--no-cuda", action="store_true")
    args = ap.parse_args()
    result: dict = {"percall": percall_rows(args.reps, False if args.no_cuda else None)}
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
    print_percall(result["percall"])
    if not args.no_first_use:
        fu = first_use(args.first_reps)
        result["first_use"] = fu
        print(f"\nfirst use (medians of {fu['reps']} fresh processes)")
        for key, label in (
            ("first_call_s", "import kffi + first call, after import torch"),
            ("first_op_s", "first kffi.torch op call"),
            ("first_jax_s", "first kffi.jax.call under jit, over XLA's"),
        ):
            if key in fu:
                goal = FIRST_GOALS[key]
                mark = "ok" if fu[key] <= goal else "MISS"
                print(f"  {label:<46}{fu[key]:>8.3f} s   goal {goal} s {mark}")
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
    print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
