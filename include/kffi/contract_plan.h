// include/kffi/contract_plan.h: the check plan of a contract: its flat layout and how the
// syntax tree is laid out as ops (symbol slots, first bindings, precomputed expectations).
#ifndef KFFI_CONTRACT_PLAN_H_
#define KFFI_CONTRACT_PLAN_H_

#include <kffi/contract_parser.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kffi {
namespace details {
namespace contract {

// ---- the check plan ------------------------------------------------------------------------

constexpr size_t kMaxSymbols = 64;
constexpr size_t kMaxFrames = 32;  // the call arguments and one frame per tuple

enum OpKind : uint8_t { kOpTensor, kOpInt, kOpFloat, kOpBool, kOpTuple, kOpStream };
enum DimMode : uint8_t { kDimLiteral, kDimBind, kDimMatch, kDimBindOrMatch };
enum DimFlag : uint8_t { kDimInt32 = 1, kDimDivMask = 2, kDimDivMod = 4 };
enum LayoutKind : uint8_t { kLayoutAny, kLayoutRowMajor, kLayoutOrdered };
enum RangeKind : uint8_t { kRangeNone, kRangeExplicit, kRangeWidth };
/// How a tensor's device index is checked: it sets the reference (the first tensor, always
/// present), compares with it, or does whichever applies (an Optional tensor may come first).
enum RefMode : uint8_t { kRefSet, kRefCompare, kRefDynamic };

/// One value to check, in check order: a call argument or a tuple element.
struct Op {
  uint8_t kind;
  uint8_t simple;     // a required call argument of a tensor whose check makes no call: its
                      // ndim when 1 to 4 (unrolled checks), 5 for other ranks, else 0
  uint8_t optional;   // None is accepted
  uint8_t frame;      // where the value lives: 0 the call arguments, else a tuple's elements
  uint8_t out_frame;  // tuple: the frame that receives its elements
  uint8_t mut;    // a `mut` tensor (a call argument): one whose tensor_flags say read-only fails
  int32_t index;  // position in the frame
  int32_t spec;   // tensor: Plan::tensors[spec]; scalar: Plan::scalars[spec]; tuple: size
  int32_t skip;   // tuple: how many following ops describe its elements
};

/// What a tensor must satisfy, precomputed (all the per-call work is compares).
struct TensorCheck {
  uint64_t arg_mask;         // the bits of the argument's first 8 bytes (type_index, then
                             // tensor_flags) that must equal the type: the read-only flag if mut
  uint64_t align_mask;       // (data + byte_offset) & align_mask must be 0
  uint64_t ndim_dtype;       // the expected bytes 16..23 of the DLTensor: ndim, then dtype
  uint64_t ndim_dtype2;      // the same with the second of two allowed dtypes (else the first)
  uint64_t ndim_dtype_mask;  // covers the dtype half only when one or two dtypes are allowed
  uint64_t offset_mask;      // byte_offset & offset_mask must be 0 (all ones with offset0)
  uint64_t device_mask;      // one bit per allowed device type; 0: any
  uint64_t device_type;      // exactly one allowed device type: it, else 0
  uint64_t device_cmp_mask;  // DLDevice bits compared: type (one allowed), index (kRefCompare)
  uint32_t dtype;            // the bits of the one allowed dtype (num_dtypes == 1)
  int32_t ndim;
  uint16_t num_dtypes;  // 0: any; > 1: Plan::dtypes[dtype_begin, +num_dtypes)
  uint16_t dtype_begin;
  uint16_t dims_begin;     // Plan::dims[dims_begin, +ndim): the shape
  uint16_t strides_begin;  // Plan::dims[strides_begin, +ndim) when has_strides
  uint16_t order_begin;    // Plan::orders[order_begin, +ndim) when layout == kLayoutOrdered
  uint8_t offset0;
  uint8_t layout;
  uint8_t has_strides;
  uint8_t ref;            // RefMode
  uint8_t dynamic_dims;   // a shape entry is kDimBindOrMatch
  uint8_t check_strides;  // layout != kLayoutAny || has_strides
  uint8_t extra;          // ExtraBits has work: alternatives, or ref == kRefDynamic
};

/// One shape or stride entry: a literal, or a symbol that binds here or must match.
struct DimCheck {
  uint8_t mode;
  uint8_t flags;  // binding: kDimInt32 | kDimDivMask | kDimDivMod
  int16_t slot;   // the symbol's slot
  int32_t dim;
  int64_t value;        // literal; binding: the divisor (kDimDivMod)
  uint64_t div_mask;    // binding: divisor - 1 for a power-of-two divisor, else 0
  uint64_t int32_mask;  // binding: all ones when the symbol is int32, else 0
};

struct ScalarCheck {
  uint8_t range;  // RangeKind
  int64_t int_lo, int_hi;
  double float_lo, float_hi;
};

/// Cold data for messages, one per op.
struct OpInfo {
  std::string context;   // "argument #0", "in argument #0" (a tuple element)
  std::string subject;   // "a", "x[1]"
  std::string expected;  // "Tensor", "int32", "Tuple of 2 elements", "Tensor or None"
  const TypeAst* type;   // points into Plan::ast
  bool mut;              // a tensor the function writes (where a conflict is blamed first)
};

struct SymbolInfo {
  std::string name;
  int bits;
  int64_t divisibility;
};

/// A parsed contract and its check plan. Built once; read-only afterwards (shared by threads).
struct Plan {
  Plan() = default;
  Plan(const Plan&) = delete;  // op_info points into ast
  Plan& operator=(const Plan&) = delete;

