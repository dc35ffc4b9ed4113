"""tests/python/kffi_torch/torch_dtensor_worker.py: kffi.torch ops called on DTensors, 2 ranks, gloo
on the CPU.

    export PYTHONPATH=tests/python/support  # ranks.py (test_torch_dtensor.py's run_ranks sets it)
    python tests/python/kffi_torch/torch_dtensor_worker.py --out DIR

The parent builds the kernels once (kffi's disk cache), then torch.multiprocessing.spawn starts
two ranks. Each rank registers the ops before importing torch.distributed.tensor (the sharding
rules wait for DTensor's import) except one registered after it, makes a 1-D DeviceMesh of both
ranks, and calls the ops on DTensors of an 8 x 6 input:

- ``rownorm`` (each row divided by its sum; its rows ``n`` are a parallel symbol) and
  ``rows_seen`` (fills its output with the number of rows its kernel saw): on Shard(0) they run
  on each rank's 4 rows with no collective and return Shard(0); on Shard(1) DTensor gathers the
  input first (the columns are not parallel) and the result is still right;
- ``rownorm_plain``, the same kernel with no parallel symbol: right on Replicate, and on Shard(0)
  (gathered);
- ``rownorm_mut``, writing ``y`` in place: its written argument keeps its placement (Shard(0),
  and Replicate beside a Shard(0) input), and a placement it cannot write (Shard(1)) is an error
  that names the op and says to call ``.to_local()``;
- ``square`` with a kffi backward: the gradient of a Shard(0) input is Shard(0) and right.

Each rank writes rank<r>.json (what it saw) to --out; test_torch_dtensor.py checks them.
"""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import argparse
import os
import sys

from ranks import report_rank
from torch_ddp_worker import build as build_square
from torch_ddp_worker import join_group, leave_group, spawn_ranks

SRC = r"""
void rownorm(kffi::ConstTensorView x, kffi::TensorView y) {
  const int64_t n = x.size(0), m = x.size(1);
  const float* a = x.data<float>();
  float* b = y.data<float>();
  for (int64_t i = 0; i < n; ++i) {
    float s = 0;
    for (int64_t j = 0; j < m; ++j) s += a[i * m + j];
    for (int64_t j = 0; j < m; ++j) b[i * m + j] = a[i * m + j] / s;
  }
}
void rows_seen(kffi::ConstTensorView x, kffi::TensorView y) {
  for (int64_t i = 0; i < y.numel(); ++i) y.data<float>()[i] = static_cast<float>(x.size(0));
}
"""
ROWS, COLS = 8, 6


def build():
    import kffi

    n, m = kffi.sym_int("n", parallel=True), kffi.sym_int("m")
    a, b = kffi.sym_int("a"), kffi.sym_int("b")
    t = kffi.fake_tensor
    opts = {"quiet": True}
    fns = {
        name: kffi.compile(SRC, name, t("float32", (n, m)), t("float32", (n, m), mut=True),
                           options=opts)
        for name in ("rownorm", "rows_seen")
    }  # fmt: skip
    fns["rownorm_plain"] = kffi.compile(
        SRC, "rownorm", t("float32", (a, b)), t("float32", (a, b), mut=True), options=opts
    )
    fns.update(build_square("cpu"))
    return fns


def _comms(fn):
    """(result, number of collectives DTensor issued while computing it)."""
    from torch.distributed.tensor.debug import CommDebugMode

    with CommDebugMode() as mode:
        out = fn()
    return out, mode.get_total_counts()


def rank_main(rank, rendezvous, out_dir):
    report_rank(
        os.path.join(out_dir, f"rank{rank}.json"),
        lambda report: dtensor_rank(report, rank, rendezvous),
        cleanup=leave_group,
        rank=rank,
    )


