// include/kffi/container/map_details.h: the hash table layout and code shared by Map and Dict.
// SPDX-License-Identifier: Apache-2.0
#ifndef KFFI_CONTAINER_MAP_DETAILS_H_
#define KFFI_CONTAINER_MAP_DETAILS_H_

#include <kffi/any.h>
#include <kffi/container/array.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <new>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>

namespace kffi {
namespace details {

// Layout of Map and Dict objects. It is not part of the C ABI, but it is fixed here, in the
// header, so that every library built with these headers reads and changes maps made by any
// other (the release code travels with the object, as for every object).
//
//   KFFIObject header
//   MapCell { entries, size, used, capacity, slots, num_slots, data_deleter }
//
// entries: `used` key/value pairs in insertion order, of which `size` are live; an erased pair
//   keeps its place (so the order of the others stays) with key.type_index == kMapErasedKey
//   until the next rebuild drops it.
// slots: an open-addressing index (linear probing, num_slots a power of two, at least twice
//   capacity so probes stay short and always end): each slot holds an entry number (-1 when
//   empty) and the 32-bit hash of its key.
// entries and slots share one block, which data_deleter(entries) frees.

/// One key/value pair; both are owned values.
struct MapEntry {
  KFFIAny key;
  KFFIAny value;
};

/// One hash slot: the entry it points at (-1: empty) and that entry's key hash.
struct MapSlot {
  int32_t entry;
  uint32_t hash;
};

/// The cell of Map and Dict objects.
struct MapCell {
  MapEntry* entries;
  int64_t size;
  int64_t used;
  int64_t capacity;
  MapSlot* slots;
  int64_t num_slots;
  void (*data_deleter)(void* entries);
};

/// The type index an erased entry's key carries (never the index of a real value).
constexpr int32_t kMapErasedKey = kKFFIAny;

/// Frees the block of entries and slots.
inline void FreeMapBlock(void* block) { ::operator delete(block); }

/// The key hash used by the slots: AnyHash (str and bytes by content) folded to 32 bits.
KFFI_INLINE uint32_t MapKeyHash(const KFFIAny& key) noexcept {
  uint64_t h = static_cast<uint64_t>(AnyRawHash(key));
  return static_cast<uint32_t>(h ^ (h >> 32));
}

/// The object part shared by Map and Dict.
class MapObjBase : public Object {
 public:
  /// Number of live pairs.
  int64_t size() const noexcept { return cell_.size; }
  /// Pairs that fit before the next rebuild.
  int64_t capacity() const noexcept { return cell_.capacity; }
  /// All written pairs (live and erased), in insertion order.
  const MapEntry* RawEntries() const noexcept { return cell_.entries; }
  int64_t used() const noexcept { return cell_.used; }
  static bool IsErased(const MapEntry& e) noexcept { return e.key.type_index == kMapErasedKey; }
  /// The first live entry at or after i (used() when none).
  int64_t NextLive(int64_t i) const noexcept {
    while (i < cell_.used && IsErased(cell_.entries[i])) ++i;
    return i;
  }
  /// The entry holding key (compared by AnyEqual), or -1.
  int64_t FindEntry(const KFFIAny& key) const noexcept {
    int64_t s = FindSlot(key, MapKeyHash(key));
    return s < 0 ? -1 : cell_.slots[s].entry;
  }

  // Changes below are for Map (on an object no one else sees) and Dict only.

