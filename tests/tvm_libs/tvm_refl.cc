// tests/tvm_libs/tvm_refl.cc: a TVM-FFI library with a reflected object type (refl::ObjectDef:
// Point {x: int64 read-only, y: double read-write}) and functions that make and read it, built
// with apache-tvm-ffi's headers only. With TVM_REFL_HOSTILE defined (tvm_refl_hostile.cc) it
// also registers a field whose offset lies past the object.
// SPDX-License-Identifier: Apache-2.0
#include <tvm/ffi/reflection/registry.h>
#include <tvm/ffi/tvm_ffi.h>

#include <cstdint>

namespace ffi = tvm::ffi;
namespace refl = tvm::ffi::reflection;

#ifndef TVM_REFL_KEY
#define TVM_REFL_KEY "tvm_refl.Point"
#endif

namespace {

class PointObj : public ffi::Object {
 public:
  int64_t x = 0;
  double y = 0;
  static constexpr bool _type_mutable = true;  // y is written through reflection
  PointObj() = default;
  PointObj(int64_t x_in, double y_in) : x(x_in), y(y_in) {}
  TVM_FFI_DECLARE_OBJECT_INFO_FINAL(TVM_REFL_KEY, PointObj, ffi::Object);
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

TVM_FFI_STATIC_INIT_BLOCK() {
  refl::ObjectDef<PointObj>().def_ro("x", &PointObj::x).def_rw("y", &PointObj::y);
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
