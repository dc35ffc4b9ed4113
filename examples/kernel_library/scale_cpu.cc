// examples/kernel_library/scale_cpu.cc: the `scale` kernel (y = x * factor) for CPU tensors.
//
// Every kernel follows the same steps: validate the arguments, make the tensors' device current,
// take the caller's stream, dispatch on dtype, launch. On CPU the middle two have nothing to do;
// scale_cuda.cu shows them in full.
// SPDX-License-Identifier: Apache-2.0
#include <kffi/dispatch.h>
#include <kffi/export.h>
#include <kffi/tensor_checks.h>

#include <cstdint>

namespace {

// One loop for every dtype: kffi::half and kffi::bfloat16 (kffi/half.h) widen to float and round
// back to nearest-even, as a GPU's conversion does.
template <typename T>
void ScaleLoop(T* y, const T* x, int64_t n, float factor) {
  for (int64_t i = 0; i < n; ++i) y[i] = T(static_cast<float>(x[i]) * factor);
}

// y is written (a TensorView: the call refuses read-only memory for it, which is never changed);
// x is only read (a ConstTensorView: read-only arrays are welcome, without a copy).
void Scale(kffi::TensorView y, kffi::ConstTensorView x, double factor) {
  // 1. Validate: every failure names the argument, what was expected and what came.
  kffi::CheckDevice(x, kDLCPU, "x");
  kffi::CheckSameDevice(y, x, "y", "x");
  kffi::CheckSameDtype(y, x, "y", "x");
  kffi::CheckSameShape(y, x, "y", "x");
  kffi::CheckContiguous(x, "x");
  kffi::CheckContiguous(y, "y");
  // 2. Device guard and 3. stream: none on CPU; the loop runs on the calling thread.
  // 4. Dispatch on dtype (another dtype is a TypeError: "x.dtype: expected float32|float16|
  // bfloat16, got int32") and 5. launch. data<T>() is the first element (data + byte_offset).
  kffi::DispatchDtype<float, kffi::half, kffi::bfloat16>(x, "x", [&](auto tag) {
    using T = typename decltype(tag)::type;
    ScaleLoop(y.data<T>(), x.data<T>(), x.numel(), static_cast<float>(factor));
  });
}

}  // namespace

KFFI_EXPORT_DOC(scale, Scale, "y = x * factor, elementwise (float32, float16, bfloat16; CPU).",
                "y, x, factor");
