// tests/tvm_libs/tvm_refl.cc: a TVM-FFI library with reflected object types (refl::ObjectDef:
// Point {x: int64 read-only, y: double read-write, method sum()}, its subclass Point3 {z: double
// read-write}, and Range {lo, hi: int64,
// hits: int64 read-write and left out of ==/hash, method length()}, which declares structural
// equality) and functions that make and read them, built with apache-tvm-ffi's headers only.
// `type_info` reads a type's record back through TVMFFIGetTypeInfo (whichever runtime the
// library is bound to). With TVM_REFL_HOSTILE defined (tvm_refl_hostile.cc) it also registers a
// field whose offset lies past the object.
// SPDX-License-Identifier: Apache-2.0
#include <tvm/ffi/reflection/registry.h>
#include <tvm/ffi/tvm_ffi.h>

#include <cstdint>

namespace ffi = tvm::ffi;
namespace refl = tvm::ffi::reflection;

#ifndef TVM_REFL_KEY
#define TVM_REFL_KEY "tvm_refl.Point"
#define TVM_REFL_RANGE_KEY "tvm_refl.Range"
#endif

namespace {

class PointObj : public ffi::Object {
 public:
  int64_t x = 0;
  double y = 0;
  static constexpr bool _type_mutable = true;  // y is written through reflection
  PointObj() = default;
  PointObj(int64_t x_in, double y_in) : x(x_in), y(y_in) {}
  double Sum() const { return static_cast<double>(x) + y; }
  TVM_FFI_DECLARE_OBJECT_INFO(TVM_REFL_KEY, PointObj, ffi::Object);
};

// A subclass: its objects are Points too (isinstance follows the type hierarchy).
class Point3Obj : public PointObj {
 public:
  double z = 0;
  Point3Obj() = default;
  Point3Obj(int64_t x_in, double y_in, double z_in) : PointObj(x_in, y_in), z(z_in) {}
  TVM_FFI_DECLARE_OBJECT_INFO_FINAL(TVM_REFL_KEY "3", Point3Obj, PointObj);
};

// Compared by value (a tree node): two Ranges with the same bounds are equal.
class RangeObj : public ffi::Object {
 public:
  int64_t lo = 0;
  int64_t hi = 0;
  int64_t hits = 0;  // a counter, left out of structural ==/hash (SEqHashIgnore)
  static constexpr bool _type_mutable = true;
  static constexpr TVMFFISEqHashKind _type_s_eq_hash_kind = kTVMFFISEqHashKindTreeNode;
  RangeObj() = default;
  RangeObj(int64_t lo_in, int64_t hi_in) : lo(lo_in), hi(hi_in) {}
  int64_t Length() const { return hi - lo; }
  TVM_FFI_DECLARE_OBJECT_INFO_FINAL(TVM_REFL_RANGE_KEY, RangeObj, ffi::Object);
};

const PointObj* AsPoint(const ffi::ObjectRef& p) {
  const PointObj* point = p.as<PointObj>();
  TVM_FFI_CHECK(point != nullptr, TypeError) << "expected a " TVM_REFL_KEY;
  return point;
}

ffi::ObjectRef MakePoint(int64_t x, double y) {
  return ffi::ObjectRef(ffi::make_object<PointObj>(x, y));
}
int64_t PointX(ffi::ObjectRef p) { return AsPoint(p)->x; }
double PointY(ffi::ObjectRef p) { return AsPoint(p)->y; }
// The same object back (a round trip keeps its identity).
ffi::ObjectRef Identity(ffi::ObjectRef p) {
  AsPoint(p);
  return p;
}
ffi::ObjectRef MakePoint3(int64_t x, double y, double z) {
  return ffi::ObjectRef(ffi::make_object<Point3Obj>(x, y, z));
}
ffi::ObjectRef MakeRange(int64_t lo, int64_t hi) {
  return ffi::ObjectRef(ffi::make_object<RangeObj>(lo, hi));
}
// What TVMFFIGetTypeInfo says of a type (by key): [field names..., "|", method names..., "|",
// object size, structural kind], as the library itself reads it back; a field left out of
// structural ==/hash (SEqHashIgnore or CompareOff) has "!" after its name.
ffi::Array<ffi::Any> TypeInfo(ffi::String key) {
  int32_t index = -1;
  TVMFFIByteArray k{key.data(), key.size()};
  TVM_FFI_CHECK(TVMFFITypeKeyToIndex(&k, &index) == 0, KeyError) << "no type " << key;
  const TVMFFITypeInfo* info = TVMFFIGetTypeInfo(index);
  ffi::Array<ffi::Any> out;
  for (int32_t i = 0; i < info->num_fields; ++i) {
    std::string name(info->fields[i].name.data, info->fields[i].name.size);
    if ((info->fields[i].flags &
         (kTVMFFIFieldFlagBitMaskSEqHashIgnore | kTVMFFIFieldFlagBitMaskCompareOff)) != 0) {
      name += "!";
    }
    out.push_back(ffi::String(name));
  }
  out.push_back(ffi::String("|"));
  for (int32_t i = 0; i < info->num_methods; ++i) {
    out.push_back(ffi::String(info->methods[i].name.data, info->methods[i].name.size));
  }
  out.push_back(ffi::String("|"));
  out.push_back(static_cast<int64_t>(info->metadata != nullptr ? info->metadata->total_size : -1));
  out.push_back(static_cast<int64_t>(
      info->metadata != nullptr ? static_cast<int>(info->metadata->structural_eq_hash_kind) : -1));
  return out;
}
ffi::Array<ffi::ObjectRef> MakePoints(int64_t n) {
  ffi::Array<ffi::ObjectRef> out;
  for (int64_t i = 0; i < n; ++i) out.push_back(MakePoint(i, 0.5 * static_cast<double>(i)));
  return out;
}

#ifdef TVM_REFL_HOSTILE
int ReadFar(void* field, TVMFFIAny* out) {
  out->type_index = kTVMFFIInt;
  out->zero_padding = 0;
  out->v_int64 = *static_cast<const int64_t*>(field);
  return 0;
}
#endif

}  // namespace

