// tests/python/kffi_torch/torch_kernels.cu: CUDA kernels with contracts that the kffi.torch GPU
// tests register as torch ops (test_torch_gpu.py). Each launches on the stream the call is given.
// SPDX-License-Identifier: Apache-2.0
#include <kffi/contract.h>
#include <kffi/kffi.h>

#include <cstdint>

namespace {

// y[i] = x[i] + 1, slowly: the kernel spins first, so a reader on another stream would see y
// before it is written.
__global__ void SlowAddOneKernel(const float* x, float* y, int64_t n, int64_t spin) {
  int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  float acc = 0.f;
  for (int64_t k = 0; k < spin; ++k) acc += 1e-30f * static_cast<float>(k);
  y[i] = x[i] + 1.f + acc;
}

__global__ void ScaleKernel(const float* x, float* y, int64_t n, float factor) {
  int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) y[i] = x[i] * factor;
}

__global__ void WriteStreamsKernel(int64_t* out, int64_t explicit_stream, int64_t env_stream) {
  out[0] = explicit_stream;
  out[1] = env_stream;
}

unsigned Blocks(int64_t n) { return static_cast<unsigned>((n + 255) / 256); }

void SlowAddOne(kffi::ConstTensorView x, kffi::TensorView y, int64_t spin, void* stream) {
  if (x.numel() == 0) return;
  SlowAddOneKernel<<<Blocks(x.numel()), 256, 0, static_cast<cudaStream_t>(stream)>>>(
      x.data<float>(), y.data<float>(), x.numel(), spin);
  KFFI_CUDA_CHECK(cudaGetLastError());
}

/// A new tensor x * factor (from the environment's allocator: torch's, in a torch op).
kffi::Tensor Scale(kffi::ConstTensorView x, double factor, void* stream) {
  kffi::Tensor y = kffi::Tensor::FromEnvAlloc(x.shape(), x.dtype(), x.device());
  if (x.numel() > 0) {
    ScaleKernel<<<Blocks(x.numel()), 256, 0, static_cast<cudaStream_t>(stream)>>>(
        x.data<float>(), y.data<float>(), x.numel(), static_cast<float>(factor));
    KFFI_CUDA_CHECK(cudaGetLastError());
  }
  return y;
}

/// out = [the explicit stream parameter, the environment stream], written on the latter.
void Streams(kffi::TensorView out, void* stream, void* env) {
  WriteStreamsKernel<<<1, 1, 0, static_cast<cudaStream_t>(env)>>>(
      out.data<int64_t>(), reinterpret_cast<int64_t>(stream), reinterpret_cast<int64_t>(env));
  KFFI_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

KFFI_EXPORT_CONTRACT(slow_add_one, SlowAddOne,
                     "x: Tensor([n], float32, device=cuda, contiguous), "
                     "y: Tensor([n], float32, device=cuda, contiguous, mut), spin: int, "
                     "stream: EnvStream");
KFFI_EXPORT_CONTRACT(scale, Scale,
                     "x: Tensor([n], float32, device=cuda, contiguous), factor: float, "
                     "stream: EnvStream -> Tensor([n], float32)");
KFFI_EXPORT_CONTRACT(streams, Streams,
                     "out: Tensor([2], int64, device=cuda, mut), stream: Stream, env: EnvStream");
