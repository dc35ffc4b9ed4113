"""tests/python/toolchain/default_path_check.py: what a user gets by default, checked in a process
that has no C++ compiler and an empty kffi build cache (test_default_path.py runs it so; the wheel's
smoke test, scripts/build_wheel.sh, runs it in a fresh venv).

    python default_path_check.py <kernel library> [torch|jax|all]

The library (default_path_kernels.cc) is built beforehand. The script calls it with torch
tensors, as kffi.torch ops (eager, and under torch.compile with the aot_eager backend: inductor's
CPU code generation needs a compiler of its own) and through kffi.jax.call under jax.jit, then
shows with kffi's own counters that nothing was compiled and nothing was written into the build
cache, and that the fast torch tensor reader was on (a lazy negative view is still refused).
Prints one JSON line of what it checked; exits non-zero on any failure.
"""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import json
import logging
import os
import sys
import time


def check_plain_torch_call(mod) -> None:
    """A plain call with torch tensors computes, and refuses a lazy negative view by name."""
    import torch

    x = torch.arange(4, dtype=torch.float32)
    y = torch.empty(4)
    mod.scale(y, x, 2.0)
    assert y.tolist() == [0.0, 2.0, 4.0, 6.0], y
    z = torch.tensor([1 + 2j, 3 - 4j])
    try:
        mod.scale(torch.empty(2), z.conj().imag, 1.0)
    except ValueError as e:
        assert "lazy negative view" in str(e), e
    else:
        raise AssertionError("a lazy negative view was accepted")


def main() -> None:
    library, which = sys.argv[1], (sys.argv[2] if len(sys.argv) > 2 else "all")
    # kffi.torch's fallback (a build) would say so through logging: collect what it says.
    said: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            said.append(record.getMessage())

    logging.getLogger("kffi").addHandler(Keep())
    report: dict[str, object] = {}
    start = time.perf_counter()
    import kffi

    mod = kffi.load_module(library)
    if which in ("torch", "all"):
        import kffi.torch
        import torch

        t0 = time.perf_counter()
        check_plain_torch_call(mod)
        report["first_torch_call_s"] = time.perf_counter() - t0
        # The reader kffi was built with is on: no compile (lazy views are still refused).
        assert kffi.torch.fast_tensor_import(build=False), "the prebuilt tensor reader is off"
        x = torch.arange(4, dtype=torch.float32)

        t0 = time.perf_counter()
        ops = mod.torch_ops("kffi_default_path")
        y2 = torch.empty(4)
        ops.scale(y2, x, 3.0)  # eager
        report["first_op_call_s"] = time.perf_counter() - t0
        assert y2.tolist() == [0.0, 3.0, 6.0, 9.0], y2
        assert ops.plus_one(x).tolist() == [1.0, 2.0, 3.0, 4.0]
        y3 = torch.empty(4)
        torch.ops.kffi_default_path.scale(y3, x, 0.5)  # through the dispatcher glue
        assert y3.tolist() == [0.0, 0.5, 1.0, 1.5], y3
        compiled = torch.compile(lambda a: ops.plus_one(a) * 2, backend="aot_eager", fullgraph=True)
        assert compiled(x).tolist() == [2.0, 4.0, 6.0, 8.0]
        report["torch"] = torch.__version__
    if which in ("jax", "all"):
        import jax
        import jax.numpy as jnp
        import kffi.jax

        jax.config.update("jax_default_device", jax.devices("cpu")[0])
        a = jnp.arange(4, dtype=jnp.float32)
        t0 = time.perf_counter()
        out = jax.jit(lambda v: kffi.jax.call(mod.plus_one, v) * 2)(a)
        report["first_jax_call_s"] = time.perf_counter() - t0
        assert out.tolist() == [2.0, 4.0, 6.0, 8.0], out
        scaled = jax.jit(lambda v: kffi.jax.call(mod.scale, v, factor=2.0))(a)
        assert scaled.tolist() == [0.0, 2.0, 4.0, 6.0], scaled
        report["jax"] = jax.__version__
    report["total_s"] = time.perf_counter() - start
    # kffi's own counters: no compiler process, no NVRTC program; nothing in the build cache.
    report["compiler_invocations"] = kffi.cpp.get_compiler_invocations()
    assert kffi.cpp.get_compiler_invocations() == 0, report
    if "kffi.cuda" in sys.modules:
        assert kffi.cuda.compile_count() == 0
    cache = kffi.cpp.cache_dir()
    built = [f for _, _, files in os.walk(cache) for f in files if f.endswith(".so")]
    assert not built, f"kffi built {built} in {cache}"
    assert not [m for m in said if "building" in m], said
    print(json.dumps(report))


if __name__ == "__main__":
    main()
