// include/kffi/tensor_layout.h: shapes and strides: IntArrayView, StrideArray, sizes and checks.
// SPDX-License-Identifier: Apache-2.0
#ifndef KFFI_TENSOR_LAYOUT_H_
#define KFFI_TENSOR_LAYOUT_H_

#include <kffi/any.h>
#include <kffi/dtype.h>

#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <new>
#include <string>
#include <type_traits>
#include <vector>

#if defined(__GNUC__) && !defined(_WIN32) && !defined(KFFI_BUILDING_RUNTIME)
// Weak: a kernel built with these headers still loads in a runtime older than 0.5, which lacks
// the cold tensor errors' writers (the errors then carry a shorter message).
extern "C" __attribute__((weak)) void KFFIErrorSetRaisedShapeTooLarge(const char* what,
                                                                      const int64_t* shape,
                                                                      int32_t ndim,
                                                                      const char* why);
extern "C" __attribute__((weak)) void KFFIErrorSetRaisedDataTypeMismatch(
    const DLDataType* expected, const DLDataType* received);
#endif

namespace kffi {

/// A borrowed run of int64 values (a shape or strides): like std::span<const int64_t>. It does not
/// own what it points at; build it from a std::vector, a braced list `{2, 3}` or any container
/// with data() and size(), and keep that alive while the view is used.
class IntArrayView {
 public:
  using value_type = int64_t;
  using const_iterator = const int64_t*;
  using iterator = const_iterator;

  constexpr IntArrayView() noexcept = default;
  constexpr IntArrayView(const int64_t* data, size_t size) noexcept : data_(data), size_(size) {}
  // Borrowing a braced list's array is the point (as std::span does): it lives until the end of
  // the full expression, which covers a call argument. GCC warns about it anyway.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Winit-list-lifetime"
#endif
  /// From a braced list; valid until the end of the full expression (fine for arguments).
  IntArrayView(std::initializer_list<int64_t> values) noexcept  // NOLINT(*-explicit-constructor)
      : data_(values.begin()), size_(values.size()) {}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
  /// From any container of int64_t with contiguous storage (std::vector, std::array, Shape...).
  template <typename C,
            typename = std::enable_if_t<
                std::is_convertible_v<decltype(std::declval<const C&>().data()), const int64_t*> &&
                std::is_integral_v<decltype(std::declval<const C&>().size())> &&
                !std::is_same_v<std::decay_t<C>, IntArrayView>>>
  IntArrayView(const C& c) noexcept  // NOLINT(*-explicit-constructor)
      : data_(c.data()), size_(static_cast<size_t>(c.size())) {}

  constexpr const int64_t* data() const noexcept { return data_; }
  constexpr size_t size() const noexcept { return size_; }
  constexpr bool empty() const noexcept { return size_ == 0; }
  constexpr const int64_t& operator[](size_t i) const noexcept { return data_[i]; }
  constexpr const_iterator begin() const noexcept { return data_; }
  constexpr const_iterator end() const noexcept { return data_ + size_; }
  const int64_t& front() const noexcept { return data_[0]; }
  const int64_t& back() const noexcept { return data_[size_ - 1]; }
  /// An owned copy.
  std::vector<int64_t> ToVector() const { return std::vector<int64_t>(begin(), end()); }

  friend bool operator==(IntArrayView a, IntArrayView b) noexcept {
    if (a.size_ != b.size_) return false;
    for (size_t i = 0; i < a.size_; ++i) {
      if (a.data_[i] != b.data_[i]) return false;
    }
    return true;
  }
  friend bool operator!=(IntArrayView a, IntArrayView b) noexcept { return !(a == b); }

 private:
  const int64_t* data_ = nullptr;
  size_t size_ = 0;
};

/// "[2, 3]": shapes and strides print readably in error messages (found by ADL).
inline std::string KFFIToErrorString(IntArrayView v) {
  std::string out = "[";
  for (size_t i = 0; i < v.size(); ++i) {
    if (i != 0) out += ", ";
    out += std::to_string(v[i]);
  }
  return out + "]";
}

namespace details {
/// ValueError "<what>: shape [..] is too large: <why>" (cold). The runtime writes the message
/// (KFFIErrorSetRaisedShapeTooLarge): every kernel that reads numel() compiles this path, and
/// formatting code is what makes kernel builds slow. A runtime older than 0.5 lacks it: the
/// error then says what and why without the shape.
[[noreturn]] KFFI_NOINLINE inline void ThrowLayoutTooLarge(const char* what, IntArrayView shape,
                                                           const char* why) {
#if defined(__GNUC__) && !defined(_WIN32) && !defined(KFFI_BUILDING_RUNTIME)
  if (&KFFIErrorSetRaisedShapeTooLarge == nullptr) {
    const char* parts[] = {what, ": the shape is too large: ", why};
    KFFIErrorSetRaisedFromCStrParts("ValueError", parts, 3);
    ThrowRaisedError(-1);
  }
#endif
  KFFIErrorSetRaisedShapeTooLarge(what, shape.data(), static_cast<int32_t>(shape.size()), why);
  ThrowRaisedError(-1);
}
}  // namespace details

/// The strides of a tensor: a view of DLTensor.strides when the tensor has them, or compact
/// row-major strides computed into its own storage when DLTensor.strides is NULL (which DLPack
/// allows for compact tensors). Iterate it or index it; it owns computed values, so do not keep an
/// IntArrayView of a temporary one.
class StrideArray {
 public:
  static constexpr size_t kInlineSize = 8;

