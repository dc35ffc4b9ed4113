// tests/python/toolchain/default_path_kernels.cc: the kernels of default_path_check.py: a contract
// function that writes its output (a torch op with a `mut` argument, a JAX call's result) and one
// that returns a tensor it allocates.
// SPDX-License-Identifier: Apache-2.0
#include <kffi/contract.h>

void Scale(kffi::TensorView y, kffi::ConstTensorView x, double factor) {
  const float* in = x.data<float>();
  float* out = y.data<float>();
  for (int64_t i = 0; i < x.numel(); ++i) out[i] = static_cast<float>(in[i] * factor);
}
KFFI_EXPORT_CONTRACT(scale, Scale,
                     "y: Tensor([n], float32, contiguous, mut), x: Tensor([n], float32, "
                     "contiguous), factor: float");

kffi::Tensor PlusOne(kffi::ConstTensorView x) {
  kffi::Tensor out = kffi::Tensor::FromEnvAlloc(x.shape(), x.dtype(), x.device());
  for (int64_t i = 0; i < x.numel(); ++i) out.data<float>()[i] = x.data<float>()[i] + 1;
  return out;
}
KFFI_EXPORT_CONTRACT(plus_one, PlusOne,
                     "x: Tensor([n], float32, contiguous) -> Tensor([n], float32)");
