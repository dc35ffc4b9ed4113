// include/kffi/contract.h: contracts: a declared signature whose check plan runs before a function.
//
// A contract says what a function accepts, in text (the grammar follows):
//   "x: Tensor([n, m], float16|bfloat16, device=cuda, align=16, contiguous),
//    y: Tensor([n, m], float32, mut), scale: float[0.0, 1.0], stream: EnvStream
//    -> Tensor([n * 2, m], float32); n: int32 % 16"
// It is parsed once into a flat plan of small checks with precomputed expectations; each call runs
// the plan before the function (a few compares per tensor, no allocation, no strings) and a failed
// check raises the first problem, in this order: the argument count (TypeError), then for each
// argument: type (TypeError), writability (`mut`), alignment, device index, ndim, device type,
// dtype, byte_offset, dims, layout, strides (ValueError). A symbol (n, m) is bound by its first
// occurrence, which checks its width and divisibility; later occurrences must match. All tensors
// share one device index. `stride_order=(...)` lists the dimensions from outermost to innermost,
// compact: `contiguous`/`row_major` is (0, 1, ..., N-1) and `col_major` is (N-1, ..., 0); NULL
// strides are compact row-major. `mut` marks a tensor the function writes: an argument whose
// tensor_flags say read-only (kKFFITensorFlagReadOnly) is refused. EnvStream is no call argument:
// the function receives KFFIEnvGetStream of the first non-CPU tensor's device (or the first
// tensor's) as a void*. Stream is an explicit stream argument: the function receives a void*
// from an opaque pointer, an int (a raw handle) or None (NULL, the default stream). Outputs are
// declared for framework integration (Contract::OutputShapes, the metadata's "outputs").
//
// The grammar (whitespace is free; commas inside brackets and parentheses never split):
//   contract := [param {"," param}] ["->" output {"," output}] [";" symbol {"," symbol}]
//   param    := NAME ":" type
//   type     := "Tensor" "(" "[" [dim {"," dim}] "]" "," dtypes {"," option} ")"
//             | scalar ["[" number "," number "]"]        (an inclusive range, finite)
//             | "Optional" "[" type "]" | "Tuple" "[" type {"," type} "]"
//             | "Stream" | "EnvStream" | record
//   record   := NAME {"." NAME} ["{" [field {"," field}] "}"]   (a type key: an object type with
//                                                                fields, or a KFFI_RECORD struct)
//   field    := NAME ":" scalar ["[" number "," number "]"]   (fields left out: unchecked)
//   scalar   := "int" | "int32" | "int64" | "float" | "float32" | "float64" | "bool"
//   dim      := INT | NAME                                 (a literal or a symbol)
//   dtypes   := "*" | DTYPE {"|" DTYPE}                    (standard names: float32, int8x4, ...)
//   option   := "device" "=" DEVICE {"|" DEVICE} | "align" "=" INT | "offset0" | "contiguous"
//             | "row_major" | "col_major" | "stride_order" "=" "(" INT {"," INT} ")"
//             | "strides" "=" "[" dim {"," dim} "]" | "mut"
//   output   := [NAME ":"] "Tensor" "(" "[" [expr {"," expr}] "]" "," dtypes {"," option} ")"
//   expr     := integer expression of INT and NAME with + - * // % unary - and parentheses
//   symbol   := NAME [":" ("int32" | "int64")] ["%" INT] ["parallel"]
// `parallel` declares that the function computes each index along every dimension of that size
// independently (rows of a normalisation, a batch): no check, a fact that frameworks read from the
// metadata ("parallel": true) to split the work across devices (kffi.jax) or fold a vmap into it.
// `mut` is not allowed on outputs or inside a Tuple (stored tuple elements carry no read-only
// flag). Limits (contract/plan.h): the text is at most 64 KiB, Optional/Tuple nest at most 16 deep,
// parentheses and unary minus at most 32, a tensor has at most 32 dimensions, a contract at most
// 64 symbols.
//
// Where it runs: the runtime (libkffi) parses and plans a contract once, when the library loads
// (KFFIContractCreate), writes its metadata and explains failed checks; the kernel runs the plan
// inline on every call (contract/details.h, in the layout of contract/plan.h). The export macros
// are in <kffi/contract_export.h>, which this header includes: a kernel that only exports needs
// that one alone, and builds quicker without the C++ objects below (kffi::Contract,
// FunctionWithContract).
//
// The message catalogue (the parameter first, then what was expected and what was received, then
// the signature once; `k` is the argument's position, a tuple element says "in argument #k"):
//   count        TypeError   f: expected 2 arguments, got 1 (`f(a: ..., b: ...)`)
//   type         TypeError   b: expected Tensor, got int (argument #1 of `SIG`)
//                            x: expected Tuple of 3 elements, got Array of 2 elements (...)
//                            x[1]: expected Tensor, got int (in argument #0 of `SIG`)
//   writable     ValueError  y: expected a writable tensor (the parameter is declared `mut`),
//                            got a read-only tensor (argument #0 of `SIG`)
//   alignment    ValueError  a: expected data aligned to 16 bytes, got data aligned to 4
//                            bytes (...)
//   device index ValueError  b.device.index: expected 0 (as a.device.index), got 1 (...)
//   ndim         ValueError  x.ndim: expected 2, got 3 (...)
//   device type  ValueError  x.device: expected cuda, got cpu (...)
//   dtype        ValueError  x.dtype: expected float16|bfloat16, got float32 (...)
//   byte_offset  ValueError  x.byte_offset: expected 0, got 64 (...)
//   literal dim  ValueError  x.shape[0]: expected 2, got 3 (...)
//   width        ValueError  a.shape[0]: expected n in int32 range [-2147483648, 2147483647],
//                            got 4294967296 (...)
//   divisibility ValueError  a.shape[0]: expected n divisible by 16, got 126 (...)
//   match        ValueError  b.shape[0]: expected n = 128 (as a.shape[0]), got 126 (...)
//   layout       ValueError  x.strides: expected contiguous, got [8, 1] for shape [4, 3] (...)
//   strides      ValueError  y.strides[0]: expected s = 8 (as x.strides[0]), got 16 (...)
//   range        ValueError  k: expected a value in range [0, 1024], got 2000 (...)
//                            cfg.alpha: expected a value in range [0, 1], got 1.5 (...)
// A record's fields are read through the type's getters by the runtime (its check is never
// inline); a field the type lacks, or a scalar kind other than its C++ type's, fails the load
// (or, for a type registered after the export, the first call that passes a record).
// A conflict (match, device index) names both sides with their values. It names first the side
// the function writes when only one of them is `mut` (out: Tensor([n], float32, mut) given the
// wrong size is blamed, not the input it disagrees with), else the later one.
//
//   void Scale(kffi::TensorView y, kffi::ConstTensorView x, double factor);
//   KFFI_EXPORT_CONTRACT(scale, Scale, "y: Tensor([n], float32, mut), x: Tensor([n], float32), "
//                                      "factor: float");
// SPDX-License-Identifier: Apache-2.0
#ifndef KFFI_CONTRACT_H_
#define KFFI_CONTRACT_H_