  /// Makes room for n live pairs without another rebuild.
  void Reserve(int64_t n) {
    if (n > cell_.capacity) Rebuild(RoundCapacity(n));
  }
  /// Sets key to value: a new key goes last, an existing one keeps its place.
  void InsertOrAssign(Any key, Any value) {
    const KFFIAny& k = *AnyUnsafe::Raw(key);
    uint32_t h = MapKeyHash(k);
    int64_t s = FindSlot(k, h);
    if (s >= 0) {
      MapEntry& e = cell_.entries[cell_.slots[s].entry];
      KFFIAny old = e.value;
      e.value = AnyUnsafe::MoveToOwnedRaw(std::move(value));
      ReleaseRaw(old);
      return;
    }
    if (cell_.used == cell_.capacity) {
      // Full: compact in place when at least half the entries are erased, else double.
      int64_t live_after = cell_.size + 1;
      Rebuild(live_after * 2 <= cell_.capacity
                  ? cell_.capacity
                  : RoundCapacity(std::max(live_after, cell_.capacity * 2)));
    }
    AppendUnique(AnyUnsafe::MoveToOwnedRaw(std::move(key)),
                 AnyUnsafe::MoveToOwnedRaw(std::move(value)), h);
  }
  /// Removes key; returns whether it was there.
  bool Erase(const KFFIAny& key) noexcept {
    int64_t hole = FindSlot(key, MapKeyHash(key));
    if (hole < 0) return false;
    MapEntry& e = cell_.entries[cell_.slots[hole].entry];
    MapEntry removed = e;
    SetPOD(&e.key, kMapErasedKey);
    e.key.v_int64 = 0;
    SetNone(&e.value);
    --cell_.size;
    // Backward-shift deletion: pull later members of the probe run into the hole so lookups
    // never need tombstone slots.
    const int64_t mask = cell_.num_slots - 1;
    for (int64_t j = (hole + 1) & mask; cell_.slots[j].entry >= 0; j = (j + 1) & mask) {
      int64_t ideal = cell_.slots[j].hash & mask;
      if (((j - ideal) & mask) >= ((j - hole) & mask)) {
        cell_.slots[hole] = cell_.slots[j];
        hole = j;
      }
    }
    cell_.slots[hole].entry = -1;
    while (cell_.used > 0 && IsErased(cell_.entries[cell_.used - 1])) --cell_.used;
    ReleaseRaw(removed.key);
    ReleaseRaw(removed.value);
    return true;
  }
  /// Removes every pair (keeps the room).
  void Clear() noexcept {
    int64_t used = cell_.used;
    cell_.used = 0;
    cell_.size = 0;
    for (int64_t i = 0; i < cell_.num_slots; ++i) cell_.slots[i].entry = -1;
    for (int64_t i = 0; i < used; ++i) {
      ReleaseRaw(cell_.entries[i].key);
      ReleaseRaw(cell_.entries[i].value);
    }
  }
  /// Copies every live pair into dst (empty), in order.
  void CopyTo(MapObjBase* dst) const {
    dst->Reserve(cell_.size);
    for (int64_t i = NextLive(0); i < cell_.used; i = NextLive(i + 1)) {
      const MapEntry& e = cell_.entries[i];
      RetainRaw(e.key);
      RetainRaw(e.value);
      dst->AppendUnique(e.key, e.value, MapKeyHash(e.key));
    }
  }

 protected:
  MapObjBase() noexcept { std::memset(&cell_, 0, sizeof(cell_)); }
  ~MapObjBase() {
    Clear();
    if (cell_.data_deleter != nullptr) cell_.data_deleter(cell_.entries);
  }

  MapCell cell_;

