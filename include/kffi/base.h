// include/kffi/base.h: common macros and small utilities of the C++ API.
#ifndef KFFI_BASE_H_
#define KFFI_BASE_H_

#include <kffi/c_api.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <utility>

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

/// Resets a value to None with zeroed payload (the ABI's "bytewise comparable" rule).
KFFI_INLINE void SetNone(KFFIAny* v) {
  v->type_index = kKFFINone;
  v->zero_padding = 0;
  v->v_int64 = 0;
}

}  // namespace details
}  // namespace kffi

#endif  // KFFI_BASE_H_
