// tests/abi/macros_alone/export_h.cc: every macro of <kffi/export.h>, with that header alone.
// SPDX-License-Identifier: Apache-2.0
#include <kffi/export.h>

#include <cstdint>

namespace {
int64_t Twice(int64_t x) { return 2 * x; }
}  // namespace

KFFI_EXPORT(alone_twice, Twice);
KFFI_EXPORT_DOC(alone_twice_doc, Twice, "Doubles x.", "x");
KFFI_EXPORT_SYSTEM_LIB(alone_sys_twice, Twice);
KFFI_EXPORT_SYSTEM_LIB_DOC(alone_sys_twice_doc, Twice, "Doubles x.", "x");
