// bench/cpp/compile_unit.cc: the translation unit whose compile time the benchmark measures:
// includes the function header and exports one typed function.
// SPDX-License-Identifier: Apache-2.0
#include <kffi/export.h>
#include <kffi/function.h>

namespace {
int64_t AddOne(int64_t x) { return x + 1; }
}  // namespace

KFFI_EXPORT(add_one, AddOne);
