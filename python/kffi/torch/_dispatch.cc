// python/kffi/torch/_dispatch.cc: kffi functions as boxed C++ kernels of torch's dispatcher.
//
// kffi.torch defines each op's schema in Python (torch.library) and registers, through the
// function exported here, one boxed kernel per backend (CPU, CUDA) that converts the dispatcher's
// IValues to kffi arguments and calls the kffi function without Python, and the Autograd kernel
// of an op without an autograd rule (it refuses inputs that require grad, runs plain calls at
// once, and bumps the version counter of what the op writes). Compiled graphs and torch.ops
// calls therefore cost about what a C++ TORCH_LIBRARY op costs. Built once per torch version by
// kffi.torch._glue (kffi.cpp.build), loaded as a kffi module. The same library, with
// _register.cc, is what a C++ program links for kffi::torch::RegisterOps (<kffi/torch.h>):
// ops registered from C++ run these very kernels.
//
// The call plan is a flat list of int64 (made by _signature.cc, OpSignature::Plan):
//   n_params, then per kffi parameter (source, value): 0 = schema argument `value`, 1 = the
//       current stream of the call's device (None on CPU), 2 = allocated output `value`, 3 = None;
//   n_allocs, then per allocated output: ndim, n_dtypes, n_dtypes packed dtypes (one: fixed;
//       several or none: the dtype of the first tensor argument the list allows), then per
//       dimension (arg, value): arg -1 = the literal value, else dimension `value` of schema
//       argument `arg`;
//   device_arg (the schema argument whose device the call uses; -1 = CPU), ret_kind (kRet*),
//   n_returns (tensors the function returns);
//   only when some parameter is a record (source 4 = record `value`): n_records, then per record:
//       n_fields, then per field the schema argument that carries it. What the records are comes
//       beside the plan, by name (OpSignature::RecordNames): per record its type key, then its
//       fields' names. No process-local index is in a plan, so a manifest saved in one process
//       means the same in another; the reader finds each type by key and each field by name in
//       that type. The kernel makes the object with the type's creator and assigns each field
//       through its setter.
// SPDX-License-Identifier: Apache-2.0
#include "_dispatch.h"

#include <ATen/core/LegacyTypeDispatch.h>
#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/from_blob.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/GradMode.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/SmallVector.h>
#include <kffi/any.h>
#include <kffi/c_api.h>
#include <kffi/container/array.h>
#include <kffi/env.h>
#include <kffi/error.h>
#include <kffi/export.h>
#include <kffi/function.h>
#include <kffi/tensor.h>
#include <torch/library.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "_call_env.h"
#include "_signature.h"
#include "_torch_dlpack.h"

namespace kffi {
namespace torchglue {
namespace {

constexpr int64_t kMaxPlanItems = 1 << 16;  // a plan is a few dozen numbers
constexpr int64_t kMaxNdim = 64;

// ---- the plan -------------------------------------------------------------------------------

/// A record parameter: the object's creator and, per field, its schema argument and setter.
struct RecordFieldArg {
  int32_t arg;
  const KFFIFieldInfo* field;  // the runtime's record (process lifetime)
  std::string label;           // `cfg.alpha`, for messages
};
struct RecordSpec {
  int32_t type_index;
  int (*creator)(KFFIObjectHandle* out);
  std::vector<RecordFieldArg> fields;
};

struct AllocSpec {
  std::vector<std::pair<int64_t, int64_t>> dims;  // (arg or -1, dim or literal)
  std::vector<DLDataType> dtypes;
};

// The fields a call reads come first, and the kernel holds its plan in place: a call touches a
// few adjacent cache lines (measurable when Python runs between calls and evicts them).
struct Plan {
  int64_t num_schema_args = 0;
  int64_t device_arg = -1;
  int64_t ret_kind = kRetNone;
  bool returns_tensors = false;  // kRetTensor, kRetTensors, kRetTensorList
  c10::SmallVector<std::pair<int32_t, int32_t>, 8> params;  // (source, value)
  c10::SmallVector<int32_t, 4> written;                     // schema arguments the op writes
  std::vector<AllocSpec> allocs;
  std::vector<RecordSpec> records;
  int64_t n_returns = 0;
  std::string name;
};

class PlanReader {
 public:
  explicit PlanReader(const Array<int64_t>& items) : items_(items) {}
  int64_t Next(const char* what, int64_t lo, int64_t hi) {
    KFFI_CHECK(pos_ < static_cast<int64_t>(items_.size()), ValueError)
        << "kffi.torch: the call plan ends early (reading " << what << ")";
    int64_t v = items_[pos_++];
    KFFI_CHECK(v >= lo && v <= hi, ValueError) << "kffi.torch: call plan item " << what << " = "
                                               << v << " is outside [" << lo << ", " << hi << "]";
    return v;
  }
  bool AtEnd() const { return pos_ == static_cast<int64_t>(items_.size()); }

