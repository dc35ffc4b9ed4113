"""examples/torch/torch_demo.py: C++ kernels as PyTorch ops with kffi.torch.

Builds three small CPU kernels with contracts (kffi.cpp.load_inline), then:
  1. registers them as torch ops (schema, mutation and fake tensors come from the contracts);
  2. calls them eagerly (straight to the kernel) and under torch.compile(fullgraph=True), with a
     dynamic batch dimension;
  3. makes one differentiable with a backward kernel (kffi.torch.register_autograd) and checks it
     with torch.autograd.gradcheck.

Usage: python3 examples/torch/torch_demo.py   (CPU; CUDA kernels register the same way)
"""
# SPDX-License-Identifier: Apache-2.0

import kffi
import kffi.torch
import torch

# Three kernels in one library, each exported with its contract: the parameters' shapes (n, m,
# k are symbols), dtypes and layout, `mut` for a tensor the kernel writes, and after `->` the
# tensors it returns.
SOURCE = r"""
#include <kffi/contract_export.h>

// out[i, j] = x[i, j] + bias[j], written into out
void add_bias(kffi::ConstTensorView x, kffi::ConstTensorView bias, kffi::TensorView out) {
  const float* a = x.data<float>();
  const float* b = bias.data<float>();
  float* o = out.data<float>();
  for (int64_t i = 0; i < x.size(0); ++i)
    for (int64_t j = 0; j < x.size(1); ++j) o[i * x.size(1) + j] = a[i * x.size(1) + j] + b[j];
}

// A new tensor: y = x * x
kffi::Tensor square(kffi::ConstTensorView x) {
  kffi::Tensor y = kffi::Tensor::FromEnvAlloc(x.shape(), x.dtype(), x.device());
  const double* a = x.data<double>();
  for (int64_t i = 0; i < x.numel(); ++i) y.data<double>()[i] = a[i] * a[i];
  return y;
}

// Its gradient: dx = 2 x g
kffi::Tensor square_bwd(kffi::ConstTensorView x, kffi::ConstTensorView g) {
  kffi::Tensor dx = kffi::Tensor::FromEnvAlloc(x.shape(), x.dtype(), x.device());
  const double* a = x.data<double>();
  const double* b = g.data<double>();
  for (int64_t i = 0; i < x.numel(); ++i) dx.data<double>()[i] = 2 * a[i] * b[i];
  return dx;
}

KFFI_EXPORT_CONTRACT(add_bias, add_bias,
                     "x: Tensor([n, m], float32, contiguous), bias: Tensor([m], float32), "
                     "out: Tensor([n, m], float32, contiguous, mut)");
KFFI_EXPORT_CONTRACT(square, square,
                     "x: Tensor([k], float64, contiguous) -> Tensor([k], float64)");
KFFI_EXPORT_CONTRACT(square_bwd, square_bwd,
                     "x: Tensor([k], float64, contiguous), g: Tensor([k], float64, contiguous) "
                     "-> Tensor([k], float64)");
"""


def main():
    mod = kffi.cpp.load_inline("torch_demo", cpp_sources=SOURCE)

    # 1. Register every function with a contract as demo::<name>: the schemas come from them.
    ops = mod.torch_ops("demo")
    print("demo::add_bias", ops.add_bias.schema)
    print("demo::square  ", ops.square.schema)
    add_bias, square = ops.add_bias, ops.square

    # 2. Eager, then compiled with a dynamic first dimension.
    def model(x, bias):
        out = torch.empty_like(x)
        add_bias(x.relu(), bias, out)
        return out * 2

    x, bias = torch.tensor([[-1.0, 2.0], [3.0, -4.0]]), torch.tensor([10.0, 20.0])
    print("eager   ", model(x, bias).tolist())
    compiled = torch.compile(model, fullgraph=True)
    torch._dynamo.mark_dynamic(x, 0)
    print("compiled", compiled(x, bias).tolist())
    graphs = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    bigger = torch.ones(5, 2)
    assert torch.equal(compiled(bigger, bias), model(bigger, bias))
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == graphs
    print("compiled, 5 rows, same graph: ok")

    # 3. Differentiable through a backward kernel.
    kffi.torch.register_autograd(square, backward=mod.square_bwd)
    v = torch.tensor([0.5, -1.0, 3.0], dtype=torch.float64, requires_grad=True)
    (grad,) = torch.autograd.grad(square(v).sum(), (v,))
    print("d/dv sum(square(v))", grad.tolist())
    assert torch.autograd.gradcheck(square, (v,))
    print("gradcheck: ok")
    result = torch.library.opcheck(square.default, (v,))
    print("opcheck:", ", ".join(f"{k} {v}" for k, v in result.items()))


if __name__ == "__main__":
    main()
