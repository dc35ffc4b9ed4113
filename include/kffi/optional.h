// include/kffi/optional.h: Optional<T> (std::optional): None on the ABI side is nullopt.
// SPDX-License-Identifier: Apache-2.0
#ifndef KFFI_OPTIONAL_H_
#define KFFI_OPTIONAL_H_

#include <kffi/any.h>

#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace kffi {
namespace details {

/// The T of a parameter type name spelled "Optional<T>" (TypeTraits<Optional<T>>::TypeStr below):
/// true and *inner = "T"; false for any other name. The one reader of that spelling (metadata,
/// the contract's signature check, kffi.torch's schemas).
inline bool OptionalTypeInner(std::string_view text, std::string_view* inner) {
  constexpr std::string_view kOpen = "Optional<";
  if (text.size() <= kOpen.size() + 1 || text.substr(0, kOpen.size()) != kOpen ||
      text.back() != '>') {
    return false;
  }
  *inner = text.substr(kOpen.size(), text.size() - kOpen.size() - 1);
  return true;
}

}  // namespace details

/// A T or nothing; nothing travels as None.
template <typename T>
using Optional = std::optional<T>;

template <typename T>
struct TypeTraits<std::optional<T>> {
  static_assert(TypeTraits<T>::convert_enabled, "the Optional value type has no conversion");
  static constexpr bool convert_enabled = true;

  static void CopyToAnyView(const std::optional<T>& v, KFFIAny* r) {
    if (v.has_value()) {
      TypeTraits<T>::CopyToAnyView(*v, r);
    } else {
      details::SetNone(r);
    }
  }
  static void MoveToAny(std::optional<T> v, KFFIAny* r) {
    if (v.has_value()) {
      TypeTraits<T>::MoveToAny(std::move(*v), r);
    } else {
      details::SetNone(r);
    }
  }
  static bool CheckAnyStrict(const KFFIAny* s) {
    return s->type_index == kKFFINone || TypeTraits<T>::CheckAnyStrict(s);
  }
  static std::optional<T> CopyFromAnyViewAfterCheck(const KFFIAny* s) {
    // None is tested first: for a T that also accepts None (a nullable object reference) None
    // still means "no value".
    if (s->type_index == kKFFINone) return std::nullopt;
    return TypeTraits<T>::CopyFromAnyViewAfterCheck(s);
  }
  /// Engaged outer optional on success: holding nullopt for None, else the converted T.
  static std::optional<std::optional<T>> TryCastFromAnyView(const KFFIAny* s) {
    if (s->type_index == kKFFINone) return std::optional<T>(std::nullopt);
    std::optional<T> v = TypeTraits<T>::TryCastFromAnyView(s);
    if (!v.has_value()) return std::nullopt;
    return std::optional<std::optional<T>>(std::in_place, std::move(*v));
  }
  static std::string TypeStr() { return "Optional<" + TypeTraits<T>::TypeStr() + ">"; }
  /// An optional tensor parameter's tensor (NULL for None), for the device guard.
  template <typename U = T,
            typename = std::enable_if_t<details::HasArgTensor<TypeTraits<U>>::value>>
  static const DLTensor* ArgTensor(const KFFIAny* s) {
    return s->type_index == kKFFINone ? nullptr : TypeTraits<U>::ArgTensor(s);
  }
  static std::string GetMismatchTypeInfo(const KFFIAny* s) {
    return details::MismatchTypeInfo<T>(s);
  }
};

}  // namespace kffi

#endif  // KFFI_OPTIONAL_H_