 private:
  const Array<int64_t>& items_;
  int64_t pos_ = 0;
};

/// The record section of a plan (after its fixed part), checked against the live registry by
/// name: each type found by its key, each field by its name in that type (so a field of another
/// type, or a type's index from another process, cannot be named), and each record's type the
/// one the function declares for its parameter.
void ParseRecords(PlanReader* r, const std::vector<std::string>& names,
                  const std::vector<std::string>& param_types, Plan* plan) {
  const int64_t max_arg = plan->num_schema_args - 1;
  size_t at = 0;
  auto next_name = [&](const char* what) -> const std::string& {
    KFFI_CHECK(at < names.size(), ValueError)
        << "kffi.torch: " << plan->name << ": the call plan's records name " << names.size()
        << " types and fields, fewer than they hold (reading " << what << ")";
    return names[at++];
  };
  int64_t n_records = r->Next("n_records", 0, 1024);
  for (int64_t k = 0; k < n_records; ++k) {
    RecordSpec rec;
    const std::string& key = next_name("a record type");
    KFFIByteArray bytes{key.data(), key.size()};
    int32_t index = -1;
    if (KFFITypeKeyToIndex(&bytes, &index) != 0) {
      KFFIObjectHandle err = nullptr;
      KFFIErrorMoveFromRaised(&err);
      if (err != nullptr) KFFIObjectDecRef(err);
      KFFI_THROW(ValueError) << "kffi.torch: " << plan->name << ": the call plan's record type "
                             << key << " is not registered in this process (load its library)";
    }
    const KFFITypeReflection* refl = KFFIGetTypeReflection(index);
    KFFI_CHECK(refl != nullptr && refl->creator != nullptr, ValueError)
        << "kffi.torch: " << plan->name << ": the call plan's record type " << key
        << " has no fields or no default constructor";
    rec.type_index = index;
    rec.creator = refl->creator;
    std::unordered_map<std::string, const KFFIFieldInfo*> fields;
    for (const RecordField& f : RecordFieldsOf(index)) fields.emplace(f.name, f.info);
    int64_t n_fields = r->Next("n_fields", 0, 1024);
    for (int64_t j = 0; j < n_fields; ++j) {
      int32_t arg = static_cast<int32_t>(r->Next("field argument", 0, max_arg));
      const std::string& fname = next_name("a field name");
      auto f = fields.find(fname);
      KFFI_CHECK(f != fields.end() && f->second->setter != nullptr, ValueError)
          << "kffi.torch: " << plan->name << ": the call plan's record field " << key << "."
          << fname << " is not a writable field of " << key;
      rec.fields.push_back(RecordFieldArg{arg, f->second, key + "." + fname});
    }
    plan->records.push_back(std::move(rec));
  }
  KFFI_CHECK(at == names.size(), ValueError)
      << "kffi.torch: " << plan->name << ": the call plan's records name " << names.size()
      << " types and fields, more than they hold (" << at << ")";
  for (size_t i = 0; i < plan->params.size(); ++i) {
    const auto [source, value] = plan->params[i];
    if (source != kRecord) continue;
    KFFI_CHECK(value < static_cast<int32_t>(plan->records.size()), ValueError)
        << "kffi.torch: " << plan->name << ": the plan uses record " << value << " of "
        << plan->records.size();
    const KFFITypeInfo* info = KFFIGetTypeInfo(plan->records[value].type_index);
    const std::string key(info->type_key.data, info->type_key.size);
    KFFI_CHECK(i < param_types.size() && param_types[i] == key, ValueError)
        << "kffi.torch: " << plan->name << ": the call plan builds a " << key << " for parameter #"
        << i << ", which the function declares as "
        << (i < param_types.size() ? param_types[i] : std::string("(no type)"));
  }
}

std::shared_ptr<Plan> ParsePlan(const std::string& name, int64_t num_schema_args,
                                const Array<int64_t>& items,
                                const std::vector<std::string>& record_names,
                                const std::vector<std::string>& param_types) {
  KFFI_CHECK(static_cast<int64_t>(items.size()) <= kMaxPlanItems, ValueError)
      << "kffi.torch: the call plan has " << items.size() << " items (at most " << kMaxPlanItems
      << ")";
  auto plan = std::make_shared<Plan>();
  plan->name = name;
  plan->num_schema_args = num_schema_args;
  PlanReader r(items);
  int64_t n_params = r.Next("n_params", 0, 1024);
  int64_t max_arg = num_schema_args - 1;
  for (int64_t i = 0; i < n_params; ++i) {
    int64_t source = r.Next("source", kArg, kRecord);
    int64_t value = r.Next("value", 0, 1024);
    if (source == kArg) {
      KFFI_CHECK(value <= max_arg, ValueError)
          << "kffi.torch: the plan reads schema argument " << value << " of " << num_schema_args;
    }
    plan->params.emplace_back(static_cast<int32_t>(source), static_cast<int32_t>(value));
  }
  int64_t n_allocs = r.Next("n_allocs", 0, 1024);
  for (int64_t k = 0; k < n_allocs; ++k) {
    AllocSpec spec;
    int64_t ndim = r.Next("ndim", 0, kMaxNdim);
    int64_t n_dtypes = r.Next("n_dtypes", 0, 64);
    for (int64_t j = 0; j < n_dtypes; ++j) {
      spec.dtypes.push_back(UnpackDType(r.Next("dtype", 0, (int64_t{1} << 32) - 1)));
    }
    for (int64_t d = 0; d < ndim; ++d) {
      int64_t arg = r.Next("dim source", -1, max_arg);
      int64_t value = r.Next("dim value", 0, arg < 0 ? INT64_MAX : kMaxNdim - 1);
      spec.dims.emplace_back(arg, value);
    }
    plan->allocs.push_back(std::move(spec));
  }
  for (const auto& p : plan->params) {
    if (p.first == kAlloc) {
      KFFI_CHECK(p.second < n_allocs, ValueError)
          << "kffi.torch: the plan uses allocated output " << p.second << " of " << n_allocs;
    }
  }
  plan->device_arg = r.Next("device_arg", -1, max_arg);
  plan->ret_kind = r.Next("ret_kind", kRetNone, kRetBool);
  plan->n_returns = r.Next("n_returns", 0, 1024);
  plan->returns_tensors = plan->ret_kind == kRetTensor || plan->ret_kind == kRetTensors ||
                          plan->ret_kind == kRetTensorList;
  const bool uses_records = std::any_of(plan->params.begin(), plan->params.end(),
                                        [](const auto& p) { return p.first == kRecord; });
  if (!r.AtEnd() || uses_records || !record_names.empty()) {
    ParseRecords(&r, record_names, param_types, plan.get());
  }
  KFFI_CHECK(r.AtEnd(), ValueError) << "kffi.torch: the call plan has trailing items";
  return plan;
}

// ---- the kernel -------------------------------------------------------------------------------

[[noreturn]] C10_NOINLINE void RefuseLayout(const at::Tensor& t, const std::string& op) {
  TORCH_CHECK_TYPE(false, "kffi.torch: ", op, " takes strided tensors, got layout ", t.layout());
}

/// A tensor argument as kffi sees it: a borrowed DLTensor viewing the torch tensor (shape and
/// strides point into the TensorImpl's own arrays).
inline void FillDLTensor(const at::Tensor& t, const std::string& op, DLTensor* out) {
  if (C10_LIKELY(ViewAsDLTensor(t, out))) return;
  const c10::TensorImpl* impl = t.unsafeGetTensorImpl();
  // torch's Conjugate and Negative fallbacks resolve lazy views before a backend kernel runs;
  // one that arrives anyway (a caller that excluded those keys) is refused, not misread.
  const int lazy = LazyViewBits(impl);
  TORCH_CHECK_VALUE(lazy == 0, "kffi.torch: ", op, ": ", LazyViewRefusal(lazy));
  if (impl->layout() != c10::kStrided) RefuseLayout(t, op);
  ToDL(impl->device());                // throws for the device
  ToDL(impl->dtype().toScalarType());  // or for the dtype
}

void DeleteKffiTensor(void* ctx) { delete static_cast<kffi::Tensor*>(ctx); }

/// A returned kffi tensor as a torch tensor: the tensor the allocator made when it is one (same
/// storage), else a view of the kffi tensor's memory that keeps it alive.
at::Tensor ToTorch(const kffi::Tensor& t, const std::vector<at::Tensor>& allocated) {
  const DLTensor* dl = t.GetDLTensorPtr();
  char* data = static_cast<char*>(dl->data) + dl->byte_offset;
  c10::IntArrayRef sizes(dl->shape, static_cast<size_t>(dl->ndim));
  std::vector<int64_t> compact;
  if (dl->strides == nullptr) {
    compact.resize(static_cast<size_t>(dl->ndim));
    int64_t s = 1;
    for (int32_t i = dl->ndim - 1; i >= 0; --i) {
      compact[static_cast<size_t>(i)] = s;
      s *= dl->shape[i] > 0 ? dl->shape[i] : 1;
    }
  }
  c10::IntArrayRef strides = dl->strides != nullptr
                                 ? c10::IntArrayRef(dl->strides, static_cast<size_t>(dl->ndim))
                                 : c10::IntArrayRef(compact);
  c10::ScalarType scalar = FromDL(dl->dtype);
  for (const at::Tensor& a : allocated) {
    if (a.data_ptr() == data && a.sizes() == sizes && a.strides() == strides &&
        a.scalar_type() == scalar) {
      return a;
    }
  }
  c10::Device device = FromDL(dl->device);
  auto* keep = new kffi::Tensor(t);
  return at::for_blob(data, sizes)
      .strides(strides)
      .context(keep, &DeleteKffiTensor)
      .options(at::TensorOptions().dtype(scalar).device(device))
      .target_device(device)
      .make_tensor();
}

/// One op's call: converts the dispatcher's arguments, calls the kffi function, pushes results.
class KffiCall {
 public:
  KffiCall(Function fn, Plan&& plan) : fn_(std::move(fn)), plan_(std::move(plan)) {
    KFFI_CHECK(fn_.get() != nullptr, ValueError)
        << "kffi.torch: " << plan_.name << ": the function is null";
  }

