// include/kffi/details/function.h: argument packing/unpacking and signatures of typed calls.
// SPDX-License-Identifier: Apache-2.0
#ifndef KFFI_DETAILS_FUNCTION_H_
#define KFFI_DETAILS_FUNCTION_H_

#include <kffi/any.h>

#include <cstdio>
#include <string>
#include <utility>

#if defined(__GNUC__) && !defined(_WIN32) && !defined(KFFI_BUILDING_RUNTIME)
// Weak: a library built with these headers still loads in an older runtime (FormatSignature; a
// runtime without the device guard runs calls on the caller's device, as before 0.4).
extern "C" __attribute__((weak)) int KFFIFunctionFormatSignature(
    const char* name, const char* param_names, const KFFIByteArray* param_types, int32_t num_params,
    const KFFIByteArray* return_type, KFFIAny* out);
extern "C" __attribute__((weak)) int KFFIEnvEnterDevice(int32_t device_type, int32_t device_id,
                                                        void** out_restore);
extern "C" __attribute__((weak)) void KFFIEnvRestoreDevice(int32_t device_type, void* restore);
extern "C" __attribute__((weak)) void KFFIErrorSetRaisedCallArgument(
    const char* name, const char* param_names, const KFFIByteArray* types, int32_t num_params,
    int32_t index, const char* got, const KFFIAny* arg, int32_t num_args);
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
inline std::string DefaultParamName(size_t i) {
  char name[32];
  std::snprintf(name, sizeof(name), "arg%zu", i);
  return name;
}

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

/// The type names of a signature as the runtime takes them: arrays[i] the parameters', then
/// arrays[kArity] the return type's (TypeStrOf), valid while this lives. One builder for the
/// signature text, the metadata and the argument errors of typed functions.
template <typename R, typename... Args>
struct TypeNames {
  static constexpr size_t kArity = sizeof...(Args);
  TypeNames() {
    for (size_t i = 0; i <= kArity; ++i) arrays[i] = ToByteArray(names[i].data(), names[i].size());
  }
  TypeNames(const TypeNames&) = delete;
  TypeNames& operator=(const TypeNames&) = delete;
  const std::string names[kArity + 1] = {TypeStrOf<Args>()..., TypeStrOf<R>()};
  KFFIByteArray arrays[kArity + 1];
};

template <typename R, typename... Args>
struct Signature {
  /// "name(arg0: int, arg1: str) -> None", or with param_names (comma separated, one per
  /// parameter, as KFFI_EXPORT_DOC takes them) "name(a: int, b: str) -> None". Parameters
  /// without a name are argN everywhere (messages, metadata, Python keywords).
  static std::string Str(const std::string& name, const char* param_names = "") {
    const TypeNames<R, Args...> types;
    return FormatSignature(name, param_names, types.arrays, sizeof...(Args));
  }
};

/// The text RaiseArgumentError would raise ("<subject>: expected <expected>, got <got> (argument
/// #index of `sig`)"), without raising it: the runtime's one formatter writes it into the
/// thread's error slot, from which it is taken at once.
KFFI_NOINLINE inline std::string ArgumentText(const char* subject, const char* expected,
                                              const char* got, int32_t index, const char* sig) {
  RaiseArgumentError("ValueError", subject, expected, got, nullptr, index, sig);
  KFFIObjectHandle err = nullptr;
  KFFIErrorMoveFromRaised(&err);
  if (err == nullptr) return std::string(subject) + ": " + (got != nullptr ? got : "");
  const KFFIByteArray& m = KFFIErrorGetCellPtr(err)->message;
  std::string out(m.data, m.size);
  KFFIObjectDecRef(err);
  return out;
}

/// " (argument #index of `sig`)": where an argument error points, as ArgumentText ends it, for
/// messages built elsewhere (kffi.torch's shape checks, kffi.jax's and kffi.torch's records).
inline std::string ArgumentContext(int32_t index, const char* sig) {
  const std::string whole = ArgumentText("x", nullptr, "\x01", index, sig);
  const size_t at = whole.find('\x01');
  return at == std::string::npos ? std::string() : whole.substr(at + 1);
}

// Argument errors carry no frame of their own: the frame of the function being called is added
// when the error leaves it, which is the one a user needs. The runtime writes them in kffi's one
// format (KFFIErrorSetRaisedArgument: "<param>: expected <type>, got <type> (argument #k of
// `<signature>`)"), so that a kernel compiles no message of its own.

