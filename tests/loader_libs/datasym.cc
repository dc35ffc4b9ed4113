// tests/loader_libs/datasym.cc: a kffi library that also exports data objects named like
// functions (`__kffi_x`, `__kffi_table`). The loader must list and call only the function.
// SPDX-License-Identifier: Apache-2.0
#include <kffi/export.h>

#include <cstdint>

extern "C" {
KFFI_DLL_EXPORT extern const int32_t __kffi_x;
KFFI_DLL_EXPORT extern int64_t __kffi_table[4];
}
const int32_t __kffi_x = 7;
int64_t __kffi_table[4] = {1, 2, 3, 4};

KFFI_EXPORT(real, [](int64_t a) { return a * 2; });