  const Plan& plan() const { return plan_; }

  /// Runs the call on the schema arguments at the top of the stack and replaces them with the
  /// results. bump: bump the version counters of the arguments the op writes, after the call.
  void Run(torch::jit::Stack* stack, bool bump) const {
    const Plan& p = plan_;
    const size_t n = static_cast<size_t>(p.num_schema_args);
    TORCH_CHECK(stack->size() >= n, "kffi.torch: ", p.name, " got ", stack->size(),
                " values on the stack, expected ", n);
    c10::IValue* args = stack->data() + (stack->size() - n);

    const bool has_device_arg = p.device_arg >= 0 && args[p.device_arg].isTensor();
    const c10::Device device =
        has_device_arg ? args[p.device_arg].toTensor().device() : c10::Device(c10::DeviceType::CPU);
    std::vector<at::Tensor> allocated;
    CallEnv env(device.is_cuda() ? &device : nullptr, p.returns_tensors ? &allocated : nullptr);

    // Allocated outputs first (their shapes read the arguments).
    c10::SmallVector<at::Tensor, 2> outs;
    for (const AllocSpec& spec : p.allocs) outs.push_back(Allocate(spec, args, device));

    const size_t np = p.params.size();
    c10::SmallVector<KFFIAny, 8> packed(np == 0 ? 1 : np);
    c10::SmallVector<DLTensor, 8> dl(np == 0 ? 1 : np);
    std::vector<Any> keep;  // lists converted to kffi arrays, alive for the call (rare)
    for (size_t i = 0; i < np; ++i) {
      KFFIAny& a = packed[i];
      a.type_index = kKFFINone;
      a.zero_padding = 0;
      a.v_int64 = 0;
      const auto [source, value] = p.params[i];
      if (C10_LIKELY(source == kArg)) {
        const c10::IValue& v = args[value];
        if (C10_LIKELY(v.isTensor())) {
          FillDLTensor(v.toTensor(), p.name, &dl[i]);
          a.type_index = kKFFIDLTensorPtr;
          a.v_ptr = &dl[i];
        } else {
          Pack(v, &a, &keep);
        }
      } else if (source == kStream) {
        if (env.stream() != nullptr) {
          a.type_index = kKFFIOpaquePtr;
          a.v_ptr = env.stream();
        }
      } else if (source == kAlloc) {
        FillDLTensor(outs[static_cast<size_t>(value)], p.name, &dl[i]);
        a.type_index = kKFFIDLTensorPtr;
        a.v_ptr = &dl[i];
      } else if (source == kRecord) {
        BuildRecord(p.records[static_cast<size_t>(value)], args, &a, &keep);
      }
    }

    // The safe call itself (what Function::CallPacked does), with its error turned into torch's.
    Any result;
    const FunctionObj* f = fn_.get();
    int rc = f->safe_call(details::ObjectUnsafe::Header(f), packed.data(), static_cast<int32_t>(np),
                          details::AnyUnsafe::RawMut(result));
    if (C10_UNLIKELY(rc != 0)) RethrowRaised(rc);

    if (bump) {
      for (int32_t i : p.written) {
        if (!args[i].isTensor()) continue;
        c10::TensorImpl* impl = args[i].unsafeToTensorImpl();
        if (!impl->is_inference()) impl->bump_version();
      }
    }
    torch::jit::drop(*stack, n);
    for (at::Tensor& t : outs) stack->emplace_back(std::move(t));
    if (p.ret_kind != kRetNone) PushResult(result, allocated, stack);
  }

