// include/kffi/tensor_layout.h: the checks of a tensor layout kffi makes or imports, and the
// text and std::vector forms of IntArrayView and StrideArray (kffi/tensor_view.h).
// SPDX-License-Identifier: Apache-2.0
#ifndef KFFI_TENSOR_LAYOUT_H_
#define KFFI_TENSOR_LAYOUT_H_

#include <kffi/any.h>
#include <kffi/dtype.h>
#include <kffi/tensor_view.h>

#include <cstdint>
#include <string>
#include <vector>

namespace kffi {

namespace details {
template <typename T>
struct VectorOf {
  using type = std::vector<T>;
};
}  // namespace details

/// "[2, 3]": shapes and strides print readably in error messages (found by ADL).
inline std::string KFFIToErrorString(IntArrayView v) {
  std::string out = "[";
  for (size_t i = 0; i < v.size(); ++i) {
    if (i != 0) out += ", ";
    out += std::to_string(v[i]);
  }
  return out + "]";
}

inline std::string KFFIToErrorString(const StrideArray& v) { return KFFIToErrorString(v.view()); }

/// Bytes of memory that a tensor's elements span from its first element: the packed size for a
/// compact tensor, the extent reached by the strides otherwise (negative strides are not
/// counted). An allocator's AllocData uses it to size the buffer. A size that does not fit (see
/// TryGetDataSize) is a ValueError naming the shape.
inline int64_t GetDataSize(const DLTensor& t) {
  int64_t bytes = 0;
  if (KFFI_UNLIKELY(!TryGetDataSize(t, &bytes))) {
    details::ThrowLayoutTooLarge("Tensor", IntArrayView(t.shape, static_cast<size_t>(t.ndim)),
                                 "its size in bits exceeds 2^63 - 1 (or a size is negative)");
  }
  return bytes;
}

namespace details {

/// Whether dtype can be a tensor's element type: at least 1 bit and 1 lane (a dtype of 0 bits or
/// 0 lanes has elements of no size, so every size check of the tensor would pass).
KFFI_INLINE bool IsElementDType(DLDataType dtype) { return dtype.bits != 0 && dtype.lanes != 0; }

/// The ValueError for a dtype that IsElementDType refuses: "<what>: dtype (code=C, bits=B,
/// lanes=L) has 0 bits per lane ...".
[[noreturn]] inline void ThrowNotElementDType(DLDataType dtype, const char* what) {
  KFFI_THROW(ValueError) << what << ": dtype (code=" << static_cast<int>(dtype.code)
                         << ", bits=" << static_cast<int>(dtype.bits)
                         << ", lanes=" << static_cast<int>(dtype.lanes) << ") has "
                         << (dtype.bits == 0 ? "0 bits per lane" : "0 lanes")
                         << ": a tensor's elements need at least 1 bit and 1 lane";
}

/// The sizes check of every layout kffi makes or imports: a dtype with elements of some size
/// (IsElementDType), ndim in [0, kMaxTensorNdim], no negative size, the product of the sizes (0
/// counted as 1, so compact strides fit too) and the bytes the elements span (GetDataSize) fit in
/// int64. A ValueError "<what>: ..." naming the shape otherwise. shape may be NULL only when ndim
/// is 0; strides may be NULL (compact).
inline void CheckLayoutSizes(const int64_t* shape, const int64_t* strides, int64_t ndim,
                             DLDataType dtype, const char* what) {
  if (KFFI_UNLIKELY(!IsElementDType(dtype))) ThrowNotElementDType(dtype, what);
  if (KFFI_UNLIKELY(ndim < 0 || ndim > kMaxTensorNdim)) {
    KFFI_THROW(ValueError) << what << ": ndim " << ndim << " is out of range (0 to "
                           << kMaxTensorNdim << ")";
  }
  if (KFFI_UNLIKELY(ndim > 0 && shape == nullptr)) {
    KFFI_THROW(ValueError) << what << ": ndim " << ndim << " with a NULL shape";
  }
  IntArrayView dims(shape, static_cast<size_t>(ndim));
  int64_t span = 1;
  for (int64_t d : dims) {
    if (KFFI_UNLIKELY(d < 0)) KFFI_THROW(ValueError) << what << ": negative size in shape " << dims;
    if (KFFI_UNLIKELY(MulOverflow(span, d > 1 ? d : 1, &span))) {
      ThrowLayoutTooLarge(what, dims, "the number of elements overflows int64");
    }
  }
  DLTensor t{};
  t.ndim = static_cast<int32_t>(ndim);
  t.shape = const_cast<int64_t*>(shape);
  t.strides = const_cast<int64_t*>(strides);
  t.dtype = dtype;
  int64_t bytes = 0;
  if (KFFI_UNLIKELY(!TryGetDataSize(t, &bytes))) {
    ThrowLayoutTooLarge(what, dims,
                        "the memory it spans overflows int64 (its size in bits exceeds 2^63 - 1)");
  }
}

/// Rejects invalid or too large layouts and mismatched stride counts before anything is
/// allocated (see CheckLayoutSizes).
inline void CheckLayout(IntArrayView shape, const IntArrayView* strides, DLDataType dtype,
                        const char* what) {
  if (strides != nullptr) {
    KFFI_CHECK(strides->size() == shape.size(), ValueError)
        << what << ": shape " << shape << " has " << shape.size() << " dimensions but strides "
        << *strides << " has " << strides->size();
  }
  CheckLayoutSizes(shape.data(), strides != nullptr ? strides->data() : nullptr,
                   static_cast<int64_t>(shape.size()), dtype, what);
}
}  // namespace details
}  // namespace kffi

#endif  // KFFI_TENSOR_LAYOUT_H_
