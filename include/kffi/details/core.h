// include/kffi/details/core.h: the macros, checked size arithmetic and cold-error raising of every
// kffi header, over c_api.h alone (so that kffi/tensor_view.h stays light for nvcc).
// SPDX-License-Identifier: Apache-2.0
#ifndef KFFI_DETAILS_CORE_H_
#define KFFI_DETAILS_CORE_H_

#include <kffi/c_api.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>

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

#if defined(__GNUC__) && !defined(_WIN32) && !defined(KFFI_BUILDING_RUNTIME)
// Weak: a library built with these headers still loads in an older runtime, which lacks them (the
// errors then carry a shorter message): the argument errors' writer (0.4), the cold tensor
// errors' writers (0.5).
extern "C" __attribute__((weak)) void KFFIErrorSetRaisedArgument(
    const char* kind, const char* subject, const char* expected, const char* got,
    const KFFIAny* arg, int32_t index, const char* signature);
extern "C" __attribute__((weak)) void KFFIErrorSetRaisedShapeTooLarge(const char* what,
                                                                      const int64_t* shape,
                                                                      int32_t ndim,
                                                                      const char* why);
extern "C" __attribute__((weak)) void KFFIErrorSetRaisedDataTypeMismatch(
    const DLDataType* expected, const DLDataType* received);
#endif

namespace kffi {
namespace details {

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

// ---- cold errors ------------------------------------------------------------------------------
// The cold paths of the tensor views raise their error in the runtime's slot (KFFIErrorSetRaised*:
// the runtime writes the message) and then throw it as a kffi::Error through
// ThrowRaisedErrorOutOfLine, so that a CUDA file that includes only kffi/tensor_view.h compiles no
// Error class, no string code and no message formatting.

/// Throws the error this thread raised as a kffi::Error, from out of line: kffi/error.h defines it
/// (weak, so every translation unit that includes it may), and a library whose translation units
/// include only kffi/tensor_view.h needs one that includes <kffi/kffi.h> (its export has one).
#if defined(__GNUC__) && !defined(_WIN32)
[[noreturn]] void ThrowRaisedErrorOutOfLine();
#else
[[noreturn]] inline void ThrowRaisedErrorOutOfLine();  // defined inline in kffi/error.h
#endif

/// Raises an argument error in kffi's one format (KFFIErrorSetRaisedArgument, c_api.h). A
/// runtime older than 0.4 lacks it: the error then names the parameter only.
KFFI_NOINLINE inline void RaiseArgumentError(const char* kind, const char* subject,
                                             const char* expected, const char* got,
                                             const KFFIAny* arg, int32_t index, const char* sig) {
#if defined(__GNUC__) && !defined(_WIN32) && !defined(KFFI_BUILDING_RUNTIME)
  if (&KFFIErrorSetRaisedArgument == nullptr) {
    const char* parts[] = {"Invalid argument `", subject, "`"};
    KFFIErrorSetRaisedFromCStrParts(kind != nullptr ? kind : "ValueError", parts, 3);
    return;
  }
#endif
  KFFIErrorSetRaisedArgument(kind, subject, expected, got, arg, index, sig);
}

/// Room for the decimal text of any int64 and its NUL.
struct Int64Text {
  char text[24];
};

/// The decimal text of v, for the cold messages written with KFFIErrorSetRaisedFromCStrParts.
inline Int64Text FormatInt64(int64_t v) {
  Int64Text out;
  std::snprintf(out.text, sizeof(out.text), "%lld", static_cast<long long>(v));
  return out;
}

}  // namespace details
}  // namespace kffi

#endif  // KFFI_DETAILS_CORE_H_
