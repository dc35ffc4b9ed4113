// src/tvm_bridge/shim_reflection.cc: TVM-FFI reflection registrations (refl::ObjectDef) on the
// shim, fed to kffi's reflection registry.
//
// A library bound to the shim keeps its object types in kffi's registry, so their fields belong
// in kffi's reflection registry too: then kffi's Python binding shows them as it shows a kffi
// library's. TVM-FFI registers a type's metadata (object size, creator) first and then its fields
// one call each; each call here re-registers the type with every field so far (kffi's registry
// accepts a registration that appends fields to an earlier one). Field getters and setters have
// kffi's signatures and value layout, so they are registered as they are.
// SPDX-License-Identifier: Apache-2.0
#include <kffi/c_api.h>

#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "tvm_bridge/bridge_internal.h"

namespace kffi {
namespace tvmglue {
namespace {

// What the shim knows of one type: its size, creator and fields so far (strings owned here).
struct TypeFields {
  int64_t object_size = 0;
  int32_t flags = 0;  // kKFFITypeFlag* bits
  int (*creator)(KFFIObjectHandle*) = nullptr;
  // Names and type spellings the records point at: shared by the copies a registration makes
  // (a copy of the strings would leave the records pointing into the original, freed once the
  // copy replaces it); a deque, so growing it never moves a string. Only ever appended to.
  std::shared_ptr<std::deque<std::string>> strings = std::make_shared<std::deque<std::string>>();
  std::vector<KFFIFieldInfo> fields;
  std::vector<KFFIMethodInfo> methods;  // borrowed: kffi's registry keeps its own references
};

struct Types {
  std::mutex mutex;
  std::map<int32_t, TypeFields> by_index;
  static Types* Get() {
    static Types* t = new Types();  // never freed: registrations live as long as the process
    return t;
  }
};

// kffi's spelling of a field's type in signatures, from its static type index.
std::string TypeStr(int32_t index) {
  switch (index) {
    case kKFFIInt:
      return "int";
    case kKFFIBool:
      return "bool";
    case kKFFIFloat:
      return "float";
    case kKFFIStr:
      return "str";
    case kKFFIDataType:
      return "DataType";
    case kKFFIDevice:
      return "Device";
    case kKFFITensor:
      return "Tensor";
    default:
      break;
  }
  if (index >= kKFFIStaticObjectBegin) {
    if (const KFFITypeInfo* t = KFFIGetTypeInfo(index)) {
      return std::string(t->type_key.data, t->type_key.size);
    }
  }
  return "Any";
}

int Register(int32_t type_index, const TypeFields& t) {
  KFFITypeReflection info{};
  info.type_index = type_index;
  info.object_size = t.object_size;
  info.num_fields = static_cast<int32_t>(t.fields.size());
  info.fields = t.fields.empty() ? nullptr : t.fields.data();
  info.num_methods = static_cast<int32_t>(t.methods.size());
  info.methods = t.methods.empty() ? nullptr : t.methods.data();
  info.flags = t.flags;
  info.creator = t.creator;
  return KFFITypeRegisterReflection(&info);
}

}  // namespace

int ShimRegisterTypeMetadata(int32_t type_index, const void* metadata) {
  const auto* m = static_cast<const TvmTypeMetadata*>(metadata);
  if (m == nullptr) {
    KFFIErrorSetRaisedFromCStr("ValueError", "TVMFFITypeRegisterMetadata: metadata is NULL");
    return -1;
  }
  // kffi's static types are its own to describe: their records are accepted and not kept.
  if (type_index < kKFFIDynObjectBegin) return 0;
  Types* all = Types::Get();
  std::lock_guard<std::mutex> lock(all->mutex);
  TypeFields t = all->by_index[type_index];  // a copy: kept only once kffi accepts it
  t.object_size = m->total_size;
  t.creator = m->creator;
  // A structural equality kind (tree, DAG, constant tree) means == and hash by field values.
  t.flags = TvmKindIsStructural(m->structural_eq_hash_kind) ? kKFFITypeFlagStructuralEq : 0;
  if (Register(type_index, t) != 0) return -1;
  all->by_index[type_index] = std::move(t);
  return 0;
}

int ShimRegisterField(int32_t type_index, const void* field) {
  const auto* f = static_cast<const TvmFieldInfo*>(field);
  if (f == nullptr) {
    KFFIErrorSetRaisedFromCStr("ValueError", "TVMFFITypeRegisterField: info is NULL");
    return -1;
  }
  if (type_index < kKFFIDynObjectBegin) return 0;  // as for the metadata
  Types* all = Types::Get();
  std::lock_guard<std::mutex> lock(all->mutex);
  auto it = all->by_index.find(type_index);
  if (it == all->by_index.end() || it->second.object_size == 0) {
    std::string message = "TVMFFITypeRegisterField: type index " + std::to_string(type_index) +
                          " registers a field before its metadata (TVMFFITypeRegisterMetadata, "
                          "which gives the object's size)";
    KFFIErrorSetRaisedFromCStr("ValueError", message.c_str());
    return -1;
  }
  TypeFields t = it->second;  // a copy: kept only once kffi accepts it
  if (f->name.data == nullptr && f->name.size != 0) {
    KFFIErrorSetRaisedFromCStr("ValueError", "TVMFFITypeRegisterField: the name is NULL");
    return -1;
  }
  t.strings->emplace_back(f->name.data == nullptr ? "" : std::string(f->name.data, f->name.size));
  const std::string& name = t.strings->back();
  int32_t index = f->field_static_type_index;
  // An index kffi's registry lacks (a TVM-only static type) is a field of any value.
  if (index < kKFFIAny || (index >= kKFFIStaticObjectBegin && KFFIGetTypeInfo(index) == nullptr)) {
    index = kKFFIAny;
  }
  t.strings->push_back(TypeStr(index));
  const std::string& type_str = t.strings->back();
  KFFIFieldInfo k{};
  k.name = KFFIByteArray{name.data(), name.size()};
  k.offset = f->offset;
  k.size = f->size;
  k.type_index = index;
  k.type_str = KFFIByteArray{type_str.data(), type_str.size()};
  k.getter = f->getter;
  // A setter given as a Function object has no KFFIFieldSetter form: the field is read-only here.
  if ((f->flags & kTvmFieldWritable) != 0 && (f->flags & kTvmSetterIsFunction) == 0 &&
      f->setter != nullptr) {
    k.flags = kKFFIFieldFlagWritable;
    k.setter = reinterpret_cast<KFFIFieldSetter>(f->setter);
  }
  if ((f->flags & (kTvmFieldSEqHashIgnore | kTvmFieldCompareOff)) != 0) {
    k.flags |= kKFFIFieldFlagCompareOff;
  }
  t.fields.push_back(k);
  if (Register(type_index, t) != 0) return -1;
  it->second = std::move(t);
  return 0;
}

int ShimRegisterMethod(int32_t type_index, const void* method) {
  const auto* m = static_cast<const TvmMethodInfo*>(method);
  if (m == nullptr) {
    KFFIErrorSetRaisedFromCStr("ValueError", "TVMFFITypeRegisterMethod: info is NULL");
    return -1;
  }
  // kffi's static types are its own to describe; kffi's registry has no static methods (a
  // constructor such as `__ffi_init__`): those are accepted and not kept.
  if (type_index < kKFFIDynObjectBegin || (m->flags & kTvmFieldStaticMethod) != 0) return 0;
  if (m->method.type_index != kKFFIFunction || m->method.v_obj == nullptr ||
      (m->name.data == nullptr && m->name.size != 0)) {
    KFFIErrorSetRaisedFromCStr("ValueError",
                               "TVMFFITypeRegisterMethod: the method is not a Function, or its "
                               "name is NULL");
    return -1;
  }
  Types* all = Types::Get();
  std::lock_guard<std::mutex> lock(all->mutex);
  auto it = all->by_index.find(type_index);
  if (it == all->by_index.end() || it->second.object_size == 0) {
    std::string message = "TVMFFITypeRegisterMethod: type index " + std::to_string(type_index) +
                          " registers a method before its metadata (TVMFFITypeRegisterMetadata)";
    KFFIErrorSetRaisedFromCStr("ValueError", message.c_str());
    return -1;
  }
  TypeFields t = it->second;  // a copy: kept only once kffi accepts it
  t.strings->emplace_back(m->name.data == nullptr ? "" : std::string(m->name.data, m->name.size));
  const std::string& name = t.strings->back();
  t.methods.push_back(KFFIMethodInfo{KFFIByteArray{name.data(), name.size()}, m->method.v_obj});
  if (Register(type_index, t) != 0) return -1;
  it->second = std::move(t);
  return 0;
}

}  // namespace tvmglue
}  // namespace kffi
