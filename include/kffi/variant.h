// include/kffi/variant.h: Variant<Ts...> (std::variant): a value of one of several types.
// SPDX-License-Identifier: Apache-2.0
#ifndef KFFI_VARIANT_H_
#define KFFI_VARIANT_H_

#include <kffi/any.h>

#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace kffi {

/// One of Ts...; on the ABI side it is simply the value of the alternative it holds.
template <typename... Ts>
using Variant = std::variant<Ts...>;

template <typename... Ts>
struct TypeTraits<std::variant<Ts...>> {
  static_assert(sizeof...(Ts) > 0, "a Variant needs at least one alternative");
  static_assert((TypeTraits<Ts>::convert_enabled && ...),
                "a Variant alternative has no conversion");
  static constexpr bool convert_enabled = true;
  using Seq = std::index_sequence_for<Ts...>;

  static void CopyToAnyView(const std::variant<Ts...>& v, KFFIAny* r) {
    std::visit([r](const auto& x) { TypeTraitsNoCR<decltype(x)>::CopyToAnyView(x, r); }, v);
  }
  static void MoveToAny(std::variant<Ts...> v, KFFIAny* r) {
    std::visit(
        [r](auto&& x) { TypeTraitsNoCR<decltype(x)>::MoveToAny(std::forward<decltype(x)>(x), r); },
        std::move(v));
  }
  /// Stored exactly as one of the alternatives.
  static bool CheckAnyStrict(const KFFIAny* s) {
    return (TypeTraits<Ts>::CheckAnyStrict(s) || ...);
  }
  /// The first alternative whose exact storage matches.
  static std::variant<Ts...> CopyFromAnyViewAfterCheck(const KFFIAny* s) {
    std::optional<std::variant<Ts...>> out;
    FirstStrict(s, &out, Seq());
    return std::move(*out);
  }
  /// An exact match first (so that try_cast agrees with cast), then the first alternative
  /// that converts.
  static std::optional<std::variant<Ts...>> TryCastFromAnyView(const KFFIAny* s) {
    std::optional<std::variant<Ts...>> out;
    if (!FirstStrict(s, &out, Seq())) FirstCast(s, &out, Seq());
    return out;
  }
  static std::string TypeStr() {
    std::string out;
    ((out += (out.empty() ? "" : ", ") + TypeTraits<Ts>::TypeStr()), ...);
    return "Variant<" + out + ">";
  }

 private:
  template <size_t... I>
  static bool FirstStrict(const KFFIAny* s, std::optional<std::variant<Ts...>>* out,
                          std::index_sequence<I...>) {
    return ((TypeTraits<Ts>::CheckAnyStrict(s) &&
             (out->emplace(std::in_place_index<I>, TypeTraits<Ts>::CopyFromAnyViewAfterCheck(s)),
              true)) ||
            ...);
  }
  template <size_t... I>
  static bool FirstCast(const KFFIAny* s, std::optional<std::variant<Ts...>>* out,
                        std::index_sequence<I...>) {
    return (TryOne<I, Ts>(s, out) || ...);
  }
  template <size_t I, typename T>
  static bool TryOne(const KFFIAny* s, std::optional<std::variant<Ts...>>* out) {
    std::optional<T> v = TypeTraits<T>::TryCastFromAnyView(s);
    if (!v.has_value()) return false;
    out->emplace(std::in_place_index<I>, std::move(*v));
    return true;
  }
};

}  // namespace kffi

#endif  // KFFI_VARIANT_H_
