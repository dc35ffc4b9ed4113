// tests/loader_libs/abi_size.cc: a library whose ABI version record is 8 bytes instead of 4. Its
// static initialiser sets an environment variable, so a test can tell that the loader refused it
// before running any of its code.
// SPDX-License-Identifier: Apache-2.0
#define KFFI_NO_ABI_VERSION_SYMBOL
#include <kffi/export.h>

#include <cstdint>
#include <cstdlib>

extern "C" KFFI_DLL_EXPORT const uint64_t __kffi__abi_version = 1;

namespace {
[[maybe_unused]] const int kMarker = setenv("KFFI_TEST_ABI_SIZE_INITIALISED", "1", 1);
}  // namespace

KFFI_EXPORT(add, [](int64_t a, int64_t b) { return a + b; });
