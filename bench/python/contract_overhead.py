"""bench/python/contract_overhead.py: a contract-checked call against the same call unchecked.

The same no-op kernel with three tensors is built twice in one run: once exported with a
contract (kffi.compile with fake tensors) and once without (kffi.cpp.load_inline). Both are
called from Python with NumPy arrays and torch tensors, interleaved, many repetitions, medians.
Goal: the checked call costs at most 1.15x the unchecked one. Prints a table, writes JSON.

Usage: python3 bench/python/contract_overhead.py [--out build/bench_contract_python.json]
"""
# SPDX-License-Identifier: Apache-2.0

import argparse
import json
import os
import statistics
import sys
import timeit

import kffi
import numpy as np

SOURCE = r"""
#include <kffi/tensor.h>
// a and b stand for inputs, c for the output (its writable check is part of the overhead).
void nop3(kffi::ConstTensorView a, kffi::ConstTensorView b, kffi::TensorView c) {
  (void)a; (void)b; (void)c;
}
"""


def build():
    n = kffi.sym_int(divisibility=4)
    checked = kffi.compile(
        SOURCE,
        "nop3",
        kffi.fake_tensor("float32", (n,), align=16),
        kffi.fake_tensor("float32", (n,), align=16),
        kffi.fake_tensor("float32", (n,), align=16, mut=True),
        param_names=["a", "b", "c"],
    )
    unchecked = kffi.cpp.load_inline("nop3_plain", cpp_sources=SOURCE, functions=["nop3"]).nop3
    return checked, unchecked


def per_call_ns(fn, args, number):
    return timeit.timeit(lambda: fn(*args), number=number) / number * 1e9


def measure(checked, unchecked, args, repeats=15, number=20000):
    for _ in range(3):
        per_call_ns(checked, args, 2000)
        per_call_ns(unchecked, args, 2000)
    c_runs, u_runs = [], []
    for _ in range(repeats):  # interleaved, so drift hits both alike
        u_runs.append(per_call_ns(unchecked, args, number))
        c_runs.append(per_call_ns(checked, args, number))
    return statistics.median(c_runs), statistics.median(u_runs)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join("build", "bench_contract_python.json"))
    args = ap.parse_args()
    checked, unchecked = build()
    print(f"contract: {checked.contract}\n")
    cases = {"3 NumPy arrays": [np.zeros(64, np.float32) for _ in range(3)]}
    try:
        import torch

        cases["3 torch tensors"] = [torch.zeros(64) for _ in range(3)]
    except ImportError:
        pass
    rows = []
    print(f"{'case':<18}{'unchecked ns':>14}{'checked ns':>12}{'ratio':>8}  goal <= 1.15")
    for label, tensors in cases.items():
        c, u = measure(checked, unchecked, tensors)
        ratio = c / u
        rows.append(
            {
                "case": label,
                "unchecked_ns": u,
                "checked_ns": c,
                "ratio": ratio,
                "goal_met": ratio <= 1.15,
            }
        )
        print(
            f"{label:<18}{u:>14.1f}{c:>12.1f}{ratio:>8.3f}  {'PASS' if ratio <= 1.15 else 'MISS'}"
        )
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump({"contract": checked.contract, "rows": rows}, f, indent=2)
    print(f"\nresults written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
