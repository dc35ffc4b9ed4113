// include/kffi/tensor.h: Tensor (owning, reference counted), TensorView (borrowed) and DLPack.
#ifndef KFFI_TENSOR_H_
#define KFFI_TENSOR_H_

#include <kffi/any.h>
#include <kffi/dtype.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <new>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

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
/// ValueError "<what>: shape [..] is too large: <why>" (cold).
/// The message is put together in C buffers and raised by the runtime, not built as std::string:
/// every kernel that reads numel() compiles this path, and string code is what makes kernel builds
/// slow.
[[noreturn]] KFFI_NOINLINE inline void ThrowLayoutTooLarge(const char* what, IntArrayView shape,
                                                           const char* why) {
  const size_t cap = shape.size() * 22 + 3;  // "[", ", " and up to 20 characters a size, "]"
  char* dims = static_cast<char*>(std::malloc(cap));
  if (dims == nullptr) throw std::bad_alloc();
  size_t n = 0;
  dims[n++] = '[';
  for (size_t i = 0; i < shape.size(); ++i) {
    n += static_cast<size_t>(std::snprintf(dims + n, cap - n, i == 0 ? "%lld" : ", %lld",
                                           static_cast<long long>(shape[i])));
  }
  dims[n++] = ']';
  dims[n] = '\0';
  const char* parts[] = {what, ": shape ", dims, " is too large: ", why};
  KFFIErrorSetRaisedFromCStrParts("ValueError", parts, 5);
  std::free(dims);
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

/// The sizes check of every layout kffi makes or imports: ndim in [0, kMaxTensorNdim], no
/// negative size, the product of the sizes (0 counted as 1, so compact strides fit too) and the
/// bytes the elements span (GetDataSize) fit in int64. A ValueError "<what>: ..." naming the
/// shape otherwise. shape may be NULL only when ndim is 0; strides may be NULL (compact).
inline void CheckLayoutSizes(const int64_t* shape, const int64_t* strides, int64_t ndim,
                             DLDataType dtype, const char* what) {
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

/// The accessors shared by Tensor and TensorView, written once over the DLTensor that
/// Derived::GetDLTensorPtr() returns. Names follow at::Tensor (dim, sizes, size, stride, numel,
/// is_contiguous) and DLPack (ndim, shape, byte_offset).
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
  /// DLTensor.data: the start of the allocation. The first element is at
  /// static_cast<char*>(data_ptr()) + byte_offset(); byte_offset is 0 for tensors that kffi
  /// allocates and for what PyTorch and NumPy export.
  void* data_ptr() const { return dl().data; }
  /// Offset of the first element from data_ptr(), in bytes.
  uint64_t byte_offset() const { return dl().byte_offset; }
  /// Bytes of one element (sub-byte types round up to one).
  int64_t element_size() const { return DataTypeBytes(dl().dtype); }
  /// True for compact row-major layout (see details::IsContiguousLayout).
  bool is_contiguous() const { return IsContiguousLayout(dl()); }
  /// Alias of is_contiguous() (TVM-FFI spelling).
  bool IsContiguous() const { return is_contiguous(); }

 private:
  const DLTensor& dl() const { return *static_cast<const Derived*>(this)->GetDLTensorPtr(); }
};

}  // namespace details

/// The object behind a Tensor. Its cell is a plain DLTensor directly after the object header
/// (so KFFITensorGetDLTensorPtr works from any language); kffi keeps shape and strides storage
/// after it, and subclasses keep whatever releases the data (a DLPack deleter, an allocator, the
/// tensor a view was taken from). Objects made by kffi always have non-NULL strides.
class TensorObj : public Object, public DLTensor {
 public:
  KFFI_DECLARE_STATIC_OBJECT_INFO("ffi.Tensor", TensorObj, Object, kKFFITensor, false)

  /// DLPACK_FLAG_BITMASK_* flags recorded when the tensor was imported or made (read-only,
  /// copied). The word's place, right after the DLTensor cell, is fixed since 0.3 for every
  /// object of type ffi.Tensor (or a subtype); KFFITensorGetFlags reads it from C.
  uint64_t dlpack_flags() const { return dlpack_flags_; }

