// src/contract/contract_explain.cc: the explaining check (the message of a call's first failed
// check), the C++ signature check and output shapes of contracts.
//
// The explaining run is cold: it runs when a kernel's inline check (FastRun, contract/details.h)
// failed, and goes through the checks one by one in catalogue order, stopping at the first
// failure, which it describes. The predicates are the fast run's (BindBits, LayoutOk, StridesOf,
// FastOther), so the two agree on every input: tests/cpp/contract/test_contract_fuzz.cc and
// tests/fuzz/contract_fuzzer.cc hold them to it.
// SPDX-License-Identifier: Apache-2.0
#include <kffi/contract/shape_rpn.h>
#include <kffi/optional.h>

#include <cfloat>
#include <cstdint>
#include <string>
#include <vector>

#include "contract/contract_internal.h"
#include "core/json_writer.h"
#include "core/runtime_internal.h"

namespace kffi {
namespace details {
namespace contract {
namespace {

// ---- messages (cold: built only when a check fails) -----------------------------------------
// Every message names the parameter (or its field) first, then what was expected and what was
// received, and ends with the signature once: "b.shape[0]: expected n = 128 (as a.shape[0]),
// got 126 (argument #1 of `add_one(a: Tensor([n], float32), b: Tensor([n], float32))`)".

std::string Ints(const int64_t* v, int32_t n) {
  std::string out = "[";
  for (int32_t i = 0; i < n; ++i) out += (i ? ", " : "") + std::to_string(v[i]);
  return out + "]";
}

/// Fills f: "<subject>: expected <expected>, got <got> (argument #k of `sig`)"; *got_offset
/// (when not NULL): where got starts in it.
void Describe(const Plan& p, Failure* f, Check check, const char* kind, int32_t op, int32_t blamed,
              const std::string& subject, const std::string& expected, const std::string& got,
              size_t* got_offset = nullptr) {
  f->check = check;
  f->op = op;
  f->blamed = blamed;
  f->kind = kind;
  f->message =
      ArgumentMessage(subject, expected, got, p.op_info[static_cast<size_t>(blamed)].context,
                      p.signature, got_offset);
}

/// The argument count.
void DescribeCount(const Plan& p, Failure* f, int32_t got) {
  f->check = Check::kCount;
  f->kind = "TypeError";
  f->message = ArgumentMessage(p.name, kffi::details::Counted(p.layout.num_args, "argument"),
                               std::to_string(got), "", p.signature);
}

void DescribeType(const Plan& p, Failure* f, size_t op, const KFFIAny* v) {
  const std::string type = AnyTypeStr(v);
  std::string got = type;
  if (p.ops[op].kind == kOpTuple && (v->type_index == kKFFIArray || v->type_index == kKFFIList)) {
    int64_t n = static_cast<const KFFISeqCell*>(KFFIObjectGetCellPtr(v->v_obj))->size;
    got += " of " + std::to_string(n) + " element" + (n == 1 ? "" : "s");
  }
  const int32_t i = static_cast<int32_t>(op);
  size_t got_offset = 0;
  Describe(p, f, Check::kType, "TypeError", i, i, p.op_info[op].subject, p.op_info[op].expected,
           got, &got_offset);
  f->typed_arg = v;
  f->type_offset = got_offset;
  f->type_size = type.size();
}

/// A conflict between the op that set a value (ref_op, ref_name) and the op that differs from it
/// (op, name): the message starts with the `mut` side when only one side is `mut` (the function
/// writes it, so the inputs are more likely right), else with the later one.
void DescribeConflict(const Plan& p, Failure* f, Check check, int32_t op, const std::string& name,
                      int64_t value, int32_t ref_op, const std::string& ref_name, int64_t ref_value,
                      const std::string& symbol) {
  const bool blame_ref =
      p.op_info[static_cast<size_t>(ref_op)].mut && !p.op_info[static_cast<size_t>(op)].mut;
  const std::string& subject = blame_ref ? ref_name : name;
  const std::string& other = blame_ref ? name : ref_name;
  const std::string sym = symbol.empty() ? "" : symbol + " = ";
  Describe(p, f, check, "ValueError", op, blame_ref ? ref_op : op, subject,
           sym + std::to_string(blame_ref ? value : ref_value) + " (as " + other + ")",
           std::to_string(blame_ref ? ref_value : value));
}

class Explainer {
 public:
  Explainer(const Plan& p, Failure* f) : p_(p), f_(f) {}