  /// A view of existing strides.
  StrideArray(const int64_t* data, size_t size) noexcept : data_(data), size_(size) {}
  /// Compact row-major strides of shape (a dimension of size 0 counts as 1, as in PyTorch, so
  /// that strides stay meaningful for empty tensors).
  /// A shape whose strides do not fit in int64 is a ValueError naming it.
  static StrideArray Compact(IntArrayView shape) {
    StrideArray out(nullptr, shape.size());
    int64_t* dst = out.InitOwned();
    int64_t acc = 1;
    for (size_t i = shape.size(); i-- > 0;) {
      dst[i] = acc;
      if (i == 0) break;  // the product of all sizes is no stride
      if (KFFI_UNLIKELY(details::MulOverflow(acc, shape[i] > 1 ? shape[i] : 1, &acc))) {
        details::ThrowLayoutTooLarge("Tensor strides", shape, "the strides overflow int64");
      }
    }
    return out;
  }
  StrideArray(const StrideArray& other) : size_(other.size_) { CopyFrom(other); }
  StrideArray& operator=(const StrideArray& other) {
    if (this != &other) {
      size_ = other.size_;
      CopyFrom(other);
    }
    return *this;
  }

  const int64_t* data() const noexcept { return data_; }
  size_t size() const noexcept { return size_; }
  bool empty() const noexcept { return size_ == 0; }
  const int64_t& operator[](size_t i) const noexcept { return data_[i]; }
  const int64_t* begin() const noexcept { return data_; }
  const int64_t* end() const noexcept { return data_ + size_; }
  /// True when the values were computed (the tensor had NULL strides).
  bool computed() const noexcept { return data_ == inline_ || !heap_.empty(); }
  std::vector<int64_t> ToVector() const { return std::vector<int64_t>(begin(), end()); }
  /// A view; valid while this StrideArray lives.
  IntArrayView view() const noexcept { return IntArrayView(data_, size_); }

 private:
  int64_t* InitOwned() {
    if (size_ <= kInlineSize) {
      data_ = inline_;
      return inline_;
    }
    heap_.assign(size_, 0);
    data_ = heap_.data();
    return heap_.data();
  }
  void CopyFrom(const StrideArray& other) {
    heap_.clear();
    if (!other.computed()) {
      data_ = other.data_;
      return;
    }
    int64_t* dst = InitOwned();
    if (size_ != 0) std::memcpy(dst, other.data_, size_ * sizeof(int64_t));
  }

  const int64_t* data_;
  size_t size_;
  int64_t inline_[kInlineSize];
  std::vector<int64_t> heap_;
};

inline std::string KFFIToErrorString(const StrideArray& v) { return KFFIToErrorString(v.view()); }

/// The most dimensions a tensor may have. DLPack sets no limit; this one keeps the layout that
/// kffi copies small and every loop over dimensions short. NumPy allows 64.
constexpr int32_t kMaxTensorNdim = 1024;

/// *out = the bytes of memory that a tensor's elements span from its first element (see
/// GetDataSize); false when the layout is invalid (a negative size) or a product, a sum or the
/// size in bits overflows int64.
inline bool TryGetDataSize(const DLTensor& t, int64_t* out) noexcept {
  for (int32_t i = 0; i < t.ndim; ++i) {
    if (t.shape[i] < 0) return false;
  }
  for (int32_t i = 0; i < t.ndim; ++i) {
    if (t.shape[i] == 0) {
      *out = 0;
      return true;
    }
  }
  int64_t extent = 1;
  for (int32_t i = 0; i < t.ndim; ++i) {
    if (t.strides == nullptr) {
      if (details::MulOverflow(extent, t.shape[i], &extent)) return false;
    } else if (t.strides[i] > 0) {
      int64_t span = 0;
      if (details::MulOverflow(t.shape[i] - 1, t.strides[i], &span) ||
          details::AddOverflow(extent, span, &extent)) {
        return false;
      }
    }
  }
  return TryDataTypeStorageBytes(t.dtype, extent, out);
}

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

/// Maps a possibly negative dimension index into [0, ndim); IndexError otherwise.
inline int32_t NormalizeDim(int64_t dim, int32_t ndim) {
  if (KFFI_LIKELY(dim >= -static_cast<int64_t>(ndim) && dim < ndim)) {
    return static_cast<int32_t>(dim < 0 ? dim + ndim : dim);
  }
  if (ndim == 0) {
    KFFI_THROW(IndexError) << "Dimension out of range: the tensor has no dimensions (ndim=0), but "
                           << "got dimension " << dim;
  }
  KFFI_THROW(IndexError) << "Dimension out of range (expected to be in range of [" << -ndim << ", "
                         << ndim - 1 << "], but got " << dim << ")";
}

/// True when t is compact row-major; dimensions of size 1 may have any stride and a tensor
/// without elements is contiguous (the PyTorch definition).
inline bool IsContiguousLayout(const DLTensor& t) {
  if (t.strides == nullptr) return true;
  for (int32_t i = 0; i < t.ndim; ++i) {
    if (t.shape[i] == 0) return true;
  }
  int64_t expected = 1;
  bool overflowed = false;  // expected is past int64: no stride can match it
  for (int32_t i = t.ndim; i-- > 0;) {
    if (t.shape[i] == 1) continue;
    if (overflowed || t.strides[i] != expected) return false;
    overflowed = MulOverflow(expected, t.shape[i], &expected);
  }
  return true;
}

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
