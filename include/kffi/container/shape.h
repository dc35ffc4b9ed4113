// include/kffi/container/shape.h: Shape, an immutable run of int64 dimensions in one allocation.
// SPDX-License-Identifier: Apache-2.0
#ifndef KFFI_CONTAINER_SHAPE_H_
#define KFFI_CONTAINER_SHAPE_H_

#include <kffi/container/array.h>

#include <algorithm>
#include <cstring>
#include <initializer_list>
#include <iterator>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace kffi {

/// The object behind a Shape: a KFFIShapeCell whose data points at the values stored right
/// after it, in the same allocation.
class ShapeObj : public Object {
 public:
  KFFI_DECLARE_STATIC_OBJECT_INFO("ffi.Shape", ShapeObj, Object, kKFFIShape, true)

  ShapeObj() noexcept {
    cell_.data = nullptr;
    cell_.size = 0;
  }
  const int64_t* data() const noexcept { return cell_.data; }
  int64_t size() const noexcept { return static_cast<int64_t>(cell_.size); }

  /// A new shape holding a copy of data[0, n).
  static ObjectPtr<ShapeObj> Make(const int64_t* data, size_t n) {
    ObjectPtr<ShapeObj> p = make_inplace_array_object<ShapeObj, int64_t>(n);
    int64_t* values = InplaceArrayBegin<int64_t>(p.get());
    if (n != 0) std::memcpy(values, data, n * sizeof(int64_t));
    p->cell_.data = values;
    p->cell_.size = n;
    return p;
  }

 private:
  KFFIShapeCell cell_;
};

static_assert(sizeof(ShapeObj) == sizeof(KFFIObject) + sizeof(KFFIShapeCell),
              "the shape cell must follow the object header directly");

/// The dimensions of a tensor: an immutable sequence of int64 values, shared by reference
/// counting (one allocation). A default-constructed Shape is empty (a scalar's), never null.
class Shape : public ObjectRef {
 public:
  using value_type = int64_t;
  using iterator = const int64_t*;
  using const_iterator = const int64_t*;
  static constexpr bool _type_is_nullable = false;
  static constexpr bool _type_custom_traits = true;

  /// The empty shape.
  Shape() : ObjectRef(ShapeObj::Make(nullptr, 0)) {}
  Shape(std::initializer_list<int64_t> dims) : Shape(dims.begin(), dims.size()) {}
  Shape(const std::vector<int64_t>& dims)  // NOLINT(*-explicit-constructor)
      : Shape(dims.data(), dims.size()) {}
  /// A copy of data[0, n).
  Shape(const int64_t* data, size_t n) : ObjectRef(ShapeObj::Make(data, n)) {}
  /// The values of [first, last), converted to int64.
  template <typename It, typename = std::enable_if_t<details::IsIterator<It>::value>>
  Shape(It first, It last) : Shape(std::vector<int64_t>(first, last)) {}
  KFFI_DEFINE_OBJECT_REF_METHODS(Shape, ObjectRef, ShapeObj)

  /// Number of dimensions. A moved-from Shape reads as empty.
  int64_t size() const noexcept { return data_ ? get()->size() : 0; }
  int64_t ndim() const noexcept { return size(); }
  bool empty() const noexcept { return size() == 0; }
  const int64_t* data() const noexcept { return data_ ? get()->data() : nullptr; }
  /// Dimension i, unchecked (the kernel fast path); at() checks.
  int64_t operator[](int64_t i) const noexcept { return data()[i]; }
  /// Dimension i; IndexError names the index and the size when out of range.
  int64_t at(int64_t i) const {
    if (KFFI_UNLIKELY(i < 0 || i >= size())) {
      details::ThrowSeqIndexError(ShapeObj::_type_key, i, size());
    }
    return data()[i];
  }
  int64_t front() const { return at(0); }
  int64_t back() const { return at(size() - 1); }
  iterator begin() const noexcept { return data(); }
  iterator end() const noexcept { return data() + size(); }
  /// The number of elements: the product of the dimensions (1 for the empty shape). A product
  /// that overflows int64 is a ValueError naming the shape.
  int64_t Product() const {
    int64_t p = 1;
    for (int64_t d : *this) {
      if (KFFI_UNLIKELY(details::MulOverflow(p, d, &p))) ThrowProductOverflow();
    }
    return p;
  }
  /// The dimensions as a std::vector.
  std::vector<int64_t> ToVector() const { return std::vector<int64_t>(begin(), end()); }
  operator std::vector<int64_t>() const { return ToVector(); }  // NOLINT(*-explicit-constructor)

 private:
  [[noreturn]] KFFI_NOINLINE void ThrowProductOverflow() const {
    std::string dims;
    for (int64_t d : *this) dims += (dims.empty() ? "" : ", ") + std::to_string(d);
    throw Error("ValueError", "The product of the dimensions of shape (" + dims +
                                  (size() == 1 ? ",)" : ")") + " overflows int64");
  }
};

template <>
struct TypeTraits<Shape> {
  static constexpr bool convert_enabled = true;
  static void CopyToAnyView(const Shape& v, KFFIAny* r) { details::RefToAnyView(v, r); }
  static void MoveToAny(Shape v, KFFIAny* r) { details::RefMoveToAny(std::move(v), r); }
  static bool CheckAnyStrict(const KFFIAny* s) { return s->type_index == kKFFIShape; }
  static Shape CopyFromAnyViewAfterCheck(const KFFIAny* s) {
    return Shape(details::ObjectUnsafe::FromBorrowedHandle<ShapeObj>(s->v_obj));
  }
  /// Also accepts an Array or List of ints (copied into a new Shape).
  static std::optional<Shape> TryCastFromAnyView(const KFFIAny* s) {
    if (CheckAnyStrict(s)) return CopyFromAnyViewAfterCheck(s);
    if (!details::IsSeqIndex(s->type_index)) return std::nullopt;
    const KFFISeqCell* cell = details::SeqCellOf(s);
    const KFFIAny* d = details::SeqData(cell);
    std::vector<int64_t> dims(static_cast<size_t>(cell->size));
    for (int64_t i = 0; i < cell->size; ++i) {
      std::optional<int64_t> v = TypeTraits<int64_t>::TryCastFromAnyView(&d[i]);
      if (!v.has_value()) return std::nullopt;
      dims[i] = *v;
    }
    return Shape(dims);
  }
  static std::string TypeStr() { return "Shape"; }
  static std::string GetMismatchTypeInfo(const KFFIAny* s) {
    return details::SeqMismatchInfo<int64_t>(s);
  }
};

// Declared after TypeTraits<Shape>: `==` looks at Any's operator too, and that instantiates
// the traits of Shape.

/// Shapes are equal when their dimensions are.
inline bool operator==(const Shape& a, const Shape& b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin());
}
inline bool operator!=(const Shape& a, const Shape& b) { return !(a == b); }

/// "(2, 3)", for error messages.
inline std::string KFFIToErrorString(const Shape& s) {
  std::string out = "(";
  for (int64_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + (s.size() == 1 ? ",)" : ")");
}

}  // namespace kffi

#endif  // KFFI_CONTAINER_SHAPE_H_
