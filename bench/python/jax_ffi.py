#!/usr/bin/env python3
"""bench/python/jax_ffi.py: the cost of a kffi function inside jax.jit, against its anchors.

One process measures, interleaved, an empty kernel (CPU: an empty function; GPU: an empty
kernel launch on XLA's stream) called from XLA four ways:

  kffi          kffi.jax.register_ffi_target on a kffi export (the trampoline + Dispatch path)
  hand-written  an XLA FFI handler written by hand with xla/ffi/api/ffi.h (Ffi::Bind), built
                here against the same jaxlib headers, calling the same empty kernel
  jax-tvm-ffi   jax_tvm_ffi.register_ffi_target on a TVM-FFI export of the same kernel
  jit x+1       (reference) a jitted `x + 1`, no custom call

Cases: one jitted call (dispatch + run + block_until_ready, per call), and a jitted chain of
100 calls (time of the chain / 100), the chain with and without the CUDA-graph trait
(allow_cuda_graph; on CPU the trait changes nothing). Each cell is warmed up, then sampled
--reps times in a shuffled order per repetition; the median is reported. Ratios are kffi /
anchor from the same run: the median of the per-repetition ratios (paired samples). Goals
(GPU): single call <= 1.02x hand-written; chain with the trait <= 1.0x jax-tvm-ffi per call;
CPU: <= 1.0x jax-tvm-ffi.

Usage: python3 bench/python/jax_ffi.py [--out build/bench_jax_ffi.json] [--reps 21]
                                       [--calls 100] [--skip BINDING ...]
Never fails on a missed goal; a binding that cannot be built is skipped and named.
"""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

KFFI_CPU = """
#include <kffi/kffi.h>
__attribute__((noinline)) void empty_kernel(void* x, void* y) { asm volatile("" ::"r"(x), "r"(y)); }
void empty(kffi::ConstTensorView x, kffi::TensorView y) {
  empty_kernel(x.data_ptr(), y.data_ptr());
}
"""

KFFI_GPU = """
#include <kffi/kffi.h>
#include <cuda_runtime.h>
__global__ void empty_kernel(void*, void*) {}
void empty(kffi::ConstTensorView x, kffi::TensorView y) {
  auto stream = static_cast<cudaStream_t>(KFFIEnvGetStream(kDLCUDA, x.device().device_id));
  empty_kernel<<<1, 1, 0, stream>>>(x.data_ptr(), y.data_ptr());
}
"""

TVM_CPU = """
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/function.h>
__attribute__((noinline)) void empty_kernel(void* x, void* y) { asm volatile("" ::"r"(x), "r"(y)); }
void empty(tvm::ffi::TensorView x, tvm::ffi::TensorView y) { empty_kernel(x.data_ptr(), y.data_ptr()); }
"""

TVM_GPU = """
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/extra/c_env_api.h>
#include <tvm/ffi/function.h>
#include <cuda_runtime.h>
__global__ void empty_kernel(void*, void*) {}
void empty(tvm::ffi::TensorView x, tvm::ffi::TensorView y) {
  auto stream = static_cast<cudaStream_t>(TVMFFIEnvGetStream(kDLCUDA, x.device().device_id));
  empty_kernel<<<1, 1, 0, stream>>>(x.data_ptr(), y.data_ptr());
}
"""

HAND_COMMON = """
#include "xla/ffi/api/ffi.h"
namespace ffi = xla::ffi;
#define BENCH_EXPORT extern "C" __attribute__((visibility("default")))
"""

HAND_CPU = (
    HAND_COMMON
    + """
__attribute__((noinline)) void empty_kernel(void* x, void* y) { asm volatile("" ::"r"(x), "r"(y)); }
static ffi::Error EmptyImpl(ffi::AnyBuffer x, ffi::Result<ffi::AnyBuffer> y) {
  empty_kernel(x.untyped_data(), y->untyped_data());
  return ffi::Error::Success();
}
XLA_FFI_DEFINE_HANDLER_SYMBOL(BenchEmpty, EmptyImpl,
                              ffi::Ffi::Bind().Arg<ffi::AnyBuffer>().Ret<ffi::AnyBuffer>());
XLA_FFI_DEFINE_HANDLER_SYMBOL(BenchEmptyGraph, EmptyImpl,
                              ffi::Ffi::Bind().Arg<ffi::AnyBuffer>().Ret<ffi::AnyBuffer>(),
                              {ffi::Traits::kCmdBufferCompatible});
BENCH_EXPORT void* bench_handler(int graph) {
  return graph ? reinterpret_cast<void*>(&BenchEmptyGraph) : reinterpret_cast<void*>(&BenchEmpty);
}
"""
)

