// src/core/reflection.cc: the fields and methods of object types (KFFITypeRegisterReflection, ...).
// SPDX-License-Identifier: Apache-2.0
#include <kffi/c_api.h>

#include <atomic>
#include <cstring>
#include <deque>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "core/runtime_internal.h"

namespace {

using kffi::details::TakeRaisedKindMessage;
using kffi::details::ThrowCApiError;

// Type indices are dense and below the registry's capacity (type_registry.cc's table), so a flat
// table answers KFFIGetTypeReflection with one atomic load and no lock.
constexpr int32_t kTableCapacity = 8192;
// Bounds that no real type reaches; past them a record is taken for garbage.
constexpr int32_t kMaxRecords = 4096;
constexpr int64_t kMaxObjectSize = int64_t{1} << 30;
constexpr int32_t kMaxAncestorDepth = 256;

bool IsUtf8(std::string_view s) {
  size_t i = 0;
  const size_t n = s.size();
  while (i < n) {
    const auto c = static_cast<unsigned char>(s[i]);
    size_t len;
    uint32_t cp;
    if (c < 0x80) {
      if (c == 0) return false;  // an embedded NUL would cut the name in C
      ++i;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      len = 2;
      cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      len = 3;
      cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      len = 4;
      cp = c & 0x07;
    } else {
      return false;
    }
    if (n - i < len) return false;
    for (size_t k = 1; k < len; ++k) {
      const auto cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3F);
    }
    // Overlong forms, surrogates and code points past Unicode's end are not UTF-8.
    if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
        (cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF) {
      return false;
    }
    i += len;
  }
  return true;
}

// A registered reflection: the caller's records copied, with strings owned here.
struct Entry {
  KFFITypeReflection info{};
  std::deque<std::string> strings;  // a deque: growing it never moves a string
  std::vector<KFFIFieldInfo> fields;
  std::vector<KFFIMethodInfo> methods;

  KFFIByteArray Keep(std::string_view s) {
    strings.emplace_back(s);
    return KFFIByteArray{strings.back().c_str(), strings.back().size()};
  }
};

std::string TypeName(const KFFITypeInfo* t) {
  return "`" + std::string(t->type_key.data, t->type_key.size) + "` (index " +
         std::to_string(t->type_index) + ")";
}

std::string_view View(const KFFIByteArray& a, const std::string& what) {
  if (a.data == nullptr && a.size != 0) {
    ThrowCApiError("ValueError", what + " has NULL data and a nonzero size");
  }
  if (a.size > 4096) ThrowCApiError("ValueError", what + " is longer than 4096 bytes");
  return a.data == nullptr ? std::string_view() : std::string_view(a.data, a.size);
}

std::string_view Name(const KFFIByteArray& a, const std::string& what) {
  std::string_view s = View(a, what);
  if (s.empty()) ThrowCApiError("ValueError", what + " is empty");
  if (!IsUtf8(s)) ThrowCApiError("ValueError", what + " is not UTF-8 (or holds a NUL byte)");
  return s;
}

class Registry {
 public:
  static Registry* Global() {
    // Never freed: the records are promised for the process lifetime.
    static Registry* r = new Registry();
    return r;
  }

  const Entry* Find(int32_t index) const noexcept {
    if (index < 0 || index >= kTableCapacity) return nullptr;
    return table_[index].load(std::memory_order_acquire);
  }

