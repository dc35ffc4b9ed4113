// include/kffi/any.h: Any (owning) and AnyView (borrowing) values, both laid out as KFFIAny.
// SPDX-License-Identifier: Apache-2.0
#ifndef KFFI_ANY_H_
#define KFFI_ANY_H_

#include <kffi/type_traits.h>

#include <optional>
#include <string>
#include <utility>

namespace kffi {

class Any;
class AnyView;

template <>
struct TypeTraits<Any> {
  static constexpr bool convert_enabled = true;
  static void CopyToAnyView(const Any& v, KFFIAny* r);
  static void MoveToAny(Any v, KFFIAny* r);
  static bool CheckAnyStrict(const KFFIAny* s);
  static Any CopyFromAnyViewAfterCheck(const KFFIAny* s);
  static std::optional<Any> TryCastFromAnyView(const KFFIAny* s);
  static std::string TypeStr() { return "Any"; }
};

template <>
struct TypeTraits<AnyView> {
  static constexpr bool convert_enabled = true;
  static void CopyToAnyView(const AnyView& v, KFFIAny* r);
  static bool CheckAnyStrict(const KFFIAny*) { return true; }
  static AnyView CopyFromAnyViewAfterCheck(const KFFIAny* s);
  static std::optional<AnyView> TryCastFromAnyView(const KFFIAny* s);
  static std::string TypeStr() { return "Any"; }
};

namespace details {
struct AnyUnsafe;

/// Builds the TypeError of a failed cast.
[[noreturn]] inline void ThrowCastError(const std::string& from, const std::string& to) {
  // A plain throw (not KFFI_THROW) so compilers see that this never returns.
  throw Error("TypeError", "Cannot convert from type `" + from + "` to `" + to + "`");
}

/// True for values that own an object reference when held by Any.
KFFI_INLINE bool IsObjectIndex(int32_t index) { return index >= kKFFIStaticObjectBegin; }
}  // namespace details

/// A borrowed value: reads arguments without taking references. It must not outlive what it
/// views (like std::string_view).
class AnyView {
 public:
  AnyView() noexcept { details::SetNone(&data_); }
  AnyView(const AnyView&) noexcept = default;
  AnyView& operator=(const AnyView&) noexcept = default;
  template <typename T, typename = std::enable_if_t<TypeTraitsNoCR<T>::convert_enabled &&
                                                    !std::is_same_v<std::decay_t<T>, Any>>>
  AnyView(const T& v) {  // NOLINT(*-explicit-constructor)
    TypeTraitsNoCR<T>::CopyToAnyView(v, &data_);
  }
  AnyView(const char* s) {  // NOLINT(*-explicit-constructor)
    TypeTraits<const char*>::CopyToAnyView(s, &data_);
  }
  AnyView(const Any& v) noexcept;  // NOLINT(*-explicit-constructor)

  /// The stored type index.
  int32_t type_index() const noexcept { return data_.type_index; }
  /// The stored type's name: "int", "str", "Tensor", ...
  std::string GetTypeKey() const { return details::AnyTypeStr(&data_); }
  bool is_none() const noexcept { return data_.type_index == kKFFINone; }
  bool operator==(std::nullptr_t) const noexcept { return is_none(); }
  bool operator!=(std::nullptr_t) const noexcept { return !is_none(); }

  /// The value as T if it is stored exactly as T (no conversion), else nullopt.
  template <typename T>
  std::optional<T> as() const {
    using Traits = TypeTraitsNoCR<T>;
    if (Traits::CheckAnyStrict(&data_)) return Traits::CopyFromAnyViewAfterCheck(&data_);
    return std::nullopt;
  }
  /// The value as T with the allowed conversions (int -> float, str -> dtype, ...), or nullopt.
  template <typename T>
  std::optional<T> try_cast() const {
    return TypeTraitsNoCR<T>::TryCastFromAnyView(&data_);
  }
  /// The value as T; throws TypeError "Cannot convert from type `str` to `int`" otherwise.
  template <typename T>
  T cast() const {
    using Traits = TypeTraitsNoCR<T>;
    if (KFFI_LIKELY(Traits::CheckAnyStrict(&data_))) {
      return Traits::CopyFromAnyViewAfterCheck(&data_);
    }
    std::optional<T> out = Traits::TryCastFromAnyView(&data_);
    if (!out.has_value())
      details::ThrowCastError(details::MismatchTypeInfo<T>(&data_), Traits::TypeStr());
    return std::move(*out);
  }

