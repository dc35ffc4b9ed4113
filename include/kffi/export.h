// include/kffi/export.h: KFFI_EXPORT: export typed C++ functions from a kernel library.
//
// The module ABI (what Module::Load looks for in a shared library):
//   __kffi_<name>        int(void* handle, const KFFIAny* args, int32_t num_args, KFFIAny* result)
//                        the safe-call convention of c_api.h, called with handle == NULL.
//   __kffi__meta_<name>  same signature, no arguments: returns (owned) a str of JSON
//                        {"name":..., "params":[{"name":..., "type":...}], "return":..., "doc":...}
//   __kffi__abi_version  const uint32_t: the KFFI_ABI_VERSION the library was compiled against.
// Names starting with `__kffi__` are the ABI's own; exported function names must not start with
// an underscore.
#ifndef KFFI_EXPORT_H_
#define KFFI_EXPORT_H_

#include <kffi/function.h>

#include <cstdio>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#if defined(_WIN32)
#define KFFI_ABI_VERSION_SYMBOL_ATTR_ __declspec(dllexport) __declspec(selectany)
#else
#define KFFI_ABI_VERSION_SYMBOL_ATTR_ __attribute__((weak, visibility("default")))
#endif

#ifndef KFFI_NO_ABI_VERSION_SYMBOL
/// The ABI version this library was compiled against; the loader refuses a library whose version
/// its runtime cannot serve. Weak, so every translation unit may include this header and the
/// linker keeps one copy. Define KFFI_NO_ABI_VERSION_SYMBOL to leave it out (tests that fake a
/// version define the symbol themselves).
extern "C" KFFI_ABI_VERSION_SYMBOL_ATTR_ const uint32_t __kffi__abi_version = KFFI_ABI_VERSION;
#endif

namespace kffi {
namespace details {

/// The parameter and return types of an exported function, read from its typed function object.
template <typename Obj>
struct ExportSignature;
template <typename C, typename R, typename... Args>
struct ExportSignature<TypedFunctionObj<C, R, Args...>> {
  static constexpr size_t kArity = sizeof...(Args);
  static std::vector<std::string> ParamTypes() { return {TypeStrOf<Args>()...}; }
  static std::string ReturnType() { return TypeStrOf<R>(); }
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
/// destroyed: an exit-time destructor could race a call from another thread). name, file and
/// line only feed error messages (which name the parameters when param_names gives them).
template <typename F, F (*GetFn)()>
KFFI_INLINE int CallExported(const char* name, const char* param_names, const char* file, int line,
                             const KFFIAny* args, int32_t num_args, KFFIAny* result) noexcept {
  if constexpr (std::is_pointer_v<F> || std::is_empty_v<F>) {
    F fn = GetFn();
    return ExportedObj<F>::SafeCallWith(fn, name, param_names, file, line, args, num_args, result);
  } else {
    F* fn;
    try {
      static F* const kept = new F(GetFn());
      fn = kept;
    } catch (...) {
      SetRaisedFromCurrentException();
      return -1;
    }
    return ExportedObj<F>::SafeCallWith(*fn, name, param_names, file, line, args, num_args, result);
  }
}

/// Appends s to out as the body of a JSON string (without quotes).
inline void AppendJsonEscaped(std::string* out, const std::string& s) {
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        *out += "\\\"";
        break;
      case '\\':
        *out += "\\\\";
        break;
      case '\n':
        *out += "\\n";
        break;
      case '\r':
        *out += "\\r";
        break;
      case '\t':
        *out += "\\t";
        break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          *out += buf;
        } else {
          *out += static_cast<char>(c);
        }
    }
  }
}

/// The metadata JSON of an export. Parameters without a given name are called _0, _1, ...
inline std::string ExportMetadataJson(const char* name, const std::vector<std::string>& types,
                                      const std::string& return_type, const char* doc,
                                      const char* param_names) {
  std::vector<std::string> names = SplitParamNames(param_names);
  std::string out = "{\"name\":\"";
  AppendJsonEscaped(&out, name);
  out += "\",\"params\":[";
  for (size_t i = 0; i < types.size(); ++i) {
    std::string pname = i < names.size() && !names[i].empty() ? names[i] : "_" + std::to_string(i);
    out += i ? ",{\"name\":\"" : "{\"name\":\"";
    AppendJsonEscaped(&out, pname);
    out += "\",\"type\":\"";
    AppendJsonEscaped(&out, types[i]);
    out += "\"}";
  }
  out += "],\"return\":\"";
  AppendJsonEscaped(&out, return_type);
  out += "\",\"doc\":\"";
  AppendJsonEscaped(&out, doc);
  out += "\"}";
  return out;
}

