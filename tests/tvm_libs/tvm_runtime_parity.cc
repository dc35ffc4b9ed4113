// tests/tvm_libs/tvm_runtime_parity.cc: a TVM-FFI library that leans on what apache-tvm-ffi's
// runtime provides beyond calls: type attribute columns, overloaded and static methods and
// __ffi_init__, field defaults, the global functions libtvm_ffi registers (`ffi.*`), big integers,
// strided tensor views, init-once handles, dtype aliases and the structural visitor's and
// mutator's container hooks. Built with apache-tvm-ffi's headers only; each export checks one thing
// through the headers' own code and returns what it saw, so a test can compare kffi's runtime with
// apache-tvm-ffi's.
// SPDX-License-Identifier: Apache-2.0
#include <tvm/ffi/big_int.h>
#include <tvm/ffi/container/array.h>
#include <tvm/ffi/container/map.h>
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/dtype.h>
#include <tvm/ffi/extra/structural_mutate.h>
#include <tvm/ffi/extra/structural_visit.h>
#include <tvm/ffi/function.h>
#include <tvm/ffi/reflection/accessor.h>
#include <tvm/ffi/reflection/overload.h>
#include <tvm/ffi/reflection/registry.h>
#include <tvm/ffi/string.h>

#include <cstdint>
#include <string>
#include <vector>

namespace ffi = tvm::ffi;
namespace refl = tvm::ffi::reflection;

