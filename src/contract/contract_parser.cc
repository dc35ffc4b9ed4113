// src/contract/contract_parser.cc: the contract grammar (documented in include/kffi/contract.h):
// tokens and a recursive-descent parser into the syntax tree of contract_internal.h.
//
// Limits (so that a hostile library fails to load instead of exhausting the stack): the text is at
// most kMaxContractBytes long, Optional/Tuple nest at most kMaxTypeDepth deep, and parentheses and
// unary minus nest at most kMaxExprDepth deep. Output expressions are kept in reverse Polish
// notation (OutputAst's shape_rpn) and evaluated with a stack, never recursively.
// SPDX-License-Identifier: Apache-2.0
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "contract/contract_internal.h"

namespace kffi {
namespace details {
namespace contract {
namespace {

enum class TokKind : uint8_t { kEnd, kName, kInt, kFloat, kPunct };

struct Token {
  TokKind kind;
  std::string_view text;
  size_t pos;
};

bool IsNameStart(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsNameChar(char c) { return IsNameStart(c) || IsDigit(c); }

std::vector<Token> Tokenize(std::string_view s) {
  std::vector<Token> out;
  size_t i = 0;
  const size_t n = s.size();
  while (i < n) {
    const char c = s[i];
    const size_t start = i;
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
      ++i;
    } else if (IsNameStart(c)) {
      while (i < n && IsNameChar(s[i])) ++i;
      out.push_back({TokKind::kName, s.substr(start, i - start), start});
    } else if (IsDigit(c) || (c == '.' && i + 1 < n && IsDigit(s[i + 1]))) {
      bool is_float = false;
      while (i < n && IsDigit(s[i])) ++i;
      if (i < n && s[i] == '.') {
        is_float = true;
        for (++i; i < n && IsDigit(s[i]);) ++i;
      }
      if (i < n && (s[i] == 'e' || s[i] == 'E')) {
        size_t j = i + 1;
        if (j < n && (s[j] == '+' || s[j] == '-')) ++j;
        if (j < n && IsDigit(s[j])) {
          is_float = true;
          for (i = j; i < n && IsDigit(s[i]);) ++i;
        }
      }
      out.push_back(
          {is_float ? TokKind::kFloat : TokKind::kInt, s.substr(start, i - start), start});
    } else if (i + 1 < n && ((c == '-' && s[i + 1] == '>') || (c == '/' && s[i + 1] == '/'))) {
      i += 2;
      out.push_back({TokKind::kPunct, s.substr(start, 2), start});
    } else if (std::string_view("()[],:;|*=%+-.{}").find(c) != std::string_view::npos) {
      ++i;
      out.push_back({TokKind::kPunct, s.substr(start, 1), start});
    } else {
      // A byte that is not printable ASCII (a control character, a UTF-8 sequence or invalid
      // UTF-8) is shown escaped, so that the message stays valid UTF-8.
      std::string shown(1, c);
      if (c < 0x20 || c > 0x7e) {
        static const char kHex[] = "0123456789abcdef";
        const auto b = static_cast<unsigned char>(c);
        shown = std::string("\\x") + kHex[b >> 4] + kHex[b & 15];
      }
      throw SyntaxError{start, "unexpected character `" + shown + "`"};
    }
  }
  out.push_back({TokKind::kEnd, std::string_view(), n});
  return out;
}

}  // namespace

/// Whether a parsed dtype is one a tensor can have: the standard widths of each code (no
/// `float23` or `int3`, which the runtime's generic parser would take).
bool IsStandardDtype(DLDataType t) {
  if (t.lanes == 0) return false;
  switch (t.code) {
    case kDLInt:
    case kDLUInt:
      return t.bits == 4 || t.bits == 8 || t.bits == 16 || t.bits == 32 || t.bits == 64;
    case kDLFloat:
      return t.bits == 16 || t.bits == 32 || t.bits == 64;
    case kDLBfloat:
      return t.bits == 16;
    case kDLComplex:
      return t.bits == 64 || t.bits == 128;
    case kDLBool:
      return t.bits == 8;
    case kDLFloat6_e2m3fn:
    case kDLFloat6_e3m2fn:
      return t.bits == 6;
    case kDLFloat4_e2m1fn:
      return t.bits == 4;
    default:  // the float8 codes
      return t.code >= kDLFloat8_e3m4 && t.code <= kDLFloat8_e8m0fnu && t.bits == 8;
  }
}

/// A dtype as the runtime spells it (StringToDataType, the one name table: "float32", "int8x4",
/// "float8_e4m3fn"), and only a standard one (IsStandardDtype): "float23" is no dtype here.
bool LookupDtype(std::string_view s, DLDataType* out) {
  try {
    DLDataType t = StringToDataType(s);
    if (!IsStandardDtype(t) || Sv(DataTypeToString(t)) != s) return false;
    *out = t;
    return true;
  } catch (const Error&) {
    return false;
  }
}

/// Device type names as DeviceTypeName spells them; -1 when unknown.
int32_t LookupDeviceType(std::string_view s) {
  for (int32_t t = 1; t < 64; ++t) {
    if (s == Sv(DeviceTypeName(t))) return t;
  }
  return -1;
}

namespace {

/// Recursive descent over the tokens; throws SyntaxError at the first problem. The recursion is
/// bounded: types by kMaxTypeDepth, expressions by kMaxExprDepth.
class Parser {
 public:
  explicit Parser(std::string_view text) : text_(text) {
    if (text.size() > kMaxContractBytes) {
      throw SyntaxError{0, "the contract is " + std::to_string(text.size()) +
                               " bytes long (at most " + std::to_string(kMaxContractBytes) + ")"};
    }
    toks_ = Tokenize(text);
  }

