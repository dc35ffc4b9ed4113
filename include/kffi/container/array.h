// include/kffi/container/array.h: Array, an immutable copy-on-write sequence of values.
// SPDX-License-Identifier: Apache-2.0
#ifndef KFFI_CONTAINER_ARRAY_H_
#define KFFI_CONTAINER_ARRAY_H_

#include <kffi/any.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <initializer_list>
#include <iterator>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace kffi {
namespace details {

/// Adds the reference that one more owner of the raw value needs (objects only).
KFFI_INLINE void RetainRaw(const KFFIAny& v) noexcept {
  if (IsObjectIndex(v.type_index)) ObjectUnsafe::IncRef(ObjectUnsafe::ToObject(v.v_obj));
}
/// Drops the reference an owned raw value holds.
KFFI_INLINE void ReleaseRaw(const KFFIAny& v) noexcept {
  if (IsObjectIndex(v.type_index)) ObjectUnsafe::DecRef(ObjectUnsafe::ToObject(v.v_obj));
}
/// Reads a stored value as T: the exact storage first, then the allowed conversions, else a
/// TypeError. Containers of T only hold values stored as T, but a List or Dict is shared and
/// may have been filled through an alias of another element type, so the check stays.
template <typename T>
KFFI_INLINE T ReadElement(const KFFIAny& v) {
  return reinterpret_cast<const AnyView&>(v).cast<T>();
}

template <typename It, typename = void>
struct IsIterator : std::false_type {};
template <typename It>
struct IsIterator<It, std::void_t<typename std::iterator_traits<It>::iterator_category>>
    : std::true_type {};

/// An Array or a List value: both have the same cell, so either is accepted where a sequence
/// is expected (with a copy).
KFFI_INLINE bool IsSeqIndex(int32_t index) { return index == kKFFIArray || index == kKFFIList; }
KFFI_INLINE const KFFISeqCell* SeqCellOf(const KFFIAny* s) {
  return static_cast<const KFFISeqCell*>(KFFIObjectGetCellPtr(s->v_obj));
}
KFFI_INLINE const KFFIAny* SeqData(const KFFISeqCell* c) {
  return static_cast<const KFFIAny*>(c->data);
}

[[noreturn]] KFFI_NOINLINE inline void ThrowSeqIndexError(const char* type_key, int64_t index,
                                                          int64_t size) {
  KFFI_THROW(IndexError) << TypeKeyToStr(type_key) << " index " << index
                         << " out of range for size " << size;
}
[[noreturn]] KFFI_NOINLINE inline void ThrowSeqEmptyError(const char* type_key, const char* op) {
  KFFI_THROW(IndexError) << op << " on an empty " << TypeKeyToStr(type_key);
}

/// Frees the element buffer of a sequence whose elements are not stored inline.
inline void FreeSeqBuffer(void* data) { ::operator delete(data); }

/// The object part shared by Array and List: the header, then a KFFISeqCell whose data points
/// at `size` owned values. Any library built with these headers can read and release it.
class SeqObjBase : public Object {
 public:
  int64_t size() const noexcept { return seq_.size; }
  int64_t capacity() const noexcept { return seq_.capacity; }
  bool empty() const noexcept { return seq_.size == 0; }
  /// The owned elements (valid until the next change).
  const KFFIAny* RawData() const noexcept { return static_cast<const KFFIAny*>(seq_.data); }
  const Any* begin() const noexcept { return reinterpret_cast<const Any*>(seq_.data); }
  const Any* end() const noexcept { return begin() + seq_.size; }
  /// Unchecked element access.
  const Any& operator[](int64_t i) const noexcept { return begin()[i]; }

  // Changes below are for Array and List only: the caller makes sure the object is not shared
  // (Array) or is meant to be shared (List), and that the capacity suffices.

