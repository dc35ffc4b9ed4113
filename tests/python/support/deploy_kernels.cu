// tests/python/support/deploy_kernels.cu: CUDA twins of deploy_kernels.cc (jax.export round trips
// on GPU).
// SPDX-License-Identifier: Apache-2.0
#include <cuda_runtime.h>
#include <kffi/kffi.h>

namespace {

cudaStream_t EnvStream(kffi::ConstTensorView t) {
  return static_cast<cudaStream_t>(KFFIEnvGetStream(kDLCUDA, t.device().device_id));
}

void Check() {
  cudaError_t err = cudaGetLastError();
  KFFI_CHECK(err == cudaSuccess, RuntimeError) << "CUDA error: " << cudaGetErrorString(err);
}

__global__ void ScaleKernel(float* y, const float* x, double factor, int64_t n) {
  int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) y[i] = static_cast<float>(x[i] * factor);
}

__global__ void Repeat2Kernel(float* y, const float* x, int64_t n) {
  int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) y[2 * i] = y[2 * i + 1] = x[i];
}

int Blocks(int64_t n) { return static_cast<int>((n + 255) / 256); }

}  // namespace

// y = x * factor, into a mut output.
void Scale(kffi::TensorView y, kffi::ConstTensorView x, double factor) {
  int64_t n = x.numel();
  if (n)
    ScaleKernel<<<Blocks(n), 256, 0, EnvStream(x)>>>(y.data<float>(), x.data<float>(), factor, n);
  Check();
}
KFFI_EXPORT_CONTRACT(scale, Scale,
                     "y: Tensor([n], float32, mut, device=cuda), "
                     "x: Tensor([n], float32, device=cuda), factor: float");

// Each element twice, into a new tensor whose shape is an expression of the input's.
kffi::Tensor Repeat2(kffi::ConstTensorView x) {
  kffi::Tensor out = kffi::Tensor::FromEnvAlloc({x.size(0) * 2}, x.dtype(), x.device());
  int64_t n = x.size(0);
  if (n) Repeat2Kernel<<<Blocks(n), 256, 0, EnvStream(x)>>>(out.data<float>(), x.data<float>(), n);
  Check();
  return out;
}
KFFI_EXPORT_CONTRACT(
    repeat2, Repeat2,
    "x: Tensor([n], float32, device=cuda) -> Tensor([n * 2], float32, device=cuda)");