#include <kffi/contract_export.h>
#include <kffi/function.h>

#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kffi {

namespace details {
namespace contract {

/// A compiled contract: parsed and planned by the runtime (KFFIContractCreate), which keeps it
/// until *out is released. Throws the runtime's error (ValueError for a malformed contract).
inline ObjectPtr<Object> Compile(std::string_view name, std::string_view text) {
#if defined(__GNUC__) && !defined(_WIN32) && !defined(KFFI_BUILDING_RUNTIME)
  if (&KFFIContractCreate == nullptr) {
    throw Error("RuntimeError", "Cannot compile the contract of `" + std::string(name) +
                                    "`: the kffi runtime in this process is older than 0.3 and "
                                    "has no contract compiler (KFFIContractCreate)");
  }
#endif
  KFFIByteArray n = ToByteArray(name.data(), name.size());
  KFFIByteArray t = ToByteArray(text.data(), text.size());
  KFFIObjectHandle h = nullptr;
  if (KFFIContractCreate(&n, &t, kPlanLayoutVersion, &h) != 0) ThrowRaisedError(-1);
  return ObjectUnsafe::FromOwnedHandle<Object>(h);
}

/// The plan of a compiled contract.
inline const PlanLayout* PlanOf(const ObjectPtr<Object>& contract) {
  const void* p = KFFIContractGetPlan(ObjectUnsafe::GetHandle(contract));
  if (p == nullptr) ThrowRaisedError(-1);
  return static_cast<const PlanLayout*>(p);
}

/// A text of a compiled contract (kKFFIContractText*).
inline std::string TextOf(const ObjectPtr<Object>& contract, int32_t what, int32_t index = 0) {
  KFFIByteArray out{nullptr, 0};
  if (KFFIContractGetText(ObjectUnsafe::GetHandle(contract), what, index, &out) != 0) {
    ThrowRaisedError(-1);
  }
  return std::string(out.data, out.size);
}

/// EnterCallDevice (kffi/details/function.h) for arguments of unknown parameter types (a packed
/// function behind a contract): the device of the first CUDA tensor among all of them.
inline void EnterArgsDevice(const KFFIAny* args, int32_t num_args, DeviceRestore* r) {
  for (int32_t i = 0; i < num_args; ++i) {
    const DLTensor* t = TensorValuePtr(&args[i]);
    if (t != nullptr && t->device.device_type == kDLCUDA) {
      EnterCudaDevice(t, r);
      return;
    }
  }
}

/// Moves a str the runtime returned into a std::string.
inline std::string TakeString(KFFIAny* s) {
  String str(String::FromOwnedAny(*s));
  return std::string(str.view());
}

}  // namespace contract
}  // namespace details