namespace {

class ShapeKindObj : public ffi::Object {
 public:
  int64_t sides = 0;
  int64_t colour = 7;  // a field with a default
  explicit ShapeKindObj(int64_t s) : sides(s) {}
  explicit ShapeKindObj(double) : sides(-1) {}
  static int64_t Twice(int64_t x) { return 2 * x; }
  static double Half(double x) { return x / 2; }
  int64_t PlusInt(int64_t x) const { return sides + x; }
  std::string PlusStr(std::string x) const { return x + std::to_string(sides); }
  static constexpr bool _type_mutable = true;  // colour is writable
  TVM_FFI_DECLARE_OBJECT_INFO("tvm_parity.ShapeKind", ShapeKindObj, ffi::Object);
};

TVM_FFI_STATIC_INIT_BLOCK() {
  refl::OverloadObjectDef<ShapeKindObj>()
      .def(refl::init<int64_t>())
      .def(refl::init<double>())
      .def_ro("sides", &ShapeKindObj::sides)
      .def_rw("colour", &ShapeKindObj::colour, refl::default_value(int64_t{7}))
      .def("plus", &ShapeKindObj::PlusInt)
      .def("plus", &ShapeKindObj::PlusStr)
      .def_static("scale", &ShapeKindObj::Twice)
      .def_static("scale", &ShapeKindObj::Half);
  refl::TypeAttrDef<ShapeKindObj>().def("tvm_parity.weight", int64_t{42});
}

// The type attribute registered above, read through its column.
int64_t TypeAttr() {
  refl::TypeAttrColumn column("tvm_parity.weight");
  return column[ShapeKindObj::RuntimeTypeIndex()].cast<int64_t>();
}

// __ffi_init__ (overloaded on int and float), the overloaded method and static method, all
// through the type's reflection records.
ffi::Array<ffi::Any> Methods() {
  ffi::Function init = refl::GetMethod("tvm_parity.ShapeKind", "__ffi_init__");
  ffi::Any by_int = init(int64_t{5});
  ffi::Any by_float = init(2.5);
  ffi::Function plus = refl::GetMethod("tvm_parity.ShapeKind", "plus");
  ffi::Function scale = refl::GetMethod("tvm_parity.ShapeKind", "scale");
  return {by_int.cast<ffi::ObjectRef>().as<ShapeKindObj>()->sides,
          by_float.cast<ffi::ObjectRef>().as<ShapeKindObj>()->sides,
          plus(by_int, int64_t{1}),
          plus(by_int, ffi::String("n=")),
          scale(int64_t{21}),
          scale(3.0)};
}

// The default of `colour` as the field record holds it.
int64_t FieldDefault() {
  const TVMFFITypeInfo* info = TVMFFIGetTypeInfo(ShapeKindObj::RuntimeTypeIndex());
  for (int32_t i = 0; i < info->num_fields; ++i) {
    const TVMFFIFieldInfo& f = info->fields[i];
    if (std::string(f.name.data, f.name.size) == "colour") {
      return ffi::AnyView::CopyFromTVMFFIAny(f.default_value_or_factory).cast<int64_t>();
    }
  }
  return -1;
}

// The global functions libtvm_ffi registers.
ffi::Array<ffi::Any> Globals() {
  ffi::Function contains = ffi::Function::GetGlobalRequired("ffi.ArrayContains");
  ffi::Array<int64_t> xs = {1, 2, 3};
  std::vector<ffi::String> names = ffi::Function::ListGlobalNames();
  bool listed = false;
  for (const ffi::String& n : names) listed = listed || n == "tvm_parity.documented";
  ffi::String metadata = ffi::Function::GetGlobalRequired("ffi.GetGlobalFuncMetadata")(
                             ffi::String("tvm_parity.documented"))
                             .cast<ffi::String>();
  ffi::ObjectRef kwargs1 =
      ffi::Function::GetGlobalRequired("ffi.GetKwargsObject")().cast<ffi::ObjectRef>();
  ffi::ObjectRef kwargs2 =
      ffi::Function::GetGlobalRequired("ffi.GetKwargsObject")().cast<ffi::ObjectRef>();
  ffi::Array<ffi::String> types = ffi::Function::GetGlobalRequired("ffi.GetRegisteredTypeKeys")()
                                      .cast<ffi::Array<ffi::String>>();
  bool own_type = false, string_type = false;
  for (const ffi::String& k : types) {
    own_type = own_type || k == "tvm_parity.ShapeKind";
    string_type = string_type || k == "ffi.String";
  }
  return {contains(xs, int64_t{2}),
          contains(xs, int64_t{9}),
          listed,
          metadata.find("type_schema") != std::string::npos,
          kwargs1.same_as(kwargs2),
          own_type,
          string_type};
}

// Equal big integers made two ways hash and compare equal, and find each other in a Map.
ffi::Array<ffi::Any> BigInts() {
  ffi::BigInt a = ffi::BigInt(1) << 200;
  ffi::BigInt b = ffi::BigInt(2) << 199;
  ffi::Map<ffi::BigInt, int64_t> m{{a, 3}};
  return {ffi::Any(a).type_index() == ffi::TypeIndex::kTVMFFIBigInt, ffi::Any(a).GetTypeKey(),
          ffi::AnyEqual()(a, b), ffi::AnyHash()(a) == ffi::AnyHash()(b), m.at(b)};
}

// A strided view of a tensor (Tensor::as_strided imports TVMFFITensorCreateUnsafeView).
ffi::Array<int64_t> StridedView(ffi::Tensor t) {
  ffi::Tensor v = t.as_strided({2, 2}, {1, 2}, 1);
  const DLTensor* src = t.GetDLTensorPtr();
  const DLTensor* view = v.GetDLTensorPtr();
  const int32_t* base = static_cast<const int32_t*>(src->data);
  const int32_t* data =
      reinterpret_cast<const int32_t*>(static_cast<const char*>(view->data) + view->byte_offset);
  return {view->shape[0], view->shape[1], view->strides[0], view->strides[1],
          data[0],        data[1],        data[2],          data - base};
}

int InitToNull(void** out) {
  *out = nullptr;
  return 0;
}

// Init-once: an init function that yields NULL fails the call and leaves the handle unset.
ffi::Array<int64_t> InitOnce() {
  void* handle = nullptr;
  int rc = TVMFFIHandleInitOnce(&handle, InitToNull);
  if (rc != 0) {
    TVMFFIObjectHandle err = nullptr;
    TVMFFIErrorMoveFromRaised(&err);
    if (err != nullptr) TVMFFIObjectDecRef(err);
  }
  return {rc, handle == nullptr};
}

// dtype aliases through the headers' parser.
ffi::Array<ffi::String> DtypeAliases() {
  return {ffi::DLDataTypeToString(ffi::StringToDLDataType("bf16")),
          ffi::DLDataTypeToString(ffi::StringToDLDataType("fp8_e4m3fnx2")),
          ffi::DLDataTypeToString(ffi::StringToDLDataType("int32xvscalex4"))};
}

// Counts the leaves a structural visit reaches in a nested Array, with a Map in it or not.
class CountingVisitorObj : public ffi::StructuralVisitorObj {
 public:
  int64_t leaves = 0;
  CountingVisitorObj() : ffi::StructuralVisitorObj(&kTable) {}
  static TVMFFIAny VisitAbi(ffi::StructuralVisitorObj* self, ffi::AnyView value) noexcept {
    auto* me = static_cast<CountingVisitorObj*>(self);
    if (value.type_index() == ffi::TypeIndex::kTVMFFIInt) {
      ++me->leaves;
      return ffi::AnyView(nullptr).CopyToTVMFFIAny();
    }
    return ffi::details::ExpectedUnsafe::MoveToTVMFFIAny(me->DefaultVisitExpected(value));
  }
  static inline const ffi::StructuralVisitorVTable kTable{&VisitAbi};
  TVM_FFI_DECLARE_OBJECT_INFO_FINAL("tvm_parity.CountingVisitor", CountingVisitorObj,
                                    ffi::StructuralVisitorObj);
};

int64_t VisitLeaves(bool with_map) {
  ffi::Array<ffi::Any> inner = {int64_t{2}, int64_t{3}};
  ffi::Array<ffi::Any> root = {int64_t{1}, inner};
  if (with_map) root.push_back(ffi::Map<ffi::Any, ffi::Any>{{ffi::String("k"), int64_t{4}}});
  auto visitor = ffi::make_object<CountingVisitorObj>();
  ffi::Expected<ffi::Optional<ffi::VisitInterrupt>> r = visitor->VisitExpected(root);
  if (r.is_err()) throw r.error();
  return visitor->leaves;
}

// A structural mutation adding 10 to every int in nested Arrays (and a Map): a new root (the
// source shared with a second holder is left as it was).
ffi::Array<ffi::Any> MutateAddTen(bool with_map) {
  ffi::Array<ffi::Any> inner = {int64_t{1}, int64_t{2}};
  ffi::Array<ffi::Any> root = {inner, int64_t{3}, ffi::String("leaf")};
  if (with_map) root.push_back(ffi::Map<ffi::Any, ffi::Any>{{ffi::String("k"), int64_t{4}}});
  ffi::Array<ffi::Any> keep = root;
  auto add_ten = [](int64_t v, ffi::StructuralMutatorObj*) -> ffi::Expected<ffi::Any> {
    return ffi::Any(v + 10);
  };
  ffi::Array<ffi::Any> out = ffi::StructuralMutate(root, add_ten).cast<ffi::Array<ffi::Any>>();
  ffi::Array<ffi::Any> new_inner = out[0].cast<ffi::Array<ffi::Any>>();
  return {new_inner[0], new_inner[1], out[1], out[2], keep[1], inner[0], out.same_as(keep)};
}

TVM_FFI_STATIC_INIT_BLOCK() {
  refl::GlobalDef().def(
      "tvm_parity.documented", [](int64_t x) { return x + 1; }, "adds one");
}

}  // namespace

TVM_FFI_DLL_EXPORT_TYPED_FUNC(type_attr, TypeAttr);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(methods, Methods);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(field_default, FieldDefault);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(globals, Globals);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(big_ints, BigInts);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(strided_view, StridedView);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(init_once, InitOnce);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(dtype_aliases, DtypeAliases);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(visit_leaves, VisitLeaves);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(mutate_add_ten, MutateAddTen);
