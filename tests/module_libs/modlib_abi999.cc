// tests/module_libs/modlib_abi999.cc: a kernel library that claims ABI version 999. Its static
// initialiser sets an environment variable, so a test can tell that the loader refused it before
// running any of its code.
// SPDX-License-Identifier: Apache-2.0
#define KFFI_NO_ABI_VERSION_SYMBOL
#include <kffi/export.h>

#include <cstdint>
#include <cstdlib>

extern "C" KFFI_DLL_EXPORT const uint32_t __kffi__abi_version = 999;

namespace {
[[maybe_unused]] const int kMarker = setenv("KFFI_TEST_ABI999_INITIALISED", "1", 1);
}  // namespace

KFFI_EXPORT(add, [](int64_t a, int64_t b) { return a + b; });