  /// Fills the Failure of the first failed check; false when every check passes.
  bool Run(const KFFIAny* args, int32_t num_args) {
    if (num_args != p_.layout.num_args) {
      DescribeCount(p_, f_, num_args);
      return true;
    }
    st_.frames[0] = args;
    for (size_t i = 0; i < p_.ops.size(); ++i) {
      const Op& op = p_.ops[i];
      const KFFIAny* v = st_.frames[op.frame] + op.index;
      const DLTensor* t = op.kind == kOpTensor ? TensorOf(v) : nullptr;
      if (t != nullptr) {
        if (Tensor(i, op, v, t)) return true;
        continue;
      }
      const size_t at = i;
      if (op.kind == kOpRecord && !(op.optional && v->type_index == kKFFINone)) {
        if (Record(i, op, v)) return true;
        continue;
      }
      if (FastOther(p_.layout, op, v, &st_, &i)) continue;
      const bool typed = op.kind == kOpInt ? v->type_index == kKFFIInt || v->type_index == kKFFIBool
                         : op.kind == kOpFloat
                             ? v->type_index == kKFFIFloat || v->type_index == kKFFIInt ||
                                   v->type_index == kKFFIBool
                             : false;
      if (!typed) {
        DescribeType(p_, f_, at, v);
      } else {
        Range(at, v);
      }
      return true;
    }
    return false;
  }

 private:
  void Fail(Check check, size_t op, const std::string& subject, const std::string& expected,
            const std::string& got) {
    const int32_t i = static_cast<int32_t>(op);
    // A wrong dtype is a TypeError wherever kffi checks it (DispatchDtype, CheckDtype, kffi.jax):
    // one `except` catches it from every path. The rest are values of the right type.
    Describe(p_, f_, check, check == Check::kDtype ? "TypeError" : "ValueError", i, i, subject,
             expected, got);
  }

  /// A record argument: its type, then whether its fields can be read (their values are checked
  /// by the field ops that follow).
  bool Record(size_t op, const Op& o, const KFFIAny* v) {
    std::string why;
    switch (ReadRecordFields(p_.layout, o, v, &st_, &why)) {
      case RecordRead::kOk:
        return false;
      case RecordRead::kType:
        DescribeType(p_, f_, op, v);
        return true;
      case RecordRead::kUnresolved:
        f_->check = Check::kType;
        f_->op = f_->blamed = static_cast<int32_t>(op);
        f_->kind = "ValueError";
        f_->message = p_.records[static_cast<size_t>(o.spec)]->error;
        return true;
      default:  // kGetter
        Fail(Check::kType, op, p_.op_info[op].subject + "." + why.substr(0, why.find(':')),
             "a readable field", why.substr(why.find(':') + 2));
        return true;
    }
  }

  void Range(size_t op, const KFFIAny* v) {
    const TypeAst& t = *p_.op_info[op].type;
    std::string range = t.has_range            ? "range " + t.range_text
                        : t.kind == Kind::kInt ? "int32 range [-2147483648, 2147483647]"
                                               : "float32 range [" + FormatDouble(-FLT_MAX) + ", " +
                                                     FormatDouble(FLT_MAX) + "]";
    Fail(Check::kRange, op, p_.op_info[op].subject, "a value in " + range,
         v->type_index == kKFFIFloat ? FormatDouble(v->v_float64)
         : t.kind == Kind::kFloat    ? FormatDouble(static_cast<double>(v->v_int64))
                                     : std::to_string(v->v_int64));
  }

