// include/kffi/half.h: host and device element types kffi::half, bfloat16, float8_e4m3fn,
// float8_e5m2.
//
// Plain C++ has no 16- or 8-bit floats, so kernels that take float16/bfloat16/fp8 tensors need a
// type for their elements. These are storage types: two (or one) bytes holding the bits, converting
// to float exactly and from float with round-to-nearest-even (what a GPU's conversion does).
// Arithmetic goes through float (`kffi::half(float(a) * 2.0f)`, or implicitly: `y[i] = x[i] * f`).
//
// - half: IEEE binary16 (1-5-10), layout of CUDA's __half. bfloat16: the top half of a float
//   (1-8-7), layout of __nv_bfloat16. Both keep infinities and subnormals.
// - float8_e4m3fn (1-4-3, no infinities, one NaN pattern per sign, largest 448) and float8_e5m2
//   (1-5-2, IEEE-like), as ml_dtypes and CUDA's __nv_fp8_e4m3/__nv_fp8_e5m2 define them. From
//   float without saturation: e4m3fn turns what rounds past 448 (and infinities) into NaN,
//   e5m2 into infinity.
// - NaN stays NaN with its sign. half and bfloat16 keep the top bits of a NaN's payload and set
//   the quiet bit (what x86 F16C and CUDA's bfloat16 conversion do). On the device, half converts
//   with the hardware's instructions: the same results, except that a NaN may come out as the
//   hardware's canonical NaN.
//
// Under nvcc everything is __host__ __device__, CUDA's fp16/bf16 (and fp8, where present) headers
// are included, layout compatibility is static_asserted, and each type converts to and from its
// CUDA counterpart (`__half h = static_cast<__half>(kffi::half(1.0f))`, `kffi::half(h)`); a
// pointer may be reinterpret_cast between them. This header needs nothing else from kffi.
// SPDX-License-Identifier: Apache-2.0
#ifndef KFFI_HALF_H_
#define KFFI_HALF_H_

#include <cstdint>
#include <cstring>
#include <type_traits>

#if defined(__CUDACC__)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#if defined(__has_include)
#if __has_include(<cuda_fp8.h>)
#include <cuda_fp8.h>
#define KFFI_HAS_CUDA_FP8_ 1
#endif
#endif
#define KFFI_HOST_DEVICE __host__ __device__
#else
/// __host__ __device__ under nvcc, nothing otherwise: for small helpers used on both sides.
#define KFFI_HOST_DEVICE
#endif