 private:
  C10_NOINLINE at::Tensor Allocate(const AllocSpec& spec, const c10::IValue* args,
                                   const c10::Device& device) const {
    std::vector<int64_t> shape;
    shape.reserve(spec.dims.size());
    for (const auto& [arg, value] : spec.dims) {
      if (arg < 0) {
        shape.push_back(value);
        continue;
      }
      TORCH_CHECK_VALUE(args[arg].isTensor(), "kffi.torch: ", plan_.name,
                        ": the shape of an allocated output reads argument #", arg,
                        ", which is None");
      const at::Tensor& t = args[arg].toTensor();
      TORCH_CHECK_VALUE(value < t.dim(), "kffi.torch: ", plan_.name,
                        ": the shape of an allocated output reads dimension ", value,
                        " of argument #", arg, ", which has ", t.dim(), " dimension(s)");
      shape.push_back(t.size(value));
    }
    return at::empty(shape, at::TensorOptions().dtype(PickDType(spec, args)).device(device));
  }

  c10::ScalarType PickDType(const AllocSpec& spec, const c10::IValue* args) const {
    if (spec.dtypes.size() == 1) return FromDL(spec.dtypes[0]);
    for (int64_t i = 0; i < plan_.num_schema_args; ++i) {
      if (!args[i].isTensor()) continue;
      DLDataType t = ToDL(args[i].toTensor().scalar_type());
      if (spec.dtypes.empty()) return FromDL(t);
      for (DLDataType allowed : spec.dtypes) {
        if (PackDType(allowed) == PackDType(t)) return FromDL(t);
      }
    }
    // No argument has an allowed dtype: the contract's check reports the bad argument.
    TORCH_CHECK_TYPE(!spec.dtypes.empty(), "kffi.torch: ", plan_.name,
                     ": no tensor argument fixes the dtype of an allocated output");
    return FromDL(spec.dtypes[0]);
  }

