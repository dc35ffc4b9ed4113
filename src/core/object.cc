// src/core/object.cc: the reference-counting C API (over kffi/object.h's one implementation) and
// opaque (foreign pointer) objects.
// SPDX-License-Identifier: Apache-2.0
#include <kffi/c_api.h>

#include <string>

#include "core/runtime_internal.h"

namespace {

// The cell stays first so that any library reads the handle through KFFIOpaqueObjectCell; the
// deleter is private to libkffi.
struct OpaquePayload {
  KFFIOpaqueObjectCell cell;
  void (*deleter)(void* handle);

  OpaquePayload(void* handle, void (*del)(void*)) : cell{handle}, deleter(del) {}
  OpaquePayload(const OpaquePayload&) = delete;
  OpaquePayload& operator=(const OpaquePayload&) = delete;
  // Runs exactly once: the object deleter calls ~OpaquePayload only on the Strong flag.
  ~OpaquePayload() {
    if (deleter != nullptr) deleter(cell.handle);
  }
};

}  // namespace

// Null handles are accepted by all four count functions so that callers can release optional
// fields without a branch (the ABI asks for it on DecRef; the others follow for symmetry).

int KFFIObjectIncRef(KFFIObjectHandle obj) {
  if (obj != nullptr) kffi::details::HeaderIncRef(static_cast<KFFIObject*>(obj));
  return 0;
}

int KFFIObjectDecRef(KFFIObjectHandle obj) {
  // A deleter is foreign code that may be C++; keep whatever it throws on this side.
  KFFI_CAPI_BEGIN();
  if (obj != nullptr) kffi::details::HeaderDecRef(static_cast<KFFIObject*>(obj));
  KFFI_CAPI_END();
}

int KFFIObjectIncWeakRef(KFFIObjectHandle obj) {
  if (obj != nullptr) kffi::details::HeaderIncWeakRef(static_cast<KFFIObject*>(obj));
  return 0;
}

int KFFIObjectDecWeakRef(KFFIObjectHandle obj) {
  KFFI_CAPI_BEGIN();
  if (obj != nullptr) kffi::details::HeaderDecWeakRef(static_cast<KFFIObject*>(obj));
  KFFI_CAPI_END();
}

int KFFIObjectWeakLock(KFFIObjectHandle obj, KFFIObjectHandle* out) {
  KFFI_CAPI_BEGIN();
  kffi::details::CheckOutArg(out, "KFFIObjectWeakLock: out");
  *out = nullptr;
  if (obj == nullptr) return 0;
  if (kffi::details::HeaderTryPromoteWeak(static_cast<KFFIObject*>(obj))) *out = obj;
  KFFI_CAPI_END();
}

int KFFIObjectCreateOpaque(void* handle, int32_t type_index, void (*deleter)(void*),
                           KFFIObjectHandle* out) {
  KFFI_CAPI_BEGIN();
  kffi::details::CheckOutArg(out, "KFFIObjectCreateOpaque: out");
  *out = nullptr;
  if (type_index < kKFFIStaticObjectBegin) {
    kffi::details::ThrowCApiError(
        "ValueError", "KFFIObjectCreateOpaque: type_index " + std::to_string(type_index) +
                          " is not an object type index (must be >= " +
                          std::to_string(static_cast<int>(kKFFIStaticObjectBegin)) + ")");
  }
  // On failure nothing is taken: the caller still owns handle.
  *out = kffi::details::NewRuntimeObject<OpaquePayload>(type_index, handle, deleter);
  KFFI_CAPI_END();
}
