// include/kffi/contract.h: contracts: a declared signature whose check plan runs before a function.
//
// A contract says what a function accepts, in text (grammar in contract_parser.h):
//   "x: Tensor([n, m], float16|bfloat16, device=cuda, align=16, contiguous),
//    y: Tensor([n, m], float32), scale: float[0.0, 1.0], stream: EnvStream
//    -> Tensor([n * 2, m], float32); n: int32 % 16"
// It is parsed once into a flat plan of small checks with precomputed expectations; each call runs
// the plan before the function (a few compares per tensor, no allocation, no strings) and a failed
// check raises the first problem, in this order: the argument count (TypeError), then for each
// argument: type (TypeError), alignment, device index, ndim, device type, dtype, byte_offset,
// dims, strides (ValueError). A symbol (n, m) is bound by its first occurrence, which checks its
// width and divisibility; later occurrences must match. All tensors share one device index.
// `stride_order=(...)` lists the dimensions from outermost to innermost, compact:
// `contiguous`/`row_major` is (0, 1, ..., N-1) and `col_major` is (N-1, ..., 0). EnvStream is no
// call argument: the function receives KFFIEnvGetStream of the first non-CPU tensor's device (or
// the first tensor's) as a void*. Outputs are declared for framework integration
// (Contract::OutputShapes, the metadata's "outputs").
//
//   void Scale(kffi::TensorView y, kffi::TensorView x, double factor);
//   KFFI_EXPORT_CONTRACT(scale, Scale, "y: Tensor([n], float32), x: Tensor([n], float32), "
//                                      "factor: float");
#ifndef KFFI_CONTRACT_H_
#define KFFI_CONTRACT_H_

#include <kffi/contract_details.h>
#include <kffi/export.h>

#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kffi {

namespace details {
namespace contract {

[[noreturn]] KFFI_NOINLINE inline void ThrowInvalidContract(std::string_view name,
                                                            std::string_view text,
                                                            const SyntaxError& e) {
  std::string msg = "Invalid contract for `" + std::string(name) + "` at column " +
                    std::to_string(e.pos + 1) + ": " + e.what;
  if (text.find('\n') == std::string_view::npos) {
    msg += "\n  " + std::string(text) + "\n  " + std::string(e.pos, ' ') + "^";
  }
  throw Error("ValueError", msg);
}

/// Parses and plans; a malformed contract is a ValueError naming the column.
inline std::shared_ptr<const Plan> MakePlan(std::string_view name, std::string_view text) {
  auto plan = std::make_shared<Plan>();
  plan->name = std::string(name);
  plan->text = std::string(text);
  try {
    plan->ast = Parser(plan->text).Parse();
    PlanBuilder(plan.get()).Build();
  } catch (const SyntaxError& e) {
    ThrowInvalidContract(name, text, e);
  }
  return plan;
}

/// Whether a C++ parameter type (its TypeStr) can receive values of a contract type.
inline bool CppTypeFits(const TypeAst& t, std::string_view cpp, bool outer = true) {
  auto starts = [&](std::string_view prefix) { return cpp.substr(0, prefix.size()) == prefix; };
  if (cpp == Sv("Any")) return true;
  // An Optional C++ parameter takes any value of the contract type; a plain one no None.
  if (outer && starts("Optional<") && cpp.back() == '>') {
    return CppTypeFits(t, cpp.substr(9, cpp.size() - 10), false);
  }
  if (outer && t.optional) return false;
  switch (t.kind) {
    case Kind::kTensor:
      return cpp == Sv("Tensor");
    case Kind::kInt:
      return starts("int") || starts("uint");
    case Kind::kFloat:
      return cpp == Sv("float") || cpp == Sv("float32");
    case Kind::kBool:
      return cpp == Sv("bool");
    case Kind::kTuple:
      return starts("Tuple<") || starts("Array<") || starts("List<");
    default:
      return cpp == Sv("void*");
  }
}

/// Checks that the C++ function can take what the contract lets through.
inline void CheckCppSignature(const Plan& p, const std::vector<std::string>& cpp) {
  auto fail = [&](const std::string& why) {
    throw Error("ValueError", "Invalid contract for `" + p.name + "`: " + why);
  };
  if (cpp.size() != p.fn_src.size()) {
    fail("it declares " + std::to_string(p.fn_src.size()) +
         " parameters (EnvStream included) but the C++ function takes " +
         std::to_string(cpp.size()));
  }
  for (size_t i = 0; i < cpp.size(); ++i) {
    const ParamAst& param = p.ast.params[i];
    if (!CppTypeFits(param.type, cpp[i])) {
      fail("parameter #" + std::to_string(i) + " `" + param.text +
           "` cannot be passed to the C++ parameter of type `" + cpp[i] + "`");
    }
  }
}

}  // namespace contract
}  // namespace details

