// include/kffi/tensor.h: Tensor (owning, reference counted), DLPack, and the conversions of Tensor,
// TensorView and ConstTensorView (kffi/tensor_view.h) as arguments.
// SPDX-License-Identifier: Apache-2.0
#ifndef KFFI_TENSOR_H_
#define KFFI_TENSOR_H_

#include <kffi/any.h>
#include <kffi/details/function.h>
#include <kffi/dtype.h>
#include <kffi/tensor_layout.h>
#include <kffi/tensor_view.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

namespace kffi {

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
    } catch (...) {       // in a noexcept function that runs no foreign code
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
  /// The first element (DLTensor.data + byte_offset) as T*, for writing: `t.data<float>()[i]`.
  /// A read-only tensor throws ValueError instead (read it with const_data<T>()).
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

inline TensorView::TensorView(const Tensor& t) noexcept
    : TensorView(t.GetDLTensorPtr(), t.is_read_only()) {}
inline ConstTensorView::ConstTensorView(const Tensor& t) noexcept
    : ConstTensorView(t.GetDLTensorPtr(), t.is_read_only()) {}

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
/// The Tensor object a value holds (s must be one: IsTensorObjectValue).
KFFI_INLINE const TensorObj* TensorObjectOf(const KFFIAny* s) {
  return static_cast<const TensorObj*>(
      static_cast<const Object*>(static_cast<const void*>(s->v_obj)));
}
/// The DLTensor of a tensor value (a DLTensor* argument or a Tensor object), else NULL.
KFFI_INLINE const DLTensor* TensorValuePtr(const KFFIAny* s) {
  if (KFFI_LIKELY(s->type_index == kKFFIDLTensorPtr)) return static_cast<const DLTensor*>(s->v_ptr);
  if (IsTensorObjectValue(s)) return TensorObjectOf(s);
  return nullptr;
}
/// True when the Tensor object s holds already says every flag s's tensor_flags asks for.
inline bool TensorObjectHasFlags(const KFFIAny* s) {
  const uint64_t asked = s->tensor_flags & kKFFITensorFlagReadOnly;
  return (TensorObjectOf(s)->dlpack_flags() & asked) == asked;
}
/// The borrowed-tensor bits of a tensor value (a DLTensor* argument or a Tensor object): the
/// pointer, and read-only when the argument's flags or the object say so.
KFFI_INLINE uintptr_t BorrowedBitsOf(const KFFIAny* s) {
  const uintptr_t read_only = s->tensor_flags & kKFFITensorFlagReadOnly;
  if (KFFI_LIKELY(s->type_index == kKFFIDLTensorPtr)) {
    return reinterpret_cast<uintptr_t>(s->v_ptr) | read_only;
  }
  const TensorObj* obj = TensorObjectOf(s);
  return reinterpret_cast<uintptr_t>(static_cast<const DLTensor*>(obj)) | read_only |
         (obj->dlpack_flags() & DLPACK_FLAG_BITMASK_READ_ONLY);
}
/// True for a tensor value whose memory may be written: a DLTensor* argument without the
/// read-only flag (one compare of the first eight bytes: the type index and the flags word), or
/// a Tensor object that is not read-only and not passed read-only.
KFFI_INLINE bool IsWritableTensorValue(const KFFIAny* s) {
  uint64_t head;
  std::memcpy(&head, s, sizeof(head));
  constexpr uint64_t kWritablePtr = static_cast<uint32_t>(kKFFIDLTensorPtr);  // flags word 0
  static_assert(offsetof(KFFIAny, type_index) == 0 && offsetof(KFFIAny, tensor_flags) == 4,
                "the head compare reads the type index and the flags together");
  if (KFFI_LIKELY(head == kWritablePtr)) return true;
  return IsTensorObjectValue(s) && (BorrowedBitsOf(s) & kKFFITensorFlagReadOnly) == 0;
}
/// ValueError for read-only memory given to a parameter that may write it (the argument
/// conversion prefixes the parameter).
[[noreturn]] KFFI_NOINLINE inline void ThrowReadOnlyArgument() {
  throw Error("ValueError",
              "expected a writable tensor (the function may write it), got a read-only tensor");
}
}  // namespace details

/// Tensor as a value: an owned Tensor object; only Tensor objects convert to it (a borrowed
/// DLTensor* cannot be owned). A read-only argument (tensor_flags) arrives as a read-only Tensor
/// (is_read_only(); its data<T>() throws), so a Tensor parameter takes read-only memory too.
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
  /// The argument's tensor, for the device guard (kffi/details/function.h).
  static const DLTensor* ArgTensor(const KFFIAny* s) { return details::TensorValuePtr(s); }
};

