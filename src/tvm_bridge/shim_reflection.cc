// src/tvm_bridge/shim_reflection.cc: TVM-FFI reflection registrations (refl::ObjectDef) on the
// shim, fed to kffi's reflection registry.
//
// A library bound to the shim keeps its object types in kffi's registry, so their fields belong
// in kffi's reflection registry too: then kffi's Python binding shows them as it shows a kffi
// library's. TVM-FFI registers a type's metadata (object size, creator) first and then its fields
// one call each; each call here re-registers the type with every field so far (kffi's registry
// accepts a registration that appends fields to an earlier one). Field getters and setters have
// kffi's signatures and value layout, so they are registered as they are.
//
// kffi's registry holds less than TVM-FFI's records say (no field defaults or flags beyond
// writable, no static methods, one method per name), so the records are also kept here as the
// library registered them, and TVMFFIGetTypeInfo reports those: a library's own inline code
// (refl::GetMethod, `__ffi_init__`, CallFieldSetterToDefault) reads them back unchanged.
// SPDX-License-Identifier: Apache-2.0
#include <kffi/c_api.h>

#include <algorithm>
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

// A growable array whose elements never move: when full, a buffer twice the size takes over and
// the old one is kept, since a reader may hold the pointer TVMFFIGetTypeInfo gave it.
template <typename T>
class StableArray {
 public:
  void PushBack(const T& value) {
    if (size_ == capacity_) {
      size_t capacity = capacity_ == 0 ? 4 : capacity_ * 2;
      auto grown = std::make_unique<T[]>(capacity);
      std::copy(data_.get(), data_.get() + size_, grown.get());
      if (data_) retired_.push_back(std::move(data_));
      data_ = std::move(grown);
      capacity_ = capacity;
    }
    data_[size_++] = value;
  }
  const T* Data() const { return size_ == 0 ? nullptr : data_.get(); }
  int32_t Size() const { return static_cast<int32_t>(size_); }
  const T* begin() const { return data_.get(); }
  const T* end() const { return data_.get() + size_; }

 private:
  std::unique_ptr<T[]> data_;
  size_t size_ = 0;
  size_t capacity_ = 0;
  std::vector<std::unique_ptr<T[]>> retired_;
};

// One type's records in TVM-FFI's layout, as registered: strings copied, objects (method
// functions, Function setters, default values and factories) held, all for the process's life.
struct TvmRecords {
  StableArray<TvmFieldInfo> fields;
  StableArray<TvmMethodInfo> methods;
  TvmTypeMetadata metadata{};
  bool has_metadata = false;
  uint64_t version = 0;
  std::deque<std::string> strings;

  KFFIByteArray Keep(const KFFIByteArray& s) {
    if (s.data == nullptr || s.size == 0) return KFFIByteArray{"", 0};
    const std::string& kept = strings.emplace_back(s.data, s.size);
    return KFFIByteArray{kept.data(), kept.size()};
  }
  // An owned copy of a value a record holds (a view of a string becomes a string object).
  static int Hold(const KFFIAny& value, KFFIAny* out) {
    if (value.type_index == kKFFINone) {
      *out = value;
      return 0;
    }
    return KFFIAnyViewToOwnedAny(&value, out);
  }
};