 private:
  static int64_t RoundCapacity(int64_t n) {
    if (n > (int64_t(1) << 30)) KFFI_THROW(ValueError) << "A map of " << n << " pairs is too large";
    int64_t c = 4;
    while (c < n) c *= 2;
    return c;
  }
  int64_t FindSlot(const KFFIAny& key, uint32_t h) const noexcept {
    if (cell_.num_slots == 0) return -1;
    const int64_t mask = cell_.num_slots - 1;
    for (int64_t i = h & mask;; i = (i + 1) & mask) {
      const MapSlot& s = cell_.slots[i];
      if (s.entry < 0) return -1;
      if (s.hash == h && AnyRawEqual(cell_.entries[s.entry].key, key)) return i;
    }
  }
  void PlaceSlot(int32_t entry, uint32_t h) noexcept {
    const int64_t mask = cell_.num_slots - 1;
    int64_t i = h & mask;
    while (cell_.slots[i].entry >= 0) i = (i + 1) & mask;
    cell_.slots[i].entry = entry;
    cell_.slots[i].hash = h;
  }
  /// Appends a pair whose key is not present (ownership moves in); room must exist.
  void AppendUnique(const KFFIAny& key, const KFFIAny& value, uint32_t h) noexcept {
    int32_t idx = static_cast<int32_t>(cell_.used++);
    cell_.entries[idx].key = key;
    cell_.entries[idx].value = value;
    ++cell_.size;
    PlaceSlot(idx, h);
  }
  /// Moves the live pairs, in order, into a new block with room for new_capacity pairs.
  void Rebuild(int64_t new_capacity) {
    const int64_t num_slots = new_capacity * 2;
    void* block = ::operator new(static_cast<size_t>(new_capacity) * sizeof(MapEntry) +
                                 static_cast<size_t>(num_slots) * sizeof(MapSlot));
    // Nothing below throws: the table is switched over in one go.
    MapEntry* old = cell_.entries;
    int64_t old_used = cell_.used;
    void (*old_deleter)(void*) = cell_.data_deleter;
    cell_.entries = static_cast<MapEntry*>(block);
    cell_.slots = reinterpret_cast<MapSlot*>(cell_.entries + new_capacity);
    cell_.num_slots = num_slots;
    cell_.capacity = new_capacity;
    cell_.data_deleter = &FreeMapBlock;
    cell_.used = 0;
    cell_.size = 0;
    for (int64_t i = 0; i < num_slots; ++i) cell_.slots[i] = MapSlot{-1, 0};
    for (int64_t i = 0; i < old_used; ++i) {
      if (!IsErased(old[i])) AppendUnique(old[i].key, old[i].value, MapKeyHash(old[i].key));
    }
    if (old_deleter != nullptr) old_deleter(old);
  }
};

static_assert(sizeof(MapObjBase) == sizeof(KFFIObject) + sizeof(MapCell),
              "the map cell must follow the object header directly");

/// A value for messages: 'text' for str, numbers as written, else the type name.
inline std::string AnyReprForError(const KFFIAny& v) {
  std::string_view s;
  if (ReadStrView(&v, &s)) {
    return "'" + std::string(s.substr(0, 64)) + (s.size() > 64 ? "...'" : "'");
  }
  switch (v.type_index) {
    case kKFFINone:
      return "None";
    case kKFFIInt:
      return std::to_string(v.v_int64);
    case kKFFIBool:
      return v.v_int64 ? "True" : "False";
    case kKFFIFloat: {
      char buf[32];
      std::snprintf(buf, sizeof(buf), "%.17g", v.v_float64);
      return buf;
    }
    default:
      return "<" + AnyTypeStr(&v) + ">";
  }
}

[[noreturn]] KFFI_NOINLINE inline void ThrowKeyError(const char* type_key, const KFFIAny& key) {
  KFFI_THROW(KeyError) << "Key " << AnyReprForError(key) << " not found in "
                       << TypeKeyToStr(type_key);
}

/// A forward iterator over the live pairs, yielding std::pair<K, V> by value.
template <typename K, typename V>
class MapIterator {
 public:
  using iterator_category = std::forward_iterator_tag;
  using value_type = std::pair<K, V>;
  using difference_type = std::ptrdiff_t;
  using reference = value_type;
  /// it->first works through a small holder of the pair.
  struct pointer {
    value_type pair;
    const value_type* operator->() const noexcept { return &pair; }
  };

  MapIterator() noexcept = default;
  MapIterator(const MapObjBase* obj, int64_t index) noexcept : obj_(obj), index_(index) {}

  value_type operator*() const { return value_type(key(), value()); }
  pointer operator->() const { return pointer{**this}; }
  MapIterator& operator++() noexcept {
    index_ = obj_->NextLive(index_ + 1);
    return *this;
  }
  MapIterator operator++(int) noexcept {
    MapIterator old = *this;
    ++*this;
    return old;
  }
  bool operator==(const MapIterator& o) const noexcept { return index_ == o.index_; }
  bool operator!=(const MapIterator& o) const noexcept { return index_ != o.index_; }
  /// The key and the value of the pair this iterator is at.
  K key() const { return ReadElement<K>(obj_->RawEntries()[index_].key); }
  V value() const { return ReadElement<V>(obj_->RawEntries()[index_].value); }

