// examples/tvm_ffi/scale_tvm.cc: a kernel library written for the TVM-FFI ABI (apache-tvm-ffi's
// headers only, nothing of kffi), which kffi loads like its own.
// SPDX-License-Identifier: Apache-2.0
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/function.h>

namespace ffi = tvm::ffi;

// y = x * factor, for float32 tensors on the CPU.
void Scale(ffi::TensorView y, ffi::TensorView x, double factor) {
  TVM_FFI_CHECK(x.dtype() == DLDataType({kDLFloat, 32, 1}), TypeError)
      << "scale: x must be float32, got " << x.dtype();
  TVM_FFI_CHECK(x.device().device_type == kDLCPU, ValueError) << "scale: x must be on the CPU";
  TVM_FFI_CHECK(y.numel() == x.numel(), ValueError)
      << "scale: y has " << y.numel() << " elements, x has " << x.numel();
  const float* src = static_cast<const float*>(x.data_ptr());
  float* dst = static_cast<float*>(y.data_ptr());
  for (int64_t i = 0; i < x.numel(); ++i) dst[i] = static_cast<float>(src[i] * factor);
}

TVM_FFI_DLL_EXPORT_TYPED_FUNC(scale, Scale);
TVM_FFI_DLL_EXPORT_TYPED_FUNC_DOC(scale, "y = x * factor (float32, CPU).");