 protected:
  TensorObj() : DLTensor() {}
  /// Points shape and strides at storage (room for 2 * ndim values) and fills them; strides_in
  /// NULL means compact.
  void InitLayout(int64_t* storage, IntArrayView shape_in, const int64_t* strides_in) {
    ndim = static_cast<int32_t>(shape_in.size());
    shape = storage;
    strides = storage + ndim;
    for (int32_t i = 0; i < ndim; ++i) shape[i] = shape_in[i];
    if (strides_in != nullptr) {
      for (int32_t i = 0; i < ndim; ++i) strides[i] = strides_in[i];
    } else {
      StrideArray compact = StrideArray::Compact(shape_in);
      for (int32_t i = 0; i < ndim; ++i) strides[i] = compact[i];
    }
  }

  uint64_t dlpack_flags_ = 0;
};

namespace details {

/// A tensor whose data a user allocator owns: AllocData(DLTensor*, extra...) fills data (the
/// layout is set already) and FreeData(DLTensor*) runs once when the tensor dies. The allocator's
/// code must stay loaded while such tensors live.
template <typename TAlloc>
class NDAllocTensorObj final : public TensorObj {
 public:
  NDAllocTensorObj(TAlloc alloc, IntArrayView shape_in, const int64_t* strides_in,
                   DLDataType dtype_in, DLDevice device_in)
      : alloc_(std::move(alloc)) {
    InitLayout(InplaceArrayBegin<int64_t>(this), shape_in, strides_in);
    dtype = dtype_in;
    device = device_in;
  }
  ~NDAllocTensorObj() {
    if (allocated_) alloc_.FreeData(static_cast<DLTensor*>(this));
  }
  template <typename... Extra>
  void Allocate(Extra&&... extra) {
    alloc_.AllocData(static_cast<DLTensor*>(this), std::forward<Extra>(extra)...);
    allocated_ = true;  // only now does FreeData have something to free
  }

 private:
  TAlloc alloc_;
  bool allocated_ = false;
};

/// A tensor that shares another tensor's data with its own layout; holds the source alive.
class StridedViewTensorObj final : public TensorObj {
 public:
  StridedViewTensorObj(ObjectPtr<Object> source, IntArrayView shape_in, IntArrayView strides_in,
                       uint64_t byte_offset_in)
      : source_(std::move(source)) {
    const DLTensor* src = KFFITensorGetDLTensorPtr(ObjectUnsafe::GetHandle(source_));
    InitLayout(InplaceArrayBegin<int64_t>(this), shape_in, strides_in.data());
    data = src->data;
    device = src->device;
    dtype = src->dtype;
    byte_offset = byte_offset_in;
  }
  void set_dlpack_flags(uint64_t flags) { dlpack_flags_ = flags; }

 private:
  ObjectPtr<Object> source_;
};

/// Host memory aligned to 64 bytes (a cache line; enough for any SIMD load), for FromEnvAlloc on
/// CPU when no environment allocator is set.
struct HostAlignedAlloc {
  static constexpr size_t kAlignment = 64;
  void AllocData(DLTensor* t) {
    // aligned_alloc wants a multiple of the alignment; an empty tensor still gets a real pointer.
    size_t bytes = static_cast<size_t>(GetDataSize(*t));
    size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
    t->data = std::aligned_alloc(kAlignment, rounded == 0 ? kAlignment : rounded);
    KFFI_CHECK(t->data != nullptr, MemoryError)
        << "Cannot allocate " << bytes << " bytes of host memory for a tensor";
  }
  void FreeData(DLTensor* t) { std::free(t->data); }
};

/// Collects what an environment allocator reports through its SetError callback.
struct EnvAllocErrorCtx {
  std::string kind;
  std::string message;
  bool set = false;
  static void SetError(void* ctx, const char* kind, const char* message) noexcept {
    auto* self = static_cast<EnvAllocErrorCtx*>(ctx);
    try {
      self->kind = kind != nullptr ? kind : "RuntimeError";
      self->message = message != nullptr ? message : "";
      self->set = true;
    } catch (...) {
      self->set = false;  // out of memory while recording: report a generic failure instead
    }
  }
};

}  // namespace details

