// tests/abi/macros_alone/contract_export_h.cc: every macro of <kffi/contract_export.h>, with that
// header alone.
// SPDX-License-Identifier: Apache-2.0
#include <kffi/contract_export.h>

namespace {
int64_t Size(kffi::ConstTensorView x) { return x.size(0); }
}  // namespace

KFFI_EXPORT_CONTRACT(alone_size, Size, "x: Tensor([n], float32)");
KFFI_EXPORT_CONTRACT_DOC(alone_size_doc, Size, "x: Tensor([n], float32, mut)", "Returns n.");