/// The values of a contract's symbols, bound by a check (Contract::Check) or given
/// (Contract::Bind); read them, or evaluate output shapes from them.
class ContractBindings {
 public:
  /// The symbol's value, or nullopt when it is unbound (e.g. only in a None optional tensor).
  std::optional<int64_t> Get(std::string_view symbol) const {
    int32_t slot = plan_->SlotOf(symbol);
    if (slot < 0 || ((bound_ >> slot) & 1) == 0) return std::nullopt;
    return values_[static_cast<size_t>(slot)];
  }
  /// Sets a symbol; a name the contract does not bind is a KeyError.
  void Set(std::string_view symbol, int64_t value) {
    int32_t slot = plan_->SlotOf(symbol);
    if (slot < 0) {
      KFFI_THROW(KeyError) << "The contract of `" << plan_->name << "` has no symbol `" << symbol
                           << "`";
    }
    values_[static_cast<size_t>(slot)] = value;
    bound_ |= UINT64_C(1) << slot;
  }

 private:
  friend class Contract;
  explicit ContractBindings(std::shared_ptr<const details::contract::Plan> plan)
      : plan_(std::move(plan)), values_(plan_->symbols.size(), 0) {}
  std::shared_ptr<const details::contract::Plan> plan_;
  std::vector<int64_t> values_;
  uint64_t bound_ = 0;
};

/// A parsed contract: its signature, its check plan and its outputs. Cheap to copy (shared).
class Contract {
 public:
  /// Parses text for the function `name`; a malformed contract is a ValueError:
  /// "Invalid contract for `scale` at column 17: expected `]`" (then the text and a caret).
  static Contract Parse(std::string_view name, std::string_view text) {
    return Contract(details::contract::MakePlan(name, text));
  }

  const std::string& name() const { return plan_->name; }
  const std::string& text() const { return plan_->text; }
  /// The call signature as messages show it: `name(a: Tensor([n], float32), s: int32)`.
  const std::string& signature() const { return plan_->signature; }
  /// Number of call arguments (EnvStream parameters are not arguments).
  int32_t num_args() const { return plan_->num_args; }
  /// Names and types (as written) of the call parameters.
  std::vector<std::pair<std::string, std::string>> params() const {
    std::vector<std::pair<std::string, std::string>> out;
    for (size_t i : plan_->call_params) {
      out.emplace_back(plan_->ast.params[i].name, plan_->ast.params[i].type_text);
    }
    return out;
  }
  size_t num_outputs() const { return plan_->ast.outputs.size(); }

  /// Checks packed arguments (borrowed) as a call would; throws the first failure, else returns
  /// the symbols' values.
  ContractBindings Check(const KFFIAny* args, int32_t num_args) const {
    details::contract::RunState st;
    details::contract::Run(*plan_, args, num_args, &st);
    ContractBindings out(plan_);
    const uint64_t bound = st.bound | plan_->static_bound;
    for (size_t i = 0; i < plan_->symbols.size(); ++i) {
      if ((bound >> i) & 1) out.values_[i] = st.values[i];
    }
    out.bound_ = st.bound | plan_->static_bound;
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
    ContractBindings out(plan_);
    for (const auto& kv : values) out.Set(kv.first, kv.second);
    return out;
  }

  /// The shape of output i from the symbols; ValueError for an unbound symbol, a division by
  /// zero or an int64 overflow.
  std::vector<int64_t> OutputShape(size_t i, const ContractBindings& b) const {
    if (i >= num_outputs()) {
      KFFI_THROW(IndexError) << "Output #" << i << " out of range: `" << name() << "` declares "
                             << num_outputs() << " outputs";
    }
    std::vector<int64_t> out;
    for (int32_t root : plan_->ast.outputs[i].tensor.shape_exprs) out.push_back(Eval(root, b, i));
    return out;
  }
  std::vector<std::vector<int64_t>> OutputShapes(const ContractBindings& b) const {
    std::vector<std::vector<int64_t>> out;
    for (size_t i = 0; i < num_outputs(); ++i) out.push_back(OutputShape(i, b));
    return out;
  }
  /// The dtype of output i as written ("float32", or alternatives "float16|bfloat16").
  const std::string& OutputDtype(size_t i) const {
    return plan_->ast.outputs.at(i).tensor.dtype_text;
  }