namespace kffi {
namespace details {
namespace fp {

KFFI_HOST_DEVICE inline uint32_t FloatBits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
#endif
}

KFFI_HOST_DEVICE inline float BitsFloat(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
#endif
}

/// A small binary float format: kExp exponent bits, kMan mantissa bits; kIeee: the largest
/// exponent means inf/NaN (half, e5m2); otherwise only all-ones is NaN (e4m3fn).
template <int kExpBits, int kManBits, bool kIeeeLike>
struct Format {
  static constexpr int kExp = kExpBits;
  static constexpr int kMan = kManBits;
  static constexpr bool kIeee = kIeeeLike;
  static constexpr int kBias = (1 << (kExp - 1)) - 1;
  static constexpr uint32_t kSign = 1u << (kExp + kMan);
  static constexpr uint32_t kAbsMask = kSign - 1;
  static constexpr uint32_t kExpAll = ((1u << kExp) - 1) << kMan;  // inf in IEEE formats
  static constexpr uint32_t kNaN = kIeee ? (kExpAll | (1u << (kMan - 1))) : kAbsMask;  // quiet
  static constexpr uint32_t kMaxFinite = kIeee ? kExpAll - 1 : kAbsMask - 1;
};

/// The bits of a small-format value as a float: exact for every pattern.
template <typename Fmt>
KFFI_HOST_DEVICE inline float ToFloat(uint32_t b) {
  constexpr int kExp = Fmt::kExp, kMan = Fmt::kMan;
  constexpr bool kIeee = Fmt::kIeee;
  const uint32_t sign = (b & Fmt::kSign) != 0 ? 0x80000000u : 0u;
  const uint32_t abs = b & Fmt::kAbsMask;
  const uint32_t exp = abs >> kMan;
  uint32_t man = abs & ((1u << kMan) - 1);
  if (kIeee ? exp == (1u << kExp) - 1 : abs == Fmt::kAbsMask) {
    // inf, or NaN with its payload (e4m3fn has none: the float's quiet NaN).
    return BitsFloat(sign | 0x7f800000u | (kIeee ? man << (23 - kMan) : 0x400000u));
  }
  if (exp != 0) {
    return BitsFloat(sign | ((exp + 127 - Fmt::kBias) << 23) | (man << (23 - kMan)));
  }
  if (man == 0) return BitsFloat(sign);
  // Subnormal: man * 2^(1 - bias - kMan); normalise so the leading bit becomes the implicit one.
  int e = 1 - Fmt::kBias;
  while ((man & (1u << kMan)) == 0) {
    man <<= 1;
    --e;
  }
  man &= (1u << kMan) - 1;
  return BitsFloat(sign | (static_cast<uint32_t>(e + 127) << 23) | (man << (23 - kMan)));
}

/// A float rounded to nearest-even in a small format (its exponent range lies inside float's
/// normal range, so float subnormals round to zero). Overflow: inf (IEEE) or NaN (e4m3fn).
template <typename Fmt>
KFFI_HOST_DEVICE inline uint32_t FromFloat(float f) {
  constexpr int kMan = Fmt::kMan;
  constexpr bool kIeee = Fmt::kIeee;
  const uint32_t bits = FloatBits(f);
  const uint32_t sign = (bits & 0x80000000u) != 0 ? Fmt::kSign : 0u;
  const uint32_t abs = bits & 0x7fffffffu;
  if (abs > 0x7f800000u) {  // NaN: keep the top of the payload, quiet
    return sign | (kIeee ? Fmt::kNaN | ((abs >> (23 - kMan)) & ((1u << kMan) - 1)) : Fmt::kNaN);
  }
  if (abs == 0x7f800000u) return sign | (kIeee ? Fmt::kExpAll : Fmt::kNaN);
  constexpr int kShift = 23 - kMan;
  const int e = static_cast<int>(abs >> 23) - 127;
  uint32_t out;
  if (e >= 1 - Fmt::kBias) {
    // Normal in the target: rebias, then round the dropped bits (a carry moves into the exponent,
    // which is right: the largest mantissa rounds up to the next power of two).
    uint32_t v = abs - (static_cast<uint32_t>(127 - Fmt::kBias) << 23);
    v += (1u << (kShift - 1)) - 1 + ((v >> kShift) & 1u);
    out = v >> kShift;
    if (e > Fmt::kBias + 1 || out > Fmt::kMaxFinite) {
      return sign | (kIeee ? Fmt::kExpAll : Fmt::kNaN);
    }
  } else {
    // Subnormal (or zero) in the target: count units of its smallest step, 2^(1 - bias - kMan).
    const int shift = 24 - Fmt::kBias - kMan - e;       // >= kShift + 1
    if (shift >= 25 || abs < 0x00800000u) return sign;  // below half the smallest step
    const uint32_t sig = (abs & 0x7fffffu) | 0x800000u;
    out = sig >> shift;
    const uint32_t rem = sig & ((1u << shift) - 1);
    const uint32_t halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (out & 1u) != 0)) ++out;
  }
  return sign | out;
}

using HalfFormat = Format<5, 10, true>;
using E4M3Format = Format<4, 3, false>;
using E5M2Format = Format<5, 2, true>;

KFFI_HOST_DEVICE inline float BFloat16BitsToFloat(uint16_t b) {
  return BitsFloat(static_cast<uint32_t>(b) << 16);
}
KFFI_HOST_DEVICE inline uint16_t FloatToBFloat16Bits(float f) {
  uint32_t bits = FloatBits(f);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40u);
  bits += 0x7fffu + ((bits >> 16) & 1u);  // round to nearest, ties to even (inf stays inf)
  return static_cast<uint16_t>(bits >> 16);
}