  std::string name;
  std::string text;
  std::string signature;  // "name(a: Tensor([n], float32), s: int32)"
  ContractAst ast;
  std::vector<Op> ops;
  std::vector<TensorCheck> tensors;
  std::vector<DimCheck> dims;
  std::vector<uint32_t> dtypes;
  std::vector<int32_t> orders;
  std::vector<ScalarCheck> scalars;
  std::vector<OpInfo> op_info;
  std::vector<std::string> dim_names;  // "a.shape[0]", "x[1].strides[0]"
  std::vector<int32_t> dim_ops;        // the op of each DimCheck
  std::vector<SymbolInfo> symbols;     // by slot
  std::vector<int32_t> fn_src;         // per function parameter: its call argument, -1 EnvStream
  std::vector<uint8_t> fn_stream;      // per function parameter: 1 for a Stream argument
  std::vector<size_t> call_params;     // indices into ast.params of the call arguments
  uint64_t static_bound = 0;           // symbols that every passing call binds
  int32_t num_args = 0;
  bool has_env_stream = false;
  bool has_stream = false;    // a Stream parameter (its argument is converted to a pointer)
  bool needs_expand = false;  // has_env_stream || has_stream: ExpandArgs runs before the call
  /// 1 to 4 when the leading uniform_count ops are call arguments in order, each a simple tensor
  /// of that rank (Op::simple) with tensors[i] its check: FastRun runs them without reading ops;
  /// 5 to 8 (the rank + 4) when one of them is `mut` (its read-only flag is checked), so that a
  /// run without `mut` costs nothing for the flag.
  uint8_t uniform_ndim = 0;
  int32_t uniform_count = 0;

  int32_t SlotOf(std::string_view symbol) const {
    for (size_t i = 0; i < symbols.size(); ++i) {
      if (Sv(symbols[i].name) == symbol) return static_cast<int32_t>(i);
    }
    return -1;
  }
};

inline uint32_t DtypeBits(DLDataType t) {
  return static_cast<uint32_t>(t.code) | (static_cast<uint32_t>(t.bits) << 8) |
         (static_cast<uint32_t>(t.lanes) << 16);
}

/// Lays the syntax tree out as ops, in the order the checks run.
class PlanBuilder {
 public:
  explicit PlanBuilder(Plan* plan) : p_(plan) {}

