// src/core/type_registry.cc: the process-wide type registry (type key <-> index, ancestors).
// SPDX-License-Identifier: Apache-2.0
#include <kffi/c_api.h>

#include <atomic>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/runtime_internal.h"

namespace {

using kffi::details::ThrowCApiError;

// Indices are dense (statics below 128, dynamic ones counted up from 128), so a flat table
// indexed by type index answers KFFIGetTypeInfo with one atomic load and no lock.
constexpr int32_t kTypeTableCapacity = 8192;

struct TypeEntry {
  KFFITypeInfo info;
  std::string key;
  std::vector<int32_t> ancestors;
};

class TypeRegistry {
 public:
  // Heap-allocated and never freed: type infos are promised for the process lifetime, and
  // libraries may still look them up from their own static destructors at exit.
  static TypeRegistry* Global() {
    static TypeRegistry* registry = new TypeRegistry();
    return registry;
  }

  const TypeEntry* FindEntry(int32_t type_index) const noexcept {
    if (type_index < 0 || type_index >= kTypeTableCapacity) return nullptr;
    // Acquire pairs with the release store in RegisterLocked: the entry is complete once seen.
    return table_[type_index].load(std::memory_order_acquire);
  }

  const KFFITypeInfo* Find(int32_t type_index) const noexcept {
    const TypeEntry* e = FindEntry(type_index);
    return e != nullptr ? &e->info : nullptr;
  }

  bool KeyToIndex(const std::string& key, int32_t* out) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = by_key_.find(key);
    if (it == by_key_.end()) return false;
    *out = it->second;
    return true;
  }

  int32_t GetOrAlloc(const std::string& key, int32_t static_index, int32_t depth, int32_t parent) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = by_key_.find(key);
    if (it != by_key_.end()) return CheckExistingLocked(it->second, key, static_index, parent);
    return RegisterLocked(key, static_index, depth, parent);
  }

 private:
  TypeRegistry() {
    for (auto& slot : table_) slot.store(nullptr, std::memory_order_relaxed);
    std::lock_guard<std::mutex> lock(mutex_);
    // Plain values get pseudo entries too, so that an error message can name any index.
    static const char* const kPodKeys[] = {
        "None",      "int",         "bool",       "float",           "void*", "DataType", "Device",
        "DLTensor*", "const char*", "ByteArray*", "ObjectRValueRef", "str",   "bytes"};
    for (int32_t i = 0; i < static_cast<int32_t>(sizeof(kPodKeys) / sizeof(kPodKeys[0])); ++i) {
      RegisterLocked(kPodKeys[i], i, 0, -1);
    }
    RegisterLocked("ffi.Object", kKFFIObject, 0, -1);
    static const std::pair<const char*, int32_t> kStaticObjects[] = {
        {"ffi.Str", kKFFIStr},       {"ffi.Bytes", kKFFIBytes},
        {"ffi.Error", kKFFIError},   {"ffi.Function", kKFFIFunction},
        {"ffi.Shape", kKFFIShape},   {"ffi.Tensor", kKFFITensor},
        {"ffi.Array", kKFFIArray},   {"ffi.Map", kKFFIMap},
        {"ffi.Module", kKFFIModule}, {"ffi.OpaquePyObject", kKFFIOpaquePyObject},
        {"ffi.List", kKFFIList},     {"ffi.Dict", kKFFIDict}};
    for (const auto& kv : kStaticObjects) RegisterLocked(kv.first, kv.second, 1, kKFFIObject);
  }

  static int32_t ParentOf(const TypeEntry* e) {
    return e->ancestors.empty() ? -1 : e->ancestors.back();
  }

  std::string DescribeLocked(int32_t index) const {
    if (index < 0) return "none";
    const KFFITypeInfo* info = Find(index);
    if (info == nullptr) return "unregistered index " + std::to_string(index);
    return "`" + std::string(info->type_key.data, info->type_key.size) + "` (index " +
           std::to_string(index) + ")";
  }

  int32_t CheckExistingLocked(int32_t index, const std::string& key, int32_t static_index,
                              int32_t parent) const {
    const TypeEntry* e = FindEntry(index);
    int32_t old_parent = ParentOf(e);
    if (old_parent != parent) {
      ThrowCApiError("ValueError", "Type key `" + key + "` is already registered with parent " +
                                       DescribeLocked(old_parent) +
                                       ", cannot register it again with parent " +
                                       DescribeLocked(parent));
    }
    if (static_index >= 0 && static_index != index) {
      ThrowCApiError("ValueError", "Type key `" + key + "` is already registered with index " +
                                       std::to_string(index) +
                                       ", cannot register it again with static index " +
                                       std::to_string(static_index));
    }
    return index;
  }

  int32_t RegisterLocked(const std::string& key, int32_t static_index, int32_t depth,
                         int32_t parent) {
    if (key.empty()) ThrowCApiError("ValueError", "A type key must not be empty");
    const TypeEntry* parent_entry = nullptr;
    if (depth == 0) {
      if (parent != -1) {
        ThrowCApiError("ValueError", "Type key `" + key +
                                         "`: a root type (type_depth 0) has no parent, got " +
                                         DescribeLocked(parent));
      }
    } else {
      parent_entry = FindEntry(parent);
      if (depth < 0 || parent_entry == nullptr || parent_entry->info.type_depth != depth - 1) {
        ThrowCApiError("ValueError",
                       "Type key `" + key + "`: type_depth " + std::to_string(depth) +
                           " does not match parent " + DescribeLocked(parent) +
                           (parent_entry != nullptr
                                ? " of depth " + std::to_string(parent_entry->info.type_depth)
                                : std::string()));
      }
    }
    if (static_index < -1 || static_index >= kTypeTableCapacity) {
      ThrowCApiError("ValueError", "Type key `" + key + "`: static type index " +
                                       std::to_string(static_index) + " is out of range");
    }
    if (static_index >= 0 && FindEntry(static_index) != nullptr) {
      ThrowCApiError("ValueError", "Type key `" + key + "`: static type index " +
                                       std::to_string(static_index) + " is already taken by " +
                                       DescribeLocked(static_index));
    }
    int32_t index = static_index >= 0 ? static_index : AllocDynamicLocked(key);
    auto* e = new TypeEntry();  // owned by the table forever
    e->key = key;
    if (parent_entry != nullptr) {
      e->ancestors = parent_entry->ancestors;
      e->ancestors.push_back(parent);
    }
    e->info.type_index = index;
    e->info.type_depth = depth;
    e->info.type_key.data = e->key.c_str();
    e->info.type_key.size = e->key.size();
    e->info.type_ancestors = e->ancestors.empty() ? nullptr : e->ancestors.data();
    try {
      by_key_.emplace(key, index);
    } catch (...) {
      delete e;
      throw;
    }
    table_[index].store(e, std::memory_order_release);
    return index;
  }

  int32_t AllocDynamicLocked(const std::string& key) {
    // Skip indices a caller claimed as static inside the dynamic range.
    while (next_dynamic_ < kTypeTableCapacity && FindEntry(next_dynamic_) != nullptr) {
      ++next_dynamic_;
    }
    if (next_dynamic_ >= kTypeTableCapacity) {
      ThrowCApiError("RuntimeError", "Cannot register type key `" + key +
                                         "`: the type registry is full (" +
                                         std::to_string(kTypeTableCapacity) + " indices)");
    }
    return next_dynamic_++;
  }

  std::mutex mutex_;
  std::unordered_map<std::string, int32_t> by_key_;
  std::atomic<const TypeEntry*> table_[kTypeTableCapacity];
  int32_t next_dynamic_ = kKFFIDynObjectBegin;
};

}  // namespace

