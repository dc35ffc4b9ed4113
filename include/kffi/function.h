// include/kffi/function.h: Function (packed and typed), TypedFunction, globals, static init.
// SPDX-License-Identifier: Apache-2.0
#ifndef KFFI_FUNCTION_H_
#define KFFI_FUNCTION_H_

#include <kffi/any.h>
#include <kffi/details/function.h>

#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace kffi {

/// The object behind a Function: the C call cell. Subclasses add the callable after it.
class FunctionObj : public Object, public KFFIFunctionCell {
 public:
  KFFI_DECLARE_STATIC_OBJECT_INFO("ffi.Function", FunctionObj, Object, kKFFIFunction, false)
  FunctionObj() {
    safe_call = nullptr;
    cpp_call = nullptr;
  }
};

/// Arguments of a packed call: a borrowed array of values.
class PackedArgs {
 public:
  PackedArgs(const AnyView* data, int32_t size) : data_(data), size_(size) {}
  int32_t size() const { return size_; }
  const AnyView& operator[](int32_t i) const { return data_[i]; }
  const AnyView* data() const { return data_; }

 private:
  const AnyView* data_;
  int32_t size_;
};

namespace details {

/// Where a function was made, for the frame it adds to errors that leave it.
struct FunctionSource {
  std::string name;
  const char* file;
  int line;
};

/// Adds the frame of the function it leaves to the raised error (so backtraces grow by one frame
/// per boundary crossed); returns -1, the failed call's code. For errors raised through the C API.
inline int RaisedLeaving(const char* name, const char* file, int line) noexcept {
  KFFIObjectHandle err = nullptr;
  KFFIErrorMoveFromRaised(&err);
  if (err == nullptr) return -1;
  const KFFIByteArray* frame = KFFIBacktrace(file, line, name, 1);
  KFFIErrorGetCellPtr(err)->update_backtrace(err, frame, kKFFIBacktraceUpdateModeAppend);
  KFFIErrorSetRaised(err);
  KFFIObjectDecRef(err);
  return -1;
}
/// Puts the exception being handled into the error slot, adding the frame of the function it
/// leaves.
inline void SetRaisedLeaving(const char* name, const char* file, int line) noexcept {
  SetRaisedFromCurrentException();
  RaisedLeaving(name, file, line);
}
inline void SetRaisedLeaving(const FunctionSource& src) noexcept {
  SetRaisedLeaving(src.name.c_str(), src.file, src.line);
}

/// A Function object around a packed callable void(PackedArgs, Any*).
template <typename TCallable>
class PackedFunctionObj : public FunctionObj {
 public:
  PackedFunctionObj(TCallable f, FunctionSource src)
      : callable_(std::move(f)), source_(std::move(src)) {
    safe_call = &SafeCall;
  }
  static int SafeCall(void* self, const KFFIAny* args, int32_t num_args, KFFIAny* result) {
    auto* obj = static_cast<PackedFunctionObj*>(static_cast<Object*>(self));
    try {
      Any rv;
      obj->callable_(PackedArgs(reinterpret_cast<const AnyView*>(args), num_args), &rv);
      *result = AnyUnsafe::MoveToOwnedRaw(std::move(rv));
      return 0;
    }
    KFFI_CATCH_ALL {
      SetRaisedLeaving(obj->source_);
      return -1;
    }
  }

 private:
  TCallable callable_;
  FunctionSource source_;
};

/// Where an export is defined, for its error messages (KFFI_EXPORT writes one per export, a
/// constant): its name, its parameter names (comma separated, or "") and its source line.
struct ExportSite {
  const char* name;
  const char* param_names;
  const char* file;
  int line;
};

/// The site of an export as a type (TypedFunctionObj::SafeCallWith's Site): empty, so passing it
/// to the rarely taken error paths costs the call path nothing.
template <const ExportSite* kSite>
struct StaticSite {
  static const char* name() { return kSite->name; }
  static const char* param_names() { return kSite->param_names; }
  static const char* file() { return kSite->file; }
  static int line() { return kSite->line; }
};

/// The site of a function object (TypedFunctionObj::SafeCallWith's Site): its source, no parameter
/// names.
struct SourceSite {
  const FunctionSource* src;
  const char* name() const { return src->name.c_str(); }
  static const char* param_names() { return ""; }
  const char* file() const { return src->file; }
  int line() const { return src->line; }
};

/// A Function object around a typed callable R(Args...): unpacks and checks every argument.
template <typename TCallable, typename R, typename... Args>
class TypedFunctionObj : public FunctionObj {
 public:
  TypedFunctionObj(TCallable f, FunctionSource src)
      : callable_(std::move(f)), source_(std::move(src)) {
    safe_call = &SafeCall;
  }
  static int SafeCall(void* self, const KFFIAny* args, int32_t num_args, KFFIAny* result) {
    auto* obj = static_cast<TypedFunctionObj*>(static_cast<Object*>(self));
    return SafeCallWith(obj->callable_, SourceSite{&obj->source_}, args, num_args, result);
  }