  /// Appends an owned value (ownership moves in).
  void PushBackOwned(const KFFIAny& v) noexcept { Data()[seq_.size++] = v; }
  /// Moves n owned values in at pos, shifting the tail right.
  void InsertOwned(int64_t pos, const KFFIAny* vals, int64_t n) noexcept {
    KFFIAny* d = Data();
    if (n == 0) return;
    // Values are relocated by their bits: ownership travels with them.
    if (seq_.size > pos) std::memmove(d + pos + n, d + pos, (seq_.size - pos) * sizeof(KFFIAny));
    std::memcpy(d + pos, vals, n * sizeof(KFFIAny));
    seq_.size += n;
  }
  /// Replaces element i with an owned value, releasing the old one.
  void SetOwned(int64_t i, const KFFIAny& v) noexcept {
    KFFIAny old = Data()[i];
    Data()[i] = v;
    ReleaseRaw(old);
  }
  /// Releases elements [first, last) and closes the gap.
  void EraseRange(int64_t first, int64_t last) noexcept {
    if (first == last) return;
    KFFIAny* d = Data();
    for (int64_t i = first; i < last; ++i) ReleaseRaw(d[i]);
    if (seq_.size > last) std::memmove(d + first, d + last, (seq_.size - last) * sizeof(KFFIAny));
    seq_.size -= last - first;
  }
  /// Moves every element to the end of dst (which has room); leaves this empty.
  void RelocateTo(SeqObjBase* dst) noexcept {
    dst->InsertOwned(dst->seq_.size, RawData(), seq_.size);
    seq_.size = 0;
  }
  /// Copies every element to the end of dst (which has room).
  void CopyTo(SeqObjBase* dst) const noexcept {
    const KFFIAny* d = RawData();
    for (int64_t i = 0; i < seq_.size; ++i) {
      RetainRaw(d[i]);
      dst->PushBackOwned(d[i]);
    }
  }

 protected:
  SeqObjBase() noexcept {
    seq_.data = nullptr;
    seq_.size = 0;
    seq_.capacity = 0;
    seq_.data_deleter = nullptr;
  }
  ~SeqObjBase() {
    EraseRange(0, seq_.size);
    if (seq_.data_deleter != nullptr) seq_.data_deleter(seq_.data);
  }
  KFFIAny* Data() noexcept { return static_cast<KFFIAny*>(seq_.data); }

  KFFISeqCell seq_;
};

static_assert(sizeof(SeqObjBase) == sizeof(KFFIObject) + sizeof(KFFISeqCell),
              "the sequence cell must follow the object header directly");

/// A random-access iterator over stored values that yields them as T (by value).
template <typename T>
class SeqIterator {
 public:
  using iterator_category = std::random_access_iterator_tag;
  using value_type = T;
  using difference_type = std::ptrdiff_t;
  using pointer = void;
  using reference = T;

  SeqIterator() noexcept = default;
  explicit SeqIterator(const KFFIAny* p) noexcept : p_(p) {}

  T operator*() const { return ReadElement<T>(*p_); }
  T operator[](difference_type n) const { return ReadElement<T>(p_[n]); }
  SeqIterator& operator++() noexcept { return ++p_, *this; }
  SeqIterator& operator--() noexcept { return --p_, *this; }
  SeqIterator operator++(int) noexcept { return SeqIterator(p_++); }
  SeqIterator operator--(int) noexcept { return SeqIterator(p_--); }
  SeqIterator& operator+=(difference_type n) noexcept { return p_ += n, *this; }
  SeqIterator& operator-=(difference_type n) noexcept { return p_ -= n, *this; }
  SeqIterator operator+(difference_type n) const noexcept { return SeqIterator(p_ + n); }
  SeqIterator operator-(difference_type n) const noexcept { return SeqIterator(p_ - n); }
  difference_type operator-(const SeqIterator& o) const noexcept { return p_ - o.p_; }
  bool operator==(const SeqIterator& o) const noexcept { return p_ == o.p_; }
  bool operator!=(const SeqIterator& o) const noexcept { return p_ != o.p_; }
  bool operator<(const SeqIterator& o) const noexcept { return p_ < o.p_; }
  bool operator>(const SeqIterator& o) const noexcept { return p_ > o.p_; }
  bool operator<=(const SeqIterator& o) const noexcept { return p_ <= o.p_; }
  bool operator>=(const SeqIterator& o) const noexcept { return p_ >= o.p_; }
  /// The stored value this iterator is at.
  const KFFIAny* raw() const noexcept { return p_; }

