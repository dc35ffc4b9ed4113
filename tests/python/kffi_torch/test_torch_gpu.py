"""tests/python/kffi_torch/test_torch_gpu.py: kffi.torch ops with CUDA kernels on a real GPU
(skipped without one): the current stream in every path (eager, torch.ops, compiled), stream
ordering, tensors from torch's allocator, and torch.compile(mode="reduce-overhead") capturing kffi
kernels into CUDA graphs."""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU (torch.cuda.is_available() is False)", allow_module_level=True)

import kffi
import kffi.torch
import torch_support

ns = torch_support.ns
HERE = Path(__file__).resolve().parent
SPIN = 200_000  # iterations each thread spins before writing: milliseconds of GPU time


@pytest.fixture(scope="module")
def ck() -> kffi.Module:
    """tests/python/kffi_torch/torch_kernels.cu, built with nvcc through kffi.cpp.build."""
    path = kffi.cpp.build(
        "kffi_test_torch_cuda_kernels", [str(HERE / "torch_kernels.cu")], quiet=True
    )
    return kffi.load_module(path)


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch.cuda.synchronize()


def test_every_path_runs_on_the_current_stream(ck, ns):
    ops = ck.torch_ops(ns)
    compiled = torch.compile(lambda out: ops.streams(out), fullgraph=True)
    side = torch.cuda.Stream()
    for stream in (torch.cuda.current_stream(), side):
        with torch.cuda.stream(stream):
            for call in (ops.streams, ops.streams.default, compiled):
                out = torch.zeros(2, dtype=torch.int64, device="cuda")
                call(out)
                stream.synchronize()
                # The explicit Stream parameter and the environment stream: both the current one.
                assert out.tolist() == [stream.cuda_stream, stream.cuda_stream], call


def test_results_are_ordered_on_the_stream(ck, ns):
    ops = ck.torch_ops(ns)
    x = torch.arange(1 << 16, dtype=torch.float32, device="cuda")
    expected = float((x + 1).sum())

    def f(x):
        y = torch.zeros_like(x)
        ops.slow_add_one(x, y, SPIN)
        return y.sum()  # reads y on the current stream, right after the slow kernel

    side = torch.cuda.Stream()
    for stream in (torch.cuda.current_stream(), side):
        with torch.cuda.stream(stream):
            for fn in (f, torch.compile(f, fullgraph=True)):
                assert float(fn(x)) == expected


def test_returned_tensors_come_from_torch(ck, ns):
    ops = ck.torch_ops(ns)
    x = torch.arange(10, dtype=torch.float32, device="cuda")
    before = torch.cuda.memory_allocated()
    for call in (ops.scale, ops.scale.default):
        y = call(x, 3.0)
        assert y.device == x.device and torch.equal(y, x * 3)
        assert torch.cuda.memory_allocated() > before  # torch's caching allocator holds it
        del y
    fake_checked = torch.library.opcheck(ops.scale.default, (x, 2.0))
    assert set(fake_checked.values()) == {"SUCCESS"}, fake_checked


def test_reduce_overhead_captures_kffi_kernels_in_cuda_graphs(ck, ns):
    ops = ck.torch_ops(ns)

    def f(x):
        y = torch.empty_like(x)
        ops.slow_add_one(x * 2, y, 1000)  # a mutating op
        return ops.scale(y, 0.5) + 1  # an op returning a new tensor

    compiled = torch.compile(f, mode="reduce-overhead", fullgraph=True)
    skips_before = torch._dynamo.utils.counters["inductor"]["cudagraph_skips"]
    for step in range(5):  # warm-up, record, then replays
        x = torch.rand(4096, device="cuda") + step
        out = compiled(x)
        assert torch.allclose(out, (x * 2 + 1) * 0.5 + 1), step
    assert torch._dynamo.utils.counters["inductor"]["cudagraph_skips"] == skips_before
    # Replays on a side stream are ordered too.
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        x = torch.rand(4096, device="cuda")
        out = compiled(x)
        total = float(out.sum())
    assert total == pytest.approx(float(((x * 2 + 1) * 0.5 + 1).sum()), rel=1e-5)


def test_contract_device_is_checked(ck, ns):
    ops = ck.torch_ops(ns)
    with pytest.raises(ValueError, match=r"x\.device: expected cuda"):
        ops.scale(torch.ones(4), 2.0)