  /// SafeCall through f (of the stored callable's type) with no object: site (StaticSite,
  /// SourceSite) gives the name, the parameter names and the source line, which only appear in
  /// errors. Exports pass the function itself, a compile-time constant, so the call is direct and
  /// can be inlined, and their StaticSite, so nothing is built before the first error.
  template <typename F, typename Site>
  KFFI_INLINE static int SafeCallWith(F& f, Site site, const KFFIAny* args, int32_t num_args,
                                      KFFIAny* result) {
    // Not noexcept: f may run foreign code, whose thread's forced unwind must leave through here
    // (KFFI_CATCH_ALL, kffi/base.h).
    try {
      if (KFFI_UNLIKELY(num_args != static_cast<int32_t>(sizeof...(Args)))) {
        FailCountAt(site, num_args);
      }
      CallDeviceRestore<F, Args...> device;
      EnterCallDevice<F, Args...>(args, &device, std::index_sequence_for<Args...>());
      InvokeUnpacked<R, Args...>(f, args, result, Named<Site>{site},
                                 std::index_sequence_for<Args...>());
      return 0;
    }
    KFFI_CATCH_ALL {
      SetRaisedLeaving(site.name(), site.file(), site.line());
      return -1;
    }
  }

  /// The error of argument index (-1: of the count, num_args passed; cause: a conversion's
  /// error), written by the runtime from the name, the parameter names and the types. Out of line
  /// so the call path stays small.
  [[noreturn]] KFFI_NOINLINE static void Fail(const char* name, const char* param_names,
                                              int32_t index, const Error* cause, const char* got,
                                              const KFFIAny* arg, int32_t num_args) {
    const TypeNames<R, Args...> types;
    ThrowCallArgumentError(name, param_names, types.arrays, sizeof...(Args), index, cause, got, arg,
                           num_args);
  }
  /// The error of a call with num_args arguments (out of line, with two arguments: the call path
  /// then passes nothing on the stack for it, which would cost it a frame).
  template <typename Site>
  [[noreturn]] KFFI_NOINLINE static void FailCountAt(Site site, int32_t num_args) {
    Fail(site.name(), site.param_names(), -1, nullptr, nullptr, nullptr, num_args);
  }
  [[noreturn]] void FailCount(int32_t num_args) const {
    FailCountAt(SourceSite{&source_}, num_args);
  }
  /// Names the function (through its Site) in argument errors (cold).
  template <typename Site>
  struct Named {
    Site site;
    [[noreturn]] void FailArgument(size_t i, const Error* cause, const char* got,
                                   const KFFIAny* arg) const {
      Fail(site.name(), site.param_names(), static_cast<int32_t>(i), cause, got, arg,
           static_cast<int32_t>(sizeof...(Args)));
    }
  };
  [[noreturn]] void FailArgument(size_t i, const Error* cause, const char* got,
                                 const KFFIAny* arg) const {
    Fail(source_.name.c_str(), "", static_cast<int32_t>(i), cause, got, arg,
         static_cast<int32_t>(sizeof...(Args)));
  }

 private:
  TCallable callable_;
  FunctionSource source_;
};

template <auto Fn, typename = decltype(Fn)>
struct NoDeviceGuardFn;
/// The callable kffi::NoDeviceGuard<Fn> names.
template <auto Fn, typename R, typename... Args>
struct NoDeviceGuardFn<Fn, R (*)(Args...)> {
  static constexpr bool kNoDeviceGuard = true;
  R operator()(Args... args) const { return Fn(std::forward<Args>(args)...); }
};

}  // namespace details

