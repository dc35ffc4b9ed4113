// src/contract/contract_plan.cc: lays a contract's syntax tree out as its check plan: ops in check
// order, symbol slots with their first bindings, and every expectation precomputed (the flat layout
// of include/kffi/contract/plan.h that kernels read).
// SPDX-License-Identifier: Apache-2.0
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "contract/contract_internal.h"

namespace kffi {
namespace details {
namespace contract {
namespace {

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
        p_->layout.has_env_stream = true;
        continue;
      }
      const int32_t arg = p_->layout.num_args++;
      p_->fn_src.push_back(arg);
      p_->fn_stream.push_back(params[i].type.kind == Kind::kStream ? 1 : 0);
      p_->layout.has_stream |= params[i].type.kind == Kind::kStream;
      p_->call_params.push_back(i);
      p_->signature += (arg != 0 ? ", " : "") + params[i].text;
      AddValue(params[i].type, 0, arg, params[i].name, arg, false);
    }
    p_->signature += ")";
    p_->layout.needs_expand = p_->layout.has_env_stream || p_->layout.has_stream;
    // The leading run of same-rank simple tensors (see PlanLayout::uniform_ndim).
    const std::vector<Op>& ops = p_->ops;
    if (!ops.empty() && ops[0].simple >= 1 && ops[0].simple <= 4) {
      size_t k = 0;
      while (k < ops.size() && ops[k].simple == ops[0].simple && ops[k].frame == 0 &&
             ops[k].index == static_cast<int32_t>(k) && ops[k].spec == static_cast<int32_t>(k)) {
        ++k;
      }
      p_->layout.uniform_ndim = ops[0].simple;
      p_->layout.uniform_count = static_cast<int32_t>(k);
    }
    for (const OutputAst& out : p_->ast.outputs) {
      for (const std::vector<RpnToken>& dim : out.tensor.shape_rpn) {
        for (const RpnToken& tok : dim) {
          if (tok.op == RpnOp::kSym && p_->SlotOf(tok.symbol) < 0) {
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
      case Kind::kRecord: {
        // One frame holds the fields of whichever record is being checked: a record's field ops
        // follow it at once, and records do not nest.
        if (record_frame_ == 0) {
          if (next_frame_ >= kMaxFrames) throw SyntaxError{t.pos, "too many tuples (at most 31)"};
          record_frame_ = next_frame_++;
        }
        op.kind = kOpRecord;
        op.out_frame = static_cast<uint8_t>(record_frame_);
        op.spec = static_cast<int32_t>(p_->records.size());
        auto r = std::make_unique<RecordCheck>();
        r->type_key = t.name;
        r->subject = subject;
        r->type = &t;
        p_->records.push_back(std::move(r));
        info.expected = t.name;
        if (t.optional) info.expected += " or None";
        const size_t at = p_->ops.size();
        p_->ops.push_back(op);
        p_->op_info.push_back(std::move(info));
        for (size_t j = 0; j < t.elems.size(); ++j) {
          AddValue(t.elems[j], op.out_frame, static_cast<int32_t>(j),
                   subject + "." + t.field_names[j], arg, under);
          // A field is where its record is ("argument #0"), not an element of a container.
          p_->op_info.back().context = p_->op_info[at].context;
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
      if (c.mode == kDimBind) p_->layout.static_bound |= UINT64_C(1) << slot;
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
    SymbolInfo info{d.symbol, 64, 1, false};
    for (const SymbolDecl& decl : p_->ast.symbols) {
      if (decl.name == d.symbol) {
        info.bits = decl.bits;
        info.divisibility = decl.divisibility;
        info.parallel = decl.parallel;
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
  size_t record_frame_ = 0;  // the frame of record fields (0: no record yet)
};

template <typename T>
const T* DataOrEmpty(const std::vector<T>& v) {
  // A kernel adds offsets to these pointers: never hand it a null one (even for no entries).
  static const T kEmpty{};
  return v.empty() ? &kEmpty : v.data();
}

/// Points the plan's layout at its arrays (after which they never change).
void FillLayout(Plan* p) {
  PlanLayout& l = p->layout;
  l.version = static_cast<uint32_t>(kPlanLayoutVersion);
  l.size = sizeof(PlanLayout);
  l.ops = DataOrEmpty(p->ops);
  l.tensors = DataOrEmpty(p->tensors);
  l.dims = DataOrEmpty(p->dims);
  l.dtypes = DataOrEmpty(p->dtypes);
  l.orders = DataOrEmpty(p->orders);
  l.scalars = DataOrEmpty(p->scalars);
  l.fn_src = DataOrEmpty(p->fn_src);
  l.fn_stream = DataOrEmpty(p->fn_stream);
  l.num_ops = static_cast<int32_t>(p->ops.size());
  l.num_fn_params = static_cast<int32_t>(p->fn_src.size());
  l.num_symbols = static_cast<int32_t>(p->symbols.size());
  l.num_outputs = static_cast<int32_t>(p->ast.outputs.size());
  l.runtime_plan = p;
}

[[noreturn]] void ThrowInvalidContract(std::string_view name, std::string_view text,
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

}  // namespace

std::unique_ptr<Plan> MakePlan(std::string_view name, std::string_view text) {
  auto plan = std::make_unique<Plan>();
  plan->name = std::string(name);
  plan->text = std::string(text);
  try {
    plan->ast = ParseContract(plan->text);
    PlanBuilder(plan.get()).Build();
  } catch (const SyntaxError& e) {
    ThrowInvalidContract(name, text, e);
  }
  FillLayout(plan.get());
  return plan;
}

}  // namespace contract
}  // namespace details
}  // namespace kffi
