// src/tvm_bridge/shim.cc: the TVM-FFI C runtime functions, implemented on kffi's runtime.
//
// A library built for the TVM-FFI ABI imports these (TVMFFIErrorSetRaisedFromCStr,
// TVMFFIEnvGetStream, ...). When no apache-tvm-ffi is loaded, the loader binds it to these
// definitions (through a private scope, never RTLD_GLOBAL), so its errors land in kffi's slot,
// it reads kffi's environment stream and allocator, and its objects are kffi's. Values, objects
// and the call convention have one layout in both ABIs, so most functions forward 1:1; the type
// information record is the exception (TVM-FFI's has more fields) and is rebuilt here.
// docs/tvm_ffi.md lists what is covered.
// SPDX-License-Identifier: Apache-2.0
#include <kffi/error.h>
#include <kffi/tensor.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "tvm_bridge/bridge_internal.h"

// ---- the TVM-FFI C types this file needs, by layout (the ABI document is the reference)
// ----------
namespace {

using kffi::tvmglue::TvmFieldInfo;
using kffi::tvmglue::TvmMethodInfo;
using kffi::tvmglue::TvmTypeInfo;
using kffi::tvmglue::TvmTypeMetadata;

struct TvmVersion {
  uint32_t major;
  uint32_t minor;
  uint32_t patch;
};

// The TVM-FFI release whose ABI this shim follows (what TVMFFIGetVersion reports).
constexpr TvmVersion kTvmCompatVersion{
    kffi::tvmglue::kTvmCompatMajor, kffi::tvmglue::kTvmCompatMinor, kffi::tvmglue::kTvmCompatPatch};

// Type keys that differ between the two registries (same index, same layout).
constexpr std::pair<std::string_view, std::string_view> kKeyAliases[] = {
    {"ffi.String", "ffi.Str"},
};

std::string_view ToKffiKey(std::string_view tvm_key) {
  for (const auto& a : kKeyAliases) {
    if (a.first == tvm_key) return a.second;
  }
  return tvm_key;
}

std::string_view ToTvmKey(std::string_view kffi_key) {
  for (const auto& a : kKeyAliases) {
    if (a.second == kffi_key) return a.first;
  }
  return kffi_key;
}

KFFIByteArray View(std::string_view s) { return KFFIByteArray{s.data(), s.size()}; }

uint64_t Fnv1a(std::string_view s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

// TVM-layout type records, made on first request and kept for the life of the process (callers
// may hold the pointers forever). A type's fields, methods and metadata come from kffi's
// reflection registry, which grows while a library registers them one by one: a record is
// brought up to date whenever it is asked for after a registration (its arrays are replaced,
// the earlier ones kept, since a caller may still be reading them).
class TypeInfoCache {
 public:
  static TypeInfoCache* Get() {
    static TypeInfoCache* cache = new TypeInfoCache();
    return cache;
  }

  const TvmTypeInfo* Lookup(int32_t index) {
    std::lock_guard<std::mutex> lock(mutex_);
    return LookupLocked(index, 0);
  }

 private:
  // One version of a type's reflection records, in TVM's layout.
  struct Records {
    std::vector<TvmFieldInfo> fields;
    std::vector<TvmMethodInfo> methods;
    TvmTypeMetadata metadata{};
  };
  struct Entry {
    TvmTypeInfo info;
    std::string key;
    std::vector<const TvmTypeInfo*> ancestors;
    const KFFITypeReflection* reflection = nullptr;  // what records was made from
    uint64_t shim_version = 0;                       // the shim records on top (0: none)
    std::deque<Records> records;                     // every version (never freed)
  };

  // Makes entry's records from kffi's current reflection of its type, when that changed; a type
  // a library registered through the shim reports its records as registered
  // (shim_reflection.cc), which say more than kffi's registry holds.
  static void Refresh(Entry* entry) {
    RefreshFromKffi(entry);
    kffi::tvmglue::ShimTvmRecords shim;
    if (!kffi::tvmglue::ShimTvmRecordsOf(entry->info.type_index, &shim) ||
        shim.version == entry->shim_version) {
      return;
    }
    TvmTypeInfo& info = entry->info;
    info.num_fields = shim.num_fields;
    info.fields = shim.fields;
    info.num_methods = shim.num_methods;
    info.methods = shim.methods;
    if (shim.metadata != nullptr) info.metadata = shim.metadata;
    entry->shim_version = shim.version;
  }

  static void RefreshFromKffi(Entry* entry) {
    const KFFITypeReflection* r = KFFIGetTypeReflection(entry->info.type_index);
    if (r == nullptr || r == entry->reflection) return;
    entry->shim_version = 0;  // the shim's records, if any, go on top again
    Records& out = entry->records.emplace_back();
    for (int32_t i = 0; i < r->num_fields; ++i) {
      const KFFIFieldInfo& f = r->fields[i];
      TvmFieldInfo t{};
      t.name = f.name;
      t.flags = (f.flags & kKFFIFieldFlagWritable) != 0 ? kffi::tvmglue::kTvmFieldWritable : 0;
      if ((f.flags & kKFFIFieldFlagCompareOff) != 0) t.flags |= kffi::tvmglue::kTvmFieldCompareOff;
      t.size = f.size;
      // kffi's record has no alignment: a power-of-two size up to 16 is its own, else 1.
      t.alignment = f.size > 0 && f.size <= 16 && (f.size & (f.size - 1)) == 0 ? f.size : 1;
      t.offset = f.offset;
      t.getter = f.getter;
      t.setter = reinterpret_cast<void*>(f.setter);
      t.default_value_or_factory.type_index = kKFFINone;
      t.field_static_type_index = f.type_index;
      out.fields.push_back(t);
    }
    for (int32_t i = 0; i < r->num_methods; ++i) {
      TvmMethodInfo m{};
      m.name = r->methods[i].name;
      m.method.type_index = kKFFIFunction;
      m.method.v_obj = static_cast<KFFIObject*>(r->methods[i].method);
      out.methods.push_back(m);
    }
    out.metadata.creator = r->creator;
    // TVM's record holds the size as int32: a larger object has no size there (0: unknown).
    out.metadata.total_size =
        r->object_size <= INT32_MAX ? static_cast<int32_t>(r->object_size) : 0;
    out.metadata.structural_eq_hash_kind = (r->flags & kKFFITypeFlagStructuralEq) != 0 ? 1 : 0;
    TvmTypeInfo& info = entry->info;
    info.num_fields = static_cast<int32_t>(out.fields.size());
    info.num_methods = static_cast<int32_t>(out.methods.size());
    info.fields = out.fields.empty() ? nullptr : out.fields.data();
    info.methods = out.methods.empty() ? nullptr : out.methods.data();
    info.metadata = &out.metadata;
    entry->reflection = r;
  }

  const TvmTypeInfo* LookupLocked(int32_t index, int depth) {
    auto it = entries_.find(index);
    if (it != entries_.end()) {
      Refresh(it->second.get());
      return &it->second->info;
    }
    const KFFITypeInfo* k = KFFIGetTypeInfo(index);
    // Ancestors have smaller depths, so this recursion is bounded by the registry's depth; the
    // guard stops a corrupt registry all the same.
    if (k == nullptr || depth > 256) return nullptr;
    auto entry = std::make_unique<Entry>();
    entry->key = std::string(ToTvmKey(std::string_view(k->type_key.data, k->type_key.size)));
    for (int32_t d = 0; d < k->type_depth; ++d) {
      entry->ancestors.push_back(LookupLocked(k->type_ancestors[d], depth + 1));
    }
    TvmTypeInfo& info = entry->info;
    info.type_index = k->type_index;
    info.type_depth = k->type_depth;
    info.type_key = View(entry->key);
    info.type_ancestors = entry->ancestors.empty() ? nullptr : entry->ancestors.data();
    info.type_key_hash = Fnv1a(entry->key);
    info.num_fields = 0;
    info.num_methods = 0;
    info.fields = nullptr;
    info.methods = nullptr;
    info.metadata = nullptr;
    Refresh(entry.get());
    const TvmTypeInfo* out = &entry->info;
    entries_.emplace(index, std::move(entry));
    return out;
  }

  std::mutex mutex_;
  std::map<int32_t, std::unique_ptr<Entry>> entries_;
};

// TVM-FFI's type attribute columns (TVMFFITypeAttrColumn, by layout): one per attribute name,
// indexed by type index from 0. A library registers values one by one (an enum's state, a
// type's `__ffi_init__`, ...) and its inline code keeps the column pointer for the life of the
// process, so columns are never freed; a column's data array is replaced as it grows and the
// old one kept (a reader may hold it for the moment it reads).
struct TvmTypeAttrColumn {
  const KFFIAny* data;
  int32_t size;
  int32_t begin_index;
};

// The columns apache-tvm-ffi's runtime creates when it loads (refl::EnsureTypeAttrColumn), with no
// values: TVM-FFI's inline code looks some of them up before anything registers a value (an enum
// finds its state in `__ffi_enum__`), and a missing column is an error there.
constexpr const char* kRuntimeColumns[] = {
    "__any_equal__",        "__any_hash__",    "__data_from_json__", "__data_to_json__",
    "__ffi_compare__",      "__ffi_convert__", "__ffi_enum__",       "__ffi_eq__",
    "__ffi_hash__",         "__ffi_init__",    "__ffi_new__",        "__ffi_repr__",
    "__ffi_shallow_copy__", "__s_equal__",     "__s_hash__",         "__s_maybe_inplace_mutate__",
    "__s_mutate__",         "__s_visit__",
};

class TypeAttrTable {
 public:
  static TypeAttrTable* Get() {
    static TypeAttrTable* table = [] {
      auto* t = new TypeAttrTable();
      for (const char* name : kRuntimeColumns) t->ColumnOf(name);
      std::vector<kffi::tvmglue::RuntimeTypeAttr> attrs;
      kffi::tvmglue::RuntimeTypeAttrs(&attrs);
      kffi::tvmglue::StructuralTypeAttrs(&attrs);
      for (const auto& a : attrs) {
        if (t->Register(a.type_index, a.name, &a.value) != 0) {
          KFFIObjectHandle err = nullptr;  // cannot happen in a fresh table; nothing to report to
          KFFIErrorMoveFromRaised(&err);
          if (err != nullptr) KFFIObjectDecRef(err);
        }
        if (a.value.type_index >= kKFFIStaticObjectBegin) KFFIObjectDecRef(a.value.v_obj);
      }
      return t;
    }();
    return table;
  }

  // 0, or -1 with kffi's error raised (a value already registered for the type, a bad index).
  int Register(int32_t type_index, std::string_view name, const KFFIAny* value) {
    std::lock_guard<std::mutex> lock(mutex_);
    Column& column = ColumnOf(name);
    if (type_index == kKFFINone) return 0;  // the sentinel: the column exists, with no value
    if (type_index < 0 || value == nullptr) {
      std::string message = "TVMFFITypeRegisterAttr: type index " + std::to_string(type_index) +
                            (value == nullptr ? " with a NULL value" : " is negative") +
                            " for attribute `" + std::string(name) + "`";
      KFFIErrorSetRaisedFromCStr("ValueError", message.c_str());
      return -1;
    }
    size_t slot = static_cast<size_t>(type_index);
    std::vector<KFFIAny>& values = *column.storage;
    if (slot < values.size() && values[slot].type_index != kKFFINone) {
      std::string message = "TypeAttr `" + std::string(name) +
                            "` is already registered for type index " + std::to_string(type_index);
      KFFIErrorSetRaisedFromCStr("RuntimeError", message.c_str());
      return -1;
    }
    KFFIAny owned{};
    if (KFFIAnyViewToOwnedAny(value, &owned) != 0) return -1;
    if (slot >= values.size()) {
      // A new array, the old one kept: a reader may be between loading `data` and indexing it.
      auto grown = std::make_unique<std::vector<KFFIAny>>(slot + 1, KFFIAny{});
      std::copy(values.begin(), values.end(), grown->begin());
      column.retired.push_back(std::move(column.storage));
      column.storage = std::move(grown);
    }
    (*column.storage)[slot] = owned;
    column.header.data = column.storage->data();
    __atomic_store_n(&column.header.size, static_cast<int32_t>(column.storage->size()),
                     __ATOMIC_RELEASE);
    return 0;
  }

  const TvmTypeAttrColumn* Find(std::string_view name) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = columns_.find(name);
    return it == columns_.end() ? nullptr : &it->second->header;
  }

 private:
  struct Column {
    TvmTypeAttrColumn header{nullptr, 0, 0};
    std::unique_ptr<std::vector<KFFIAny>> storage = std::make_unique<std::vector<KFFIAny>>();
    std::vector<std::unique_ptr<std::vector<KFFIAny>>> retired;
  };

  Column& ColumnOf(std::string_view name) {
    auto it = columns_.find(name);
    if (it == columns_.end()) {
      it = columns_.emplace(std::string(name), std::make_unique<Column>()).first;
    }
    return *it->second;
  }

  std::mutex mutex_;
  std::map<std::string, std::unique_ptr<Column>, std::less<>> columns_;
};

// Guards TVMFFIHandleInitOnce: an init function may itself initialise another handle.
std::recursive_mutex& InitOnceMutex() {
  static std::recursive_mutex* m = new std::recursive_mutex();
  return *m;
}

// A registration the library's static initialiser cannot be allowed to fail: TVM-FFI's C++ code
// throws from it, which would abort the process. While kffi loads the library, the problem fails
// that load instead (KFFIModuleReportLoadError) and the library carries on.
int ReportOrRaise(const char* what) {
  KFFIObjectHandle err = nullptr;
  KFFIErrorMoveFromRaised(&err);
  if (err == nullptr) return -1;
  const KFFIErrorCell* cell = KFFIErrorGetCellPtr(err);
  std::string message =
      std::string(what) + ": " + std::string(cell->message.data, cell->message.size);
  KFFIByteArray kind = cell->kind;
  KFFIByteArray msg = View(message);
  int32_t taken = 0;
  if (KFFIModuleReportLoadError(&kind, &msg, &taken) == 0 && taken) {
    KFFIObjectDecRef(err);
    return 0;
  }
  KFFIErrorSetRaised(err);
  KFFIObjectDecRef(err);
  return -1;
}

// Global functions a library registers go to kffi's registry under their own names (kffi's and
// apache-tvm-ffi's registries are separate, so nothing collides across runtimes). A name already
// taken fails the load of the library (it is not overridden, and the process does not abort).
int SetGlobal(const KFFIByteArray* name, KFFIObjectHandle f, int allow_override,
              KFFIByteArray metadata = KFFIByteArray{nullptr, 0}) {
  kffi::tvmglue::EnsureShimGlobals();  // a library's name that is libtvm_ffi's is taken, as there
  if (KFFIFunctionSetGlobal(name, f, allow_override) == 0) {
    if (name != nullptr) kffi::tvmglue::SetShimGlobalMetadata(*name, metadata);
    return 0;
  }
  return ReportOrRaise("The library registers a global function kffi cannot accept");
}

}  // namespace