/// An owning, reference-counted tensor. Copies share the tensor; the data is released once, when
/// the last reference goes (through the producer's DLPack deleter, the allocator's FreeData, or
/// the source tensor of a view). A default-constructed Tensor is undefined (defined() is false)
/// and its accessors must not be called.
class Tensor : public ObjectRef, public details::TensorAccessors<Tensor> {
 public:
  static constexpr bool _type_custom_traits = true;
  static constexpr bool _type_is_nullable = false;

  Tensor() = default;
  KFFI_DEFINE_OBJECT_REF_METHODS(Tensor, ObjectRef, TensorObj)

  /// The DLTensor cell (borrowed; valid while this Tensor lives).
  const DLTensor* GetDLTensorPtr() const { return get(); }
  /// The DLPack flags recorded at import (see TensorObj::dlpack_flags).
  uint64_t dlpack_flags() const { return get()->dlpack_flags(); }
  /// True when the producer marked the data read-only (DLPACK_FLAG_BITMASK_READ_ONLY).
  bool is_read_only() const { return (dlpack_flags() & DLPACK_FLAG_BITMASK_READ_ONLY) != 0; }
  /// True when the producer said it made a copy for us (DLPACK_FLAG_BITMASK_IS_COPIED).
  bool is_copied() const { return (dlpack_flags() & DLPACK_FLAG_BITMASK_IS_COPIED) != 0; }

  /// Takes a pre-1.0 DLPack tensor (moved: its deleter runs exactly once, when the Tensor dies,
  /// or before this throws). require_alignment: bytes the first element must be aligned to (0 =
  /// any); require_contiguous: reject strided layouts. A failed check is a ValueError.
  static Tensor FromDLPack(DLManagedTensor* from, int32_t require_alignment = 0,
                           bool require_contiguous = false) {
    KFFIObjectHandle h = nullptr;
    if (KFFITensorFromDLPack(from, require_alignment, require_contiguous ? 1 : 0, &h) != 0) {
      details::ThrowRaisedError(-1);
    }
    return Tensor(details::ObjectUnsafe::FromOwnedHandle<TensorObj>(h));
  }
  /// Takes a versioned DLPack tensor (moved, as FromDLPack). Flags are honoured: a read-only
  /// tensor reports is_read_only(); IS_COPIED is recorded. An unknown major version is refused.
  static Tensor FromDLPackVersioned(DLManagedTensorVersioned* from, int32_t require_alignment = 0,
                                    bool require_contiguous = false) {
    KFFIObjectHandle h = nullptr;
    if (KFFITensorFromDLPackVersioned(from, require_alignment, require_contiguous ? 1 : 0, &h) !=
        0) {
      details::ThrowRaisedError(-1);
    }
    return Tensor(details::ObjectUnsafe::FromOwnedHandle<TensorObj>(h));
  }
  /// Exports as a pre-1.0 DLPack tensor that keeps this tensor alive until the consumer calls its
  /// deleter (owned by the caller).
  DLManagedTensor* ToDLPack() const {
    DLManagedTensor* out = nullptr;
    if (KFFITensorToDLPack(Handle(), &out) != 0) details::ThrowRaisedError(-1);
    return out;
  }
  /// Exports as a versioned DLPack tensor (read-only flag carried over); owned by the caller.
  DLManagedTensorVersioned* ToDLPackVersioned() const {
    DLManagedTensorVersioned* out = nullptr;
    if (KFFITensorToDLPackVersioned(Handle(), &out) != 0) details::ThrowRaisedError(-1);
    return out;
  }