/// half <-> float: the hardware's conversion on the device (NaN payloads as the hardware makes
/// them), the exact integer one on the host.
KFFI_HOST_DEVICE inline uint16_t FloatToHalfBits(float f) {
#if defined(__CUDA_ARCH__)
  return __half_as_ushort(__float2half_rn(f));
#else
  return static_cast<uint16_t>(FromFloat<HalfFormat>(f));
#endif
}
KFFI_HOST_DEVICE inline float HalfBitsToFloat(uint16_t b) {
#if defined(__CUDA_ARCH__)
  return __half2float(__ushort_as_half(b));
#else
  return ToFloat<HalfFormat>(b);
#endif
}

/// Tag for the constructors from raw bits.
struct FromBitsTag {};

}  // namespace fp
}  // namespace details

/// IEEE binary16 (numpy.float16, torch.float16): layout of CUDA's __half.
struct alignas(2) half {
  uint16_t x;  ///< the bits

  half() = default;
  /// Rounds to nearest-even; NaN stays NaN, what exceeds 65504 (after rounding) is infinity.
  KFFI_HOST_DEVICE half(float f)  // NOLINT(*-explicit-constructor): a float type converts
      : x(details::fp::FloatToHalfBits(f)) {}
  /// The value given as its 16 bits.
  KFFI_HOST_DEVICE static constexpr half from_bits(uint16_t bits) {
    return half(details::fp::FromBitsTag{}, bits);
  }
  /// Exact.
  KFFI_HOST_DEVICE operator float() const {  // NOLINT(*-explicit-constructor)
    return details::fp::HalfBitsToFloat(x);
  }
#if defined(__CUDACC__)
  KFFI_HOST_DEVICE half(__half h)  // NOLINT(*-explicit-constructor)
      : x(static_cast<__half_raw>(h).x) {}
  KFFI_HOST_DEVICE explicit operator __half() const {
    __half_raw r;
    r.x = x;
    return __half(r);
  }
#endif

 private:
  KFFI_HOST_DEVICE constexpr half(details::fp::FromBitsTag, uint16_t bits) : x(bits) {}
};

/// bfloat16 (ml_dtypes.bfloat16, torch.bfloat16): the top 16 bits of a float; layout of CUDA's
/// __nv_bfloat16.
struct alignas(2) bfloat16 {
  uint16_t x;  ///< the bits

  bfloat16() = default;
  /// Rounds to nearest-even; NaN stays NaN (quiet).
  KFFI_HOST_DEVICE bfloat16(float f)  // NOLINT(*-explicit-constructor)
      : x(details::fp::FloatToBFloat16Bits(f)) {}
  KFFI_HOST_DEVICE static constexpr bfloat16 from_bits(uint16_t bits) {
    return bfloat16(details::fp::FromBitsTag{}, bits);
  }
  /// Exact.
  KFFI_HOST_DEVICE operator float() const {  // NOLINT(*-explicit-constructor)
    return details::fp::BFloat16BitsToFloat(x);
  }
#if defined(__CUDACC__)
  KFFI_HOST_DEVICE bfloat16(__nv_bfloat16 h)  // NOLINT(*-explicit-constructor)
      : x(static_cast<__nv_bfloat16_raw>(h).x) {}
  KFFI_HOST_DEVICE explicit operator __nv_bfloat16() const {
    __nv_bfloat16_raw r;
    r.x = x;
    return __nv_bfloat16(r);
  }
#endif

 private:
  KFFI_HOST_DEVICE constexpr bfloat16(details::fp::FromBitsTag, uint16_t bits) : x(bits) {}
};

/// float8_e4m3fn (ml_dtypes.float8_e4m3fn, torch.float8_e4m3fn): 1-4-3, finite only, 0x7f/0xff
/// is NaN, largest 448; layout of CUDA's __nv_fp8_e4m3.
struct alignas(1) float8_e4m3fn {
  uint8_t x;  ///< the bits

  float8_e4m3fn() = default;
  /// Rounds to nearest-even; what rounds past 448, infinities and NaN become NaN.
  KFFI_HOST_DEVICE float8_e4m3fn(float f)  // NOLINT(*-explicit-constructor)
      : x(static_cast<uint8_t>(details::fp::FromFloat<details::fp::E4M3Format>(f))) {}
  KFFI_HOST_DEVICE static constexpr float8_e4m3fn from_bits(uint8_t bits) {
    return float8_e4m3fn(details::fp::FromBitsTag{}, bits);
  }
  /// Exact.
  KFFI_HOST_DEVICE operator float() const {  // NOLINT(*-explicit-constructor)
    return details::fp::ToFloat<details::fp::E4M3Format>(x);
  }
#if defined(KFFI_HAS_CUDA_FP8_)
  KFFI_HOST_DEVICE float8_e4m3fn(__nv_fp8_e4m3 h)  // NOLINT(*-explicit-constructor)
      : x(h.__x) {}
  KFFI_HOST_DEVICE explicit operator __nv_fp8_e4m3() const {
    __nv_fp8_e4m3 r;
    r.__x = x;
    return r;
  }
#endif