namespace kffi {
namespace tvmglue {

std::vector<std::string> ShimRegisteredTypeKeys() {
  std::vector<std::string> keys;
  // Static indices first, then the dynamic ones, which are allocated without gaps.
  for (int32_t index = 0;; ++index) {
    const KFFITypeInfo* info = KFFIGetTypeInfo(index);
    if (info == nullptr) {
      if (index >= kKFFIDynObjectBegin) break;
      continue;
    }
    keys.emplace_back(ToTvmKey(std::string_view(info->type_key.data, info->type_key.size)));
  }
  return keys;
}

}  // namespace tvmglue
}  // namespace kffi

// ---- the covered functions
// ----------------------------------------------------------------------- Keep
// ShimCoveredFunctions() (at the end) in step with this list.

#define SHIM extern "C" __attribute__((visibility("default")))

SHIM void TVMFFIGetVersion(TvmVersion* out) {
  if (out != nullptr) *out = kTvmCompatVersion;
}

SHIM int TVMFFIObjectIncRef(KFFIObjectHandle obj) { return KFFIObjectIncRef(obj); }
SHIM int TVMFFIObjectDecRef(KFFIObjectHandle obj) { return KFFIObjectDecRef(obj); }
SHIM int TVMFFIObjectCreateOpaque(void* handle, int32_t type_index, void (*deleter)(void*),
                                  KFFIObjectHandle* out) {
  return KFFIObjectCreateOpaque(handle, type_index, deleter, out);
}