  ContractAst Parse() {
    if (!AtEnd() && !IsPunct("->") && !IsPunct(";")) {
      do {
        ast_.params.push_back(ParseParam());
      } while (Accept(","));
    }
    if (Accept("->")) {
      do {
        ast_.outputs.push_back(ParseOutput());
      } while (Accept(","));
    }
    if (Accept(";")) {
      do {
        ParseSymbolDecl();
      } while (Accept(","));
    }
    if (!AtEnd()) Fail("expected `,`");
    return std::move(ast_);
  }

 private:
  /// Counts one level of nesting for as long as it lives; too deep is a SyntaxError.
  class DepthGuard {
   public:
    DepthGuard(int* depth, int limit, size_t pos, const char* what) : depth_(depth) {
      if (++*depth_ > limit) {
        throw SyntaxError{pos,
                          std::string(what) + " nest more than " + std::to_string(limit) + " deep"};
      }
    }
    ~DepthGuard() { --*depth_; }
    DepthGuard(const DepthGuard&) = delete;
    DepthGuard& operator=(const DepthGuard&) = delete;

   private:
    int* depth_;
  };

  const Token& Peek(size_t k = 0) const {
    return toks_[i_ + k < toks_.size() ? i_ + k : toks_.size() - 1];
  }
  bool AtEnd() const { return Peek().kind == TokKind::kEnd; }
  bool IsPunct(std::string_view p, size_t k = 0) const {
    return Peek(k).kind == TokKind::kPunct && Peek(k).text == p;
  }
  bool IsName(std::string_view s) const {
    return Peek().kind == TokKind::kName && Peek().text == s;
  }
  bool Accept(std::string_view p) {
    if (!IsPunct(p)) return false;
    ++i_;
    return true;
  }
  [[noreturn]] void Fail(const std::string& what) const { throw SyntaxError{Peek().pos, what}; }
  void Expect(std::string_view p) {
    if (!Accept(p)) Fail("expected `" + std::string(p) + "`");
  }
  const Token& ExpectName(const char* what) {
    if (Peek().kind != TokKind::kName) Fail(what);
    return toks_[i_++];
  }
  /// The text from offset `from` to the end of the last token taken.
  std::string Slice(size_t from) const {
    const Token& last = toks_[i_ - 1];
    return std::string(text_.substr(from, last.pos + last.text.size() - from));
  }