  void Register(const KFFITypeReflection* in) {
    if (in == nullptr) ThrowCApiError("ValueError", "KFFITypeRegisterReflection: info is NULL");
    const KFFITypeInfo* type = KFFIGetTypeInfo(in->type_index);
    if (type == nullptr || in->type_index < kKFFIDynObjectBegin) {
      ThrowCApiError("ValueError", "Cannot register the reflection of type index " +
                                       std::to_string(in->type_index) +
                                       ": not a registered dynamic object type (index >= " +
                                       std::to_string(int(kKFFIDynObjectBegin)) + ")");
    }
    std::string_view key(type->type_key.data, type->type_key.size);
    if (!IsUtf8(key)) {
      ThrowCApiError("ValueError",
                     "Cannot register the reflection of type index " +
                         std::to_string(in->type_index) +
                         ": its type key is not UTF-8 (or holds a NUL byte), so no language "
                         "binding can name it");
    }
    const std::string where = "Cannot register the reflection of " + TypeName(type) + ": ";
    CheckAncestors(type, where);
    if ((in->flags & ~int32_t{kKFFITypeFlagStructuralEq | kKFFITypeFlagPlainRecord}) != 0) {
      ThrowCApiError("ValueError", where + "unknown type flags " + std::to_string(in->flags));
    }
    if (in->object_size < static_cast<int64_t>(sizeof(KFFIObject)) ||
        in->object_size > kMaxObjectSize) {
      ThrowCApiError("ValueError", where + "object_size " + std::to_string(in->object_size) +
                                       " is not between the header's " +
                                       std::to_string(sizeof(KFFIObject)) + " bytes and 1 GiB");
    }
    if (in->num_fields < 0 || in->num_fields > kMaxRecords || in->num_methods < 0 ||
        in->num_methods > kMaxRecords || (in->num_fields > 0 && in->fields == nullptr) ||
        (in->num_methods > 0 && in->methods == nullptr)) {
      ThrowCApiError("ValueError", where + "num_fields " + std::to_string(in->num_fields) +
                                       " / num_methods " + std::to_string(in->num_methods) +
                                       " out of range 0.." + std::to_string(kMaxRecords) +
                                       " or without records");
    }
    auto* e = new Entry();
    try {
      Build(in, where, e);
    } catch (...) {
      Release(e);
      throw;
    }
    std::lock_guard<std::mutex> lock(mutex_);
    const Entry* old = Find(in->type_index);
    if (old != nullptr && Extends(old, e)) {
      // Fields appended to the earlier registration (TVM-FFI's refl::ObjectDef registers field by
      // field): the new entry replaces it. The old one is never freed: its records are promised
      // for the process lifetime.
      table_[in->type_index].store(e, std::memory_order_release);
      superseded_.push_back(old);  // kept reachable: never freed, and no leak to a checker
      return;
    }
    if (old != nullptr) {
      std::string why = Difference(old, e);
      Release(e);
      if (!why.empty()) {
        ThrowCApiError("ValueError",
                       where + "it is registered already with other fields (" + why + ")");
      }
      return;  // the same type again (two libraries include its header): the first one stays
    }
    table_[in->type_index].store(e, std::memory_order_release);
  }

 private:
  Registry() {
    for (auto& slot : table_) slot.store(nullptr, std::memory_order_relaxed);
  }

  // The registry builds ancestor lists from registered parents only, so they cannot loop; this
  // proves it for the record at hand (depth bounded, each ancestor at its depth, none the type).
  static void CheckAncestors(const KFFITypeInfo* type, const std::string& where) {
    if (type->type_depth < 0 || type->type_depth > kMaxAncestorDepth ||
        (type->type_depth > 0 && type->type_ancestors == nullptr)) {
      ThrowCApiError("ValueError", where + "type_depth " + std::to_string(type->type_depth) +
                                       " is out of range or has no ancestors");
    }
    for (int32_t d = 0; d < type->type_depth; ++d) {
      const int32_t a = type->type_ancestors[d];
      const KFFITypeInfo* at = KFFIGetTypeInfo(a);
      if (a == type->type_index || at == nullptr || at->type_depth != d) {
        ThrowCApiError("ValueError", where + "its ancestor chain is inconsistent at depth " +
                                         std::to_string(d) + " (index " + std::to_string(a) +
                                         "): a cycle or an unregistered parent");
      }
    }
  }