namespace kffi {
namespace details {

std::string TypeKeyForMessage(int32_t type_index) {
  const KFFITypeInfo* info = KFFIGetTypeInfo(type_index);
  if (info == nullptr) return "type_index=" + std::to_string(type_index);
  return std::string(info->type_key.data, info->type_key.size);
}

bool TypeIsSubtypeOf(int32_t type_index, int32_t base_index) noexcept {
  if (type_index == base_index) return true;
  const KFFITypeInfo* info = KFFIGetTypeInfo(type_index);
  const KFFITypeInfo* base = KFFIGetTypeInfo(base_index);
  if (info == nullptr || base == nullptr || info->type_depth <= base->type_depth) return false;
  return info->type_ancestors[base->type_depth] == base_index;
}

}  // namespace details
}  // namespace kffi

int KFFITypeKeyToIndex(const KFFIByteArray* type_key, int32_t* out_index) {
  KFFI_CAPI_BEGIN();
  std::string key(kffi::details::ByteArrayArg(type_key, "KFFITypeKeyToIndex: type_key"));
  kffi::details::CheckOutArg(out_index, "KFFITypeKeyToIndex: out_index");
  if (!TypeRegistry::Global()->KeyToIndex(key, out_index)) {
    ThrowCApiError("KeyError", "Type key `" + key + "` is not registered");
  }
  KFFI_CAPI_END();
}

int KFFITypeGetOrAllocIndex(const KFFIByteArray* type_key, int32_t static_type_index,
                            int32_t type_depth, int32_t parent_type_index, int32_t* out_index) {
  KFFI_CAPI_BEGIN();
  std::string key(kffi::details::ByteArrayArg(type_key, "KFFITypeGetOrAllocIndex: type_key"));
  kffi::details::CheckOutArg(out_index, "KFFITypeGetOrAllocIndex: out_index");
  *out_index =
      TypeRegistry::Global()->GetOrAlloc(key, static_type_index, type_depth, parent_type_index);
  KFFI_CAPI_END();
}

const KFFITypeInfo* KFFIGetTypeInfo(int32_t type_index) {
  try {
    return TypeRegistry::Global()->Find(type_index);
  }
  KFFI_CATCH_ALL {
    // Only the first call can throw (out of memory while building the built-in table).
    return nullptr;
  }
}