/// The function Fn, called without kffi's device guard. A typed function (KFFI_EXPORT,
/// KFFI_EXPORT_CONTRACT, Function::FromTyped) normally runs with the device of its first CUDA
/// tensor argument current (the caller's device is restored after it), so that a kernel launched
/// on the environment stream lands on the tensor's device. A function that picks devices itself
/// (one reading tensors on several GPUs, say) opts out:
///   KFFI_EXPORT(all_gather, kffi::NoDeviceGuard<AllGather>);
template <auto Fn>
inline constexpr details::NoDeviceGuardFn<Fn> NoDeviceGuard{};

/// A callable value that crosses the ABI: made from C++ callables (packed or typed), from a C
/// safe-call, or received from another library or language.
class Function : public ObjectRef {
 public:
  Function() = default;
  Function(std::nullptr_t) {}  // NOLINT(*-explicit-constructor)
  /// From a callable: packed if it takes (PackedArgs, Any*), otherwise typed.
  template <typename F,
            typename = std::enable_if_t<!std::is_base_of_v<ObjectRef, std::decay_t<F>> &&
                                        !details::IsObjectPtr<std::decay_t<F>>::value>>
  Function(F f, const char* file = __builtin_FILE(), int line = __builtin_LINE())  // NOLINT
      : Function(Make(std::move(f), "<lambda>", file, line)) {}
  KFFI_DEFINE_OBJECT_REF_METHODS(Function, ObjectRef, FunctionObj)

  /// A function from a packed callable void(PackedArgs args, Any* result).
  template <typename F>
  static Function FromPacked(F f, std::string name = "<packed>",
                             const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
    using Obj = details::PackedFunctionObj<std::decay_t<F>>;
    return Function(make_object<Obj>(std::move(f), details::FunctionSource{name, file, line}));
  }
  /// A function from a typed callable R(Args...): arguments are unpacked and checked, and a
  /// mismatch raises TypeError naming the argument, the expected and the received type.
  template <typename F>
  static Function FromTyped(F f, std::string name = "<lambda>", const char* file = __builtin_FILE(),
                            int line = __builtin_LINE()) {
    using Info = details::CallableInfo<std::decay_t<F>>;
    using Obj = typename Info::template TypedObj<std::decay_t<F>>;
    return Function(make_object<Obj>(std::move(f), details::FunctionSource{name, file, line}));
  }
  /// A function that calls a C safe-call with self (the ABI's KFFIFunctionCreate).
  static Function FromExternC(void* self, KFFISafeCallType safe_call,
                              void (*deleter)(void*) = nullptr) {
    KFFIObjectHandle h = nullptr;
    if (KFFIFunctionCreate(self, safe_call, deleter, &h) != 0) details::ThrowRaisedError(-1);
    return Function(details::ObjectUnsafe::FromOwnedHandle<FunctionObj>(h));
  }

  /// Calls with C++ values; the result is an Any (cast it: f(1, 2).cast<int>()).
  template <typename... Args>
  KFFI_INLINE Any operator()(Args&&... args) const {
    if constexpr ((details::IsRecord<std::decay_t<Args>>::value || ...)) {
      // A struct declared with KFFI_RECORD travels boxed; the boxes live through the call.
      return (*this)(details::BoxRecordArg(std::forward<Args>(args))...);
    } else {
      constexpr size_t kNum = sizeof...(Args);
      KFFIAny packed[kNum == 0 ? 1 : kNum];
      details::PackArgs(packed, std::forward<Args>(args)...);
      return CallPacked(packed, static_cast<int32_t>(kNum));
    }
  }
  /// Calls with already packed borrowed values.
  KFFI_INLINE Any CallPacked(const KFFIAny* args, int32_t num_args) const {
    Any rv;
    const FunctionObj* f = get();
    if (KFFI_UNLIKELY(f == nullptr)) details::ThrowNullFunction();
    int rc = f->safe_call(details::ObjectUnsafe::Header(f), args, num_args,
                          details::AnyUnsafe::RawMut(rv));
    if (KFFI_UNLIKELY(rc != 0)) details::ThrowRaisedError(rc);
    return rv;
  }
  Any CallPacked(PackedArgs args) const {
    return CallPacked(reinterpret_cast<const KFFIAny*>(args.data()), args.size());
  }