  int64_t ParseInt(bool allow_negative, const char* what) {
    size_t pos = Peek().pos;
    bool negative = allow_negative && Accept("-");
    if (Peek().kind != TokKind::kInt) Fail(what);
    uint64_t v = 0;
    for (char c : Peek().text) {
      if (v > (UINT64_C(1) << 63) / 10) throw SyntaxError{pos, "integer literal out of range"};
      v = v * 10 + static_cast<uint64_t>(c - '0');
    }
    if (v > (negative ? (UINT64_C(1) << 63) : (UINT64_C(1) << 63) - 1)) {
      throw SyntaxError{pos, "integer literal out of range"};
    }
    ++i_;
    return negative ? static_cast<int64_t>(0 - v) : static_cast<int64_t>(v);
  }
  double ParseFloat() {
    size_t pos = Peek().pos;
    bool negative = Accept("-");
    if (Peek().kind != TokKind::kInt && Peek().kind != TokKind::kFloat) Fail("expected a number");
    double v = std::strtod(std::string(Peek().text).c_str(), nullptr);
    if (!std::isfinite(v)) throw SyntaxError{pos, "a range bound must be finite"};
    ++i_;
    return negative ? -v : v;
  }

  ParamAst ParseParam() {
    ParamAst p;
    p.pos = Peek().pos;
    p.name = std::string(ExpectName("expected a parameter name").text);
    Expect(":");
    size_t type_start = Peek().pos;
    p.type = ParseType(/*in_tuple=*/false);
    p.type_text = Slice(type_start);
    p.text = Slice(p.pos);
    return p;
  }

  TypeAst ParseType(bool in_tuple) {
    if (Peek().kind != TokKind::kName) Fail("expected a type");
    DepthGuard guard(&type_depth_, kMaxTypeDepth, Peek().pos, "Optional and Tuple types");
    const size_t start = Peek().pos;
    const Token& tok = toks_[i_++];
    TypeAst t;
    t.pos = tok.pos;
    t.name = std::string(tok.text);
    const std::string_view k = tok.text;
    if (k == Sv("Tensor")) {
      t.kind = Kind::kTensor;
      ParseTensorBody(&t.tensor, /*output=*/false);
      if (in_tuple && t.tensor.mut) {
        throw SyntaxError{t.pos,
                          "a `mut` tensor cannot be a Tuple element (tuple elements carry no "
                          "read-only flag); make it a parameter of its own"};
      }
    } else if (k == Sv("Optional")) {
      Expect("[");
      t = ParseType(in_tuple);
      if (t.kind == Kind::kEnvStream) throw SyntaxError{t.pos, "EnvStream cannot be Optional"};
      if (t.kind == Kind::kStream) {
        throw SyntaxError{t.pos, "Stream cannot be Optional (it takes None: the default stream)"};
      }
      t.optional = true;
      Expect("]");
    } else if (k == Sv("Tuple")) {
      t.kind = Kind::kTuple;
      Expect("[");
      do {
        t.elems.push_back(ParseType(/*in_tuple=*/true));
        if (t.elems.back().kind == Kind::kEnvStream || t.elems.back().kind == Kind::kStream) {
          throw SyntaxError{t.elems.back().pos, t.elems.back().name + " cannot be a Tuple element"};
        }
      } while (Accept(","));
      Expect("]");
    } else if (k == Sv("EnvStream")) {
      t.kind = Kind::kEnvStream;
    } else if (k == Sv("Stream")) {
      t.kind = Kind::kStream;
    } else if (IsScalarName(k)) {
      t.kind = k == Sv("bool") ? Kind::kBool : k[0] == 'i' ? Kind::kInt : Kind::kFloat;
      t.bits = (k == Sv("int32") || k == Sv("float32")) ? 32 : 64;
      if (IsPunct("[")) ParseRange(&t);
    } else if (IsPunct(".") || IsPunct("{")) {
      ParseRecord(&t);
    } else {
      throw SyntaxError{tok.pos,
                        "unknown type `" + t.name +
                            "` (expected Tensor, int, int32, int64, float, float32, float64, "
                            "bool, Optional, Tuple, Stream, EnvStream or a record type key)"};
    }
    t.text = Slice(start);
    return t;
  }