SHIM int TVMFFITypeKeyToIndex(const KFFIByteArray* type_key, int32_t* out) {
  if (type_key == nullptr) return KFFITypeKeyToIndex(type_key, out);
  KFFIByteArray key = View(ToKffiKey(std::string_view(type_key->data, type_key->size)));
  return KFFITypeKeyToIndex(&key, out);
}

SHIM int32_t TVMFFITypeGetOrAllocIndex(const KFFIByteArray* type_key, int32_t static_type_index,
                                       int32_t type_depth, int32_t /*num_child_slots*/,
                                       int32_t /*child_slots_can_overflow*/,
                                       int32_t parent_type_index) {
  if (type_key == nullptr) {
    KFFIErrorSetRaisedFromCStr("ValueError", "TVMFFITypeGetOrAllocIndex: type_key is NULL");
    return -1;
  }
  KFFIByteArray key = View(ToKffiKey(std::string_view(type_key->data, type_key->size)));
  int32_t out = -1;
  if (parent_type_index == -2) {  // query only: -2 when unknown
    if (KFFITypeKeyToIndex(&key, &out) != 0) {
      KFFIObjectHandle err = nullptr;
      KFFIErrorMoveFromRaised(&err);
      KFFIObjectDecRef(err);
      return -2;
    }
    return out;
  }
  if (KFFITypeGetOrAllocIndex(&key, static_type_index, type_depth, parent_type_index, &out) != 0) {
    ReportOrRaise("The library registers an object type kffi cannot accept");
    return -1;
  }
  return out;
}

