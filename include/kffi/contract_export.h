// include/kffi/contract_export.h: KFFI_EXPORT_CONTRACT: a kernel library's export with a contract.
//
// All that a kernel which exports with contracts includes: the export macros, and the check that
// runs inline before the function on every call. The grammar, the order of the checks and the
// message catalogue are at the top of <kffi/contract.h>, which includes this header and adds
// contracts as C++ objects for host code (kffi::Contract, FunctionWithContract); leaving those
// out keeps a kernel's build shorter.
//
//   void Scale(kffi::TensorView y, kffi::ConstTensorView x, double factor);
//   KFFI_EXPORT_CONTRACT(scale, Scale, "y: Tensor([n], float32, mut), x: Tensor([n], float32), "
//                                      "factor: float");
// SPDX-License-Identifier: Apache-2.0
#ifndef KFFI_CONTRACT_EXPORT_H_
#define KFFI_CONTRACT_EXPORT_H_

#include <kffi/contract/details.h>
#include <kffi/export.h>

#include <cstring>
#include <string>
#include <type_traits>
#include <utility>

namespace kffi {
namespace details {
namespace contract {

/// Whether a C++ parameter of type T takes, as it is, every value that a contract lets through
/// for it: a TensorView or ConstTensorView (its contract type can only be a tensor, which the
/// check passes as a DLTensor* or a Tensor object, both theirs; a TensorView only for a `mut`
/// tensor, which the check refuses read-only: CheckCppSignature holds the two to that) and a
/// void* (an EnvStream or Stream parameter, an opaque pointer once ExpandArgs wrote the
/// function's arguments). Functions whose parameters all are need no conversion code for the
/// call.
template <typename T>
constexpr bool kTakesCheckedAsIs =
    std::is_same_v<std::remove_cv_t<std::remove_reference_t<T>>, TensorView> ||
    std::is_same_v<std::remove_cv_t<std::remove_reference_t<T>>, ConstTensorView> ||
    std::is_same_v<std::remove_cv_t<std::remove_reference_t<T>>, void*>;

/// Whether T only reads its tensor and takes read-only memory (ConstTensorView, const
/// DLTensor*): the contract check hears these as "Tensor(const)", so a `mut` contract tensor on
/// one is refused, as a TensorView without `mut` is. Signatures still say "Tensor".
template <typename T>
constexpr bool kReadsTensorOnly =
    std::is_same_v<std::remove_cv_t<std::remove_reference_t<T>>, ConstTensorView> ||
    std::is_same_v<std::remove_cv_t<std::remove_reference_t<T>>, const DLTensor*>;

/// A parameter type's name for the contract check (KFFIContractExportCreate and
/// KFFIContractCheckSignature): TypeStrOf<T>(), but "Tensor(const)" for kReadsTensorOnly<T>.
template <typename T>
std::string ContractTypeStrOf() {
  if constexpr (kReadsTensorOnly<T>) {
    return "Tensor(const)";
  } else {
    return TypeStrOf<T>();
  }
}

/// The name ContractTypeStrOf<T>() gives a kTakesCheckedAsIs<T> parameter type, as a constant.
template <typename T>
constexpr KFFIByteArray AsIsTypeName() {
  using U = std::remove_cv_t<std::remove_reference_t<T>>;
  if constexpr (std::is_same_v<U, TensorView>) {
    return KFFIByteArray{"Tensor(mut)", 11};
  } else if constexpr (std::is_same_v<U, ConstTensorView>) {
    return KFFIByteArray{"Tensor(const)", 13};
  } else {
    return KFFIByteArray{"void*", 5};
  }
}

/// The value of a checked argument for a parameter of type T (kTakesCheckedAsIs<T>).
template <typename T>
KFFI_INLINE std::remove_cv_t<std::remove_reference_t<T>> Unchecked(const KFFIAny* v) {
  return TypeTraits<std::remove_cv_t<std::remove_reference_t<T>>>::CopyFromAnyViewAfterCheck(v);
}

/// The name of call parameter i of a compiled contract (argN when it has no such parameter).
inline std::string ParamNameOf(const ObjectPtr<Object>& contract, size_t i) {
  KFFIByteArray out{nullptr, 0};
  if (KFFIContractGetText(ObjectUnsafe::GetHandle(contract), kKFFIContractTextParamName,
                          static_cast<int32_t>(i), &out) != 0) {
    KFFIObjectHandle ignored = nullptr;
    KFFIErrorMoveFromRaised(&ignored);
    KFFIObjectDecRef(ignored);
    return DefaultParamName(i);
  }
  return std::string(out.data, out.size);
}

/// Calls f with arguments whose contract check passed: as they are when every parameter takes its
/// argument unconverted (then no conversion path is compiled), else through InvokeUnpacked (obj
/// names the function in the error of a conversion the contract let through).
template <typename R, typename... Args, typename F, typename Obj, size_t... I>
KFFI_INLINE void InvokeChecked(F& f, const KFFIAny* args, KFFIAny* result, Obj obj,
                               std::index_sequence<I...> seq) {
  if constexpr ((kTakesCheckedAsIs<Args> && ...)) {
    (void)seq;
    (void)obj;
    if constexpr (std::is_void_v<R>) {
      f(Unchecked<Args>(&args[I])...);
    } else {
      TypeTraitsNoCR<R>::MoveToAny(f(Unchecked<Args>(&args[I])...), result);
    }
  } else {
    InvokeUnpacked<R, Args...>(f, args, result, obj, seq);
  }
}

}  // namespace contract

/// What KFFI_EXPORT_CONTRACT keeps for one export, built at load time: the function and its
/// compiled contract, or the error that a malformed contract made (the runtime reports it to the
/// module loader, which fails the load; every call and the metadata query raise it). Everything
/// but the call's inline check goes through the C API: the runtime compiles the contract, checks
/// it against the C++ parameters, explains failed checks and writes the metadata, so that a kernel
/// compiles no message, no Error and no contract code of its own.
template <typename F>
class ContractExport;
template <typename F, typename R, typename... Args>
class ContractExport<TypedFunctionObj<F, R, Args...>> {
 public:
  ContractExport(F f, const char* name, const char* text, const char* doc, const char* file,
                 int line) noexcept
      : fn_(std::move(f)), name_(name), doc_(doc), file_(file), line_(line) {
    Create(text);
  }
  /// kRanks: the uniform ranks FastRun compiles (contract::RanksIn of the contract text). Not
  /// noexcept: fn may run foreign code, whose thread's forced unwind must leave through here
  /// (KFFI_CATCH_ALL, kffi/base.h).
  template <unsigned kRanks = contract::kAllRanks>
  KFFI_INLINE int Call(const KFFIAny* args, int32_t num_args, KFFIAny* result) {
    const contract::PlanLayout* plan = plan_;
    if (KFFI_UNLIKELY(plan == nullptr)) return RaiseStored();
    contract::RunState st;
    if (KFFI_UNLIKELY(!contract::FastRun<kRanks>(*plan, args, num_args, &st))) {
      return RaiseCheckFailure(args, num_args);
    }
    try {
      CallDeviceRestore<F, Args...> device;
      if (KFFI_LIKELY(!plan->needs_expand)) {
        EnterCallDevice<F, Args...>(args, &device, std::index_sequence_for<Args...>());
        Invoke(args, result, std::index_sequence_for<Args...>());
      } else {
        KFFIAny full[sizeof...(Args) == 0 ? 1 : sizeof...(Args)];
        if (KFFIContractExpandArgs(contract_, st.frames, 0, full) != 0) {
          return RaisedLeaving(name_, file_, line_);
        }
        EnterCallDevice<F, Args...>(full, &device, std::index_sequence_for<Args...>());
        Invoke(full, result, std::index_sequence_for<Args...>());
      }
      return 0;
    }
    KFFI_CATCH_ALL {
      SetRaisedLeaving(name_, file_, line_);
      return -1;
    }
  }
  /// The metadata, written by the runtime from the compiled contract.
  int Metadata(KFFIAny* result) noexcept {
    if (plan_ == nullptr) return RaiseStored();
    const KFFIByteArray d = ToByteArray(doc_, std::strlen(doc_));
    if constexpr (std::is_void_v<R>) {
      const KFFIByteArray r{"None", 4};
      return KFFIContractGetMetadata(contract_, &r, &d, result);
    } else {
      try {
        const std::string ret = TypeStrOf<R>();
        KFFIByteArray r = ToByteArray(ret.data(), ret.size());
        return KFFIContractGetMetadata(contract_, &r, &d, result);
      } catch (...) {  // in a noexcept function that runs no foreign code
        SetRaisedFromCurrentException();
        return -1;
      }
    }
  }
  /// For the (unexpected) case that the C++ parameter cannot take a value the contract let pass.
  std::string SignatureStr() const {
    KFFIByteArray out{nullptr, 0};
    if (KFFIContractGetText(contract_, kKFFIContractTextSignature, 0, &out) != 0) {
      ThrowRaisedError(-1);
    }
    return std::string(out.data, out.size);
  }
  std::string ParamNameAt(size_t i) const {
    return contract::ParamNameOf(ObjectUnsafe::FromBorrowedHandle<Object>(contract_), i);
  }
  [[noreturn]] void FailArgument(size_t i, const Error* cause, const char* got,
                                 const KFFIAny* arg) const {
    FailContractArgument<Args...>(*this, i, cause, got, arg);
  }