  /// The export metadata: {"name", "params", "return", "doc", "contract", "outputs": [{"name",
  /// "type", "shape": [expr...], "dtype"}], "symbols": [{"name", "width", "divisibility"}],
  /// "env_stream"}.
  std::string MetadataJson(const std::string& return_type, const std::string& doc) const {
    using details::AppendJsonEscaped;
    const auto& p = *plan_;
    auto field = [](std::string* out, const char* key, const std::string& v, bool first = false) {
      *out += first ? "\"" : ",\"";
      *out += key;
      *out += "\":\"";
      AppendJsonEscaped(out, v);
      *out += "\"";
    };
    std::string out = "{";
    field(&out, "name", p.name, true);
    out += ",\"params\":[";
    for (size_t i : p.call_params) {
      out += i == p.call_params.front() ? "{" : ",{";
      field(&out, "name", p.ast.params[i].name, true);
      field(&out, "type", p.ast.params[i].type_text);
      out += "}";
    }
    out += "]";
    field(&out, "return", return_type);
    field(&out, "doc", doc);
    field(&out, "contract", p.text);
    out += ",\"outputs\":[";
    for (size_t i = 0; i < p.ast.outputs.size(); ++i) {
      const details::contract::OutputAst& o = p.ast.outputs[i];
      out += i ? ",{" : "{";
      field(&out, "name", o.name, true);
      field(&out, "type", o.type_text);
      out += ",\"shape\":[";
      for (size_t j = 0; j < o.tensor.shape_texts.size(); ++j) {
        out += j ? ",\"" : "\"";
        AppendJsonEscaped(&out, o.tensor.shape_texts[j]);
        out += "\"";
      }
      out += "]";
      field(&out, "dtype", o.tensor.dtype_text);
      out += "}";
    }
    out += "],\"symbols\":[";
    for (size_t i = 0; i < p.symbols.size(); ++i) {
      out += i ? ",{" : "{";
      field(&out, "name", p.symbols[i].name, true);
      field(&out, "width", p.symbols[i].bits == 32 ? "int32" : "int64");
      out += ",\"divisibility\":" + std::to_string(p.symbols[i].divisibility) + "}";
    }
    out += "],\"env_stream\":";
    out += p.has_env_stream ? "true}" : "false}";
    return out;
  }

  /// A function that checks each call against this contract, then calls f with the arguments
  /// (and the environment stream in place of each EnvStream parameter).
  inline Function Wrap(Function f, const char* file = __builtin_FILE(),
                       int line = __builtin_LINE()) const;

  /// The plan (for the function objects).
  const std::shared_ptr<const details::contract::Plan>& plan() const { return plan_; }

 private:
  explicit Contract(std::shared_ptr<const details::contract::Plan> plan) : plan_(std::move(plan)) {}

  int64_t Eval(int32_t idx, const ContractBindings& b, size_t out_i) const {
    using details::contract::ExprNode;
    const ExprNode& n = plan_->ast.nodes[static_cast<size_t>(idx)];
    auto fail = [&](const std::string& why) {
      KFFI_THROW(ValueError) << "Cannot evaluate the shape of output #" << out_i << " of `"
                             << name() << "`: " << why;
    };
    if (n.op == ExprNode::kLit) return n.value;
    if (n.op == ExprNode::kSym) {
      std::optional<int64_t> v = b.Get(n.symbol);
      if (!v.has_value()) fail("symbol `" + n.symbol + "` is not bound");
      return *v;
    }
    const int64_t a = Eval(n.lhs, b, out_i);
    if (n.op == ExprNode::kNeg) {
      if (a == INT64_MIN) fail("int64 overflow");
      return -a;
    }
    const int64_t c = Eval(n.rhs, b, out_i);
    int64_t r = 0;
    bool overflow = false;
    switch (n.op) {
      case ExprNode::kAdd:
        overflow = __builtin_add_overflow(a, c, &r);
        break;
      case ExprNode::kSub:
        overflow = __builtin_sub_overflow(a, c, &r);
        break;
      case ExprNode::kMul:
        overflow = __builtin_mul_overflow(a, c, &r);
        break;
      default:  // floor division, as Python's //
        if (c == 0) fail("division by zero");
        if (a == INT64_MIN && c == -1) fail("int64 overflow");
        r = a / c;
        if (a % c != 0 && ((a < 0) != (c < 0))) --r;
    }
    if (overflow) fail("int64 overflow");
    return r;
  }

