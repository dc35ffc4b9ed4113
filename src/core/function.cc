// src/core/function.cc: Function objects over a C callback, calls, and the global function
// registry.
// SPDX-License-Identifier: Apache-2.0
#include <kffi/c_api.h>

#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "core/runtime_internal.h"

namespace {

using kffi::details::HeaderDecRef;
using kffi::details::HeaderIncRef;
using kffi::details::RuntimePayload;
using kffi::details::ThrowCApiError;

// Cell first (what every library calls through), then the user's callback and its state.
struct FunctionPayload {
  KFFIFunctionCell cell;
  void* self;
  void (*deleter)(void* self);
  KFFISafeCallType user_call;

  FunctionPayload(KFFISafeCallType entry, void* s, void (*del)(void*), KFFISafeCallType call)
      : cell{entry, nullptr}, self(s), deleter(del), user_call(call) {}
  FunctionPayload(const FunctionPayload&) = delete;
  FunctionPayload& operator=(const FunctionPayload&) = delete;
  ~FunctionPayload() {
    if (deleter != nullptr) deleter(self);
  }
};

// The cell's entry point receives the function object as handle; the user's callback wants its
// own state instead. No exception wrapper: user_call is a C callback under the same contract.
int FunctionTrampoline(void* handle, const KFFIAny* args, int32_t num_args, KFFIAny* result) {
  FunctionPayload* p = RuntimePayload<FunctionPayload>(handle);
  return p->user_call(p->self, args, num_args, result);
}

void CheckIsFunction(KFFIObjectHandle func, const char* where) {
  if (func == nullptr) ThrowCApiError("ValueError", std::string(where) + ": func is NULL");
  int32_t type_index = static_cast<KFFIObject*>(func)->type_index;
  if (type_index != kKFFIFunction && !kffi::details::TypeIsSubtypeOf(type_index, kKFFIFunction)) {
    ThrowCApiError("TypeError", std::string(where) + ": expected a `ffi.Function`, got `" +
                                    kffi::details::TypeKeyForMessage(type_index) + "`");
  }
}

// name -> owned function. Heap-allocated and never freed: at process exit the functions may
// belong to libraries already unloaded, whose deleters must not run.
struct GlobalFunctionTable {
  std::mutex mutex;
  std::map<std::string, KFFIObject*> functions;  // ordered: ListGlobalNames walks it sorted

  static GlobalFunctionTable* Get() {
    static GlobalFunctionTable* table = new GlobalFunctionTable();
    return table;
  }
};

}  // namespace

int KFFIFunctionCreate(void* self, KFFISafeCallType safe_call, void (*deleter)(void* self),
                       KFFIObjectHandle* out) {
  KFFI_CAPI_BEGIN();
  kffi::details::CheckOutArg(out, "KFFIFunctionCreate: out");
  *out = nullptr;
  if (safe_call == nullptr) ThrowCApiError("ValueError", "KFFIFunctionCreate: safe_call is NULL");
  // On failure nothing is taken: deleter(self) is not called and the caller still owns self.
  *out = kffi::details::NewRuntimeObject<FunctionPayload>(kKFFIFunction, &FunctionTrampoline, self,
                                                          deleter, safe_call);
  KFFI_CAPI_END();
}

int KFFIFunctionCall(KFFIObjectHandle func, const KFFIAny* args, int32_t num_args,
                     KFFIAny* result) {
  KFFI_CAPI_BEGIN();
  kffi::details::CheckOutArg(result, "KFFIFunctionCall: result");
  kffi::details::SetNone(result);
  if (num_args < 0 || (num_args > 0 && args == nullptr)) {
    ThrowCApiError("ValueError", "KFFIFunctionCall: " + std::to_string(num_args) +
                                     " arguments at " + (args == nullptr ? "NULL" : "a pointer") +
                                     " (expected num_args >= 0 and a non-NULL args when > 0)");
  }
  if (func == nullptr || static_cast<KFFIObject*>(func)->type_index != kKFFIFunction) {
    CheckIsFunction(func, "KFFIFunctionCall");  // slow path: subtype or error
  }
  // Through the cell, so Function objects made by any library (header-only C++ ones included)
  // are called the same way.
  const KFFIFunctionCell* cell = static_cast<const KFFIFunctionCell*>(KFFIObjectGetCellPtr(func));
  return cell->safe_call(func, args, num_args, result);
  KFFI_CAPI_END();
}

