// tests/python/kernels/plain_kernels.cc: exports that take only ints, floats and strings, the
// arguments Python packs without a call context (test_plain_calls.py covers each branch).
// SPDX-License-Identifier: Apache-2.0
#include <kffi/export.h>

#include <cstdint>
#include <string>

namespace {

/// The text as it arrived, so a test sees every byte (a NUL included).
kffi::String Echo(kffi::String s) { return s; }

int64_t Length(kffi::String s) { return static_cast<int64_t>(s.size()); }

int64_t EchoInt(int64_t v) { return v; }

/// "<s>|<n>|<x>": all three kinds of plain argument in one call.
std::string Join(kffi::String s, int64_t n, double x) {
  return std::string(s.data(), s.size()) + "|" + std::to_string(n) + "|" + std::to_string(x);
}

/// Four arguments: the plain path that loops over a count it learns at run time.
int64_t Sum4(int64_t a, int64_t b, int64_t c, int64_t d) { return a + b + c + d; }

/// Returns nothing: the call's result is None without a conversion.
void Nothing(int64_t, int64_t, int64_t) {}

void Refuse(int64_t n) { KFFI_THROW(ValueError) << "refused " << n; }

}  // namespace

KFFI_EXPORT_DOC(echo, Echo, "s", "s");
KFFI_EXPORT_DOC(length, Length, "len(s)", "s");
KFFI_EXPORT_DOC(echo_int, EchoInt, "v", "v");
KFFI_EXPORT_DOC(join, Join, "s|n|x", "s, n, x");
KFFI_EXPORT_DOC(sum4, Sum4, "a + b + c + d", "a, b, c, d");
KFFI_EXPORT(nothing, Nothing);
KFFI_EXPORT_DOC(refuse, Refuse, "Raises ValueError.", "n");