  std::shared_ptr<const details::contract::Plan> plan_;
};

namespace details {

/// A typed function behind a contract: runs the plan, then unpacks the arguments as usual.
template <typename TCallable, typename R, typename... Args>
class ContractFunctionObj : public FunctionObj {
 public:
  ContractFunctionObj(TCallable f, std::shared_ptr<const contract::Plan> plan, FunctionSource src)
      : callable_(std::move(f)), plan_(std::move(plan)), source_(std::move(src)) {
    safe_call = &SafeCall;
  }
  static int SafeCall(void* self, const KFFIAny* args, int32_t num_args, KFFIAny* result) {
    auto* obj = static_cast<ContractFunctionObj*>(static_cast<Object*>(self));
    try {
      const contract::Plan& plan = *obj->plan_;
      contract::RunState st;
      contract::Run(plan, args, num_args, &st);
      if (KFFI_LIKELY(!plan.has_env_stream)) {
        obj->Invoke(args, result, std::index_sequence_for<Args...>());
      } else {
        KFFIAny full[sizeof...(Args) == 0 ? 1 : sizeof...(Args)];
        contract::ExpandArgs(plan, args, st, full, false);
        obj->Invoke(full, result, std::index_sequence_for<Args...>());
      }
      return 0;
    } catch (...) {
      SetRaisedLeaving(obj->source_);
      return -1;
    }
  }
  /// For the (unexpected) case that the C++ parameter cannot take a value the contract let pass.
  std::string SignatureStr() const { return plan_->signature; }

 private:
  template <size_t... I>
  KFFI_INLINE void Invoke(const KFFIAny* args, KFFIAny* result, std::index_sequence<I...> seq) {
    InvokeUnpacked<R, Args...>(callable_, args, result, this, seq);
  }

  TCallable callable_;
  std::shared_ptr<const contract::Plan> plan_;
  FunctionSource source_;
};

/// A packed Function behind a contract (Contract::Wrap).
class ContractPackedObj : public FunctionObj {
 public:
  ContractPackedObj(Function inner, std::shared_ptr<const contract::Plan> plan, FunctionSource src)
      : inner_(std::move(inner)), plan_(std::move(plan)), source_(std::move(src)) {
    safe_call = &SafeCall;
  }
  static int SafeCall(void* self, const KFFIAny* args, int32_t num_args, KFFIAny* result) {
    auto* obj = static_cast<ContractPackedObj*>(static_cast<Object*>(self));
    const FunctionObj* inner = obj->inner_.get();
    try {
      const contract::Plan& plan = *obj->plan_;
      contract::RunState st;
      contract::Run(plan, args, num_args, &st);
      if (!plan.has_env_stream) {
        return inner->safe_call(ObjectUnsafe::Header(inner), args, num_args, result);
      }
      std::vector<KFFIAny> full(plan.fn_src.size());
      contract::ExpandArgs(plan, args, st, full.data(), true);
      return inner->safe_call(ObjectUnsafe::Header(inner), full.data(),
                              static_cast<int32_t>(full.size()), result);
    } catch (...) {
      SetRaisedLeaving(obj->source_);
      return -1;
    }
  }