 private:
  const KFFIAny* p_ = nullptr;
};

/// The element API shared by Array (copy-on-write) and List (shared). Derived supplies
/// Writable(min_capacity, keep = true): the object to change, with room for min_capacity
/// elements; keep = false allows it to drop the current elements instead of copying them.
template <typename Derived, typename ObjType, typename T>
class SeqRefBase : public ObjectRef {
 public:
  static_assert(TypeTraits<T>::convert_enabled, "the element type has no kffi conversion");
  using value_type = T;
  using iterator = SeqIterator<T>;
  using const_iterator = iterator;
  using reverse_iterator = std::reverse_iterator<iterator>;
  using const_reverse_iterator = reverse_iterator;

  /// Number of elements. A moved-from container reads as empty.
  int64_t size() const noexcept { return data_ ? Obj()->size() : 0; }
  bool empty() const noexcept { return size() == 0; }
  /// Element i as T; IndexError names the index and the size when out of range.
  T operator[](int64_t i) const { return at(i); }
  T at(int64_t i) const {
    if (KFFI_UNLIKELY(i < 0 || i >= size())) ThrowSeqIndexError(ObjType::_type_key, i, size());
    return ReadElement<T>(RawBegin()[i]);
  }
  /// The first element; IndexError when empty.
  T front() const {
    if (empty()) ThrowSeqEmptyError(ObjType::_type_key, "front()");
    return ReadElement<T>(RawBegin()[0]);
  }
  /// The last element; IndexError when empty.
  T back() const {
    if (empty()) ThrowSeqEmptyError(ObjType::_type_key, "back()");
    return ReadElement<T>(RawBegin()[size() - 1]);
  }
  /// Iterators yield elements as T by value; any change may invalidate them.
  iterator begin() const noexcept { return iterator(RawBegin()); }
  iterator end() const noexcept { return iterator(RawBegin() + size()); }
  reverse_iterator rbegin() const noexcept { return reverse_iterator(end()); }
  reverse_iterator rend() const noexcept { return reverse_iterator(begin()); }
  /// The elements as a std::vector<T>.
  std::vector<T> ToVector() const { return std::vector<T>(begin(), end()); }