 private:
  KFFI_NOINLINE void Create(const char* text) noexcept {
#if defined(__GNUC__) && !defined(_WIN32) && !defined(KFFI_BUILDING_RUNTIME)
    if (&KFFIContractExportCreate == nullptr) {
      KFFIErrorSetRaisedFromCStr("RuntimeError",
                                 "Cannot compile a contract: the kffi runtime in this process is "
                                 "older than this library's headers (no KFFIContractExportCreate)");
      KFFIErrorMoveFromRaised(&error_);
      return;
    }
#endif
    if constexpr ((contract::kTakesCheckedAsIs<Args> && ...)) {
      // Their names are constants: no string is built.
      const KFFIByteArray types[sizeof...(Args) + 1] = {contract::AsIsTypeName<Args>()..., {"", 0}};
      CreateWith(text, types);
    } else {
      try {
        const std::string types[sizeof...(Args) + 1] = {contract::ContractTypeStrOf<Args>()..., ""};
        KFFIByteArray arrays[sizeof...(Args) + 1];
        for (size_t i = 0; i < sizeof...(Args); ++i) {
          arrays[i] = ToByteArray(types[i].data(), types[i].size());
        }
        CreateWith(text, arrays);
      } catch (...) {  // in a noexcept function that runs no foreign code
        SetRaisedFromCurrentException();
        KFFIErrorMoveFromRaised(&error_);
      }
    }
  }
  /// Compiles the contract for parameters of these type names (as TypeStrOf spells them).
  void CreateWith(const char* text, const KFFIByteArray* types) noexcept {
    KFFIByteArray n = ToByteArray(name_, std::strlen(name_));
    KFFIByteArray t = ToByteArray(text, std::strlen(text));
    if (KFFIContractExportCreate(&n, &t, types, static_cast<int32_t>(sizeof...(Args)),
                                 contract::kPlanLayoutVersion, &contract_) == 0) {
      plan_ = static_cast<const contract::PlanLayout*>(KFFIContractGetPlan(contract_));
      if (plan_ != nullptr) return;
    }
    KFFIErrorMoveFromRaised(&error_);
  }
  template <size_t... I>
  KFFI_INLINE void Invoke(const KFFIAny* args, KFFIAny* result, std::index_sequence<I...> seq) {
    contract::InvokeChecked<R, Args...>(fn_, args, result, this, seq);
  }
  /// A failed inline check: the runtime explains it (raises the catalogue's error).
  KFFI_NOINLINE int RaiseCheckFailure(const KFFIAny* args, int32_t num_args) noexcept {
    KFFIContractExplain(contract_, args, num_args, nullptr, nullptr);
    return RaisedLeaving(name_, file_, line_);
  }
  /// Raises a fresh copy of the load-time error (each raise gets its own backtrace).
  KFFI_NOINLINE int RaiseStored() noexcept {
    if (error_ != nullptr) {
      const KFFIErrorCell* cell = KFFIErrorGetCellPtr(error_);
      const KFFIByteArray no_frames{"", 0};
      KFFIObjectHandle copy = nullptr;
      if (KFFIErrorCreate(&cell->kind, &cell->message, &no_frames, &copy) == 0) {
        KFFIErrorSetRaised(copy);
        KFFIObjectDecRef(copy);
      }
    }
    return RaisedLeaving(name_, file_, line_);
  }

