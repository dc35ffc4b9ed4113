// tests/python/kernels/bad_metadata_kernels.cc: a library whose metadata symbols
// (`__kffi__meta_<name>`) return malformed JSON or values that are not JSON text, written by hand
// as a careless or hostile library would. Each function returns 1 when called; reading its
// metadata (`mod.name`) must fail with an error naming the function and the module.
// SPDX-License-Identifier: Apache-2.0
#include <kffi/export.h>

#include <cstdint>
#include <cstring>
#include <string>

namespace {

int ReturnOne(KFFIAny* result) {
  kffi::details::SetPOD(result, kKFFIInt);
  result->v_int64 = 1;
  return 0;
}

int ReturnText(const std::string& text, KFFIAny* result) {
  KFFIByteArray b{text.data(), text.size()};
  return KFFIStringFromByteArray(&b, result);
}

/// JSON nested far deeper than any reader's recursion limit.
std::string DeepJson() { return std::string(100000, '[') + std::string(100000, ']'); }

int64_t Fine(int64_t x) { return x; }

}  // namespace

// A well-formed export: the library carries the ABI record and loads.
KFFI_EXPORT_DOC(fine, Fine, "Returns x.", "x");

#define BAD_METADATA(NAME, TEXT)                                                                  \
  extern "C" KFFI_DLL_EXPORT int __kffi_##NAME(void*, const KFFIAny*, int32_t, KFFIAny* result) { \
    return ReturnOne(result);                                                                     \
  }                                                                                               \
  extern "C" KFFI_DLL_EXPORT int __kffi__meta_##NAME(void*, const KFFIAny*, int32_t,              \
                                                     KFFIAny* result) {                           \
    return ReturnText(TEXT, result);                                                              \
  }

BAD_METADATA(not_json, "{\"name\": \"not_json\", \"params\": [")
BAD_METADATA(not_object, "[1, 2, 3]")
BAD_METADATA(params_not_list, "{\"name\": \"params_not_list\", \"params\": {\"x\": 1}}")
BAD_METADATA(param_not_object, "{\"name\": \"param_not_object\", \"params\": [3]}")
BAD_METADATA(bad_param_name,
             "{\"name\": \"bad_param_name\", \"params\": [{\"name\": \"a b\", \"type\": \"int\"}]}")
BAD_METADATA(keyword_param_name,
             "{\"name\": \"keyword_param_name\", \"params\": [{\"name\": \"class\", \"type\": "
             "\"int\"}]}")
BAD_METADATA(duplicate_param_name,
             "{\"name\": \"duplicate_param_name\", \"params\": [{\"name\": \"a\", \"type\": "
             "\"int\"}, {\"name\": \"a\", \"type\": \"int\"}]}")
BAD_METADATA(param_type_not_str,
             "{\"name\": \"param_type_not_str\", \"params\": [{\"name\": \"a\", \"type\": 3}]}")
BAD_METADATA(doc_not_str, "{\"name\": \"doc_not_str\", \"params\": [], \"doc\": 5}")
BAD_METADATA(deep_json, DeepJson())

// A metadata symbol that returns an int instead of JSON text.
extern "C" KFFI_DLL_EXPORT int __kffi_meta_is_int(void*, const KFFIAny*, int32_t, KFFIAny* result) {
  return ReturnOne(result);
}
extern "C" KFFI_DLL_EXPORT int __kffi__meta_meta_is_int(void*, const KFFIAny*, int32_t,
                                                        KFFIAny* result) {
  return ReturnOne(result);
}
