"""tests/python/kffi_torch/torch_ddp_worker.py: a kffi.torch op inside DistributedDataParallel, 2
ranks.

    export PYTHONPATH=tests/python/support  # ranks.py (test_torch_ddp.py's run_ranks sets it)
    python tests/python/kffi_torch/torch_ddp_worker.py --device cuda --out DIR  # NCCL, 2 GPUs
    python tests/python/kffi_torch/torch_ddp_worker.py --device cpu --out DIR   # gloo, 2 CPUs
    (--backend: torch.compile's backend, default inductor)

The parent builds the kernels once (kffi's disk cache), then torch.multiprocessing.spawn starts
two ranks. Each rank registers the op (`square`: y = x * x, with a kffi backward dx = 2 x g),
wraps a small model that calls it in DistributedDataParallel, compiles it with torch.compile, and
compares the loss, the output, the all-reduced gradients and the parameters after an optimizer
step with the same model calling torch ops. On CUDA it also checks that its kernel runs on its
own device and on the stream that is current (a side stream). Each rank writes
rank<r>.json to --out; test_torch_ddp.py reads them. Every collective has a timeout.

join_group, leave_group and spawn_ranks are the FSDP and DTensor workers' too.
"""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import argparse
import copy
import datetime
import os

from ranks import report_rank

CPU_SRC = r"""
void square(kffi::ConstTensorView x, kffi::TensorView y) {
  for (int64_t i = 0; i < x.numel(); ++i) y.data<float>()[i] = x.data<float>()[i] * x.data<float>()[i];
}
void square_bwd(kffi::ConstTensorView x, kffi::ConstTensorView g, kffi::TensorView dx) {
  for (int64_t i = 0; i < x.numel(); ++i)
    dx.data<float>()[i] = 2 * x.data<float>()[i] * g.data<float>()[i];
}
"""

CUDA_SRC = r"""
#include <cuda_runtime.h>
__global__ void square_kernel(const float* x, float* y, int64_t n) {
  int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[i] * x[i];
}
__global__ void square_bwd_kernel(const float* x, const float* g, float* dx, int64_t n) {
  int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (i < n) dx[i] = 2 * x[i] * g[i];
}
void square(kffi::ConstTensorView x, kffi::TensorView y, void* stream) {
  int64_t n = x.numel();
  if (n > 0)
    square_kernel<<<(n + 255) / 256, 256, 0, (cudaStream_t)stream>>>(
        x.data<float>(), y.data<float>(), n);
}
void square_bwd(kffi::ConstTensorView x, kffi::ConstTensorView g, kffi::TensorView dx,
                void* stream) {
  int64_t n = x.numel();
  if (n > 0)
    square_bwd_kernel<<<(n + 255) / 256, 256, 0, (cudaStream_t)stream>>>(
        x.data<float>(), g.data<float>(), dx.data<float>(), n);
}
// What a kernel of this library sees during a call: the current device and its stream.
int64_t probe_device(kffi::ConstTensorView x) {
  int device = -1;
  cudaGetDevice(&device);
  return device;
}
int64_t probe_stream(kffi::ConstTensorView x, void* stream) {
  return static_cast<int64_t>(reinterpret_cast<intptr_t>(stream));
}
"""

TIMEOUT = datetime.timedelta(seconds=120)


def build(device):
    """The kffi functions (kffi.compile caches them on disk: the ranks load what the parent
    built)."""
    import kffi

    cuda = device == "cuda"
    src = CUDA_SRC if cuda else CPU_SRC
    n = kffi.sym_int("n", parallel=True)
    stream = [kffi.fake_stream()] if cuda else []
    opts = {"quiet": True}
    t = kffi.fake_tensor
    fns = {
        "square": kffi.compile(
            src,
            "square",
            t("float32", (n, 32)),
            t("float32", (n, 32), mut=True),
            *stream,
            options=opts,
        ),
        "square_bwd": kffi.compile(
            src,
            "square_bwd",
            t("float32", (n, 32)),
            t("float32", (n, 32)),
            t("float32", (n, 32), mut=True),
            *stream,
            options=opts,
        ),
    }
    if cuda:
        fns["probe_device"] = kffi.compile(src, "probe_device", t("float32", (n, 32)), options=opts)
        fns["probe_stream"] = kffi.compile(
            src, "probe_stream", t("float32", (n, 32)), kffi.fake_stream(), options=opts
        )
    return fns


def square_op(device, name):
    """The kffi op `square` registered as name, with its kffi backward; and build's functions."""
    import kffi.torch

    fns = build(device)
    square = kffi.torch.register_op(fns["square"], name, allocate=True)
    kffi.torch.register_autograd(square, backward=fns["square_bwd"])
    return square, fns


def models(dev, square):
    """The model twice, with the same initial weights on every rank: a reference of torch ops
    (x * x) and one whose forward calls square."""
    import torch

    class Model(torch.nn.Module):
        def __init__(self, square):
            super().__init__()
            self.lin1 = torch.nn.Linear(16, 32)
            self.lin2 = torch.nn.Linear(32, 4)
            self.square = square  # the kffi op, or None for torch's x * x

        def forward(self, x):
            h = self.lin1(x)
            h = self.square(h) if self.square is not None else h * h
            return self.lin2(h)

    torch.manual_seed(0)  # the same initial weights on both ranks
    base = Model(None)
    ref = copy.deepcopy(base).to(dev)
    mine = copy.deepcopy(base).to(dev)
    mine.square = square
    return ref, mine