 private:
  KFFI_HOST_DEVICE constexpr float8_e4m3fn(details::fp::FromBitsTag, uint8_t bits) : x(bits) {}
};

/// float8_e5m2 (ml_dtypes.float8_e5m2, torch.float8_e5m2): 1-5-2 with infinities and NaN,
/// largest 57344; layout of CUDA's __nv_fp8_e5m2.
struct alignas(1) float8_e5m2 {
  uint8_t x;  ///< the bits

  float8_e5m2() = default;
  /// Rounds to nearest-even; what rounds past 57344 becomes infinity; NaN stays NaN.
  KFFI_HOST_DEVICE float8_e5m2(float f)  // NOLINT(*-explicit-constructor)
      : x(static_cast<uint8_t>(details::fp::FromFloat<details::fp::E5M2Format>(f))) {}
  KFFI_HOST_DEVICE static constexpr float8_e5m2 from_bits(uint8_t bits) {
    return float8_e5m2(details::fp::FromBitsTag{}, bits);
  }
  /// Exact.
  KFFI_HOST_DEVICE operator float() const {  // NOLINT(*-explicit-constructor)
    return details::fp::ToFloat<details::fp::E5M2Format>(x);
  }
#if defined(KFFI_HAS_CUDA_FP8_)
  KFFI_HOST_DEVICE float8_e5m2(__nv_fp8_e5m2 h)  // NOLINT(*-explicit-constructor)
      : x(h.__x) {}
  KFFI_HOST_DEVICE explicit operator __nv_fp8_e5m2() const {
    __nv_fp8_e5m2 r;
    r.__x = x;
    return r;
  }
#endif

 private:
  KFFI_HOST_DEVICE constexpr float8_e5m2(details::fp::FromBitsTag, uint8_t bits) : x(bits) {}
};

// Trivial, standard-layout storage of exactly their bits: arrays of them are arrays of the bits,
// so a tensor's data<kffi::half>() is its float16 elements.
static_assert(sizeof(half) == 2 && alignof(half) == 2, "half is two bytes");
static_assert(sizeof(bfloat16) == 2 && alignof(bfloat16) == 2, "bfloat16 is two bytes");
static_assert(sizeof(float8_e4m3fn) == 1 && sizeof(float8_e5m2) == 1, "fp8 is one byte");
static_assert(std::is_trivially_copyable_v<half> && std::is_standard_layout_v<half> &&
                  std::is_trivially_copyable_v<bfloat16> && std::is_standard_layout_v<bfloat16> &&
                  std::is_trivially_copyable_v<float8_e4m3fn> &&
                  std::is_trivially_copyable_v<float8_e5m2>,
              "the element types are plain storage");
#if defined(__CUDACC__)
static_assert(sizeof(half) == sizeof(__half) && alignof(half) == alignof(__half),
              "kffi::half has the layout of __half");
static_assert(sizeof(bfloat16) == sizeof(__nv_bfloat16) &&
                  alignof(bfloat16) == alignof(__nv_bfloat16),
              "kffi::bfloat16 has the layout of __nv_bfloat16");
#endif
#if defined(KFFI_HAS_CUDA_FP8_)
static_assert(sizeof(float8_e4m3fn) == sizeof(__nv_fp8_e4m3) &&
                  alignof(float8_e4m3fn) == alignof(__nv_fp8_e4m3) &&
                  sizeof(float8_e5m2) == sizeof(__nv_fp8_e5m2) &&
                  alignof(float8_e5m2) == alignof(__nv_fp8_e5m2),
              "kffi's fp8 types have the layout of __nv_fp8_e4m3 / __nv_fp8_e5m2");
#endif

}  // namespace kffi

#endif  // KFFI_HALF_H_
