// src/contract/contract_check.cc: the checks of a contract that kernels do not inline: any op that
// is not a simple tensor (scalars, tuples, optionals, strided or ordered layouts, device and dtype
// alternatives, bindings under Optional), run by KFFIContractCheckFrom once a kernel's inline check
// (FastRun, include/kffi/contract/details.h) reaches such an op. The predicates here are shared
// with the explaining check (contract_explain.cc), so that the two agree on every input.
// SPDX-License-Identifier: Apache-2.0
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>

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

// ---- records ------------------------------------------------------------------------------

namespace {

/// The field `name` of type index type or of its nearest ancestor that declares it (the lookup of
/// KFFIObjectFindField, by type); NULL when there is none.
const KFFIFieldInfo* FindTypeField(int32_t type, std::string_view name) {
  const KFFITypeInfo* info = KFFIGetTypeInfo(type);
  if (info == nullptr) return nullptr;
  for (int32_t d = info->type_depth; d >= 0; --d) {
    const int32_t index = d == info->type_depth ? info->type_index : info->type_ancestors[d];
    const KFFITypeReflection* r = KFFIGetTypeReflection(index);
    for (int32_t i = 0; r != nullptr && i < r->num_fields; ++i) {
      if (Sv(r->fields[i].name.data, r->fields[i].name.size) == name) {
        return &r->fields[i];
      }
    }
  }
  return nullptr;
}

/// The scalar kind of a contract field type and of a C++ field (its type index).
const char* FieldKindName(int32_t type_index) {
  switch (type_index) {
    case kKFFIInt:
      return "int";
    case kKFFIFloat:
      return "float";
    case kKFFIBool:
      return "bool";
    default:
      return nullptr;
  }
}

/// Clears the raised error; its "Kind: message" into *why when not NULL.
void DropRaised(std::string* why = nullptr) {
  KFFIObjectHandle e = nullptr;
  KFFIErrorMoveFromRaised(&e);
  if (e == nullptr) return;
  if (why != nullptr) {
    const KFFIErrorCell* cell = KFFIErrorGetCellPtr(e);
    *why = std::string(cell->kind.data, cell->kind.size) + ": " +
           std::string(cell->message.data, cell->message.size);
  }
  KFFIObjectDecRef(e);
}

/// The fields of the record being checked on this thread (RunState has no room for them, and a
/// record's field ops follow it at once: nothing else runs between).
thread_local KFFIAny t_record_fields[kMaxRecordFields];

}  // namespace

bool ResolveRecord(const Plan& p, const RecordCheck& r, bool final) {
  const int state = r.state.load(std::memory_order_acquire);
  if (state != 0) return state == 1;
  std::lock_guard<std::mutex> lock(r.mutex);
  if (r.state.load(std::memory_order_relaxed) != 0) return r.state.load() == 1;
  const std::string where =
      "Invalid contract for `" + p.name + "`: parameter `" + r.subject + ": " + r.type_key + "`: ";
  auto refuse = [&](const std::string& why) {
    r.error = where + why;
    r.state.store(2, std::memory_order_release);
    return false;
  };
  const KFFIByteArray key{r.type_key.data(), r.type_key.size()};
  int32_t index = -1;
  if (KFFITypeKeyToIndex(&key, &index) != 0) {
    DropRaised();
    index = -1;
  }
  const KFFITypeInfo* info = index >= 0 ? KFFIGetTypeInfo(index) : nullptr;
  bool has_reflection = false;
  for (int32_t d = info != nullptr ? info->type_depth : -1; d >= 0; --d) {
    has_reflection |=
        KFFIGetTypeReflection(d == info->type_depth ? index : info->type_ancestors[d]) != nullptr;
  }
  if (info == nullptr || (!has_reflection && !r.type->field_names.empty())) {
    if (!final) return false;  // the library may register it later in its load
    return refuse(info == nullptr
                      ? "the type is not registered (declare it with KFFI_OBJECT_DEF or "
                        "KFFI_RECORD, or load the library that does, before calling)"
                      : "the type declares no fields (KFFI_OBJECT_DEF)");
  }
  std::vector<const KFFIFieldInfo*> fields;
  for (size_t i = 0; i < r.type->field_names.size(); ++i) {
    const std::string& name = r.type->field_names[i];
    const TypeAst& want = r.type->elems[i];
    const KFFIFieldInfo* f = FindTypeField(index, name);
    if (f == nullptr) return refuse("the type has no field `" + name + "`");
    const char* kind = FieldKindName(f->type_index);
    const char* expected = want.kind == Kind::kInt     ? "int"
                           : want.kind == Kind::kFloat ? "float"
                                                       : "bool";
    if (kind == nullptr || Sv(kind) != Sv(expected)) {
      return refuse("field `" + name + "` is declared " + want.name + ", but its C++ type is `" +
                    std::string(f->type_str.data, f->type_str.size) + "` (expected " +
                    (want.kind == Kind::kInt     ? "an integer type"
                     : want.kind == Kind::kFloat ? "a floating-point type"
                                                 : "bool") +
                    ")");
    }
    fields.push_back(f);
  }
  r.type_index = index;
  r.type_depth = info->type_depth;
  r.fields = std::move(fields);
  r.state.store(1, std::memory_order_release);
  return true;
}

