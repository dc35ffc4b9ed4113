// include/kffi/contract/plan.h: the check plan of a contract as kernels read it: a flat,
// versioned layout of small precomputed checks.
//
// The contract compiler (parser, planner, messages, metadata) lives in libkffi: a kernel library
// hands it the contract text once (KFFIContractCreate, when it loads) and gets back a compiled
// contract whose plan is laid out exactly as this header says (version kPlanLayoutVersion). Each
// call then runs the plan inline (contract/details.h): a few compares per tensor, no call into
// the runtime, no allocation. Only a failing call goes back to libkffi, which explains the first
// failure (KFFIContractExplain). The layout is not part of the C ABI, but it is fixed here, as
// container/map_details.h fixes Map's: a change to any struct below bumps kPlanLayoutVersion, and
// the runtime refuses a version it does not build (a clear error at load time, not a misread).
// SPDX-License-Identifier: Apache-2.0
#ifndef KFFI_CONTRACT_PLAN_H_
#define KFFI_CONTRACT_PLAN_H_

#include <kffi/base.h>

#include <cstddef>
#include <cstdint>

#if defined(__GNUC__) && !defined(_WIN32) && !defined(KFFI_BUILDING_RUNTIME)
// Weak: a library built with these headers still loads in an older runtime, which lacks the
// contract compiler (the contract export then reports that, instead of the loader failing on an
// unresolved symbol, or a -z now library failing to open at all).
extern "C" {
__attribute__((weak)) int KFFIContractCreate(const KFFIByteArray* name, const KFFIByteArray* text,
                                             int32_t plan_version, KFFIObjectHandle* out);
__attribute__((weak)) const void* KFFIContractGetPlan(KFFIObjectHandle contract);
__attribute__((weak)) int32_t KFFIContractCheckFrom(const void* plan, void* state,
                                                    int32_t first_op);
__attribute__((weak)) int KFFIContractExplain(KFFIObjectHandle contract, const KFFIAny* args,
                                              int32_t num_args, int32_t* out_check,
                                              int32_t* out_op);
__attribute__((weak)) int KFFIContractExpandArgs(KFFIObjectHandle contract,
                                                 const KFFIAny* const* frames, int32_t null_as_none,
                                                 KFFIAny* out);
__attribute__((weak)) int KFFIContractCheckSignature(KFFIObjectHandle contract,
                                                     const KFFIByteArray* param_types,
                                                     int32_t num_params);
__attribute__((weak)) int KFFIContractExportCreate(const KFFIByteArray* name,
                                                   const KFFIByteArray* text,
                                                   const KFFIByteArray* param_types,
                                                   int32_t num_params, int32_t plan_version,
                                                   KFFIObjectHandle* out);
__attribute__((weak)) int KFFIContractGetMetadata(KFFIObjectHandle contract,
                                                  const KFFIByteArray* return_type,
                                                  const KFFIByteArray* doc, KFFIAny* out);
__attribute__((weak)) int KFFIContractGetText(KFFIObjectHandle contract, int32_t what,
                                              int32_t index, KFFIByteArray* out);
__attribute__((weak)) int KFFIContractFindSymbol(KFFIObjectHandle contract,
                                                 const KFFIByteArray* symbol, int32_t* out_slot);
__attribute__((weak)) int KFFIContractGetOutputShape(KFFIObjectHandle contract, int64_t output,
                                                     const int64_t* values, uint64_t bound,
                                                     int64_t* out_shape, int32_t* out_ndim);
}
#endif