struct Types {
  std::mutex mutex;
  std::map<int32_t, TypeFields> by_index;
  std::map<int32_t, TvmRecords> tvm;
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

// The kffi side of a field registration: the type re-registered with every field so far.
int RegisterKffiField(Types* all, int32_t type_index, const TvmFieldInfo& f) {
  auto it = all->by_index.find(type_index);
  if (it == all->by_index.end() || it->second.object_size == 0) {
    std::string message = "TVMFFITypeRegisterField: type index " + std::to_string(type_index) +
                          " registers a field before its metadata (TVMFFITypeRegisterMetadata, "
                          "which gives the object's size)";
    KFFIErrorSetRaisedFromCStr("ValueError", message.c_str());
    return -1;
  }
  TypeFields t = it->second;  // a copy: kept only once kffi accepts it
  t.strings->emplace_back(f.name.data == nullptr ? "" : std::string(f.name.data, f.name.size));
  const std::string& name = t.strings->back();
  int32_t index = f.field_static_type_index;
  // An index kffi's registry lacks (a TVM-only static type) is a field of any value.
  if (index < kKFFIAny || (index >= kKFFIStaticObjectBegin && KFFIGetTypeInfo(index) == nullptr)) {
    index = kKFFIAny;
  }
  t.strings->push_back(TypeStr(index));
  const std::string& type_str = t.strings->back();
  KFFIFieldInfo k{};
  k.name = KFFIByteArray{name.data(), name.size()};
  k.offset = f.offset;
  k.size = f.size;
  k.type_index = index;
  k.type_str = KFFIByteArray{type_str.data(), type_str.size()};
  k.getter = f.getter;
  // A setter given as a Function object has no KFFIFieldSetter form: the field is read-only here.
  if ((f.flags & kTvmFieldWritable) != 0 && (f.flags & kTvmSetterIsFunction) == 0 &&
      f.setter != nullptr) {
    k.flags = kKFFIFieldFlagWritable;
    k.setter = reinterpret_cast<KFFIFieldSetter>(f.setter);
  }
  if ((f.flags & (kTvmFieldSEqHashIgnore | kTvmFieldCompareOff)) != 0) {
    k.flags |= kKFFIFieldFlagCompareOff;
  }
  t.fields.push_back(k);
  if (Register(type_index, t) != 0) return -1;
  it->second = std::move(t);
  return 0;
}

// The kffi side of an instance method. A name registered before is an overload: the first
// registration's function dispatches among all of them, so kffi's registry keeps that one.
int RegisterKffiMethod(Types* all, int32_t type_index, const TvmMethodInfo& m) {
  auto it = all->by_index.find(type_index);
  if (it == all->by_index.end() || it->second.object_size == 0) {
    std::string message = "TVMFFITypeRegisterMethod: type index " + std::to_string(type_index) +
                          " registers a method before its metadata (TVMFFITypeRegisterMetadata)";
    KFFIErrorSetRaisedFromCStr("ValueError", message.c_str());
    return -1;
  }
  std::string_view name_view(m.name.data == nullptr ? "" : m.name.data, m.name.size);
  for (const KFFIMethodInfo& earlier : it->second.methods) {
    if (std::string_view(earlier.name.data, earlier.name.size) == name_view) return 0;
  }
  TypeFields t = it->second;  // a copy: kept only once kffi accepts it
  const std::string& name = t.strings->emplace_back(name_view);
  t.methods.push_back(KFFIMethodInfo{KFFIByteArray{name.data(), name.size()}, m.method.v_obj});
  if (Register(type_index, t) != 0) return -1;
  it->second = std::move(t);
  return 0;
}

// The TVM side of a field registration: the record as given, its strings copied and its objects
// (a Function setter, a default value or factory) held.
int KeepTvmField(TvmRecords* tvm, int32_t type_index, const TvmFieldInfo& f) {
  std::string_view name(f.name.data == nullptr ? "" : f.name.data, f.name.size);
  for (const TvmFieldInfo& earlier : tvm->fields) {
    if (std::string_view(earlier.name.data, earlier.name.size) == name) {
      std::string message = "TVMFFITypeRegisterField: duplicate field name \"" + std::string(name) +
                            "\" in type index " + std::to_string(type_index);
      KFFIErrorSetRaisedFromCStr("ValueError", message.c_str());
      return -1;
    }
  }
  TvmFieldInfo kept = f;
  kept.name = tvm->Keep(f.name);
  kept.doc = tvm->Keep(f.doc);
  kept.metadata = tvm->Keep(f.metadata);
  if (TvmRecords::Hold(f.default_value_or_factory, &kept.default_value_or_factory) != 0) return -1;
  if ((f.flags & kTvmSetterIsFunction) != 0 && f.setter != nullptr) {
    KFFIObjectIncRef(static_cast<KFFIObjectHandle>(f.setter));
  }
  tvm->fields.PushBack(kept);
  ++tvm->version;
  return 0;
}

}  // namespace