  /// A record parameter's object, made from its field arguments (kept alive by keep).
  C10_NOINLINE void BuildRecord(const RecordSpec& rec, const c10::IValue* args, KFFIAny* a,
                                std::vector<Any>* keep) const {
    KFFIObjectHandle h = nullptr;
    if (rec.creator(&h) != 0) RethrowRaised(-1);
    KFFIAny raw;
    raw.type_index = static_cast<KFFIObject*>(h)->type_index;
    raw.zero_padding = 0;
    raw.v_obj = static_cast<KFFIObject*>(h);
    keep->push_back(details::AnyUnsafe::FromOwnedRaw(raw));  // owns h from here
    for (const RecordFieldArg& rf : rec.fields) {
      KFFIAny v;
      v.type_index = kKFFINone;
      v.zero_padding = 0;
      v.v_int64 = 0;
      Pack(args[rf.arg], &v, keep);
      if (C10_UNLIKELY(rf.field->setter(static_cast<char*>(h) + rf.field->offset, &v) != 0)) {
        try {
          details::ThrowRaisedError(-1);
        } catch (const Error& e) {
          RethrowAsTorch(e.kind(), rf.label + ": " + e.message());
        }
      }
    }
    *a = raw;
  }

  /// A schema argument that is not a tensor.
  C10_NOINLINE void Pack(const c10::IValue& v, KFFIAny* a, std::vector<Any>* keep) const {
    if (v.isNone()) {
      a->type_index = kKFFINone;
    } else if (v.isInt()) {
      a->type_index = kKFFIInt;
      a->v_int64 = v.toInt();
    } else if (v.isSymInt()) {
      a->type_index = kKFFIInt;
      a->v_int64 = v.toSymInt().guard_int(__FILE__, __LINE__);
    } else if (v.isDouble()) {
      a->type_index = kKFFIFloat;
      a->v_float64 = v.toDouble();
    } else if (v.isBool()) {
      a->type_index = kKFFIBool;
      a->v_int64 = v.toBool() ? 1 : 0;
    } else if (v.isString()) {
      a->type_index = kKFFIRawStr;
      a->v_c_str = v.toStringRef().c_str();
    } else if (v.isIntList()) {
      std::vector<int64_t> items = v.toIntVector();
      keep->emplace_back(Array<int64_t>(items));
      *a = *details::AnyUnsafe::Raw(keep->back());
    } else if (v.isDoubleList()) {
      std::vector<double> items = v.toDoubleVector();
      keep->emplace_back(Array<double>(items));
      *a = *details::AnyUnsafe::Raw(keep->back());
    } else if (v.isBoolList()) {
      std::vector<bool> items;
      for (bool b : v.toBoolList()) items.push_back(b);
      keep->emplace_back(Array<bool>(items.begin(), items.end()));
      *a = *details::AnyUnsafe::Raw(keep->back());
    } else {
      TORCH_CHECK_TYPE(false, "kffi.torch: ", plan_.name, ": cannot pass a ", v.tagKind(),
                       " to a kffi function");
    }
  }