namespace kffi {
namespace details {
namespace contract {

/// The version of the plan layout below (Op, TensorCheck, DimCheck, ScalarCheck, PlanLayout and
/// the Check numbers). Kernels ask KFFIContractCreate for it; the runtime builds it or refuses.
/// Two additions kept version 1, because a kernel never reads them: the op kind kOpRecord (never
/// Op::simple, so a kernel's FastRun hands it to the runtime like any other non-simple op) and
/// the members after PlanLayout::needs_expand (the runtime's own; a kernel built with older
/// headers reads the same leading members at the same offsets).
constexpr int32_t kPlanLayoutVersion = 1;

// Limits of the grammar (the parser enforces them; the checks rely on kMaxNdim and kMaxSymbols).
/// Longest contract text accepted (bytes).
constexpr size_t kMaxContractBytes = 65536;
/// Most dimensions a contract tensor can have (the ndim of a DLTensor is not bounded).
constexpr size_t kMaxNdim = 32;
/// Deepest nesting of Optional/Tuple types.
constexpr int kMaxTypeDepth = 16;
/// Deepest nesting of parentheses and unary minus in an output expression.
constexpr int kMaxExprDepth = 32;

/// Most symbols a contract can bind (their bound set is a 64-bit mask).
constexpr size_t kMaxSymbols = 64;
/// Value frames a check reads: the call arguments, one frame per tuple and one for the fields of
/// records (read by the runtime, never by a kernel).
constexpr size_t kMaxFrames = 32;
/// Most fields a record type in a contract can constrain.
constexpr size_t kMaxRecordFields = 64;

/// kOpRecord: an object of a record type (a kffi object type with reflected fields, or a
/// KFFI_RECORD struct's object) whose fields the runtime reads through the type's getters into
/// the frame out_frame; the following Op::skip ops (scalars) check them.
enum OpKind : uint8_t { kOpTensor, kOpInt, kOpFloat, kOpBool, kOpTuple, kOpStream, kOpRecord };
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
                      // ndim when 1 to 4 (UniformRun's unrolled checks), 5 for other ranks, else 0
  uint8_t optional;   // None is accepted
  uint8_t frame;      // where the value lives: 0 the call arguments, else a tuple's elements
  uint8_t out_frame;  // tuple: the frame that receives its elements; record: its fields
  uint8_t mut;    // a `mut` tensor (a call argument): one whose tensor_flags say read-only fails
  int32_t index;  // position in the frame
  int32_t spec;   // tensor: PlanLayout::tensors[spec]; scalar: PlanLayout::scalars[spec]; tuple:
                  // size; record: the runtime's record check
  int32_t skip;   // tuple (record): how many following ops describe its elements (fields)
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
  uint16_t num_dtypes;  // 0: any; > 1: PlanLayout::dtypes[dtype_begin, +num_dtypes)
  uint16_t dtype_begin;
  uint16_t dims_begin;     // PlanLayout::dims[dims_begin, +ndim): the shape
  uint16_t strides_begin;  // PlanLayout::dims[strides_begin, +ndim) when has_strides
  uint16_t order_begin;    // PlanLayout::orders[order_begin, +ndim) when layout == kLayoutOrdered
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

/// A scalar's range: explicit bounds, or its width's (int32, float32).
struct ScalarCheck {
  uint8_t range;  // RangeKind
  int64_t int_lo, int_hi;
  double float_lo, float_hi;
};

/// The check that failed first (KFFIContractExplain's *out_check), in catalogue order.
enum class Check : uint8_t {
  kNone,         // every check passed
  kCount,        // the number of arguments
  kType,         // the value's type (also: a tuple's length)
  kWritable,     // a read-only tensor given to a `mut` parameter
  kAlign,        // data + byte_offset alignment
  kDeviceIndex,  // the device index all tensors share
  kNdim,
  kDeviceType,
  kDtype,
  kByteOffset,  // offset0
  kShape,       // a shape entry: literal, symbol width, divisibility or match
  kLayout,      // contiguous, col_major, stride_order
  kStrides,     // a symbolic or literal strides entry
  kRange,       // a scalar's range (explicit or its width)
};

/// A contract's check plan: flat arrays in check order, built by the runtime and read-only
/// afterwards (shared by threads; it lives as long as its contract object).
struct PlanLayout {
  uint32_t version;           // kPlanLayoutVersion
  uint32_t size;              // sizeof(PlanLayout)
  KFFIObjectHandle contract;  // the contract object that holds this plan (borrowed)
  const Op* ops;
  const TensorCheck* tensors;
  const DimCheck* dims;
  const uint32_t* dtypes;  // DtypeBits of dtype alternatives (TensorCheck::dtype_begin)
  const int32_t* orders;   // stride orders (TensorCheck::order_begin)
  const ScalarCheck* scalars;
  const int32_t* fn_src;     // per function parameter: its call argument, -1 for EnvStream
  const uint8_t* fn_stream;  // per function parameter: 1 for a Stream argument
  uint64_t static_bound;     // symbols that every passing call binds
  int32_t num_ops;
  int32_t num_fn_params;  // function parameters (call arguments and EnvStream ones)
  int32_t num_args;       // call arguments
  int32_t num_symbols;
  int32_t num_outputs;
  /// 1 to 4 when the leading uniform_count ops are call arguments in order, each a simple tensor
  /// of that rank (Op::simple) with tensors[i] its check: FastRun runs them without reading ops.
  int32_t uniform_count;
  uint8_t uniform_ndim;
  uint8_t has_env_stream;
  uint8_t has_stream;    // a Stream parameter (its argument is converted to a pointer)
  uint8_t needs_expand;  // has_env_stream || has_stream: ExpandArgs runs before the call
  // ---- the runtime's own (appended; kernels never read these) ----
  /// The runtime's plan that holds this layout (its record checks: kOpRecord's spec).
  const void* runtime_plan;
};

/// Per-call scratch of a check (the kernel's and the runtime's share it: part of the layout). Only
/// the members a passing call reads start initialised: the arrays (and failed_op) are written
/// before they are read, so a call does not pay for clearing them.
struct RunState {
  const KFFIAny* frames[kMaxFrames];
  int64_t values[kMaxSymbols];
  int32_t site[kMaxSymbols];  // explaining run: the DimCheck that bound each symbol
  uint64_t bound = 0;         // symbols bound so far (fast run: by kDimBindOrMatch only)
  int32_t device_op = -1;     // the op of the first tensor seen, once a dynamic one is checked
  int32_t device_id = 0;      // the device index all tensors share
  int32_t failed_op;          // set by FastRun when it fails: the op it stopped at (-1: count)
};

/// The bits of a dtype as the plan compares them.
KFFI_INLINE uint32_t DtypeBits(DLDataType t) {
  return static_cast<uint32_t>(t.code) | (static_cast<uint32_t>(t.bits) << 8) |
         (static_cast<uint32_t>(t.lanes) << 16);
}

}  // namespace contract
}  // namespace details
}  // namespace kffi

#endif  // KFFI_CONTRACT_PLAN_H_