/// The values of a contract's symbols, bound by a check (Contract::Check) or given
/// (Contract::Bind); read them, or evaluate output shapes from them.
class ContractBindings {
 public:
  /// The symbol's value, or nullopt when it is unbound (e.g. only in a None optional tensor).
  std::optional<int64_t> Get(std::string_view symbol) const {
    int32_t slot = SlotOf(symbol);
    if (slot < 0 || ((bound_ >> slot) & 1) == 0) return std::nullopt;
    return values_[static_cast<size_t>(slot)];
  }
  /// Sets a symbol; a name the contract does not bind is a KeyError.
  void Set(std::string_view symbol, int64_t value) {
    int32_t slot = SlotOf(symbol);
    if (slot < 0) {
      KFFI_THROW(KeyError) << "The contract of `"
                           << details::contract::TextOf(contract_, kKFFIContractTextName)
                           << "` has no symbol `" << symbol << "`";
    }
    values_[static_cast<size_t>(slot)] = value;
    bound_ |= UINT64_C(1) << slot;
  }

 private:
  friend class Contract;
  ContractBindings(ObjectPtr<Object> contract, size_t num_symbols)
      : contract_(std::move(contract)), values_(num_symbols, 0) {}
  int32_t SlotOf(std::string_view symbol) const {
    KFFIByteArray s = details::ToByteArray(symbol.data(), symbol.size());
    int32_t slot = -1;
    if (KFFIContractFindSymbol(details::ObjectUnsafe::GetHandle(contract_), &s, &slot) != 0) {
      details::ThrowRaisedError(-1);
    }
    return slot;
  }
  ObjectPtr<Object> contract_;
  std::vector<int64_t> values_;
  uint64_t bound_ = 0;
};

/// A parsed contract: its signature, its check plan and its outputs. Cheap to copy (shared).
class Contract {
 public:
  /// Parses text for the function `name`; a malformed contract is a ValueError:
  /// "Invalid contract for `scale` at column 17: expected `]`" (then the text and a caret).
  static Contract Parse(std::string_view name, std::string_view text) {
    return Contract(details::contract::Compile(name, text));
  }

  std::string name() const { return Text(kKFFIContractTextName); }
  std::string text() const { return Text(kKFFIContractTextSource); }
  /// The call signature as messages show it: `name(a: Tensor([n], float32), s: int32)`.
  std::string signature() const { return Text(kKFFIContractTextSignature); }
  /// Number of call arguments (EnvStream parameters are not arguments).
  int32_t num_args() const { return plan_->num_args; }
  /// Names and types (as written) of the call parameters.
  std::vector<std::pair<std::string, std::string>> params() const {
    std::vector<std::pair<std::string, std::string>> out;
    for (int32_t i = 0; i < plan_->num_args; ++i) {
      out.emplace_back(Text(kKFFIContractTextParamName, i), Text(kKFFIContractTextParamType, i));
    }
    return out;
  }
  size_t num_outputs() const { return static_cast<size_t>(plan_->num_outputs); }

