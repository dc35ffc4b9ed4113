// tests/module_libs/contractlib_bad.cc: a library with a malformed and a misfit contract next to
// a good one: Module::Load refuses it, naming both (test_contract_module.cc).
#include <kffi/contract.h>

#include <cstdint>

namespace {

int64_t AddOne(kffi::ConstTensorView a, kffi::ConstTensorView b) {
  return a.size(0) + b.size(0) - a.size(0);
}

}  // namespace

KFFI_EXPORT_CONTRACT(good, AddOne, "a: Tensor([n], float32), b: Tensor([n], float32)");
// A missing `]`.
KFFI_EXPORT_CONTRACT(broken, AddOne, "a: Tensor([n], float32), b: Tensor([n, float32)");
// Well formed, but the C++ function takes a tensor where the contract says int.
KFFI_EXPORT_CONTRACT(misfit, AddOne, "a: int, b: Tensor([n], float32)");