/// TensorView as a value: from a writable borrowed DLTensor* argument or Tensor object (read-only
/// memory is a ValueError); passed on as a borrowed DLTensor*. It cannot become an owned value
/// (return a Tensor instead).
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
    return details::IsWritableTensorValue(s);
  }
  KFFI_INLINE static TensorView CopyFromAnyViewAfterCheck(const KFFIAny* s) {
    return TensorView(TensorView::FromBits{}, details::BorrowedBitsOf(s));
  }
  static std::optional<TensorView> TryCastFromAnyView(const KFFIAny* s) {
    if (CheckAnyStrict(s)) return CopyFromAnyViewAfterCheck(s);
    if (s->type_index == kKFFIDLTensorPtr || details::IsTensorObjectValue(s)) {
      details::ThrowReadOnlyArgument();
    }
    return std::nullopt;
  }
  static std::string TypeStr() { return "Tensor(mut)"; }
  /// The argument's tensor, for the device guard (kffi/details/function.h).
  static const DLTensor* ArgTensor(const KFFIAny* s) { return details::TensorValuePtr(s); }
};

/// ConstTensorView as a value: from any borrowed DLTensor* argument or Tensor object, read-only
/// ones included. Passed on as a borrowed DLTensor* carrying its read-only flag.
template <>
struct TypeTraits<ConstTensorView> {
  static constexpr bool convert_enabled = true;
  static void CopyToAnyView(const ConstTensorView& v, KFFIAny* r) {
    details::SetPOD(r, kKFFIDLTensorPtr);
    r->tensor_flags = v.is_read_only() ? kKFFITensorFlagReadOnly : 0;
    r->v_ptr = const_cast<DLTensor*>(v.GetDLTensorPtr());
  }
  template <typename T = ConstTensorView>
  static void MoveToAny(T, KFFIAny*) {
    static_assert(details::kAlwaysFalse<T>,
                  "a ConstTensorView is borrowed and cannot be returned or stored as an owned "
                  "value; return a kffi::Tensor");
  }
  KFFI_INLINE static bool CheckAnyStrict(const KFFIAny* s) {
    return KFFI_LIKELY(s->type_index == kKFFIDLTensorPtr) || details::IsTensorObjectValue(s);
  }
  KFFI_INLINE static ConstTensorView CopyFromAnyViewAfterCheck(const KFFIAny* s) {
    return ConstTensorView(ConstTensorView::FromBits{}, details::BorrowedBitsOf(s));
  }
  static std::optional<ConstTensorView> TryCastFromAnyView(const KFFIAny* s) {
    if (CheckAnyStrict(s)) return CopyFromAnyViewAfterCheck(s);
    return std::nullopt;
  }
  static std::string TypeStr() { return "Tensor"; }
  /// The argument's tensor, for the device guard (kffi/details/function.h).
  static const DLTensor* ArgTensor(const KFFIAny* s) { return details::TensorValuePtr(s); }
};

/// DLTensor* as a parameter type, for C-style kernels: like TensorView, a function that takes a
/// mutable pointer may write it, so read-only memory is refused (ValueError). Take a
/// `const DLTensor*` for a tensor the function only reads.
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
    std::optional<TensorView> v = TypeTraits<TensorView>::TryCastFromAnyView(s);
    if (v.has_value()) return const_cast<DLTensor*>(v->GetDLTensorPtr());
    return std::nullopt;
  }
  static std::string TypeStr() { return "Tensor(mut)"; }
  /// The argument's tensor, for the device guard (kffi/details/function.h).
  static const DLTensor* ArgTensor(const KFFIAny* s) { return details::TensorValuePtr(s); }
};

/// const DLTensor* as a parameter type: a tensor a C-style kernel only reads (any memory,
/// read-only included, like ConstTensorView).
template <>
struct TypeTraits<const DLTensor*> {
  static constexpr bool convert_enabled = true;
  static void CopyToAnyView(const DLTensor* const& v, KFFIAny* r) {
    details::SetPOD(r, kKFFIDLTensorPtr);
    r->tensor_flags = kKFFITensorFlagReadOnly;
    r->v_ptr = const_cast<DLTensor*>(v);
  }
  static bool CheckAnyStrict(const KFFIAny* s) {
    return TypeTraits<ConstTensorView>::CheckAnyStrict(s);
  }
  static const DLTensor* CopyFromAnyViewAfterCheck(const KFFIAny* s) {
    return TypeTraits<ConstTensorView>::CopyFromAnyViewAfterCheck(s).GetDLTensorPtr();
  }
  static std::optional<const DLTensor*> TryCastFromAnyView(const KFFIAny* s) {
    if (CheckAnyStrict(s)) return CopyFromAnyViewAfterCheck(s);
    return std::nullopt;
  }
  static std::string TypeStr() { return "Tensor"; }
  /// The argument's tensor, for the device guard (kffi/details/function.h).
  static const DLTensor* ArgTensor(const KFFIAny* s) { return details::TensorValuePtr(s); }
};

}  // namespace kffi

#endif  // KFFI_TENSOR_H_
