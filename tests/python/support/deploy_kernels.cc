// tests/python/support/deploy_kernels.cc: contract kernels of the deploy tests (jax.export round
// trips).
// SPDX-License-Identifier: Apache-2.0
#include <kffi/kffi.h>

// y = x * factor, into a mut output.
void Scale(kffi::TensorView y, kffi::ConstTensorView x, double factor) {
  const float* in = x.data<float>();
  float* out = y.data<float>();
  for (int64_t i = 0; i < x.numel(); ++i) out[i] = static_cast<float>(in[i] * factor);
}
KFFI_EXPORT_CONTRACT(scale, Scale,
                     "y: Tensor([n], float32, mut), x: Tensor([n], float32), factor: float");

// Each element twice, into a new tensor whose shape is an expression of the input's.
kffi::Tensor Repeat2(kffi::ConstTensorView x) {
  kffi::Tensor out = kffi::Tensor::FromEnvAlloc({x.size(0) * 2}, x.dtype(), x.device());
  float* o = out.data<float>();
  const float* in = x.data<float>();
  for (int64_t i = 0; i < x.size(0); ++i) o[2 * i] = o[2 * i + 1] = in[i];
  return out;
}
KFFI_EXPORT_CONTRACT(repeat2, Repeat2, "x: Tensor([n], float32) -> Tensor([n * 2], float32)");