  /// A new compact tensor whose memory alloc provides: alloc.AllocData(DLTensor*, extra...) sets
  /// data (shape, strides, dtype and device are filled already; GetDataSize gives the bytes) and
  /// alloc.FreeData(DLTensor*) releases it when the tensor dies. alloc is stored in the tensor.
  /// The allocator's code must stay loaded while the tensor lives: prefer FromEnvAlloc for
  /// tensors returned to a framework.
  template <typename TAlloc, typename... Extra>
  static Tensor FromNDAlloc(TAlloc alloc, IntArrayView shape, DLDataType dtype, DLDevice device,
                            Extra&&... extra) {
    details::CheckLayout(shape, nullptr, dtype, "Tensor::FromNDAlloc");
    return MakeNDAlloc(std::move(alloc), shape, nullptr, dtype, device,
                       std::forward<Extra>(extra)...);
  }
  /// Like FromNDAlloc with explicit strides (in elements; e.g. column-major). Negative strides
  /// are refused (GetDataSize could not size the buffer).
  template <typename TAlloc, typename... Extra>
  static Tensor FromNDAllocStrided(TAlloc alloc, IntArrayView shape, IntArrayView strides,
                                   DLDataType dtype, DLDevice device, Extra&&... extra) {
    details::CheckLayout(shape, &strides, dtype, "Tensor::FromNDAllocStrided");
    for (int64_t s : strides) {
      KFFI_CHECK(s >= 0, ValueError)
          << "Tensor::FromNDAllocStrided: negative stride in " << strides;
    }
    return MakeNDAlloc(std::move(alloc), shape, strides.data(), dtype, device,
                       std::forward<Extra>(extra)...);
  }

  /// A new compact tensor from the environment's tensor allocator (KFFIEnvGetTensorAllocator:
  /// the calling framework's, e.g. torch.empty, so its caching allocator and memory accounting
  /// apply). Without one, CPU tensors fall back to 64-byte-aligned host memory; other devices
  /// raise RuntimeError. An error the allocator reports keeps its kind.
  static Tensor FromEnvAlloc(IntArrayView shape, DLDataType dtype, DLDevice device) {
    details::CheckLayout(shape, nullptr, dtype, "Tensor::FromEnvAlloc");
    DLPackManagedTensorAllocator alloc = KFFIEnvGetTensorAllocator();
    if (alloc != nullptr) return FromEnvAlloc(alloc, shape, dtype, device);
    if (device.device_type == kDLCPU) {
      return FromNDAlloc(details::HostAlignedAlloc(), shape, dtype, device);
    }
    KFFI_THROW(RuntimeError) << "Tensor::FromEnvAlloc: no environment allocator is set for "
                             << "device " << device << " (call KFFIEnvSetTensorAllocator, or "
                             << "pass tensors from a framework that provides one)";
  }
  /// A new tensor from a given DLPack allocator (DLPackExchangeAPI::managed_tensor_allocator).
  static Tensor FromEnvAlloc(DLPackManagedTensorAllocator alloc, IntArrayView shape,
                             DLDataType dtype, DLDevice device) {
    details::CheckLayout(shape, nullptr, dtype, "Tensor::FromEnvAlloc");
    DLTensor prototype;
    prototype.data = nullptr;
    prototype.device = device;
    prototype.ndim = static_cast<int32_t>(shape.size());
    prototype.dtype = dtype;
    prototype.shape = const_cast<int64_t*>(shape.data());
    prototype.strides = nullptr;
    prototype.byte_offset = 0;
    DLManagedTensorVersioned* managed = nullptr;
    details::EnvAllocErrorCtx err;
    if (alloc(&prototype, &managed, &err, &details::EnvAllocErrorCtx::SetError) != 0) {
      if (err.set) throw Error(err.kind, err.message);
      KFFI_THROW(RuntimeError) << "The environment tensor allocator failed for shape " << shape
                               << ", dtype " << dtype << ", device " << device
                               << " without reporting an error";
    }
    KFFI_CHECK(managed != nullptr, RuntimeError)
        << "The environment tensor allocator returned success but no tensor";
    Tensor out = FromDLPackVersioned(managed);  // owns managed from here on
    KFFI_CHECK(out.shape() == shape && out.dtype() == dtype, RuntimeError)
        << "The environment tensor allocator returned shape " << out.shape() << ", dtype "
        << out.dtype() << " for a request of shape " << shape << ", dtype " << dtype;
    return out;
  }

