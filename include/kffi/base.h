// include/kffi/base.h: common macros and small utilities of the C++ API.
// SPDX-License-Identifier: Apache-2.0
#ifndef KFFI_BASE_H_
#define KFFI_BASE_H_

#include <kffi/c_api.h>

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

#if defined(__GNUC__) || defined(__clang__)
#define KFFI_INLINE inline __attribute__((always_inline))
#define KFFI_NOINLINE __attribute__((noinline))
#define KFFI_LIKELY(x) __builtin_expect(!!(x), 1)
#define KFFI_UNLIKELY(x) __builtin_expect(!!(x), 0)
#else
#define KFFI_INLINE inline
#define KFFI_NOINLINE
#define KFFI_LIKELY(x) (x)
#define KFFI_UNLIKELY(x) (x)
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
  v->v_int64 = 0;
  if (size != 0) std::memcpy(v->v_bytes, data, size);
}

// ---- checked size arithmetic ----------------------------------------------------------------
// Sizes of tensors and containers come from callers, files and other languages; every product
// or sum of them goes through these, and an overflow becomes an error instead of a small number.

/// *out = a * b; returns true when the exact result does not fit (then *out is unspecified).
KFFI_INLINE constexpr bool MulOverflow(int64_t a, int64_t b, int64_t* out) {
#if defined(__GNUC__) || defined(__clang__)
  return __builtin_mul_overflow(a, b, out);
#else
  if (a != 0 && b != 0) {
    const int64_t kMax = INT64_MAX, kMin = INT64_MIN;
    if ((a > 0) == (b > 0) ? (a > 0 ? a > kMax / b : a < kMax / b)
                           : (a > 0 ? b < kMin / a : a < kMin / b)) {
      return true;
    }
  }
  *out = a * b;
  return false;
#endif
}

/// *out = a + b; returns true when the exact result does not fit.
KFFI_INLINE constexpr bool AddOverflow(int64_t a, int64_t b, int64_t* out) {
#if defined(__GNUC__) || defined(__clang__)
  return __builtin_add_overflow(a, b, out);
#else
  if ((b > 0 && a > INT64_MAX - b) || (b < 0 && a < INT64_MIN - b)) return true;
  *out = a + b;
  return false;
#endif
}

/// *out = head + count * elem_size, the bytes of one allocation; returns false when that exceeds
/// what one object may span (PTRDIFF_MAX). Callers turn false into a MemoryError.
KFFI_INLINE constexpr bool AllocBytes(size_t head, size_t count, size_t elem_size, size_t* out) {
  constexpr size_t kMax = static_cast<size_t>(PTRDIFF_MAX);
  if (head > kMax || (elem_size != 0 && count > (kMax - head) / elem_size)) return false;
  *out = head + count * elem_size;
  return true;
}

/// "1 argument", "2 arguments": a count and its noun, for messages (plural: the noun + "s"
/// unless given). The one place messages pluralize, so none says "1 dimensions".
inline std::string Counted(int64_t n, const char* noun, const char* plural = nullptr) {
  // snprintf and appends, not std::to_string and operator+: every export's translation unit
  // compiles this for its argument-count error.
  char number[24];
  std::snprintf(number, sizeof(number), "%lld ", static_cast<long long>(n));
  std::string out(number);
  out += n != 1 && plural != nullptr ? plural : noun;
  if (n != 1 && plural == nullptr) out += 's';
  return out;
}

}  // namespace details
}  // namespace kffi

#endif  // KFFI_BASE_H_
