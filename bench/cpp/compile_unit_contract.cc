// bench/cpp/compile_unit_contract.cc: the contract translation unit whose compile time the
// benchmark measures: one tensor kernel exported with a contract.
// SPDX-License-Identifier: Apache-2.0
#include <kffi/contract_export.h>
#include <kffi/tensor.h>

namespace {
void AddOne(kffi::ConstTensorView x, kffi::TensorView y) {
  const float* a = x.data<float>();
  float* b = y.data<float>();
  for (int64_t i = 0; i < x.numel(); ++i) b[i] = a[i] + 1.0f;
}
}  // namespace

KFFI_EXPORT_CONTRACT(add_one, AddOne, "x: f32[n] cpu; y: f32[n] cpu mut");