 protected:
  KFFIAny data_;
  friend struct details::AnyUnsafe;
};

/// An owned value of any kffi type: holds a reference when it stores an object.
class Any {
 public:
  Any() noexcept { details::SetNone(&data_); }
  Any(const Any& other) noexcept : data_(other.data_) { Retain(); }
  Any(Any&& other) noexcept : data_(other.data_) { details::SetNone(&other.data_); }
  /// Takes ownership of a copy of a borrowed value (strings are copied, objects retained).
  Any(const AnyView& view);  // NOLINT(*-explicit-constructor)
  template <typename T, typename = std::enable_if_t<TypeTraitsNoCR<T>::convert_enabled &&
                                                    !std::is_same_v<std::decay_t<T>, Any> &&
                                                    !std::is_same_v<std::decay_t<T>, AnyView>>>
  Any(T v) {  // NOLINT(*-explicit-constructor)
    TypeTraitsNoCR<T>::MoveToAny(std::move(v), &data_);
  }
  Any(const char* s) { TypeTraits<const char*>::MoveToAny(s, &data_); }  // NOLINT
  ~Any() { Release(); }

  Any& operator=(const Any& other) noexcept {
    Any(other).swap(*this);
    return *this;
  }
  Any& operator=(Any&& other) noexcept {
    Any(std::move(other)).swap(*this);
    return *this;
  }
  void swap(Any& other) noexcept { std::swap(data_, other.data_); }
  void reset() noexcept {
    Release();
    details::SetNone(&data_);
  }

  int32_t type_index() const noexcept { return data_.type_index; }
  std::string GetTypeKey() const { return details::AnyTypeStr(&data_); }
  bool is_none() const noexcept { return data_.type_index == kKFFINone; }
  bool operator==(std::nullptr_t) const noexcept { return is_none(); }
  bool operator!=(std::nullptr_t) const noexcept { return !is_none(); }

  /// See AnyView::as.
  template <typename T>
  std::optional<T> as() const {
    return AnyView(*this).as<T>();
  }
  /// See AnyView::try_cast.
  template <typename T>
  std::optional<T> try_cast() const {
    return AnyView(*this).try_cast<T>();
  }
  /// See AnyView::cast.
  template <typename T>
  T cast() const {
    return AnyView(*this).cast<T>();
  }

 private:
  void Retain() noexcept {
    if (details::IsObjectIndex(data_.type_index)) {
      details::ObjectUnsafe::IncRef(static_cast<Object*>(static_cast<void*>(data_.v_obj)));
    }
  }
  void Release() noexcept {
    if (details::IsObjectIndex(data_.type_index)) {
      details::ObjectUnsafe::DecRef(static_cast<Object*>(static_cast<void*>(data_.v_obj)));
    }
  }

