// include/kffi/contract.h: contracts: a declared signature whose check plan runs before a function.
//
// A contract says what a function accepts, in text (grammar in contract_parser.h):
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
// The message catalogue (the parameter first, then what was expected and what was received, then
// the signature once; `k` is the argument's position, a tuple element says "in argument #k"):
//   count        TypeError   f: expected 2 arguments, got 1 (`f(a: ..., b: ...)`)
//   type         TypeError   b: expected Tensor, got int (argument #1 of `SIG`)
//                            x: expected Tuple of 3 elements, got Array of 2 elements (...)
//                            x[1]: expected Tensor, got int (in argument #0 of `SIG`)
//   writable     ValueError  y: expected a writable tensor (the parameter is declared `mut`),
//                            got a read-only tensor (argument #0 of `SIG`)
//   alignment    ValueError  a: expected data aligned to 16 bytes, got data aligned to 4 bytes
//   (...) device index ValueError  b.device.index: expected 0 (as a.device.index), got 1 (...) ndim
//   ValueError  x.ndim: expected 2, got 3 (...) device type  ValueError  x.device: expected cuda,
//   got cpu (...) dtype        ValueError  x.dtype: expected float16|bfloat16, got float32 (...)
//   byte_offset  ValueError  x.byte_offset: expected 0, got 64 (...)
//   literal dim  ValueError  x.shape[0]: expected 2, got 3 (...)
//   width        ValueError  a.shape[0]: expected n in int32 range [-2147483648, 2147483647],
//                            got 4294967296 (...)
//   divisibility ValueError  a.shape[0]: expected n divisible by 16, got 126 (...)
//   match        ValueError  b.shape[0]: expected n = 128 (as a.shape[0]), got 126 (...)
//   layout       ValueError  x.strides: expected contiguous, got [8, 1] for shape [4, 3] (...)
//   strides      ValueError  y.strides[0]: expected s = 8 (as x.strides[0]), got 16 (...)
//   range        ValueError  k: expected a value in range [0, 1024], got 2000 (...)
// A conflict (match, device index) names both sides with their values. It names first the side
// the function writes when only one of them is `mut` (out: Tensor([n], float32, mut) given the
// wrong size is blamed, not the input it disagrees with), else the later one.
//
//   void Scale(kffi::TensorView y, kffi::TensorView x, double factor);
//   KFFI_EXPORT_CONTRACT(scale, Scale, "y: Tensor([n], float32, mut), x: Tensor([n], float32), "
//                                      "factor: float");
#ifndef KFFI_CONTRACT_H_
#define KFFI_CONTRACT_H_