SHIM const TvmTypeInfo* TVMFFIGetTypeInfo(int32_t type_index) {
  try {
    return TypeInfoCache::Get()->Lookup(type_index);
  }
  KFFI_CATCH_ALL { return nullptr; }
}

// A type's size, fields and instance methods go to kffi's reflection registry
// (shim_reflection.cc); a record kffi refuses (a field outside the object) fails the library's
// load with the reason. Static methods are accepted and not kept.
SHIM int TVMFFITypeRegisterField(int32_t type_index, const void* info) {
  if (kffi::tvmglue::ShimRegisterField(type_index, info) == 0) return 0;
  return ReportOrRaise("The library registers an object field kffi cannot accept");
}
SHIM int TVMFFITypeRegisterMethod(int32_t type_index, const void* info) {
  if (kffi::tvmglue::ShimRegisterMethod(type_index, info) == 0) return 0;
  return ReportOrRaise("The library registers an object method kffi cannot accept");
}
SHIM int TVMFFITypeRegisterMetadata(int32_t type_index, const void* metadata) {
  if (kffi::tvmglue::ShimRegisterTypeMetadata(type_index, metadata) == 0) return 0;
  return ReportOrRaise("The library registers object type metadata kffi cannot accept");
}
// Type attributes (an enum's state, `__ffi_init__`, `__ffi_convert__`, ...): columns kept here,
// read by the library's inline code. A second value for one type and name is refused, as
// libtvm_ffi refuses it.
SHIM int TVMFFITypeRegisterAttr(int32_t type_index, const KFFIByteArray* attr_name,
                                const KFFIAny* attr_value) {
  if (attr_name == nullptr || (attr_name->data == nullptr && attr_name->size != 0)) {
    KFFIErrorSetRaisedFromCStr("ValueError", "TVMFFITypeRegisterAttr: the name is NULL");
    return ReportOrRaise("The library registers a type attribute kffi cannot accept");
  }
  try {
    std::string_view name(attr_name->data, attr_name->size);
    if (TypeAttrTable::Get()->Register(type_index, name, attr_value) == 0) return 0;
  }
  KFFI_CATCH_ALL { kffi::tvmglue::RaiseCurrentException(); }
  return ReportOrRaise("The library registers a type attribute kffi cannot accept");
}
SHIM const TvmTypeAttrColumn* TVMFFIGetTypeAttrColumn(const KFFIByteArray* attr_name) {
  if (attr_name == nullptr || (attr_name->data == nullptr && attr_name->size != 0)) return nullptr;
  try {
    return TypeAttrTable::Get()->Find(std::string_view(attr_name->data, attr_name->size));
  }
  KFFI_CATCH_ALL { return nullptr; }
}

