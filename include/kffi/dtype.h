// include/kffi/dtype.h: DLDataType constants, parsing/formatting and element sizes.
#ifndef KFFI_DTYPE_H_
#define KFFI_DTYPE_H_

#include <kffi/type_traits.h>

#include <cstdint>
#include <string>
#include <string_view>

namespace kffi {

/// Element types as DLDataType constants, for dispatch in kernels:
///   if (x.dtype() == kffi::dtypes::float32) { ... }
/// Equality with DLDataType (code, bits and lanes) is defined in type_traits.h.
namespace dtypes {

inline constexpr DLDataType bool_{kDLBool, 8, 1};
inline constexpr DLDataType int8{kDLInt, 8, 1};
inline constexpr DLDataType int16{kDLInt, 16, 1};
inline constexpr DLDataType int32{kDLInt, 32, 1};
inline constexpr DLDataType int64{kDLInt, 64, 1};
inline constexpr DLDataType uint8{kDLUInt, 8, 1};
inline constexpr DLDataType uint16{kDLUInt, 16, 1};
inline constexpr DLDataType uint32{kDLUInt, 32, 1};
inline constexpr DLDataType uint64{kDLUInt, 64, 1};
inline constexpr DLDataType float16{kDLFloat, 16, 1};
inline constexpr DLDataType float32{kDLFloat, 32, 1};
inline constexpr DLDataType float64{kDLFloat, 64, 1};
inline constexpr DLDataType bfloat16{kDLBfloat, 16, 1};
inline constexpr DLDataType float8_e4m3fn{kDLFloat8_e4m3fn, 8, 1};
inline constexpr DLDataType float8_e5m2{kDLFloat8_e5m2, 8, 1};
inline constexpr DLDataType float8_e4m3fnuz{kDLFloat8_e4m3fnuz, 8, 1};
inline constexpr DLDataType float8_e5m2fnuz{kDLFloat8_e5m2fnuz, 8, 1};
inline constexpr DLDataType float8_e8m0fnu{kDLFloat8_e8m0fnu, 8, 1};
/// Sub-byte: two elements share a byte in packed storage.
inline constexpr DLDataType float4_e2m1fn{kDLFloat4_e2m1fn, 4, 1};

}  // namespace dtypes

/// Formats a dtype the way the runtime does: "float32", "bfloat16", "int8x4", "bool".
inline std::string DataTypeToString(DLDataType dtype) { return details::DataTypeToString(dtype); }

/// Parses "float32", "float8_e4m3fn", "int32x4", ...; a bad string throws ValueError naming it.
inline DLDataType StringToDataType(std::string_view s) { return details::StringToDataType(s); }

/// Bits of one element, all lanes together (e.g. 128 for float32x4).
constexpr int64_t DataTypeBits(DLDataType dtype) {
  return static_cast<int64_t>(dtype.bits) * static_cast<int64_t>(dtype.lanes);
}

/// Bytes of one element, rounded up: sub-byte types (float4_e2m1fn) count as one byte, which is
/// what a padded (one element per byte) layout uses.
constexpr int64_t DataTypeBytes(DLDataType dtype) { return (DataTypeBits(dtype) + 7) / 8; }

/// *out = the bytes needed to store num_elements (>= 0) packed elements (sub-byte types share
/// bytes); false when the size in bits does not fit in int64 (more than 2^63 - 1 bits, 1 EiB),
/// the limit kffi sets on the size of any tensor.
constexpr bool TryDataTypeStorageBytes(DLDataType dtype, int64_t num_elements, int64_t* out) {
  int64_t bits = 0;
  if (details::MulOverflow(num_elements, DataTypeBits(dtype), &bits)) return false;
  *out = bits / 8 + (bits % 8 != 0 ? 1 : 0);
  return true;
}

namespace details {
/// The ValueError of a tensor size that does not fit (see TryDataTypeStorageBytes).
[[noreturn]] KFFI_NOINLINE inline void ThrowStorageSizeError(DLDataType dtype,
                                                             int64_t num_elements) {
  throw Error("ValueError", std::to_string(num_elements) + " elements of " +
                                DataTypeToString(dtype) +
                                " are too large: the size in bits exceeds 2^63 - 1");
}
}  // namespace details

/// Bytes needed to store num_elements packed elements (sub-byte types share bytes); ValueError
/// when that size does not fit (see TryDataTypeStorageBytes).
constexpr int64_t DataTypeStorageBytes(DLDataType dtype, int64_t num_elements) {
  int64_t bytes = 0;
  if (!TryDataTypeStorageBytes(dtype, num_elements, &bytes)) {
    details::ThrowStorageSizeError(dtype, num_elements);
  }
  return bytes;
}

/// True when dtype has exactly the given code and bits, with one lane.
constexpr bool DataTypeIs(DLDataType dtype, uint8_t code, uint8_t bits) {
  return dtype.code == code && dtype.bits == bits && dtype.lanes == 1;
}

}  // namespace kffi

#endif  // KFFI_DTYPE_H_