  /// A view of the same data and layout that is read-only (is_read_only()); this tensor when it
  /// already is. Kernels that receive such a view refuse to write it (CheckWritable).
  Tensor as_read_only() const {
    KFFI_CHECK(defined(), ValueError) << "Tensor::as_read_only: the tensor is undefined";
    if (is_read_only()) return *this;
    Tensor out = as_strided(shape(), strides().view(), byte_offset());
    static_cast<details::StridedViewTensorObj*>(const_cast<TensorObj*>(out.get()))
        ->set_dlpack_flags(DLPACK_FLAG_BITMASK_READ_ONLY);
    return out;
  }

  /// A view with its own shape, strides (elements) and byte_offset over the same data; the view
  /// keeps this tensor alive. byte_offset is from data_ptr() (not added to this tensor's); the
  /// overload without it keeps this tensor's. The read-only flag carries over. No bounds check:
  /// the caller keeps the view inside the allocation.
  Tensor as_strided(IntArrayView shape, IntArrayView strides, uint64_t byte_offset) const {
    KFFI_CHECK(defined(), ValueError) << "Tensor::as_strided: the tensor is undefined";
    details::CheckLayout(shape, &strides, dtype(), "Tensor::as_strided");
    auto obj = make_inplace_array_object<details::StridedViewTensorObj, int64_t>(
        2 * shape.size(), details::ObjectRefData(*this), shape, strides, byte_offset);
    obj->set_dlpack_flags(dlpack_flags() & DLPACK_FLAG_BITMASK_READ_ONLY);
    return Tensor(ObjectPtr<TensorObj>(std::move(obj)));
  }
  Tensor as_strided(IntArrayView shape, IntArrayView strides) const {
    return as_strided(shape, strides, byte_offset());
  }

 private:
  KFFIObjectHandle Handle() const { return details::ObjectUnsafe::GetHandle(data_); }

  template <typename TAlloc, typename... Extra>
  static Tensor MakeNDAlloc(TAlloc alloc, IntArrayView shape, const int64_t* strides,
                            DLDataType dtype, DLDevice device, Extra&&... extra) {
    using Obj = details::NDAllocTensorObj<TAlloc>;
    ObjectPtr<Obj> obj = make_inplace_array_object<Obj, int64_t>(2 * shape.size(), std::move(alloc),
                                                                 shape, strides, dtype, device);
    obj->Allocate(std::forward<Extra>(extra)...);  // if this throws, FreeData is not called
    return Tensor(ObjectPtr<TensorObj>(std::move(obj)));
  }
};

/// A borrowed tensor: a pointer to a DLTensor owned elsewhere (a call argument, or a Tensor that
/// outlives the view), and whether its memory may be written. Eight bytes, free to copy.
/// Preferred for kernel parameters: it accepts both borrowed DLTensor* arguments (no reference
/// counting) and Tensor objects. A view of an argument is read-only when the caller said so
/// (KFFIAny.tensor_flags, e.g. a read-only NumPy array or a JAX array) or the Tensor object is;
/// CheckWritable (tensor_checks.h) refuses to write such memory.
class TensorView : public details::TensorAccessors<TensorView> {
 public:
  /// Views t (borrowed; must outlive the view). t must not be NULL. A bare DLTensor carries no
  /// read-only flag, so say it here when its memory must not be written.
  explicit TensorView(const DLTensor* t, bool read_only = false) noexcept
      : bits_(reinterpret_cast<uintptr_t>(t) | (read_only ? kReadOnlyBit : 0)) {}
  /// Views a Tensor, which must outlive the view; read-only when the Tensor is.
  TensorView(const Tensor& t) noexcept  // NOLINT(*-explicit-constructor)
      : TensorView(t.GetDLTensorPtr(), t.is_read_only()) {}
  /// A view of a temporary Tensor would dangle at once.
  TensorView(Tensor&&) = delete;