  void Build() {
    const std::vector<ParamAst>& params = p_->ast.params;
    p_->signature = p_->name + "(";
    for (size_t i = 0; i < params.size(); ++i) {
      for (size_t j = 0; j < i; ++j) {
        if (params[j].name == params[i].name) {
          throw SyntaxError{params[i].pos, "duplicate parameter `" + params[i].name + "`"};
        }
      }
      if (params[i].type.kind == Kind::kEnvStream) {
        p_->fn_src.push_back(-1);
        p_->fn_stream.push_back(0);
        p_->has_env_stream = true;
        continue;
      }
      const int32_t arg = p_->num_args++;
      p_->fn_src.push_back(arg);
      p_->fn_stream.push_back(params[i].type.kind == Kind::kStream ? 1 : 0);
      p_->has_stream |= params[i].type.kind == Kind::kStream;
      p_->call_params.push_back(i);
      p_->signature += (arg != 0 ? ", " : "") + params[i].text;
      AddValue(params[i].type, 0, arg, params[i].name, arg, false);
    }
    p_->signature += ")";
    p_->needs_expand = p_->has_env_stream || p_->has_stream;
    // The leading run of same-rank simple tensors (see Plan::uniform_ndim).
    const std::vector<Op>& ops = p_->ops;
    if (!ops.empty() && ops[0].simple >= 1 && ops[0].simple <= 4) {
      size_t k = 0;
      while (k < ops.size() && ops[k].simple == ops[0].simple && ops[k].frame == 0 &&
             ops[k].index == static_cast<int32_t>(k) && ops[k].spec == static_cast<int32_t>(k)) {
        ++k;
      }
      bool any_mut = false;
      for (size_t j = 0; j < k; ++j) any_mut |= ops[j].mut != 0;
      p_->uniform_ndim = static_cast<uint8_t>(ops[0].simple + (any_mut ? 4 : 0));
      p_->uniform_count = static_cast<int32_t>(k);
    }
    for (const OutputAst& out : p_->ast.outputs) {
      for (const std::vector<RpnToken>& dim : out.tensor.shape_rpn) {
        for (const RpnToken& tok : dim) {
          if (tok.op == RpnToken::kSym && p_->SlotOf(tok.symbol) < 0) {
            throw SyntaxError{tok.pos, "symbol `" + tok.symbol + "` is not bound by any parameter"};
          }
        }
      }
    }
    if (p_->dims.size() > UINT16_MAX || p_->dtypes.size() > UINT16_MAX ||
        p_->orders.size() > UINT16_MAX) {
      throw SyntaxError{0, "the contract is too large"};
    }
  }

 private:
  struct SymbolState {
    bool seen = false;
    bool bound = false;  // bound by an occurrence that is always checked (not under Optional)
  };

