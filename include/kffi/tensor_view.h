// include/kffi/tensor_view.h: TensorView and ConstTensorView (borrowed tensors) with their
// shapes, strides and accessors, over c_api.h alone: what a CUDA file needs, parsed fast by nvcc.
// SPDX-License-Identifier: Apache-2.0
#ifndef KFFI_TENSOR_VIEW_H_
#define KFFI_TENSOR_VIEW_H_

// Everything here builds on kffi/details/core.h and kffi/details/dtype_of.h, never on the object,
// string or container headers: a CUDA source that includes only this header costs nvcc's three
// front ends (cudafe++, cicc, the host compiler) next to nothing, while kffi.compile exports its
// function from a C++ file beside it. kffi/tensor.h builds Tensor on top and defines the views'
// constructors from a Tensor. The cold paths raise their error in the runtime and throw it
// through details::ThrowRaisedErrorOutOfLine, which kffi/error.h defines: a library needs one
// translation unit that includes <kffi/kffi.h> (its export).

#include <kffi/details/core.h>
#include <kffi/details/dtype_of.h>
#include <kffi/tensor_accessor.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <type_traits>

namespace kffi {

class Tensor;
template <typename T, typename>
struct TypeTraits;

namespace details {
/// The owned copy ToVector() returns: std::vector<T>, defined by kffi/tensor_layout.h (with
/// <vector>); only declared here, so that a file which includes only this header compiles no
/// container (and cannot call ToVector()).
template <typename T>
struct VectorOf;
}  // namespace details

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
  /// An owned copy, a std::vector<int64_t> (which kffi/tensor_layout.h makes available).
  template <typename Int = int64_t>
  typename details::VectorOf<Int>::type ToVector() const {
    static_assert(std::is_same_v<Int, int64_t>, "ToVector() makes a std::vector<int64_t>");
    return typename details::VectorOf<Int>::type(begin(), end());
  }

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
    ThrowRaisedErrorOutOfLine();
  }
#endif
  KFFIErrorSetRaisedShapeTooLarge(what, shape.data(), static_cast<int32_t>(shape.size()), why);
  ThrowRaisedErrorOutOfLine();
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
  StrideArray(StrideArray&& other) noexcept : size_(other.size_), heap_(other.heap_) {
    if (other.data_ == other.inline_) {
      std::memcpy(inline_, other.inline_, sizeof(inline_));
      data_ = inline_;
    } else {
      data_ = other.data_;
    }
    other.heap_ = nullptr;  // the moved-from array is empty
    other.data_ = nullptr;
    other.size_ = 0;
  }
  StrideArray& operator=(const StrideArray& other) {
    if (this != &other) {
      std::free(heap_);
      heap_ = nullptr;
      size_ = other.size_;
      CopyFrom(other);
    }
    return *this;
  }
  ~StrideArray() { std::free(heap_); }

  const int64_t* data() const noexcept { return data_; }
  size_t size() const noexcept { return size_; }
  bool empty() const noexcept { return size_ == 0; }
  const int64_t& operator[](size_t i) const noexcept { return data_[i]; }
  const int64_t* begin() const noexcept { return data_; }
  const int64_t* end() const noexcept { return data_ + size_; }
  /// True when the values were computed (the tensor had NULL strides).
  bool computed() const noexcept { return data_ == inline_ || heap_ != nullptr; }
  /// An owned copy, a std::vector<int64_t> (as IntArrayView::ToVector).
  template <typename Int = int64_t>
  typename details::VectorOf<Int>::type ToVector() const {
    static_assert(std::is_same_v<Int, int64_t>, "ToVector() makes a std::vector<int64_t>");
    return typename details::VectorOf<Int>::type(begin(), end());
  }
  /// A view; valid while this StrideArray lives.
  IntArrayView view() const noexcept { return IntArrayView(data_, size_); }

 private:
  int64_t* InitOwned() {
    if (size_ <= kInlineSize) {
      data_ = inline_;
      return inline_;
    }
    // malloc, not std::vector: this header stays free of the standard containers (nvcc parses it).
    size_t bytes = 0;
    if (!details::AllocBytes(0, size_, sizeof(int64_t), &bytes)) ThrowStridesNoMemory();
    heap_ = static_cast<int64_t*>(std::malloc(bytes));
    if (heap_ == nullptr) ThrowStridesNoMemory();
    data_ = heap_;
    return heap_;
  }
  [[noreturn]] KFFI_NOINLINE static void ThrowStridesNoMemory() {
    KFFIErrorSetRaisedFromCStr("MemoryError", "Cannot allocate the computed strides of a tensor");
    details::ThrowRaisedErrorOutOfLine();
  }
  void CopyFrom(const StrideArray& other) {
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
  int64_t* heap_ = nullptr;  // owned (malloc) when more than kInlineSize values were computed
};

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

