// bench/cpp/compile_unit_contract.cc: the contract translation unit whose compile time the
// benchmark measures: one TensorView kernel exported with a contract.
#include <kffi/contract.h>
#include <kffi/tensor.h>

namespace {
void AddOne(kffi::TensorView x, kffi::TensorView y) {
  const float* a = static_cast<const float*>(x.data_ptr());
  float* b = static_cast<float*>(y.data_ptr());
  for (int64_t i = 0; i < x.numel(); ++i) b[i] = a[i] + 1.0f;
}
}  // namespace

KFFI_EXPORT_CONTRACT(add_one, AddOne, "x: f32[n] cpu; y: f32[n] cpu mut");