  void AddValue(const TypeAst& t, uint8_t frame, int32_t index, const std::string& subject,
                int32_t arg, bool under_optional) {
    Op op{};
    op.optional = t.optional ? 1 : 0;
    op.frame = frame;
    op.index = index;
    OpInfo info;
    info.context = (frame == 0 ? "" : "in ") + std::string("argument #") + std::to_string(arg);
    info.subject = subject;
    info.type = &t;
    info.mut = t.kind == Kind::kTensor && t.tensor.mut;
    const bool under = under_optional || t.optional;
    switch (t.kind) {
      case Kind::kTensor:
        op.kind = kOpTensor;
        op.mut = t.tensor.mut ? 1 : 0;
        op.spec = AddTensor(t, subject, under);
        info.expected = "Tensor";
        break;
      case Kind::kStream:
        op.kind = kOpStream;
        info.expected = "Stream (an opaque pointer, an int handle or None)";
        break;
      case Kind::kInt:
      case Kind::kFloat:
      case Kind::kBool: {
        op.kind = t.kind == Kind::kInt ? kOpInt : t.kind == Kind::kFloat ? kOpFloat : kOpBool;
        ScalarCheck c{};
        c.range = t.has_range ? kRangeExplicit : t.bits == 32 ? kRangeWidth : kRangeNone;
        c.int_lo = t.has_range ? t.int_lo : INT32_MIN;
        c.int_hi = t.has_range ? t.int_hi : INT32_MAX;
        c.float_lo = t.float_lo;
        c.float_hi = t.float_hi;
        op.spec = static_cast<int32_t>(p_->scalars.size());
        p_->scalars.push_back(c);
        info.expected = t.name;
        break;
      }
      case Kind::kTuple: {
        if (next_frame_ >= kMaxFrames) throw SyntaxError{t.pos, "too many tuples (at most 31)"};
        op.kind = kOpTuple;
        op.out_frame = static_cast<uint8_t>(next_frame_++);
        op.spec = static_cast<int32_t>(t.elems.size());
        info.expected = "Tuple of " + std::to_string(t.elems.size()) + " element" +
                        (t.elems.size() == 1 ? "" : "s");
        if (t.optional) info.expected += " or None";
        const size_t at = p_->ops.size();
        p_->ops.push_back(op);
        p_->op_info.push_back(std::move(info));
        for (size_t j = 0; j < t.elems.size(); ++j) {
          AddValue(t.elems[j], op.out_frame, static_cast<int32_t>(j),
                   subject + "[" + std::to_string(j) + "]", arg, under);
        }
        p_->ops[at].skip = static_cast<int32_t>(p_->ops.size() - at - 1);
        return;
      }
      case Kind::kEnvStream:
        return;  // never reached: parameters only, handled by Build
    }
    if (t.optional) info.expected += " or None";
    if (op.kind == kOpTensor && frame == 0 && !t.optional) {
      const TensorCheck& c = p_->tensors[static_cast<size_t>(op.spec)];
      const bool simple = !c.extra && !c.dynamic_dims && !c.has_strides &&
                          (c.layout == kLayoutAny || c.layout == kLayoutRowMajor);
      op.simple = !simple ? 0 : c.ndim >= 1 && c.ndim <= 4 ? static_cast<uint8_t>(c.ndim) : 5;
    }
    p_->ops.push_back(op);
    p_->op_info.push_back(std::move(info));
  }

  int32_t AddTensor(const TypeAst& t, const std::string& subject, bool under) {
    const TensorAst& ts = t.tensor;
    TensorCheck c{};
    c.arg_mask =
        UINT64_C(0xffffffff) | (ts.mut ? static_cast<uint64_t>(kKFFITensorFlagReadOnly) << 32 : 0);
    c.align_mask = ts.align > 0 ? static_cast<uint64_t>(ts.align - 1) : 0;
    for (int32_t d : ts.device_types) c.device_mask |= UINT64_C(1) << d;
    if (ts.device_types.size() == 1) {
      c.device_type = static_cast<uint32_t>(ts.device_types[0]);
      c.device_cmp_mask = UINT64_C(0xffffffff);
    }
    c.num_dtypes = static_cast<uint16_t>(ts.dtypes.size());
    if (ts.dtypes.size() == 1) c.dtype = DtypeBits(ts.dtypes[0]);
    c.dtype_begin = static_cast<uint16_t>(p_->dtypes.size());
    if (ts.dtypes.size() > 1) {
      for (DLDataType d : ts.dtypes) p_->dtypes.push_back(DtypeBits(d));
    }
    c.ndim = static_cast<int32_t>(ts.shape.size());
    c.ndim_dtype = static_cast<uint32_t>(c.ndim) | (static_cast<uint64_t>(c.dtype) << 32);
    c.ndim_dtype2 =
        ts.dtypes.size() == 2
            ? static_cast<uint32_t>(c.ndim) | (static_cast<uint64_t>(DtypeBits(ts.dtypes[1])) << 32)
            : c.ndim_dtype;
    if (ts.dtypes.size() == 2) {
      c.ndim_dtype |= static_cast<uint64_t>(DtypeBits(ts.dtypes[0])) << 32;
    }
    c.ndim_dtype_mask =
        ts.dtypes.size() == 1 || ts.dtypes.size() == 2 ? ~UINT64_C(0) : UINT64_C(0xffffffff);
    c.offset_mask = ts.offset0 ? ~UINT64_C(0) : 0;
    c.ref = ref_state_ == 2 ? kRefCompare : (ref_state_ == 0 && !under) ? kRefSet : kRefDynamic;
    if (c.ref == kRefCompare) c.device_cmp_mask |= UINT64_C(0xffffffff) << 32;
    ref_state_ = under && ref_state_ < 2 ? 1 : 2;
    c.dims_begin = static_cast<uint16_t>(p_->dims.size());
    for (size_t i = 0; i < ts.shape.size(); ++i) {
      AddDim(ts.shape[i], i, subject + ".shape[" + std::to_string(i) + "]", under);
    }
    c.offset0 = ts.offset0 ? 1 : 0;
    if (ts.compact) {
      bool identity = true;
      for (size_t i = 0; i < ts.order.size(); ++i) identity &= ts.order[i] == static_cast<int>(i);
      c.layout = identity ? kLayoutRowMajor : kLayoutOrdered;
      c.order_begin = static_cast<uint16_t>(p_->orders.size());
      if (!identity) p_->orders.insert(p_->orders.end(), ts.order.begin(), ts.order.end());
    }
    if (!ts.strides.empty()) {
      c.has_strides = 1;
      c.strides_begin = static_cast<uint16_t>(p_->dims.size());
      for (size_t i = 0; i < ts.strides.size(); ++i) {
        AddDim(ts.strides[i], i, subject + ".strides[" + std::to_string(i) + "]", under);
      }
    }
    for (int32_t i = 0; i < c.ndim; ++i) {
      c.dynamic_dims |= p_->dims[c.dims_begin + static_cast<size_t>(i)].mode == kDimBindOrMatch;
    }
    c.check_strides = c.layout != kLayoutAny || c.has_strides;
    c.extra =
        (c.device_mask != 0 && c.device_type == 0) || c.num_dtypes > 2 || c.ref == kRefDynamic;
    p_->tensors.push_back(c);
    return static_cast<int32_t>(p_->tensors.size() - 1);
  }

