// tests/module_libs/modlib.cc: a kernel library with several exports, read by test_module.cc.
// SPDX-License-Identifier: Apache-2.0
#include <kffi/export.h>

#include <cstdint>
#include <string>

namespace {

int64_t Add(int64_t a, int64_t b) { return a + b; }

kffi::String Echo(kffi::String s) { return s; }

void Fail(std::string message) { KFFI_THROW(ValueError) << "modlib failed: " << message; }

// A function object made here: its deleter and code live in this library, so it exercises the
// rule that a loaded library is never unloaded.
kffi::Function MakeCounter(int64_t start) {
  return kffi::Function::FromTyped([start](int64_t step) { return start + step; }, "counter");
}

}  // namespace

KFFI_EXPORT_DOC(add, Add, "Adds two integers.\nReturns \"a + b\".", "a, b");
KFFI_EXPORT(echo, Echo);
KFFI_EXPORT_DOC(fail, Fail, "Always raises ValueError.", "message");
KFFI_EXPORT_DOC(make_counter, MakeCounter, "", "start");