  /// The viewed DLTensor (borrowed).
  const DLTensor* GetDLTensorPtr() const noexcept {
    return reinterpret_cast<const DLTensor*>(bits_ & ~kReadOnlyBit);
  }
  /// True when the memory must not be written through this view.
  bool is_read_only() const noexcept { return (bits_ & kReadOnlyBit) != 0; }
  /// True when the memory may be written (the default for tensors without flags).
  bool is_writable() const noexcept { return (bits_ & kReadOnlyBit) == 0; }

 private:
  // The read-only bit lives in the pointer's lowest bit, which a DLTensor's 8-byte alignment
  // leaves free: the view stays one register wide on the call path.
  static constexpr uintptr_t kReadOnlyBit = 1;
  static_assert(alignof(DLTensor) > kReadOnlyBit, "the flag needs a free low pointer bit");
  static_assert(kKFFITensorFlagReadOnly == kReadOnlyBit, "tensor_flags bit 0 maps directly");

  struct FromBits {};
  TensorView(FromBits, uintptr_t bits) noexcept : bits_(bits) {}

  uintptr_t bits_;
  friend struct TypeTraits<TensorView>;
};

static_assert(sizeof(TensorView) == sizeof(void*), "TensorView stays one pointer wide");

namespace details {
template <typename T>
inline constexpr bool kAlwaysFalse = false;

/// True for Tensor objects, including subclasses registered by other libraries.
KFFI_NOINLINE inline bool IsTensorSubclassValue(const KFFIAny* s) {
  return s->type_index >= kKFFIDynObjectBegin &&
         static_cast<const Object*>(static_cast<const void*>(s->v_obj))->IsInstance<TensorObj>();
}
KFFI_INLINE bool IsTensorObjectValue(const KFFIAny* s) {
  if (KFFI_LIKELY(s->type_index == kKFFITensor)) return true;
  return IsTensorSubclassValue(s);
}
/// True when the Tensor object s holds already says every flag s's tensor_flags asks for.
inline bool TensorObjectHasFlags(const KFFIAny* s) {
  const auto* obj =
      static_cast<const TensorObj*>(static_cast<const Object*>(static_cast<const void*>(s->v_obj)));
  const uint64_t asked = s->tensor_flags & kKFFITensorFlagReadOnly;
  return (obj->dlpack_flags() & asked) == asked;
}
}  // namespace details

/// Tensor as a value: an owned Tensor object; only Tensor objects convert to it (a borrowed
/// DLTensor* cannot be owned). A read-only argument (tensor_flags) arrives as a read-only Tensor.
template <>
struct TypeTraits<Tensor> {
  static constexpr bool convert_enabled = true;
  static constexpr int32_t field_static_type_index = kKFFITensor;
  /// A borrowed Tensor argument: the object, and its read-only flag in tensor_flags.
  static void CopyToAnyView(const Tensor& v, KFFIAny* r) {
    TypeTraits<ObjectRef>::CopyToAnyView(v, r);
    if (v.defined() && v.is_read_only()) r->tensor_flags = kKFFITensorFlagReadOnly;
  }
  static void MoveToAny(Tensor v, KFFIAny* r) { TypeTraits<ObjectRef>::MoveToAny(std::move(v), r); }
  /// A Tensor object whose argument flags ask for nothing the object does not already say.
  static bool CheckAnyStrict(const KFFIAny* s) {
    return details::IsTensorObjectValue(s) &&
           (KFFI_LIKELY(s->tensor_flags == 0) || details::TensorObjectHasFlags(s));
  }
  static Tensor CopyFromAnyViewAfterCheck(const KFFIAny* s) {
    return Tensor(details::ObjectUnsafe::FromBorrowedHandle<TensorObj>(s->v_obj));
  }
  static std::optional<Tensor> TryCastFromAnyView(const KFFIAny* s) {
    if (CheckAnyStrict(s)) return CopyFromAnyViewAfterCheck(s);
    if (s->type_index == kKFFIDLTensorPtr || details::IsTensorObjectValue(s)) {
      // A borrowed tensor argument (e.g. a framework tensor from Python): a Tensor that views the
      // same memory without owning it, valid while the caller's tensor is (like a TensorView);
      // or a Tensor object the caller passed read-only: a read-only view of it.
      KFFIAny owned;
      if (KFFIAnyViewToOwnedAny(s, &owned) != 0) details::ThrowRaisedError(-1);
      return Tensor(details::ObjectUnsafe::FromOwnedHandle<TensorObj>(owned.v_obj));
    }
    return std::nullopt;
  }
  static std::string TypeStr() { return "Tensor"; }
};