  static bool IsScalarName(std::string_view k) {
    return k == Sv("int") || k == Sv("int32") || k == Sv("int64") || k == Sv("float") ||
           k == Sv("float32") || k == Sv("float64") || k == Sv("bool");
  }

  /// A record type after its first name: the rest of the type key (`demo.Config`), then the
  /// constrained fields in braces, each a scalar with an optional range (`{alpha: float64[0, 1]}`).
  /// Fields left out are not checked; without braces only the type is.
  void ParseRecord(TypeAst* t) {
    t->kind = Kind::kRecord;
    while (Accept(".")) t->name += "." + std::string(ExpectName("expected a type key part").text);
    if (!Accept("{")) return;
    if (Accept("}")) return;
    do {
      const Token& name = ExpectName("expected a field name");
      for (const std::string& other : t->field_names) {
        if (Sv(other) == name.text) {
          throw SyntaxError{name.pos, "field `" + other + "` is constrained twice"};
        }
      }
      if (t->field_names.size() == kMaxRecordFields) {
        throw SyntaxError{name.pos,
                          "too many fields (at most " + std::to_string(kMaxRecordFields) + ")"};
      }
      Expect(":");
      if (Peek().kind != TokKind::kName || !IsScalarName(Peek().text)) {
        Fail("expected a field type (int, int32, int64, float, float32, float64 or bool)");
      }
      t->field_names.emplace_back(name.text);
      t->elems.push_back(ParseType(/*in_tuple=*/true));
    } while (Accept(","));
    Expect("}");
  }

  void ParseRange(TypeAst* t) {
    size_t start = Peek().pos;
    Expect("[");
    if (t->kind == Kind::kBool) throw SyntaxError{start, "a bool has no range"};
    if (t->kind == Kind::kInt) {
      t->int_lo = ParseInt(true, "expected an integer");
      Expect(",");
      t->int_hi = ParseInt(true, "expected an integer");
      if (t->bits == 32 && (t->int_lo < INT32_MIN || t->int_hi > INT32_MAX)) {
        throw SyntaxError{start, "the range of an int32 must lie in the int32 range"};
      }
      if (t->int_lo > t->int_hi) throw SyntaxError{start, "the range is empty (low > high)"};
    } else {
      t->float_lo = ParseFloat();
      Expect(",");
      t->float_hi = ParseFloat();
      if (!(t->float_lo <= t->float_hi)) {
        throw SyntaxError{start, "the range is empty (low > high)"};
      }
    }
    Expect("]");
    t->has_range = true;
    t->range_text = Slice(start);
  }

  DimAst ParseDim() {
    DimAst d;
    d.pos = Peek().pos;
    if (Peek().kind == TokKind::kInt) {
      d.literal = ParseInt(false, "");
    } else if (Peek().kind == TokKind::kName) {
      d.is_symbol = true;
      d.symbol = std::string(toks_[i_++].text);
    } else {
      Fail("expected a dimension (an integer or a symbol)");
    }
    return d;
  }

  void ParseTensorBody(TensorAst* ts, bool output) {
    Expect("(");
    Expect("[");
    if (!IsPunct("]")) {
      do {
        if (ts->shape.size() + ts->shape_rpn.size() == kMaxNdim) {
          Fail("too many dimensions (at most " + std::to_string(kMaxNdim) + ")");
        }
        if (output) {
          size_t start = Peek().pos;
          ts->shape_rpn.emplace_back();
          ParseExpr(&ts->shape_rpn.back());
          ts->shape_texts.push_back(Slice(start));
        } else {
          ts->shape.push_back(ParseDim());
        }
      } while (Accept(","));
    }
    Expect("]");
    Expect(",");
    size_t start = Peek().pos;
    if (!Accept("*")) {
      do {
        const Token& d = ExpectName("expected a dtype or `*`");
        DLDataType dt;
        if (!LookupDtype(d.text, &dt)) {
          throw SyntaxError{d.pos, "unknown dtype `" + std::string(d.text) + "`"};
        }
        ts->dtypes.push_back(dt);
      } while (Accept("|"));
    }
    ts->dtype_text = Slice(start);
    while (Accept(",")) ParseOption(ts, output);
    Expect(")");
  }