  C10_NOINLINE void PushResult(const Any& result, const std::vector<at::Tensor>& allocated,
                               torch::jit::Stack* stack) const {
    const Plan& p = plan_;
    const char* what = "kffi.torch: ";  // the messages are built only when a check fails
    switch (p.ret_kind) {
      case kRetNone:
        return;
      case kRetTensor: {
        auto t = result.as<kffi::Tensor>();
        TORCH_CHECK_TYPE(t.has_value(), what, p.name, " returned ", result.GetTypeKey(),
                         ", its contract declares a tensor");
        stack->emplace_back(ToTorch(*t, allocated));
        return;
      }
      case kRetTensors:
      case kRetTensorList: {
        auto arr = result.as<Array<Any>>();
        TORCH_CHECK_TYPE(arr.has_value(), what, p.name, " returned ", result.GetTypeKey(),
                         ", expected an Array of tensors");
        if (p.ret_kind == kRetTensors) {
          TORCH_CHECK_VALUE(static_cast<int64_t>(arr->size()) == p.n_returns, what, p.name,
                            " returned ", arr->size(), " tensors, its contract declares ",
                            p.n_returns);
        }
        std::vector<at::Tensor> ts;
        for (const Any& item : *arr) {
          auto t = item.as<kffi::Tensor>();
          TORCH_CHECK_TYPE(t.has_value(), what, p.name, " returned an Array holding ",
                           item.GetTypeKey(), ", expected tensors");
          ts.push_back(ToTorch(*t, allocated));
        }
        if (p.ret_kind == kRetTensorList) {
          stack->emplace_back(c10::List<at::Tensor>(ts));
        } else {
          for (at::Tensor& t : ts) stack->emplace_back(std::move(t));
        }
        return;
      }
      case kRetInt: {
        auto v = result.as<int64_t>();
        TORCH_CHECK_TYPE(v.has_value(), what, p.name, " returned ", result.GetTypeKey(),
                         ", expected int");
        stack->emplace_back(*v);
        return;
      }
      case kRetFloat: {
        auto v = result.as<double>();
        TORCH_CHECK_TYPE(v.has_value(), what, p.name, " returned ", result.GetTypeKey(),
                         ", expected float");
        stack->emplace_back(*v);
        return;
      }
      default: {
        auto v = result.as<bool>();
        TORCH_CHECK_TYPE(v.has_value(), what, p.name, " returned ", result.GetTypeKey(),
                         ", expected bool");
        stack->emplace_back(*v);
        return;
      }
    }
  }

  Function fn_;
  Plan plan_;
};

// ---- kernels ----------------------------------------------------------------------------------

/// The CPU and CUDA kernels: run the call.
class BackendKernel final : public c10::OperatorKernel {
 public:
  explicit BackendKernel(std::shared_ptr<const KffiCall> call) : call_(std::move(call)) {}
  void operator()(const c10::OperatorHandle&, c10::DispatchKeySet, torch::jit::Stack* stack) {
    call_->Run(stack, /*bump=*/false);  // below Autograd: the Autograd kernel bumps
  }

 private:
  std::shared_ptr<const KffiCall> call_;
};

/// The Autograd kernel of an op without an autograd rule. With grad mode on, an input that
/// requires grad is an error (its gradient would silently be lost). Below it, plain CPU / CUDA
/// calls run the kffi function at once (what a redispatch through ADInplaceOrView would reach,
/// without two more boxed hops); anything else (fake tensors, functionalization, Python modes)
/// is redispatched. Then the version counters of the tensors the op wrote are bumped, so
/// autograd notices when a tensor saved for backward was changed.
class NoRuleAutogradKernel final : public c10::OperatorKernel {
 public:
  NoRuleAutogradKernel(std::shared_ptr<const KffiCall> call, std::string mutated)
      : call_(std::move(call)), mutated_(std::move(mutated)) {}

  void operator()(const c10::OperatorHandle& op, c10::DispatchKeySet ks, torch::jit::Stack* stack) {
    const Plan& p = call_->plan();
    const size_t n = static_cast<size_t>(p.num_schema_args);
    TORCH_CHECK(stack->size() >= n, "kffi.torch: ", p.name, ": unexpected stack");
    const c10::IValue* args = stack->data() + (stack->size() - n);
    if (c10::GradMode::is_enabled()) {
      for (size_t i = 0; i < n; ++i) {
        if (!args[i].isTensor()) continue;
        // A tensor without autograd metadata does not require grad (no call needed to know).
        const c10::TensorImpl* impl = args[i].unsafeToTensorImpl();
        if (impl->autograd_meta() != nullptr && impl->requires_grad()) RefuseGrad(op, i);
      }
    }
    const c10::DispatchKey next = (ks & c10::after_ADInplaceOrView_keyset).highestPriorityTypeId();
    if (C10_LIKELY(next == c10::DispatchKey::CPU || next == c10::DispatchKey::CUDA)) {
      at::AutoDispatchBelowADInplaceOrView guard;
      call_->Run(stack, /*bump=*/true);
      return;
    }
    c10::SmallVector<at::Tensor, 4> written;  // the call pops the arguments
    for (int32_t i : call_->plan().written) {
      if (args[i].isTensor()) written.push_back(args[i].toTensor());
    }
    {
      at::AutoDispatchBelowAutograd guard;
      op.redispatchBoxed(ks & c10::after_autograd_keyset, stack);
    }
    for (const at::Tensor& t : written) {
      if (!t.is_inference()) t.unsafeGetTensorImpl()->bump_version();
    }
  }