namespace details {

/// IndexError: a dimension index outside [-ndim, ndim) (cold).
[[noreturn]] KFFI_NOINLINE inline void ThrowDimOutOfRange(int64_t dim, int32_t ndim) {
  const Int64Text got = FormatInt64(dim);
  if (ndim == 0) {
    const char* parts[] = {
        "Dimension out of range: the tensor has no dimensions (ndim=0), but got dimension ",
        got.text};
    KFFIErrorSetRaisedFromCStrParts("IndexError", parts, 2);
  } else {
    const Int64Text low = FormatInt64(-static_cast<int64_t>(ndim));
    const Int64Text high = FormatInt64(static_cast<int64_t>(ndim) - 1);
    const char* parts[] = {"Dimension out of range (expected to be in range of [",
                           low.text,
                           ", ",
                           high.text,
                           "], but got ",
                           got.text,
                           ")"};
    KFFIErrorSetRaisedFromCStrParts("IndexError", parts, 7);
  }
  ThrowRaisedErrorOutOfLine();
}

/// Maps a possibly negative dimension index into [0, ndim); IndexError otherwise.
inline int32_t NormalizeDim(int64_t dim, int32_t ndim) {
  if (KFFI_LIKELY(dim >= -static_cast<int64_t>(ndim) && dim < ndim)) {
    return static_cast<int32_t>(dim < 0 ? dim + ndim : dim);
  }
  ThrowDimOutOfRange(dim, ndim);
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

// The cold paths of data<T>() have the runtime write and raise their messages, with no string
// code: every kernel that calls data<T>() compiles them.

/// ValueError: a mutable data<T>() of a tensor whose memory is read-only (cold).
[[noreturn]] KFFI_NOINLINE inline void ThrowReadOnlyData() {
  KFFIErrorSetRaisedFromCStr("ValueError",
                             "Cannot write through data<T>(): the tensor is read-only (use "
                             "const_data<T>() to read it)");
  ThrowRaisedErrorOutOfLine();
}

/// TypeError: data<T>() of a tensor whose dtype is not T's (cold; debug builds check it). The
/// runtime writes the message (KFFIErrorSetRaisedDataTypeMismatch); one older than 0.5 lacks it,
/// and the error then names no dtype.
[[noreturn]] KFFI_NOINLINE inline void ThrowDataTypeMismatch(DLDataType want, DLDataType got) {
#if defined(__GNUC__) && !defined(_WIN32) && !defined(KFFI_BUILDING_RUNTIME)
  if (&KFFIErrorSetRaisedDataTypeMismatch == nullptr) {
    KFFIErrorSetRaisedFromCStr("TypeError", "data<T>(): the tensor's dtype is not T's");
    ThrowRaisedErrorOutOfLine();
  }
#endif
  KFFIErrorSetRaisedDataTypeMismatch(&want, &got);
  ThrowRaisedErrorOutOfLine();
}

/// In debug builds (NDEBUG not defined), T must be the element type of dtype when T has a dtype
/// (kffi::dtypes::of); void, char, std::byte and types without a dtype (CUDA's __half, a
/// vector type) are not checked.
template <typename T>
KFFI_INLINE void CheckElementType(DLDataType dtype) {
#ifndef NDEBUG
  using U = std::remove_cv_t<T>;
  if constexpr (DataTypeOf<U>::known) {
    constexpr DLDataType want = DataTypeOf<U>::dtype;
    if (KFFI_UNLIKELY(dtype.code != want.code || dtype.bits != want.bits ||
                      dtype.lanes != want.lanes)) {
      ThrowDataTypeMismatch(want, dtype);
    }
  }
#else
  (void)dtype;
#endif
}

/// The accessors shared by Tensor, TensorView and ConstTensorView, written once over the DLTensor
/// that Derived::GetDLTensorPtr() returns. Names follow at::Tensor (dim, sizes, size, stride,
/// numel, is_contiguous) and DLPack (ndim, shape, byte_offset).
template <typename Derived>
class TensorAccessors {
 public:
  /// Number of dimensions.
  int32_t ndim() const { return dl().ndim; }
  /// Number of dimensions, as at::Tensor::dim().
  int64_t dim() const { return dl().ndim; }
  /// The sizes, one per dimension.
  IntArrayView shape() const { return IntArrayView(dl().shape, static_cast<size_t>(dl().ndim)); }
  /// The sizes (at::Tensor spelling).
  IntArrayView sizes() const { return shape(); }
  /// Size of dimension i; negative i counts from the end; IndexError when out of range.
  int64_t size(int64_t i) const { return dl().shape[NormalizeDim(i, dl().ndim)]; }
  /// Strides in elements; computed compact strides when DLTensor.strides is NULL.
  StrideArray strides() const {
    const DLTensor& t = dl();
    if (t.strides != nullptr) return StrideArray(t.strides, static_cast<size_t>(t.ndim));
    return StrideArray::Compact(shape());
  }
  /// Stride of dimension i in elements; negative i counts from the end.
  int64_t stride(int64_t i) const {
    const DLTensor& t = dl();
    int32_t d = NormalizeDim(i, t.ndim);
    if (t.strides != nullptr) return t.strides[d];
    int64_t acc = 1;
    for (int32_t j = d + 1; j < t.ndim; ++j) {
      if (KFFI_UNLIKELY(MulOverflow(acc, t.shape[j] > 1 ? t.shape[j] : 1, &acc))) {
        ThrowLayoutTooLarge("Tensor strides", shape(), "the strides overflow int64");
      }
    }
    return acc;
  }
  /// Number of elements (1 for a 0-d tensor). Tensors kffi made or imported always fit; a
  /// borrowed DLTensor whose sizes multiply past int64 is a ValueError naming its shape.
  int64_t numel() const {
    const DLTensor& t = dl();
    int64_t n = 1;
    for (int32_t i = 0; i < t.ndim; ++i) {
      if (KFFI_UNLIKELY(MulOverflow(n, t.shape[i], &n))) {
        ThrowLayoutTooLarge("Tensor", shape(), "the number of elements overflows int64");
      }
    }
    return n;
  }
  DLDataType dtype() const { return dl().dtype; }
  DLDevice device() const { return dl().device; }
  /// DLTensor.data: the start of the allocation, WITHOUT byte_offset. The first element is at
  /// data<T>() (or const_data<T>()), which adds byte_offset: read elements through those.
  /// byte_offset is 0 for what PyTorch and NumPy export, not for every DLPack producer.
  void* data_ptr() const { return dl().data; }
  /// The first element, byte_offset included, for reading: `x.const_data<float>()[i]`.
  /// In debug builds (NDEBUG not defined) a T with a dtype (kffi::dtypes::of<T>) other than the
  /// tensor's is a TypeError: "data<float16>(): expected a tensor of float16, got a tensor of
  /// float32".
  template <typename T = void>
  const T* const_data() const {
    const DLTensor& t = dl();
    details::CheckElementType<T>(t.dtype);
    return reinterpret_cast<const T*>(static_cast<const char*>(t.data) + t.byte_offset);
  }
  /// Read access to the elements of an N-dimensional tensor: `x.const_accessor<float, 2>()[i][j]`
  /// (ValueError when ndim is not N; the dtype is checked as by const_data<T>()).
  template <typename T, size_t N>
  TensorAccessor<const T, N> const_accessor() const {
    return MakeAccessor<const T, N>(const_data<T>());
  }
  /// Offset of the first element from data_ptr(), in bytes.
  uint64_t byte_offset() const { return dl().byte_offset; }
  /// Bytes of one element (sub-byte types round up to one).
  int64_t element_size() const { return DataTypeBytes(dl().dtype); }
  /// True for compact row-major layout (see details::IsContiguousLayout).
  bool is_contiguous() const { return IsContiguousLayout(dl()); }
  /// Alias of is_contiguous() (TVM-FFI spelling).
  bool IsContiguous() const { return is_contiguous(); }

 protected:
  template <typename T, size_t N>
  TensorAccessor<T, N> MakeAccessor(T* first) const {
    const DLTensor& t = dl();
    if (KFFI_UNLIKELY(t.ndim != static_cast<int32_t>(N))) ThrowAccessorNdim(N, t.ndim);
    if (t.strides != nullptr) return TensorAccessor<T, N>(first, t.shape, t.strides);
    const StrideArray compact = StrideArray::Compact(shape());
    return TensorAccessor<T, N>(first, t.shape, compact.data());
  }
  /// The first element for writing, for the data<T>() of the writable types (Tensor,
  /// TensorView): ValueError when Derived says its memory is read-only.
  template <typename T>
  T* WritableData() const {
    if (KFFI_UNLIKELY(static_cast<const Derived*>(this)->is_read_only())) ThrowReadOnlyData();
    return const_cast<T*>(const_data<T>());
  }

 private:
  const DLTensor& dl() const { return *static_cast<const Derived*>(this)->GetDLTensorPtr(); }
};

}  // namespace details

namespace details {
/// What TensorView and ConstTensorView hold: a pointer to a DLTensor owned elsewhere and, in its
/// lowest bit (free: a DLTensor is 8-byte aligned), whether its memory is read-only. One register
/// wide on the call path.
class BorrowedTensorBits {
 public:
  /// The viewed DLTensor (borrowed).
  const DLTensor* GetDLTensorPtr() const noexcept {
    return reinterpret_cast<const DLTensor*>(bits_ & ~kReadOnlyBit);
  }
  /// True when the memory must not be written through this view.
  bool is_read_only() const noexcept { return (bits_ & kReadOnlyBit) != 0; }
  /// True when the memory may be written.
  bool is_writable() const noexcept { return (bits_ & kReadOnlyBit) == 0; }