/// TensorView as a value: from a borrowed DLTensor* argument or a Tensor object; passed on as a
/// borrowed DLTensor* carrying its read-only flag. It cannot become an owned value (return a
/// Tensor instead).
template <>
struct TypeTraits<TensorView> {
  static constexpr bool convert_enabled = true;
  static void CopyToAnyView(const TensorView& v, KFFIAny* r) {
    details::SetPOD(r, kKFFIDLTensorPtr);
    r->tensor_flags = v.is_read_only() ? kKFFITensorFlagReadOnly : 0;
    r->v_ptr = const_cast<DLTensor*>(v.GetDLTensorPtr());
  }
  template <typename T = TensorView>
  static void MoveToAny(T, KFFIAny*) {
    static_assert(details::kAlwaysFalse<T>,
                  "a TensorView is borrowed and cannot be returned or stored as an owned value; "
                  "return a kffi::Tensor");
  }
  KFFI_INLINE static bool CheckAnyStrict(const KFFIAny* s) {
    return KFFI_LIKELY(s->type_index == kKFFIDLTensorPtr) || details::IsTensorObjectValue(s);
  }
  KFFI_INLINE static TensorView CopyFromAnyViewAfterCheck(const KFFIAny* s) {
    const uintptr_t read_only = s->tensor_flags & kKFFITensorFlagReadOnly;
    if (KFFI_LIKELY(s->type_index == kKFFIDLTensorPtr)) {
      return TensorView(TensorView::FromBits{}, reinterpret_cast<uintptr_t>(s->v_ptr) | read_only);
    }
    return FromTensorObject(s, read_only);
  }
  static std::optional<TensorView> TryCastFromAnyView(const KFFIAny* s) {
    if (CheckAnyStrict(s)) return CopyFromAnyViewAfterCheck(s);
    return std::nullopt;
  }
  static std::string TypeStr() { return "Tensor"; }

 private:
  static TensorView FromTensorObject(const KFFIAny* s, uintptr_t read_only) {
    const auto* obj = static_cast<const TensorObj*>(
        static_cast<const Object*>(static_cast<const void*>(s->v_obj)));
    read_only |= obj->dlpack_flags() & DLPACK_FLAG_BITMASK_READ_ONLY;
    return TensorView(TensorView::FromBits{},
                      reinterpret_cast<uintptr_t>(static_cast<const DLTensor*>(obj)) | read_only);
  }
};

/// DLTensor* as a parameter type, for C-style kernels: the same values TensorView accepts. A bare
/// pointer cannot say that its memory is read-only: kernels that write a tensor should take a
/// TensorView and call CheckWritable.
template <>
struct TypeTraits<DLTensor*> {
  static constexpr bool convert_enabled = true;
  static void CopyToAnyView(DLTensor* const& v, KFFIAny* r) {
    details::SetPOD(r, kKFFIDLTensorPtr);
    r->v_ptr = v;
  }
  static bool CheckAnyStrict(const KFFIAny* s) { return TypeTraits<TensorView>::CheckAnyStrict(s); }
  static DLTensor* CopyFromAnyViewAfterCheck(const KFFIAny* s) {
    return const_cast<DLTensor*>(
        TypeTraits<TensorView>::CopyFromAnyViewAfterCheck(s).GetDLTensorPtr());
  }
  static std::optional<DLTensor*> TryCastFromAnyView(const KFFIAny* s) {
    if (CheckAnyStrict(s)) return CopyFromAnyViewAfterCheck(s);
    return std::nullopt;
  }
  static std::string TypeStr() { return "Tensor"; }
};

}  // namespace kffi

#endif  // KFFI_TENSOR_H_
