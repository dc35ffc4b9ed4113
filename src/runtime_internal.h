// src/runtime_internal.h: private helpers shared by the runtime sources (never installed).
#ifndef KFFI_SRC_RUNTIME_INTERNAL_H_
#define KFFI_SRC_RUNTIME_INTERNAL_H_

#include <kffi/c_api.h>

#include <cstddef>
#include <cstdint>
#include <exception>
#include <new>
#include <string>
#include <string_view>
#include <utility>

// Every exported function that can fail is written as
//   int KFFIFoo(...) { KFFI_CAPI_BEGIN(); ...; KFFI_CAPI_END(); }
// so that no C++ exception ever leaves the library: whatever is thrown becomes the thread's
// raised error and the function returns -1. The names differ from the public C++ headers'
// KFFI_SAFE_CALL_* so that a source may include both.
#define KFFI_CAPI_BEGIN() try {
#define KFFI_CAPI_END()                            \
  }                                                \
  catch (...) {                                    \
    return ::kffi::details::HandleCApiException(); \
  }                                                \
  return 0

namespace kffi {
namespace details {

/// A failure with an error kind, thrown inside the runtime and turned into a raised error by
/// KFFI_CAPI_END (the message travels unchanged, the kind picks the Python exception class).
class CApiError : public std::exception {
 public:
  CApiError(std::string kind, std::string message)
      : kind_(std::move(kind)), message_(std::move(message)) {}
  const char* what() const noexcept override { return message_.c_str(); }
  const std::string& kind() const noexcept { return kind_; }
  const std::string& message() const noexcept { return message_; }