  /// The global function of that name, or nullopt.
  static std::optional<Function> GetGlobal(std::string_view name) {
    KFFIByteArray n = details::ToByteArray(name.data(), name.size());
    KFFIObjectHandle h = nullptr;
    if (KFFIFunctionGetGlobal(&n, &h) != 0) details::ThrowRaisedError(-1);
    if (h == nullptr) return std::nullopt;
    return Function(details::ObjectUnsafe::FromOwnedHandle<FunctionObj>(h));
  }
  /// The global function of that name; throws KeyError when there is none.
  static Function GetGlobalRequired(std::string_view name) {
    std::optional<Function> f = GetGlobal(name);
    if (!f.has_value()) {
      KFFI_THROW(KeyError) << "Global function `" << name << "` is not registered";
    }
    return std::move(*f);
  }
  /// Registers f under name; a taken name is a KeyError unless allow_override.
  static void SetGlobal(std::string_view name, const Function& f, bool allow_override = false) {
    KFFIByteArray n = details::ToByteArray(name.data(), name.size());
    if (KFFIFunctionSetGlobal(&n, details::ObjectUnsafe::GetHandle(details::ObjectRefData(f)),
                              allow_override ? 1 : 0) != 0) {
      details::ThrowRaisedError(-1);
    }
  }
  /// Removes a global; returns whether it existed.
  static bool RemoveGlobal(std::string_view name) {
    KFFIByteArray n = details::ToByteArray(name.data(), name.size());
    int removed = 0;
    if (KFFIFunctionRemoveGlobal(&n, &removed) != 0) details::ThrowRaisedError(-1);
    return removed != 0;
  }
  /// All global names, sorted, in a container of strings the caller names
  /// (`Function::ListGlobalNames<std::vector<std::string>>()`): a template, so that this header
  /// does not cost every kernel the compile time of `<vector>`.
  template <typename Container>
  static Container ListGlobalNames() {
    Container out;
    auto visit = [](void* ctx, const KFFIByteArray* name) -> int {
      static_cast<Container*>(ctx)->emplace_back(name->data, name->size);
      return 0;
    };
    if (KFFIFunctionListGlobalNames(visit, &out) != 0) details::ThrowRaisedError(-1);
    return out;
  }

 private:
  template <typename F>
  static Function Make(F f, const char* name, const char* file, int line) {
    if constexpr (std::is_invocable_v<F&, PackedArgs, Any*>) {
      return FromPacked(std::move(f), name, file, line);
    } else {
      return FromTyped(std::move(f), name, file, line);
    }
  }
};

template <>
struct TypeTraits<Function> {
  static constexpr bool convert_enabled = true;
  static void CopyToAnyView(const Function& v, KFFIAny* r) {
    TypeTraits<ObjectRef>::CopyToAnyView(v, r);
  }
  static void MoveToAny(Function v, KFFIAny* r) {
    TypeTraits<ObjectRef>::MoveToAny(std::move(v), r);
  }
  /// ffi.Function or a registered subtype (the C API calls those too).
  static bool CheckAnyStrict(const KFFIAny* s) {
    return s->type_index == kKFFIFunction ||
           (s->type_index >= kKFFIDynObjectBegin &&
            static_cast<const Object*>(static_cast<const void*>(s->v_obj))
                ->IsInstance<FunctionObj>());
  }
  static Function CopyFromAnyViewAfterCheck(const KFFIAny* s) {
    return Function(details::ObjectUnsafe::FromBorrowedHandle<FunctionObj>(s->v_obj));
  }
  static std::optional<Function> TryCastFromAnyView(const KFFIAny* s) {
    if (CheckAnyStrict(s)) return CopyFromAnyViewAfterCheck(s);
    if (s->type_index == kKFFINone) return Function();
    return std::nullopt;
  }
  static std::string TypeStr() { return "Function"; }
};

/// A Function with a known C++ signature: calls convert the result to R.
template <typename FType>
class TypedFunction;