/// Throws the error of a typed function's call (KFFIErrorSetRaisedCallArgument writes it): of
/// argument #index, which its parameter cannot take (got describes the value), or whose conversion
/// failed with cause; with index -1, of a call that passed num_args arguments. types: the
/// parameter type names and then the return type's (TypeNames). Everything but this call is the
/// runtime's, so that an export's build compiles no signature, parameter name or message.
[[noreturn]] KFFI_NOINLINE inline void ThrowCallArgumentError(
    const char* name, const char* param_names, const KFFIByteArray* types, size_t num_params,
    int32_t index, const Error* cause, const char* got, const KFFIAny* arg, int32_t num_args) {
  if (cause != nullptr) KFFIErrorSetRaised(ObjectUnsafe::GetHandle(ObjectRefData(*cause)));
#if defined(__GNUC__) && !defined(_WIN32) && !defined(KFFI_BUILDING_RUNTIME)
  if (&KFFIErrorSetRaisedCallArgument == nullptr) {
    // A runtime older than 0.5: a conversion's error as it is, else the function named only.
    if (cause == nullptr) {
      const char* parts[] = {"Invalid arguments for `", name, "`"};
      KFFIErrorSetRaisedFromCStrParts("TypeError", parts, 3);
    }
    ThrowRaisedError(-1);
  }
#endif
  KFFIErrorSetRaisedCallArgument(name, param_names, types, static_cast<int32_t>(num_params), index,
                                 cause != nullptr ? nullptr : got, arg, num_args);
  ThrowRaisedError(-1);
}

/// TypeError: argument #index (a value of the wrong type) for parameter `param` of sig. got is
/// the converter's description of the value; the runtime names its type as the caller passed it
/// where it can (a Python list is `list`).
[[noreturn]] KFFI_NOINLINE inline void ThrowArgTypeError(const std::string& sig,
                                                         const std::string& param, size_t index,
                                                         const std::string& expected,
                                                         const std::string& got,
                                                         const KFFIAny* arg) {
  RaiseArgumentError("TypeError", param.c_str(), expected.c_str(), got.c_str(), arg,
                     static_cast<int32_t>(index), sig.c_str());
  ThrowRaisedError(-1);
}

/// Raises e again in the argument-error format for parameter `param` (argument #index of sig):
/// "<param>: <e's message> (argument #k of `sig`)", kind and backtrace kept.
[[noreturn]] KFFI_NOINLINE inline void ThrowInvalidArgument(const Error& e,
                                                            const std::string& param, size_t index,
                                                            const std::string& sig) {
  const KFFIErrorCell* cell = KFFIErrorGetCellPtr(ObjectUnsafe::GetHandle(ObjectRefData(e)));
  const std::string kind(cell->kind.data, cell->kind.size);
  const std::string message(cell->message.data, cell->message.size);
  const std::string backtrace(cell->backtrace.data, cell->backtrace.size);
  RaiseArgumentError(kind.c_str(), param.c_str(), nullptr, message.c_str(), nullptr,
                     static_cast<int32_t>(index), sig.c_str());
  KFFIObjectHandle h = nullptr;
  KFFIErrorMoveFromRaised(&h);
  if (h != nullptr && !backtrace.empty()) {
    const KFFIByteArray b = ToByteArray(backtrace.data(), backtrace.size());
    KFFIErrorGetCellPtr(h)->update_backtrace(h, &b, kKFFIBacktraceUpdateModeReplace);
  }
  KFFIErrorSetRaised(h);
  KFFIObjectDecRef(h);
  ThrowRaisedError(-1);
}

[[noreturn]] KFFI_NOINLINE inline void ThrowNullFunction() {
  throw Error("ValueError", "Cannot call a null Function");
}

/// Whether a parameter of type Arg borrows its argument's reference: `const ObjectPtr<U>&`, or
/// a const reference to an object reference type under the generic rule (not a container).
template <typename Arg, typename T = std::remove_cv_t<std::remove_reference_t<Arg>>,
          typename = void>
struct BorrowsObject : std::false_type {};
template <typename Arg, typename U>
struct BorrowsObject<Arg, ObjectPtr<U>, void>
    : std::bool_constant<std::is_lvalue_reference_v<Arg> &&
                         std::is_const_v<std::remove_reference_t<Arg>>> {};
template <typename Arg, typename T>
struct BorrowsObject<
    Arg, T, std::enable_if_t<std::is_base_of_v<ObjectRef, T> && !HasCustomTraits<T>::value>>
    : std::bool_constant<std::is_lvalue_reference_v<Arg> &&
                         std::is_const_v<std::remove_reference_t<Arg>>> {};