SHIM int TVMFFIFunctionCreate(void* self, KFFISafeCallType safe_call, void (*deleter)(void*),
                              KFFIObjectHandle* out) {
  return KFFIFunctionCreate(self, safe_call, deleter, out);
}
SHIM int TVMFFIFunctionCall(KFFIObjectHandle func, KFFIAny* args, int32_t num_args,
                            KFFIAny* result) {
  return KFFIFunctionCall(func, args, num_args, result);
}
SHIM int TVMFFIFunctionGetGlobal(const KFFIByteArray* name, KFFIObjectHandle* out) {
  kffi::tvmglue::EnsureShimGlobals();
  return KFFIFunctionGetGlobal(name, out);
}
// Shim functions never call each other by name: a global libtvm_ffi would interpose the call.
SHIM int TVMFFIFunctionSetGlobal(const KFFIByteArray* name, KFFIObjectHandle f,
                                 int allow_override) {
  return SetGlobal(name, f, allow_override);
}
SHIM int TVMFFIFunctionSetGlobalFromMethodInfo(const TvmMethodInfo* info, int allow_override) {
  if (info == nullptr || info->method.type_index != kKFFIFunction) {
    KFFIErrorSetRaisedFromCStr(
        "TypeError", "TVMFFIFunctionSetGlobalFromMethodInfo: the method is not a Function");
    return ReportOrRaise("The library registers a global function kffi cannot accept");
  }
  return SetGlobal(&info->name, info->method.v_obj, allow_override, info->metadata);
}
SHIM int TVMFFIAnyViewToOwnedAny(const KFFIAny* any_view, KFFIAny* out) {
  return KFFIAnyViewToOwnedAny(any_view, out);
}

