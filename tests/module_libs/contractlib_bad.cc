// tests/module_libs/contractlib_bad.cc: a library with a malformed and two misfit contracts next to
// a good one: Module::Load refuses it, naming each (test_contract_module.cc).
// SPDX-License-Identifier: Apache-2.0
#include <kffi/contract.h>

#include <cstdint>

namespace {

int64_t AddOne(kffi::ConstTensorView a, kffi::ConstTensorView b) {
  return a.size(0) + b.size(0) - a.size(0);
}

// y[i] = value: the function writes y.
void Fill(kffi::TensorView y, double value) {
  for (int64_t i = 0; i < y.numel(); ++i) y.data<float>()[i] = static_cast<float>(value);
}

}  // namespace

KFFI_EXPORT_CONTRACT(good, AddOne, "a: Tensor([n], float32), b: Tensor([n], float32)");
// A missing `]`.
KFFI_EXPORT_CONTRACT(broken, AddOne, "a: Tensor([n], float32), b: Tensor([n, float32)");
// Well formed, but the C++ function takes a tensor where the contract says int.
KFFI_EXPORT_CONTRACT(misfit, AddOne, "a: int, b: Tensor([n], float32)");
// Well formed, but the C++ function may write a tensor that the contract declares read-only.
KFFI_EXPORT_CONTRACT(readonly_misfit, Fill, "y: Tensor([n], float32), value: float");
