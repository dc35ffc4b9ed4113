"""tests/python/kffi_torch/torch_fsdp_worker.py: a kffi.torch op inside an FSDP2 (fully_shard)
model, 2 ranks.

    export PYTHONPATH=tests/python/support  # ranks.py (test_torch_fsdp.py's run_ranks sets it)
    python tests/python/kffi_torch/torch_fsdp_worker.py --device cpu --out DIR   # gloo, 2 CPUs
    python tests/python/kffi_torch/torch_fsdp_worker.py --device cuda --out DIR  # NCCL, 2 GPUs

The kernels and the model are torch_ddp_worker.py's (`square`: y = x * x, with a kffi backward
dx = 2 x g, between two Linear layers). The parent builds the kernels once (kffi's disk cache),
then torch.multiprocessing.spawn starts two ranks. Each rank shards the model with
torch.distributed.fsdp.fully_shard (each layer, then the root) and takes a few Adam steps on its
own batch. Every rank also runs the same model of torch ops, unsharded, on the whole batch (both
ranks' rows: FSDP averages the gradients of equal batches, which is the gradient of the whole
batch's mean loss) and compares: its outputs and loss against the reference's rows, the
gradients and the parameters (gathered from their shards) after each step. Each rank writes
rank<r>.json to --out; test_torch_fsdp.py reads them. Every collective has a timeout.
"""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import argparse
import os

# ranks is support/'s (on PYTHONPATH); the DDP worker's kernels, model and helpers are this
# folder's (spawn gives the ranks the parent's sys.path).
from ranks import report_rank
from torch_ddp_worker import build, join_group, leave_group, models, spawn_ranks, square_op

STEPS = 4
BATCH = 8  # rows per rank


def _full(t):
    """A gradient or parameter as one plain tensor (FSDP2 holds DTensor shards)."""
    from torch.distributed.tensor import DTensor

    return t.full_tensor() if isinstance(t, DTensor) else t


def rank_main(rank, device, rendezvous, out_dir):
    report_rank(
        os.path.join(out_dir, f"rank{rank}.json"),
        lambda report: fsdp_rank(report, rank, device, rendezvous),
        cleanup=leave_group,
        rank=rank,
    )


def fsdp_rank(report, rank, device, rendezvous):
    import torch
    import torch.distributed as dist

    dev = join_group(rank, rendezvous, device == "cuda")
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor import DTensor

    square, _ = square_op(device, "kffi_fsdp::square")
    calls = {"n": 0}

    def counted_square(h):
        calls["n"] += 1
        return square(h)

    ref, mine = models(dev, counted_square)
    mesh = init_device_mesh(dev.type, (2,))
    fully_shard(mine.lin1, mesh=mesh)
    fully_shard(mine.lin2, mesh=mesh)
    fully_shard(mine, mesh=mesh)
    report["sharded"] = all(isinstance(p, DTensor) for p in mine.parameters())
    report["local_rows"] = mine.lin1.weight.to_local().shape[0]
    opt_ref = torch.optim.Adam(ref.parameters(), lr=0.01)
    opt_mine = torch.optim.Adam(mine.parameters(), lr=0.01)

    errs = {"out": 0.0, "loss": 0.0, "grad": 0.0, "param": 0.0}
    for step in range(STEPS):
        torch.manual_seed(1000 + step)  # every rank draws the whole batch, keeps its rows
        x = torch.randn(2 * BATCH, 16, device=dev)
        target = torch.randn(2 * BATCH, 4, device=dev)
        rows = slice(rank * BATCH, (rank + 1) * BATCH)
        for opt in (opt_ref, opt_mine):
            opt.zero_grad(set_to_none=True)
        out_ref = ref(x)
        torch.nn.functional.mse_loss(out_ref, target).backward()
        loss_ref = torch.nn.functional.mse_loss(out_ref[rows], target[rows])
        out = mine(x[rows])
        loss = torch.nn.functional.mse_loss(out, target[rows])
        loss.backward()
        errs["out"] = max(errs["out"], (out - out_ref[rows]).abs().max().item())
        errs["loss"] = max(errs["loss"], abs(loss.item() - loss_ref.item()))
        for (name, p), q in zip(mine.named_parameters(), ref.parameters()):
            assert p.grad is not None, f"no gradient for {name}"
            errs["grad"] = max(errs["grad"], (_full(p.grad) - q.grad).abs().max().item())
        opt_ref.step()
        opt_mine.step()
        for p, q in zip(mine.parameters(), ref.parameters()):
            errs["param"] = max(errs["param"], (_full(p.detach()) - q).abs().max().item())
    report["errors"] = errs
    report["kffi_calls"] = calls["n"]
    dist.barrier()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cpu")
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    build(args.device)  # once, before the ranks start: they load from the cache
    spawn_ranks(rank_main, args.out, args.device)


if __name__ == "__main__":
    main()