  static void Build(const KFFITypeReflection* in, const std::string& where, Entry* e) {
    e->info = *in;
    e->fields.reserve(static_cast<size_t>(in->num_fields));
    e->methods.reserve(static_cast<size_t>(in->num_methods));
    std::vector<std::string_view> names;
    auto unique = [&](std::string_view name, const std::string& what) {
      for (std::string_view n : names) {
        if (n == name) ThrowCApiError("ValueError", where + what + " repeats an earlier name");
      }
      names.push_back(name);
    };
    for (int32_t i = 0; i < in->num_fields; ++i) {
      const KFFIFieldInfo& f = in->fields[i];
      const std::string what = "field #" + std::to_string(i);
      std::string_view name = Name(f.name, where + what + "'s name");
      const std::string w = what + " `" + std::string(name) + "`";
      unique(name, w);
      const int64_t header = static_cast<int64_t>(sizeof(KFFIObject));
      // Overflow-free: offset and size are each bounded before their sum is taken.
      if (f.offset < header || f.offset > in->object_size || f.size <= 0 ||
          f.size > in->object_size - f.offset) {
        ThrowCApiError("ValueError",
                       where + w + ": offset " + std::to_string(f.offset) + " and size " +
                           std::to_string(f.size) + " do not lie inside the object (bytes " +
                           std::to_string(header) + ".." + std::to_string(in->object_size) + ")");
      }
      if ((f.flags & ~int32_t{kKFFIFieldFlagWritable | kKFFIFieldFlagCompareOff}) != 0) {
        ThrowCApiError("ValueError", where + w + ": unknown flags " + std::to_string(f.flags));
      }
      if (f.getter == nullptr) ThrowCApiError("ValueError", where + w + ": getter is NULL");
      const bool writable = (f.flags & kKFFIFieldFlagWritable) != 0;
      if (writable != (f.setter != nullptr)) {
        ThrowCApiError("ValueError", where + w +
                                         (writable ? ": writable but setter is NULL"
                                                   : ": read-only but has a setter"));
      }
      if (f.type_index < kKFFIAny ||
          (f.type_index >= kKFFIStaticObjectBegin && KFFIGetTypeInfo(f.type_index) == nullptr)) {
        ThrowCApiError("ValueError",
                       where + w + ": type index " + std::to_string(f.type_index) + " is unknown");
      }
      std::string_view type_str = View(f.type_str, where + w + "'s type_str");
      if (!IsUtf8(type_str)) {
        ThrowCApiError("ValueError", where + w + "'s type_str is not UTF-8");
      }
      KFFIFieldInfo copy = f;
      copy.name = e->Keep(name);
      copy.type_str = e->Keep(type_str);
      e->fields.push_back(copy);
    }
    for (int32_t i = 0; i < in->num_methods; ++i) {
      const KFFIMethodInfo& m = in->methods[i];
      const std::string what = "method #" + std::to_string(i);
      std::string_view name = Name(m.name, where + what + "'s name");
      const std::string w = what + " `" + std::string(name) + "`";
      unique(name, w);
      if (m.method == nullptr ||
          static_cast<const KFFIObject*>(m.method)->type_index != kKFFIFunction) {
        ThrowCApiError("ValueError", where + w + ": not a Function object");
      }
      kffi::details::HeaderIncRef(static_cast<KFFIObject*>(m.method));
      e->methods.push_back(KFFIMethodInfo{e->Keep(name), m.method});
    }
    e->info.fields = e->fields.empty() ? nullptr : e->fields.data();
    e->info.methods = e->methods.empty() ? nullptr : e->methods.data();
  }

  static void Release(Entry* e) {
    for (const KFFIMethodInfo& m : e->methods) KFFIObjectDecRef(m.method);
    delete e;
  }

  // Whether b is a with more appended: its flags, size and creator, a's fields followed by more
  // and a's methods followed by more (TVM-FFI registers fields and methods one call each).
  static bool Extends(const Entry* a, const Entry* b) {
    if (b->fields.size() < a->fields.size() || b->methods.size() < a->methods.size() ||
        (b->fields.size() == a->fields.size() && b->methods.size() == a->methods.size()) ||
        a->info.object_size != b->info.object_size || a->info.flags != b->info.flags ||
        a->info.creator != b->info.creator) {
      return false;
    }
    for (size_t i = 0; i < a->methods.size(); ++i) {
      if (a->methods[i].method != b->methods[i].method) return false;
    }
    Entry prefix;
    prefix.info.object_size = b->info.object_size;
    prefix.fields.assign(b->fields.begin(), b->fields.begin() + a->fields.size());
    return Difference(a, &prefix).empty();
  }

  // Why two registrations of one type differ ("" when they agree on every field).
  static std::string Difference(const Entry* a, const Entry* b) {
    if (a->fields.size() != b->fields.size()) {
      return std::to_string(a->fields.size()) + " fields, now " + std::to_string(b->fields.size());
    }
    if (a->info.object_size != b->info.object_size) return "another object size";
    for (size_t i = 0; i < a->fields.size(); ++i) {
      const KFFIFieldInfo& x = a->fields[i];
      const KFFIFieldInfo& y = b->fields[i];
      auto same = [](const KFFIByteArray& p, const KFFIByteArray& q) {
        return p.size == q.size && (p.size == 0 || std::memcmp(p.data, q.data, p.size) == 0);
      };
      if (!same(x.name, y.name) || x.offset != y.offset || x.size != y.size ||
          x.type_index != y.type_index || x.flags != y.flags) {
        return "field #" + std::to_string(i) + " `" + std::string(x.name.data, x.name.size) +
               "` differs";
      }
    }
    return std::string();
  }

