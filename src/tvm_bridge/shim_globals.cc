// src/tvm_bridge/shim_globals.cc: the global functions apache-tvm-ffi's runtime registers
// (`ffi.*`), on kffi's runtime, and the metadata of global functions libraries register.
//
// libtvm_ffi registers them when it loads, and TVM-FFI code finds them by name: the C++ headers
// (Function::ListGlobalNames calls `ffi.FunctionListGlobalNamesFunctor`), dataclass constructors
// (`ffi.GetKwargsObject` marks keyword arguments) and tools that walk containers. The shim
// registers the ones that are the runtime's own (sequences, names, metadata, marker objects,
// shapes; maps are refused, as kffi lays them out differently) the first time a library asks the
// shim for a global function or registers one, so that a process that never runs TVM-FFI code sees
// none of them in kffi's registry. The extra C++ API's functions (JSON, serialization, structural
// equality, repr) are not among them: docs/tvm_ffi.md says why.
// SPDX-License-Identifier: Apache-2.0
#include <kffi/container/array.h>
#include <kffi/container/list.h>
#include <kffi/container/shape.h>
#include <kffi/error.h>
#include <kffi/function.h>
#include <kffi/tensor.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tvm_bridge/bridge_internal.h"

namespace kffi {
namespace tvmglue {
namespace {

// The metadata (TVMFFIMethodInfo.metadata, a JSON text) of each global function a library
// registered with TVMFFIFunctionSetGlobalFromMethodInfo, by name.
struct GlobalMetadata {
  std::mutex mutex;
  std::map<std::string, std::string> by_name;
  static GlobalMetadata* Get() {
    static GlobalMetadata* m = new GlobalMetadata();  // outlives static destructors
    return m;
  }
};

// Objects that stand for something other than a value: a missing entry, keyword arguments.
ObjectRef MarkerObject(int which) {
  static ObjectRef* markers =
      new ObjectRef[2]{ObjectRef(make_object<Object>()), ObjectRef(make_object<Object>())};
  return markers[which];
}

// The index a Python-style position names in a sequence of size n (negative counts from the end),
// or IndexError.
int64_t Position(int64_t i, int64_t n, const char* what) {
  const int64_t at = i < 0 ? i + n : i;
  if (at < 0 || at >= n) {
    KFFI_THROW(IndexError) << what << ": index " << i << " out of range for size " << n;
  }
  return at;
}

// A [start, stop) range of a sequence of size n, checked.
void CheckRange(int64_t start, int64_t stop, int64_t n, const char* what) {
  if (start < 0 || stop < start || stop > n) {
    KFFI_THROW(IndexError) << what << ": range [" << start << ", " << stop
                           << ") out of range for size " << n;
  }
}

// kffi and TVM-FFI lay out hash maps differently (calls.cc), and a map a library hands to these
// functions was made by TVM-FFI's inline code: it is refused, never read as kffi's, and kffi's
// own maps are never handed to a library as TVM-FFI's.
[[noreturn]] void RefuseMaps(const char* name) {
  KFFI_THROW(RuntimeError) << name
                           << ": kffi's TVM-FFI runtime does not read or make TVM-FFI's Map and "
                              "Dict objects (the two lay out hash maps differently); load "
                              "apache-tvm-ffi (`import tvm_ffi`) to run code that needs them";
}

// The first device that is not the CPU in a tensor or in the containers nested in value; depth
// bounds the nesting followed, as a container may (through a Dict) hold itself.
bool FindNonCpuDevice(const AnyView& value, DLDevice* out, int depth) {
  if (depth > 512) KFFI_THROW(ValueError) << "containers nested more than 512 deep";
  if (auto t = value.try_cast<TensorView>()) {
    if (t->device().device_type != kDLCPU) {
      *out = t->device();
      return true;
    }
    return false;
  }
  if (auto a = value.try_cast<Array<Any>>()) {
    for (const Any& v : *a) {
      if (FindNonCpuDevice(v, out, depth + 1)) return true;
    }
  } else if (auto l = value.try_cast<List<Any>>()) {
    for (const Any& v : *l) {
      if (FindNonCpuDevice(v, out, depth + 1)) return true;
    }
  } else if (value.type_index() == kKFFIMap || value.type_index() == kKFFIDict) {
    RefuseMaps("ffi.ContainerFindFirstNonCPUDevice");
  }
  return false;
}

template <typename Seq>
bool Contains(const Seq& seq, const Any& value) {
  AnyEqual eq;
  return std::any_of(seq.begin(), seq.end(), [&](const Any& v) { return eq(v, value); });
}

void Def(const char* name, Function f) {
  KFFIByteArray n{name, std::char_traits<char>::length(name)};
  // Not overriding: a library that registered the name first keeps it.
  if (KFFIFunctionSetGlobal(&n, const_cast<void*>(static_cast<const void*>(f.get())), 0) != 0) {
    KFFIObjectHandle err = nullptr;
    KFFIErrorMoveFromRaised(&err);
    if (err != nullptr) KFFIObjectDecRef(err);
  }
}

template <typename F>
void DefTyped(const char* name, F f) {
  Def(name, Function::FromTyped(std::move(f), name));
}

template <typename F>
void DefPacked(const char* name, F f) {
  Def(name, Function::FromPacked(std::move(f), name));
}

void RegisterContainers() {
  DefPacked("ffi.Array", [](PackedArgs args, Any* ret) {
    *ret = Array<Any>(args.data(), args.data() + args.size());
  });
  DefTyped("ffi.ArrayGetItem", [](Array<Any> a, int64_t i) -> Any {
    return a[Position(i, a.size(), "ffi.ArrayGetItem")];
  });
  DefTyped("ffi.ArraySize", [](Array<Any> a) -> int64_t { return a.size(); });
  DefTyped("ffi.ArrayContains", [](Array<Any> a, Any v) { return Contains(a, v); });

  DefPacked("ffi.List", [](PackedArgs args, Any* ret) {
    *ret = List<Any>(args.data(), args.data() + args.size());
  });
  DefTyped("ffi.ListGetItem", [](List<Any> l, int64_t i) -> Any {
    return l[Position(i, l.size(), "ffi.ListGetItem")];
  });
  DefTyped("ffi.ListSetItem", [](List<Any> l, int64_t i, Any v) {
    l.Set(Position(i, l.size(), "ffi.ListSetItem"), std::move(v));
  });
  DefTyped("ffi.ListSize", [](List<Any> l) -> int64_t { return l.size(); });
  DefTyped("ffi.ListContains", [](List<Any> l, Any v) { return Contains(l, v); });
  DefTyped("ffi.ListAppend", [](List<Any> l, Any v) { l.push_back(std::move(v)); });
  DefTyped("ffi.ListInsert", [](List<Any> l, int64_t i, Any v) {
    if (i < 0 || i > l.size()) {
      KFFI_THROW(IndexError) << "ffi.ListInsert: index " << i << " out of range for size "
                             << l.size();
    }
    l.insert(l.begin() + i, std::move(v));
  });
  DefTyped("ffi.ListPop", [](List<Any> l, int64_t i) -> Any {
    const int64_t at = Position(i, l.size(), "ffi.ListPop");
    Any v = l[at];
    l.erase(l.begin() + at);
    return v;
  });
  DefTyped("ffi.ListErase", [](List<Any> l, int64_t i) {
    l.erase(l.begin() + Position(i, l.size(), "ffi.ListErase"));
  });
  DefTyped("ffi.ListEraseRange", [](List<Any> l, int64_t start, int64_t stop) {
    CheckRange(start, stop, l.size(), "ffi.ListEraseRange");
    l.erase(l.begin() + start, l.begin() + stop);
  });
  DefTyped("ffi.ListReplaceSlice", [](List<Any> l, int64_t start, int64_t stop, List<Any> with) {
    CheckRange(start, stop, l.size(), "ffi.ListReplaceSlice");
    // Copied first: with may be l itself.
    std::vector<Any> items(with.begin(), with.end());
    l.erase(l.begin() + start, l.begin() + stop);
    l.insert(l.begin() + start, items.begin(), items.end());
  });
  DefTyped("ffi.ListReverse", [](List<Any> l) {
    std::vector<Any> items(l.rbegin(), l.rend());
    for (int64_t i = 0; i < static_cast<int64_t>(items.size()); ++i) l.Set(i, std::move(items[i]));
  });
  DefTyped("ffi.ListClear", [](List<Any> l) { l.clear(); });
  DefTyped("ffi.ListReserve", [](List<Any> l, int64_t n) {
    if (n < 0) KFFI_THROW(ValueError) << "ffi.ListReserve: capacity " << n << " is negative";
    l.reserve(n);
  });

  for (const char* name :
       {"ffi.Map", "ffi.MapSize", "ffi.MapGetItem", "ffi.MapCount", "ffi.MapForwardIterFunctor",
        "ffi.MapGetItemOrMissing", "ffi.Dict", "ffi.DictSize", "ffi.DictGetItem", "ffi.DictSetItem",
        "ffi.DictCount", "ffi.DictErase", "ffi.DictClear", "ffi.DictForwardIterFunctor",
        "ffi.DictGetItemOrMissing"}) {
    DefPacked(name, [name](PackedArgs, Any*) { RefuseMaps(name); });
  }

  DefTyped("ffi.ContainerFindFirstNonCPUDevice", [](Any value) {
    DLDevice out{kDLCPU, 0};
    FindNonCpuDevice(value, &out, 0);
    return out;
  });
  DefPacked("ffi.Shape", [](PackedArgs args, Any* ret) {
    std::vector<int64_t> dims;
    dims.reserve(args.size());
    for (int32_t i = 0; i < args.size(); ++i) {
      std::optional<int64_t> d = args[i].try_cast<int64_t>();
      if (!d) {
        KFFI_THROW(TypeError) << "ffi.Shape: argument " << i << " is " << args[i].GetTypeKey()
                              << ", expected int";
      }
      dims.push_back(*d);
    }
    *ret = Shape(dims);
  });
}

void RegisterFunctionsAndMarkers() {
  DefTyped("ffi.FunctionRemoveGlobal", [](String name) {
    KFFIByteArray n{name.data(), name.size()};
    int removed = 0;
    if (KFFIFunctionRemoveGlobal(&n, &removed) != 0) details::ThrowRaisedError(-1);
    GlobalMetadata* md = GlobalMetadata::Get();
    std::lock_guard<std::mutex> lock(md->mutex);
    md->by_name.erase(std::string(name));
    return removed != 0;
  });
  DefTyped("ffi.FunctionListGlobalNamesFunctor", []() {
    // A snapshot: f(-1) is the number of names, f(i) the i-th.
    auto names = std::make_shared<std::vector<std::string>>();
    auto visit = [](void* ctx, const KFFIByteArray* name) {
      static_cast<std::vector<std::string>*>(ctx)->emplace_back(name->data, name->size);
      return 0;
    };
    if (KFFIFunctionListGlobalNames(visit, names.get()) != 0) details::ThrowRaisedError(-1);
    return Function::FromTyped(
        [names](int64_t i) -> Any {
          const int64_t n = static_cast<int64_t>(names->size());
          if (i < 0) return Any(n);
          return Any(String((*names)[Position(i, n, "ffi.FunctionListGlobalNamesFunctor")]));
        },
        "ffi.FunctionListGlobalNamesFunctor");
  });
  DefTyped("ffi.String", [](String s) { return s; });
  DefTyped("ffi.Bytes", [](Bytes b) { return b; });
  DefTyped("ffi.GetGlobalFuncMetadata", [](String name) {
    if (!Function::GetGlobal(std::string(name)).has_value()) {
      KFFI_THROW(RuntimeError) << "Global Function is not found: " << name;
    }
    GlobalMetadata* md = GlobalMetadata::Get();
    std::lock_guard<std::mutex> lock(md->mutex);
    auto it = md->by_name.find(std::string(name));
    return String(it == md->by_name.end() ? std::string() : it->second);
  });
  DefTyped("ffi.FunctionFromExternC", [](void* self, void* safe_call, void* deleter) {
    if (safe_call == nullptr) {
      KFFI_THROW(ValueError) << "ffi.FunctionFromExternC: safe_call is NULL";
    }
    return Function::FromExternC(self, reinterpret_cast<KFFISafeCallType>(safe_call),
                                 reinterpret_cast<void (*)(void*)>(deleter));
  });
  DefTyped("ffi.GetRegisteredTypeKeys", []() {
    Array<String> keys;
    for (const std::string& k : ShimRegisteredTypeKeys()) keys.push_back(String(k));
    return keys;
  });
  DefTyped("ffi.GetInvalidObject", []() { return MarkerObject(0); });
  DefTyped("ffi.GetKwargsObject", []() { return MarkerObject(1); });
}

}  // namespace

void EnsureShimGlobals() noexcept {
  static std::once_flag once;
  std::call_once(once, [] {
    // Called from the shim's C functions: nothing may escape. A function that failed to register
    // is then missing, which its caller reports by name.
    try {
      RegisterContainers();
      RegisterFunctionsAndMarkers();
    }
    KFFI_CATCH_ALL {}
  });
}

void SetShimGlobalMetadata(const KFFIByteArray& name, const KFFIByteArray& metadata) {
  GlobalMetadata* md = GlobalMetadata::Get();
  std::lock_guard<std::mutex> lock(md->mutex);
  std::string key(name.data, name.size);
  if (metadata.size == 0) {
    md->by_name.erase(key);
  } else {
    md->by_name[key] = std::string(metadata.data, metadata.size);
  }
}

}  // namespace tvmglue
}  // namespace kffi
