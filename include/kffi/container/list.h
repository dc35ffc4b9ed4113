// include/kffi/container/list.h: List, a mutable sequence shared by reference (like Python's).
// SPDX-License-Identifier: Apache-2.0
#ifndef KFFI_CONTAINER_LIST_H_
#define KFFI_CONTAINER_LIST_H_

#include <kffi/container/array.h>

#include <algorithm>
#include <initializer_list>
#include <new>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace kffi {

/// The object behind a List. Its elements live in a separate buffer that grows by doubling, so
/// the object (and every reference to it) stays put while the list changes.
class ListObj : public details::SeqObjBase {
 public:
  KFFI_DECLARE_STATIC_OBJECT_INFO("ffi.List", ListObj, Object, kKFFIList, true)

  /// A new empty list with room for capacity elements.
  static ObjectPtr<ListObj> Empty(int64_t capacity) {
    ObjectPtr<ListObj> p = make_object<ListObj>();
    if (capacity > 0) p->Grow(capacity);
    return p;
  }

  /// Moves the elements into a buffer of new_capacity (>= size) elements.
  void Grow(int64_t new_capacity) {
    size_t bytes = 0;
    if (new_capacity < 0 ||
        !details::AllocBytes(0, static_cast<size_t>(new_capacity), sizeof(KFFIAny), &bytes)) {
      details::ThrowAllocSizeError(static_cast<size_t>(new_capacity), sizeof(KFFIAny));
    }
    void* buf = ::operator new(bytes);
    if (seq_.size > 0) std::memcpy(buf, seq_.data, seq_.size * sizeof(KFFIAny));
    // The old buffer may belong to another library (its deleter travels in the cell), or be
    // inline after the cell (no deleter) when another runtime made the list.
    if (seq_.data_deleter != nullptr) seq_.data_deleter(seq_.data);
    seq_.data = buf;
    seq_.capacity = new_capacity;
    seq_.data_deleter = &details::FreeSeqBuffer;
  }
};

/// A mutable sequence of T (default Any) with reference semantics: copies of a List alias the
/// same list, and a change through one is seen by all (as in Python). A default-constructed
/// List is a new empty list, never null. Not thread safe for concurrent changes.
template <typename T = Any>
class List : public details::SeqRefBase<List<T>, ListObj, T> {
  using Base = details::SeqRefBase<List<T>, ListObj, T>;

 public:
  static constexpr bool _type_is_nullable = false;
  static constexpr bool _type_custom_traits = true;

  /// A new empty list.
  List() : Base(details::UnsafeInit{}) { this->data_ = ListObj::Empty(0); }
  List(std::initializer_list<T> init) : List(init.begin(), init.end()) {}
  List(const std::vector<T>& v) : List(v.begin(), v.end()) {}  // NOLINT(*-explicit-constructor)
  /// A new list of the elements of [first, last), each converted to T.
  template <typename It, typename = std::enable_if_t<details::IsIterator<It>::value>>
  List(It first, It last) : Base(details::UnsafeInit{}) {
    this->data_ = Base::Build(first, last);
  }
  /// A new list of n copies of value.
  List(int64_t n, const T& value) : Base(details::UnsafeInit{}) {
    Any item(value);
    ObjectPtr<ListObj> p = ListObj::Empty(n);
    for (int64_t i = 0; i < n; ++i) {
      details::RetainRaw(*details::AnyUnsafe::Raw(item));
      p->PushBackOwned(*details::AnyUnsafe::Raw(item));
    }
    this->data_ = std::move(p);
  }
  KFFI_DEFINE_OBJECT_REF_METHODS(List, Base, ListObj)

  /// The capacity (elements that fit before the next growth).
  int64_t capacity() const noexcept { return this->data_ ? this->Obj()->capacity() : 0; }

 private:
  /// The shared object itself, grown (doubling) when it has less than min_capacity room.
  ListObj* Writable(int64_t min_capacity, bool /*keep*/ = true) {
    ListObj* p = this->MutableObj();
    if (p == nullptr) {  // a moved-from List starts a new one
      this->data_ = ListObj::Empty(min_capacity);
      return this->MutableObj();
    }
    if (p->capacity() < min_capacity) {
      p->Grow(std::max(min_capacity, std::max<int64_t>(4, p->capacity() * 2)));
    }
    return p;
  }
  friend Base;
};

template <typename T>
struct TypeTraits<List<T>> {
  static constexpr bool convert_enabled = true;
  static void CopyToAnyView(const List<T>& v, KFFIAny* r) { details::RefToAnyView(v, r); }
  static void MoveToAny(List<T> v, KFFIAny* r) { details::RefMoveToAny(std::move(v), r); }
  /// A List whose elements are all stored as T (a full scan unless T is Any).
  static bool CheckAnyStrict(const KFFIAny* s) {
    return s->type_index == kKFFIList && details::SeqElementsStrict<T>(details::SeqCellOf(s));
  }
  static List<T> CopyFromAnyViewAfterCheck(const KFFIAny* s) {
    return List<T>(details::ObjectUnsafe::FromBorrowedHandle<ListObj>(s->v_obj));
  }
  /// Also accepts an Array, and a List whose elements need conversion; both give a new List
  /// (which no longer aliases the original).
  static std::optional<List<T>> TryCastFromAnyView(const KFFIAny* s) {
    if (CheckAnyStrict(s)) return CopyFromAnyViewAfterCheck(s);
    if (!details::IsSeqIndex(s->type_index)) return std::nullopt;
    ObjectPtr<ListObj> p = details::SeqConvert<ListObj, T>(details::SeqCellOf(s));
    if (!p) return std::nullopt;
    return List<T>(std::move(p));
  }
  static std::string TypeStr() { return "List<" + TypeTraits<T>::TypeStr() + ">"; }
  static std::string GetMismatchTypeInfo(const KFFIAny* s) {
    return details::SeqMismatchInfo<T>(s);
  }
};

}  // namespace kffi

#endif  // KFFI_CONTAINER_LIST_H_
