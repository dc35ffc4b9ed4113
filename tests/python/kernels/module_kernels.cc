// tests/python/kernels/module_kernels.cc: a kernel library for the module tests (exports with and
// without parameter names and docstrings).
// SPDX-License-Identifier: Apache-2.0
#include <kffi/export.h>

#include <cstdint>
#include <string>

namespace {

/// a * scale + offset: three parameters, so keyword arguments can be mixed with positional ones.
double Affine(double a, double scale, double offset) { return a * scale + offset; }

std::string Greet(std::string name, int64_t times) {
  std::string out;
  for (int64_t i = 0; i < times; ++i) out += "hello " + name + (i + 1 < times ? ", " : "");
  return out;
}

int64_t Subtract(int64_t a, int64_t b) { return a - b; }

void Fail(std::string message) { KFFI_THROW(ValueError) << "module_kernels failed: " << message; }

}  // namespace

KFFI_EXPORT_DOC(affine, Affine, "Returns a * scale + offset.", "a, scale, offset");
KFFI_EXPORT_DOC(greet, Greet, "Greets name, times times.\nSecond line of the docstring.",
                "name, times");
// No parameter names or docstring: positional only.
KFFI_EXPORT(subtract, Subtract);
KFFI_EXPORT_DOC(fail, Fail, "Always raises ValueError.", "message");