  /// Checks packed arguments (borrowed) as a call would; throws the first failure, else returns
  /// the symbols' values.
  ContractBindings Check(const KFFIAny* args, int32_t num_args) const {
    details::contract::RunState st;
    details::contract::Run(*plan_, args, num_args, &st);
    ContractBindings out(obj_, static_cast<size_t>(plan_->num_symbols));
    const uint64_t bound = st.bound | plan_->static_bound;
    for (size_t i = 0; i < out.values_.size(); ++i) {
      if ((bound >> i) & 1) out.values_[i] = st.values[i];
    }
    out.bound_ = bound;
    return out;
  }
  /// Check with C++ values (passed as borrowed views).
  template <typename... Args>
  ContractBindings CheckArgs(const Args&... args) const {
    const AnyView views[sizeof...(Args) == 0 ? 1 : sizeof...(Args)] = {AnyView(args)...};
    return Check(reinterpret_cast<const KFFIAny*>(views), static_cast<int32_t>(sizeof...(Args)));
  }
  /// Bindings given by hand: Bind({{"n", 4}, {"m", 8}}).
  ContractBindings Bind(std::initializer_list<std::pair<std::string_view, int64_t>> values) const {
    ContractBindings out(obj_, static_cast<size_t>(plan_->num_symbols));
    for (const auto& kv : values) out.Set(kv.first, kv.second);
    return out;
  }

  /// The shape of output i from the symbols; ValueError for an unbound symbol, a division by
  /// zero or an int64 overflow (IndexError for an output that does not exist).
  std::vector<int64_t> OutputShape(size_t i, const ContractBindings& b) const {
    int64_t dims[details::contract::kMaxNdim];
    int32_t ndim = 0;
    if (KFFIContractGetOutputShape(Handle(), static_cast<int64_t>(i), b.values_.data(), b.bound_,
                                   dims, &ndim) != 0) {
      details::ThrowRaisedError(-1);
    }
    return std::vector<int64_t>(dims, dims + ndim);
  }
  std::vector<std::vector<int64_t>> OutputShapes(const ContractBindings& b) const {
    std::vector<std::vector<int64_t>> out;
    for (size_t i = 0; i < num_outputs(); ++i) out.push_back(OutputShape(i, b));
    return out;
  }
  /// The dtype of output i as written ("float32", or alternatives "float16|bfloat16").
  std::string OutputDtype(size_t i) const {
    return Text(kKFFIContractTextOutputDtype, static_cast<int32_t>(i));
  }

  /// The export metadata: {"name", "params": [{"name", "type", "kind", "optional", ...}],
  /// "return", "doc", "contract", "outputs": [{"name", "type", "shape": [expr...], "shape_rpn":
  /// [[token...]...], "dtype"}], "symbols": [{"name", "width", "divisibility", "parallel" (only
  /// when true)}], "env_stream", "mutates": [param...]}. A param's structured fields: "kind"
  /// ("tensor", "int", "float", "bool", "tuple", "stream", "record"), "optional", and per kind: a
  /// tensor's "shape" (ints and symbol names), "dtypes" (names; empty: any), "device" (its text,
  /// e.g. "cuda" or "cpu|cuda"; null: any) and "mutable"; a scalar's "range" ([lo, hi], when
  /// declared); a tuple's "elems" (each with "type" and these fields); a record's "type" is its
  /// type key, with "type_key" and "fields" (each with "name", "type" and these fields). Optional
  /// and Stream parameters take None: "default": null. An output's shape_rpn has one token list per
  /// dimension: ints, symbol names and the operators "+", "-", "*", "//", "%" (Python's semantics)
  /// and "neg".
  std::string MetadataJson(const std::string& return_type, const std::string& doc) const {
    KFFIByteArray r = details::ToByteArray(return_type.data(), return_type.size());
    KFFIByteArray d = details::ToByteArray(doc.data(), doc.size());
    KFFIAny out;
    if (KFFIContractGetMetadata(Handle(), &r, &d, &out) != 0) details::ThrowRaisedError(-1);
    return details::contract::TakeString(&out);
  }

  /// A function that checks each call against this contract, then calls f with the arguments
  /// (and the environment stream in place of each EnvStream parameter).
  inline Function Wrap(Function f, const char* file = __builtin_FILE(),
                       int line = __builtin_LINE()) const;