RecordRead ReadRecordFields(const PlanLayout& p, const Op& op, const KFFIAny* v, RunState* st,
                            std::string* why) {
  const Plan& plan = *static_cast<const Plan*>(p.runtime_plan);
  const RecordCheck& r = *plan.records[static_cast<size_t>(op.spec)];
  if (KFFI_UNLIKELY(r.state.load(std::memory_order_acquire) != 1) &&
      !ResolveRecord(plan, r, /*final=*/true)) {
    return RecordRead::kUnresolved;
  }
  const int32_t type = v->type_index;
  if (type < kKFFIStaticObjectBegin || v->v_obj == nullptr) return RecordRead::kType;
  bool exact = type == r.type_index;
  if (!exact) {
    const KFFITypeInfo* info = KFFIGetTypeInfo(type);
    if (info == nullptr || info->type_depth <= r.type_depth ||
        info->type_ancestors[r.type_depth] != r.type_index) {
      return RecordRead::kType;
    }
  }
  char* obj = static_cast<char*>(static_cast<void*>(v->v_obj));
  const size_t n = r.fields.size();
  for (size_t j = 0; j < n; ++j) {
    // A subtype may declare a field of the same name: its own is the one the object shows.
    const KFFIFieldInfo* f = exact ? r.fields[j] : FindTypeField(type, r.type->field_names[j]);
    KFFIAny* out = &t_record_fields[j];
    out->type_index = kKFFINone;
    out->zero_padding = 0;
    out->v_int64 = 0;
    if (f == nullptr || f->getter(obj + f->offset, out) != 0) {
      DropRaised(why);
      if (why != nullptr)
        *why = r.type->field_names[j] + (f == nullptr ? ": missing" : ": " + *why);
      return RecordRead::kGetter;
    }
    if (out->type_index >= kKFFIStaticObjectBegin) {  // not a scalar after all: never kept
      KFFIObjectDecRef(out->v_obj);
      out->type_index = kKFFINone;
    }
  }
  st->frames[op.out_frame] = t_record_fields;
  return RecordRead::kOk;
}

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
    if (op.kind == kOpTuple || op.kind == kOpRecord) *i += static_cast<size_t>(op.skip);
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
    case kOpRecord:
      return ReadRecordFields(p, op, v, st) == RecordRead::kOk;
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
    if (op.simple && v->type_index == kKFFIDLTensorPtr && !WritableMissing(op, v)) {
      // A plain tensor check, what a kernel's inline check hands over after its leading run of
      // same-rank tensors: the checks that need no plan lookups beyond its own.
      const auto* t = static_cast<const DLTensor*>(v->v_ptr);
      const TensorCheck& c = p.tensors[op.spec];
      uint64_t bad = HeadBits(c, t, st);
      if (KFFI_LIKELY(bad == 0)) {
        bad = DimsBits<false>(p.dims + c.dims_begin, t->shape, c.ndim, st);
        if (c.check_strides) bad |= !RowMajorOk(t);
      }
      if (KFFI_UNLIKELY(bad != 0)) {
        st->failed_op = static_cast<int32_t>(i);
        return false;
      }
      continue;
    }
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