  F fn_;
  const char* name_;
  const char* doc_;
  const char* file_;
  int line_;
  const contract::PlanLayout* plan_ = nullptr;  // contract_'s; null when the contract failed
  KFFIObjectHandle contract_ = nullptr;         // never released: the library is never unloaded
  KFFIObjectHandle error_ = nullptr;            // the load-time error when plan_ is null
};

/// The uniform ranks an export's FastRun compiles, from its contract text (Text::get<>()); a
/// name without `contract` in it, which is a parameter of the macros below.
template <typename Text>
constexpr unsigned kContractRanksOf = contract::RanksOf<Text>::value;

/// Never freed, like the objects of KFFI_EXPORT (no exit-time destructor racing a call).
template <typename F>
ContractExport<ExportedObj<F>>* MakeContractExport(F f, const char* name, const char* text,
                                                   const char* doc, const char* file, int line) {
  return new ContractExport<ExportedObj<F>>(std::move(f), name, text, doc, file, line);
}

}  // namespace details
}  // namespace kffi

/// Exports fn like KFFI_EXPORT (<kffi/export.h>), with a contract: a declared signature whose check
/// plan runs before fn on every call (grammar and semantics at the top of this file). The text is
/// parsed when the library is loaded; a malformed contract (or one that does not fit fn's C++
/// parameters) makes Module::Load fail with ValueError "Cannot load module `path`: Invalid
/// contract for `name` at column N: ..." (and, where the library was opened some other way,
/// every call and the metadata query raise it). The metadata gets "contract", the parameters of
/// the contract with their structured fields, "outputs", "symbols", "env_stream" and "mutates".
///   void Scale(kffi::TensorView y, kffi::ConstTensorView x, double factor);
///   KFFI_EXPORT_CONTRACT(scale, Scale,
///                        "y: Tensor([n], float32, mut), x: Tensor([n], float32), factor: float");
#define KFFI_EXPORT_CONTRACT(name, fn, contract) KFFI_EXPORT_CONTRACT_DOC(name, fn, contract, "")

