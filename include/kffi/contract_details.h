// include/kffi/contract_details.h: running a check plan: the fast check of every call, and the
// explaining one that builds the message of the first failure.
#ifndef KFFI_CONTRACT_DETAILS_H_
#define KFFI_CONTRACT_DETAILS_H_

#include <kffi/contract_plan.h>
#include <kffi/tensor.h>

#include <cfloat>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace kffi {
namespace details {
namespace contract {

/// Per-call scratch. Only the scalar members start initialised: the arrays are written before
/// they are read, so a call does not pay for clearing them.
struct RunState {
  const KFFIAny* frames[kMaxFrames];
  int64_t values[kMaxSymbols];
  int32_t site[kMaxSymbols];  // explaining mode: the DimCheck that bound each symbol
  uint64_t bound = 0;         // symbols bound so far (fast mode: by kDimBindOrMatch only)
  int32_t device_op = -1;     // the op of the first tensor seen, once a dynamic one is checked
  int32_t device_id = 0;      // the device index all tensors share
};

// ---- messages (cold: built only when a check fails) -----------------------------------------

inline std::string FormatFloat(double v) {
  char buf[40];
  for (int prec = 1; prec <= 17; ++prec) {
    std::snprintf(buf, sizeof(buf), "%.*g", prec, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  std::string s(buf);
  if (s.find_first_of(".eni") == std::string::npos) s += ".0";  // Python's repr: 1.0, not 1
  return s;
}

inline std::string Ints(const int64_t* v, int32_t n) {
  std::string out = "[";
  for (int32_t i = 0; i < n; ++i) out += (i ? ", " : "") + std::to_string(v[i]);
  return out + "]";
}

[[noreturn]] KFFI_NOINLINE inline void Raise(const char* kind, const std::string& head,
                                             const Plan& p, size_t op, const std::string& tail) {
  throw Error(kind, head + " on " + p.op_info[op].context + " when calling: `" + p.signature +
                        "`, " + tail);
}

[[noreturn]] KFFI_NOINLINE inline void FailCount(const Plan& p, int32_t got) {
  throw Error("TypeError", "Expects " + std::to_string(p.num_args) + " parameter" +
                               (p.num_args == 1 ? "" : "s") + " when calling: `" + p.signature +
                               "`, but got " + std::to_string(got));
}

[[noreturn]] KFFI_NOINLINE inline void FailType(const Plan& p, size_t op, const KFFIAny* v) {
  std::string got = AnyTypeStr(v);
  if (p.ops[op].kind == kOpTuple && (v->type_index == kKFFIArray || v->type_index == kKFFIList)) {
    int64_t n = static_cast<const KFFISeqCell*>(KFFIObjectGetCellPtr(v->v_obj))->size;
    got += " of " + std::to_string(n) + " element" + (n == 1 ? "" : "s");
  }
  Raise("TypeError", "Mismatched type", p, op,
        "expected " + p.op_info[op].expected + ", but got " + got);
}

[[noreturn]] KFFI_NOINLINE inline void FailTensor(const Plan& p, size_t op, const std::string& what,
                                                  const std::string& expected,
                                                  const std::string& got) {
  Raise("ValueError", "Mismatched Tensor", p, op,
        "expected " + what + expected + ", but got " + what + got);
}

[[noreturn]] KFFI_NOINLINE inline void FailAlign(const Plan& p, size_t op, const DLTensor* t) {
  uint64_t first = reinterpret_cast<uintptr_t>(t->data) + t->byte_offset;
  Raise("ValueError", "Misaligned Tensor data", p, op,
        "expected data alignment=" + std::to_string(p.op_info[op].type->tensor.align) +
            " bytes, but got data alignment=" + std::to_string(first & (0 - first)) + " bytes");
}

[[noreturn]] KFFI_NOINLINE inline void FailDeviceIndex(const Plan& p, size_t op, const DLTensor* t,
                                                       const RunState& st) {
  const std::string ref = p.op_info[static_cast<size_t>(st.device_op)].subject + ".device.index";
  Raise("ValueError", "Mismatched device index", p, op,
        "expected to match " + ref + ", but got " + std::to_string(t->device.device_id) + " (" +
            ref + " is " + std::to_string(st.device_id) + ")");
}

[[noreturn]] KFFI_NOINLINE inline void FailTensorField(const Plan& p, size_t op, const DLTensor* t,
                                                       int field) {
  const TensorAst& ts = p.op_info[op].type->tensor;
  switch (field) {
    case 0:
      FailTensor(p, op, "ndim=", std::to_string(ts.shape.size()), std::to_string(t->ndim));
    case 1:
      FailTensor(p, op, "device_type=", ts.device_text, DeviceTypeName(t->device.device_type));
    case 2:
      FailTensor(p, op, "dtype=", ts.dtype_text, DataTypeToString(t->dtype));
    default:
      FailTensor(p, op, "byte_offset=", "0", std::to_string(t->byte_offset));
  }
}

[[noreturn]] KFFI_NOINLINE inline void FailLayout(const Plan& p, size_t op, const DLTensor* t,
                                                  const int64_t* strides) {
  Raise("ValueError", "Mismatched Tensor", p, op,
        "expected " + p.op_info[op].type->tensor.layout_text + ", but got shape=" +
            Ints(t->shape, t->ndim) + " with strides=" + Ints(strides, t->ndim));
}

/// A dimension failed. what: 0 literal, 1 width, 2 divisibility, 3 match.
[[noreturn]] KFFI_NOINLINE inline void FailDim(const Plan& p, size_t op, size_t di, int64_t v,
                                               const RunState& st, int what) {
  const DimCheck& d = p.dims[di];
  const std::string& name = p.dim_names[di];
  const std::string got = ", but got " + std::to_string(v);
  if (what == 0) {
    Raise("ValueError", "Mismatched " + name, p, op,
          "expected to be " + std::to_string(d.value) + got);
  }
  if (what == 1) {
    Raise("ValueError", "Out of bound " + name, p, op,
          "expected to be in int32 range [-2147483648, 2147483647]" + got);
  }
  if (what == 2) {
    Raise("ValueError", "Invalid " + name, p, op,
          "expected to be divisible by " +
              std::to_string(p.symbols[static_cast<size_t>(d.slot)].divisibility) + got);
  }
  const std::string& ref = p.dim_names[static_cast<size_t>(st.site[d.slot])];
  Raise("ValueError", "Mismatched " + name, p, op,
        "expected to match " + ref + got + " (" + ref + " is " + std::to_string(st.values[d.slot]) +
            ")");
}

[[noreturn]] KFFI_NOINLINE inline void FailScalarRange(const Plan& p, size_t op,
                                                       const std::string& got) {
  const TypeAst& t = *p.op_info[op].type;
  std::string range = t.has_range            ? "range " + t.range_text
                      : t.kind == Kind::kInt ? "int32 range [-2147483648, 2147483647]"
                                             : "float32 range [" + FormatFloat(-FLT_MAX) + ", " +
                                                   FormatFloat(FLT_MAX) + "]";
  Raise("ValueError", "Out of bound " + p.op_info[op].subject, p, op,
        "expected to be in " + range + ", but got " + got);
}

// ---- the checks ----------------------------------------------------------------------------
// FastRun is the hot path: it folds the checks of a tensor into a few compares and only says
// whether everything passed. When it fails, ExplainRun runs the plan again from scratch, check by
// check in catalogue order, and throws the first failure with its message. Both accept exactly
// the same arguments.

KFFI_INLINE const DLTensor* TensorOf(const KFFIAny* v) {
  if (KFFI_LIKELY(v->type_index == kKFFIDLTensorPtr)) return static_cast<const DLTensor*>(v->v_ptr);
  if (IsTensorObjectValue(v)) return KFFITensorGetDLTensorPtr(v->v_obj);
  return nullptr;
}

/// Mismatch bits of binding a symbol to v (0 when v passes its width and divisibility).
KFFI_INLINE uint64_t BindBits(const DimCheck& d, int64_t v) {
  const uint64_t u = static_cast<uint64_t>(v);
  uint64_t bad = (((u + UINT64_C(0x80000000)) >> 32) & d.int32_mask) | (u & d.div_mask);
  if (KFFI_UNLIKELY((d.flags & kDimDivMod) != 0)) bad |= static_cast<uint64_t>(v % d.value);
  return bad;
}

/// Mismatch bits of one shape or stride entry v against its check. kDynamic: the symbol may be
/// first seen under an Optional (kDimBindOrMatch). Which branch runs is fixed per entry, so it
/// is predicted on every call after the first.
template <bool kDynamic>
KFFI_INLINE uint64_t DimBits(const DimCheck& d, int64_t v, RunState* st) {
  if (d.mode == kDimMatch ||
      (kDynamic && d.mode == kDimBindOrMatch && ((st->bound >> d.slot) & 1) != 0)) {
    return static_cast<uint64_t>(v ^ st->values[d.slot]);
  }
  if (d.mode == kDimLiteral) return static_cast<uint64_t>(v ^ d.value);
  if (kDynamic) st->bound |= UINT64_C(1) << d.slot;
  st->values[d.slot] = v;
  return d.flags != 0 ? BindBits(d, v) : 0;
}

/// Mismatch bits of n shape or stride entries against their checks. Without kDynamic the loop
/// makes no call, so the common case keeps everything in registers.
template <bool kDynamic>
KFFI_INLINE uint64_t DimsBits(const DimCheck* d, const int64_t* v, int32_t n, RunState* st) {
  uint64_t bad = 0;
  for (int32_t i = 0; i < n; ++i) bad |= DimBits<kDynamic>(d[i], v[i], st);
  return bad;
}
KFFI_NOINLINE inline uint64_t DynamicDimsBits(const DimCheck* d, const int64_t* v, int32_t n,
                                              RunState* st) {
  return DimsBits<true>(d, v, n, st);
}

/// The strides (compact row-major ones in buf when the tensor has NULL strides).
KFFI_INLINE const int64_t* StridesOf(const DLTensor* t, int64_t* buf) {
  if (t->strides != nullptr) return t->strides;
  uint64_t acc = 1;
  for (int32_t i = t->ndim; i-- > 0;) {
    buf[i] = static_cast<int64_t>(acc);
    acc *= static_cast<uint64_t>(t->shape[i] > 1 ? t->shape[i] : 1);
  }
  return buf;
}

/// Whether the tensor is compact in the layout's dimension order. Dimensions of size 1 may have
/// any stride, and a tensor without elements has every layout (as in PyTorch).
inline bool LayoutOk(const Plan& p, const TensorCheck& c, const DLTensor* t,
                     const int64_t* strides) {
  const int32_t* order = c.layout == kLayoutOrdered ? &p.orders[c.order_begin] : nullptr;
  uint64_t expected = 1;
  bool ok = true;
  bool empty = false;
  for (int32_t k = c.ndim; k-- > 0;) {
    const int32_t d = order != nullptr ? order[k] : k;
    const int64_t size = t->shape[d];
    ok &= size == 1 || static_cast<uint64_t>(strides[d]) == expected;
    empty |= size == 0;
    expected *= static_cast<uint64_t>(size);
  }
  return ok || empty;
}

/// Mismatch bits of strides against compact row-major for shape sh (0: compact). Dimensions of
/// size 1 may have any stride; whether the tensor is empty (every layout fits) is only asked
/// after a mismatch. Unrolled where ndim is a constant.
KFFI_INLINE uint64_t RowMajorBitsOf(const int64_t* sh, const int64_t* strides, int32_t ndim) {
  uint64_t expected = 1;
  uint64_t bad = 0;
#pragma GCC unroll 8
  for (int32_t k = ndim - 1; k >= 0; --k) {
    bad |= (static_cast<uint64_t>(strides[k]) ^ expected) & (sh[k] == 1 ? 0 : ~UINT64_C(0));
    expected *= static_cast<uint64_t>(sh[k]);
  }
  if (KFFI_UNLIKELY(bad != 0)) {
    for (int32_t k = 0; k < ndim; ++k) {
      if (sh[k] == 0) return 0;
    }
  }
  return bad;
}

/// The common `contiguous` check, in place: NULL strides, or compact row-major ones.
KFFI_INLINE bool RowMajorOk(const DLTensor* t) {
  return t->strides == nullptr || RowMajorBitsOf(t->shape, t->strides, t->ndim) == 0;
}

/// The stride checks; false when one fails.
KFFI_NOINLINE inline bool StridesOk(const Plan& p, const TensorCheck& c, const DLTensor* t,
                                    RunState* st) {
  // NULL strides are compact row-major (DLPack).
  if (t->strides == nullptr && c.layout != kLayoutOrdered && !c.has_strides) return true;
  int64_t buf[kMaxNdim];
  const int64_t* strides = StridesOf(t, buf);
  if (c.layout != kLayoutAny && !LayoutOk(p, c, t, strides)) return false;
  return !c.has_strides || DynamicDimsBits(&p.dims[c.strides_begin], strides, c.ndim, st) == 0;
}

/// The rarer tensor checks, out of line: device type or dtype alternatives, and a device index
/// reference that an Optional tensor may have set.
KFFI_NOINLINE inline uint64_t ExtraBits(const Plan& p, const TensorCheck& c, const DLTensor* t,
                                        RunState* st) {
  uint64_t bad = 0;
  if (c.device_mask != 0 && c.device_type == 0) {
    const uint32_t dt = static_cast<uint32_t>(t->device.device_type);
    bad |= dt >= 64 || ((c.device_mask >> dt) & 1) == 0;
  }
  if (c.num_dtypes > 2) {
    const uint32_t dtype = DtypeBits(t->dtype);
    bool found = false;
    for (uint16_t i = 0; i < c.num_dtypes; ++i) found |= p.dtypes[c.dtype_begin + i] == dtype;
    bad |= !found;
  }
  if (c.ref == kRefDynamic) {
    if (st->device_op >= 0) bad |= static_cast<uint32_t>(t->device.device_id ^ st->device_id);
    st->device_op = 0;
    st->device_id = t->device.device_id;
  }
  return bad;
}

/// The checks of a tensor that run without any call: align, byte_offset, ndim and one or two
/// dtypes, one device type and the shared device index. Returns mismatch bits (0: fine).
KFFI_INLINE uint64_t HeadBits(const TensorCheck& c, const DLTensor* t, RunState* st) {
  // ndim and dtype are neighbours in a DLTensor, and so are the device type and index: one
  // 64-bit compare checks each pair.
  uint64_t head;
  std::memcpy(&head, &t->ndim, sizeof(head));
  uint64_t bad = ((reinterpret_cast<uintptr_t>(t->data) + t->byte_offset) & c.align_mask) |
                 (t->byte_offset & c.offset_mask);
  // Either allowed dtype: the smaller mismatch is 0 when one of them matches.
  const uint64_t miss1 = (head ^ c.ndim_dtype) & c.ndim_dtype_mask;
  const uint64_t miss2 = (head ^ c.ndim_dtype2) & c.ndim_dtype_mask;
  bad |= miss1 < miss2 ? miss1 : miss2;
  if (c.device_cmp_mask != 0) {
    uint64_t device;
    std::memcpy(&device, &t->device, sizeof(device));
    bad |=
        (device ^ (c.device_type | static_cast<uint64_t>(st->device_id) << 32)) & c.device_cmp_mask;
  }
  if (c.ref == kRefSet) st->device_id = t->device.device_id;
  return bad;
}

/// RowMajorOk for a tensor of kNdim dimensions whose shape is already in sh.
template <int kNdim>
KFFI_INLINE uint64_t RowMajorBits(const DLTensor* t, const int64_t* sh) {
  return t->strides == nullptr ? 0 : RowMajorBitsOf(sh, t->strides, kNdim);
}

/// SimpleTensor for kNdim dimensions (the plan's ndim): straight-line code, no loops. The shape
/// is read once into locals (stores to the symbol values could otherwise alias it).
template <int kNdim>
KFFI_INLINE bool SimpleTensorN(const Plan& p, const TensorCheck& c, const DLTensor* t,
                               RunState* st) {
  if (KFFI_UNLIKELY(HeadBits(c, t, st) != 0)) return false;  // ndim checked: shape is readable
  const DimCheck* d = &p.dims[c.dims_begin];
  int64_t sh[kNdim];
#pragma GCC unroll 8
  for (int i = 0; i < kNdim; ++i) sh[i] = t->shape[i];
  uint64_t bad = 0;
#pragma GCC unroll 8
  for (int i = 0; i < kNdim; ++i) bad |= DimBits<false>(d[i], sh[i], st);
  if (c.check_strides) bad |= RowMajorBits<kNdim>(t, sh);
  return bad == 0;
}

/// A tensor of a simple op (Op::simple, here its rank class): no call, so the caller's loop
/// keeps its registers. Ranks 1 to 4 run unrolled code.
KFFI_INLINE bool SimpleTensor(const Plan& p, uint8_t simple, const TensorCheck& c,
                              const DLTensor* t, RunState* st) {
  switch (simple) {
    case 1:
      return SimpleTensorN<1>(p, c, t, st);
    case 2:
      return SimpleTensorN<2>(p, c, t, st);
    case 3:
      return SimpleTensorN<3>(p, c, t, st);
    case 4:
      return SimpleTensorN<4>(p, c, t, st);
    default:
      break;
  }
  if (KFFI_UNLIKELY(HeadBits(c, t, st) != 0)) return false;  // before reading shape[ndim - 1]
  uint64_t bad = DimsBits<false>(&p.dims[c.dims_begin], t->shape, c.ndim, st);
  if (c.check_strides) bad |= !RowMajorOk(t);
  return bad == 0;
}

/// Any tensor.
inline bool FastTensor(const Plan& p, const TensorCheck& c, const DLTensor* t, RunState* st) {
  uint64_t bad = HeadBits(c, t, st);
  if (c.extra) bad |= ExtraBits(p, c, t, st);
  if (bad != 0) return false;  // before reading shape[ndim - 1]
  if (!c.dynamic_dims) {
    bad = DimsBits<false>(&p.dims[c.dims_begin], t->shape, c.ndim, st);
  } else {
    bad = DynamicDimsBits(&p.dims[c.dims_begin], t->shape, c.ndim, st);
  }
  if (c.check_strides) {
    bad |= c.layout == kLayoutRowMajor && !c.has_strides ? !RowMajorOk(t) : !StridesOk(p, c, t, st);
  }
  return bad == 0;
}

/// A scalar, tuple or optional value (anything but a present tensor); advances *i past the
/// elements of a None tuple.
inline bool FastOther(const Plan& p, const Op& op, const KFFIAny* v, RunState* st, size_t* i) {
  const int32_t type = v->type_index;
  if (op.optional && type == kKFFINone) {
    if (op.kind == kOpTuple) *i += static_cast<size_t>(op.skip);
    return true;
  }
  switch (op.kind) {
    case kOpTensor:
      return false;  // not a tensor
    case kOpInt: {
      const ScalarCheck& s = p.scalars[op.spec];
      return (type == kKFFIInt || type == kKFFIBool) &&
             (s.range == kRangeNone || (v->v_int64 >= s.int_lo && v->v_int64 <= s.int_hi));
    }
    case kOpFloat: {
      if (type != kKFFIFloat && type != kKFFIInt && type != kKFFIBool) return false;
      const ScalarCheck& s = p.scalars[op.spec];
      const double x = type == kKFFIFloat ? v->v_float64 : static_cast<double>(v->v_int64);
      if (s.range == kRangeExplicit) return x >= s.float_lo && x <= s.float_hi;
      return s.range == kRangeNone || !(std::fabs(x) > FLT_MAX && std::isfinite(x));
    }
    case kOpBool:
      return type == kKFFIBool || type == kKFFIInt;
    default: {  // kOpTuple
      if (type != kKFFIArray && type != kKFFIList) return false;
      auto* cell = static_cast<const KFFISeqCell*>(KFFIObjectGetCellPtr(v->v_obj));
      st->frames[op.out_frame] = static_cast<const KFFIAny*>(cell->data);
      return cell->size == op.spec;
    }
  }
}

/// Whether the values of ops [first, end) pass every check: any op, any value.
KFFI_NOINLINE inline bool GeneralRun(const Plan& p, RunState* st, size_t first) {
  const Op* ops = p.ops.data();
  const size_t n = p.ops.size();
  for (size_t i = first; i < n; ++i) {
    const Op& op = ops[i];
    const KFFIAny* v = st->frames[op.frame] + op.index;
    const DLTensor* t = nullptr;
    if (KFFI_LIKELY(op.kind == kOpTensor)) t = TensorOf(v);
    if (KFFI_LIKELY(t != nullptr)) {
      if (KFFI_UNLIKELY(!FastTensor(p, p.tensors[op.spec], t, st))) return false;
    } else if (KFFI_UNLIKELY(!FastOther(p, op, v, st, &i))) {
      return false;
    }
  }
  return true;
}

/// The leading Plan::uniform_count arguments, all simple tensors of rank kNdim: true when every
/// one is a DLTensor* that passes. False sends the call to the general loop (from the start).
template <int kNdim>
KFFI_INLINE bool UniformRun(const Plan& p, const KFFIAny* args, RunState* st) {
  const TensorCheck* checks = p.tensors.data();
  const int32_t n = p.uniform_count;
  for (int32_t i = 0; i < n; ++i) {
    if (KFFI_UNLIKELY(args[i].type_index != kKFFIDLTensorPtr)) return false;
    const auto* t = static_cast<const DLTensor*>(args[i].v_ptr);
    if (KFFI_UNLIKELY(!SimpleTensorN<kNdim>(p, checks[i], t, st))) return false;
  }
  return true;
}

/// Whether the call arguments pass every check. The loop handles the common ops (a call argument
/// that is a tensor with a plain check, Op::simple) without making any call, so that everything
/// stays in registers; at the first other op it hands the rest to GeneralRun.
KFFI_INLINE bool FastRun(const Plan& p, const KFFIAny* args, int32_t num_args, RunState* st) {
  if (KFFI_UNLIKELY(num_args != p.num_args)) return false;
  st->frames[0] = args;
  const Op* ops = p.ops.data();
  const size_t n = p.ops.size();
  size_t first = 0;
  bool uniform = false;
  switch (p.uniform_ndim) {
    case 1:
      uniform = UniformRun<1>(p, args, st);
      break;
    case 2:
      uniform = UniformRun<2>(p, args, st);
      break;
    case 3:
      uniform = UniformRun<3>(p, args, st);
      break;
    case 4:
      uniform = UniformRun<4>(p, args, st);
      break;
    default:
      break;
  }
  if (uniform) first = static_cast<size_t>(p.uniform_count);
  for (size_t i = first; i < n; ++i) {
    const Op& op = ops[i];
    const KFFIAny* v = args + op.index;
    const DLTensor* t;
    if (KFFI_LIKELY(op.simple && v->type_index == kKFFIDLTensorPtr)) {
      t = static_cast<const DLTensor*>(v->v_ptr);
    } else if (op.simple && v->type_index == kKFFITensor) {
      t = KFFITensorGetDLTensorPtr(v->v_obj);
    } else {
      return GeneralRun(p, st, i);
    }
    if (KFFI_UNLIKELY(!SimpleTensor(p, op.simple, p.tensors[op.spec], t, st))) return false;
  }
  return true;
}

// ---- the explaining run (cold) ----------------------------------------------------------------

inline void ExplainDims(const Plan& p, size_t op, size_t first, const int64_t* v, int32_t n,
                        RunState* st) {
  for (int32_t i = 0; i < n; ++i) {
    const size_t di = first + static_cast<size_t>(i);
    const DimCheck& d = p.dims[di];
    const bool bound = d.mode == kDimBindOrMatch && ((st->bound >> d.slot) & 1) != 0;
    if (d.mode == kDimLiteral) {
      if (v[i] != d.value) FailDim(p, op, di, v[i], *st, 0);
    } else if (d.mode == kDimMatch || bound) {
      if (v[i] != st->values[d.slot]) FailDim(p, op, di, v[i], *st, 3);
    } else {
      if (d.int32_mask != 0 && v[i] != static_cast<int32_t>(v[i])) {
        FailDim(p, op, di, v[i], *st, 1);
      }
      if (BindBits(d, v[i]) != 0) FailDim(p, op, di, v[i], *st, 2);
      st->values[d.slot] = v[i];
      st->site[d.slot] = static_cast<int32_t>(di);
      st->bound |= UINT64_C(1) << d.slot;
    }
  }
}

inline void ExplainTensor(const Plan& p, size_t op, const TensorCheck& c, const DLTensor* t,
                          RunState* st) {
  if (((reinterpret_cast<uintptr_t>(t->data) + t->byte_offset) & c.align_mask) != 0) {
    FailAlign(p, op, t);
  }
  if (st->device_op < 0) {
    st->device_op = static_cast<int32_t>(op);
    st->device_id = t->device.device_id;
  } else if (t->device.device_id != st->device_id) {
    FailDeviceIndex(p, op, t, *st);
  }
  if (t->ndim != c.ndim) FailTensorField(p, op, t, 0);
  const uint32_t dt = static_cast<uint32_t>(t->device.device_type);
  if (c.device_mask != 0 && (dt >= 64 || ((c.device_mask >> dt) & 1) == 0)) {
    FailTensorField(p, op, t, 1);
  }
  const uint32_t dtype = DtypeBits(t->dtype);
  bool dtype_ok = c.num_dtypes == 0 || (c.num_dtypes == 1 && dtype == c.dtype);
  for (uint16_t i = 0; c.num_dtypes > 1 && i < c.num_dtypes; ++i) {
    dtype_ok |= p.dtypes[c.dtype_begin + i] == dtype;
  }
  if (!dtype_ok) FailTensorField(p, op, t, 2);
  if (c.offset0 && t->byte_offset != 0) FailTensorField(p, op, t, 3);
  ExplainDims(p, op, c.dims_begin, t->shape, c.ndim, st);
  if (c.layout == kLayoutAny && !c.has_strides) return;
  int64_t buf[kMaxNdim];
  const int64_t* strides = StridesOf(t, buf);
  if (c.layout != kLayoutAny && !LayoutOk(p, c, t, strides)) FailLayout(p, op, t, strides);
  if (c.has_strides) ExplainDims(p, op, c.strides_begin, strides, c.ndim, st);
}

/// Runs the checks one by one in catalogue order and throws the first failure; after FastRun
/// failed there is one, so reaching the end is a bug.
[[noreturn]] KFFI_NOINLINE inline void ExplainRun(const Plan& p, const KFFIAny* args,
                                                  int32_t num_args) {
  if (num_args != p.num_args) FailCount(p, num_args);
  RunState st;
  st.frames[0] = args;
  for (size_t i = 0; i < p.ops.size(); ++i) {
    const Op& op = p.ops[i];
    const KFFIAny* v = st.frames[op.frame] + op.index;
    const DLTensor* t = op.kind == kOpTensor ? TensorOf(v) : nullptr;
    if (t != nullptr) {
      ExplainTensor(p, i, p.tensors[op.spec], t, &st);
      continue;
    }
    const size_t at = i;
    if (FastOther(p, op, v, &st, &i)) continue;
    const bool typed =
        op.kind == kOpInt ? v->type_index == kKFFIInt || v->type_index == kKFFIBool
        : op.kind == kOpFloat
            ? v->type_index == kKFFIFloat || v->type_index == kKFFIInt || v->type_index == kKFFIBool
            : false;
    if (!typed) FailType(p, at, v);
    FailScalarRange(p, at,
                    v->type_index == kKFFIFloat ? FormatFloat(v->v_float64)
                    : op.kind == kOpFloat       ? FormatFloat(static_cast<double>(v->v_int64))
                                                : std::to_string(v->v_int64));
  }
  throw Error("InternalError", "The contract check of `" + p.name +
                                   "` failed, but no check explains why (a bug in kffi)");
}

/// Checks the call arguments; throws the catalogue's error for the first failed check.
KFFI_INLINE void Run(const Plan& p, const KFFIAny* args, int32_t num_args, RunState* st) {
  if (KFFI_UNLIKELY(!FastRun(p, args, num_args, st))) ExplainRun(p, args, num_args);
}

/// After a passing run: the device of the first non-CPU tensor, else of the first tensor (CPU 0
/// when there is none). Its current stream is what EnvStream parameters receive.
inline DLDevice StreamDevice(const Plan& p, const RunState& st) {
  DLDevice first{kDLCPU, 0};
  bool have_first = false;
  for (size_t i = 0; i < p.ops.size(); ++i) {
    const Op& op = p.ops[i];
    const KFFIAny* v = st.frames[op.frame] + op.index;
    if (op.kind == kOpTuple && v->type_index == kKFFINone) i += static_cast<size_t>(op.skip);
    const DLTensor* t = op.kind == kOpTensor ? TensorOf(v) : nullptr;
    if (t == nullptr) continue;
    if (t->device.device_type != kDLCPU) return t->device;
    if (!have_first) first = t->device;
    have_first = true;
  }
  return first;
}

/// The function's arguments: the call arguments with the environment stream put in place of
/// each EnvStream parameter (out has Plan::fn_src.size() slots). A typed C++ function gets an
/// opaque pointer even when it is NULL (its void* parameter reads that without a conversion); a
/// packed one gets None for NULL, as kffi passes null pointers.
inline void ExpandArgs(const Plan& p, const KFFIAny* args, const RunState& st, KFFIAny* out,
                       bool null_as_none) {
  const DLDevice dev = StreamDevice(p, st);
  void* stream = KFFIEnvGetStream(dev.device_type, dev.device_id);
  for (size_t j = 0; j < p.fn_src.size(); ++j) {
    if (p.fn_src[j] >= 0) {
      out[j] = args[p.fn_src[j]];
    } else {
      out[j].type_index = stream == nullptr && null_as_none ? kKFFINone : kKFFIOpaquePtr;
      out[j].zero_padding = 0;
      out[j].v_int64 = 0;
      out[j].v_ptr = stream;
    }
  }
}

}  // namespace contract
}  // namespace details
}  // namespace kffi

#endif  // KFFI_CONTRACT_DETAILS_H_