 private:
  const MapObjBase* obj_ = nullptr;
  int64_t index_ = 0;
};

/// The API shared by Map (copy-on-write) and Dict (shared). Derived supplies
/// Writable(extra, keep = true): the object to change, with room for extra more pairs; keep =
/// false allows it to drop the current pairs instead of copying them.
template <typename Derived, typename ObjType, typename K, typename V>
class MapRefBase : public ObjectRef {
 public:
  static_assert(TypeTraits<K>::convert_enabled, "the key type has no kffi conversion");
  static_assert(TypeTraits<V>::convert_enabled, "the value type has no kffi conversion");
  using key_type = K;
  using mapped_type = V;
  using iterator = MapIterator<K, V>;
  using const_iterator = iterator;
  /// What lookups take: a borrowed AnyView when K is Any (so m.count("name") allocates
  /// nothing), else K.
  using KeyArg = std::conditional_t<std::is_same_v<K, Any>, AnyView, K>;

  /// Number of pairs. A moved-from container reads as empty.
  int64_t size() const noexcept { return data_ ? Obj()->size() : 0; }
  bool empty() const noexcept { return size() == 0; }
  /// 1 when key is present, else 0.
  int64_t count(const KeyArg& key) const { return FindRaw(View(key)) >= 0 ? 1 : 0; }
  /// The value of key; KeyError naming the key when it is missing.
  V at(const KeyArg& key) const {
    KFFIAny k = View(key);
    int64_t e = FindRaw(k);
    if (e < 0) ThrowKeyError(ObjType::_type_key, k);
    return ReadElement<V>(Obj()->RawEntries()[e].value);
  }
  V operator[](const KeyArg& key) const { return at(key); }
  /// The value of key, or nullopt when it is missing.
  std::optional<V> Get(const KeyArg& key) const {
    int64_t e = FindRaw(View(key));
    if (e < 0) return std::nullopt;
    return ReadElement<V>(Obj()->RawEntries()[e].value);
  }
  /// An iterator at key's pair, or end().
  iterator find(const KeyArg& key) const {
    int64_t e = FindRaw(View(key));
    return e < 0 ? end() : iterator(Obj(), e);
  }
  /// Pairs in insertion order; any change may invalidate iterators.
  iterator begin() const noexcept { return data_ ? iterator(Obj(), Obj()->NextLive(0)) : end(); }
  iterator end() const noexcept { return iterator(Obj(), data_ ? Obj()->used() : 0); }
  /// The keys (values) in insertion order.
  Array<K> keys() const { return Collect<K>(true); }
  Array<V> values() const { return Collect<V>(false); }

  /// Sets key to value: a new key goes last, an existing key keeps its place.
  void Set(K key, V value) {
    Any k(std::move(key)), v(std::move(value));
    Self()->Writable(1)->InsertOrAssign(std::move(k), std::move(v));
  }
  /// Removes key; returns the number of pairs removed (0 or 1).
  int64_t erase(const KeyArg& key) {
    KFFIAny k = View(key);
    if (FindRaw(k) < 0) return 0;
    Self()->Writable(0)->Erase(k);
    return 1;
  }
  /// Removes every pair.
  void clear() {
    if (!empty()) Self()->Writable(0, /*keep=*/false)->Clear();
  }

 protected:
  explicit MapRefBase(UnsafeInit tag) : ObjectRef(tag) {}
  const ObjType* Obj() const noexcept { return static_cast<const ObjType*>(data_.get()); }
  ObjType* MutableObj() noexcept { return static_cast<ObjType*>(data_.get()); }
  Derived* Self() noexcept { return static_cast<Derived*>(this); }

  /// A new object with the pairs of [first, last), converted to K and V.
  template <typename It>
  static ObjectPtr<ObjType> Build(It first, It last) {
    ObjectPtr<ObjType> p = ObjType::Empty(0);
    using Category = typename std::iterator_traits<It>::iterator_category;
    if constexpr (std::is_base_of_v<std::forward_iterator_tag, Category>) {
      p->Reserve(static_cast<int64_t>(std::distance(first, last)));
    }
    for (; first != last; ++first) {
      auto&& kv = *first;
      p->InsertOrAssign(Any(static_cast<K>(kv.first)), Any(static_cast<V>(kv.second)));
    }
    return p;
  }

