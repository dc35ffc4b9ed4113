// src/contract/contract_api.cc: the KFFIContract* functions of c_api.h: compiled contracts as
// runtime objects ("kffi.Contract") that hold a Plan (contract_internal.h) and hand kernels its
// layout.
// SPDX-License-Identifier: Apache-2.0
#include <kffi/c_api.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "contract/contract_internal.h"
#include "core/runtime_internal.h"

namespace kffi {
namespace details {
namespace contract {
namespace {

/// The payload of a contract object: its plan (the layout's arrays live in it).
struct ContractPayload {
  explicit ContractPayload(std::unique_ptr<Plan> p) : plan(std::move(p)) {}
  std::unique_ptr<Plan> plan;
};

int32_t ContractTypeIndex() {
  static const int32_t index =
      GetOrAllocTypeIndex("kffi.Contract", -1, 1, static_cast<int32_t>(kKFFIObject));
  return index;
}

/// The plan of a contract handle; anything else is a TypeError naming the function.
Plan& PlanOf(KFFIObjectHandle h, const char* fn) {
  if (h == nullptr) ThrowCApiError("ValueError", std::string(fn) + ": the contract is NULL");
  const int32_t type = static_cast<KFFIObject*>(h)->type_index;
  if (type != ContractTypeIndex()) {
    ThrowCApiError("TypeError", std::string(fn) + ": expected a kffi.Contract, got `" +
                                    TypeKeyForMessage(type) + "`");
  }
  return *RuntimePayload<ContractPayload>(h)->plan;
}

std::string_view TextOf(const Plan& p, int32_t what, int32_t index) {
  auto at = [&](size_t n) {
    if (index < 0 || static_cast<size_t>(index) >= n) {
      ThrowCApiError("IndexError", "KFFIContractGetText: index " + std::to_string(index) +
                                       " out of range (" + std::to_string(n) + " entries)");
    }
    return static_cast<size_t>(index);
  };
  switch (what) {
    case kKFFIContractTextName:
      return p.name;
    case kKFFIContractTextSource:
      return p.text;
    case kKFFIContractTextSignature:
      return p.signature;
    case kKFFIContractTextParamName:
      return p.ast.params[p.call_params[at(p.call_params.size())]].name;
    case kKFFIContractTextParamType:
      return p.ast.params[p.call_params[at(p.call_params.size())]].type_text;
    case kKFFIContractTextOutputDtype:
      return p.ast.outputs[at(p.ast.outputs.size())].tensor.dtype_text;
    case kKFFIContractTextSymbol:
      return p.symbols[at(p.symbols.size())].name;
    default:
      ThrowCApiError("ValueError", "KFFIContractGetText: unknown text " + std::to_string(what));
  }
}

// ---- the arguments of a function with stream parameters (KFFIContractExpandArgs) -------------

/// After a passing run: the device of the first non-CPU tensor, else of the first tensor (CPU 0
/// when there is none). Its current stream is what EnvStream parameters receive.
DLDevice StreamDevice(const PlanLayout& p, const KFFIAny* const* frames) {
  DLDevice first{kDLCPU, 0};
  bool have_first = false;
  for (size_t i = 0; i < static_cast<size_t>(p.num_ops); ++i) {
    const Op& op = p.ops[i];
    const KFFIAny* v = frames[op.frame] + op.index;
    if (op.kind == kOpTuple && v->type_index == kKFFINone) i += static_cast<size_t>(op.skip);
    if (op.kind == kOpRecord) i += static_cast<size_t>(op.skip);  // its fields hold no tensor
    const DLTensor* t = op.kind == kOpTensor ? TensorOf(v) : nullptr;
    if (t == nullptr) continue;
    if (t->device.device_type != kDLCPU) return t->device;
    if (!have_first) first = t->device;
    have_first = true;
  }
  return first;
}

/// A pointer argument as the function receives it: an opaque pointer, or None for NULL when
/// null_as_none (a packed function; kffi passes null pointers as None).
void SetPointerArg(KFFIAny* v, void* ptr, bool null_as_none) {
  v->type_index = ptr == nullptr && null_as_none ? kKFFINone : kKFFIOpaquePtr;
  v->zero_padding = 0;
  v->v_int64 = 0;
  v->v_ptr = ptr;
}

/// Rewrites the Stream arguments among the function's arguments as pointers: an int handle (a
/// cudaStream_t as an integer) becomes the pointer with its bits, None becomes NULL. Out of line:
/// only functions with a Stream parameter pay for it.
void ConvertStreamArgs(const PlanLayout& p, KFFIAny* out, bool null_as_none) {
  for (size_t j = 0; j < static_cast<size_t>(p.num_fn_params); ++j) {
    if (p.fn_src[j] < 0 || !p.fn_stream[j]) continue;
    const KFFIAny a = out[j];
    void* ptr = a.type_index == kKFFIInt
                    ? reinterpret_cast<void*>(static_cast<uintptr_t>(a.v_int64))
                : a.type_index == kKFFIOpaquePtr ? a.v_ptr
                                                 : nullptr;
    SetPointerArg(&out[j], ptr, null_as_none);
  }
}

/// The function's arguments (out has PlanLayout::num_fn_params slots): the call arguments, with the
/// environment stream put in place of each EnvStream parameter, and each Stream argument as a
/// pointer (ConvertStreamArgs). A typed C++ function gets an opaque pointer even when it is NULL
/// (its void* parameter reads that without a conversion); a packed one gets None for NULL, as
/// kffi passes null pointers. frames: a passing check's (frames[0]: the call arguments).
void WriteFunctionArgs(const PlanLayout& p, const KFFIAny* const* frames, KFFIAny* out,
                       bool null_as_none) {
  const KFFIAny* args = frames[0];
  void* stream = nullptr;
  if (p.has_env_stream) {
    const DLDevice dev = StreamDevice(p, frames);
    stream = KFFIEnvGetStream(dev.device_type, dev.device_id);
  }
  for (size_t j = 0; j < static_cast<size_t>(p.num_fn_params); ++j) {
    if (p.fn_src[j] >= 0) {
      out[j] = args[p.fn_src[j]];
    } else {
      SetPointerArg(&out[j], stream, null_as_none);
    }
  }
  if (p.has_stream) ConvertStreamArgs(p, out, null_as_none);
}

}  // namespace
}  // namespace contract
}  // namespace details
}  // namespace kffi