  /// The shape or stride entries [first, first + n) against their checks.
  bool Dims(size_t op, size_t first, const int64_t* v, int32_t n, Check check) {
    for (int32_t i = 0; i < n; ++i) {
      const size_t di = first + static_cast<size_t>(i);
      const DimCheck& d = p_.dims[di];
      const std::string& name = p_.dim_names[di];
      const std::string& sym = d.mode == kDimLiteral ? name : p_.symbols[d.slot].name;
      const bool bound = d.mode == kDimBindOrMatch && ((st_.bound >> d.slot) & 1) != 0;
      if (d.mode == kDimLiteral) {
        if (v[i] != d.value) {
          Fail(check, op, name, std::to_string(d.value), std::to_string(v[i]));
          return true;
        }
      } else if (d.mode == kDimMatch || bound) {
        if (v[i] != st_.values[d.slot]) {
          const size_t ref = static_cast<size_t>(st_.site[d.slot]);
          DescribeConflict(p_, f_, check, static_cast<int32_t>(op), name, v[i], p_.dim_ops[ref],
                           p_.dim_names[ref], st_.values[d.slot], sym);
          return true;
        }
      } else {
        if (d.int32_mask != 0 && v[i] != static_cast<int32_t>(v[i])) {
          Fail(check, op, name, sym + " in int32 range [-2147483648, 2147483647]",
               std::to_string(v[i]));
          return true;
        }
        if (BindBits(d, v[i]) != 0) {
          Fail(check, op, name,
               sym + " divisible by " + std::to_string(p_.symbols[d.slot].divisibility),
               std::to_string(v[i]));
          return true;
        }
        st_.values[d.slot] = v[i];
        st_.site[d.slot] = static_cast<int32_t>(di);
        st_.bound |= UINT64_C(1) << d.slot;
      }
    }
    return false;
  }

  bool Tensor(size_t op, const Op& o, const KFFIAny* v, const DLTensor* t) {
    const TensorCheck& c = p_.tensors[o.spec];
    const TensorAst& ts = p_.op_info[op].type->tensor;
    const std::string& x = p_.op_info[op].subject;
    if (WritableMissing(o, v)) {
      Fail(Check::kWritable, op, x, "a writable tensor (the parameter is declared `mut`)",
           "a read-only tensor");
      return true;
    }
    const uint64_t first = reinterpret_cast<uintptr_t>(t->data) + t->byte_offset;
    if ((first & c.align_mask) != 0) {
      Fail(Check::kAlign, op, x, "data aligned to " + std::to_string(ts.align) + " bytes",
           "data aligned to " + std::to_string(first & (0 - first)) + " bytes");
      return true;
    }
    if (st_.device_op < 0) {
      st_.device_op = static_cast<int32_t>(op);
      st_.device_id = t->device.device_id;
    } else if (t->device.device_id != st_.device_id) {
      const std::string ref = p_.op_info[static_cast<size_t>(st_.device_op)].subject;
      DescribeConflict(p_, f_, Check::kDeviceIndex, static_cast<int32_t>(op), x + ".device.index",
                       t->device.device_id, st_.device_op, ref + ".device.index", st_.device_id,
                       "");
      return true;
    }
    if (t->ndim != c.ndim) {
      Fail(Check::kNdim, op, x + ".ndim", std::to_string(c.ndim), std::to_string(t->ndim));
      return true;
    }
    const uint32_t dt = static_cast<uint32_t>(t->device.device_type);
    if (c.device_mask != 0 && (dt >= 64 || ((c.device_mask >> dt) & 1) == 0)) {
      Fail(Check::kDeviceType, op, x + ".device", ts.device_text,
           DeviceTypeName(t->device.device_type));
      return true;
    }
    const uint32_t dtype = DtypeBits(t->dtype);
    bool dtype_ok = c.num_dtypes == 0 || (c.num_dtypes == 1 && dtype == c.dtype);
    for (uint16_t i = 0; c.num_dtypes > 1 && i < c.num_dtypes; ++i) {
      dtype_ok |= p_.dtypes[c.dtype_begin + i] == dtype;
    }
    if (!dtype_ok) {
      Fail(Check::kDtype, op, x + ".dtype", ts.dtype_text, DataTypeToString(t->dtype));
      return true;
    }
    if (c.offset0 && t->byte_offset != 0) {
      Fail(Check::kByteOffset, op, x + ".byte_offset", "0", std::to_string(t->byte_offset));
      return true;
    }
    if (Dims(op, c.dims_begin, t->shape, c.ndim, Check::kShape)) return true;
    if (c.layout == kLayoutAny && !c.has_strides) return false;
    int64_t buf[kMaxNdim];
    const int64_t* strides = StridesOf(t, buf);
    if (c.layout != kLayoutAny && !LayoutOk(p_.layout, c, t, strides)) {
      Fail(Check::kLayout, op, x + ".strides", ts.layout_text,
           Ints(strides, t->ndim) + " for shape " + Ints(t->shape, t->ndim));
      return true;
    }
    return c.has_strides && Dims(op, c.strides_begin, strides, c.ndim, Check::kStrides);
  }

