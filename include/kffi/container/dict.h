// include/kffi/container/dict.h: Dict, a mutable hash map shared by reference (like Python's).
// SPDX-License-Identifier: Apache-2.0
#ifndef KFFI_CONTAINER_DICT_H_
#define KFFI_CONTAINER_DICT_H_

#include <kffi/container/map_details.h>

#include <initializer_list>
#include <optional>
#include <string>
#include <utility>

namespace kffi {

/// The object behind a Dict (same layout as a Map: see map_details.h).
class DictObj : public details::MapObjBase {
 public:
  KFFI_DECLARE_STATIC_OBJECT_INFO("ffi.Dict", DictObj, Object, kKFFIDict, true)

  /// A new empty dict with room for capacity pairs.
  static ObjectPtr<DictObj> Empty(int64_t capacity) {
    ObjectPtr<DictObj> p = make_object<DictObj>();
    p->Reserve(capacity);
    return p;
  }
};

/// A mutable map from K to V (default Any -> Any) with reference semantics: copies alias the
/// same dict and see each other's changes. Keys are compared by AnyEqual; iteration follows
/// insertion order. A default-constructed Dict is a new empty dict, never null. Not thread safe
/// for concurrent changes.
template <typename K = Any, typename V = Any>
class Dict : public details::MapRefBase<Dict<K, V>, DictObj, K, V> {
  using Base = details::MapRefBase<Dict<K, V>, DictObj, K, V>;

 public:
  static constexpr bool _type_is_nullable = false;
  static constexpr bool _type_custom_traits = true;

  /// A new empty dict.
  Dict() : Base(details::UnsafeInit{}) { this->data_ = DictObj::Empty(0); }
  /// A new dict of pairs; a repeated key keeps its first place and its last value.
  Dict(std::initializer_list<std::pair<K, V>> init) : Dict(init.begin(), init.end()) {}
  /// A new dict of a range of pairs, converted to K and V.
  template <typename It, typename = std::enable_if_t<details::IsIterator<It>::value>>
  Dict(It first, It last) : Base(details::UnsafeInit{}) {
    this->data_ = Base::Build(first, last);
  }
  KFFI_DEFINE_OBJECT_REF_METHODS(Dict, Base, DictObj)

 private:
  /// The shared object itself (it grows in place as pairs are added).
  DictObj* Writable(int64_t /*extra*/, bool /*keep*/ = true) {
    if (this->MutableObj() == nullptr) this->data_ = DictObj::Empty(0);  // moved-from
    return this->MutableObj();
  }
  friend Base;
};

template <typename K, typename V>
struct TypeTraits<Dict<K, V>> {
  static constexpr bool convert_enabled = true;
  static void CopyToAnyView(const Dict<K, V>& v, KFFIAny* r) { details::RefToAnyView(v, r); }
  static void MoveToAny(Dict<K, V> v, KFFIAny* r) { details::RefMoveToAny(std::move(v), r); }
  /// A Dict whose keys and values are all stored as K and V (a full scan unless both are Any).
  static bool CheckAnyStrict(const KFFIAny* s) {
    return s->type_index == kKFFIDict && details::MapElementsStrict<K, V>(details::MapObjOf(s));
  }
  static Dict<K, V> CopyFromAnyViewAfterCheck(const KFFIAny* s) {
    return Dict<K, V>(details::ObjectUnsafe::FromBorrowedHandle<DictObj>(s->v_obj));
  }
  /// Also accepts a Map, and a Dict whose pairs need conversion; both give a new Dict (which no
  /// longer aliases the original).
  static std::optional<Dict<K, V>> TryCastFromAnyView(const KFFIAny* s) {
    if (CheckAnyStrict(s)) return CopyFromAnyViewAfterCheck(s);
    if (!details::IsMapIndex(s->type_index)) return std::nullopt;
    ObjectPtr<DictObj> p = details::MapConvert<DictObj, K, V>(details::MapObjOf(s));
    if (!p) return std::nullopt;
    return Dict<K, V>(std::move(p));
  }
  static std::string TypeStr() {
    return "Dict<" + TypeTraits<K>::TypeStr() + ", " + TypeTraits<V>::TypeStr() + ">";
  }
  static std::string GetMismatchTypeInfo(const KFFIAny* s) {
    return details::MapMismatchInfo<K, V>(s);
  }
};

}  // namespace kffi

#endif  // KFFI_CONTAINER_DICT_H_
