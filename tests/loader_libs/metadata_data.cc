// tests/loader_libs/metadata_data.cc: a kffi library whose metadata symbols are data (issue 29,
// class 1): `__kffi__meta_text` a `const char[]` (read as its text), `__kffi__meta_pointer` a
// pointer (an error naming it). Neither may ever be called.
// SPDX-License-Identifier: Apache-2.0
#include <kffi/c_api.h>

#include <cstdint>

#define LOADER_API extern "C" __attribute__((visibility("default"), used))

namespace {
int PlusOne(const KFFIAny* args, KFFIAny* result) {
  result->type_index = kKFFIInt;
  result->zero_padding = 0;
  result->v_int64 = args[0].v_int64 + 1;
  return 0;
}
}  // namespace

LOADER_API int __kffi_text(void*, const KFFIAny* args, int32_t, KFFIAny* result) {
  return PlusOne(args, result);
}
LOADER_API int __kffi_pointer(void*, const KFFIAny* args, int32_t, KFFIAny* result) {
  return PlusOne(args, result);
}
LOADER_API const char __kffi__meta_text[] =
    R"({"name": "text", "params": [{"name": "x", "type": "int"}], "return": "int", )"
    R"("doc": "read from a const char[]"})";
LOADER_API const char* const __kffi__meta_pointer = "a pointer is not text";