  /// The check plan (for the function objects), valid while this contract lives.
  const details::contract::PlanLayout* plan() const { return plan_; }
  /// The runtime's contract object (borrowed).
  KFFIObjectHandle Handle() const { return details::ObjectUnsafe::GetHandle(obj_); }
  const ObjectPtr<Object>& object() const { return obj_; }

 private:
  explicit Contract(ObjectPtr<Object> obj)
      : obj_(std::move(obj)), plan_(details::contract::PlanOf(obj_)) {}
  std::string Text(int32_t what, int32_t index = 0) const {
    return details::contract::TextOf(obj_, what, index);
  }

  ObjectPtr<Object> obj_;
  const details::contract::PlanLayout* plan_;
};

namespace details {

/// A typed function behind a contract: runs the plan, then unpacks the arguments as usual.
template <typename TCallable, typename R, typename... Args>
class ContractFunctionObj : public FunctionObj {
 public:
  ContractFunctionObj(TCallable f, const Contract& c, FunctionSource src)
      : callable_(std::move(f)), contract_(c.object()), plan_(c.plan()), source_(std::move(src)) {
    safe_call = &SafeCall;
  }
  static int SafeCall(void* self, const KFFIAny* args, int32_t num_args, KFFIAny* result) {
    auto* obj = static_cast<ContractFunctionObj*>(static_cast<Object*>(self));
    try {
      const contract::PlanLayout& plan = *obj->plan_;
      contract::RunState st;
      contract::Run(plan, args, num_args, &st);
      CallDeviceRestore<TCallable, Args...> device;
      if (KFFI_LIKELY(!plan.needs_expand)) {
        EnterCallDevice<TCallable, Args...>(args, &device, std::index_sequence_for<Args...>());
        obj->Invoke(args, result, std::index_sequence_for<Args...>());
      } else {
        KFFIAny full[sizeof...(Args) == 0 ? 1 : sizeof...(Args)];
        contract::ExpandArgs(plan, st, full, false);
        EnterCallDevice<TCallable, Args...>(full, &device, std::index_sequence_for<Args...>());
        obj->Invoke(full, result, std::index_sequence_for<Args...>());
      }
      return 0;
    }
    KFFI_CATCH_ALL {
      SetRaisedLeaving(obj->source_);
      return -1;
    }
  }
  /// For the (unexpected) case that the C++ parameter cannot take a value the contract let pass.
  std::string SignatureStr() const {
    return contract::TextOf(contract_, kKFFIContractTextSignature);
  }
  std::string ParamNameAt(size_t i) const { return contract::ParamNameOf(contract_, i); }
  [[noreturn]] void FailArgument(size_t i, const Error* cause, const char* got,
                                 const KFFIAny* arg) const {
    FailContractArgument<Args...>(*this, i, cause, got, arg);
  }

 private:
  template <size_t... I>
  KFFI_INLINE void Invoke(const KFFIAny* args, KFFIAny* result, std::index_sequence<I...> seq) {
    contract::InvokeChecked<R, Args...>(callable_, args, result, this, seq);
  }

