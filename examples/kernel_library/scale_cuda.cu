// examples/kernel_library/scale_cuda.cu: the `scale` kernel (y = x * factor) for CUDA tensors.
//
// Every kernel follows the same steps: validate the arguments, make the tensors' device current,
// take the caller's stream, dispatch on dtype, launch.
// SPDX-License-Identifier: Apache-2.0
#include <kffi/cuda.h>
#include <kffi/dispatch.h>
#include <kffi/export.h>
#include <kffi/tensor_checks.h>

#include <algorithm>
#include <cstdint>

namespace {

// One thread per element, striding over the grid so any n fits a bounded launch. The factor is
// applied in float for every dtype, as the CPU version does: kffi::half and kffi::bfloat16
// (kffi/half.h, the layout of __half and __nv_bfloat16) convert on the device too.
template <typename T>
__global__ void ScaleKernel(T* y, const T* x, float factor, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    y[i] = T(static_cast<float>(x[i]) * factor);
  }
}

template <typename T>
void Launch(kffi::TensorView y, kffi::ConstTensorView x, float factor, cudaStream_t stream) {
  const int64_t n = x.numel();
  if (n == 0) return;
  constexpr int kThreads = 256;
  const int64_t blocks = std::min<int64_t>((n + kThreads - 1) / kThreads, 65535);
  // data<T>() is the first element (DLTensor.data + byte_offset).
  ScaleKernel<T>
      <<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(y.data<T>(), x.data<T>(), factor, n);
  KFFI_CUDA_CHECK(cudaGetLastError());  // a bad launch configuration shows up here
}

// y is written (a TensorView: the call refuses read-only memory for it, which is never changed);
// x is only read (a ConstTensorView).
void Scale(kffi::TensorView y, kffi::ConstTensorView x, double factor) {
  // 1. Validate: every failure names the argument, what was expected and what came.
  kffi::CheckDevice(x, kDLCUDA, "x");
  kffi::CheckSameDevice(y, x, "y", "x");
  kffi::CheckSameDtype(y, x, "y", "x");
  kffi::CheckSameShape(y, x, "y", "x");
  kffi::CheckContiguous(x, "x");
  kffi::CheckContiguous(y, "y");
  // 2. Device guard: launch on x's GPU without changing the caller's current device for good.
  kffi::cuda::DeviceGuard guard(x.device());
  // 3. Stream: the one the calling framework made current (e.g. torch.cuda.current_stream()).
  cudaStream_t stream = kffi::cuda::current_stream(x.device());
  // 4. Dispatch on dtype (another dtype is a TypeError naming x) and 5. launch (asynchronously,
  // on that stream).
  kffi::DispatchDtype<float, kffi::half, kffi::bfloat16>(x, "x", [&](auto tag) {
    Launch<typename decltype(tag)::type>(y, x, static_cast<float>(factor), stream);
  });
}

}  // namespace

KFFI_EXPORT_DOC(scale, Scale, "y = x * factor, elementwise (float32, float16, bfloat16; CUDA).",
                "y, x, factor");
