// src/contract/contract_check.cc: the checks of a contract that kernels do not inline: any op that
// is not a simple tensor (scalars, tuples, optionals, strided or ordered layouts, device and dtype
// alternatives, bindings under Optional), run by KFFIContractCheckFrom once a kernel's inline check
// (FastRun, include/kffi/contract_details.h) reaches such an op. The predicates here are shared
// with the explaining check (contract_explain.cc), so that the two agree on every input.
// SPDX-License-Identifier: Apache-2.0
#include <cfloat>
#include <cmath>
#include <cstdint>

#include "contract/contract_internal.h"

namespace kffi {
namespace details {
namespace contract {

uint64_t DynamicDimsBits(const DimCheck* d, const int64_t* v, int32_t n, RunState* st) {
  return DimsBits<true>(d, v, n, st);
}

/// The strides (compact row-major ones in buf when the tensor has NULL strides).
const int64_t* StridesOf(const DLTensor* t, int64_t* buf) {
  if (t->strides != nullptr) return t->strides;
  uint64_t acc = 1;
  for (int32_t i = t->ndim; i-- > 0;) {
    buf[i] = static_cast<int64_t>(acc);
    acc *= static_cast<uint64_t>(t->shape[i] > 1 ? t->shape[i] : 1);
  }
  return buf;
}

/// Whether the tensor is compact in the layout's dimension order. Dimensions of size 1 may have
/// any stride, and a tensor without elements has every layout (as in PyTorch). NULL strides are
/// compact row-major by definition (DLPack), whatever the shape holds: both runs ask this one
/// function, so they agree even on shapes with negative sizes.
bool LayoutOk(const PlanLayout& p, const TensorCheck& c, const DLTensor* t,
              const int64_t* strides) {
  if (t->strides == nullptr && c.layout == kLayoutRowMajor) return true;
  const int32_t* order = c.layout == kLayoutOrdered ? p.orders + c.order_begin : nullptr;
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

namespace {

/// The stride checks; false when one fails.
bool StridesOk(const PlanLayout& p, const TensorCheck& c, const DLTensor* t, RunState* st) {
  // NULL strides are compact row-major (DLPack).
  if (t->strides == nullptr && c.layout != kLayoutOrdered && !c.has_strides) return true;
  int64_t buf[kMaxNdim];
  const int64_t* strides = StridesOf(t, buf);
  if (c.layout != kLayoutAny && !LayoutOk(p, c, t, strides)) return false;
  return !c.has_strides || DynamicDimsBits(p.dims + c.strides_begin, strides, c.ndim, st) == 0;
}

/// The rarer tensor checks, out of line: device type or dtype alternatives, and a device index
/// reference that an Optional tensor may have set.
uint64_t ExtraBits(const PlanLayout& p, const TensorCheck& c, const DLTensor* t, RunState* st) {
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

}  // namespace

/// Any tensor.
bool FastTensor(const PlanLayout& p, const TensorCheck& c, const DLTensor* t, RunState* st) {
  uint64_t bad = HeadBits(c, t, st);
  if (c.extra) bad |= ExtraBits(p, c, t, st);
  if (bad != 0) return false;  // before reading shape[ndim - 1]
  if (!c.dynamic_dims) {
    bad = DimsBits<false>(p.dims + c.dims_begin, t->shape, c.ndim, st);
  } else {
    bad = DynamicDimsBits(p.dims + c.dims_begin, t->shape, c.ndim, st);
  }
  if (c.check_strides) {
    bad |= c.layout == kLayoutRowMajor && !c.has_strides ? !RowMajorOk(t) : !StridesOk(p, c, t, st);
  }
  return bad == 0;
}

/// A scalar, tuple or optional value (anything but a present tensor); advances *i past the
/// elements of a None tuple.
bool FastOther(const PlanLayout& p, const Op& op, const KFFIAny* v, RunState* st, size_t* i) {
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
    case kOpStream:
      return type == kKFFIOpaquePtr || type == kKFFIInt || type == kKFFINone;
    default: {  // kOpTuple
      if (type != kKFFIArray && type != kKFFIList) return false;
      auto* cell = static_cast<const KFFISeqCell*>(KFFIObjectGetCellPtr(v->v_obj));
      st->frames[op.out_frame] = static_cast<const KFFIAny*>(cell->data);
      return cell->size == op.spec;
    }
  }
}

/// Whether a tensor argument is read-only while its parameter is `mut` (tensor_flags is only
/// meaningful on a tensor; a tuple element's stored value has 0 there).
bool WritableMissing(const Op& op, const KFFIAny* v) {
  return op.mut != 0 && (v->tensor_flags & kKFFITensorFlagReadOnly) != 0;
}

/// Whether the values of ops [first, end) pass every check: any op, any value. On failure,
/// st->failed_op is the op that failed.
bool GeneralRun(const PlanLayout& p, RunState* st, size_t first) {
  const Op* ops = p.ops;
  const size_t n = static_cast<size_t>(p.num_ops);
  for (size_t i = first; i < n; ++i) {
    const Op& op = ops[i];
    const KFFIAny* v = st->frames[op.frame] + op.index;
    const DLTensor* t = nullptr;
    if (KFFI_LIKELY(op.kind == kOpTensor)) t = TensorOf(v);
    bool ok;
    const size_t at = i;
    if (KFFI_LIKELY(t != nullptr)) {
      ok = !WritableMissing(op, v) && FastTensor(p, p.tensors[op.spec], t, st);
    } else {
      ok = FastOther(p, op, v, st, &i);
    }
    if (KFFI_UNLIKELY(!ok)) {
      st->failed_op = static_cast<int32_t>(at);
      return false;
    }
  }
  return true;
}

}  // namespace contract
}  // namespace details
}  // namespace kffi