  /// Appends v.
  void push_back(T v) {
    Any item(std::move(v));
    ObjType* p = Self()->Writable(size() + 1);
    p->PushBackOwned(AnyUnsafe::MoveToOwnedRaw(std::move(item)));
  }
  /// Removes the last element; IndexError when empty.
  void pop_back() {
    if (empty()) ThrowSeqEmptyError(ObjType::_type_key, "pop_back()");
    int64_t n = size();
    Self()->Writable(n)->EraseRange(n - 1, n);
  }
  /// Replaces element i with v; IndexError when out of range.
  void Set(int64_t i, T v) {
    if (KFFI_UNLIKELY(i < 0 || i >= size())) ThrowSeqIndexError(ObjType::_type_key, i, size());
    Any item(std::move(v));
    Self()->Writable(size())->SetOwned(i, AnyUnsafe::MoveToOwnedRaw(std::move(item)));
  }
  /// Inserts v before pos; returns an iterator to it.
  iterator insert(iterator pos, T v) {
    int64_t idx = PosIndex(pos);
    Any item(std::move(v));
    ObjType* p = Self()->Writable(size() + 1);
    KFFIAny raw = AnyUnsafe::MoveToOwnedRaw(std::move(item));
    p->InsertOwned(idx, &raw, 1);
    return begin() + idx;
  }
  /// Inserts the elements of [first, last) before pos; returns an iterator to the first one.
  template <typename It, typename = std::enable_if_t<IsIterator<It>::value>>
  iterator insert(iterator pos, It first, It last) {
    int64_t idx = PosIndex(pos);
    // Converted first: the range may be this container's own elements, and a conversion that
    // throws must leave the container unchanged.
    std::vector<Any> items;
    for (; first != last; ++first) items.emplace_back(static_cast<T>(*first));
    ObjType* p = Self()->Writable(size() + static_cast<int64_t>(items.size()));
    // Any is laid out as KFFIAny: the values move in by their bits and the vector forgets them.
    p->InsertOwned(idx, reinterpret_cast<const KFFIAny*>(items.data()),
                   static_cast<int64_t>(items.size()));
    for (Any& a : items) AnyUnsafe::MoveToOwnedRaw(std::move(a));
    return begin() + idx;
  }
  /// Removes the element at pos; returns an iterator to the one that followed it.
  iterator erase(iterator pos) {
    int64_t idx = PosIndex(pos);
    if (idx >= size()) ThrowSeqIndexError(ObjType::_type_key, idx, size());
    Self()->Writable(size())->EraseRange(idx, idx + 1);
    return begin() + idx;
  }
  /// Removes [first, last); returns an iterator to the element that followed them.
  iterator erase(iterator first, iterator last) {
    int64_t a = PosIndex(first), b = PosIndex(last);
    if (a > b) ThrowSeqIndexError(ObjType::_type_key, a, size());
    if (a != b) Self()->Writable(size())->EraseRange(a, b);
    return begin() + a;
  }
  /// Removes every element.
  void clear() {
    // keep=false: a shared Array is replaced by a fresh one instead of being copied first.
    if (empty()) return;
    ObjType* p = Self()->Writable(0, /*keep=*/false);
    p->EraseRange(0, p->size());
  }
  /// Shrinks to n elements or grows with default values T().
  void resize(int64_t n) {
    if (n < 0) KFFI_THROW(ValueError) << "Cannot resize to a negative size " << n;
    int64_t cur = size();
    if (n < cur) {
      Self()->Writable(n)->EraseRange(n, cur);
    } else if (n > cur) {
      Any fill{T()};
      ObjType* p = Self()->Writable(n);
      for (int64_t i = cur; i < n; ++i) {
        RetainRaw(*AnyUnsafe::Raw(fill));
        p->PushBackOwned(*AnyUnsafe::Raw(fill));
      }
    }
  }
  /// Makes room for n elements (an Array also stops being shared).
  void reserve(int64_t n) { Self()->Writable(std::max(n, size())); }

 protected:
  explicit SeqRefBase(UnsafeInit tag) : ObjectRef(tag) {}
  const ObjType* Obj() const noexcept { return static_cast<const ObjType*>(data_.get()); }
  ObjType* MutableObj() noexcept { return static_cast<ObjType*>(data_.get()); }
  const KFFIAny* RawBegin() const noexcept { return data_ ? Obj()->RawData() : nullptr; }
  Derived* Self() noexcept { return static_cast<Derived*>(this); }

  /// Fills an empty container from [first, last), converting each element to T.
  template <typename It>
  static ObjectPtr<ObjType> Build(It first, It last) {
    using Category = typename std::iterator_traits<It>::iterator_category;
    if constexpr (std::is_base_of_v<std::forward_iterator_tag, Category>) {
      ObjectPtr<ObjType> p = ObjType::Empty(static_cast<int64_t>(std::distance(first, last)));
      for (; first != last; ++first) {
        p->PushBackOwned(AnyUnsafe::MoveToOwnedRaw(Any(static_cast<T>(*first))));
      }
      return p;
    } else {
      std::vector<T> items(first, last);
      return Build(items.begin(), items.end());
    }
  }

