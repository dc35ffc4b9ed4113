// src/core/runtime_internal.h: private helpers shared by the runtime sources (never installed).
// SPDX-License-Identifier: Apache-2.0
#ifndef KFFI_SRC_CORE_RUNTIME_INTERNAL_H_
#define KFFI_SRC_CORE_RUNTIME_INTERNAL_H_

#include <kffi/c_api.h>
#include <kffi/error.h>
#include <kffi/object.h>

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
// raised error and the function returns -1. They are the public KFFI_SAFE_CALL_* (error.h).
#define KFFI_CAPI_BEGIN() KFFI_SAFE_CALL_BEGIN()
#define KFFI_CAPI_END() KFFI_SAFE_CALL_END()

namespace kffi {
namespace details {

// Errors: runtime code throws kffi::Error (through ThrowCApiError) and KFFI_CAPI_END hands
// whatever was thrown to the one converter of error.h (SetRaisedFromCurrentException).

/// Throws a kffi::Error of kind with message; for code that runs inside KFFI_CAPI_BEGIN/END. The
/// message travels unchanged and the kind picks the Python exception class.
[[noreturn]] inline void ThrowCApiError(const std::string& kind, const std::string& message) {
  throw Error(kind, message);
}

/// Puts a new error of kind with message in the calling thread's slot (error.cc). Never fails:
/// when memory runs out it raises a preallocated MemoryError instead.
void SetRaisedCApiError(std::string_view kind, std::string_view message) noexcept;

/// A dtype's name as KFFIDataTypeToString writes it ("float32", "int8x4"); the one dtype
/// formatter (string.cc).
std::string FormatDataType(const DLDataType& dtype);

/// Converts the exception being handled into the raised error; returns -1. Call it only from
/// inside a catch block.
inline int HandleCApiException() noexcept {
  SetRaisedFromCurrentException();
  return -1;
}

/// kffi's one format of argument errors (argument_message.cc): "<subject>: expected <expected>,
/// got <got> (<context> of `<signature>`)"; no "expected ..., got" when expected is empty (got is
/// the whole text), no "<context> of " when context is empty, no parenthesis without a signature.
/// *got_offset (when not NULL): where got starts in the result.
std::string ArgumentMessage(std::string_view subject, std::string_view expected,
                            std::string_view got, std::string_view context,
                            std::string_view signature, size_t* got_offset = nullptr);
/// Notes that error (an argument error just made) names the type of the argument value arg at
/// bytes [offset, offset + size) of its message (error.cc; KFFIErrorGetArgumentType reads it).
void RecordArgumentType(KFFIObjectHandle error, const KFFIAny* arg, size_t offset, size_t size);

/// The registered type key of a type index, or `type_index=N` when unknown (type_registry.cc).
/// Meant for error messages.
std::string TypeKeyForMessage(int32_t type_index);

/// True when type_index is base_index or a registered descendant of it (type_registry.cc).
bool TypeIsSubtypeOf(int32_t type_index, int32_t base_index) noexcept;

/// Fills *out with a str (or bytes) value of the given bytes: small inline for up to 7 bytes,
/// else a new owned Str (Bytes) object (string.cc). Throws on failure.
void MakeStringAny(const char* data, size_t size, bool is_bytes, KFFIAny* out);

// Reference counting: the protocol is implemented once, in kffi/object.h (HeaderIncRef,
// HeaderDecRef, ...), inline, so the runtime's own updates do not go through the exported
// symbols' PLT entries.

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
  InitObjectHeader(obj, type_index, &RuntimePayloadDeleter<Payload>);
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

#endif  // KFFI_SRC_CORE_RUNTIME_INTERNAL_H_
