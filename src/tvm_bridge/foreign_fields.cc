// src/tvm_bridge/foreign_fields.cc: the fields of objects whose type lives in a loaded
// apache-tvm-ffi's registry (refl::ObjectDef records), read and written for kffi's Python
// binding.
//
// Such a type is not in kffi's reflection registry (the two runtimes number dynamic types
// independently), so its records are read from apache-tvm-ffi's TVMFFITypeInfo. They come from
// another runtime, so each is checked before use: the field must lie inside the object
// (TVMFFITypeMetadata.total_size), else the access is a ValueError and nothing is read.
// SPDX-License-Identifier: Apache-2.0
#include <kffi/base.h>
#include <kffi/c_api.h>

#include <cstring>
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

}  // namespace
}  // namespace tvmglue
}  // namespace kffi

extern "C" {

/// For kffi's Python extension: the field name (size bytes) of obj (borrowed) when obj's type is
/// a loaded apache-tvm-ffi's. value NULL reads it into *out (owned); otherwise assigns value
/// (borrowed). 1 when done; 0 when obj's type is not apache-tvm-ffi's or has no such field; -1
/// with kffi's error raised (a read-only field, a record outside the object, a setter's error).
__attribute__((visibility("default"))) int KFFITvmForeignField(void* obj, const char* name,
                                                               size_t size, const KFFIAny* value,
                                                               KFFIAny* out) {
  using namespace kffi::tvmglue;  // NOLINT(build/namespaces)
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
    if (rc != 0) {
      // The field's code is bound to apache-tvm-ffi: its error is in that runtime's slot.
      MoveErrorToKffi(real);
      KFFIObjectHandle err = nullptr;
      KFFIErrorMoveFromRaised(&err);
      std::string kind = "RuntimeError", message = "failed";
      if (err != nullptr) {
        const KFFIErrorCell* cell = KFFIErrorGetCellPtr(err);
        kind.assign(cell->kind.data, cell->kind.size);
        message.assign(cell->message.data, cell->message.size);
        KFFIObjectDecRef(err);
      }
      Raise(kind.c_str(), qualname + ": " + message);
      return -1;
    }
    return 1;
  }
  KFFI_CATCH_ALL { return RaiseCurrentException(); }
}

/// For kffi's Python extension: the name of field i (ancestors' first) of obj (borrowed) when
/// obj's type is a loaded apache-tvm-ffi's: 1 with *name (valid for the process), 0 past the last
/// field or for any other object, -1 with kffi's error raised for records it cannot use.
__attribute__((visibility("default"))) int KFFITvmForeignFieldName(void* obj, int32_t i,
                                                                   KFFIByteArray* name) {
  using namespace kffi::tvmglue;  // NOLINT(build/namespaces)
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

}  // extern "C"