 private:
  int64_t PosIndex(const iterator& pos) const {
    int64_t idx = pos.raw() - RawBegin();
    if (idx < 0 || idx > size()) ThrowSeqIndexError(ObjType::_type_key, idx, size());
    return idx;
  }
};

/// Converts every element of a sequence value to T into a new ObjType; null when one of them
/// does not convert.
template <typename ObjType, typename T>
ObjectPtr<ObjType> SeqConvert(const KFFISeqCell* cell) {
  ObjectPtr<ObjType> out = ObjType::Empty(cell->size);
  const KFFIAny* d = SeqData(cell);
  for (int64_t i = 0; i < cell->size; ++i) {
    std::optional<T> v = TypeTraits<T>::TryCastFromAnyView(&d[i]);
    if (!v.has_value()) return ObjectPtr<ObjType>();
    out->PushBackOwned(AnyUnsafe::MoveToOwnedRaw(Any(std::move(*v))));
  }
  return out;
}

/// True when every element is stored exactly as T.
template <typename T>
bool SeqElementsStrict(const KFFISeqCell* cell) {
  if constexpr (std::is_same_v<T, Any>) {
    return true;  // owned values are always valid Any
  } else {
    const KFFIAny* d = SeqData(cell);
    for (int64_t i = 0; i < cell->size; ++i) {
      if (!TypeTraits<T>::CheckAnyStrict(&d[i])) return false;
    }
    return true;
  }
}

/// What a failed cast to a sequence of T received: `Array[index 1: str]` points at the first
/// element that does not convert, so nested containers say where the mismatch is.
template <typename T>
std::string SeqMismatchInfo(const KFFIAny* s) {
  if (IsSeqIndex(s->type_index)) {
    const KFFISeqCell* cell = SeqCellOf(s);
    const KFFIAny* d = SeqData(cell);
    for (int64_t i = 0; i < cell->size; ++i) {
      if (!TypeTraits<T>::TryCastFromAnyView(&d[i]).has_value()) {
        return AnyTypeStr(s) + "[index " + std::to_string(i) + ": " + MismatchTypeInfo<T>(&d[i]) +
               "]";
      }
    }
  }
  return AnyTypeStr(s);
}

/// A borrowed view of an object reference (None when it is null).
inline void RefToAnyView(const ObjectRef& ref, KFFIAny* r) {
  const Object* obj = ObjectRefData(ref).get();
  if (obj == nullptr) {
    SetNone(r);
    return;
  }
  SetPOD(r, obj->type_index());
  r->v_obj = ObjectUnsafe::Header(obj);
}
/// Moves an object reference into an owned value.
inline void RefMoveToAny(ObjectRef&& ref, KFFIAny* r) {
  KFFIObjectHandle h = ObjectUnsafe::MoveToHandle(std::move(ObjectUnsafe::RefData(ref)));
  if (h == nullptr) {
    SetNone(r);
    return;
  }
  SetPOD(r, ObjectUnsafe::ToObject(h)->type_index());
  r->v_obj = static_cast<KFFIObject*>(h);
}

}  // namespace details

/// The object behind an Array: the elements live right after the cell, in the same allocation
/// (data_deleter is NULL), so an Array costs one allocation. Arrays made by other libraries
/// may keep their elements elsewhere; only the cell is relied on.
class ArrayObj : public details::SeqObjBase {
 public:
  KFFI_DECLARE_STATIC_OBJECT_INFO("ffi.Array", ArrayObj, Object, kKFFIArray, true)

  /// A new empty array with room for capacity elements.
  static ObjectPtr<ArrayObj> Empty(int64_t capacity) {
    ObjectPtr<ArrayObj> p = make_inplace_array_object<ArrayObj, KFFIAny>(
        static_cast<size_t>(std::max<int64_t>(capacity, 0)));
    p->seq_.data = InplaceArrayBegin<KFFIAny>(p.get());
    p->seq_.capacity = std::max<int64_t>(capacity, 0);
    return p;
  }
};

/// An immutable sequence of T (default Any) with value semantics: copies share storage, and a
/// change (push_back, Set, insert, erase, ...) first copies the storage when it is shared, so
/// other copies never see it. A default-constructed Array is empty, never null.
template <typename T = Any>
class Array : public details::SeqRefBase<Array<T>, ArrayObj, T> {
  using Base = details::SeqRefBase<Array<T>, ArrayObj, T>;

 public:
  static constexpr bool _type_is_nullable = false;
  static constexpr bool _type_custom_traits = true;

