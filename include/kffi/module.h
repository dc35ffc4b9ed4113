// include/kffi/module.h: Module: load kernel libraries and call the functions they export.
// SPDX-License-Identifier: Apache-2.0
#ifndef KFFI_MODULE_H_
#define KFFI_MODULE_H_

#include <kffi/function.h>

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kffi {

/// The object behind a Module. Opaque: the runtime makes it and only the KFFIModule* C functions
/// read it, so this class has no fields of its own.
class ModuleObj : public Object {
 public:
  KFFI_DECLARE_STATIC_OBJECT_INFO("ffi.Module", ModuleObj, Object, kKFFIModule, false)
  ModuleObj() = delete;
};

/// A kernel library (a shared object whose functions were exported with KFFI_EXPORT) or the
/// system library (functions of statically linked code, KFFI_EXPORT_SYSTEM_LIB).
///
///   kffi::Module mod = kffi::Module::Load("build/libscale_cpu.so");
///   mod.GetFunctionRequired("scale")(y, x, 2.0);
///
/// Lifetime: a loaded library is never unloaded, because objects it made (a tensor whose deleter
/// is its code, a function) may outlive every Module reference. Functions taken from a module
/// keep the module alive, and loading the same file again returns the same module while it lives.
class Module : public ObjectRef {
 public:
  /// A null module.
  Module() = default;
  KFFI_DEFINE_OBJECT_REF_METHODS(Module, ObjectRef, ModuleObj)

  /// Loads the library at path (dlopen with RTLD_LAZY | RTLD_LOCAL), after checking its file:
  /// throws RuntimeError naming the path when it is missing, is not a regular file or not a
  /// loadable shared library, exports no kffi symbols, or was built for an ABI version this
  /// runtime cannot serve (ValueError for a path with a NUL byte). A library built for the
  /// TVM-FFI ABI (`__tvm_ffi_<name>` exports) loads too, through libkffi_tvm (docs/tvm_ffi.md).
  static Module Load(std::string_view path) {
    KFFIByteArray p = details::ToByteArray(path.data(), path.size());
    KFFIObjectHandle h = nullptr;
    if (KFFIModuleLoadFromFile(&p, &h) != 0) details::ThrowRaisedError(-1);
    return Module(details::ObjectUnsafe::FromOwnedHandle<ModuleObj>(h));
  }

  /// Loads a relocatable object file with kffi exports (a `.o` from kffi.compile(...).export,
  /// or any object compiled -fPIC with <kffi/export.h>) without a link step of the caller's: it
  /// is linked once into a shared object with the system's C++ driver ($CXX, else c++), cached
  /// under a hash of its bytes ($KFFI_CACHE_DIR/objects, else ~/.cache/kffi/objects), and loaded
  /// as by Load. Throws RuntimeError naming the path when the file is missing, is not a
  /// relocatable ELF object with `__kffi_<name>` functions, or fails to link (with the command
  /// and the linker's output). docs/aot.md says why a linker rather than a JIT, and the limits.
  static Module LoadObject(std::string_view path) {
    KFFIByteArray p = details::ToByteArray(path.data(), path.size());
    KFFIObjectHandle h = nullptr;
    if (KFFIModuleLoadObject(&p, &h) != 0) details::ThrowRaisedError(-1);
    return Module(details::ObjectUnsafe::FromOwnedHandle<ModuleObj>(h));
  }

  /// The process's system library: functions registered by KFFI_EXPORT_SYSTEM_LIB, and by the
  /// exports of code compiled with -DKFFI_EXPORT_TO_SYSTEM_LIB (kffi_add_library(... STATIC |
  /// OBJECT), objects from kffi.compile(...).export("x.o")) that is linked into the program.
  static Module SystemLib() {
    KFFIObjectHandle h = nullptr;
    if (KFFIModuleGetSystemLib(&h) != 0) details::ThrowRaisedError(-1);
    return Module(details::ObjectUnsafe::FromOwnedHandle<ModuleObj>(h));
  }

  /// The library's canonical path, or "system_lib".
  std::string name() const {
    KFFIAny out;
    details::SetNone(&out);
    if (KFFIModuleGetName(handle(), &out) != 0) details::ThrowRaisedError(-1);
    return std::string(String(String::FromOwnedAny(out)).view());
  }

  /// The exported function `name`, looked up here and then (when query_imports) in the imported
  /// modules; nullopt when absent. The function keeps its module alive.
  std::optional<Function> GetFunction(std::string_view name, bool query_imports = true) const {
    KFFIByteArray n = details::ToByteArray(name.data(), name.size());
    KFFIObjectHandle h = nullptr;
    if (KFFIModuleGetFunction(handle(), &n, query_imports ? 1 : 0, &h) != 0) {
      details::ThrowRaisedError(-1);
    }
    if (h == nullptr) return std::nullopt;
    return Function(details::ObjectUnsafe::FromOwnedHandle<FunctionObj>(h));
  }

  /// Like GetFunction, but a missing function is an AttributeError that lists the names there
  /// are: "Module `<path>` has no function `foo`. Available functions: add, scale".
  Function GetFunctionRequired(std::string_view name, bool query_imports = true) const {
    std::optional<Function> f = GetFunction(name, query_imports);
    if (KFFI_LIKELY(f.has_value())) return std::move(*f);
    ThrowMissingFunction(name, query_imports);
  }

  /// Names of the exported functions, sorted (with query_imports, the imports' too, once each).
  std::vector<std::string> ListFunctions(bool query_imports = false) const {
    std::vector<std::string> out;
    auto visit = [](void* ctx, const KFFIByteArray* name) -> int {
      static_cast<std::vector<std::string>*>(ctx)->emplace_back(name->data, name->size);
      return 0;
    };
    if (KFFIModuleListFunctions(handle(), query_imports ? 1 : 0, visit, &out) != 0) {
      details::ThrowRaisedError(-1);
    }
    return out;
  }

  /// The JSON metadata of function `name` (as GetFunction finds it):
  /// {"name":..., "params":[{"name":..., "type":...}], "return":..., "doc":...}; nullopt when the
  /// function or its metadata is absent.
  std::optional<std::string> GetFunctionMetadata(std::string_view name) const {
    KFFIByteArray n = details::ToByteArray(name.data(), name.size());
    KFFIAny out;
    details::SetNone(&out);
    if (KFFIModuleGetFunctionMetadata(handle(), &n, &out) != 0) details::ThrowRaisedError(-1);
    if (out.type_index == kKFFINone) return std::nullopt;
    return std::string(String(String::FromOwnedAny(out)).view());
  }

  /// Makes this module search other's functions after its own (GetFunction with imports). An
  /// import that would make a cycle is a ValueError; importing the same module twice is a no-op.
  void Import(const Module& other) const {
    if (KFFIModuleImport(handle(), other.handle()) != 0) details::ThrowRaisedError(-1);
  }

  /// Calls a raw exported safe-call symbol (e.g. from dlsym, or `&__kffi_scale` when linked in)
  /// with C++ arguments: the same conversions and errors as calling a Function.
  template <typename... Args>
  static Any InvokeExternC(void* symbol, Args&&... args) {
    if (symbol == nullptr) KFFI_THROW(ValueError) << "InvokeExternC: the symbol is NULL";
    return CallSafe(reinterpret_cast<KFFISafeCallType>(symbol), std::forward<Args>(args)...);
  }

  /// InvokeExternC of a safe-call symbol named at compile time (`InvokeSafeCall<&__kffi_scale>`),
  /// as generated headers call their export: a direct call, which link-time optimisation can
  /// inline together with the export's argument unpacking.
  template <KFFISafeCallType kSymbol, typename... Args>
  static Any InvokeSafeCall(Args&&... args) {
    return CallSafe(kSymbol, std::forward<Args>(args)...);
  }

 private:
  template <typename... Args>
  static Any CallSafe(KFFISafeCallType symbol, Args&&... args) {
    constexpr size_t kNum = sizeof...(Args);
    KFFIAny packed[kNum == 0 ? 1 : kNum];
    if constexpr (kNum == 0) details::SetNone(&packed[0]);  // never read; keeps it initialised
    details::PackArgs(packed, std::forward<Args>(args)...);
    Any rv;
    int rc = symbol(nullptr, packed, static_cast<int32_t>(kNum), details::AnyUnsafe::RawMut(rv));
    if (KFFI_UNLIKELY(rc != 0)) details::ThrowRaisedError(rc);
    return rv;
  }

  KFFIObjectHandle handle() const {
    return details::ObjectUnsafe::GetHandle(details::ObjectRefData(*this));
  }

  [[noreturn]] KFFI_NOINLINE void ThrowMissingFunction(std::string_view name,
                                                       bool query_imports) const {
    std::vector<std::string> names = ListFunctions(query_imports);
    std::string available;
    for (const std::string& n : names) available += (available.empty() ? "" : ", ") + n;
    if (names.empty()) {
      KFFI_THROW(AttributeError) << "Module `" << this->name() << "` has no function `" << name
                                 << "`. It exports no functions";
    }
    KFFI_THROW(AttributeError) << "Module `" << this->name() << "` has no function `" << name
                               << "`. Available functions: " << available;
  }
};

}  // namespace kffi

#endif  // KFFI_MODULE_H_