def dtensor_rank(report, rank, rendezvous):
    import torch
    import torch.distributed as dist

    join_group(rank, rendezvous, cuda=False)
    import kffi.torch

    fns = build()
    op = kffi.torch.register_op
    report["dtensor_before"] = "torch.distributed.tensor" in sys.modules
    rownorm = op(fns["rownorm"], "kffi_dt::rownorm", allocate=True)
    rows_seen = op(fns["rows_seen"], "kffi_dt::rows_seen", allocate=True)
    rownorm_mut = op(fns["rownorm"], "kffi_dt::rownorm_mut")
    square = op(fns["square"], "kffi_dt::square", allocate=True)
    kffi.torch.register_autograd(square, backward=fns["square_bwd"])

    report["dtensor_after_register"] = "torch.distributed.tensor" in sys.modules
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Replicate, Shard, distribute_tensor

    # Registered with DTensor imported: its rule is declared at once.
    plain = op(fns["rownorm_plain"], "kffi_dt::rownorm_plain", allocate=True)

    mesh = init_device_mesh("cpu", (2,))
    torch.manual_seed(0)  # the same input on both ranks
    x = torch.rand(ROWS, COLS) + 0.5
    expected = x / x.sum(1, keepdim=True)

    def dt(t, placement):
        return distribute_tensor(t, mesh, [placement])

    def summary(y, comms):
        return {
            "dtensor": isinstance(y, DTensor),
            "placements": [str(p) for p in y.placements] if isinstance(y, DTensor) else None,
            "local_shape": list(y.to_local().shape) if isinstance(y, DTensor) else None,
            "comms": comms,
        }

    res = {}
    for label, pl in (("shard0", Shard(0)), ("shard1", Shard(1)), ("replicate", Replicate())):
        xd = dt(x, pl)
        y, comms = _comms(lambda xd=xd: rownorm(xd))
        res[f"rownorm_{label}"] = {
            **summary(y, comms),
            "err": (y.full_tensor() - expected).abs().max().item(),
        }
        seen, comms = _comms(lambda xd=xd: rows_seen(xd))
        local = seen.to_local()
        res[f"rows_seen_{label}"] = {
            **summary(seen, comms),
            "seen": sorted(set(local.reshape(-1).tolist())),
        }
    for label, pl in (("replicate", Replicate()), ("shard0", Shard(0))):
        y = plain(dt(x, pl))
        res[f"plain_{label}"] = {
            **summary(y, None),
            "err": (y.full_tensor() - expected).abs().max().item(),
        }

    # In place: the written argument stays where it is.
    for label, ypl in (("shard0", Shard(0)), ("replicate", Replicate())):
        yd = dt(torch.zeros(ROWS, COLS), ypl)
        local_before = yd.to_local()
        r = rownorm_mut(dt(x, Shard(0)), yd)
        res[f"mut_{label}"] = {
            "returned": repr(r),
            "placements": [str(p) for p in yd.placements],
            "same_local": yd.to_local().data_ptr() == local_before.data_ptr(),
            "err": (yd.full_tensor() - expected).abs().max().item(),
        }
    try:
        rownorm_mut(dt(x, Shard(1)), dt(torch.zeros(ROWS, COLS), Shard(1)))
        res["mut_shard1_error"] = None
    except Exception as e:
        res["mut_shard1_error"] = f"{type(e).__name__}: {e}"

    # Autograd: the kffi backward runs on the shards too.
    x32 = torch.rand(ROWS, 32)  # square's contract: (n, 32)
    xg = dt(x32, Shard(0)).requires_grad_()
    square(xg).sum().backward()
    res["grad"] = {
        "placements": [str(p) for p in xg.grad.placements],
        "local_shape": list(xg.grad.to_local().shape),
        "err": (xg.grad.full_tensor() - 2 * x32).abs().max().item(),
    }
    report["results"] = res
    dist.barrier()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    build()  # once, before the ranks start: they load from the cache
    spawn_ranks(rank_main, args.out)


if __name__ == "__main__":
    main()
