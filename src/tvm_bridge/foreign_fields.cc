// src/tvm_bridge/foreign_fields.cc: the fields of objects whose type lives in a loaded
// apache-tvm-ffi's registry (refl::ObjectDef records), read and written for kffi's Python
// binding.
//
// Such a type is not in kffi's reflection registry (the two runtimes number dynamic types
// independently), so its records are read from apache-tvm-ffi's TVMFFITypeInfo. They come from
// another runtime, so each is checked before use: the field must lie inside the object
// (TVMFFITypeMetadata.total_size), else the access is a ValueError and nothing is read. A type's
// checked records are described once (DescribeType) for the class kffi's Python binding makes
// per type, with one descriptor per field.
// SPDX-License-Identifier: Apache-2.0
#include <kffi/base.h>
#include <kffi/c_api.h>
#include <kffi/error.h>

#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "tvm_bridge/bridge_internal.h"

namespace kffi {
namespace tvmglue {
namespace {

constexpr int32_t kMaxFields = 4096;
constexpr int32_t kMaxDepth = 256;

std::string KeyOf(const TvmTypeInfo* t) { return std::string(t->type_key.data, t->type_key.size); }

void Raise(const char* kind, const std::string& message) {
  KFFIErrorSetRaisedFromCStr(kind, message.c_str());
}

// The field records of info and its ancestors (ancestors first), checked; false with the error
// raised when a record cannot be used.
bool CollectFields(const TvmTypeInfo* info, std::vector<const TvmFieldInfo*>* out) {
  const std::string where = "Cannot read the fields of TVM-FFI type `" + KeyOf(info) + "`: ";
  if (info->type_depth < 0 || info->type_depth > kMaxDepth ||
      (info->type_depth > 0 && info->type_ancestors == nullptr)) {
    Raise("ValueError", where + "its ancestor list is malformed");
    return false;
  }
  const auto* meta = static_cast<const TvmTypeMetadata*>(info->metadata);
  const int64_t header = static_cast<int64_t>(sizeof(KFFIObject));
  for (int32_t d = 0; d <= info->type_depth; ++d) {
    const TvmTypeInfo* t = d == info->type_depth ? info : info->type_ancestors[d];
    if (t == nullptr) continue;
    if (t->num_fields < 0 || t->num_fields > kMaxFields ||
        (t->num_fields > 0 && t->fields == nullptr)) {
      Raise("ValueError", where + "`" + KeyOf(t) + "` lists " + std::to_string(t->num_fields) +
                              " fields, out of range 0.." + std::to_string(kMaxFields));
      return false;
    }
    const auto* fields = static_cast<const TvmFieldInfo*>(t->fields);
    for (int32_t i = 0; i < t->num_fields; ++i) {
      const TvmFieldInfo& f = fields[i];
      if (meta == nullptr || meta->total_size < header) {
        Raise("ValueError", where +
                                "it has no object size (TVMFFITypeMetadata), so its fields "
                                "cannot be checked to lie inside the object");
        return false;
      }
      const int64_t size = meta->total_size;
      // Overflow-free: offset and size are each bounded before their sum is taken.
      if (f.offset < header || f.offset > size || f.size <= 0 || f.size > size - f.offset ||
          f.getter == nullptr || (f.name.data == nullptr && f.name.size != 0)) {
        Raise("ValueError", where + "field #" + std::to_string(i) + ": offset " +
                                std::to_string(f.offset) + " and size " + std::to_string(f.size) +
                                " do not lie inside the object (bytes " + std::to_string(header) +
                                ".." + std::to_string(size) + "), or it has no getter");
        return false;
      }
      out->push_back(&f);
    }
  }
  return true;
}

// Moves the error that code bound to real left in its slot into kffi's, as "<what>: <message>".
int RaiseMovedError(const RealRuntime* real, const std::string& what) {
  MoveErrorToKffi(real);
  std::string kind = "RuntimeError", message = "failed";
  kffi::details::TakeRaisedKindMessage(&kind, &message);
  Raise(kind.c_str(), what + ": " + message);
  return -1;
}

// The descriptions made so far, by type index (one loaded apache-tvm-ffi numbers them all).
struct Desc {
  TvmForeignTypeDesc desc{};
  std::vector<TvmForeignField> fields;
  std::vector<TvmForeignMethod> methods;
};
struct Descs {
  std::mutex mutex;
  std::map<int32_t, std::unique_ptr<Desc>> by_index;
  static Descs* Get() {
    static Descs* d = new Descs();  // never freed: classes keep pointers for the process
    return d;
  }
};

// The methods of info and its ancestors (a subclass's method of the same name wins), each a
// kffi Function around the runtime's. False with the error raised for a malformed record list.
bool CollectMethods(const TvmTypeInfo* info, const RealRuntime* real,
                    std::vector<TvmForeignMethod>* out) {
  for (int32_t d = 0; d <= info->type_depth; ++d) {
    const TvmTypeInfo* t = d == info->type_depth ? info : info->type_ancestors[d];
    if (t == nullptr) continue;
    if (t->num_methods < 0 || t->num_methods > kMaxFields ||
        (t->num_methods > 0 && t->methods == nullptr)) {
      Raise("ValueError", "Cannot read the methods of TVM-FFI type `" + KeyOf(info) + "`: `" +
                              KeyOf(t) + "` lists " + std::to_string(t->num_methods) +
                              " methods, out of range 0.." + std::to_string(kMaxFields));
      return false;
    }
    const auto* methods = static_cast<const TvmMethodInfo*>(t->methods);
    for (int32_t i = 0; i < t->num_methods; ++i) {
      const TvmMethodInfo& m = methods[i];
      if (m.method.type_index != kKFFIFunction || m.method.v_obj == nullptr ||
          (m.name.data == nullptr && m.name.size != 0)) {
        continue;  // not a Function: nothing kffi can call
      }
      KFFIObject* fn = m.method.v_obj;
      KFFIObjectIncRef(fn);
      auto call = static_cast<KFFIFunctionCell*>(KFFIObjectGetCellPtr(fn))->safe_call;
      std::string name(m.name.data, m.name.size);
      KFFIObjectHandle w = WrapForeignCallable(call, fn, fn, real, KeyOf(t) + "." + name);
      TvmForeignMethod entry{m.name, w, (m.flags & kTvmFieldStaticMethod) != 0 ? 1 : 0};
      bool replaced = false;
      for (TvmForeignMethod& earlier : *out) {
        if (std::string_view(earlier.name.data, earlier.name.size) == name) {
          earlier = entry;  // the earlier wrapper stays alive (the process holds it)
          replaced = true;
        }
      }
      if (!replaced) out->push_back(entry);
    }
  }
  return true;
}

// The description of info (a type of real's registry), made once.
int DescribeType(const TvmTypeInfo* info, const RealRuntime* real, const TvmForeignTypeDesc** out) {
  Descs* all = Descs::Get();
  std::lock_guard<std::mutex> lock(all->mutex);
  auto it = all->by_index.find(info->type_index);
  if (it != all->by_index.end()) {
    *out = &it->second->desc;
    return 1;
  }
  std::vector<const TvmFieldInfo*> records;
  if (!CollectFields(info, &records)) return -1;
  auto d = std::make_unique<Desc>();
  for (const TvmFieldInfo* f : records) {
    TvmForeignField field{f->name, f->offset, 0, f->getter, nullptr};
    if ((f->flags & kTvmFieldWritable) != 0 && f->setter != nullptr) {
      if ((f->flags & kTvmSetterIsFunction) != 0) {
        field.flags |= details::kTvmForeignFieldSetterIsFunc;
      } else {
        field.flags |= details::kTvmForeignFieldWritable;
        field.setter = reinterpret_cast<KFFIFieldSetter>(f->setter);
      }
    }
    if ((f->flags & (kTvmFieldSEqHashIgnore | kTvmFieldCompareOff)) != 0) {
      field.flags |= details::kTvmForeignFieldCompareOff;
    }
    // A subclass's field of an ancestor's name takes its place.
    std::string_view name(f->name.data, f->name.size);
    bool replaced = false;
    for (TvmForeignField& earlier : d->fields) {
      if (std::string_view(earlier.name.data, earlier.name.size) == name) {
        earlier = field;
        replaced = true;
      }
    }
    if (!replaced) d->fields.push_back(field);
  }
  if (!CollectMethods(info, real, &d->methods)) return -1;
  const auto* meta = static_cast<const TvmTypeMetadata*>(info->metadata);
  TvmForeignTypeDesc& desc = d->desc;
  desc.type_index = info->type_index;
  desc.type_key = info->type_key;
  desc.static_ancestor = kKFFIObject;
  desc.parent_key = KFFIByteArray{nullptr, 0};
  if (info->type_depth > 0) {
    const TvmTypeInfo* parent = info->type_ancestors[info->type_depth - 1];
    if (parent != nullptr && parent->type_index >= kKFFIDynObjectBegin) {
      desc.parent_key = parent->type_key;
    }
  }
  for (int32_t k = info->type_depth - 1; k >= 0; --k) {
    const TvmTypeInfo* a = info->type_ancestors[k];
    if (a != nullptr && a->type_index < kKFFIDynObjectBegin) {
      desc.static_ancestor = a->type_index;
      break;
    }
  }
  desc.structural = meta != nullptr && TvmKindIsStructural(meta->structural_eq_hash_kind) ? 1 : 0;
  desc.num_fields = static_cast<int32_t>(d->fields.size());
  desc.fields = d->fields.data();
  desc.num_methods = static_cast<int32_t>(d->methods.size());
  desc.methods = d->methods.data();
  *out = &desc;
  all->by_index.emplace(info->type_index, std::move(d));
  return 1;
}

}  // namespace

int ForeignField(KFFIObjectHandle obj, const char* name, size_t size, const KFFIAny* value,
                 KFFIAny* out) {
  try {
    if (obj == nullptr || name == nullptr) return 0;
    const RealRuntime* real = nullptr;
    const TvmTypeInfo* info = RealTypeInfoOf(static_cast<KFFIObject*>(obj), &real);
    if (info == nullptr) return 0;
    std::vector<const TvmFieldInfo*> fields;
    if (!CollectFields(info, &fields)) return -1;
    std::string_view wanted(name, size);
    const TvmFieldInfo* f = nullptr;
    for (auto it = fields.rbegin(); it != fields.rend() && f == nullptr; ++it) {
      if (std::string_view((*it)->name.data, (*it)->name.size) == wanted) f = *it;
    }
    if (f == nullptr) return 0;
    void* at = static_cast<char*>(obj) + f->offset;
    const std::string qualname = KeyOf(info) + "." + std::string(wanted);
    int rc;
    if (value == nullptr) {
      out->type_index = kKFFINone;
      out->zero_padding = 0;
      out->v_int64 = 0;
      rc = f->getter(at, out);
    } else {
      if ((f->flags & kTvmFieldWritable) == 0 || f->setter == nullptr) {
        Raise("AttributeError", "field `" + qualname + "` is read-only");
        return -1;
      }
      if ((f->flags & kTvmSetterIsFunction) != 0) {
        Raise("AttributeError",
              "field `" + qualname + "` has a setter kffi cannot call (a Function object)");
        return -1;
      }
      rc = reinterpret_cast<KFFIFieldSetter>(f->setter)(at, value);
    }
    // The field's code is bound to apache-tvm-ffi: its error is in that runtime's slot.
    if (rc != 0) return RaiseMovedError(real, qualname);
    return 1;
  }
  KFFI_CATCH_ALL { return RaiseCurrentException(); }
}

int ForeignFieldName(KFFIObjectHandle obj, int32_t i, KFFIByteArray* name) {
  try {
    if (obj == nullptr || name == nullptr || i < 0) return 0;
    const RealRuntime* real = nullptr;
    const TvmTypeInfo* info = RealTypeInfoOf(static_cast<KFFIObject*>(obj), &real);
    if (info == nullptr) return 0;
    std::vector<const TvmFieldInfo*> fields;
    if (!CollectFields(info, &fields)) return -1;
    if (static_cast<size_t>(i) >= fields.size()) return 0;
    *name = fields[i]->name;
    return 1;
  }
  KFFI_CATCH_ALL { return RaiseCurrentException(); }
}

int ForeignTypeDescOf(KFFIObjectHandle obj, const TvmForeignTypeDesc** out) {
  try {
    if (obj == nullptr || out == nullptr) return 0;
    const RealRuntime* real = nullptr;
    const TvmTypeInfo* info = RealTypeInfoOf(static_cast<KFFIObject*>(obj), &real);
    return info == nullptr ? 0 : DescribeType(info, real, out);
  }
  KFFI_CATCH_ALL { return RaiseCurrentException(); }
}

int ForeignTypeDescByKey(const char* key, size_t size, const TvmForeignTypeDesc** out) {
  try {
    const RealRuntime* real = FindLoadedRealRuntime(false);
    if (key == nullptr || out == nullptr || real == nullptr || real->type_key_to_index == nullptr ||
        real->get_type_info == nullptr) {
      return 0;
    }
    KFFIByteArray k{key, size};
    int32_t index = -1;
    if (real->type_key_to_index(&k, &index) != 0) {
      KFFIObjectHandle err = nullptr;  // an unknown key: not an error here
      real->error_move_from_raised(&err);
      if (err != nullptr) KFFIObjectDecRef(err);
      return 0;
    }
    // The runtime itself named the index: its type info exists.
    const TvmTypeInfo* info = real->get_type_info(index);
    return info == nullptr ? 0 : DescribeType(info, real, out);
  }
  KFFI_CATCH_ALL { return RaiseCurrentException(); }
}

int RaiseFieldError(const char* qualname) {
  return RaiseMovedError(FindLoadedRealRuntime(false), qualname != nullptr ? qualname : "field");
}

}  // namespace tvmglue
}  // namespace kffi