 protected:
  static constexpr uintptr_t kReadOnlyBit = 1;
  static_assert(alignof(DLTensor) > kReadOnlyBit, "the flag needs a free low pointer bit");
  static_assert(kKFFITensorFlagReadOnly == kReadOnlyBit, "tensor_flags bit 0 maps directly");

  explicit BorrowedTensorBits(uintptr_t bits) noexcept : bits_(bits) {}
  static uintptr_t Pack(const DLTensor* t, bool read_only) noexcept {
    return reinterpret_cast<uintptr_t>(t) | (read_only ? kReadOnlyBit : 0);
  }
  uintptr_t bits_;
};
}  // namespace details

/// A borrowed tensor the function may WRITE: a pointer to a DLTensor owned elsewhere (a call
/// argument, or a Tensor that outlives the view). Eight bytes, free to copy. As a kernel
/// parameter it takes borrowed DLTensor* arguments (no reference counting) and Tensor objects,
/// and it refuses read-only memory (a read-only NumPy array, `bytes`, a JAX array, a DLPack
/// tensor marked read-only) with a ValueError naming the parameter: the signature says the
/// function may write it. Take a ConstTensorView for a tensor the function only reads; it
/// accepts read-only memory, without a copy. In metadata and signatures this parameter type is
/// `Tensor(mut)`.
class TensorView : public details::BorrowedTensorBits, public details::TensorAccessors<TensorView> {
 public:
  /// Views t (borrowed; must outlive the view). t must not be NULL. A bare DLTensor carries no
  /// read-only flag, so say it here when its memory must not be written (data<T>() then throws;
  /// prefer a ConstTensorView for such memory).
  explicit TensorView(const DLTensor* t, bool read_only = false) noexcept
      : BorrowedTensorBits(Pack(t, read_only)) {}
  /// Views a Tensor, which must outlive the view; read-only when the Tensor is (defined in
  /// kffi/tensor.h).
  inline TensorView(const Tensor& t) noexcept;  // NOLINT(*-explicit-constructor)
  /// A view of a temporary Tensor would dangle at once.
  TensorView(Tensor&&) = delete;

