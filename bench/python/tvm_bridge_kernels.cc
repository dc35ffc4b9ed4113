// bench/python/tvm_bridge_kernels.cc: empty TVM-FFI exports for bench/python/tvm_bridge.py, built
// with apache-tvm-ffi's headers (a kernel library that reads nothing of the environment).
// SPDX-License-Identifier: Apache-2.0
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/function.h>

namespace {
void Noop() {}
void ThreeTensors(tvm::ffi::TensorView, tvm::ffi::TensorView, tvm::ffi::TensorView) {}
// Tensors by value (FlashInfer's style): kffi passes owning Tensors there.
void ThreeTensorsOwned(tvm::ffi::Tensor, tvm::ffi::Tensor, tvm::ffi::Tensor) {}
}  // namespace

TVM_FFI_DLL_EXPORT_TYPED_FUNC(noop, Noop);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(three_tensors, ThreeTensors);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(three_tensors_owned, ThreeTensorsOwned);