using kffi::details::ByteArrayArg;
using kffi::details::CheckOutArg;
using kffi::details::ThrowCApiError;
using kffi::details::contract::PlanOf;

int KFFIContractCreate(const KFFIByteArray* name, const KFFIByteArray* text, int32_t plan_version,
                       KFFIObjectHandle* out) {
  KFFI_CAPI_BEGIN();
  namespace c = kffi::details::contract;
  CheckOutArg(out, "KFFIContractCreate: out");
  *out = nullptr;
  std::string_view n = ByteArrayArg(name, "KFFIContractCreate: name");
  std::string_view t = ByteArrayArg(text, "KFFIContractCreate: text");
  if (plan_version != c::kPlanLayoutVersion) {
    // A library built with other headers than this runtime's: reading the plan in another
    // layout would misread every check, so the contract is refused instead.
    ThrowCApiError("RuntimeError", "Cannot compile the contract of `" + std::string(n) +
                                       "`: the library reads " + "check plans of layout version " +
                                       std::to_string(plan_version) +
                                       ", this kffi runtime builds version " +
                                       std::to_string(c::kPlanLayoutVersion) +
                                       " (rebuild the library with this kffi's headers)");
  }
  std::unique_ptr<c::Plan> plan = c::MakePlan(n, t);
  // Record types registered by now are checked against their reflection here (a refused one
  // fails the library's load); the others at the first call that meets them.
  for (const auto& r : plan->records) {
    if (!c::ResolveRecord(*plan, *r, /*final=*/false) && r->state.load() == 2) {
      throw kffi::Error("ValueError", r->error);
    }
  }
  c::Plan* raw = plan.get();
  KFFIObject* obj =
      kffi::details::NewRuntimeObject<c::ContractPayload>(c::ContractTypeIndex(), std::move(plan));
  raw->layout.contract = obj;
  *out = obj;
  KFFI_CAPI_END();
}