  /// The first element (DLTensor.data + byte_offset) as T*, for writing: `y.data<float>()[i]`.
  /// A view made read-only by hand (the constructor's flag) throws ValueError instead.
  template <typename T = void>
  T* data() const {
    return WritableData<T>();
  }
  /// Strided element access for CPU kernels: `y.accessor<float, 2>()[i][j] = v` (writable as
  /// data<T>(); ValueError when ndim is not N; debug builds check T and the indices).
  template <typename T, size_t N>
  TensorAccessor<T, N> accessor() const {
    return MakeAccessor<T, N>(WritableData<T>());
  }

 private:
  struct FromBits {};
  TensorView(FromBits, uintptr_t bits) noexcept : BorrowedTensorBits(bits) {}
  friend struct TypeTraits<TensorView, void>;
};

/// A borrowed tensor the function only READS: like TensorView, but it accepts read-only memory
/// (a read-only NumPy array, `bytes`, a JAX array) without a copy, and its data<T>() is const.
/// A TensorView or a Tensor converts to it. In metadata and signatures this parameter type is
/// `Tensor`.
class ConstTensorView : public details::BorrowedTensorBits,
                        public details::TensorAccessors<ConstTensorView> {
 public:
  /// Views t (borrowed; must outlive the view). t must not be NULL.
  explicit ConstTensorView(const DLTensor* t, bool read_only = false) noexcept
      : BorrowedTensorBits(Pack(t, read_only)) {}
  /// Views a Tensor, which must outlive the view (its read-only flag is kept; defined in
  /// kffi/tensor.h).
  inline ConstTensorView(const Tensor& t) noexcept;  // NOLINT(*-explicit-constructor)
  /// A view of a temporary Tensor would dangle at once.
  ConstTensorView(Tensor&&) = delete;
  /// The same tensor (its read-only flag is kept).
  ConstTensorView(const TensorView& t) noexcept  // NOLINT(*-explicit-constructor)
      : ConstTensorView(t.GetDLTensorPtr(), t.is_read_only()) {}

  /// The first element (DLTensor.data + byte_offset) as const T*: `x.data<float>()[i]`.
  template <typename T = void>
  const T* data() const {
    return const_data<T>();
  }
  /// Strided read access for CPU kernels: `x.accessor<float, 2>()[i][j]` (as const_accessor).
  template <typename T, size_t N>
  TensorAccessor<const T, N> accessor() const {
    return MakeAccessor<const T, N>(const_data<T>());
  }

 private:
  struct FromBits {};
  ConstTensorView(FromBits, uintptr_t bits) noexcept : BorrowedTensorBits(bits) {}
  friend struct TypeTraits<ConstTensorView, void>;
};

static_assert(sizeof(TensorView) == sizeof(void*), "TensorView stays one pointer wide");
static_assert(sizeof(ConstTensorView) == sizeof(void*), "ConstTensorView stays one pointer wide");

}  // namespace kffi

#if !defined(__GNUC__) || defined(_WIN32)
#include <kffi/error.h>  // ThrowRaisedErrorOutOfLine is inline there
#endif

#endif  // KFFI_TENSOR_VIEW_H_
