"""examples/python_demo.py: call a kffi kernel library from Python with NumPy and PyTorch.

Usage: python3 examples/python_demo.py path/to/libscale_cpu.so
"""
# SPDX-License-Identifier: Apache-2.0

import statistics
import sys
import time

import kffi
import numpy as np

ADD_ONE = r"""
#include <kffi/tensor.h>
void add_one(kffi::ConstTensorView a, kffi::TensorView b) {
  const float* x = a.data<float>();
  float* y = b.data<float>();
  for (int64_t i = 0; i < a.size(0); ++i) y[i] = x[i] + 1.0f;
}
"""


def per_call_ns(fn, *args, calls=20000, repeats=7):
    """Median time of one call, in nanoseconds (after a warm-up)."""
    for _ in range(1000):
        fn(*args)
    runs = []
    for _ in range(repeats):
        t0 = time.perf_counter_ns()
        for _ in range(calls):
            fn(*args)
        runs.append((time.perf_counter_ns() - t0) / calls)
    return statistics.median(runs)


def main(path):
    mod = kffi.load_module(path)
    print(f"loaded {mod.name}: functions {mod.functions()}")
    scale = mod.scale
    print(f"signature: {scale.__doc__.splitlines()[0]}\n")

    x = np.arange(6, dtype=np.float32)
    y = np.empty_like(x)
    scale(y, x, 2.5)
    print(f"NumPy  float32  : scale({x.tolist()}, 2.5) -> {y.tolist()}")

    try:
        import torch
    except ImportError:
        torch = None
    if not hasattr(torch, "Tensor"):
        # Without torch installed, `import torch` finds this script's neighbour examples/torch
        # (the script's folder comes first on sys.path) as an empty namespace package.
        torch = None
    if torch is not None:
        for dt in (torch.float32, torch.float16, torch.bfloat16):
            tx = torch.arange(6, dtype=dt)
            ty = torch.empty_like(tx)
            scale(ty, tx, 0.5)
            print(f"torch  {str(dt)[6:]:<9}: scale({tx.tolist()}, 0.5) -> {ty.tolist()}")

    read_only = np.zeros_like(x)
    read_only.setflags(write=False)  # the kernel must refuse to write it
    print("\nA bad call gives a clear exception:")
    bad_calls = [
        ("wrong dtype", lambda: scale(np.zeros(3, np.int32), np.zeros(3, np.int32), 1.0)),
        ("wrong type", lambda: scale(y, x, "two")),
        ("wrong count", lambda: scale(y, x)),
        ("shape mismatch", lambda: scale(np.zeros(4, np.float32), x, 1.0)),
        ("read-only out", lambda: scale(read_only, x, 1.0)),
    ]
    for label, call in bad_calls:
        try:
            call()
        except Exception as e:
            print(f"  {label:<15} {type(e).__name__}: {e}")

    print("\nA kernel compiled from Python with a contract (checked in compiled code):")
    n = kffi.sym_int(divisibility=16)
    add_one = kffi.compile(
        ADD_ONE,
        "add_one",
        kffi.fake_tensor("float32", (n,), align=16),
        kffi.fake_tensor("float32", (n,), align=16, mut=True),  # written by the kernel
        param_names=["a", "b"],
    )
    a = np.arange(32, dtype=np.float32)
    b = np.zeros(32, dtype=np.float32)
    add_one(a, b)
    print(f"  contract: {add_one.contract}")
    print(f"  add_one(arange(32)) -> {b[:4].tolist()} ...")
    for label, call in [
        ("not divisible", lambda: add_one(a[:30], b[:30])),
        ("misaligned", lambda: add_one(a[1:17], b[1:17])),
        ("wrong dtype", lambda: add_one(a.astype(np.float64), b)),
    ]:
        try:
            call()
        except Exception as e:
            print(f"  {label:<15} {type(e).__name__}: {e}")

    print("\nCall overhead (median per call, this machine):")

    def py_noop(a, b, c):
        return None

    rows = [
        ("plain Python function, 3 args", per_call_ns(py_noop, y, x, 1.0)),
        ("kffi scale, 2 NumPy arrays of 6", per_call_ns(scale, y, x, 1.0)),
    ]
    if torch is not None:
        tx, ty = torch.ones(6), torch.empty(6)
        rows.append(("kffi scale, 2 torch tensors of 6", per_call_ns(scale, ty, tx, 1.0)))
    for label, ns in rows:
        print(f"  {label:<36} {ns:8.0f} ns")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "build/demo/libscale_cpu.so")