template <typename R, typename... Args>
class TypedFunction<R(Args...)> {
 public:
  TypedFunction() = default;
  TypedFunction(std::nullptr_t) {}  // NOLINT(*-explicit-constructor)
  /// Wraps an existing function (its argument checks apply at call time).
  TypedFunction(Function f) : f_(std::move(f)) {}  // NOLINT(*-explicit-constructor)
  /// From a C++ callable taking Args... and returning R.
  template <typename F, typename = std::enable_if_t<std::is_invocable_r_v<R, F&, Args...> &&
                                                    !std::is_same_v<std::decay_t<F>, Function>>>
  TypedFunction(F f, std::string name = "<lambda>",  // NOLINT(*-explicit-constructor)
                const char* file = __builtin_FILE(), int line = __builtin_LINE())
      : f_(Function::FromTyped(
            // mutable: F may be a mutable lambda, whose call operator is not const.
            [g = std::move(f)](Args... args) mutable -> R {
              return g(std::forward<Args>(args)...);
            },
            std::move(name), file, line)) {}

  R operator()(Args... args) const {
    if constexpr (std::is_void_v<R>) {
      f_(std::forward<Args>(args)...);
    } else {
      return f_(std::forward<Args>(args)...).template cast<R>();
    }
  }
  operator Function() const { return f_; }  // NOLINT(*-explicit-constructor)
  const Function& packed() const { return f_; }
  bool defined() const { return f_.defined(); }

 private:
  Function f_;
};

template <typename R, typename... Args>
struct TypeTraits<TypedFunction<R(Args...)>> {
  static constexpr bool convert_enabled = true;
  static void CopyToAnyView(const TypedFunction<R(Args...)>& v, KFFIAny* r) {
    TypeTraits<Function>::CopyToAnyView(v.packed(), r);
  }
  static void MoveToAny(TypedFunction<R(Args...)> v, KFFIAny* r) {
    TypeTraits<Function>::MoveToAny(v.packed(), r);
  }
  static bool CheckAnyStrict(const KFFIAny* s) { return TypeTraits<Function>::CheckAnyStrict(s); }
  static TypedFunction<R(Args...)> CopyFromAnyViewAfterCheck(const KFFIAny* s) {
    return TypedFunction<R(Args...)>(TypeTraits<Function>::CopyFromAnyViewAfterCheck(s));
  }
  static std::optional<TypedFunction<R(Args...)>> TryCastFromAnyView(const KFFIAny* s) {
    if (CheckAnyStrict(s)) return CopyFromAnyViewAfterCheck(s);
    return std::nullopt;
  }
  static std::string TypeStr() { return details::Signature<R, Args...>::Str("Callable"); }
};

/// Registers global functions in a chain: kffi::GlobalDef().def("ns.name", fn).def(...).
class GlobalDef {
 public:
  template <typename F>
  GlobalDef& def(const char* name, F f, const char* file = __builtin_FILE(),
                 int line = __builtin_LINE()) {
    if constexpr (std::is_base_of_v<ObjectRef, std::decay_t<F>>) {
      Function::SetGlobal(name, f);
    } else if constexpr (std::is_invocable_v<F&, PackedArgs, Any*>) {
      Function::SetGlobal(name, Function::FromPacked(std::move(f), name, file, line));
    } else {
      Function::SetGlobal(name, Function::FromTyped(std::move(f), name, file, line));
    }
    return *this;
  }
};

}  // namespace kffi

/// Code that runs once when the library is loaded (static initialisation), e.g. to register
/// globals: KFFI_STATIC_INIT_BLOCK() { kffi::GlobalDef().def("ns.f", f); }
#define KFFI_STATIC_INIT_BLOCK() KFFI_STATIC_INIT_BLOCK_(__COUNTER__)
#define KFFI_STATIC_INIT_BLOCK_(id)                                                        \
  static void KFFI_STR_CONCAT(kffi_static_init_fn_, id)();                                 \
  [[maybe_unused]] static const int KFFI_STR_CONCAT(kffi_static_init_var_, id) =           \
      ::kffi::details::RunStaticInit(&KFFI_STR_CONCAT(kffi_static_init_fn_, id), __FILE__, \
                                     __LINE__);                                            \
  static void KFFI_STR_CONCAT(kffi_static_init_fn_, id)()

#endif  // KFFI_FUNCTION_H_