  void SetLayout(TensorAst* ts, std::vector<int32_t> order, size_t pos) {
    if (ts->compact) throw SyntaxError{pos, "more than one layout option"};
    ts->compact = true;
    ts->order = std::move(order);
    ts->layout_text = Slice(pos);
  }

  void ParseOption(TensorAst* ts, bool output) {
    const Token& opt = ExpectName(
        "expected a tensor option (device, align, offset0, contiguous, row_major, col_major, "
        "stride_order, strides or mut)");
    const std::string_view k = opt.text;
    const size_t ndim = output ? ts->shape_rpn.size() : ts->shape.size();
    std::vector<int32_t> order(ndim);
    for (size_t d = 0; d < ndim; ++d) order[d] = static_cast<int32_t>(d);
    if (k == Sv("device")) {
      Expect("=");
      size_t start = Peek().pos;
      do {
        const Token& d = ExpectName("expected a device type (cpu, cuda, ...)");
        int32_t t = LookupDeviceType(d.text);
        if (t < 0) throw SyntaxError{d.pos, "unknown device type `" + std::string(d.text) + "`"};
        ts->device_types.push_back(t);
      } while (Accept("|"));
      ts->device_text = Slice(start);
    } else if (k == Sv("align")) {
      Expect("=");
      size_t pos = Peek().pos;
      ts->align = ParseInt(false, "expected the alignment in bytes");
      if (ts->align <= 0 || (ts->align & (ts->align - 1)) != 0) {
        throw SyntaxError{pos, "align must be a power of two"};
      }
    } else if (k == Sv("offset0")) {
      ts->offset0 = true;
    } else if (k == Sv("mut") && !output) {
      ts->mut = true;
    } else if (k == Sv("mut")) {
      throw SyntaxError{opt.pos, "`mut` marks parameters; an output is written by definition"};
    } else if (k == Sv("contiguous") || k == Sv("row_major")) {
      SetLayout(ts, std::move(order), opt.pos);
    } else if (k == Sv("col_major")) {
      SetLayout(ts, std::vector<int32_t>(order.rbegin(), order.rend()), opt.pos);
    } else if (k == Sv("stride_order")) {
      Expect("=");
      size_t pos = Peek().pos;
      Expect("(");
      std::vector<int32_t> given;
      std::vector<bool> seen(ndim, false);
      do {
        size_t at = Peek().pos;
        int64_t d = ParseInt(false, "expected a dimension index");
        if (static_cast<uint64_t>(d) >= ndim || seen[static_cast<size_t>(d)]) {
          throw SyntaxError{at, "stride_order must list each dimension 0.." +
                                    std::to_string(static_cast<int64_t>(ndim) - 1) + " once"};
        }
        seen[static_cast<size_t>(d)] = true;
        given.push_back(static_cast<int32_t>(d));
      } while (Accept(","));
      Expect(")");
      if (given.size() != ndim) {
        throw SyntaxError{pos, "stride_order has " +
                                   kffi::details::Counted(static_cast<int64_t>(given.size()),
                                                          "entry", "entries") +
                                   " but the tensor has " +
                                   kffi::details::Counted(static_cast<int64_t>(ndim), "dimension")};
      }
      SetLayout(ts, std::move(given), opt.pos);
    } else if (k == Sv("strides") && !output) {
      Expect("=");
      ts->strides_pos = Peek().pos;
      Expect("[");
      do {
        ts->strides.push_back(ParseDim());
      } while (Accept(","));
      Expect("]");
      if (ts->strides.size() != ndim) {
        throw SyntaxError{ts->strides_pos,
                          "strides has " +
                              kffi::details::Counted(static_cast<int64_t>(ts->strides.size()),
                                                     "entry", "entries") +
                              " but the tensor has " +
                              kffi::details::Counted(static_cast<int64_t>(ndim), "dimension")};
      }
    } else {
      throw SyntaxError{opt.pos, "unknown tensor option `" + std::string(k) + "`"};
    }
  }