 private:
  static KFFIAny View(const KeyArg& key) {
    KFFIAny k;
    TypeTraits<KeyArg>::CopyToAnyView(key, &k);
    return k;
  }
  int64_t FindRaw(const KFFIAny& k) const { return data_ ? Obj()->FindEntry(k) : -1; }
  template <typename T>
  Array<T> Collect(bool want_keys) const {
    ObjectPtr<ArrayObj> out = ArrayObj::Empty(size());
    for (iterator it = begin(); it != end(); ++it) {
      out->PushBackOwned(AnyUnsafe::MoveToOwnedRaw(want_keys ? Any(it.key()) : Any(it.value())));
    }
    return Array<T>(std::move(out));
  }
};

/// True when every pair is stored exactly as K and V.
template <typename K, typename V>
bool MapElementsStrict(const MapObjBase* m) {
  if constexpr (std::is_same_v<K, Any> && std::is_same_v<V, Any>) {
    return true;
  } else {
    const MapEntry* e = m->RawEntries();
    for (int64_t i = m->NextLive(0); i < m->used(); i = m->NextLive(i + 1)) {
      if (!TypeTraits<K>::CheckAnyStrict(&e[i].key) ||
          !TypeTraits<V>::CheckAnyStrict(&e[i].value)) {
        return false;
      }
    }
    return true;
  }
}

KFFI_INLINE bool IsMapIndex(int32_t index) { return index == kKFFIMap || index == kKFFIDict; }
KFFI_INLINE const MapObjBase* MapObjOf(const KFFIAny* s) {
  return static_cast<const MapObjBase*>(ObjectUnsafe::ToObject(s->v_obj));
}

/// Converts every pair of a Map or Dict value into a new ObjType; null when one does not
/// convert.
template <typename ObjType, typename K, typename V>
ObjectPtr<ObjType> MapConvert(const MapObjBase* m) {
  ObjectPtr<ObjType> out = ObjType::Empty(m->size());
  const MapEntry* e = m->RawEntries();
  for (int64_t i = m->NextLive(0); i < m->used(); i = m->NextLive(i + 1)) {
    std::optional<K> k = TypeTraits<K>::TryCastFromAnyView(&e[i].key);
    if (!k.has_value()) return ObjectPtr<ObjType>();
    std::optional<V> v = TypeTraits<V>::TryCastFromAnyView(&e[i].value);
    if (!v.has_value()) return ObjectPtr<ObjType>();
    out->InsertOrAssign(Any(std::move(*k)), Any(std::move(*v)));
  }
  return out;
}

/// What a failed cast to a map of K -> V received: `Map[key 1: int]` names a key that does not
/// convert, `Map['a': str]` the value of a key that does not.
template <typename K, typename V>
std::string MapMismatchInfo(const KFFIAny* s) {
  if (IsMapIndex(s->type_index)) {
    const MapObjBase* m = MapObjOf(s);
    const MapEntry* e = m->RawEntries();
    for (int64_t i = m->NextLive(0); i < m->used(); i = m->NextLive(i + 1)) {
      if (!TypeTraits<K>::TryCastFromAnyView(&e[i].key).has_value()) {
        return AnyTypeStr(s) + "[key " + AnyReprForError(e[i].key) + ": " +
               MismatchTypeInfo<K>(&e[i].key) + "]";
      }
      if (!TypeTraits<V>::TryCastFromAnyView(&e[i].value).has_value()) {
        return AnyTypeStr(s) + "[" + AnyReprForError(e[i].key) + ": " +
               MismatchTypeInfo<V>(&e[i].value) + "]";
      }
    }
  }
  return AnyTypeStr(s);
}

}  // namespace details
}  // namespace kffi

#endif  // KFFI_CONTAINER_MAP_DETAILS_H_
