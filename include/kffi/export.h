// include/kffi/export.h: KFFI_EXPORT: export typed C++ functions from a kernel library.
//
// The module ABI (what Module::Load looks for in a shared library):
//   __kffi_<name>        int(void* handle, const KFFIAny* args, int32_t num_args, KFFIAny* result)
//                        the safe-call convention of c_api.h, called with handle == NULL.
//   __kffi__meta_<name>  same signature, no arguments: returns (owned) a str of JSON
//                        {"name":..., "params":[{"name":..., "type":...}], "return":..., "doc":...}
//                        (written by the runtime: KFFIExportGetMetadata)
//   __kffi__abi_version  const uint32_t: the KFFI_ABI_VERSION the library was compiled against.
//                        Emitted by the export macros (weak, one per library), not by the include:
//                        a program that only loads modules carries none.
// Names starting with `__kffi__` are the ABI's own; exported function names must not start with
// an underscore. Parameters without a name are called arg0, arg1, ... in metadata and messages.
// KFFI_EXPORT_CONTRACT (exports with a contract) lives in <kffi/contract_export.h>; <kffi/kffi.h>
// has both.
// SPDX-License-Identifier: Apache-2.0
#ifndef KFFI_EXPORT_H_
#define KFFI_EXPORT_H_

#include <kffi/function.h>

#include <cstdio>
#include <string>
#include <type_traits>
#include <utility>

#if defined(__GNUC__) && !defined(_WIN32) && !defined(KFFI_BUILDING_RUNTIME)
// Weak: a library built with these headers still loads in an older runtime, which lacks it (the
// metadata query then raises an error saying so).
extern "C" __attribute__((weak)) int KFFIExportGetMetadata(
    const char* name, const char* doc, const char* param_names, const KFFIByteArray* param_types,
    int32_t num_params, const KFFIByteArray* return_type, KFFIAny* out);
#endif

