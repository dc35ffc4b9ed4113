// tests/module_libs/modlib_other.cc: a second kernel library, imported by modules in the tests.
// SPDX-License-Identifier: Apache-2.0
#include <kffi/export.h>

#include <cstdint>

// `add` here differs from modlib's so a test can tell which module a lookup found.
KFFI_EXPORT_DOC(
    add, [](int64_t a, int64_t b) { return a + b + 1000; }, "Adds plus 1000.", "a, b");
KFFI_EXPORT(mul, [](int64_t a, int64_t b) { return a * b; });