HAND_GPU = (
    HAND_COMMON
    + """
#include <cuda_runtime.h>
__global__ void empty_kernel(void*, void*) {}
static ffi::Error EmptyImpl(cudaStream_t stream, ffi::AnyBuffer x, ffi::Result<ffi::AnyBuffer> y) {
  empty_kernel<<<1, 1, 0, stream>>>(x.untyped_data(), y->untyped_data());
  return ffi::Error::Success();
}
#define BENCH_BIND \\
  ffi::Ffi::Bind().Ctx<ffi::PlatformStream<cudaStream_t>>().Arg<ffi::AnyBuffer>().Ret<ffi::AnyBuffer>()
XLA_FFI_DEFINE_HANDLER_SYMBOL(BenchEmpty, EmptyImpl, BENCH_BIND);
XLA_FFI_DEFINE_HANDLER_SYMBOL(BenchEmptyGraph, EmptyImpl, BENCH_BIND,
                              {ffi::Traits::kCmdBufferCompatible});
BENCH_EXPORT void* bench_handler(int graph) {
  return graph ? reinterpret_cast<void*>(&BenchEmptyGraph) : reinterpret_cast<void*>(&BenchEmpty);
}
"""
)

CHAIN = 100


def log(*a):
    print(*a, file=sys.stderr, flush=True)


# ---- building the bindings --------------------------------------------------------------------


def build_kffi(gpu: bool):
    import kffi
    import kffi.cpp

    if gpu:
        mod = kffi.cpp.load_inline(
            "bench_jax_empty_gpu", cuda_sources=KFFI_GPU, functions=["empty"], quiet=True
        )
    else:
        mod = kffi.cpp.load_inline(
            "bench_jax_empty_cpu", cpp_sources=KFFI_CPU, functions=["empty"], quiet=True
        )
    return mod.empty


def build_hand(gpu: bool):
    import ctypes

    import jax.ffi
    import kffi.cpp

    src_dir = ROOT / "build" / "bench_cache" / "jax_ffi"
    src_dir.mkdir(parents=True, exist_ok=True)
    src = src_dir / ("hand_gpu.cu" if gpu else "hand_cpu.cc")
    text = HAND_GPU if gpu else HAND_CPU
    if not src.exists() or src.read_text() != text:
        src.write_text(text)
    path = kffi.cpp.build(
        "bench_jax_hand_" + ("gpu" if gpu else "cpu"),
        [str(src)],
        # The hand-written handler uses XLA's C++ FFI (xla/ffi/api/ffi.h), from jaxlib.
        extra_include_paths=[jax.ffi.include_dir()],
        quiet=True,
    )
    lib = ctypes.CDLL(path)
    lib.bench_handler.restype = ctypes.c_void_p
    lib.bench_handler.argtypes = [ctypes.c_int]
    return lib


def build_tvm(gpu: bool):
    import tvm_ffi.cpp

    if gpu:
        mod = tvm_ffi.cpp.load_inline(
            "bench_jax_tvm_empty_gpu", cuda_sources=TVM_GPU, functions=["empty"]
        )
    else:
        mod = tvm_ffi.cpp.load_inline(
            "bench_jax_tvm_empty_cpu", cpp_sources=TVM_CPU, functions=["empty"]
        )
    return mod.empty


# ---- measuring ----------------------------------------------------------------------------------


def make_cells(args, gpu: bool):
    import jax
    import jax.numpy as jnp

    platform_name = "gpu" if gpu else "cpu"
    x = jnp.zeros((16,), jnp.float32)
    out = jax.ShapeDtypeStruct(x.shape, x.dtype)
    targets = {}  # binding -> {graph: target name}
    skipped = {}

    def register(binding, fn):
        try:
            targets[binding] = fn()
        except Exception as e:
            skipped[binding] = f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"
            log(f"skipping {binding}: {skipped[binding]}")

    if "kffi" not in args.skip:

        def reg_kffi():
            import kffi.jax

            fn = build_kffi(gpu)
            names = {}
            for graph in (False, True):
                name = f"bench_kffi_empty_{int(graph)}"
                kffi.jax.register_ffi_target(
                    name, fn, platform=platform_name, allow_cuda_graph=graph
                )
                names[graph] = name
            return names

        register("kffi", reg_kffi)
    if "hand-written" not in args.skip:

        def reg_hand():
            lib = build_hand(gpu)
            names = {}
            for graph in (False, True):
                name = f"bench_hand_empty_{int(graph)}"
                jax.ffi.register_ffi_target(
                    name, jax.ffi.pycapsule(lib.bench_handler(graph)), platform=platform_name
                )
                names[graph] = name
            return names

        register("hand-written", reg_hand)
    if "jax-tvm-ffi" not in args.skip:

        def reg_tvm():
            import jax_tvm_ffi

            fn = build_tvm(gpu)
            names = {}
            for graph in (False, True):
                name = f"bench_tvm_empty_{int(graph)}"
                jax_tvm_ffi.register_ffi_target(
                    name, fn, platform=platform_name, allow_cuda_graph=graph
                )
                names[graph] = name
            return names

        register("jax-tvm-ffi", reg_tvm)

    cells = {}
    for binding, names in targets.items():
        for graph in (False, True):
            call = jax.ffi.ffi_call(names[graph], out)
            if not graph:
                cells[("single", binding)] = jax.jit(call)

            def chain(a, call=call):
                for _ in range(CHAIN):
                    a = call(a)
                return a

            cells[("chain-graph" if graph else "chain", binding)] = jax.jit(chain)
    cells[("single", "jit x+1")] = jax.jit(lambda a: a + 1)

    def chain_add(a):
        for _ in range(CHAIN):
            a = a + 1
        return a

    cells[("chain", "jit x+1")] = jax.jit(chain_add)
    return cells, x, skipped


