// src/contract/contract_internal.h: the contract compiler inside libkffi: syntax tree, parser,
// check plan builder, explaining check and metadata (never installed; kernels reach it through the
// KFFIContract* functions of c_api.h and read the plan as include/kffi/contract/plan.h lays it
// out). The grammar and the check catalogue are documented in include/kffi/contract.h.
// SPDX-License-Identifier: Apache-2.0
#ifndef KFFI_SRC_CONTRACT_CONTRACT_INTERNAL_H_
#define KFFI_SRC_CONTRACT_CONTRACT_INTERNAL_H_

#include <kffi/contract/details.h>
#include <kffi/contract/shape_rpn.h>
#include <kffi/dtype.h>
#include <kffi/error.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace kffi {
namespace details {
namespace contract {

// Literals are compared as string_view on both sides: kffi::String's comparisons would make a
// string_view == "literal" ambiguous inside namespace kffi.
using Sv = std::string_view;

/// A syntax error: the byte offset in the text (0-based) and what was expected there.
struct SyntaxError {
  size_t pos;
  std::string what;
};

// ---- the syntax tree (contract_parser.cc) ----------------------------------------------------

enum class Kind : uint8_t { kTensor, kInt, kFloat, kBool, kTuple, kStream, kEnvStream, kRecord };

/// A dimension or stride entry: an integer literal or a symbol.
struct DimAst {
  bool is_symbol = false;
  int64_t literal = 0;
  std::string symbol;
  size_t pos = 0;
};

/// One token of an output-shape expression in reverse Polish notation: a literal, a symbol, or an
/// operator applied to the values on top of the stack (kNeg takes one, the others two). The
/// operations and their spellings are kffi's one RPN vocabulary (kffi/contract/shape_rpn.h).
struct RpnToken {
  RpnOp op;
  int64_t value = 0;
  std::string symbol;
  size_t pos = 0;
};

struct TensorAst {
  std::vector<DimAst> shape;                     // inputs
  std::vector<std::vector<RpnToken>> shape_rpn;  // outputs: each expression in RPN
  std::vector<std::string> shape_texts;          // outputs: each expression as written
  std::vector<DLDataType> dtypes;                // empty: any
  std::string dtype_text;                        // "float32", "float16|bfloat16", "*"
  std::vector<int32_t> device_types;             // empty: any
  std::string device_text;                       // "cuda", "cpu|cuda"
  int64_t align = 0;                             // bytes; 0: unchecked
  bool offset0 = false;
  bool mut = false;             // the function writes it: read-only arguments are refused
  bool compact = false;         // compact, dims laid out in `order`
  std::vector<int32_t> order;   // dims from outermost to innermost
  std::string layout_text;      // "contiguous", "col_major", "stride_order=(1,0)", ...
  std::vector<DimAst> strides;  // empty: unchecked
  size_t strides_pos = 0;
};

struct TypeAst {
  Kind kind = Kind::kInt;
  bool optional = false;
  std::string name;  // the keyword: "Tensor", "int32", "Tuple", ...; a record's type key
  int bits = 64;     // scalars: int32/float32 are 32
  bool has_range = false;
  int64_t int_lo = 0, int_hi = 0;
  double float_lo = 0, float_hi = 0;
  std::string range_text;  // "[0, 1024]" as written
  std::string text;        // the whole type as written: "Optional[Tensor([n], float32)]"
  TensorAst tensor;
  std::vector<TypeAst> elems;  // Tuple; a record's constrained fields (scalars), as written
  std::vector<std::string> field_names;  // a record's: elems[i] is field_names[i]'s type
  size_t pos = 0;
};

struct ParamAst {
  std::string name;
  TypeAst type;
  std::string text;       // "a: Tensor([n], float32)" as written
  std::string type_text;  // "Tensor([n], float32)"
  size_t pos = 0;
};

struct OutputAst {
  std::string name;
  std::string text;
  std::string type_text;
  TensorAst tensor;
};

struct SymbolDecl {
  std::string name;
  int bits = 64;
  int64_t divisibility = 1;
  bool parallel = false;  // the function computes each index of this size independently
  size_t pos = 0;
};

struct ContractAst {
  std::vector<ParamAst> params;
  std::vector<OutputAst> outputs;
  std::vector<SymbolDecl> symbols;
};

/// Whether a parsed dtype is one a tensor can have: the standard widths of each code.
bool IsStandardDtype(DLDataType t);
/// Standard dtype names (and the runtime's spellings of the others); false when unknown.
bool LookupDtype(std::string_view s, DLDataType* out);
/// Device type names as DeviceTypeName spells them; -1 when unknown.
int32_t LookupDeviceType(std::string_view s);

/// Parses a contract's text; throws SyntaxError at the first problem. The recursion is bounded
/// (kMaxTypeDepth, kMaxExprDepth) and so is the text (kMaxContractBytes).
ContractAst ParseContract(std::string_view text);

// ---- the check plan (contract_plan.cc) -------------------------------------------------------

/// Cold data for messages, one per op.
struct OpInfo {
  std::string context;   // "argument #0", "in argument #0" (a tuple element)
  std::string subject;   // "a", "x[1]"
  std::string expected;  // "Tensor", "int32", "Tuple of 2 elements", "Tensor or None"
  const TypeAst* type;   // points into Plan::ast
  bool mut;              // a tensor the function writes (where a conflict is blamed first)
};

/// A record parameter's check: its type key and constrained fields, resolved against the type's
/// reflection (KFFIGetTypeReflection) once: when the contract is created if the type is
/// registered by then, else at the first check that meets the record (a library may register the
/// type after its export).
struct RecordCheck {
  std::string type_key;
  std::string subject;  // the parameter ("cfg", "p[1]")
  const TypeAst* type;  // points into Plan::ast
  // Resolution (Plan::ResolveRecord): 0 not yet, 1 resolved, 2 refused (error says why).
  mutable std::atomic<int> state{0};
  mutable std::mutex mutex;
  mutable int32_t type_index = -1;
  mutable int32_t type_depth = 0;
  mutable std::vector<const KFFIFieldInfo*> fields;  // per constrained field: the type's field
  mutable std::string error;
};

struct SymbolInfo {
  std::string name;
  int bits;
  int64_t divisibility;
  bool parallel;  // declared `parallel`: frameworks may split the work along it (no check)
};

/// A parsed contract and its check plan: the arrays that `layout` points into (what kernels
/// read), the syntax tree and the cold data of messages. Built once; read-only afterwards.
struct Plan {
  Plan() = default;
  Plan(const Plan&) = delete;  // op_info and layout point into the plan
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
  std::vector<std::unique_ptr<RecordCheck>> records;  // kOpRecord's spec
  PlanLayout layout{};                                // the arrays above as kernels read them

