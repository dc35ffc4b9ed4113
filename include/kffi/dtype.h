// include/kffi/dtype.h: DLDataType constants, parsing/formatting and element sizes.
// SPDX-License-Identifier: Apache-2.0
#ifndef KFFI_DTYPE_H_
#define KFFI_DTYPE_H_

#include <kffi/details/dtype_of.h>
#include <kffi/half.h>
#include <kffi/type_traits.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>

namespace kffi {

/// Formats a dtype the way the runtime does: "float32", "bfloat16", "int8x4", "bool".
inline std::string DataTypeToString(DLDataType dtype) { return details::DataTypeToString(dtype); }

/// Parses "float32", "float8_e4m3fn", "int32x4", ...; a bad string throws ValueError naming it.
inline DLDataType StringToDataType(std::string_view s) { return details::StringToDataType(s); }

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

}  // namespace kffi

#endif  // KFFI_DTYPE_H_