/// The value a `const ObjectPtr<U>&` or `const Ref&` parameter binds to: the caller's reference,
/// borrowed for the call. An argument is a view its caller keeps alive through the call (the
/// ABI's rule), so the parameter takes and drops no count (two atomic updates saved); a copy the
/// callee keeps counts as any copy does. A temporary of the call's full expression.
template <typename P>
class BorrowedObject {
 public:
  explicit BorrowedObject(const KFFIAny* s) : value_(Adopt(s)) {}
  ~BorrowedObject() { (void)ObjectUnsafe::MoveToHandle(std::move(Data())); }  // not released
  BorrowedObject(const BorrowedObject&) = delete;
  BorrowedObject& operator=(const BorrowedObject&) = delete;
  operator const P&() const { return value_; }  // NOLINT(google-explicit-constructor)

 private:
  static P Adopt(const KFFIAny* s) {
    if constexpr (IsObjectPtr<P>::value) {
      return ObjectUnsafe::FromOwnedHandle<typename P::element_type>(s->v_obj);
    } else if (s->type_index == kKFFINone) {
      return P(UnsafeInit{});
    } else {
      return P(ObjectUnsafe::FromOwnedHandle<typename P::ContainerType>(s->v_obj));
    }
  }
  auto& Data() {
    if constexpr (IsObjectPtr<P>::value) {
      return value_;
    } else {
      return ObjectUnsafe::RefData(value_);
    }
  }
  P value_;
};

/// Reads argument i as the parameter type Arg: an exact match first (a compare and a load),
/// then the allowed conversions, else a TypeError naming the argument.
template <typename Arg>
struct ArgUnpacker {
  using T = std::remove_cv_t<std::remove_reference_t<Arg>>;
  using Traits = TypeTraits<T>;
  static_assert(Traits::convert_enabled, "this parameter type has no kffi conversion");

  /// The fast path's value of an argument Traits::CheckAnyStrict accepted: a borrowed object for
  /// a parameter that borrows (BorrowsObject), else the converted value.
  KFFI_INLINE static auto FastArg(const KFFIAny* arg) {
    if constexpr (BorrowsObject<Arg>::value) {
      return BorrowedObject<T>(arg);
    } else {
      return Traits::CopyFromAnyViewAfterCheck(arg);
    }
  }

  template <typename Obj>
  KFFI_INLINE static T Unpack(const KFFIAny* args, size_t i, const Obj* obj) {
    if (KFFI_LIKELY(Traits::CheckAnyStrict(&args[i]))) {
      return Traits::CopyFromAnyViewAfterCheck(&args[i]);
    }
    return UnpackSlow(args, i, obj);
  }

  /// obj names the function in the error (FailArgument): a value the parameter cannot take, or
  /// a conversion that failed (a dtype string that does not parse, read-only memory for a
  /// TensorView), said of argument i.
  template <typename Obj>
  KFFI_NOINLINE static T UnpackSlow(const KFFIAny* args, size_t i, const Obj* obj) {
    std::optional<T> v;
    try {
      v = Traits::TryCastFromAnyView(&args[i]);
    } catch (const Error& e) {
      obj->FailArgument(i, &e, nullptr, &args[i]);
    }
    if (v.has_value()) return std::move(*v);
    obj->FailArgument(i, nullptr, MismatchTypeInfo<T>(&args[i]).c_str(), &args[i]);
  }
};

// ---- the device a call runs on ---------------------------------------------------------------
// A typed call whose arguments include a CUDA tensor runs with that tensor's device current (the
// first such tensor among the parameters that take tensors), and the caller's device is restored
// after it, as a CUDA kernel launched on the environment stream needs. Functions that choose
// devices themselves opt out: KFFI_EXPORT(name, kffi::NoDeviceGuard<Fn>).

/// Restores, when the call ends, the device that EnterCudaDevice changed.
struct DeviceRestore {
  void* restore = nullptr;
  DeviceRestore() = default;
  DeviceRestore(const DeviceRestore&) = delete;
  DeviceRestore& operator=(const DeviceRestore&) = delete;
  ~DeviceRestore() {
    if (KFFI_UNLIKELY(restore != nullptr)) KFFIEnvRestoreDevice(kDLCUDA, restore);
  }
};

/// Makes t's CUDA device current for the call (the runtime compares with the current context
/// first: nothing changes when it is current already).
KFFI_NOINLINE inline void EnterCudaDevice(const DLTensor* t, DeviceRestore* r) {
#if defined(__GNUC__) && !defined(_WIN32) && !defined(KFFI_BUILDING_RUNTIME)
  if (&KFFIEnvEnterDevice == nullptr) return;
#endif
  if (KFFIEnvEnterDevice(kDLCUDA, t->device.device_id, &r->restore) != 0) ThrowRaisedError(-1);
}

