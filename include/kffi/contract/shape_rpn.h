// include/kffi/contract/shape_rpn.h: the one evaluator of contract output shapes (RPN expressions).
//
// Internal (kffi::details). A contract's output dimension is an expression of its symbols, kept
// in reverse Polish notation (the metadata's shape_rpn: ints, symbol names and the operators "+",
// "-", "*", "//", "%" with Python's semantics, and "neg"). One stack machine evaluates it for
// every caller, over the value type each needs:
//   - int64 in libkffi (kffi::Contract::OutputShape, the contract checker);
//   - Python objects in kffi._core (kffi._abstract.eval_shape_rpn: ints, or symbolic dimensions
//     such as torch.SymInt or JAX's, used only through the operators);
//   - c10::SymInt in the torch glue's meta kernels (kffi::torch::RegisterOps).
// Concrete operands always go through the checked int64 arithmetic below; a domain computes only
// with symbolic values. Header only: the torch glue is built apart from libkffi.
// SPDX-License-Identifier: Apache-2.0
#ifndef KFFI_CONTRACT_SHAPE_RPN_H_
#define KFFI_CONTRACT_SHAPE_RPN_H_

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <utility>
#include <vector>

namespace kffi {
namespace details {

/// A token's operation.
enum class RpnOp : uint8_t { kLit, kSym, kAdd, kSub, kMul, kFloorDiv, kMod, kNeg };

/// Why an evaluation failed (the domain words the message).
enum class RpnFailure : uint8_t {
  kMissingOperand,  // an operator without enough operands on the stack
  kDivisionByZero,
  kModuloByZero,
  kOverflow,   // an int64 overflow
  kLeftovers,  // the expression leaves other than one value
};

/// The operator's spelling in metadata ("+", "-", "*", "//", "%", "neg"), nullptr for operands.
inline const char* RpnOpName(RpnOp op) {
  switch (op) {
    case RpnOp::kAdd:
      return "+";
    case RpnOp::kSub:
      return "-";
    case RpnOp::kMul:
      return "*";
    case RpnOp::kFloorDiv:
      return "//";
    case RpnOp::kMod:
      return "%";
    case RpnOp::kNeg:
      return "neg";
    default:
      return nullptr;
  }
}

/// The operator spelled name in metadata (RpnOpName's inverse); false for any other text (an
/// operand: a symbol's name). The one reader of the spellings, for every evaluator's tokens.
inline bool RpnOpFromName(std::string_view name, RpnOp* out) {
  for (RpnOp op :
       {RpnOp::kAdd, RpnOp::kSub, RpnOp::kMul, RpnOp::kFloorDiv, RpnOp::kMod, RpnOp::kNeg}) {
    if (name == std::string_view(RpnOpName(op))) {
      *out = op;
      return true;
    }
  }
  return false;
}

/// A binary operator on int64 with Python's semantics (floor division, a modulo with the sign of
/// the divisor); false on an int64 overflow. The divisor of // and % is not zero (checked before).
inline bool RpnIntOp(RpnOp op, int64_t a, int64_t c, int64_t* r) {
  switch (op) {
    case RpnOp::kAdd:
      return !__builtin_add_overflow(a, c, r);
    case RpnOp::kSub:
      return !__builtin_sub_overflow(a, c, r);
    case RpnOp::kMul:
      return !__builtin_mul_overflow(a, c, r);
    default:
      if (a == INT64_MIN && c == -1) {
        *r = 0;
        return op == RpnOp::kMod;  // INT64_MIN // -1 = 2**63
      }
      *r = op == RpnOp::kFloorDiv ? a / c : a % c;
      if (a % c != 0 && ((a < 0) != (c < 0))) *r += op == RpnOp::kFloorDiv ? -1 : c;
      return true;
  }
}

/// Evaluates the n tokens of one expression. The domain D provides:
///   using Value = ...;                         // a concrete int64 or a symbolic value
///   void Token(size_t i, RpnOp* op, int64_t* literal, Value* symbol_value);
///       // reads token i: an operator, a literal, or a symbol's value (D fails for an unbound
///       // symbol or an unreadable token);
///   Value Int(int64_t v);  bool AsInt(const Value& v, int64_t* out);
///   Value Apply(RpnOp op, const Value& a, const Value& c);  // with a symbolic operand (kNeg: a)
///   [[noreturn]] void Fail(RpnFailure why, RpnOp op, size_t count);  // count: kLeftovers
/// Never recursive; the stack holds at most n values.
template <typename D>
typename D::Value EvalRpn(D& d, size_t n) {
  using Value = typename D::Value;
  std::vector<Value> stack;
  stack.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    RpnOp op = RpnOp::kLit;
    int64_t literal = 0;
    Value symbol{};
    d.Token(i, &op, &literal, &symbol);
    if (op == RpnOp::kLit) {
      stack.push_back(d.Int(literal));
      continue;
    }
    if (op == RpnOp::kSym) {
      stack.push_back(std::move(symbol));
      continue;
    }
    const size_t arity = op == RpnOp::kNeg ? 1 : 2;
    if (stack.size() < arity) d.Fail(RpnFailure::kMissingOperand, op, 0);
    int64_t ci = 0, ai = 0;
    if (op == RpnOp::kNeg) {
      if (d.AsInt(stack.back(), &ci)) {
        if (ci == INT64_MIN) d.Fail(RpnFailure::kOverflow, op, 0);
        stack.back() = d.Int(-ci);
      } else {
        stack.back() = d.Apply(op, stack.back(), stack.back());
      }
      continue;
    }
    Value c = std::move(stack.back());
    stack.pop_back();
    const bool c_int = d.AsInt(c, &ci);
    if ((op == RpnOp::kFloorDiv || op == RpnOp::kMod) && c_int && ci == 0) {
      d.Fail(op == RpnOp::kMod ? RpnFailure::kModuloByZero : RpnFailure::kDivisionByZero, op, 0);
    }
    if (c_int && d.AsInt(stack.back(), &ai)) {
      int64_t r = 0;
      if (!RpnIntOp(op, ai, ci, &r)) d.Fail(RpnFailure::kOverflow, op, 0);
      stack.back() = d.Int(r);
    } else {
      stack.back() = d.Apply(op, stack.back(), c);
    }
  }
  if (stack.size() != 1) d.Fail(RpnFailure::kLeftovers, RpnOp::kLit, stack.size());
  return std::move(stack.back());
}

}  // namespace details
}  // namespace kffi

#endif  // KFFI_CONTRACT_SHAPE_RPN_H_