  int32_t SlotOf(std::string_view symbol) const {
    for (size_t i = 0; i < symbols.size(); ++i) {
      if (Sv(symbols[i].name) == symbol) return static_cast<int32_t>(i);
    }
    return -1;
  }
};

/// Parses and plans `text` for the function `name`; a malformed contract is a ValueError
/// "Invalid contract for `name` at column N: ..." with an excerpt and a caret. layout.contract
/// is left for the owner to set.
std::unique_ptr<Plan> MakePlan(std::string_view name, std::string_view text);

/// Resolves a record check against its type's reflection (once; thread safe): true when its
/// fields can be read. False with r.error set (a ValueError message naming the function and the
/// field) when the type is refused; when the type is not registered (yet), false with r.error set
/// only if final (at creation the check stays unresolved, to be tried again at the first call).
bool ResolveRecord(const Plan& p, const RecordCheck& r, bool final);

// ---- the checks kernels do not inline (contract_check.cc) -----------------------------------
// Shared by KFFIContractCheckFrom (the rest of a kernel's check) and the explaining run.

/// Mismatch bits of n shape or stride entries, any of which may bind under an Optional.
uint64_t DynamicDimsBits(const DimCheck* d, const int64_t* v, int32_t n, RunState* st);
/// The strides (compact row-major ones in buf, of kMaxNdim entries, when the tensor has NULL
/// strides).
const int64_t* StridesOf(const DLTensor* t, int64_t* buf);
/// Whether the tensor is compact in the layout's dimension order.
bool LayoutOk(const PlanLayout& p, const TensorCheck& c, const DLTensor* t, const int64_t* strides);
/// Any tensor against its check.
bool FastTensor(const PlanLayout& p, const TensorCheck& c, const DLTensor* t, RunState* st);
/// A scalar, tuple or optional value (anything but a present tensor); advances *i past the
/// elements of a None tuple.
bool FastOther(const PlanLayout& p, const Op& op, const KFFIAny* v, RunState* st, size_t* i);
/// What reading a record argument's constrained fields found.
enum class RecordRead : uint8_t {
  kOk,          // read into the op's out_frame
  kType,        // the value is no object of the record type (or a subtype)
  kUnresolved,  // the record type was refused (RecordCheck::error says why)
  kGetter,      // a field's getter failed
};
/// Reads the constrained fields of v (a kOpRecord op's value) through the type's getters; why
/// (when not NULL): the field and the getter's error, for kGetter.
RecordRead ReadRecordFields(const PlanLayout& p, const Op& op, const KFFIAny* v, RunState* st,
                            std::string* why = nullptr);
/// Whether a tensor argument is read-only while its parameter is `mut`.
bool WritableMissing(const Op& op, const KFFIAny* v);
/// Whether the values of ops [first, end) pass every check; on failure st->failed_op is the op.
bool GeneralRun(const PlanLayout& p, RunState* st, size_t first);

// ---- checks, messages and metadata (contract_explain.cc, metadata.cc) ------------------------

/// What the explaining run found: the first failed check, where, and its message.
struct Failure {
  Check check = Check::kNone;
  int32_t op = -1;      // the op whose check failed (-1: the argument count)
  int32_t blamed = -1;  // the op the message names first (a `mut` side of a conflict)
  const char* kind = "InternalError";
  std::string message;
  // A type check's: the argument value, and where the message names its type (RecordArgumentType).
  const KFFIAny* typed_arg = nullptr;
  size_t type_offset = 0;
  size_t type_size = 0;
};

/// The first failed check of a call (Check::kNone when every check passes).
Failure Explain(const Plan& p, const KFFIAny* args, int32_t num_args);

/// Checks that a C++ function with these parameter types (TypeStr spellings) can take what the
/// contract lets through; ValueError otherwise.
void CheckCppSignature(const Plan& p, const std::vector<std::string>& cpp);

/// The shape of output i from symbol values (values[slot], bound: a bit per bound slot);
/// ValueError for an unbound symbol, a division by zero or an int64 overflow, IndexError for an
/// output that does not exist.
std::vector<int64_t> OutputShape(const Plan& p, int64_t i, const int64_t* values, uint64_t bound);

/// The export metadata of a contract (keys in include/kffi/contract.h, Contract::MetadataJson).
std::string ContractMetadataJson(const Plan& p, std::string_view return_type, std::string_view doc);

}  // namespace contract
}  // namespace details
}  // namespace kffi

#endif  // KFFI_SRC_CONTRACT_CONTRACT_INTERNAL_H_