 private:
  Function inner_;
  std::shared_ptr<const contract::Plan> plan_;
  FunctionSource source_;
};

/// The contract object type, parameter types and return type of a callable F.
template <typename TypedObj>
struct ContractObjOf;
template <typename F, typename R, typename... Args>
struct ContractObjOf<TypedFunctionObj<F, R, Args...>> {
  using type = ContractFunctionObj<F, R, Args...>;
  static std::vector<std::string> ParamTypes() { return {TypeStrOf<Args>()...}; }
  static std::string ReturnType() { return TypeStrOf<R>(); }
};
template <typename F>
using ContractInfo = ContractObjOf<typename CallableInfo<F>::template TypedObj<F>>;

/// The object behind a typed function with a contract; ValueError when the contract does not
/// fit the C++ parameters.
template <typename F>
ObjectPtr<typename ContractInfo<F>::type> MakeContractObj(F f, const Contract& c, const char* file,
                                                          int line) {
  contract::CheckCppSignature(*c.plan(), ContractInfo<F>::ParamTypes());
  return make_object<typename ContractInfo<F>::type>(std::move(f), c.plan(),
                                                     FunctionSource{c.name(), file, line});
}

#if defined(__GNUC__) && !defined(_WIN32)
// Weak: a library built with these headers still loads in a 0.1 runtime, which lacks it.
extern "C" __attribute__((weak)) int KFFIModuleReportLoadError(const KFFIByteArray* kind,
                                                               const KFFIByteArray* message,
                                                               int32_t* taken);
#endif

/// Hands a problem found while the library loads to the module loader, so that
/// Module::Load fails with it (when a load is in progress on this thread; the export raises it
/// on every call either way).
inline void ReportLoadError(const std::string& kind, const std::string& message) noexcept {
#if defined(__GNUC__) && !defined(_WIN32)
  if (&KFFIModuleReportLoadError == nullptr) return;
#endif
  KFFIByteArray k{kind.data(), kind.size()};
  KFFIByteArray m{message.data(), message.size()};
  int32_t taken = 0;
  if (KFFIModuleReportLoadError(&k, &m, &taken) != 0) {
    KFFIObjectHandle err = nullptr;
    KFFIErrorMoveFromRaised(&err);
    if (err != nullptr) KFFIObjectDecRef(err);
  }
}

/// What KFFI_EXPORT_CONTRACT keeps for one export, built at load time: the function, or the
/// error that a malformed contract made (reported to the module loader, which fails the load, and
/// raised by every call and by the metadata query).
template <typename F>
class ContractExport {
 public:
  using Obj = typename ContractInfo<F>::type;
  ContractExport(F f, const char* name, const char* text, const char* doc, const char* file,
                 int line) noexcept
      : source_{name, file, line} {
    try {
      Contract c = Contract::Parse(name, text);
      ObjectPtr<Obj> p = MakeContractObj(std::move(f), c, file, line);
      json_ = c.MetadataJson(ContractInfo<F>::ReturnType(), doc);
      obj_ = static_cast<Obj*>(static_cast<Object*>(ObjectUnsafe::MoveToHandle(std::move(p))));
    } catch (const Error& e) {
      kind_ = e.kind();
      message_ = e.message();
    } catch (const std::exception& e) {
      kind_ = "InternalError";
      message_ = e.what();
    }
    if (obj_ == nullptr) ReportLoadError(kind_, message_);
  }
  KFFI_INLINE int Call(const KFFIAny* args, int32_t num_args, KFFIAny* result) noexcept {
    if (KFFI_LIKELY(obj_ != nullptr)) {
      return Obj::SafeCall(static_cast<Object*>(obj_), args, num_args, result);
    }
    return RaiseStored();
  }
  int Metadata(KFFIAny* result) noexcept {
    if (obj_ == nullptr) return RaiseStored();
    try {
      TypeTraits<String>::MoveToAny(String(json_), result);
      return 0;
    } catch (...) {
      SetRaisedFromCurrentException();
      return -1;
    }
  }

 private:
  KFFI_NOINLINE int RaiseStored() noexcept {
    try {
      throw Error(kind_, message_);
    } catch (...) {
      SetRaisedLeaving(source_);
    }
    return -1;
  }

  FunctionSource source_;
  Obj* obj_ = nullptr;  // never released: the library is never unloaded
  std::string json_;
  std::string kind_;
  std::string message_;
};

/// Never freed, like the objects of KFFI_EXPORT (no exit-time destructor racing a call).
template <typename F>
ContractExport<F>* MakeContractExport(F f, const char* name, const char* text, const char* doc,
                                      const char* file, int line) {
  return new ContractExport<F>(std::move(f), name, text, doc, file, line);
}

}  // namespace details

inline Function Contract::Wrap(Function f, const char* file, int line) const {
  return Function(make_object<details::ContractPackedObj>(
      std::move(f), plan_, details::FunctionSource{plan_->name, file, line}));
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
