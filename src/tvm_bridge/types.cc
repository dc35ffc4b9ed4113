// src/tvm_bridge/types.cc: whose registry an object's type belongs to, and what the Python
// extension asks the bridge (which parameters of a TVM-FFI function take owning Tensors).
//
// kffi and a loaded apache-tvm-ffi number their dynamic object types independently (both from
// kKFFIDynObjectBegin on), so an index alone does not say which registry describes an object;
// the code that made the object does (its deleter lies in that code): apache-tvm-ffi itself or a
// library bound to it means apache-tvm-ffi's registry, anything else kffi's (which libraries
// bound to the shim share). apache-tvm-ffi's TVMFFIGetTypeInfo ends the process for an index it
// does not know, so it is asked only about objects its own code made.
// SPDX-License-Identifier: Apache-2.0
#include <dlfcn.h>
#include <link.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <map>
#include <mutex>
#include <utility>

#include "tvm_bridge/bridge_internal.h"

namespace kffi {
namespace tvmglue {
namespace {

// The runtime each library the bridge opened is bound to, by load bias (link_map::l_addr): which
// registry the object types a library makes belong to (ForeignTypeOf).
struct BoundLibraries {
  std::mutex mutex;
  std::map<uintptr_t, const RealRuntime*> by_bias;
  static BoundLibraries* Get() {
    static BoundLibraries* b = new BoundLibraries();
    return b;
  }
};

// The load bias of the object behind a dlopen handle; false when unknown.
bool HandleLoadBias(void* handle, uintptr_t* bias) {
  struct link_map* map = nullptr;
  if (dlinfo(handle, RTLD_DI_LINKMAP, &map) != 0 || map == nullptr) return false;
  *bias = static_cast<uintptr_t>(map->l_addr);
  return true;
}

struct BiasSearch {
  uintptr_t address;
  bool found = false;
  uintptr_t bias = 0;
};

int FindSegment(struct dl_phdr_info* info, size_t, void* data) {
  auto* search = static_cast<BiasSearch*>(data);
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const auto& ph = info->dlpi_phdr[i];
    if (ph.p_type != PT_LOAD) continue;
    const uintptr_t start = static_cast<uintptr_t>(info->dlpi_addr + ph.p_vaddr);
    if (search->address >= start && search->address - start < ph.p_memsz) {
      search->found = true;
      search->bias = static_cast<uintptr_t>(info->dlpi_addr);
      return 1;
    }
  }
  return 0;
}

// The load bias of the object whose segments hold address: a walk of the program headers (no
// symbol search, which dladdr does).
bool AddressLoadBias(const void* address, uintptr_t* bias) {
  BiasSearch search{reinterpret_cast<uintptr_t>(address)};
  dl_iterate_phdr(&FindSegment, &search);
  *bias = search.bias;
  return search.found;
}

// Whether the code at address (an object's deleter: the code that made the object) is bound to
// real: real itself, or a library the bridge bound to it.
bool CodeBoundTo(const void* address, const RealRuntime* real) {
  uintptr_t bias = 0, real_bias = 0;
  if (address == nullptr || !AddressLoadBias(address, &bias)) return false;
  if (HandleLoadBias(real->handle, &real_bias) && bias == real_bias) return true;
  BoundLibraries* all = BoundLibraries::Get();
  std::lock_guard<std::mutex> lock(all->mutex);
  auto it = all->by_bias.find(bias);
  return it != all->by_bias.end() && it->second == real;
}

// The loaded apache-tvm-ffi (cached once found: a runtime is never unloaded), or NULL.
const RealRuntime* LoadedRealRuntime() {
  static std::atomic<const RealRuntime*> found{nullptr};
  const RealRuntime* real = found.load(std::memory_order_acquire);
  if (real == nullptr && (real = FindLoadedRealRuntime(false)) != nullptr) {
    found.store(real, std::memory_order_release);
  }
  return real;
}

// TVM-FFI's static types that kffi's registry lacks (indices fixed by the ABI).
constexpr std::pair<int32_t, const char*> kTvmOnlyStaticTypes[] = {
    {77, "ffi.VisitInterrupt"},
    {78, "ffi.BigInt"},
};

}  // namespace

void NoteBoundLibrary(void* handle, const RealRuntime* real) {
  uintptr_t bias = 0;
  if (!HandleLoadBias(handle, &bias)) return;
  BoundLibraries* all = BoundLibraries::Get();
  std::lock_guard<std::mutex> lock(all->mutex);
  all->by_bias.emplace(bias, real);
}

const TvmTypeInfo* RealTypeInfoOf(const KFFIObject* obj, const RealRuntime** out_real) {
  if (obj->type_index < kKFFIDynObjectBegin) return nullptr;
  // Each runtime numbers its dynamic types: the code that made the object (its deleter) says
  // whose registry holds its type. apache-tvm-ffi is asked only about objects its own code made
  // (its TVMFFIGetTypeInfo ends the process for an index it does not know).
  const RealRuntime* real = LoadedRealRuntime();
  if (real == nullptr || real->get_type_info == nullptr ||
      !CodeBoundTo(reinterpret_cast<const void*>(obj->deleter), real)) {
    return nullptr;
  }
  *out_real = real;
  return real->get_type_info(obj->type_index);
}

bool ForeignTypeOf(const KFFIObject* obj, ForeignType* out) {
  const int32_t index = obj->type_index;
  if (index < kKFFIDynObjectBegin) {
    // A static index means one type in both ABIs: kffi's registry, or the ABI's own list.
    if (KFFIGetTypeInfo(index) != nullptr) return false;
    for (const auto& t : kTvmOnlyStaticTypes) {
      if (t.first == index) {
        *out = ForeignType{KFFIByteArray{t.second, std::strlen(t.second)}, kKFFIObject};
        return true;
      }
    }
    return false;
  }
  const RealRuntime* real = nullptr;
  const TvmTypeInfo* info = RealTypeInfoOf(obj, &real);
  if (info == nullptr) return false;
  out->key = info->type_key;
  out->static_ancestor = kKFFIObject;
  for (int32_t d = info->type_depth - 1; d >= 0 && info->type_ancestors != nullptr; --d) {
    const TvmTypeInfo* a = info->type_ancestors[d];
    if (a != nullptr && a->type_index < kKFFIDynObjectBegin) {
      out->static_ancestor = a->type_index;
      break;
    }
  }
  return true;
}

}  // namespace tvmglue
}  // namespace kffi

namespace kffi {
namespace tvmglue {

int FunctionOwnedTensorArgs(KFFIObjectHandle func, uint64_t* owned) {
  OwnedTensorMask mask = 0;
  if (owned == nullptr || !ForeignTensorParams(func, &mask)) return 0;
  *owned = mask;
  return 1;
}

int ForeignTypeInfo(KFFIObjectHandle obj, KFFIByteArray* key, int32_t* static_ancestor) {
  ForeignType type;
  if (obj == nullptr || key == nullptr || static_ancestor == nullptr ||
      !ForeignTypeOf(static_cast<KFFIObject*>(obj), &type)) {
    return 0;
  }
  *key = type.key;
  *static_ancestor = type.static_ancestor;
  return 1;
}

}  // namespace tvmglue
}  // namespace kffi