  KFFIAny data_;
  friend struct details::AnyUnsafe;
};

static_assert(sizeof(Any) == sizeof(KFFIAny) && sizeof(AnyView) == sizeof(KFFIAny),
              "Any and AnyView must be laid out as KFFIAny");

inline AnyView::AnyView(const Any& v) noexcept : data_(reinterpret_cast<const KFFIAny&>(v)) {}

namespace details {
/// True for views that only the runtime can turn into owned values: borrowed kinds (copied or
/// moved from), objects passed with argument flags (tensor_flags), which a stored value never
/// keeps (a read-only tensor argument becomes a read-only Tensor), and plain type indices that
/// no value has (negative, or between kKFFISmallBytes and the objects), which the runtime
/// refuses with a TypeError: such a value must never be stored (a map would even take index -1
/// for one of its erased slots).
KFFI_INLINE bool NeedsOwnedConversion(const KFFIAny& v) {
  switch (v.type_index) {
    case kKFFIRawStr:
    case kKFFIByteArrayPtr:
    case kKFFIObjectRValueRef:
    case kKFFIDLTensorPtr:
      return true;
    default:
      if (v.type_index >= kKFFIStaticObjectBegin) return v.zero_padding != 0;
      return static_cast<uint32_t>(v.type_index) > static_cast<uint32_t>(kKFFISmallBytes);
  }
}
}  // namespace details

inline Any::Any(const AnyView& view) {
  const KFFIAny& src = reinterpret_cast<const KFFIAny&>(view);
  if (details::NeedsOwnedConversion(src)) {
    details::SetNone(&data_);
    if (KFFIAnyViewToOwnedAny(&src, &data_) != 0) details::ThrowRaisedError(-1);
    return;
  }
  data_ = src;
  Retain();
}

namespace details {
/// Raw access to the storage of Any/AnyView (for converters and the call path).
struct AnyUnsafe {
  static const KFFIAny* Raw(const AnyView& v) noexcept { return &v.data_; }
  static const KFFIAny* Raw(const Any& v) noexcept { return &v.data_; }
  static KFFIAny* RawMut(Any& v) noexcept { return &v.data_; }
  /// Adopts an owned raw value.
  static Any FromOwnedRaw(const KFFIAny& raw) noexcept {
    Any out;
    out.data_ = raw;
    return out;
  }
  /// Gives the value's ownership to the caller; leaves v None.
  static KFFIAny MoveToOwnedRaw(Any&& v) noexcept {
    KFFIAny out = v.data_;
    SetNone(&v.data_);
    return out;
  }
};

/// Content equality: str and bytes by their bytes, other objects by identity, plain values
/// bytewise (the ABI keeps padding zero so this is exact).
inline bool AnyRawEqual(const KFFIAny& a, const KFFIAny& b) {
  std::string_view sa, sb;
  if (ReadStrView(&a, &sa)) return ReadStrView(&b, &sb) && sa == sb;
  if (ReadBytesView(&a, &sa)) return ReadBytesView(&b, &sb) && sa == sb;
  return a.type_index == b.type_index && a.v_uint64 == b.v_uint64;
}
inline size_t AnyRawHash(const KFFIAny& a) {
  std::string_view s;
  if (ReadStrView(&a, &s)) return std::hash<std::string_view>()(s);
  if (ReadBytesView(&a, &s)) return std::hash<std::string_view>()(s) ^ 0x9e3779b97f4a7c15ULL;
  uint64_t h = a.v_uint64 * 0x9e3779b97f4a7c15ULL;
  return static_cast<size_t>(h ^ (static_cast<uint64_t>(a.type_index) << 32) ^ (h >> 29));
}
}  // namespace details

inline bool operator==(const Any& a, const Any& b) {
  return details::AnyRawEqual(*details::AnyUnsafe::Raw(a), *details::AnyUnsafe::Raw(b));
}
inline bool operator!=(const Any& a, const Any& b) { return !(a == b); }

/// Hash and equality functors that follow the content rules above (for maps keyed by Any).
struct AnyHash {
  size_t operator()(const Any& a) const { return details::AnyRawHash(*details::AnyUnsafe::Raw(a)); }
};
struct AnyEqual {
  bool operator()(const Any& a, const Any& b) const { return a == b; }
};

inline void TypeTraits<Any>::CopyToAnyView(const Any& v, KFFIAny* r) {
  *r = *details::AnyUnsafe::Raw(v);
}
inline void TypeTraits<Any>::MoveToAny(Any v, KFFIAny* r) {
  *r = details::AnyUnsafe::MoveToOwnedRaw(std::move(v));
}
inline bool TypeTraits<Any>::CheckAnyStrict(const KFFIAny* s) {
  // Borrowed-only kinds and flagged arguments must be converted (copied) first.
  return !details::NeedsOwnedConversion(*s);
}
inline Any TypeTraits<Any>::CopyFromAnyViewAfterCheck(const KFFIAny* s) {
  return Any(reinterpret_cast<const AnyView&>(*s));
}
inline std::optional<Any> TypeTraits<Any>::TryCastFromAnyView(const KFFIAny* s) {
  return Any(reinterpret_cast<const AnyView&>(*s));
}
inline void TypeTraits<AnyView>::CopyToAnyView(const AnyView& v, KFFIAny* r) {
  *r = *details::AnyUnsafe::Raw(v);
}
inline AnyView TypeTraits<AnyView>::CopyFromAnyViewAfterCheck(const KFFIAny* s) {
  return reinterpret_cast<const AnyView&>(*s);
}
inline std::optional<AnyView> TypeTraits<AnyView>::TryCastFromAnyView(const KFFIAny* s) {
  return reinterpret_cast<const AnyView&>(*s);
}

}  // namespace kffi

#endif  // KFFI_ANY_H_