namespace kffi {
namespace details {

#if !defined(_WIN32) && !defined(KFFI_NO_ABI_VERSION_SYMBOL)
/// The library's `__kffi__abi_version` record: the ABI version it was compiled against, which the
/// loader reads from the file before opening it. An inline variable under the C name: it is
/// emitted only into libraries whose export macros refer to it (KFFI_ABI_VERSION_RECORD_), once
/// per library (a weak or unique definition, whichever the compiler gives inline variables).
/// Not declared at all under KFFI_NO_ABI_VERSION_SYMBOL: a library that defines the symbol itself
/// would otherwise share the name with this unused declaration, and clang then emits neither.
struct AbiVersionRecord {
  static inline const uint32_t value __asm__("__kffi__abi_version")
      __attribute__((visibility("default"))) = KFFI_ABI_VERSION;
};
#endif

/// The parameter and return types of an exported function, read from its typed function object.
template <typename Obj>
struct ExportSignature;
template <typename C, typename R, typename... Args>
struct ExportSignature<TypedFunctionObj<C, R, Args...>> {
  static constexpr size_t kArity = sizeof...(Args);
  /// The metadata of the export (KFFIExportGetMetadata writes it from the types' names).
  static int Metadata(const char* name, const char* doc, const char* param_names, KFFIAny* result) {
    const TypeNames<R, Args...> types;
    return KFFIExportGetMetadata(name, doc, param_names, types.arrays, static_cast<int32_t>(kArity),
                                 &types.arrays[kArity], result);
  }
};

/// How many comma-separated names a list holds ("" and "  " hold none).
constexpr size_t CountParamNames(const char* names) {
  size_t commas = 0;
  bool any = false;
  for (const char* p = names; *p != '\0'; ++p) {
    if (*p == ',') ++commas;
    if (*p != ' ' && *p != ',') any = true;
  }
  return any ? commas + 1 : 0;
}

/// True when names is empty or gives one name per parameter of the exported function.
template <typename ObjPtr>
constexpr bool ParamNamesFit(const char* names) {
  const size_t n = CountParamNames(names);
  return n == 0 || n == ExportSignature<std::remove_pointer_t<ObjPtr>>::kArity;
}

/// The typed function object type of an export of a callable of type F (its signature).
template <typename F>
using ExportedObj = typename CallableInfo<F>::template TypedObj<F>;

/// The body of `__kffi_<name>`: the typed function's own safe call, so argument errors are the
/// standard ones ("Mismatched type on argument #1 when calling: `scale(...)`..."). No function
/// object is built: a function or a captureless lambda (GetFn returns a compile-time constant) is
/// called directly; a stateful functor is copied once, on the first call, and kept (never
/// destroyed: an exit-time destructor could race a call from another thread). kSite (the name,
/// the parameter names and the source line) only feeds error messages.
template <typename F, F (*GetFn)(), const ExportSite* kSite>
KFFI_INLINE int CallExported(const KFFIAny* args, int32_t num_args, KFFIAny* result) {
  // Not noexcept: the function may run foreign code, so a thread's forced unwind leaves through
  // here (KFFI_CATCH_ALL, kffi/base.h).
  if constexpr (std::is_pointer_v<F> || std::is_empty_v<F>) {
    F fn = GetFn();
    return ExportedObj<F>::SafeCallWith(fn, StaticSite<kSite>{}, args, num_args, result);
  } else {
    F* fn;
    try {
      static F* const kept = new F(GetFn());
      fn = kept;
    }
    KFFI_CATCH_ALL {
      SetRaisedFromCurrentException();
      return -1;
    }
    return ExportedObj<F>::SafeCallWith(*fn, StaticSite<kSite>{}, args, num_args, result);
  }
}

/// The body of `__kffi__meta_<name>`: the runtime writes the JSON {"name", "params": [{"name",
/// "type"}], "return", "doc"} (KFFIExportGetMetadata); parameters without a given name are called
/// arg0, arg1, ...; an Optional<T> parameter has "default": null.
template <typename ObjPtr>
int ExportedMetadata(const char* name, const char* doc, const char* param_names,
                     KFFIAny* result) noexcept {
  using Sig = ExportSignature<std::remove_pointer_t<ObjPtr>>;
#if defined(__GNUC__) && !defined(_WIN32) && !defined(KFFI_BUILDING_RUNTIME)
  if (&KFFIExportGetMetadata == nullptr) {
    const char* parts[] = {"The metadata of `", name,
                           "` needs a kffi runtime of version 0.3 or later"};
    KFFIErrorSetRaisedFromCStrParts("RuntimeError", parts, 3);
    return -1;
  }
#endif
  try {
    return Sig::Metadata(name, doc, param_names, result);
  } catch (...) {  // in a noexcept function that runs no foreign code
    SetRaisedFromCurrentException();
    return -1;
  }
}

/// Registers an export in the system library (static initialisation of statically linked code).
/// Failures are printed, not thrown: there is no caller to report them to.
inline int RegisterSystemLibFunction(const char* symbol, void* fn, const char* meta_symbol,
                                     void* meta) {
  static const uint32_t kAbiVersion = KFFI_ABI_VERSION;
  if (KFFIModuleRegisterSystemLibSymbol("__kffi__abi_version",
                                        const_cast<uint32_t*>(&kAbiVersion)) != 0 ||
      KFFIModuleRegisterSystemLibSymbol(symbol, fn) != 0 ||
      KFFIModuleRegisterSystemLibSymbol(meta_symbol, meta) != 0) {
    KFFIObjectHandle err = nullptr;
    KFFIErrorMoveFromRaised(&err);
    if (err != nullptr) {
      const KFFIErrorCell* cell = KFFIErrorGetCellPtr(err);
      std::fprintf(stderr, "kffi: cannot register `%s` in the system library: %.*s: %.*s\n", symbol,
                   static_cast<int>(cell->kind.size), cell->kind.data,
                   static_cast<int>(cell->message.size), cell->message.data);
      KFFIObjectDecRef(err);
    }
  }
  return 0;
}

}  // namespace details
}  // namespace kffi

/// Exports the typed C++ function fn (a function, a function pointer or a captureless/global
/// lambda) from this shared library as `__kffi_<name>`, with metadata `__kffi__meta_<name>`.
/// Arguments are checked and converted as for kffi::Function::FromTyped; exceptions become the
/// raised error. Use once per name per library, at namespace scope:
///   void Scale(kffi::TensorView y, kffi::ConstTensorView x, double factor);
///   KFFI_EXPORT(scale, Scale);
#define KFFI_EXPORT(name, fn) KFFI_EXPORT_DOC(name, fn, "", "")

/// KFFI_EXPORT with a docstring and the parameter names for the metadata (C++ cannot deduce
/// them), comma separated; "" leaves the names as _0, _1, ... A wrong count fails to compile.
///   KFFI_EXPORT_DOC(scale, Scale, "y = x * factor", "y, x, factor");
#define KFFI_EXPORT_DOC(name, fn, doc, param_names) \
  KFFI_EXPORT_APPLY_(KFFI_EXPORT_DOC_, KFFI_EXPORT_NAME_(name), fn, doc, param_names)