TVM_FFI_DLL_EXPORT_TYPED_FUNC(make_point, MakePoint);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(point_x, PointX);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(point_y, PointY);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(identity, Identity);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(make_points, MakePoints);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(make_point3, MakePoint3);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(make_range, MakeRange);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(type_info, TypeInfo);

TVM_FFI_STATIC_INIT_BLOCK() {
  refl::ObjectDef<PointObj>()
      .def_ro("x", &PointObj::x)
      .def_rw("y", &PointObj::y)
      .def("sum", &PointObj::Sum);
  refl::ObjectDef<Point3Obj>().def_rw("z", &Point3Obj::z);
  refl::ObjectDef<RangeObj>()
      .def_ro("lo", &RangeObj::lo)
      .def_ro("hi", &RangeObj::hi)
      .def_rw("hits", &RangeObj::hits, refl::AttachFieldFlag::SEqHashIgnore())
      .def("length", &RangeObj::Length);
#ifdef TVM_REFL_HOSTILE
  // A field record whose offset lies 1 MiB past the object's start: reading it would read
  // memory the object does not own.
  TVMFFIFieldInfo bad{};
  bad.name = TVMFFIByteArray{"far", 3};
  bad.size = sizeof(int64_t);
  bad.alignment = alignof(int64_t);
  bad.offset = int64_t{1} << 20;
  bad.getter = ReadFar;
  bad.default_value_or_factory.type_index = kTVMFFINone;
  bad.field_static_type_index = kTVMFFIInt;
  TVMFFITypeRegisterField(PointObj::_GetOrAllocRuntimeTypeIndex(), &bad);
#endif
}