 private:
  std::string kind_;
  std::string message_;
};

/// Throws a CApiError; for code that runs inside KFFI_CAPI_BEGIN/END.
[[noreturn]] inline void ThrowCApiError(std::string kind, std::string message) {
  throw CApiError(std::move(kind), std::move(message));
}

/// Puts a new error of kind with message in the calling thread's slot (error.cc). Never fails:
/// when memory runs out it raises a preallocated MemoryError instead.
void SetRaisedCApiError(std::string_view kind, std::string_view message) noexcept;

/// Converts the exception being handled into the raised error; returns -1. Call it only from
/// inside a catch block (error.cc).
int HandleCApiException() noexcept;

/// The registered type key of a type index, or `type_index=N` when unknown (type_registry.cc).
/// Meant for error messages.
std::string TypeKeyForMessage(int32_t type_index);

/// True when type_index is base_index or a registered descendant of it (type_registry.cc).
bool TypeIsSubtypeOf(int32_t type_index, int32_t base_index) noexcept;

/// Fills *out with a str (or bytes) value of the given bytes: small inline for up to 7 bytes,
/// else a new owned Str (Bytes) object (string.cc). Throws on failure.
void MakeStringAny(const char* data, size_t size, bool is_bytes, KFFIAny* out);

// ---------------------------------------------------------------------------------------------
// Reference counting on the KFFIObject header (protocol in c_api.h). Inline here so that the
// runtime's own releases do not go through the exported symbols' PLT entries.
// ---------------------------------------------------------------------------------------------

constexpr uint64_t kRefStrongOne = 1;
constexpr uint64_t kRefWeakOne = uint64_t{1} << 32;
constexpr uint64_t kRefStrongMask = 0xFFFFFFFFull;
/// A new object: one strong reference plus the weak reference all strong ones share.
constexpr uint64_t kRefCountInit = kRefWeakOne | kRefStrongOne;

/// Orders the deleter after every other owner's release decrement. ThreadSanitizer does not
/// model fences, so under it an acquire load of the count (same effect here) stands in.
inline void AcquireBeforeDelete(KFFIObject* obj) noexcept {
#if defined(__SANITIZE_THREAD__)
  (void)__atomic_load_n(&obj->combined_ref_count, __ATOMIC_ACQUIRE);
#else
  (void)obj;
  __atomic_thread_fence(__ATOMIC_ACQUIRE);
#endif
}

inline void RuntimeIncRef(KFFIObject* obj) noexcept {
  // Relaxed: the caller already holds a reference, so the object cannot die meanwhile.
  __atomic_fetch_add(&obj->combined_ref_count, kRefStrongOne, __ATOMIC_RELAXED);
}

inline void RuntimeIncWeakRef(KFFIObject* obj) noexcept {
  __atomic_fetch_add(&obj->combined_ref_count, kRefWeakOne, __ATOMIC_RELAXED);
}

// Not noexcept: a deleter is foreign code; the exported wrappers catch what it might throw.
inline void RuntimeDecWeakRef(KFFIObject* obj) {
  uint64_t old = __atomic_fetch_sub(&obj->combined_ref_count, kRefWeakOne, __ATOMIC_RELEASE);
  if ((old >> 32) == 1) {
    // Pairs with the release decrements of other owners: their writes happen before the free.
    AcquireBeforeDelete(obj);
    if (obj->deleter != nullptr) obj->deleter(obj, kKFFIObjectDeleterFlagWeak);
  }
}

inline void RuntimeDecRef(KFFIObject* obj) {
  // Sole owner (strong 1, only the collective weak reference): nobody else can reach the object,
  // not even through a weak reference, so one Both call replaces two atomic updates.
  if (__atomic_load_n(&obj->combined_ref_count, __ATOMIC_ACQUIRE) == kRefCountInit) {
    if (obj->deleter != nullptr) obj->deleter(obj, kKFFIObjectDeleterFlagBoth);
    return;
  }
  uint64_t old = __atomic_fetch_sub(&obj->combined_ref_count, kRefStrongOne, __ATOMIC_RELEASE);
  if ((old & kRefStrongMask) == 1) {
    AcquireBeforeDelete(obj);
    if (obj->deleter != nullptr) obj->deleter(obj, kKFFIObjectDeleterFlagStrong);
    RuntimeDecWeakRef(obj);
  }
}

// ---------------------------------------------------------------------------------------------
// Objects made by the runtime: one allocation holding the 24-byte header and, right after it, a
// Payload whose first member is the ABI cell (so KFFIObjectGetCellPtr(obj) == payload) followed
// by private fields. The deleter runs ~Payload on Strong and frees the memory on Weak, so the
// header stays valid for weak references after the payload is destroyed.
// ---------------------------------------------------------------------------------------------

template <typename Payload>
inline Payload* RuntimePayload(void* obj) noexcept {
  return std::launder(reinterpret_cast<Payload*>(static_cast<char*>(obj) + sizeof(KFFIObject)));
}

template <typename Payload>
void RuntimePayloadDeleter(void* self, int flags) {
  if (flags & kKFFIObjectDeleterFlagStrong) RuntimePayload<Payload>(self)->~Payload();
  if (flags & kKFFIObjectDeleterFlagWeak) ::operator delete(self);
}

/// Allocates an object whose payload is Payload(args...): strong 1, weak 1. Throws
/// std::bad_alloc or whatever the constructor throws (nothing leaks then).
template <typename Payload, typename... Args>
KFFIObject* NewRuntimeObject(int32_t type_index, Args&&... args) {
  static_assert(alignof(Payload) <= alignof(KFFIObject), "payload needs a stricter alignment");
  void* mem = ::operator new(sizeof(KFFIObject) + sizeof(Payload));
  try {
    new (static_cast<char*>(mem) + sizeof(KFFIObject)) Payload(std::forward<Args>(args)...);
  } catch (...) {
    ::operator delete(mem);
    throw;
  }
  KFFIObject* obj = new (mem) KFFIObject;
  obj->combined_ref_count = kRefCountInit;
  obj->type_index = type_index;
  obj->padding = 0;
  obj->deleter = &RuntimePayloadDeleter<Payload>;
  return obj;
}

/// A view of a borrowed KFFIByteArray argument; NULL is a ValueError naming the argument.
inline std::string_view ByteArrayArg(const KFFIByteArray* arr, const char* what) {
  if (arr == nullptr) ThrowCApiError("ValueError", std::string(what) + " must not be NULL");
  if (arr->data == nullptr) {
    if (arr->size != 0) {
      ThrowCApiError("ValueError", std::string(what) + " has NULL data and a nonzero size");
    }
    return std::string_view();
  }
  return std::string_view(arr->data, arr->size);
}

/// Checks an output pointer argument.
template <typename T>
inline void CheckOutArg(T* out, const char* what) {
  if (out == nullptr) ThrowCApiError("ValueError", std::string(what) + " must not be NULL");
}

}  // namespace details
}  // namespace kffi

#endif  // KFFI_SRC_RUNTIME_INTERNAL_H_