#define KFFI_EXPORT_DOC_(name, fn, doc, param_names)              \
  KFFI_ABI_VERSION_RECORD_(name);                                 \
  KFFI_EXPORT_IMPL_(name, fn, doc, param_names, KFFI_DLL_EXPORT); \
  KFFI_SYSTEM_LIB_AUTO_REGISTER_(name)

/// Exports fn into the system library instead (for code linked statically into the program):
/// Module::SystemLib().GetFunction("name"). The registration runs at static initialisation, so
/// a static archive holding it must be linked whole (e.g. --whole-archive or an object library).
#define KFFI_EXPORT_SYSTEM_LIB(name, fn) KFFI_EXPORT_SYSTEM_LIB_DOC(name, fn, "", "")

/// KFFI_EXPORT_SYSTEM_LIB with a docstring and parameter names (see KFFI_EXPORT_DOC).
#define KFFI_EXPORT_SYSTEM_LIB_DOC(name, fn, doc, param_names) \
  KFFI_EXPORT_APPLY_(KFFI_EXPORT_SYSTEM_LIB_DOC_, KFFI_EXPORT_NAME_(name), fn, doc, param_names)
#define KFFI_EXPORT_SYSTEM_LIB_DOC_(name, fn, doc, param_names)                         \
  KFFI_EXPORT_IMPL_(name, fn, doc, param_names, __attribute__((visibility("hidden")))); \
  KFFI_SYSTEM_LIB_REGISTER_(name)

// Exports made for static linking (kffi_add_library(... STATIC|OBJECT), kffi.compile(...).export
// of a .o) and an export prefix against name clashes: <kffi/system_lib.h>.
#include <kffi/system_lib.h>

// Refers to the library's ABI version record, so that a library with an export carries it (and a
// program that only includes the headers does not). `used`: kept even where nothing reads it.
// Define KFFI_NO_ABI_VERSION_SYMBOL to leave it out (tests that fake a version define the symbol
// themselves).
#if defined(KFFI_NO_ABI_VERSION_SYMBOL) || defined(_WIN32)
#define KFFI_ABI_VERSION_RECORD_(name) static_assert(true, "")
#else
#define KFFI_ABI_VERSION_RECORD_(name)                                     \
  [[maybe_unused]] __attribute__((                                         \
      used)) static const uint32_t* const kffi_abi_version_record_##name = \
      &::kffi::details::AbiVersionRecord::value
#endif

// No function object is built: the exported symbol unpacks the arguments and calls fn directly
// (inlined where the compiler can), so loading a library costs nothing per export. The
// expansion ends in a declaration without its semicolon, so `KFFI_EXPORT(...);` leaves no stray
// one (-Wextra-semi).
#define KFFI_EXPORT_IMPL_(name, fn, doc, param_names, visibility)                                  \
  static_assert(#name[0] != '_', "KFFI_EXPORT: names starting with '_' are reserved for kffi");    \
  static auto kffi_export_fn_##name() { return fn; }                                               \
  static constexpr ::kffi::details::ExportSite kffi_export_site_##name{#name, param_names,         \
                                                                       __FILE__, __LINE__};        \
  extern "C" visibility int __kffi_##name(void*, const KFFIAny* args, int32_t num_args,            \
                                          KFFIAny* result) {                                       \
    return ::kffi::details::CallExported<decltype(kffi_export_fn_##name()),                        \
                                         &kffi_export_fn_##name, &kffi_export_site_##name>(        \
        args, num_args, result);                                                                   \
  }                                                                                                \
  extern "C" visibility int __kffi__meta_##name(void*, const KFFIAny*, int32_t, KFFIAny* result) { \
    return ::kffi::details::ExportedMetadata<                                                      \
        ::kffi::details::ExportedObj<decltype(kffi_export_fn_##name())>*>(#name, doc, param_names, \
                                                                          result);                 \
  }                                                                                                \
  static_assert(                                                                                   \
      ::kffi::details::ParamNamesFit<                                                              \
          ::kffi::details::ExportedObj<decltype(kffi_export_fn_##name())>*>(param_names),          \
      "KFFI_EXPORT_DOC: give one parameter name per parameter, comma separated, or \"\"")

#endif  // KFFI_EXPORT_H_
