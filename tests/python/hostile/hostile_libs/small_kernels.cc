// tests/python/hostile/hostile_libs/small_kernels.cc: exports for test_hostile_small.py (issue 29,
// class 10): raw safe calls that raise errors without text, metadata that mixes named and unnamed
// parameters, and allocations of tensors with a dtype the caller chooses.
// SPDX-License-Identifier: Apache-2.0
#include <kffi/kffi.h>

#include <cstdint>
#include <string>

namespace {

int RaiseWith(const char* kind, const char* message) {
  KFFIErrorSetRaisedFromCStr(kind, message);
  return -1;
}

// Raises an error made by KFFIErrorCreate from these (possibly empty) byte arrays.
int RaiseCreated(const std::string& kind, const std::string& message) {
  KFFIByteArray k{kind.data(), kind.size()};
  KFFIByteArray m{message.data(), message.size()};
  KFFIObjectHandle err = nullptr;
  if (KFFIErrorCreate(&k, &m, nullptr, &err) != 0) return -1;
  KFFIErrorSetRaised(err);
  KFFIObjectDecRef(err);
  return -1;
}

int ReturnMeta(const char* json, KFFIAny* result) {
  KFFIByteArray bytes{json, std::char_traits<char>::length(json)};
  return KFFIStringFromByteArray(&bytes, result);
}

int64_t Identity(int64_t x) { return x; }

kffi::Tensor Alloc(int64_t code, int64_t bits, int64_t lanes, bool env) {
  DLDataType dtype{static_cast<uint8_t>(code), static_cast<uint8_t>(bits),
                   static_cast<uint16_t>(lanes)};
  const int64_t shape[1] = {4};
  if (env) return kffi::Tensor::FromEnvAlloc(kffi::IntArrayView(shape, 1), dtype, {kDLCPU, 0});
  return kffi::Tensor::FromNDAlloc(kffi::details::HostAlignedAlloc(), kffi::IntArrayView(shape, 1),
                                   dtype, DLDevice{kDLCPU, 0});
}

}  // namespace

#define KFFI_TEST_RAW(name, body)                                                          \
  extern "C" KFFI_DLL_EXPORT int __kffi_##name(void*, const KFFIAny*, int32_t, KFFIAny*) { \
    return body;                                                                           \
  }

KFFI_TEST_RAW(null_kind_null_message, RaiseWith(nullptr, nullptr))
KFFI_TEST_RAW(null_kind_empty_message, RaiseWith(nullptr, ""))
KFFI_TEST_RAW(empty_kind_empty_message, RaiseWith("", ""))
KFFI_TEST_RAW(runtime_error_null_message, RaiseWith("RuntimeError", nullptr))
KFFI_TEST_RAW(null_kind_with_message, RaiseWith(nullptr, "it broke"))
KFFI_TEST_RAW(created_empty, RaiseCreated("", ""))
KFFI_TEST_RAW(created_empty_kind, RaiseCreated("", "it broke"))
KFFI_TEST_RAW(value_error_empty_message, RaiseWith("ValueError", ""))

// Functions whose metadata mixes named and unnamed parameters so that two go by one name.
extern "C" {
KFFI_DLL_EXPORT int __kffi_dup_unnamed_first(void*, const KFFIAny* args, int32_t, KFFIAny* r) {
  r->type_index = kKFFIInt;
  r->zero_padding = 0;
  r->v_int64 = args[0].v_int64;
  return 0;
}
KFFI_DLL_EXPORT int __kffi__meta_dup_unnamed_first(void*, const KFFIAny*, int32_t, KFFIAny* r) {
  return ReturnMeta(R"({"params": [{"type": "int"}, {"name": "arg0", "type": "int"}]})", r);
}
KFFI_DLL_EXPORT int __kffi_dup_named_first(void*, const KFFIAny* args, int32_t, KFFIAny* r) {
  return __kffi_dup_unnamed_first(nullptr, args, 1, r);
}
KFFI_DLL_EXPORT int __kffi__meta_dup_named_first(void*, const KFFIAny*, int32_t, KFFIAny* r) {
  return ReturnMeta(R"({"params": [{"name": "arg1", "type": "int"}, {"type": "int"}]})", r);
}
}

KFFI_EXPORT(identity, Identity);
KFFI_EXPORT(alloc, Alloc);