/// The argument's tensor when parameter type T takes tensors and it is on a CUDA device.
template <typename T>
KFFI_INLINE const DLTensor* CudaArg(const KFFIAny* v) {
  if constexpr (HasArgTensor<TypeTraitsNoCR<T>>::value) {
    const DLTensor* t = TypeTraitsNoCR<T>::ArgTensor(v);
    return t != nullptr && t->device.device_type == kDLCUDA ? t : nullptr;
  } else {
    (void)v;
    return nullptr;
  }
}

/// True for callables that opt out of the device guard (kffi::NoDeviceGuard).
template <typename F, typename = void>
struct OptsOutOfDeviceGuard : std::false_type {};
template <typename F>
struct OptsOutOfDeviceGuard<F, std::void_t<decltype(F::kNoDeviceGuard)>> : std::true_type {};

/// Whether a call of F with Args... has the device guard: it takes a tensor and did not opt out.
template <typename F, typename... Args>
inline constexpr bool kHasDeviceGuard =
    !OptsOutOfDeviceGuard<F>::value && (HasArgTensor<TypeTraitsNoCR<Args>>::value || ...);

/// The guard's state in a call without one: nothing to restore, nothing checked after the call.
struct NoDeviceRestore {};
/// What a typed call of F with Args... keeps to restore the caller's device.
template <typename F, typename... Args>
using CallDeviceRestore =
    std::conditional_t<kHasDeviceGuard<F, Args...>, DeviceRestore, NoDeviceRestore>;

/// Makes the device of the first CUDA tensor among the arguments current (see above); nothing is
/// compiled for callables that opted out or take no tensor.
template <typename F, typename... Args, size_t... I>
KFFI_INLINE void EnterCallDevice(const KFFIAny* args, CallDeviceRestore<F, Args...>* r,
                                 std::index_sequence<I...>) {
  if constexpr (kHasDeviceGuard<F, Args...>) {
    const DLTensor* t = nullptr;
    (void)(((t = CudaArg<Args>(&args[I])) != nullptr) || ...);
    if (t != nullptr) EnterCudaDevice(t, r);
  } else {
    (void)args;
    (void)r;
  }
}

/// A callable held by reference, passed by value (a stateful functor is not copied).
template <typename F>
struct FnRef {
  F* f;
  template <typename... A>
  decltype(auto) operator()(A&&... a) const {
    return (*f)(std::forward<A>(a)...);
  }
};

/// FailArgument of the callables that have their signature and parameter names written by their
/// compiled contract (SignatureStr, ParamNameAt): the contract paths. Args: the C++ parameters.
template <typename... Args, typename Obj>
[[noreturn]] KFFI_NOINLINE void FailContractArgument(const Obj& obj, size_t i, const Error* cause,
                                                     const char* got, const KFFIAny* arg) {
  if (cause != nullptr) ThrowInvalidArgument(*cause, obj.ParamNameAt(i), i, obj.SignatureStr());
  const std::string expected[] = {TypeStrOf<Args>()..., ""};
  ThrowArgTypeError(obj.SignatureStr(), obj.ParamNameAt(i), i, expected[i], got, arg);
}

/// What names the function in messages (it has FailArgument): given as a pointer, or by value.
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
/// function in messages (it, or what it points to, provides FailArgument). The fast path checks
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
      f(ArgUnpacker<Args>::FastArg(&args[I])...);
    } else {
      TypeTraitsNoCR<R>::MoveToAny(f(ArgUnpacker<Args>::FastArg(&args[I])...), result);
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

/// Whether T is a plain struct declared with KFFI_RECORD (found by argument-dependent lookup of
/// the KFFIRecordKey the macro declares beside it).
template <typename T, typename = void>
struct IsRecord : std::false_type {};
template <typename T>
struct IsRecord<T, std::void_t<decltype(KFFIRecordKey(static_cast<const T*>(nullptr)))>>
    : std::true_type {};

/// An argument as Function::operator() passes it: a declared struct boxed in an owned Any (a
/// temporary that lives through the call: a view needs an object), anything else unchanged.
template <typename T>
KFFI_INLINE decltype(auto) BoxRecordArg(T&& v) {
  if constexpr (IsRecord<std::decay_t<T>>::value) {
    return Any(std::forward<T>(v));
  } else {
    return std::forward<T>(v);
  }
}

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

#endif  // KFFI_DETAILS_FUNCTION_H_
