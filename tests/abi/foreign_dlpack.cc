// tests/abi/foreign_dlpack.cc: another package's dlpack.h included before kffi's headers.
//
// FOREIGN_DLPACK_H names the header to include first. With a compatible one (a copy of DLPack's
// declarations under DLPack's guard, version 1.4) kffi's headers use its declarations and this
// program builds and runs; with an incompatible one (0.8, 1.2, 2.0) the build must stop at
// kffi/dlpack.h's #error, which check_foreign_dlpack.cmake asserts.
// SPDX-License-Identifier: Apache-2.0
#include FOREIGN_DLPACK_H

#include <kffi/function.h>
#include <kffi/tensor.h>

#include <cstdio>

int main() {
  static_assert(DLPACK_MAJOR_VERSION == 1 && DLPACK_MINOR_VERSION == 4,
                "the foreign header's declarations came first");
  int64_t shape[1] = {3};
  DLTensor t{nullptr, DLDevice{kDLCPU, 0}, 1, kffi::dtypes::float32, shape, nullptr, 0};
  kffi::Function numel =
      kffi::Function::FromTyped([](kffi::ConstTensorView x) { return x.numel(); });
  if (numel(&t).cast<int64_t>() != 3) {
    std::fprintf(stderr, "a ConstTensorView over the foreign DLTensor read the wrong shape\n");
    return 1;
  }
  std::printf("abi foreign_dlpack: kffi builds on a compatible dlpack.h included first\n");
  return 0;
}
