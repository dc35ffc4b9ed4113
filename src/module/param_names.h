// src/module/param_names.h: splits the comma-separated parameter names an export gives (runtime
// side).
// SPDX-License-Identifier: Apache-2.0
#ifndef KFFI_SRC_MODULE_PARAM_NAMES_H_
#define KFFI_SRC_MODULE_PARAM_NAMES_H_

#include <string>
#include <vector>

namespace kffi {
namespace details {

/// Splits "a, b ,c" into {"a", "b", "c"}; "" (or only blanks) gives no names.
inline std::vector<std::string> SplitParamNames(const char* names) {
  std::vector<std::string> out;
  if (names == nullptr) return out;
  std::string cur;
  bool any = false;
  for (const char* p = names;; ++p) {
    if (*p == ',' || *p == '\0') {
      size_t b = cur.find_first_not_of(' ');
      size_t e = cur.find_last_not_of(' ');
      out.push_back(b == std::string::npos ? std::string() : cur.substr(b, e - b + 1));
      any |= b != std::string::npos;
      cur.clear();
      if (*p == '\0') break;
    } else {
      cur += *p;
    }
  }
  if (!any) out.clear();
  return out;
}

}  // namespace details
}  // namespace kffi

#endif  // KFFI_SRC_MODULE_PARAM_NAMES_H_
