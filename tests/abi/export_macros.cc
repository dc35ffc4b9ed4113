// tests/abi/export_macros.cc: one kernel per export macro, written with <kffi/kffi.h> alone (the
// umbrella header must be enough to write and export a kernel). Loaded by loader_only.cc.
// SPDX-License-Identifier: Apache-2.0
#include <kffi/kffi.h>

#include <cstdint>

namespace {

int64_t Add(int64_t a, int64_t b) { return a + b; }

void Scale(kffi::TensorView y, kffi::ConstTensorView x, double factor) {
  float* out = y.data<float>();
  const float* in = x.data<float>();
  for (int64_t i = 0; i < x.numel(); ++i) out[i] = static_cast<float>(in[i] * factor);
}

}  // namespace

KFFI_EXPORT(add, Add);
KFFI_EXPORT_DOC(add_doc, Add, "Adds a and b.", "a, b");
KFFI_EXPORT_SYSTEM_LIB(abi_sys_add, Add);
KFFI_EXPORT_SYSTEM_LIB_DOC(abi_sys_add_doc, Add, "Adds a and b.", "a, b");
KFFI_EXPORT_CONTRACT(scale, Scale,
                     "y: Tensor([n], float32, mut), x: Tensor([n], float32), factor: float");
KFFI_EXPORT_CONTRACT_DOC(scale_doc, Scale,
                         "y: Tensor([n], float32, mut), x: Tensor([n], float32), factor: float",
                         "y = x * factor");
