// src/object.cc: reference counting on the object header and opaque (foreign pointer) objects.
#include <kffi/c_api.h>

#include <string>

#include "runtime_internal.h"

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
  if (obj != nullptr) kffi::details::RuntimeIncRef(static_cast<KFFIObject*>(obj));
  return 0;
}

int KFFIObjectDecRef(KFFIObjectHandle obj) {
  // A deleter is foreign code that may be C++; keep whatever it throws on this side.
  KFFI_CAPI_BEGIN();
  if (obj != nullptr) kffi::details::RuntimeDecRef(static_cast<KFFIObject*>(obj));
  KFFI_CAPI_END();
}

int KFFIObjectIncWeakRef(KFFIObjectHandle obj) {
  if (obj != nullptr) kffi::details::RuntimeIncWeakRef(static_cast<KFFIObject*>(obj));
  return 0;
}

int KFFIObjectDecWeakRef(KFFIObjectHandle obj) {
  KFFI_CAPI_BEGIN();
  if (obj != nullptr) kffi::details::RuntimeDecWeakRef(static_cast<KFFIObject*>(obj));
  KFFI_CAPI_END();
}

int KFFIObjectWeakLock(KFFIObjectHandle obj, KFFIObjectHandle* out) {
  KFFI_CAPI_BEGIN();
  kffi::details::CheckOutArg(out, "KFFIObjectWeakLock: out");
  *out = nullptr;
  if (obj == nullptr) return 0;
  uint64_t* count = &static_cast<KFFIObject*>(obj)->combined_ref_count;
  uint64_t expected = __atomic_load_n(count, __ATOMIC_RELAXED);
  // Add a strong reference only while one still exists: once the strong count reached 0 the
  // destructor may already be running and the object must never come back.
  while ((expected & kffi::details::kRefStrongMask) != 0) {
    if (__atomic_compare_exchange_n(count, &expected, expected + kffi::details::kRefStrongOne,
                                    /*weak=*/true, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED)) {
      *out = obj;
      return 0;
    }
  }
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