  const Plan& p_;
  Failure* f_;
  RunState st_;
};

/// The C++ parameter types that may write their tensor (kffi::TensorView, DLTensor*) say so in
/// their TypeStr.
constexpr std::string_view kWritableTensor = "Tensor(mut)";
/// The C++ parameter types that only read their tensor (kffi::ConstTensorView, const DLTensor*)
/// say so to the contract check (kffi/contract.h ContractTypeStrOf); their signatures say
/// "Tensor". Libraries built before that say "Tensor" here too, and are taken as before.
constexpr std::string_view kReadOnlyTensor = "Tensor(const)";

/// Whether a C++ parameter type (its TypeStr) can receive values of a contract type. A C++ type
/// that may write a tensor needs a `mut` contract tensor (the contract lets read-only memory reach
/// the others); a read-only one (ConstTensorView, an owned Tensor) takes either.
bool CppTypeFits(const TypeAst& t, std::string_view cpp, bool outer = true) {
  auto starts = [&](std::string_view prefix) { return cpp.substr(0, prefix.size()) == prefix; };
  if (cpp == Sv("Any")) return true;
  // An Optional C++ parameter takes any value of the contract type; a plain one no None.
  std::string_view inner;
  if (outer && kffi::details::OptionalTypeInner(cpp, &inner)) return CppTypeFits(t, inner, false);
  if (outer && t.optional) return false;
  switch (t.kind) {
    case Kind::kTensor:
      return cpp == Sv("Tensor") || (cpp == kWritableTensor && t.tensor.mut) ||
             (cpp == kReadOnlyTensor && !t.tensor.mut);
    case Kind::kInt:
      return starts("int") || starts("uint");
    case Kind::kFloat:
      return cpp == Sv("float") || cpp == Sv("float32");
    case Kind::kBool:
      return cpp == Sv("bool");
    case Kind::kRecord:  // the object type, or a KFFI_RECORD struct (its type key either way), or
                         // any object (kffi::ObjectRef)
      return cpp == Sv(t.name) || cpp == Sv("Object");
    case Kind::kTuple:  // elements are never `mut`
      return (starts("Tuple<") || starts("Array<") || starts("List<")) &&
             cpp.find(kWritableTensor) == std::string_view::npos;
    default:  // kStream, kEnvStream
      return cpp == Sv("void*");
  }
}

}  // namespace

Failure Explain(const Plan& p, const KFFIAny* args, int32_t num_args) {
  Failure f;
  Explainer(p, &f).Run(args, num_args);
  return f;
}

void CheckCppSignature(const Plan& p, const std::vector<std::string>& cpp) {
  auto fail = [&](const std::string& why) {
    throw Error("ValueError", "Invalid contract for `" + p.name + "`: " + why);
  };
  if (cpp.size() != p.fn_src.size()) {
    fail("it declares " +
         kffi::details::Counted(static_cast<int64_t>(p.fn_src.size()), "parameter") +
         " (EnvStream included) but the C++ function takes " + std::to_string(cpp.size()));
  }
  for (size_t i = 0; i < cpp.size(); ++i) {
    const ParamAst& param = p.ast.params[i];
    const size_t writable = cpp[i].find(kWritableTensor);
    if (writable != std::string::npos && !CppTypeFits(param.type, cpp[i]) &&
        CppTypeFits(param.type,
                    std::string(cpp[i]).replace(writable, kWritableTensor.size(), "Tensor"))) {
      fail("parameter #" + std::to_string(i) + " `" + param.text +
           "` is read-only (not `mut`), but its C++ type (kffi::TensorView or DLTensor*) may "
           "write it: declare it kffi::ConstTensorView (or const DLTensor*) if the function "
           "only reads it, or mark it `mut`");
    }
    // The mirror: a `mut` tensor whose C++ type only reads it would have the contract promise
    // writes (an aliased JAX output, a mutating torch op) that the function cannot make.
    if (Sv(cpp[i]) == kReadOnlyTensor && param.type.kind == Kind::kTensor &&
        param.type.tensor.mut) {
      fail("parameter #" + std::to_string(i) + " `" + param.text +
           "` is `mut`, but its C++ type (kffi::ConstTensorView or const DLTensor*) only reads "
           "it: declare it kffi::TensorView (or DLTensor*) if the function writes it, or drop "
           "`mut`");
    }
    if (!CppTypeFits(param.type, cpp[i])) {
      // "Tensor(const)" is the check's word only: say "Tensor", as signatures do.
      fail("parameter #" + std::to_string(i) + " `" + param.text +
           "` cannot be passed to the C++ parameter of type `" +
           (Sv(cpp[i]) == kReadOnlyTensor ? std::string("Tensor") : cpp[i]) + "`");
    }
  }
}

namespace {

/// Evaluates an output-shape expression with libkffi's int64 domain of the one RPN evaluator
/// (kffi/contract/shape_rpn.h; kffi._abstract.eval_shape_rpn is the same evaluator over Python
/// values). A problem (an unbound symbol, a division by zero, an int64 overflow) is a ValueError
/// whose message starts with `what`.
class IntRpnDomain {
 public:
  using Value = int64_t;
  IntRpnDomain(const Plan& p, const std::vector<RpnToken>& rpn, const int64_t* values,
               uint64_t bound, const std::string& what)
      : p_(p), rpn_(rpn), values_(values), bound_(bound), what_(what) {}