int ShimRegisterTypeMetadata(int32_t type_index, const void* metadata) {
  const auto* m = static_cast<const TvmTypeMetadata*>(metadata);
  if (m == nullptr) {
    KFFIErrorSetRaisedFromCStr("ValueError", "TVMFFITypeRegisterMetadata: metadata is NULL");
    return -1;
  }
  Types* all = Types::Get();
  std::lock_guard<std::mutex> lock(all->mutex);
  TvmRecords& tvm = all->tvm[type_index];
  if (tvm.has_metadata) {
    const KFFITypeInfo* k = KFFIGetTypeInfo(type_index);
    std::string message =
        "TVMFFITypeRegisterMetadata: type " +
        (k != nullptr ? std::string(k->type_key.data, k->type_key.size)
                      : "index " + std::to_string(type_index)) +
        " already has its metadata (two ObjectDef<T>() for one T, or two types with one key)";
    KFFIErrorSetRaisedFromCStr("RuntimeError", message.c_str());
    return -1;
  }
  // kffi's static types are its own to describe: only the TVM record is kept for them.
  if (type_index >= kKFFIDynObjectBegin) {
    TypeFields t = all->by_index[type_index];  // a copy: kept only once kffi accepts it
    t.object_size = m->total_size;
    t.creator = m->creator;
    // A structural equality kind (tree, DAG, constant tree) means == and hash by field values.
    t.flags = TvmKindIsStructural(m->structural_eq_hash_kind) ? kKFFITypeFlagStructuralEq : 0;
    if (Register(type_index, t) != 0) return -1;
    all->by_index[type_index] = std::move(t);
  }
  tvm.metadata = *m;
  tvm.metadata.doc = tvm.Keep(m->doc);
  tvm.has_metadata = true;
  ++tvm.version;
  return 0;
}

int ShimRegisterField(int32_t type_index, const void* field) {
  const auto* f = static_cast<const TvmFieldInfo*>(field);
  if (f == nullptr) {
    KFFIErrorSetRaisedFromCStr("ValueError", "TVMFFITypeRegisterField: info is NULL");
    return -1;
  }
  Types* all = Types::Get();
  std::lock_guard<std::mutex> lock(all->mutex);
  if (f->name.data == nullptr && f->name.size != 0) {
    KFFIErrorSetRaisedFromCStr("ValueError", "TVMFFITypeRegisterField: the name is NULL");
    return -1;
  }
  if (type_index >= kKFFIDynObjectBegin && RegisterKffiField(all, type_index, *f) != 0) return -1;
  return KeepTvmField(&all->tvm[type_index], type_index, *f);
}

int ShimRegisterMethod(int32_t type_index, const void* method) {
  const auto* m = static_cast<const TvmMethodInfo*>(method);
  if (m == nullptr) {
    KFFIErrorSetRaisedFromCStr("ValueError", "TVMFFITypeRegisterMethod: info is NULL");
    return -1;
  }
  if (m->method.type_index != kKFFIFunction || m->method.v_obj == nullptr ||
      (m->name.data == nullptr && m->name.size != 0)) {
    KFFIErrorSetRaisedFromCStr("ValueError",
                               "TVMFFITypeRegisterMethod: the method is not a Function, or its "
                               "name is NULL");
    return -1;
  }
  Types* all = Types::Get();
  std::lock_guard<std::mutex> lock(all->mutex);
  // kffi's static types are its own to describe, and kffi's registry has no static methods (a
  // constructor such as `__ffi_init__`): those go only into the TVM record.
  if (type_index >= kKFFIDynObjectBegin && (m->flags & kTvmFieldStaticMethod) == 0 &&
      RegisterKffiMethod(all, type_index, *m) != 0) {
    return -1;
  }
  TvmRecords& tvm = all->tvm[type_index];
  TvmMethodInfo kept = *m;
  kept.name = tvm.Keep(m->name);
  kept.doc = tvm.Keep(m->doc);
  kept.metadata = tvm.Keep(m->metadata);
  if (TvmRecords::Hold(m->method, &kept.method) != 0) return -1;
  tvm.methods.PushBack(kept);
  ++tvm.version;
  return 0;
}

bool ShimTvmRecordsOf(int32_t type_index, ShimTvmRecords* out) {
  Types* all = Types::Get();
  std::lock_guard<std::mutex> lock(all->mutex);
  auto it = all->tvm.find(type_index);
  if (it == all->tvm.end()) return false;
  const TvmRecords& tvm = it->second;
  out->fields = tvm.fields.Data();
  out->num_fields = tvm.fields.Size();
  out->methods = tvm.methods.Data();
  out->num_methods = tvm.methods.Size();
  out->metadata = tvm.has_metadata ? &tvm.metadata : nullptr;
  out->version = tvm.version;
  return true;
}

}  // namespace tvmglue
}  // namespace kffi
