// tests/abi/export_macros_more.cc: a second translation unit with exports in the same library, so
// that check_abi_record.cmake proves the ABI version record is emitted once per library.
// SPDX-License-Identifier: Apache-2.0
#include <kffi/kffi.h>

#include <cstdint>

KFFI_EXPORT(sub, [](int64_t a, int64_t b) { return a - b; });
KFFI_EXPORT_CONTRACT(
    first, [](kffi::ConstTensorView x) { return x.size(0); }, "x: Tensor([n], *)");