  void Token(size_t i, RpnOp* op, int64_t* literal, int64_t* symbol_value) {
    const RpnToken& t = rpn_[i];
    *op = t.op;
    if (t.op == RpnOp::kLit) *literal = t.value;
    if (t.op == RpnOp::kSym) {
      const int32_t slot = p_.SlotOf(t.symbol);
      if (slot < 0 || ((bound_ >> slot) & 1) == 0) {
        KFFI_THROW(ValueError) << what_ << "symbol `" << t.symbol << "` is not bound";
      }
      *symbol_value = values_[slot];
    }
  }
  int64_t Int(int64_t v) { return v; }
  bool AsInt(int64_t v, int64_t* out) {
    *out = v;
    return true;
  }
  int64_t Apply(RpnOp, int64_t, int64_t) { return 0; }  // never: every value is concrete
  [[noreturn]] void Fail(RpnFailure why, RpnOp, size_t) {
    if (why == RpnFailure::kDivisionByZero) Fail("division by zero");
    if (why == RpnFailure::kModuloByZero) Fail("modulo by zero");
    if (why == RpnFailure::kOverflow) Fail("int64 overflow");
    Fail("malformed expression");  // the parser never makes one
  }
  [[noreturn]] void Fail(const char* text) { KFFI_THROW(ValueError) << what_ << text; }

 private:
  const Plan& p_;
  const std::vector<RpnToken>& rpn_;
  const int64_t* values_;
  uint64_t bound_;
  const std::string& what_;
};

int64_t EvalRpn(const Plan& p, const std::vector<RpnToken>& rpn, const int64_t* values,
                uint64_t bound, const std::string& what) {
  IntRpnDomain domain(p, rpn, values, bound, what);
  return details::EvalRpn(domain, rpn.size());
}

}  // namespace

std::vector<int64_t> OutputShape(const Plan& p, int64_t i, const int64_t* values, uint64_t bound) {
  const size_t n = p.ast.outputs.size();
  if (i < 0 || static_cast<uint64_t>(i) >= n) {
    KFFI_THROW(IndexError) << "Output #" << i << " out of range: `" << p.name << "` declares " << n
                           << " outputs";
  }
  const std::string what =
      "Cannot evaluate the shape of output #" + std::to_string(i) + " of `" + p.name + "`: ";
  std::vector<int64_t> out;
  for (const auto& rpn : p.ast.outputs[static_cast<size_t>(i)].tensor.shape_rpn) {
    out.push_back(EvalRpn(p, rpn, values, bound, what));
  }
  return out;
}

}  // namespace contract
}  // namespace details
}  // namespace kffi
