// include/kffi/container/map.h: Map, an immutable copy-on-write hash map in insertion order.
// SPDX-License-Identifier: Apache-2.0
#ifndef KFFI_CONTAINER_MAP_H_
#define KFFI_CONTAINER_MAP_H_

#include <kffi/container/map_details.h>

#include <initializer_list>
#include <optional>
#include <string>
#include <utility>

namespace kffi {

/// The object behind a Map (layout: see map_details.h).
class MapObj : public details::MapObjBase {
 public:
  KFFI_DECLARE_STATIC_OBJECT_INFO("ffi.Map", MapObj, Object, kKFFIMap, true)

  /// A new empty map with room for capacity pairs.
  static ObjectPtr<MapObj> Empty(int64_t capacity) {
    ObjectPtr<MapObj> p = make_object<MapObj>();
    p->Reserve(capacity);
    return p;
  }
};

/// An immutable map from K to V (default Any -> Any) with value semantics: copies share
/// storage, and a change (Set, erase, clear) first copies it when it is shared. Keys are
/// compared by AnyEqual (str and bytes by content, other objects by identity); iteration
/// follows insertion order. A default-constructed Map is empty, never null.
template <typename K = Any, typename V = Any>
class Map : public details::MapRefBase<Map<K, V>, MapObj, K, V> {
  using Base = details::MapRefBase<Map<K, V>, MapObj, K, V>;

 public:
  static constexpr bool _type_is_nullable = false;
  static constexpr bool _type_custom_traits = true;

  /// An empty map.
  Map() : Base(details::UnsafeInit{}) { this->data_ = MapObj::Empty(0); }
  /// From pairs; a repeated key keeps its first place and its last value.
  Map(std::initializer_list<std::pair<K, V>> init) : Map(init.begin(), init.end()) {}
  /// From a range of pairs (e.g. a std::map or std::unordered_map), converted to K and V.
  template <typename It, typename = std::enable_if_t<details::IsIterator<It>::value>>
  Map(It first, It last) : Base(details::UnsafeInit{}) {
    this->data_ = Base::Build(first, last);
  }
  /// Any typed Map is also a Map of Any (same storage, no copy).
  template <typename K2, typename V2,
            typename = std::enable_if_t<std::is_same_v<K, Any> && std::is_same_v<V, Any> &&
                                        !(std::is_same_v<K2, Any> && std::is_same_v<V2, Any>)>>
  Map(const Map<K2, V2>& other)  // NOLINT(*-explicit-constructor)
      : Base(details::UnsafeInit{}) {
    this->data_ = details::ObjectRefData(other);
  }
  KFFI_DEFINE_OBJECT_REF_METHODS(Map, Base, MapObj)

 private:
  /// The storage to change: copied when shared (or replaced by an empty one when !keep).
  MapObj* Writable(int64_t extra, bool keep = true) {
    MapObj* p = this->MutableObj();
    if (p != nullptr && p->use_count() == 1) return p;
    ObjectPtr<MapObj> q = MapObj::Empty(keep && p ? p->size() + extra : extra);
    if (keep && p != nullptr) p->CopyTo(q.get());
    this->data_ = std::move(q);
    return this->MutableObj();
  }
  friend Base;
};

template <typename K, typename V>
struct TypeTraits<Map<K, V>> {
  static constexpr bool convert_enabled = true;
  static void CopyToAnyView(const Map<K, V>& v, KFFIAny* r) { details::RefToAnyView(v, r); }
  static void MoveToAny(Map<K, V> v, KFFIAny* r) { details::RefMoveToAny(std::move(v), r); }
  /// A Map whose keys and values are all stored as K and V (a full scan unless both are Any).
  static bool CheckAnyStrict(const KFFIAny* s) {
    return s->type_index == kKFFIMap && details::MapElementsStrict<K, V>(details::MapObjOf(s));
  }
  static Map<K, V> CopyFromAnyViewAfterCheck(const KFFIAny* s) {
    return Map<K, V>(details::ObjectUnsafe::FromBorrowedHandle<MapObj>(s->v_obj));
  }
  /// Also converts keys and values (into a new Map) and accepts a Dict (copied).
  static std::optional<Map<K, V>> TryCastFromAnyView(const KFFIAny* s) {
    if (CheckAnyStrict(s)) return CopyFromAnyViewAfterCheck(s);
    if (!details::IsMapIndex(s->type_index)) return std::nullopt;
    ObjectPtr<MapObj> p = details::MapConvert<MapObj, K, V>(details::MapObjOf(s));
    if (!p) return std::nullopt;
    return Map<K, V>(std::move(p));
  }
  static std::string TypeStr() {
    return "Map<" + TypeTraits<K>::TypeStr() + ", " + TypeTraits<V>::TypeStr() + ">";
  }
  static std::string GetMismatchTypeInfo(const KFFIAny* s) {
    return details::MapMismatchInfo<K, V>(s);
  }
};

}  // namespace kffi

#endif  // KFFI_CONTAINER_MAP_H_