#include <kffi/contract_details.h>
#include <kffi/export.h>
#include <kffi/function.h>

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
  // The text and a caret under the column: an excerpt of at most 60 bytes before it and 20
  // after, so that a long (or hostile) text keeps the message short.
  const size_t pos = e.pos < text.size() ? e.pos : text.size();
  const size_t from = pos > 60 ? pos - 60 : 0;
  std::string_view excerpt = text.substr(from, pos - from + 20);
  if (excerpt.find('\n') == std::string_view::npos) {
    const std::string head = from > 0 ? "..." : "";
    const std::string tail = from + excerpt.size() < text.size() ? "..." : "";
    msg += "\n  " + head + std::string(excerpt) + tail + "\n  " +
           std::string(head.size() + pos - from, ' ') + "^";
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
    default:  // kStream, kEnvStream
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

/// Evaluates an output-shape expression (reverse Polish notation) with a stack: the one
/// evaluator of contract shapes. value_of(symbol) gives a bound symbol's value or nullopt; a
/// problem (an unbound symbol, a division by zero, an int64 overflow) is a ValueError whose
/// message starts with `what`.
template <typename ValueOf>
int64_t EvalRpn(const std::vector<RpnToken>& rpn, const ValueOf& value_of,
                const std::string& what) {
  auto fail = [&](const std::string& why) { KFFI_THROW(ValueError) << what << why; };
  std::vector<int64_t> stack;
  stack.reserve(rpn.size());
  for (const RpnToken& t : rpn) {
    if (t.op == RpnToken::kLit) {
      stack.push_back(t.value);
      continue;
    }
    if (t.op == RpnToken::kSym) {
      std::optional<int64_t> v = value_of(t.symbol);
      if (!v.has_value()) fail("symbol `" + t.symbol + "` is not bound");
      stack.push_back(*v);
      continue;
    }
    const size_t arity = t.op == RpnToken::kNeg ? 1 : 2;
    if (stack.size() < arity) fail("malformed expression");  // the parser never makes one
    const int64_t c = stack.back();
    if (t.op == RpnToken::kNeg) {
      if (c == INT64_MIN) fail("int64 overflow");
      stack.back() = -c;
      continue;
    }
    stack.pop_back();
    const int64_t a = stack.back();
    int64_t r = 0;
    bool overflow = false;
    switch (t.op) {
      case RpnToken::kAdd:
        overflow = __builtin_add_overflow(a, c, &r);
        break;
      case RpnToken::kSub:
        overflow = __builtin_sub_overflow(a, c, &r);
        break;
      case RpnToken::kMul:
        overflow = __builtin_mul_overflow(a, c, &r);
        break;
      default:  // floor division and modulo, as Python's // and %
        if (c == 0) fail(t.op == RpnToken::kMod ? "modulo by zero" : "division by zero");
        if (a == INT64_MIN && c == -1) {
          if (t.op == RpnToken::kFloorDiv) fail("int64 overflow");
          r = 0;
          break;
        }
        r = t.op == RpnToken::kFloorDiv ? a / c : a % c;
        if (a % c != 0 && ((a < 0) != (c < 0))) r += t.op == RpnToken::kFloorDiv ? -1 : c;
    }
    if (overflow) fail("int64 overflow");
    stack.back() = r;
  }
  if (stack.size() != 1) fail("malformed expression");
  return stack.back();
}

/// The "kind" of a contract type in metadata.
inline const char* KindName(Kind k) {
  switch (k) {
    case Kind::kTensor:
      return "tensor";
    case Kind::kInt:
      return "int";
    case Kind::kFloat:
      return "float";
    case Kind::kBool:
      return "bool";
    case Kind::kTuple:
      return "tuple";
    default:
      return "stream";
  }
}

/// A type's structured fields in metadata: kind, optional, and per kind: a tensor's shape (ints
/// and symbol names), dtypes (names; empty: any), device (its text, e.g. "cuda" or "cpu|cuda";
/// null: any) and mutable; a scalar's range ([lo, hi], when declared); a tuple's elems (each
/// with "type" and these fields). Optional and Stream parameters take None: "default": null.
inline void WriteTypeFields(JsonWriter* w, const TypeAst& t) {
  w->Field("kind", KindName(t.kind)).Key("optional").Bool(t.optional);
  if (t.optional || t.kind == Kind::kStream) w->Key("default").Null();
  if (t.kind == Kind::kTensor) {
    const TensorAst& ts = t.tensor;
    w->Key("shape").BeginArray();
    for (const DimAst& d : ts.shape) {
      if (d.is_symbol) {
        w->String(d.symbol);
      } else {
        w->Int(d.literal);
      }
    }
    w->EndArray().Key("dtypes").BeginArray();
    for (DLDataType dt : ts.dtypes) w->String(DataTypeToString(dt));
    w->EndArray().Key("device");
    if (ts.device_text.empty()) {
      w->Null();
    } else {
      w->String(ts.device_text);
    }
    w->Key("mutable").Bool(ts.mut);
  } else if (t.has_range) {
    w->Key("range").BeginArray();
    if (t.kind == Kind::kInt) {
      w->Int(t.int_lo).Int(t.int_hi);
    } else {
      w->Double(t.float_lo).Double(t.float_hi);
    }
    w->EndArray();
  } else if (t.kind == Kind::kTuple) {
    w->Key("elems").BeginArray();
    for (const TypeAst& e : t.elems) {  // nesting is bounded by the parser (kMaxTypeDepth)
      w->BeginObject().Field("type", e.text);
      WriteTypeFields(w, e);
      w->EndObject();
    }
    w->EndArray();
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
    const std::string what =
        "Cannot evaluate the shape of output #" + std::to_string(i) + " of `" + name() + "`: ";
    auto value_of = [&b](const std::string& symbol) { return b.Get(symbol); };
    std::vector<int64_t> out;
    for (const auto& rpn : plan_->ast.outputs[i].tensor.shape_rpn) {
      out.push_back(details::contract::EvalRpn(rpn, value_of, what));
    }
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

  /// The export metadata: {"name", "params": [{"name", "type", "kind", "optional", ...}],
  /// "return", "doc", "contract", "outputs": [{"name", "type", "shape": [expr...], "shape_rpn":
  /// [[token...]...], "dtype"}], "symbols": [{"name", "width", "divisibility"}], "env_stream",
  /// "mutates": [param...]}. A param's structured fields are WriteTypeFields's; an output's
  /// shape_rpn has one token list per dimension: ints, symbol names and the operators "+", "-",
  /// "*", "//", "%" (Python's semantics) and "neg".
  std::string MetadataJson(const std::string& return_type, const std::string& doc) const {
    using details::contract::RpnToken;
    const auto& p = *plan_;
    details::JsonWriter w;
    w.BeginObject().Field("name", p.name).Key("params").BeginArray();
    for (size_t i : p.call_params) {
      const details::contract::ParamAst& param = p.ast.params[i];
      w.BeginObject().Field("name", param.name).Field("type", param.type_text);
      details::contract::WriteTypeFields(&w, param.type);
      w.EndObject();
    }
    w.EndArray().Field("return", return_type).Field("doc", doc).Field("contract", p.text);
    w.Key("outputs").BeginArray();
    for (const details::contract::OutputAst& o : p.ast.outputs) {
      w.BeginObject().Field("name", o.name).Field("type", o.type_text).Key("shape").BeginArray();
      for (const std::string& text : o.tensor.shape_texts) w.String(text);
      w.EndArray().Key("shape_rpn").BeginArray();
      for (const auto& rpn : o.tensor.shape_rpn) {
        w.BeginArray();
        for (const RpnToken& t : rpn) {
          if (t.op == RpnToken::kLit) {
            w.Int(t.value);
          } else if (t.op == RpnToken::kSym) {
            w.String(t.symbol);
          } else {
            w.String(details::contract::RpnOpName(t.op));
          }
        }
        w.EndArray();
      }
      w.EndArray().Field("dtype", o.tensor.dtype_text).EndObject();
    }
    w.EndArray().Key("symbols").BeginArray();
    for (const details::contract::SymbolInfo& sym : p.symbols) {
      w.BeginObject()
          .Field("name", sym.name)
          .Field("width", sym.bits == 32 ? "int32" : "int64")
          .Key("divisibility")
          .Int(sym.divisibility)
          .EndObject();
    }
    w.EndArray().Key("env_stream").Bool(p.has_env_stream).Key("mutates").BeginArray();
    for (size_t i : p.call_params) {
      const details::contract::TypeAst& t = p.ast.params[i].type;
      if (t.kind == details::contract::Kind::kTensor && t.tensor.mut)
        w.String(p.ast.params[i].name);
    }
    w.EndArray().EndObject();
    return w.Take();
  }

  /// A function that checks each call against this contract, then calls f with the arguments
  /// (and the environment stream in place of each EnvStream parameter).
  inline Function Wrap(Function f, const char* file = __builtin_FILE(),
                       int line = __builtin_LINE()) const;

  /// The plan (for the function objects).
  const std::shared_ptr<const details::contract::Plan>& plan() const { return plan_; }

 private:
  explicit Contract(std::shared_ptr<const details::contract::Plan> plan) : plan_(std::move(plan)) {}

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
      if (KFFI_LIKELY(!plan.needs_expand)) {
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
      if (!plan.needs_expand) {
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

/// Exports fn like KFFI_EXPORT (<kffi/export.h>), with a contract: a declared signature whose check
/// plan runs before fn on every call (grammar and semantics at the top of this file). The text is
/// parsed when the library is loaded; a malformed contract (or one that does not fit fn's C++
/// parameters) makes Module::Load fail with ValueError "Cannot load module `path`: Invalid
/// contract for `name` at column N: ..." (and, where the library was opened some other way,
/// every call and the metadata query raise it). The metadata gets "contract", the parameters of
/// the contract with their structured fields, "outputs", "symbols", "env_stream" and "mutates".
///   void Scale(kffi::TensorView y, kffi::TensorView x, double factor);
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
  KFFI_SYSTEM_LIB_AUTO_REGISTER_(name)

#endif  // KFFI_CONTRACT_H_