  /// An empty array.
  Array() : Base(details::UnsafeInit{}) { this->data_ = ArrayObj::Empty(0); }
  Array(std::initializer_list<T> init) : Array(init.begin(), init.end()) {}
  Array(const std::vector<T>& v) : Array(v.begin(), v.end()) {}  // NOLINT(*-explicit-constructor)
  /// The elements of [first, last), each converted to T.
  template <typename It, typename = std::enable_if_t<details::IsIterator<It>::value>>
  Array(It first, It last) : Base(details::UnsafeInit{}) {
    this->data_ = Base::Build(first, last);
  }
  /// n copies of value.
  Array(int64_t n, const T& value) : Base(details::UnsafeInit{}) {
    Any item(value);
    ObjectPtr<ArrayObj> p = ArrayObj::Empty(n);
    for (int64_t i = 0; i < n; ++i) {
      details::RetainRaw(*details::AnyUnsafe::Raw(item));
      p->PushBackOwned(*details::AnyUnsafe::Raw(item));
    }
    this->data_ = std::move(p);
  }
  /// Any typed Array is also an Array of Any (same storage, no copy).
  template <typename U,
            typename = std::enable_if_t<std::is_same_v<T, Any> && !std::is_same_v<U, Any>>>
  Array(const Array<U>& other)  // NOLINT(*-explicit-constructor)
      : Base(details::UnsafeInit{}) {
    this->data_ = details::ObjectRefData(other);
  }
  KFFI_DEFINE_OBJECT_REF_METHODS(Array, Base, ArrayObj)

 private:
  /// The storage to change: copied when shared (or replaced by an empty one when !keep),
  /// grown (doubling) when too small.
  ArrayObj* Writable(int64_t min_capacity, bool keep = true) {
    ArrayObj* p = this->MutableObj();
    if (p == nullptr) {
      this->data_ = ArrayObj::Empty(min_capacity);
      return this->MutableObj();
    }
    const bool unique = p->use_count() == 1;
    if (unique && p->capacity() >= min_capacity) return p;
    ObjectPtr<ArrayObj> q;
    if (unique) {
      q = ArrayObj::Empty(std::max(min_capacity, std::max<int64_t>(4, p->capacity() * 2)));
      p->RelocateTo(q.get());
    } else if (keep) {
      q = ArrayObj::Empty(std::max(min_capacity, p->size()));
      p->CopyTo(q.get());
    } else {
      q = ArrayObj::Empty(min_capacity);
    }
    this->data_ = std::move(q);
    return this->MutableObj();
  }
  friend Base;
};

template <typename T>
struct TypeTraits<Array<T>> {
  static constexpr bool convert_enabled = true;
  static void CopyToAnyView(const Array<T>& v, KFFIAny* r) { details::RefToAnyView(v, r); }
  static void MoveToAny(Array<T> v, KFFIAny* r) { details::RefMoveToAny(std::move(v), r); }
  /// An Array whose elements are all stored as T (a full scan unless T is Any).
  static bool CheckAnyStrict(const KFFIAny* s) {
    return s->type_index == kKFFIArray && details::SeqElementsStrict<T>(details::SeqCellOf(s));
  }
  static Array<T> CopyFromAnyViewAfterCheck(const KFFIAny* s) {
    return Array<T>(details::ObjectUnsafe::FromBorrowedHandle<ArrayObj>(s->v_obj));
  }
  /// Also converts elements (into a new Array) and accepts a List (copied).
  static std::optional<Array<T>> TryCastFromAnyView(const KFFIAny* s) {
    if (CheckAnyStrict(s)) return CopyFromAnyViewAfterCheck(s);
    if (!details::IsSeqIndex(s->type_index)) return std::nullopt;
    ObjectPtr<ArrayObj> p = details::SeqConvert<ArrayObj, T>(details::SeqCellOf(s));
    if (!p) return std::nullopt;
    return Array<T>(std::move(p));
  }
  static std::string TypeStr() { return "Array<" + TypeTraits<T>::TypeStr() + ">"; }
  static std::string GetMismatchTypeInfo(const KFFIAny* s) {
    return details::SeqMismatchInfo<T>(s);
  }
};

}  // namespace kffi

#endif  // KFFI_CONTAINER_ARRAY_H_