SHIM void TVMFFIErrorMoveFromRaised(KFFIObjectHandle* out) { KFFIErrorMoveFromRaised(out); }
SHIM void TVMFFIErrorSetRaised(KFFIObjectHandle error) { KFFIErrorSetRaised(error); }
SHIM void TVMFFIErrorSetRaisedFromCStr(const char* kind, const char* message) {
  KFFIErrorSetRaisedFromCStr(kind, message);
}
SHIM void TVMFFIErrorSetRaisedFromCStrParts(const char* kind, const char** parts,
                                            int32_t num_parts) {
  KFFIErrorSetRaisedFromCStrParts(kind, parts, num_parts);
}
SHIM int TVMFFIErrorCreate(const KFFIByteArray* kind, const KFFIByteArray* message,
                           const KFFIByteArray* backtrace, KFFIObjectHandle* out) {
  return KFFIErrorCreate(kind, message, backtrace, out);
}
SHIM int TVMFFIErrorCreateWithCauseAndExtraContext(
    const KFFIByteArray* kind, const KFFIByteArray* message, const KFFIByteArray* backtrace,
    KFFIObjectHandle cause_chain, KFFIObjectHandle extra_context, KFFIObjectHandle* out) {
  if (KFFIErrorCreate(kind, message, backtrace, out) != 0) return -1;
  KFFIErrorCell* cell = KFFIErrorGetCellPtr(*out);
  if (cause_chain != nullptr) KFFIObjectIncRef(cause_chain);
  if (extra_context != nullptr) KFFIObjectIncRef(extra_context);
  cell->cause_chain = cause_chain;
  cell->extra_context = extra_context;
  return 0;
}

SHIM int TVMFFITensorFromDLPack(DLManagedTensor* from, int32_t require_alignment,
                                int32_t require_contiguous, KFFIObjectHandle* out) {
  return KFFITensorFromDLPack(from, require_alignment, require_contiguous, out);
}
SHIM int TVMFFITensorFromDLPackVersioned(DLManagedTensorVersioned* from, int32_t require_alignment,
                                         int32_t require_contiguous, KFFIObjectHandle* out) {
  return KFFITensorFromDLPackVersioned(from, require_alignment, require_contiguous, out);
}
SHIM int TVMFFITensorToDLPack(KFFIObjectHandle from, DLManagedTensor** out) {
  return KFFITensorToDLPack(from, out);
}
SHIM int TVMFFITensorToDLPackVersioned(KFFIObjectHandle from, DLManagedTensorVersioned** out) {
  return KFFITensorToDLPackVersioned(from, out);
}

SHIM int TVMFFIStringFromByteArray(const KFFIByteArray* input, KFFIAny* out) {
  return KFFIStringFromByteArray(input, out);
}
SHIM int TVMFFIBytesFromByteArray(const KFFIByteArray* input, KFFIAny* out) {
  return KFFIBytesFromByteArray(input, out);
}
SHIM int TVMFFIDataTypeFromString(const KFFIByteArray* str, DLDataType* out) {
  return KFFIDataTypeFromString(str, out);
}

