// include/kffi/base.h: common macros and small utilities of the C++ API.
// SPDX-License-Identifier: Apache-2.0
#ifndef KFFI_BASE_H_
#define KFFI_BASE_H_

#include <kffi/c_api.h>
#include <kffi/details/core.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <type_traits>
#include <utility>
#if defined(__GLIBCXX__)
#include <cxxabi.h>
#endif

/// `catch (...)` for code whose try block may run foreign code (a Python callback, another
/// library, a deleter): it catches every exception but a thread's forced unwind, which goes on.
/// glibc ends a thread (pthread_exit, pthread_cancel; CPython ends its daemon threads so at exit)
/// by unwinding its stack, and aborts the process ("FATAL: exception not rethrown") when a
/// handler swallows that unwind. The unwind leaves through the enclosing function, which must
/// therefore not be noexcept when its try block can run foreign code. Every catch-all in kffi is
/// one of these (or rethrows). Use: try { ... } KFFI_CATCH_ALL { ... }
/// (UndefinedBehaviorSanitizer reports the catch of a forced unwind, a foreign exception bound to
/// a null reference: sanitizer builds cannot end such threads.)
#if defined(__GLIBCXX__)
#define KFFI_CATCH_ALL              \
  catch (::abi::__forced_unwind&) { \
    throw;                          \
  }                                 \
  catch (...)
#else
#define KFFI_CATCH_ALL catch (...)
#endif

#define KFFI_STR_CONCAT_(a, b) a##b
#define KFFI_STR_CONCAT(a, b) KFFI_STR_CONCAT_(a, b)

namespace kffi {
namespace details {

/// Tag for constructors that leave an object reference null on purpose (used by converters).
struct UnsafeInit {};

/// Builds a KFFIByteArray view of a std::string-like value.
KFFI_INLINE KFFIByteArray ToByteArray(const char* data, size_t size) {
  KFFIByteArray out;
  out.data = data;
  out.size = size;
  return out;
}

// ---- value headers ---------------------------------------------------------------------------
// Every KFFIAny is written through one of these, so the ABI's "zero_padding is 0 and unused
// payload bytes are 0" rule (values compare and hash bytewise) is typed once.

/// Sets the type index of a plain value and zeroes its padding; the caller writes the payload.
KFFI_INLINE void SetPOD(KFFIAny* v, int32_t type_index) {
  v->type_index = type_index;
  v->zero_padding = 0;
}

/// Resets a value to None with zeroed payload.
KFFI_INLINE void SetNone(KFFIAny* v) {
  SetPOD(v, kKFFINone);
  v->v_int64 = 0;
}

/// Stores an object (owned or borrowed, as the caller says) under its own type index.
KFFI_INLINE void SetObject(KFFIAny* v, KFFIObject* obj) {
  SetPOD(v, obj->type_index);
  v->v_obj = obj;
}

/// Stores up to 7 bytes inline as a SmallStr or SmallBytes (type_index), NUL-padded.
KFFI_INLINE void SetSmallBytes(KFFIAny* v, int32_t type_index, const char* data, size_t size) {
  v->type_index = type_index;
  v->small_str_len = static_cast<uint32_t>(size);
#if (defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__) || defined(_WIN32)
  // Every call that passes a short str copies it: two overlapping loads that cover [0, size)
  // (the overlap is the same bytes) in place of a call to memcpy, and one 8-byte store.
  uint64_t word = 0;
  if (size >= 4) {
    uint32_t head, tail;
    std::memcpy(&head, data, 4);
    std::memcpy(&tail, data + size - 4, 4);
    word = head | (static_cast<uint64_t>(tail) << (8 * (size - 4)));
  } else if (size >= 2) {
    uint16_t head, tail;
    std::memcpy(&head, data, 2);
    std::memcpy(&tail, data + size - 2, 2);
    word = head | (static_cast<uint64_t>(tail) << (8 * (size - 2)));
  } else if (size == 1) {
    word = static_cast<unsigned char>(data[0]);
  }
  std::memcpy(v->v_bytes, &word, sizeof(word));
#else
  v->v_int64 = 0;
  if (size != 0) std::memcpy(v->v_bytes, data, size);
#endif
}

/// "1 argument", "2 arguments": a count and its noun, for messages (plural: the noun + "s"
/// unless given). The one place messages pluralize, so none says "1 dimensions".
inline std::string Counted(int64_t n, const char* noun, const char* plural = nullptr) {
  // FormatInt64 and appends, not std::to_string and operator+: every export's translation unit
  // compiles this for its argument-count error.
  std::string out(FormatInt64(n).text);
  out += ' ';
  out += n != 1 && plural != nullptr ? plural : noun;
  if (n != 1 && plural == nullptr) out += 's';
  return out;
}

}  // namespace details
}  // namespace kffi

#endif  // KFFI_BASE_H_