 private:
  [[noreturn]] void RefuseGrad(const c10::OperatorHandle& op, size_t i) const {
    const std::string& arg = op.schema().arguments().at(i).name();
    const std::string& name = call_->plan().name;
    if (!mutated_.empty()) {
      TORCH_CHECK(false, "kffi.torch: ", name, " writes ", mutated_,
                  " in place (declared mut) and torch cannot differentiate that, but its "
                  "argument '",
                  arg,
                  "' requires grad. Call it under torch.no_grad() or with detached inputs, or "
                  "register a functional op (kffi.torch.register_op(fn, name, allocate=...)) "
                  "and give it a backward with kffi.torch.register_autograd.");
    }
    TORCH_CHECK(false, "kffi.torch: ", name, " has no autograd rule, but its argument '", arg,
                "' requires grad. Give it a backward with kffi.torch.register_autograd, or "
                "call it under torch.no_grad() or with detached inputs.");
  }

  std::shared_ptr<const KffiCall> call_;
  std::string mutated_;
};

/// The Negative (or Conjugate) kernel of an op that writes a tensor argument. torch's fallback
/// for those keys (MathOpFallback) expects such an op to return the tensor it wrote, as aten's
/// in-place and out= ops do: after the call it reads the clone back from the op's first return
/// and stores the argument into that stack slot. A kffi op returns nothing, or other values, so
/// the fallback read a destroyed value past the stack's end and wrote there (a use after free,
/// then a corrupted heap). This kernel resolves the key's lazy views into new tensors, runs the
/// op below the key on those, then copies each written one back into its view (copy_ writes
/// through the view's sign or conjugation).
class LazyViewKernel final : public c10::OperatorKernel {
 public:
  explicit LazyViewKernel(c10::DispatchKey key) : key_(key) {}

  void operator()(const c10::OperatorHandle& op, c10::DispatchKeySet ks, torch::jit::Stack* stack) {
    const std::vector<c10::Argument>& schema_args = op.schema().arguments();
    const size_t n = schema_args.size();
    TORCH_CHECK(stack->size() >= n, "kffi.torch: ", op.schema().name(), ": unexpected stack");
    const size_t start = stack->size() - n;
    c10::SmallVector<std::pair<at::Tensor, at::Tensor>, 2> written;  // (view, resolved)
    for (size_t i = 0; i < n; ++i) {
      c10::IValue& v = (*stack)[start + i];
      const c10::AliasInfo* alias = schema_args[i].alias_info();
      const bool writes = alias != nullptr && alias->isWrite();
      if (v.isTensor()) {
        at::Tensor t = v.toTensor();
        if (!IsLazy(t)) continue;
        at::Tensor r = Resolve(t);
        if (writes) written.emplace_back(t, r);
        v = r;
      } else if (v.isTensorList()) {
        // A new list: the one on the stack may be the caller's (IValue lists share storage).
        c10::List<at::Tensor> list = v.toTensorList();
        c10::List<at::Tensor> resolved;
        resolved.reserve(list.size());
        bool any = false;
        for (size_t j = 0; j < list.size(); ++j) {
          at::Tensor t = list.get(j);
          if (IsLazy(t)) {
            at::Tensor r = Resolve(t);
            if (writes) written.emplace_back(t, r);
            resolved.push_back(r);
            any = true;
          } else {
            resolved.push_back(t);
          }
        }
        if (any) v = c10::IValue(std::move(resolved));
      }
    }
    op.redispatchBoxed(ks & c10::DispatchKeySet(c10::DispatchKeySet::FULL_AFTER, key_), stack);
    for (auto& [view, resolved] : written) view.copy_(resolved);
  }

 private:
  bool IsLazy(const at::Tensor& t) const {
    if (!t.defined()) return false;
    return key_ == c10::DispatchKey::Negative ? t.is_neg() : t.is_conj();
  }
  at::Tensor Resolve(const at::Tensor& t) const {
    return key_ == c10::DispatchKey::Negative ? t.resolve_neg() : t.resolve_conj();
  }