def time_cell(f, x, calls: int) -> float:
    """Seconds per invocation of f(x) (each one waited for)."""
    start = time.perf_counter()
    for _ in range(calls):
        f(x).block_until_ready()
    return (time.perf_counter() - start) / calls


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=str(ROOT / "build" / "bench_jax_ffi.json"))
    p.add_argument("--reps", type=int, default=21)
    p.add_argument("--calls", type=int, default=100, help="invocations per sample")
    p.add_argument("--skip", nargs="*", default=[])
    args = p.parse_args(argv)

    import jax

    gpu = jax.default_backend() == "gpu"
    device = str(jax.devices()[0])
    log(f"jax {jax.__version__} on {device}")
    cells, x, skipped = make_cells(args, gpu)
    for f in cells.values():  # warm up: compile, register, first run
        for _ in range(3):
            f(x).block_until_ready()
    samples = {key: [] for key in cells}
    keys = list(cells)
    for rep in range(args.reps):
        random.shuffle(keys)
        for key in keys:
            calls = args.calls if key[0] == "single" else max(args.calls // 10, 5)
            t = time_cell(cells[key], x, calls)
            samples[key].append(t / (CHAIN if key[0].startswith("chain") else 1))
        log(f"rep {rep + 1}/{args.reps}")
    med = {key: statistics.median(v) * 1e6 for key, v in samples.items()}  # microseconds

    cases = [
        ("single", "one jitted call"),
        ("chain", f"per call, chain of {CHAIN}"),
        ("chain-graph", f"per call, chain of {CHAIN}, allow_cuda_graph"),
    ]
    bindings = ["kffi", "hand-written", "jax-tvm-ffi", "jit x+1"]
    print(
        f"\nkffi.jax: an empty {'kernel launch' if gpu else 'function'} through XLA "
        f"({device}, jax {jax.__version__}); microseconds, median of {args.reps}"
    )
    header = (
        f"{'case':<44}"
        + "".join(f"{b:>14}" for b in bindings)
        + f"{'kffi/hand':>11}{'kffi/tvm':>10}"
    )
    print(header)
    print("-" * len(header))
    rows = []

    def paired(case, other):
        """Median over repetitions of kffi's sample / other's sample of the same repetition
        (drift between repetitions cancels, which a ratio of medians does not)."""
        a, b = samples.get((case, "kffi")), samples.get((case, other))
        return statistics.median(x / y for x, y in zip(a, b)) if a and b else None

    for case, title in cases:
        vals = {b: med.get((case, b)) for b in bindings}
        r_hand = paired(case, "hand-written")
        r_tvm = paired(case, "jax-tvm-ffi")
        line = f"{title:<44}" + "".join(
            f"{vals[b]:>14.2f}" if vals[b] is not None else f"{'-':>14}" for b in bindings
        )
        line += f"{r_hand:>10.3f}x" if r_hand else f"{'-':>11}"
        line += f"{r_tvm:>9.3f}x" if r_tvm else f"{'-':>10}"
        print(line)
        rows.append(
            {
                "case": case,
                "title": title,
                "us": vals,
                "kffi_over_hand": r_hand,
                "kffi_over_jax_tvm_ffi": r_tvm,
            }
        )
    if skipped:
        print("skipped: " + "; ".join(f"{k} ({v})" for k, v in skipped.items()))
    goals = {
        "single_le_1.02x_hand": rows[0]["kffi_over_hand"],
        "chain_graph_le_1.0x_jax_tvm_ffi": rows[2]["kffi_over_jax_tvm_ffi"],
    }
    print(
        "goals: single <= 1.02x hand-written: "
        f"{goals['single_le_1.02x_hand'] and round(goals['single_le_1.02x_hand'], 3)}; "
        f"chain with trait <= 1.0x jax-tvm-ffi: "
        f"{goals['chain_graph_le_1.0x_jax_tvm_ffi'] and round(goals['chain_graph_le_1.0x_jax_tvm_ffi'], 3)}"
        + ("" if gpu else "  (CPU run: the GPU goals are the lead's; CPU goal: kffi/tvm <= 1.0)")
    )
    result = {
        "bench": "jax_ffi",
        "device": device,
        "gpu": gpu,
        "jax": jax.__version__,
        "python": platform.python_version(),
        "host": platform.node(),
        "reps": args.reps,
        "calls": args.calls,
        "chain": CHAIN,
        "rows": rows,
        "skipped": skipped,
        "samples_us": {f"{c}/{b}": [t * 1e6 for t in v] for (c, b), v in samples.items()},
    }
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
