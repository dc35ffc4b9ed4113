// tests/aot/aot_kernels.cc: exports built for static linking, twice (prefixes a_ and b_).
// SPDX-License-Identifier: Apache-2.0
#include <kffi/kffi.h>

#include <cstdint>

namespace {

// Internal linkage: the two builds of this file link into one program (their exports differ by
// the prefix; kffi.compile's objects make such definitions local by themselves).
int64_t AddInts(int64_t a, int64_t b) { return a + b; }

void Scale(kffi::TensorView y, kffi::ConstTensorView x, double factor) {
  float* out = y.data<float>();
  const float* in = x.data<float>();
  for (int64_t i = 0; i < x.shape()[0]; ++i) out[i] = static_cast<float>(in[i] * factor);
}

}  // namespace

KFFI_EXPORT_DOC(add_ints, AddInts, "a + b", "a, b");
KFFI_EXPORT_CONTRACT_DOC(scale, Scale,
                         "y: Tensor([n], float32, mut), x: Tensor([n], float32), factor: float",
                         "y = x * factor");