const void* KFFIContractGetPlan(KFFIObjectHandle contract) {
  try {
    return &PlanOf(contract, "KFFIContractGetPlan").layout;
  }
  KFFI_CATCH_ALL {
    kffi::details::SetRaisedFromCurrentException();
    return nullptr;
  }
}

int32_t KFFIContractCheckFrom(const void* plan, void* state, int32_t first_op) {
  namespace c = kffi::details::contract;
  // No error to raise: the plan and state come from the kernel's own check, as it made them.
  c::RunState* st = static_cast<c::RunState*>(state);
  if (c::GeneralRun(*static_cast<const c::PlanLayout*>(plan), st, static_cast<size_t>(first_op))) {
    return -1;
  }
  return st->failed_op;
}

int KFFIContractExplain(KFFIObjectHandle contract, const KFFIAny* args, int32_t num_args,
                        int32_t* out_check, int32_t* out_op) {
  KFFI_CAPI_BEGIN();
  namespace c = kffi::details::contract;
  const c::Plan& p = PlanOf(contract, "KFFIContractExplain");
  if (num_args < 0 || (args == nullptr && num_args > 0)) {
    ThrowCApiError("ValueError", "KFFIContractExplain: args is NULL or num_args is negative");
  }
  const c::Failure f = c::Explain(p, args, num_args);
  if (out_check != nullptr) *out_check = static_cast<int32_t>(f.check);
  if (out_op != nullptr) *out_op = f.op;
  if (f.check != c::Check::kNone) {
    kffi::Error e(f.kind, f.message);
    if (f.typed_arg != nullptr) {
      kffi::details::RecordArgumentType(
          kffi::details::ObjectUnsafe::GetHandle(kffi::details::ObjectRefData(e)), f.typed_arg,
          f.type_offset, f.type_size);
    }
    throw e;
  }
  if (out_check == nullptr) {
    // The caller's inline check failed but no check of the runtime's does: the two disagree.
    throw kffi::Error("InternalError", "The contract check of `" + p.name +
                                           "` failed, but no check explains why (a bug in kffi)");
  }
  KFFI_CAPI_END();
}

int KFFIContractCheckSignature(KFFIObjectHandle contract, const KFFIByteArray* param_types,
                               int32_t num_params) {
  KFFI_CAPI_BEGIN();
  const auto& p = PlanOf(contract, "KFFIContractCheckSignature");
  if (num_params < 0 || (param_types == nullptr && num_params > 0)) {
    ThrowCApiError("ValueError", "KFFIContractCheckSignature: invalid parameter types");
  }
  std::vector<std::string> types;
  for (int32_t i = 0; i < num_params; ++i) {
    types.emplace_back(ByteArrayArg(&param_types[i], "KFFIContractCheckSignature: a type"));
  }
  kffi::details::contract::CheckCppSignature(p, types);
  KFFI_CAPI_END();
}

int KFFIContractExportCreate(const KFFIByteArray* name, const KFFIByteArray* text,
                             const KFFIByteArray* param_types, int32_t num_params,
                             int32_t plan_version, KFFIObjectHandle* out) {
  if (out == nullptr) {
    KFFIErrorSetRaisedFromCStr("ValueError", "KFFIContractExportCreate: out is NULL");
    return -1;
  }
  *out = nullptr;
  KFFIObjectHandle contract = nullptr;
  int rc = KFFIContractCreate(name, text, plan_version, &contract);
  if (rc == 0) {
    rc = KFFIContractCheckSignature(contract, param_types, num_params);
    if (rc != 0) KFFIObjectDecRef(contract);
  }
  if (rc == 0) {
    *out = contract;
    return 0;
  }
  // Reported to the loader (a no-op outside a load), then raised again for the caller to keep.
  KFFIObjectHandle err = nullptr;
  KFFIErrorMoveFromRaised(&err);
  if (err == nullptr) return -1;
  const KFFIErrorCell* cell = KFFIErrorGetCellPtr(err);
  int32_t taken = 0;
  if (KFFIModuleReportLoadError(&cell->kind, &cell->message, &taken) != 0) {
    KFFIObjectHandle ignored = nullptr;
    KFFIErrorMoveFromRaised(&ignored);
    if (ignored != nullptr) KFFIObjectDecRef(ignored);
  }
  KFFIErrorSetRaised(err);
  KFFIObjectDecRef(err);
  return -1;
}

