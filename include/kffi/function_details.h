// include/kffi/function_details.h: argument packing/unpacking and signatures of typed calls.
#ifndef KFFI_FUNCTION_DETAILS_H_
#define KFFI_FUNCTION_DETAILS_H_

#include <kffi/any.h>

#include <cstdio>
#include <string>
#include <utility>

#if defined(__GNUC__) && !defined(_WIN32) && !defined(KFFI_BUILDING_RUNTIME)
// Weak: a library built with these headers still loads in an older runtime (FormatSignature).
extern "C" __attribute__((weak)) int KFFIFunctionFormatSignature(
    const char* name, const char* param_names, const KFFIByteArray* param_types, int32_t num_params,
    const KFFIByteArray* return_type, KFFIAny* out);
#endif

namespace kffi {
namespace details {

template <typename TCallable, typename R, typename... Args>
class TypedFunctionObj;

/// The name of a type in signatures ("int", "Tensor", "None" for void).
template <typename T>
inline std::string TypeStrOf() {
  if constexpr (std::is_void_v<T>) {
    return "None";
  } else {
    return TypeTraitsNoCR<T>::TypeStr();
  }
}

/// The name of parameter i when none was given: "arg0", "arg1", ...
inline std::string DefaultParamName(size_t i) { return "arg" + std::to_string(i); }

/// "name(a: int, arg1: str) -> None" from a function's name, its parameter names (comma
/// separated, as KFFI_EXPORT_DOC takes them; unnamed ones are argN) and the spellings of its
/// parameter types and return type (types[num_params]). The runtime writes it
/// (KFFIFunctionFormatSignature), so that no kernel compiles the formatting; a runtime older than
/// 0.3 lacks it, and then the name alone stands for the signature.
inline std::string FormatSignature(const std::string& name, const char* param_names,
                                   const KFFIByteArray* types, size_t num_params) {
#if defined(__GNUC__) && !defined(_WIN32) && !defined(KFFI_BUILDING_RUNTIME)
  if (&KFFIFunctionFormatSignature == nullptr) return name;
#endif
  KFFIAny out;
  SetNone(&out);
  if (KFFIFunctionFormatSignature(name.c_str(), param_names, types,
                                  static_cast<int32_t>(num_params), &types[num_params],
                                  &out) != 0) {
    ThrowRaisedError(-1);
  }
  String s(String::FromOwnedAny(out));
  return std::string(s.view());
}

template <typename R, typename... Args>
struct Signature {
  /// "name(arg0: int, arg1: str) -> None", or with param_names (comma separated, one per
  /// parameter, as KFFI_EXPORT_DOC takes them) "name(a: int, b: str) -> None". Parameters
  /// without a name are argN everywhere (messages, metadata, Python keywords).
  static std::string Str(const std::string& name, const char* param_names = "") {
    constexpr size_t kArity = sizeof...(Args);
    const std::string types[kArity + 1] = {TypeStrOf<Args>()..., TypeStrOf<R>()};
    KFFIByteArray arrays[kArity + 1];
    for (size_t i = 0; i <= kArity; ++i) arrays[i] = ToByteArray(types[i].data(), types[i].size());
    return FormatSignature(name, param_names, arrays, kArity);
  }
};

// Argument errors carry no frame of their own: the frame of the function being called is added
// when the error leaves it, which is the one a user needs.
// Their messages are put together by the runtime from parts (KFFIErrorSetRaisedFromCStrParts),
// so that a kernel compiles no string concatenation for them.
[[noreturn]] KFFI_NOINLINE inline void ThrowArgCountError(const std::string& sig, size_t expected,
                                                          int32_t got) {
  char e[24];
  char g[16];
  std::snprintf(e, sizeof(e), "%zu", expected);
  std::snprintf(g, sizeof(g), "%d", static_cast<int>(got));
  const char* parts[] = {"Mismatched number of arguments when calling: `",
                         sig.c_str(),
                         "`. Expected ",
                         e,
                         " but got ",
                         g};
  KFFIErrorSetRaisedFromCStrParts("TypeError", parts, 6);
  ThrowRaisedError(-1);
}

[[noreturn]] KFFI_NOINLINE inline void ThrowArgTypeError(const std::string& sig, size_t index,
                                                         const std::string& expected,
                                                         const std::string& got) {
  char i[24];
  std::snprintf(i, sizeof(i), "%zu", index);
  const char* parts[] = {"Mismatched type on argument #",
                         i,
                         " when calling: `",
                         sig.c_str(),
                         "`. Expected `",
                         expected.c_str(),
                         "` but got `",
                         got.c_str(),
                         "`"};
  KFFIErrorSetRaisedFromCStrParts("TypeError", parts, 9);
  ThrowRaisedError(-1);
}

/// Raises e again, its message prefixed with the argument it was about (kind and backtrace kept).
[[noreturn]] KFFI_NOINLINE inline void ThrowInvalidArgument(const Error& e, size_t index,
                                                            const std::string& sig) {
  const KFFIErrorCell* cell = KFFIErrorGetCellPtr(ObjectUnsafe::GetHandle(ObjectRefData(e)));
  char i[24];
  std::snprintf(i, sizeof(i), "%zu", index);
  const std::string_view message(cell->message.data, cell->message.size);
  const std::string_view backtrace(cell->backtrace.data, cell->backtrace.size);
  throw Error(std::string(cell->kind.data, cell->kind.size),
              std::string("Invalid argument #")
                  .append(i)
                  .append(" when calling: `")
                  .append(sig)
                  .append("`. ")
                  .append(message),
              std::string(backtrace));
}

[[noreturn]] KFFI_NOINLINE inline void ThrowNullFunction() {
  throw Error("ValueError", "Cannot call a null Function");
}

/// Reads argument i as the parameter type Arg: an exact match first (a compare and a load),
/// then the allowed conversions, else a TypeError naming the argument.
template <typename Arg>
struct ArgUnpacker {
  using T = std::remove_cv_t<std::remove_reference_t<Arg>>;
  using Traits = TypeTraits<T>;
  static_assert(Traits::convert_enabled, "this parameter type has no kffi conversion");

