/* tests/abi/include_twice.cc: the public headers survive repeated and reordered inclusion in C++.
 *
 * dlpack.h comes first on purpose: it must stand alone (a framework may include it without kffi),
 * and c_api.h must then reuse it through DLPack's own include guard rather than redeclare it. */
/* SPDX-License-Identifier: Apache-2.0 */
#include <cstdio>

#include "kffi/c_api.h"
#include "kffi/dlpack.h"

namespace {

// A capture-free lambda converts to the C call convention; a C++ library exporting a function
// through the C API relies on exactly this.
const KFFISafeCallType kNoopCall = [](void*, const KFFIAny*, int32_t, KFFIAny* result) -> int {
  result->type_index = kKFFINone;
  return 0;
};

}  // namespace

int main() {
  KFFIAny result{};
  result.type_index = kKFFIInt;
  if (kNoopCall(nullptr, nullptr, 0, &result) != 0 || result.type_index != kKFFINone) {
    std::fprintf(stderr, "calling a lambda through KFFISafeCallType failed\n");
    return 1;
  }
  std::printf("abi include_twice (C++, __cplusplus=%ldL): headers compose\n",
              static_cast<long>(__cplusplus));
  return 0;
}