SHIM int TVMFFIEnvSetStream(int32_t device_type, int32_t device_id, void* stream, void** prev) {
  return KFFIEnvSetStream(device_type, device_id, stream, prev);
}
SHIM void* TVMFFIEnvGetStream(int32_t device_type, int32_t device_id) {
  return KFFIEnvGetStream(device_type, device_id);
}
SHIM int TVMFFIEnvSetDLPackManagedTensorAllocator(DLPackManagedTensorAllocator allocator,
                                                  int write_to_global_context,
                                                  DLPackManagedTensorAllocator* prev) {
  return KFFIEnvSetTensorAllocator(allocator, write_to_global_context, prev);
}
SHIM DLPackManagedTensorAllocator TVMFFIEnvGetDLPackManagedTensorAllocator(void) {
  return KFFIEnvGetTensorAllocator();
}
// A compact tensor shaped like prototype from the environment's allocator (kffi's rules: the
// framework's allocator when one is set, else aligned host memory for CPU).
SHIM int TVMFFIEnvTensorAlloc(DLTensor* prototype, KFFIObjectHandle* out) {
  try {
    KFFI_CHECK(prototype != nullptr && out != nullptr, ValueError)
        << "TVMFFIEnvTensorAlloc: prototype and out must not be NULL";
    KFFI_CHECK(prototype->ndim >= 0 && (prototype->ndim == 0 || prototype->shape != nullptr),
               ValueError)
        << "TVMFFIEnvTensorAlloc: the prototype has no shape";
    kffi::Tensor t = kffi::Tensor::FromEnvAlloc(
        kffi::IntArrayView(prototype->shape, static_cast<size_t>(prototype->ndim)),
        prototype->dtype, prototype->device);
    *out = kffi::details::ObjectUnsafe::MoveToHandle(
        std::move(kffi::details::ObjectUnsafe::RefData(t)));
    return 0;
  }
  KFFI_CATCH_ALL { return kffi::tvmglue::RaiseCurrentException(); }
}
SHIM int TVMFFIEnvCheckSignals(void) { return KFFIEnvCheckSignals(); }
// Symbols for a runtime's own generated code (C API tables, context symbols): nothing in kffi
// reads them, so they are accepted and dropped.
SHIM int TVMFFIEnvRegisterCAPI(const char*, void*) { return 0; }
SHIM int TVMFFIEnvModRegisterContextSymbol(const char*, void*) { return 0; }
// Statically linked TVM-FFI exports (`__tvm_ffi_<name>`) join kffi's system library as
// `__kffi_<name>` (same convention); their metadata symbols are not carried over.
SHIM int TVMFFIEnvModRegisterSystemLibSymbol(const char* name, void* symbol) {
  constexpr std::string_view kPrefix = "__tvm_ffi_";
  if (name == nullptr) return KFFIModuleRegisterSystemLibSymbol(name, symbol);
  std::string_view n(name);
  if (n.size() <= kPrefix.size() || n.compare(0, kPrefix.size(), kPrefix) != 0 ||
      n[kPrefix.size()] == '_') {
    return 0;
  }
  std::string kffi_name = "__kffi_" + std::string(n.substr(kPrefix.size()));
  return KFFIModuleRegisterSystemLibSymbol(kffi_name.c_str(), symbol);
}
// Imports of a TVM-FFI module are not modelled: a lookup searches kffi's global functions.
SHIM int TVMFFIEnvModLookupFromImports(KFFIObjectHandle /*library_ctx*/, const char* func_name,
                                       KFFIObjectHandle* out) {
  if (func_name == nullptr || out == nullptr) {
    KFFIErrorSetRaisedFromCStr("ValueError", "TVMFFIEnvModLookupFromImports: NULL argument");
    return -1;
  }
  KFFIByteArray name = View(func_name);
  if (KFFIFunctionGetGlobal(&name, out) != 0) return -1;
  if (*out != nullptr) return 0;
  std::string message = std::string("Cannot find function `") + func_name +
                        "` among kffi's global functions (a TVM-FFI library looked it up in its "
                        "module's imports, which kffi does not model)";
  KFFIErrorSetRaisedFromCStr("AttributeError", message.c_str());
  return -1;
}