int KFFIContractGetMetadata(KFFIObjectHandle contract, const KFFIByteArray* return_type,
                            const KFFIByteArray* doc, KFFIAny* out) {
  KFFI_CAPI_BEGIN();
  const auto& p = PlanOf(contract, "KFFIContractGetMetadata");
  CheckOutArg(out, "KFFIContractGetMetadata: out");
  const std::string json = kffi::details::contract::ContractMetadataJson(
      p, ByteArrayArg(return_type, "KFFIContractGetMetadata: return_type"),
      ByteArrayArg(doc, "KFFIContractGetMetadata: doc"));
  kffi::details::MakeStringAny(json.data(), json.size(), false, out);
  KFFI_CAPI_END();
}

int KFFIContractGetText(KFFIObjectHandle contract, int32_t what, int32_t index,
                        KFFIByteArray* out) {
  KFFI_CAPI_BEGIN();
  const auto& p = PlanOf(contract, "KFFIContractGetText");
  CheckOutArg(out, "KFFIContractGetText: out");
  std::string_view s = kffi::details::contract::TextOf(p, what, index);
  out->data = s.data();
  out->size = s.size();
  KFFI_CAPI_END();
}

int KFFIContractFindSymbol(KFFIObjectHandle contract, const KFFIByteArray* symbol,
                           int32_t* out_slot) {
  KFFI_CAPI_BEGIN();
  const auto& p = PlanOf(contract, "KFFIContractFindSymbol");
  CheckOutArg(out_slot, "KFFIContractFindSymbol: out_slot");
  *out_slot = p.SlotOf(ByteArrayArg(symbol, "KFFIContractFindSymbol: symbol"));
  KFFI_CAPI_END();
}

int KFFIContractGetOutputShape(KFFIObjectHandle contract, int64_t output, const int64_t* values,
                               uint64_t bound, int64_t* out_shape, int32_t* out_ndim) {
  KFFI_CAPI_BEGIN();
  const auto& p = PlanOf(contract, "KFFIContractGetOutputShape");
  CheckOutArg(out_shape, "KFFIContractGetOutputShape: out_shape");
  CheckOutArg(out_ndim, "KFFIContractGetOutputShape: out_ndim");
  if (values == nullptr && !p.symbols.empty()) {
    ThrowCApiError("ValueError", "KFFIContractGetOutputShape: values must not be NULL");
  }
  const std::vector<int64_t> shape = kffi::details::contract::OutputShape(p, output, values, bound);
  for (size_t i = 0; i < shape.size(); ++i) out_shape[i] = shape[i];  // at most kMaxNdim
  *out_ndim = static_cast<int32_t>(shape.size());
  KFFI_CAPI_END();
}

int KFFIContractExpandArgs(KFFIObjectHandle contract, const KFFIAny* const* frames,
                           int32_t null_as_none, KFFIAny* out) {
  KFFI_CAPI_BEGIN();
  const auto& p = PlanOf(contract, "KFFIContractExpandArgs");
  if (frames == nullptr || out == nullptr) {
    ThrowCApiError("ValueError", "KFFIContractExpandArgs: frames and out must not be NULL");
  }
  kffi::details::contract::WriteFunctionArgs(p.layout, frames, out, null_as_none != 0);
  KFFI_CAPI_END();
}