  OutputAst ParseOutput() {
    OutputAst out;
    size_t start = Peek().pos;
    if (Peek().kind == TokKind::kName && IsPunct(":", 1)) {
      out.name = std::string(Peek().text);
      i_ += 2;
    }
    size_t type_start = Peek().pos;
    if (!IsName("Tensor")) Fail("expected an output `Tensor(...)`");
    ++i_;
    ParseTensorBody(&out.tensor, /*output=*/true);
    out.type_text = Slice(type_start);
    out.text = Slice(start);
    return out;
  }

  // Expressions go straight to reverse Polish notation: each operator is emitted after its
  // operands. Chains (a + b + c ...) loop; only parentheses and unary minus recurse.
  static void Emit(std::vector<RpnToken>* out, RpnOp op, size_t pos) {
    RpnToken t;
    t.op = op;
    t.pos = pos;
    out->push_back(std::move(t));
  }
  void ParseExpr(std::vector<RpnToken>* out) {
    ParseTerm(out);
    while (IsPunct("+") || IsPunct("-")) {
      size_t pos = Peek().pos;
      RpnOp op = Peek().text == Sv("+") ? RpnOp::kAdd : RpnOp::kSub;
      ++i_;
      ParseTerm(out);
      Emit(out, op, pos);
    }
  }
  void ParseTerm(std::vector<RpnToken>* out) {
    ParseUnary(out);
    while (IsPunct("*") || IsPunct("//") || IsPunct("%")) {
      size_t pos = Peek().pos;
      RpnOp op = Peek().text == Sv("*")    ? RpnOp::kMul
                 : Peek().text == Sv("//") ? RpnOp::kFloorDiv
                                           : RpnOp::kMod;
      ++i_;
      ParseUnary(out);
      Emit(out, op, pos);
    }
  }
  void ParseUnary(std::vector<RpnToken>* out) {
    size_t pos = Peek().pos;
    if (IsPunct("-") || IsPunct("(")) {
      DepthGuard guard(&expr_depth_, kMaxExprDepth, pos, "parentheses and unary minus");
      if (Accept("-")) {
        ParseUnary(out);
        Emit(out, RpnOp::kNeg, pos);
        return;
      }
      ++i_;  // "("
      ParseExpr(out);
      Expect(")");
      return;
    }
    if (Peek().kind == TokKind::kInt) {
      RpnToken t;
      t.op = RpnOp::kLit;
      t.pos = pos;
      t.value = ParseInt(false, "");
      out->push_back(std::move(t));
      return;
    }
    if (Peek().kind == TokKind::kName) {
      RpnToken t;
      t.op = RpnOp::kSym;
      t.pos = pos;
      t.symbol = std::string(toks_[i_++].text);
      out->push_back(std::move(t));
      return;
    }
    Fail("expected an integer, a symbol or `(`");
  }

  void ParseSymbolDecl() {
    const Token& name = ExpectName("expected a symbol name");
    SymbolDecl d;
    d.name = std::string(name.text);
    d.pos = name.pos;
    for (const SymbolDecl& other : ast_.symbols) {
      if (other.name == d.name)
        throw SyntaxError{d.pos, "symbol `" + d.name + "` is declared twice"};
    }
    if (Accept(":")) {
      if (IsName("int32")) {
        d.bits = 32;
      } else if (!IsName("int64")) {
        Fail("expected `int32` or `int64`");
      }
      ++i_;
    }
    if (Accept("%")) {
      size_t pos = Peek().pos;
      d.divisibility = ParseInt(false, "expected the divisibility (a positive integer)");
      if (d.divisibility < 1) throw SyntaxError{pos, "the divisibility must be positive"};
    }
    // `parallel`: a fact for frameworks (partitioning, vmap), not a check.
    if (IsName("parallel")) {
      d.parallel = true;
      ++i_;
    }
    ast_.symbols.push_back(std::move(d));
  }

  std::string_view text_;
  std::vector<Token> toks_;
  size_t i_ = 0;
  int type_depth_ = 0;
  int expr_depth_ = 0;
  ContractAst ast_;
};

}  // namespace

ContractAst ParseContract(std::string_view text) { return Parser(text).Parse(); }

}  // namespace contract
}  // namespace details
}  // namespace kffi
