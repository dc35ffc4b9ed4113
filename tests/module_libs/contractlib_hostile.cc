// tests/module_libs/contractlib_hostile.cc: contracts built to exhaust a recursive parser (deep
// nesting, within the length limit) and a huge one: loading the library must fail with a
// ValueError, not crash.
// SPDX-License-Identifier: Apache-2.0
#include <kffi/kffi.h>

#include <string>

namespace {

void TakesAny(kffi::Any) {}

// Built at static initialisation, before the exports below parse them (same translation unit:
// initialised in order of definition).
std::string Nested(int depth, const char* open, const char* inner, const char* close) {
  std::string s;
  for (int i = 0; i < depth; ++i) s += open;
  s += inner;
  for (int i = 0; i < depth; ++i) s += close;
  return s;
}
const std::string kDeepTypes = "x: " + Nested(6000, "Optional[", "int", "]");
const std::string kDeepParens =
    "x: Tensor([n], *) -> Tensor([" + Nested(30000, "(", "n", ")") + "], *)";
const std::string kHuge = [] {
  std::string s = "x: int";
  while (s.size() < (1 << 20)) s += " ";
  return s;
}();

}  // namespace

KFFI_EXPORT_CONTRACT(deep_types, TakesAny, kDeepTypes.c_str());
KFFI_EXPORT_CONTRACT(deep_parens, TakesAny, kDeepParens.c_str());
KFFI_EXPORT_CONTRACT(huge, TakesAny, kHuge.c_str());