  void AddDim(const DimAst& d, size_t dim, std::string name, bool under) {
    DimCheck c{};
    c.dim = static_cast<int32_t>(dim);
    if (!d.is_symbol) {
      c.mode = kDimLiteral;
      c.value = d.literal;
    } else {
      int32_t slot = p_->SlotOf(d.symbol);
      if (slot < 0) slot = NewSlot(d);
      SymbolState& st = state_[static_cast<size_t>(slot)];
      c.mode = st.bound ? kDimMatch : (!st.seen && !under) ? kDimBind : kDimBindOrMatch;
      st.seen = true;
      st.bound |= !under;
      const SymbolInfo& info = p_->symbols[static_cast<size_t>(slot)];
      if (info.bits == 32) {
        c.flags |= kDimInt32;
        c.int32_mask = ~UINT64_C(0);
      }
      const int64_t div = info.divisibility;
      if (c.mode == kDimBind) p_->static_bound |= UINT64_C(1) << slot;
      if (div > 1 && (div & (div - 1)) == 0) {
        c.flags |= kDimDivMask;
        c.div_mask = static_cast<uint64_t>(div - 1);
      } else if (div > 1) {
        c.flags |= kDimDivMod;
        c.value = div;
      }
      c.slot = static_cast<int16_t>(slot);
    }
    p_->dims.push_back(c);
    p_->dim_names.push_back(std::move(name));
    p_->dim_ops.push_back(static_cast<int32_t>(p_->ops.size()));  // its op comes next
  }

  int32_t NewSlot(const DimAst& d) {
    if (p_->symbols.size() >= kMaxSymbols) {
      throw SyntaxError{d.pos, "too many symbols (at most 64)"};
    }
    SymbolInfo info{d.symbol, 64, 1};
    for (const SymbolDecl& decl : p_->ast.symbols) {
      if (decl.name == d.symbol) {
        info.bits = decl.bits;
        info.divisibility = decl.divisibility;
      }
    }
    p_->symbols.push_back(std::move(info));
    state_.emplace_back();
    return static_cast<int32_t>(p_->symbols.size() - 1);
  }

  Plan* p_;
  std::vector<SymbolState> state_;
  int ref_state_ = 0;  // device reference: 0 no tensor yet, 1 maybe set, 2 set
  size_t next_frame_ = 1;
};

}  // namespace contract
}  // namespace details
}  // namespace kffi

#endif  // KFFI_CONTRACT_PLAN_H_