SHIM int TVMFFIHandleInitOnce(void** handle_addr, int (*init_func)(void** result)) {
  if (handle_addr == nullptr || init_func == nullptr) {
    KFFIErrorSetRaisedFromCStr("ValueError", "TVMFFIHandleInitOnce: NULL argument");
    return -1;
  }
  if (__atomic_load_n(handle_addr, __ATOMIC_ACQUIRE) != nullptr) return 0;
  std::lock_guard<std::recursive_mutex> lock(InitOnceMutex());
  if (*handle_addr != nullptr) return 0;
  void* result = nullptr;
  int rc = init_func(&result);
  if (rc != 0) return rc;
  if (result == nullptr) {  // the handle would read as "not yet initialised" for ever
    KFFIErrorSetRaisedFromCStr("RuntimeError",
                               "TVMFFIHandleInitOnce: the init function returned a NULL handle");
    return -1;
  }
  __atomic_store_n(handle_addr, result, __ATOMIC_RELEASE);
  return 0;
}
SHIM int TVMFFIHandleDeinitOnce(void** handle_addr, int (*deinit_func)(void* handle)) {
  if (handle_addr == nullptr || deinit_func == nullptr) {
    KFFIErrorSetRaisedFromCStr("ValueError", "TVMFFIHandleDeinitOnce: NULL argument");
    return -1;
  }
  std::lock_guard<std::recursive_mutex> lock(InitOnceMutex());
  void* handle = *handle_addr;
  if (handle == nullptr) return 0;
  // Cleared whatever the deinit function reports: it was given the handle, and a second deinit
  // of the same handle would free it twice.
  __atomic_store_n(handle_addr, nullptr, __ATOMIC_RELEASE);
  return deinit_func(handle);
}

#undef SHIM

namespace kffi {
namespace tvmglue {

const std::vector<std::string_view>& ShimCoveredFunctions() {
  static const std::vector<std::string_view>* names = [] {
    auto* v = new std::vector<std::string_view>{
        "TVMFFIAnyViewToOwnedAny",
        "TVMFFIBacktrace",
        "TVMFFIBigIntFromByteArray",
        "TVMFFIBigIntGetContentByteArray",
        "TVMFFIBytesFromByteArray",
        "TVMFFIDataTypeFromString",
        "TVMFFIDataTypeToString",
        "TVMFFIEnvCheckSignals",
        "TVMFFIEnvGetDLPackManagedTensorAllocator",
        "TVMFFIEnvGetStream",
        "TVMFFIEnvModLookupFromImports",
        "TVMFFIEnvModRegisterContextSymbol",
        "TVMFFIEnvModRegisterSystemLibSymbol",
        "TVMFFIEnvRegisterCAPI",
        "TVMFFIEnvSetDLPackManagedTensorAllocator",
        "TVMFFIEnvSetStream",
        "TVMFFIEnvTensorAlloc",
        "TVMFFIErrorCreate",
        "TVMFFIErrorCreateWithCauseAndExtraContext",
        "TVMFFIErrorMoveFromRaised",
        "TVMFFIErrorSetRaised",
        "TVMFFIErrorSetRaisedFromCStr",
        "TVMFFIErrorSetRaisedFromCStrParts",
        "TVMFFIFunctionCall",
        "TVMFFIFunctionCreate",
        "TVMFFIFunctionGetGlobal",
        "TVMFFIFunctionSetGlobal",
        "TVMFFIFunctionSetGlobalFromMethodInfo",
        "TVMFFIGetCustomAllocator",
        "TVMFFIGetTypeAttrColumn",
        "TVMFFIGetTypeInfo",
        "TVMFFIGetVersion",
        "TVMFFIHandleDeinitOnce",
        "TVMFFIHandleInitOnce",
        "TVMFFIObjectCreateOpaque",
        "TVMFFIObjectDecRef",
        "TVMFFIObjectIncRef",
        "TVMFFISetCustomAllocator",
        "TVMFFIStringFromByteArray",
        "TVMFFITensorCreateUnsafeView",
        "TVMFFITensorFromDLPack",
        "TVMFFITensorFromDLPackVersioned",
        "TVMFFITensorToDLPack",
        "TVMFFITensorToDLPackVersioned",
        "TVMFFITypeGetOrAllocIndex",
        "TVMFFITypeKeyToIndex",
        "TVMFFITypeRegisterAttr",
        "TVMFFITypeRegisterField",
        "TVMFFITypeRegisterMetadata",
        "TVMFFITypeRegisterMethod",
    };
    std::sort(v->begin(), v->end());
    return v;
  }();
  return *names;
}

}  // namespace tvmglue
}  // namespace kffi