  template <typename Obj>
  KFFI_INLINE static T Unpack(const KFFIAny* args, size_t i, const Obj* obj) {
    if (KFFI_LIKELY(Traits::CheckAnyStrict(&args[i]))) {
      return Traits::CopyFromAnyViewAfterCheck(&args[i]);
    }
    return UnpackSlow(args, i, obj);
  }

  template <typename Obj>
  KFFI_NOINLINE static T UnpackSlow(const KFFIAny* args, size_t i, const Obj* obj) {
    std::optional<T> v;
    try {
      v = Traits::TryCastFromAnyView(&args[i]);
    } catch (const Error& e) {
      // A conversion that parses (e.g. a dtype string) failed: say which argument it was.
      ThrowInvalidArgument(e, i, obj->SignatureStr());
    }
    if (v.has_value()) return std::move(*v);
    ThrowArgTypeError(obj->SignatureStr(), i, Traits::TypeStr(), MismatchTypeInfo<T>(&args[i]));
  }
};

/// A callable held by reference, passed by value (a stateful functor is not copied).
template <typename F>
struct FnRef {
  F* f;
  template <typename... A>
  decltype(auto) operator()(A&&... a) const {
    return (*f)(std::forward<A>(a)...);
  }
};

/// What names the function in messages (it has SignatureStr()): given as a pointer, or by value.
template <typename Obj>
const auto* NamerPtr(const Obj& obj) {
  if constexpr (std::is_pointer_v<Obj>) {
    return obj;
  } else {
    return &obj;
  }
}

/// One converted argument of InvokeConverted (ArgSlot), and all of them (ArgValues): an aggregate
/// whose bases are initialised in order, as a std::tuple's elements would be, without the
/// compile time of <tuple> in every kernel.
template <size_t I, typename T>
struct ArgSlot {
  T v;
};
template <typename Seq, typename... T>
struct ArgValues;
template <size_t... I, typename... T>
struct ArgValues<std::index_sequence<I...>, T...> : ArgSlot<I, T>... {};

/// The slow path of InvokeUnpacked: some argument needs a conversion (or is wrong). The values
/// are converted into an ArgValues, whose braced initialisation runs strictly left to right, so the
/// first bad argument is the one reported on every compiler (a function call's arguments are
/// evaluated in an unspecified order: GCC goes right to left).
///
/// f and obj come by value (a function pointer, an empty lambda, a FnRef; a pointer or a small
/// name record): the fast path then stores nothing to memory for a slow path it rarely takes.
template <typename R, typename... Args, typename F, typename Obj, size_t... I>
KFFI_NOINLINE void InvokeConverted(F f, const KFFIAny* args, KFFIAny* result, Obj obj,
                                   std::index_sequence<I...>) {
  const auto* namer = NamerPtr(obj);
  ArgValues<std::index_sequence<I...>, typename ArgUnpacker<Args>::T...> values{
      {ArgUnpacker<Args>::Unpack(args, I, namer)}...};
  if constexpr (std::is_void_v<R>) {
    f(std::move(static_cast<ArgSlot<I, typename ArgUnpacker<Args>::T>&>(values).v)...);
  } else {
    TypeTraitsNoCR<R>::MoveToAny(
        f(std::move(static_cast<ArgSlot<I, typename ArgUnpacker<Args>::T>&>(values).v)...), result);
  }
}

/// Unpacks args as Args... and calls f; a non-void result is moved into *result. obj names the
/// function in messages (it, or what it points to, provides SignatureStr()). The fast path checks
/// every argument first (left to right) and then reads them: reads cannot fail, so their order does
/// not matter, and the call costs what checking and reading each argument costs.
template <typename R, typename... Args, typename F, typename Obj, size_t... I>
KFFI_INLINE void InvokeUnpacked(F& f, const KFFIAny* args, KFFIAny* result, Obj obj,
                                std::index_sequence<I...> seq) {
  if constexpr (sizeof...(Args) == 0) {
    (void)args;
    (void)obj;
    (void)seq;
    if constexpr (std::is_void_v<R>) {
      f();
    } else {
      TypeTraitsNoCR<R>::MoveToAny(f(), result);
    }
  } else if (KFFI_LIKELY((ArgUnpacker<Args>::Traits::CheckAnyStrict(&args[I]) && ...))) {
    if constexpr (std::is_void_v<R>) {
      f(ArgUnpacker<Args>::Traits::CopyFromAnyViewAfterCheck(&args[I])...);
    } else {
      TypeTraitsNoCR<R>::MoveToAny(
          f(ArgUnpacker<Args>::Traits::CopyFromAnyViewAfterCheck(&args[I])...), result);
    }
  } else if constexpr (std::is_pointer_v<F> || std::is_empty_v<F>) {
    InvokeConverted<R, Args...>(f, args, result, obj, seq);
  } else {
    InvokeConverted<R, Args...>(FnRef<F>{&f}, args, result, obj, seq);
  }
}

/// Deduces R(Args...) of a callable (lambda, functor or function pointer).
template <typename F, typename = void>
struct CallableInfo : CallableInfo<decltype(&F::operator())> {};
template <typename R, typename... Args>
struct CallableInfo<R (*)(Args...)> {
  template <typename F>
  using TypedObj = TypedFunctionObj<F, R, Args...>;
};
template <typename R, typename... Args>
struct CallableInfo<R(Args...)> : CallableInfo<R (*)(Args...)> {};
template <typename C, typename R, typename... Args>
struct CallableInfo<R (C::*)(Args...) const> : CallableInfo<R (*)(Args...)> {};
template <typename C, typename R, typename... Args>
struct CallableInfo<R (C::*)(Args...)> : CallableInfo<R (*)(Args...)> {};

/// Packs C++ values as borrowed views (no references taken: they live through the call).
template <typename... Args>
KFFI_INLINE void PackArgs(KFFIAny* out, Args&&... args) {
  size_t i = 0;
  ((TypeTraits<std::decay_t<Args>>::CopyToAnyView(args, &out[i++])), ...);
  (void)i;
  (void)out;
}

/// Runs a static-initialisation block; an error is reported and does not abort loading.
inline int RunStaticInit(void (*fn)(), const char* file, int line) {
  try {
    fn();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kffi: static initialisation block at %s:%d failed: %s\n", file, line,
                 e.what());
  }
  return 0;
}

}  // namespace details
}  // namespace kffi

#endif  // KFFI_FUNCTION_DETAILS_H_