  c10::DispatchKey key_;
};

// ---- registration -----------------------------------------------------------------------------

/// Registrations live until their unregister function is called; they are never destroyed at
/// exit (the dispatcher may be gone by then).
struct Registration {
  std::mutex mu;
  std::unique_ptr<torch::Library> lib;
};

Function MakeUnregister(std::unique_ptr<torch::Library> lib) {
  auto* reg = new Registration();  // intentionally not freed at exit (see above)
  reg->lib = std::move(lib);
  return Function::FromTyped(
      [reg]() {
        std::lock_guard<std::mutex> lock(reg->mu);
        bool had = reg->lib != nullptr;
        reg->lib.reset();
        return had;
      },
      "kffi.torch.unregister");
}

std::pair<std::string, std::string> SplitQualname(const std::string& qualname) {
  size_t sep = qualname.find("::");
  KFFI_CHECK(sep != std::string::npos && sep > 0 && sep + 2 < qualname.size(), ValueError)
      << "kffi.torch: expected an op name \"namespace::name\", got \"" << qualname << "\"";
  return {qualname.substr(0, sep), qualname.substr(sep + 2)};
}

std::unique_ptr<torch::Library> NewLibrary(const std::string& ns) {
  return std::make_unique<torch::Library>(torch::Library::IMPL, ns, std::nullopt, __FILE__,
                                          static_cast<uint32_t>(__LINE__));
}

/// Labels record fields `param.field` in messages: a field's schema argument is named
/// `<param>_<field>` (_signature.cc), and the op is defined by now.
void NameRecordFields(const std::string& qualname, Plan* plan) {
  if (plan->records.empty()) return;
  auto op = c10::Dispatcher::singleton().findSchema({qualname, ""});
  if (!op.has_value()) return;
  const auto& schema_args = op->schema().arguments();
  for (RecordSpec& rec : plan->records) {
    for (RecordFieldArg& rf : rec.fields) {
      if (rf.arg >= static_cast<int32_t>(schema_args.size())) continue;
      const std::string& arg = schema_args[static_cast<size_t>(rf.arg)].name();
      const std::string field(rf.field->name.data, rf.field->name.size);
      if (arg.size() > field.size() + 1 &&
          arg.compare(arg.size() - field.size() - 1, std::string::npos, "_" + field) == 0) {
        rf.label = arg.substr(0, arg.size() - field.size() - 1) + "." + field;
      }
    }
  }
}

}  // namespace

/// Registers fn as the kernels of the op `qualname` (defined beforehand with num_schema_args
/// arguments): CPU and CUDA, and the Autograd kernel for when it has no rule. `mutated` names
/// the arguments it writes (comma-separated; empty: none), `written` their indices. Returns
/// [unregister the backend kernels, unregister the Autograd kernel, register it again (returns
/// a new unregister function)].
Array<Function> RegisterOp(const std::string& qualname, Function fn, int64_t num_schema_args,
                           Array<int64_t> plan_items, Array<String> record_names,
                           Array<String> param_types, std::string mutated, Array<int64_t> written) {
  auto [ns, name] = SplitQualname(qualname);
  KFFI_CHECK(num_schema_args >= 0 && num_schema_args <= 1024, ValueError)
      << "kffi.torch: num_schema_args = " << num_schema_args;
  std::vector<std::string> names, types;
  for (const String& n : record_names) names.emplace_back(n.data(), n.size());
  for (const String& t : param_types) types.emplace_back(t.data(), t.size());
  std::shared_ptr<Plan> plan = ParsePlan(qualname, num_schema_args, plan_items, names, types);
  for (int64_t i : written) {
    KFFI_CHECK(i >= 0 && i < num_schema_args, ValueError)
        << "kffi.torch: written argument " << i << " of " << num_schema_args;
    plan->written.push_back(static_cast<int32_t>(i));
  }
  NameRecordFields(qualname, plan.get());
  auto call = std::make_shared<const KffiCall>(std::move(fn), std::move(*plan));
  auto backend = NewLibrary(ns);
  for (c10::DispatchKey key : {c10::DispatchKey::CPU, c10::DispatchKey::CUDA}) {
    backend->impl(name.c_str(), torch::dispatch(key, torch::CppFunction::makeFromBoxedFunctor(
                                                         std::make_unique<BackendKernel>(call))));
  }
  if (!call->plan().written.empty()) {  // torch's own fallback serves the others (see the kernel)
    for (c10::DispatchKey key : {c10::DispatchKey::Conjugate, c10::DispatchKey::Negative}) {
      backend->impl(name.c_str(), torch::dispatch(key, torch::CppFunction::makeFromBoxedFunctor(
                                                           std::make_unique<LazyViewKernel>(key))));
    }
  }
  auto register_autograd = [call, ns = ns, name = name, mutated]() {
    auto lib = NewLibrary(ns);
    lib->impl(name.c_str(),
              torch::dispatch(c10::DispatchKey::Autograd,
                              torch::CppFunction::makeFromBoxedFunctor(
                                  std::make_unique<NoRuleAutogradKernel>(call, mutated))));
    return MakeUnregister(std::move(lib));
  };
  Function unregister_autograd = register_autograd();
  return Array<Function>{MakeUnregister(std::move(backend)), unregister_autograd,
                         Function::FromTyped(register_autograd, "kffi.torch.reregister")};
}

int64_t PackedDType(const std::string& name) { return PackDType(StringToDataType(name)); }

}  // namespace torchglue
}  // namespace kffi

KFFI_EXPORT_DOC(register_op, kffi::torchglue::RegisterOp,
                "Registers a kffi function as the kernels of a torch op",
                "qualname, fn, num_schema_args, plan, record_names, param_types, mutated, written");
KFFI_EXPORT_DOC(packed_dtype, kffi::torchglue::PackedDType, "A dtype name as the plan's packed int",
                "name");