int KFFIFunctionSetGlobal(const KFFIByteArray* name, KFFIObjectHandle func, int allow_override) {
  KFFI_CAPI_BEGIN();
  std::string key(kffi::details::ByteArrayArg(name, "KFFIFunctionSetGlobal: name"));
  CheckIsFunction(func, "KFFIFunctionSetGlobal");
  GlobalFunctionTable* table = GlobalFunctionTable::Get();
  KFFIObject* replaced = nullptr;
  {
    std::lock_guard<std::mutex> lock(table->mutex);
    auto it = table->functions.find(key);
    if (it != table->functions.end()) {
      if (allow_override == 0) {
        ThrowCApiError("KeyError", "Global function `" + key + "` is already registered");
      }
      replaced = it->second;
      it->second = static_cast<KFFIObject*>(func);
    } else {
      table->functions.emplace(key, static_cast<KFFIObject*>(func));
    }
    HeaderIncRef(static_cast<KFFIObject*>(func));
  }
  // Released outside the lock: its deleter may call back into the registry.
  if (replaced != nullptr) HeaderDecRef(replaced);
  KFFI_CAPI_END();
}

int KFFIFunctionGetGlobal(const KFFIByteArray* name, KFFIObjectHandle* out) {
  KFFI_CAPI_BEGIN();
  kffi::details::CheckOutArg(out, "KFFIFunctionGetGlobal: out");
  *out = nullptr;
  std::string key(kffi::details::ByteArrayArg(name, "KFFIFunctionGetGlobal: name"));
  GlobalFunctionTable* table = GlobalFunctionTable::Get();
  std::lock_guard<std::mutex> lock(table->mutex);
  auto it = table->functions.find(key);
  if (it != table->functions.end()) {
    // Under the lock: once it is released another thread may remove and free the function.
    HeaderIncRef(it->second);
    *out = it->second;
  }
  KFFI_CAPI_END();
}

int KFFIFunctionRemoveGlobal(const KFFIByteArray* name, int* out_removed) {
  KFFI_CAPI_BEGIN();
  std::string key(kffi::details::ByteArrayArg(name, "KFFIFunctionRemoveGlobal: name"));
  GlobalFunctionTable* table = GlobalFunctionTable::Get();
  KFFIObject* removed = nullptr;
  {
    std::lock_guard<std::mutex> lock(table->mutex);
    auto it = table->functions.find(key);
    if (it != table->functions.end()) {
      removed = it->second;
      table->functions.erase(it);
    }
  }
  if (out_removed != nullptr) *out_removed = removed != nullptr ? 1 : 0;
  if (removed != nullptr) HeaderDecRef(removed);
  KFFI_CAPI_END();
}

int KFFIFunctionListGlobalNames(int (*visit)(void* ctx, const KFFIByteArray* name), void* ctx) {
  KFFI_CAPI_BEGIN();
  if (visit == nullptr) ThrowCApiError("ValueError", "KFFIFunctionListGlobalNames: visit is NULL");
  // Snapshot, then visit without the lock, so that a visitor may use the registry.
  std::vector<std::string> names;
  {
    GlobalFunctionTable* table = GlobalFunctionTable::Get();
    std::lock_guard<std::mutex> lock(table->mutex);
    names.reserve(table->functions.size());
    for (const auto& kv : table->functions) names.push_back(kv.first);
  }
  for (const std::string& n : names) {
    KFFIByteArray arr{n.data(), n.size()};
    if (visit(ctx, &arr) != 0) break;
  }
  KFFI_CAPI_END();
}
