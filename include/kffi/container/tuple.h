// include/kffi/container/tuple.h: Tuple<Ts...> (std::tuple) carried across the ABI as an Array.
// SPDX-License-Identifier: Apache-2.0
#ifndef KFFI_CONTAINER_TUPLE_H_
#define KFFI_CONTAINER_TUPLE_H_

#include <kffi/container/array.h>

#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

namespace kffi {

/// A fixed-size heterogeneous value; travels as an Array of its elements.
template <typename... Ts>
using Tuple = std::tuple<Ts...>;

namespace details {
template <typename T>
struct AlwaysFalse : std::false_type {};

/// The TypeStr of each type, comma separated: "int, str".
template <typename... Ts>
std::string JoinTypeStrs() {
  std::string out;
  ((out += (out.empty() ? "" : ", ") + TypeTraits<Ts>::TypeStr()), ...);
  return out;
}
}  // namespace details

template <typename... Ts>
struct TypeTraits<std::tuple<Ts...>> {
  static_assert((TypeTraits<Ts>::convert_enabled && ...), "a Tuple element has no conversion");
  static constexpr bool convert_enabled = true;
  static constexpr size_t kArity = sizeof...(Ts);
  using Seq = std::index_sequence_for<Ts...>;

  /// A tuple has no object to borrow: pass it as an owned value, e.g. f(kffi::Any(tup)).
  template <typename Unused = void>
  static void CopyToAnyView(const std::tuple<Ts...>&, KFFIAny*) {
    static_assert(details::AlwaysFalse<Unused>::value,
                  "a kffi::Tuple cannot be passed as a borrowed view (it would need a temporary "
                  "Array); wrap it in kffi::Any first");
  }
  static void MoveToAny(std::tuple<Ts...> v, KFFIAny* r) {
    ObjectPtr<ArrayObj> arr = ArrayObj::Empty(kArity);
    std::apply(
        [&arr](auto&&... elems) {
          (arr->PushBackOwned(details::AnyUnsafe::MoveToOwnedRaw(Any(std::move(elems)))), ...);
        },
        std::move(v));
    details::RefMoveToAny(Array<Any>(std::move(arr)), r);
  }
  /// An Array of exactly kArity elements, each stored as its element type.
  static bool CheckAnyStrict(const KFFIAny* s) {
    if (s->type_index != kKFFIArray) return false;
    const KFFISeqCell* cell = details::SeqCellOf(s);
    return cell->size == static_cast<int64_t>(kArity) && AllStrict(details::SeqData(cell), Seq());
  }
  static std::tuple<Ts...> CopyFromAnyViewAfterCheck(const KFFIAny* s) {
    return ReadStrict(details::SeqData(details::SeqCellOf(s)), Seq());
  }
  /// Also accepts a List, and elements that convert.
  static std::optional<std::tuple<Ts...>> TryCastFromAnyView(const KFFIAny* s) {
    if (CheckAnyStrict(s)) return CopyFromAnyViewAfterCheck(s);
    if (!details::IsSeqIndex(s->type_index)) return std::nullopt;
    const KFFISeqCell* cell = details::SeqCellOf(s);
    if (cell->size != static_cast<int64_t>(kArity)) return std::nullopt;
    return TryReadAll(details::SeqData(cell), Seq());
  }
  static std::string TypeStr() { return "Tuple<" + details::JoinTypeStrs<Ts...>() + ">"; }
  /// `Array[size 3]` for a wrong arity, `Array[index 1: str]` for an element that does not
  /// convert.
  static std::string GetMismatchTypeInfo(const KFFIAny* s) {
    if (!details::IsSeqIndex(s->type_index)) return details::AnyTypeStr(s);
    const KFFISeqCell* cell = details::SeqCellOf(s);
    if (cell->size != static_cast<int64_t>(kArity)) {
      return details::AnyTypeStr(s) + "[size " + std::to_string(cell->size) + "]";
    }
    std::string info;
    FirstMismatch(s, details::SeqData(cell), &info, Seq());
    return info.empty() ? details::AnyTypeStr(s) : info;
  }

 private:
  template <size_t... I>
  static bool AllStrict([[maybe_unused]] const KFFIAny* d, std::index_sequence<I...>) {
    return (TypeTraits<Ts>::CheckAnyStrict(&d[I]) && ...);
  }
  template <size_t... I>
  static std::tuple<Ts...> ReadStrict([[maybe_unused]] const KFFIAny* d,
                                      std::index_sequence<I...>) {
    return std::tuple<Ts...>(TypeTraits<Ts>::CopyFromAnyViewAfterCheck(&d[I])...);
  }
  template <size_t... I>
  static std::optional<std::tuple<Ts...>> TryReadAll([[maybe_unused]] const KFFIAny* d,
                                                     std::index_sequence<I...>) {
    // The converted elements are staged in an Array (as T's own storage) and read back from
    // it, rather than kept in a tuple of optionals, which costs a copy on this slow path only.
    ObjectPtr<ArrayObj> staged = ArrayObj::Empty(kArity);
    if (!(StageOne<Ts>(&d[I], staged.get()) && ...)) return std::nullopt;
    [[maybe_unused]] const KFFIAny* s = staged->RawData();
    return std::tuple<Ts...>(details::ReadElement<Ts>(s[I])...);
  }
  template <typename T>
  static bool StageOne(const KFFIAny* v, ArrayObj* staged) {
    std::optional<T> c = TypeTraits<T>::TryCastFromAnyView(v);
    if (!c.has_value()) return false;
    staged->PushBackOwned(details::AnyUnsafe::MoveToOwnedRaw(Any(std::move(*c))));
    return true;
  }
  template <size_t... I>
  static void FirstMismatch([[maybe_unused]] const KFFIAny* s, [[maybe_unused]] const KFFIAny* d,
                            [[maybe_unused]] std::string* info, std::index_sequence<I...>) {
    // Short-circuits at the first element that does not convert.
    (void)((TypeTraits<Ts>::TryCastFromAnyView(&d[I]).has_value() ||
            (*info = details::AnyTypeStr(s) + "[index " + std::to_string(I) + ": " +
                     details::MismatchTypeInfo<Ts>(&d[I]) + "]",
             false)) &&
           ...);
  }
};

}  // namespace kffi

#endif  // KFFI_CONTAINER_TUPLE_H_