/// The body of `__kffi__meta_<name>`.
template <typename ObjPtr>
int ExportedMetadata(const char* name, const char* doc, const char* param_names,
                     KFFIAny* result) noexcept {
  using Sig = ExportSignature<std::remove_pointer_t<ObjPtr>>;
  try {
    String json(ExportMetadataJson(name, Sig::ParamTypes(), Sig::ReturnType(), doc, param_names));
    TypeTraits<String>::MoveToAny(std::move(json), result);
    return 0;
  } catch (...) {
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
///   void Scale(kffi::TensorView y, kffi::TensorView x, double factor);
///   KFFI_EXPORT(scale, Scale);
#define KFFI_EXPORT(name, fn) KFFI_EXPORT_DOC(name, fn, "", "")

/// KFFI_EXPORT with a docstring and the parameter names for the metadata (C++ cannot deduce
/// them), comma separated; "" leaves the names as _0, _1, ... A wrong count fails to compile.
///   KFFI_EXPORT_DOC(scale, Scale, "y = x * factor", "y, x, factor");
#define KFFI_EXPORT_DOC(name, fn, doc, param_names) \
  KFFI_EXPORT_IMPL_(name, fn, doc, param_names, KFFI_DLL_EXPORT)

/// Exports fn into the system library instead (for code linked statically into the program):
/// Module::SystemLib().GetFunction("name"). The registration runs at static initialisation, so
/// a static archive holding it must be linked whole (e.g. --whole-archive or an object library).
#define KFFI_EXPORT_SYSTEM_LIB(name, fn) KFFI_EXPORT_SYSTEM_LIB_DOC(name, fn, "", "")

/// KFFI_EXPORT_SYSTEM_LIB with a docstring and parameter names (see KFFI_EXPORT_DOC).
#define KFFI_EXPORT_SYSTEM_LIB_DOC(name, fn, doc, param_names)                             \
  KFFI_EXPORT_IMPL_(name, fn, doc, param_names, __attribute__((visibility("hidden"))));    \
  [[maybe_unused]] static const int kffi_system_lib_registration_##name =                  \
      ::kffi::details::RegisterSystemLibFunction(                                          \
          "__kffi_" #name, reinterpret_cast<void*>(&__kffi_##name), "__kffi__meta_" #name, \
          reinterpret_cast<void*>(&__kffi__meta_##name))

// No function object is built: the exported symbol unpacks the arguments and calls fn directly
// (inlined where the compiler can), so loading a library costs nothing per export. The
// expansion ends in a declaration without its semicolon, so `KFFI_EXPORT(...);` leaves no stray
// one (-Wextra-semi).
#define KFFI_EXPORT_IMPL_(name, fn, doc, param_names, visibility)                                  \
  static_assert(#name[0] != '_', "KFFI_EXPORT: names starting with '_' are reserved for kffi");    \
  static auto kffi_export_fn_##name() { return fn; }                                               \
  extern "C" visibility int __kffi_##name(void*, const KFFIAny* args, int32_t num_args,            \
                                          KFFIAny* result) {                                       \
    return ::kffi::details::CallExported<decltype(kffi_export_fn_##name()),                        \
                                         &kffi_export_fn_##name>(                                  \
        #name, param_names, __FILE__, __LINE__, args, num_args, result);                           \
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

// ---- Contracts ------------------------------------------------------------------------------
// KFFI_EXPORT_CONTRACT needs <kffi/contract.h> (which includes this header): only translation
// units that declare contracts pay for the contract parser.

/// Exports fn like KFFI_EXPORT, with a contract: a declared signature whose check plan runs before
/// fn on every call (grammar and semantics in <kffi/contract.h>). The text is parsed when the
/// library is loaded; a malformed contract (or one that does not fit fn's C++ parameters) makes
/// Module::Load fail with ValueError "Cannot load module `path`: Invalid contract for `name` at
/// column N: ..." (and, where the library was opened some other way, every call and the metadata
/// query raise it). The metadata gets "contract", the parameter names and types of the contract,
/// "outputs", "symbols" and "env_stream".
///   void Scale(kffi::TensorView y, kffi::TensorView x, double factor);
///   KFFI_EXPORT_CONTRACT(scale, Scale,
///                        "y: Tensor([n], float32), x: Tensor([n], float32), factor: float");
#define KFFI_EXPORT_CONTRACT(name, fn, contract) KFFI_EXPORT_CONTRACT_DOC(name, fn, contract, "")

/// KFFI_EXPORT_CONTRACT with a docstring for the metadata.
#define KFFI_EXPORT_CONTRACT_DOC(name, fn, contract, doc)                                          \
  static_assert(#name[0] != '_', "KFFI_EXPORT_CONTRACT: names starting with '_' are reserved");    \
  static auto kffi_export_fn_##name() { return fn; }                                               \
  static auto* kffi_contract_export_##name() {                                                     \
    static auto* const state = ::kffi::details::MakeContractExport(                                \
        kffi_export_fn_##name(), #name, contract, doc, __FILE__, __LINE__);                        \
    return state;                                                                                  \
  }                                                                                                \
  /* Parsed at load time (static initialisation), not at the first call. */                        \
  [[maybe_unused]] static auto* const kffi_contract_loaded_##name = kffi_contract_export_##name(); \
  extern "C" KFFI_DLL_EXPORT int __kffi_##name(void*, const KFFIAny* args, int32_t num_args,       \
                                               KFFIAny* result) {                                  \
    return kffi_contract_export_##name()->Call(args, num_args, result);                            \
  }                                                                                                \
  extern "C" KFFI_DLL_EXPORT int __kffi__meta_##name(void*, const KFFIAny*, int32_t,               \
                                                     KFFIAny* result) {                            \
    return kffi_contract_export_##name()->Metadata(result);                                        \
  }                                                                                                \
  static_assert(true, "")

#endif  // KFFI_EXPORT_H_