  std::mutex mutex_;
  std::atomic<const Entry*> table_[kTableCapacity];
  // Entries replaced by an extended registration (fields appended), guarded by mutex_: readers
  // may still hold their records, which are promised for the process lifetime.
  std::vector<const Entry*> superseded_;
};

const KFFIFieldInfo* FindField(const KFFIObject* obj, std::string_view name) {
  const KFFITypeInfo* type = KFFIGetTypeInfo(obj->type_index);
  if (type == nullptr) return nullptr;
  Registry* r = Registry::Global();
  for (int32_t d = type->type_depth; d >= 0; --d) {
    const int32_t index = d == type->type_depth ? type->type_index : type->type_ancestors[d];
    const Entry* e = r->Find(index);
    if (e == nullptr) continue;
    for (const KFFIFieldInfo& f : e->fields) {
      if (std::string_view(f.name.data, f.name.size) == name) return &f;
    }
  }
  return nullptr;
}

const KFFIFieldInfo* RequireField(KFFIObjectHandle obj, const KFFIByteArray* name, const char* fn) {
  if (obj == nullptr) ThrowCApiError("ValueError", std::string(fn) + ": obj is NULL");
  std::string_view n = kffi::details::ByteArrayArg(name, fn);
  const KFFIFieldInfo* f = FindField(static_cast<const KFFIObject*>(obj), n);
  if (f == nullptr) {
    ThrowCApiError(
        "AttributeError",
        "`" + kffi::details::TypeKeyForMessage(static_cast<const KFFIObject*>(obj)->type_index) +
            "` object has no field `" + std::string(n) + "`");
  }
  return f;
}

}  // namespace

int KFFITypeRegisterReflection(const KFFITypeReflection* info) {
  KFFI_CAPI_BEGIN();
  Registry::Global()->Register(info);
  KFFI_CAPI_END();
}

const KFFITypeReflection* KFFIGetTypeReflection(int32_t type_index) {
  try {
    const Entry* e = Registry::Global()->Find(type_index);
    return e != nullptr ? &e->info : nullptr;
  }
  KFFI_CATCH_ALL {
    return nullptr;  // only the first call allocates
  }
}

int KFFIObjectFindField(KFFIObjectHandle obj, const KFFIByteArray* name,
                        const KFFIFieldInfo** out_field) {
  KFFI_CAPI_BEGIN();
  kffi::details::CheckOutArg(out_field, "KFFIObjectFindField: out_field");
  *out_field = nullptr;
  if (obj == nullptr) ThrowCApiError("ValueError", "KFFIObjectFindField: obj is NULL");
  std::string_view n = kffi::details::ByteArrayArg(name, "KFFIObjectFindField: name");
  *out_field = FindField(static_cast<const KFFIObject*>(obj), n);
  KFFI_CAPI_END();
}

int KFFIObjectGetField(KFFIObjectHandle obj, const KFFIByteArray* name, KFFIAny* out) {
  KFFI_CAPI_BEGIN();
  kffi::details::CheckOutArg(out, "KFFIObjectGetField: out");
  out->type_index = kKFFINone;
  out->zero_padding = 0;
  out->v_int64 = 0;
  const KFFIFieldInfo* f = RequireField(obj, name, "KFFIObjectGetField");
  return f->getter(static_cast<char*>(obj) + f->offset, out);
  KFFI_CAPI_END();
}

int KFFIObjectSetField(KFFIObjectHandle obj, const KFFIByteArray* name, const KFFIAny* value) {
  KFFI_CAPI_BEGIN();
  if (value == nullptr) ThrowCApiError("ValueError", "KFFIObjectSetField: value is NULL");
  const KFFIFieldInfo* f = RequireField(obj, name, "KFFIObjectSetField");
  const std::string field =
      kffi::details::TypeKeyForMessage(static_cast<const KFFIObject*>(obj)->type_index) + "." +
      std::string(f->name.data, f->name.size);
  if (f->setter == nullptr) {
    ThrowCApiError("AttributeError", "field `" + field + "` is read-only");
  }
  if (f->setter(static_cast<char*>(obj) + f->offset, value) != 0) {
    // Name the field in the setter's message ("expected int, got str").
    std::string kind, message;
    if (!TakeRaisedKindMessage(&kind, &message)) {
      ThrowCApiError("RuntimeError", "setting `" + field + "` failed");
    }
    ThrowCApiError(kind.empty() ? "TypeError" : kind, field + ": " + message);
  }
  KFFI_CAPI_END();
}