  TCallable callable_;
  ObjectPtr<Object> contract_;
  const contract::PlanLayout* plan_;  // contract_'s
  FunctionSource source_;
};

/// A packed Function behind a contract (Contract::Wrap). A wrapper of a wrapper (of this library:
/// the same SafeCall) is not called through: one call checks every contract of the chain, the
/// outermost first, then calls the innermost function, and the chain is released one wrapper at
/// a time. However deep the nesting (kffi.with_contract of its own result, 20000 times), a call
/// and a release take no more C stack than one wrapper does.
class ContractPackedObj : public FunctionObj {
 public:
  ContractPackedObj(Function inner, const Contract& c, FunctionSource src)
      : inner_(std::move(inner)), contract_(c.object()), plan_(c.plan()), source_(std::move(src)) {
    safe_call = &SafeCall;
  }
  ContractPackedObj(const ContractPackedObj&) = delete;
  ContractPackedObj& operator=(const ContractPackedObj&) = delete;
  ~ContractPackedObj() {
    // Each wrapper held only by the one before it dies here, in turn, its next one taken first.
    Function next = std::move(inner_);
    while (next.defined() && next->safe_call == &SafeCall && next.use_count() == 1) {
      auto* layer =
          const_cast<ContractPackedObj*>(static_cast<const ContractPackedObj*>(next.get()));
      Function after = std::move(layer->inner_);
      next = std::move(after);
    }
  }
  static int SafeCall(void* self, const KFFIAny* args, int32_t num_args, KFFIAny* result) {
    auto* obj = static_cast<ContractPackedObj*>(static_cast<Object*>(self));
    try {
      const ContractPackedObj* layer = obj;
      const KFFIAny* cur = args;
      int32_t n = num_args;
      std::vector<KFFIAny> expanded;  // the arguments with the environment's stream filled in
      for (;;) {
        const contract::PlanLayout& plan = *layer->plan_;
        contract::RunState st;
        contract::Run(plan, cur, n, &st);
        if (KFFI_UNLIKELY(plan.needs_expand)) {
          std::vector<KFFIAny> full(static_cast<size_t>(plan.num_fn_params));
          contract::ExpandArgs(plan, st, full.data(), true);
          expanded = std::move(full);
          cur = expanded.data();
          n = static_cast<int32_t>(expanded.size());
        }
        const FunctionObj* next = layer->inner_.get();
        if (next->safe_call != &SafeCall) break;
        layer = static_cast<const ContractPackedObj*>(next);
      }
      const FunctionObj* inner = layer->inner_.get();
      // The wrapped function may come from another runtime (a TVM-FFI export): the checked
      // call runs on the device of its first CUDA tensor, as a typed kffi function does.
      DeviceRestore device;
      contract::EnterArgsDevice(cur, n, &device);
      return inner->safe_call(ObjectUnsafe::Header(inner), cur, n, result);
    }
    KFFI_CATCH_ALL {
      SetRaisedLeaving(obj->source_);
      return -1;
    }
  }

 private:
  Function inner_;
  ObjectPtr<Object> contract_;
  const contract::PlanLayout* plan_;  // contract_'s
  FunctionSource source_;
};

/// The contract object type and the C++ parameter and return types of a callable F.
template <typename TypedObj>
struct ContractObjOf;
template <typename F, typename R, typename... Args>
struct ContractObjOf<TypedFunctionObj<F, R, Args...>> {
  using type = ContractFunctionObj<F, R, Args...>;
  static constexpr size_t kArity = sizeof...(Args);
  /// ValueError when the contract's parameters do not fit these C++ ones.
  static void CheckSignature(const Contract& c) {
    const std::string types[kArity + 1] = {contract::ContractTypeStrOf<Args>()..., ""};
    KFFIByteArray arrays[kArity + 1];
    for (size_t i = 0; i < kArity; ++i) arrays[i] = ToByteArray(types[i].data(), types[i].size());
    if (KFFIContractCheckSignature(c.Handle(), arrays, static_cast<int32_t>(kArity)) != 0) {
      ThrowRaisedError(-1);
    }
  }
  static std::string ReturnType() { return TypeStrOf<R>(); }
};
template <typename F>
using ContractInfo = ContractObjOf<typename CallableInfo<F>::template TypedObj<F>>;

/// The object behind a typed function with a contract; ValueError when the contract does not
/// fit the C++ parameters.
template <typename F>
ObjectPtr<typename ContractInfo<F>::type> MakeContractObj(F f, const Contract& c, const char* file,
                                                          int line) {
  ContractInfo<F>::CheckSignature(c);
  return make_object<typename ContractInfo<F>::type>(std::move(f), c,
                                                     FunctionSource{c.name(), file, line});
}

}  // namespace details

inline Function Contract::Wrap(Function f, const char* file, int line) const {
  return Function(make_object<details::ContractPackedObj>(
      std::move(f), *this, details::FunctionSource{name(), file, line}));
}

/// A Function that checks every call against `contract` (see the top of this file) and then
/// calls f: a typed C++ callable (its parameters must fit the contract; ValueError otherwise)
/// or a Function (then as Contract::Wrap). A malformed contract is a ValueError.
///   kffi::Function f = kffi::FunctionWithContract(Scale, "scale", "y: Tensor([n], float32), ...");
template <typename F>
Function FunctionWithContract(F f, std::string_view name, std::string_view contract,
                              const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  Contract c = Contract::Parse(name, contract);
  if constexpr (std::is_base_of_v<ObjectRef, std::decay_t<F>>) {
    return c.Wrap(Function(std::move(f)), file, line);
  } else {
    return Function(details::MakeContractObj(std::move(f), c, file, line));
  }
}

}  // namespace kffi

#endif  // KFFI_CONTRACT_H_