def join_group(rank, rendezvous, cuda):
    """Joins the two ranks' process group (NCCL, the rank's own GPU; else gloo, the CPU) through
    the rendezvous file and returns the rank's device."""
    import torch
    import torch.distributed as dist

    if cuda:
        torch.cuda.set_device(rank)
    dist.init_process_group(
        "nccl" if cuda else "gloo",
        init_method="file://" + rendezvous,
        rank=rank,
        world_size=2,
        timeout=TIMEOUT,
    )
    return torch.device(f"cuda:{rank}" if cuda else "cpu")


def leave_group():
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()


def spawn_ranks(rank_main, out, *args):
    """Starts the two ranks, rank_main(rank, *args, rendezvous, out) each, and waits for them.

    The ranks meet through a file in out, not a TCP port: a port found free here could be taken
    (by another test's gloo listener, with tests running in parallel) before rank 0 bound it, and
    a rank that connected there aborted ("terminate called without an active exception")."""
    import torch.multiprocessing as mp

    os.makedirs(out, exist_ok=True)
    rendezvous = os.path.join(os.path.abspath(out), "rendezvous")
    if os.path.exists(rendezvous):  # a file store must start empty
        os.remove(rendezvous)
    mp.spawn(rank_main, args=(*args, rendezvous, out), nprocs=2, join=True)


def rank_main(rank, device, backend, rendezvous, out_dir):
    report_rank(
        os.path.join(out_dir, f"rank{rank}.json"),
        lambda report: ddp_rank(report, rank, device, backend, rendezvous),
        cleanup=leave_group,
        rank=rank,
    )


def ddp_rank(report, rank, device, backend, rendezvous):
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    cuda = device == "cuda"
    dev = join_group(rank, rendezvous, cuda)
    square, fns = square_op(device, "kffi_ddp::square")
    ref, mine = models(dev, square)
    ddp_kw = {"device_ids": [rank]} if cuda else {}
    ref_ddp, mine_ddp = DDP(ref, **ddp_kw), DDP(mine, **ddp_kw)
    compiled = torch.compile(mine_ddp, backend=backend)
    opt_ref = torch.optim.SGD(ref_ddp.parameters(), lr=0.1)
    opt_mine = torch.optim.SGD(mine_ddp.parameters(), lr=0.1)

    torch.manual_seed(100 + rank)  # each rank its own batch
    errs = {"out": 0.0, "loss": 0.0, "grad": 0.0, "param": 0.0}
    side = torch.cuda.Stream(dev) if cuda else None
    for _step in range(3):
        x = torch.randn(8, 16, device=dev)
        target = torch.randn(8, 4, device=dev)
        for opt in (opt_ref, opt_mine):
            opt.zero_grad(set_to_none=True)
        out_ref = ref_ddp(x)
        loss_ref = torch.nn.functional.mse_loss(out_ref, target)
        loss_ref.backward()
        if cuda:  # the compiled model on a side stream: its kernels follow it
            side.wait_stream(torch.cuda.current_stream(dev))
            with torch.cuda.stream(side):
                out = compiled(x)
                loss = torch.nn.functional.mse_loss(out, target)
                loss.backward()
            torch.cuda.current_stream(dev).wait_stream(side)
        else:
            out = compiled(x)
            loss = torch.nn.functional.mse_loss(out, target)
            loss.backward()
        errs["out"] = max(errs["out"], (out - out_ref).abs().max().item())
        errs["loss"] = max(errs["loss"], abs(loss.item() - loss_ref.item()))
        for (name, p), q in zip(mine.named_parameters(), ref.parameters()):
            assert p.grad is not None, f"no gradient for {name}"
            errs["grad"] = max(errs["grad"], (p.grad - q.grad).abs().max().item())
        opt_ref.step()
        opt_mine.step()
        for p, q in zip(mine.parameters(), ref.parameters()):
            errs["param"] = max(errs["param"], (p - q).abs().max().item())
    report["errors"] = errs
    # DDP averaged the gradients: both ranks hold the same parameters after the steps.
    flat = torch.cat([p.detach().reshape(-1) for p in mine.parameters()])
    gathered = [torch.empty_like(flat) for _ in range(2)]
    dist.all_gather(gathered, flat)
    report["ranks_agree"] = (gathered[0] - gathered[1]).abs().max().item()
    if cuda:
        h = torch.randn(4, 32, device=dev)
        with torch.cuda.stream(side):
            report["kernel_device"] = int(fns["probe_device"](h))
            report["kernel_stream"] = int(fns["probe_stream"](h))
            report["side_stream"] = int(side.cuda_stream)
            y = square(h)
        torch.cuda.synchronize(dev)
        report["side_stream_result"] = (y - h * h).abs().max().item()
        report["output_device"] = str(y.device)
    dist.barrier()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    ap.add_argument("--out", required=True)
    ap.add_argument("--backend", default="inductor")
    args = ap.parse_args(argv)
    build(args.device)  # once, before the ranks start: they load from the cache
    spawn_ranks(rank_main, args.out, args.device, args.backend)


if __name__ == "__main__":
    main()
