// include/kffi/details/dtype_of.h: dtype constants, the dtype of a C++ element type and element
// sizes, over c_api.h alone (kffi/dtype.h adds the text forms; the tensor views need only these).
// SPDX-License-Identifier: Apache-2.0
#ifndef KFFI_DETAILS_DTYPE_OF_H_
#define KFFI_DETAILS_DTYPE_OF_H_

#include <kffi/details/core.h>

#include <cstdint>
#include <type_traits>

/// DLDataType values compare by code, bits and lanes.
constexpr bool operator==(const DLDataType& a, const DLDataType& b) {
  return a.code == b.code && a.bits == b.bits && a.lanes == b.lanes;
}
constexpr bool operator!=(const DLDataType& a, const DLDataType& b) { return !(a == b); }
/// DLDevice values compare by type and id.
inline bool operator==(const DLDevice& a, const DLDevice& b) {
  return a.device_type == b.device_type && a.device_id == b.device_id;
}
inline bool operator!=(const DLDevice& a, const DLDevice& b) { return !(a == b); }

namespace kffi {

// The element types of kffi/half.h, which is what defines them (DataTypeOf names them only).
struct half;
struct bfloat16;
struct float8_e4m3fn;
struct float8_e5m2;

/// Element types as DLDataType constants, for dispatch in kernels:
///   if (x.dtype() == kffi::dtypes::float32) { ... }
/// DLDataType values compare with == (code, bits and lanes).
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

namespace details {
/// The DLDataType of a C++ element type (known: whether T has one).
template <typename T>
struct DataTypeOf {
  static constexpr bool known = false;
  static constexpr DLDataType dtype{0, 0, 0};
};
#define KFFI_DATA_TYPE_OF_(T, value)             \
  template <>                                    \
  struct DataTypeOf<T> {                         \
    static constexpr bool known = true;          \
    static constexpr DLDataType dtype = (value); \
  }
KFFI_DATA_TYPE_OF_(bool, dtypes::bool_);
KFFI_DATA_TYPE_OF_(int8_t, dtypes::int8);
KFFI_DATA_TYPE_OF_(int16_t, dtypes::int16);
KFFI_DATA_TYPE_OF_(int32_t, dtypes::int32);
KFFI_DATA_TYPE_OF_(int64_t, dtypes::int64);
KFFI_DATA_TYPE_OF_(uint8_t, dtypes::uint8);
KFFI_DATA_TYPE_OF_(uint16_t, dtypes::uint16);
KFFI_DATA_TYPE_OF_(uint32_t, dtypes::uint32);
KFFI_DATA_TYPE_OF_(uint64_t, dtypes::uint64);
KFFI_DATA_TYPE_OF_(half, dtypes::float16);
KFFI_DATA_TYPE_OF_(float, dtypes::float32);
KFFI_DATA_TYPE_OF_(double, dtypes::float64);
KFFI_DATA_TYPE_OF_(bfloat16, dtypes::bfloat16);
KFFI_DATA_TYPE_OF_(float8_e4m3fn, dtypes::float8_e4m3fn);
KFFI_DATA_TYPE_OF_(float8_e5m2, dtypes::float8_e5m2);
#undef KFFI_DATA_TYPE_OF_

template <typename T>
constexpr DLDataType CheckedDataTypeOf() {
  static_assert(DataTypeOf<T>::known,
                "kffi::dtypes::of<T>: T has no dtype (bool, [u]int8..64_t, float, double, "
                "kffi::half, bfloat16, float8_e4m3fn, float8_e5m2)");
  return DataTypeOf<T>::dtype;
}
}  // namespace details

namespace dtypes {
/// The DLDataType of a C++ element type: dtypes::of<kffi::half> == dtypes::float16 (the types of
/// kffi/half.h, bool, [u]int8..64_t, float and double).
template <typename T>
inline constexpr DLDataType of = details::CheckedDataTypeOf<std::remove_cv_t<T>>();
}  // namespace dtypes

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

/// True when dtype has exactly the given code and bits, with one lane.
constexpr bool DataTypeIs(DLDataType dtype, uint8_t code, uint8_t bits) {
  return dtype.code == code && dtype.bits == bits && dtype.lanes == 1;
}

}  // namespace kffi

#endif  // KFFI_DETAILS_DTYPE_OF_H_