/// KFFI_EXPORT_CONTRACT with a docstring for the metadata.
#define KFFI_EXPORT_CONTRACT_DOC(name, fn, contract, doc) \
  KFFI_EXPORT_APPLY_(KFFI_EXPORT_CONTRACT_DOC_, KFFI_EXPORT_NAME_(name), fn, contract, doc)
#define KFFI_EXPORT_CONTRACT_DOC_(name, fn, contract, doc)                                         \
  static_assert(#name[0] != '_', "KFFI_EXPORT_CONTRACT: names starting with '_' are reserved");    \
  KFFI_ABI_VERSION_RECORD_(name);                                                                  \
  static auto kffi_export_fn_##name() { return fn; }                                               \
  /* The text, for the ranks FastRun compiles (a constant only when contract is a literal). */     \
  struct kffi_contract_text_##name {                                                               \
    template <int = 0>                                                                             \
    static constexpr const char* get() {                                                           \
      return contract;                                                                             \
    }                                                                                              \
  };                                                                                               \
  static auto* kffi_contract_export_##name() {                                                     \
    static auto* const state = ::kffi::details::MakeContractExport(                                \
        kffi_export_fn_##name(), #name, contract, doc, __FILE__, __LINE__);                        \
    return state;                                                                                  \
  }                                                                                                \
  /* Parsed at load time (static initialisation), not at the first call. */                        \
  [[maybe_unused]] static auto* const kffi_contract_loaded_##name = kffi_contract_export_##name(); \
  extern "C" KFFI_DLL_EXPORT int __kffi_##name(void*, const KFFIAny* args, int32_t num_args,       \
                                               KFFIAny* result) {                                  \
    return kffi_contract_export_##name()                                                           \
        ->Call<::kffi::details::kContractRanksOf<kffi_contract_text_##name>>(args, num_args,       \
                                                                             result);              \
  }                                                                                                \
  extern "C" KFFI_DLL_EXPORT int __kffi__meta_##name(void*, const KFFIAny*, int32_t,               \
                                                     KFFIAny* result) {                            \
    return kffi_contract_export_##name()->Metadata(result);                                        \
  }                                                                                                \
  KFFI_SYSTEM_LIB_AUTO_REGISTER_(name)

#endif  // KFFI_CONTRACT_EXPORT_H_