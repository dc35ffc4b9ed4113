"""tests/python/kffi_torch/torch_fsdp_worker.py: a kffi.torch op inside an FSDP2 (fully_shard)
model, 2 ranks.

    python tests/python/kffi_torch/torch_fsdp_worker.py --device cpu --out DIR    # gloo, two CPU processes
    python tests/python/kffi_torch/torch_fsdp_worker.py --device cuda --out DIR   # NCCL, one GPU per rank

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
import copy
import json
import os
import sys
import traceback

# The DDP worker's kernels, model and helpers (spawn gives the ranks this folder on sys.path).
from torch_ddp_worker import TIMEOUT, _free_port, _model_class, build

STEPS = 4
BATCH = 8  # rows per rank


def _full(t):
    """A gradient or parameter as one plain tensor (FSDP2 holds DTensor shards)."""
    from torch.distributed.tensor import DTensor

    return t.full_tensor() if isinstance(t, DTensor) else t


def rank_main(rank, device, port, out_dir):
    import torch
    import torch.distributed as dist

    report = {"rank": rank, "ok": False}
    try:
        cuda = device == "cuda"
        if cuda:
            torch.cuda.set_device(rank)
        dev = torch.device(f"cuda:{rank}" if cuda else "cpu")
        dist.init_process_group(
            "nccl" if cuda else "gloo",
            init_method=f"tcp://127.0.0.1:{port}",
            rank=rank,
            world_size=2,
            timeout=TIMEOUT,
        )
        import kffi.torch
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard
        from torch.distributed.tensor import DTensor

        fns = build(device)
        square = kffi.torch.register_op(fns["square"], "kffi_fsdp::square", allocate=True)
        kffi.torch.register_autograd(square, backward=fns["square_bwd"])
        calls = {"n": 0}

        def counted_square(h):
            calls["n"] += 1
            return square(h)

        Model = _model_class()
        torch.manual_seed(0)  # the same initial weights on both ranks
        base = Model(None)
        ref = copy.deepcopy(base).to(dev)
        mine = copy.deepcopy(base).to(dev)
        mine.square = counted_square
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
        report["ok"] = True
    except BaseException:
        report["error"] = traceback.format_exc()
    finally:
        with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
            json.dump(report, f)
        try:
            import torch.distributed as dist

            if dist.is_initialized():
                dist.destroy_process_group()
        except Exception as e:  # the report above says what failed; this is only cleanup
            print(f"rank {rank}: destroy_process_group: {e}", file=sys.stderr)
    if not report["ok"]:
        sys.exit(1)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cpu")
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    import torch.multiprocessing as mp

    os.makedirs(args.out, exist_ok=True)
    build(args.device)  # once, before the ranks start: they load from the cache
    mp.spawn(rank_main, args=(args.device, _free_port(), args.out), nprocs=2, join=True)


if __name__ == "__main__":
    main()
