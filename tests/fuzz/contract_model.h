// tests/fuzz/contract_model.h: what the contract differential tests share: a reference model of
// the checks written from the catalogue's definition (over the syntax tree, not the plan), a
// generator of calls that pass or fail in chosen ways, and the agreement check of the three
// judges: the kernel's inline check (FastRun), the runtime's explaining check (Explain) and the
// model. Used by tests/cpp/contract/test_contract_fuzz.cc (seeded random calls) and
// tests/fuzz/contract_fuzzer.cc (libFuzzer-driven contracts and calls).
// SPDX-License-Identifier: Apache-2.0
#ifndef KFFI_TESTS_FUZZ_CONTRACT_MODEL_H_
#define KFFI_TESTS_FUZZ_CONTRACT_MODEL_H_

#include <kffi/container/array.h>
#include <kffi/container/shape.h>
#include <kffi/contract.h>

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "contract/contract_internal.h"  // src/: the syntax tree and the explaining check

namespace kffi_contract_model {

using kffi::Any;
using kffi::AnyView;
namespace c = kffi::details::contract;

/// A fake data buffer that tensors point into (never read).
inline char* FakeData() {
  alignas(64) static char data[1 << 12];
  return data;
}

// ---- the reference model ------------------------------------------------------------------------

struct RefResult {
  c::Check check = c::Check::kNone;
  int32_t op = -1;
};

class Reference {
 public:
  explicit Reference(const c::ContractAst& ast) : ast_(ast) {}

  RefResult Run(const KFFIAny* args, int32_t num_args) {
    int32_t expected = 0;
    for (const c::ParamAst& p : ast_.params) expected += p.type.kind != c::Kind::kEnvStream;
    if (num_args != expected) return {c::Check::kCount, -1};
    int32_t arg = 0;
    for (const c::ParamAst& p : ast_.params) {
      if (p.type.kind == c::Kind::kEnvStream) continue;
      if (!Value(p.type, &args[arg++], true)) return result_;
    }
    return {};
  }

 private:
  static int32_t CountOps(const c::TypeAst& t) {
    int32_t n = 1;
    for (const c::TypeAst& e : t.elems) n += CountOps(e);
    return n;
  }

  bool Fail(c::Check check, int32_t op) {
    result_ = {check, op};
    return false;
  }

  bool Value(const c::TypeAst& t, const KFFIAny* v, bool is_arg) {
    const int32_t op = next_op_++;
    if (t.optional && v->type_index == kKFFINone) {
      next_op_ += CountOps(t) - 1;
      return true;
    }
    const int32_t type = v->type_index;
    switch (t.kind) {
      case c::Kind::kTensor:
        return Tensor(t.tensor, v, op, is_arg);
      case c::Kind::kInt:
        if (type != kKFFIInt && type != kKFFIBool) return Fail(c::Check::kType, op);
        if (t.has_range && (v->v_int64 < t.int_lo || v->v_int64 > t.int_hi)) {
          return Fail(c::Check::kRange, op);
        }
        if (!t.has_range && t.bits == 32 && (v->v_int64 < INT32_MIN || v->v_int64 > INT32_MAX)) {
          return Fail(c::Check::kRange, op);
        }
        return true;
      case c::Kind::kFloat: {
        if (type != kKFFIFloat && type != kKFFIInt && type != kKFFIBool) {
          return Fail(c::Check::kType, op);
        }
        const double x = type == kKFFIFloat ? v->v_float64 : static_cast<double>(v->v_int64);
        if (t.has_range && !(x >= t.float_lo && x <= t.float_hi)) {
          return Fail(c::Check::kRange, op);
        }
        if (!t.has_range && t.bits == 32 && std::isfinite(x) && std::fabs(x) > FLT_MAX) {
          return Fail(c::Check::kRange, op);
        }
        return true;
      }
      case c::Kind::kBool:
        return type == kKFFIBool || type == kKFFIInt ? true : Fail(c::Check::kType, op);
      case c::Kind::kStream:
        return type == kKFFIOpaquePtr || type == kKFFIInt || type == kKFFINone
                   ? true
                   : Fail(c::Check::kType, op);
      case c::Kind::kRecord:
        // The only record objects the generator passes are ffi.Shape ones (a registered type
        // without fields); anything else fails the type check (an unregistered type key too).
        return type == kKFFIShape && t.name == "ffi.Shape" && t.elems.empty()
                   ? true
                   : Fail(c::Check::kType, op);
      default: {  // tuple
        if (type != kKFFIArray && type != kKFFIList) return Fail(c::Check::kType, op);
        auto* cell = static_cast<const KFFISeqCell*>(KFFIObjectGetCellPtr(v->v_obj));
        if (cell->size != static_cast<int64_t>(t.elems.size())) return Fail(c::Check::kType, op);
        const auto* items = static_cast<const KFFIAny*>(cell->data);
        for (size_t i = 0; i < t.elems.size(); ++i) {
          if (!Value(t.elems[i], &items[i], false)) return false;
        }
        return true;
      }
    }
  }

  // A symbol's entry: literal, or bind (width, divisibility) / match.
  bool Entry(const c::DimAst& d, int64_t v) {
    if (!d.is_symbol) return v == d.literal;
    auto it = values_.find(d.symbol);
    if (it != values_.end()) return v == it->second;
    int bits = 64;
    int64_t div = 1;
    for (const c::SymbolDecl& s : ast_.symbols) {
      if (s.name == d.symbol) bits = s.bits, div = s.divisibility;
    }
    if (bits == 32 && (v < INT32_MIN || v > INT32_MAX)) return false;
    if (v % div != 0) return false;
    values_[d.symbol] = v;
    return true;
  }

  bool Tensor(const c::TensorAst& ts, const KFFIAny* v, int32_t op, bool is_arg) {
    const DLTensor* t = nullptr;
    if (v->type_index == kKFFIDLTensorPtr) t = static_cast<const DLTensor*>(v->v_ptr);
    if (v->type_index == kKFFITensor) t = KFFITensorGetDLTensorPtr(v->v_obj);
    if (t == nullptr) return Fail(c::Check::kType, op);
    if (is_arg && ts.mut && (v->tensor_flags & kKFFITensorFlagReadOnly)) {
      return Fail(c::Check::kWritable, op);
    }
    const uint64_t first = reinterpret_cast<uintptr_t>(t->data) + t->byte_offset;
    if (ts.align > 0 && first % static_cast<uint64_t>(ts.align) != 0) {
      return Fail(c::Check::kAlign, op);
    }
    if (!have_device_) {
      have_device_ = true;
      device_id_ = t->device.device_id;
    } else if (t->device.device_id != device_id_) {
      return Fail(c::Check::kDeviceIndex, op);
    }
    if (t->ndim != static_cast<int32_t>(ts.shape.size())) return Fail(c::Check::kNdim, op);
    bool device_ok = ts.device_types.empty();
    for (int32_t d : ts.device_types) device_ok |= d == t->device.device_type;
    if (!device_ok) return Fail(c::Check::kDeviceType, op);
    bool dtype_ok = ts.dtypes.empty();
    for (DLDataType d : ts.dtypes) dtype_ok |= d == t->dtype;
    if (!dtype_ok) return Fail(c::Check::kDtype, op);
    if (ts.offset0 && t->byte_offset != 0) return Fail(c::Check::kByteOffset, op);
    for (size_t i = 0; i < ts.shape.size(); ++i) {
      if (!Entry(ts.shape[i], t->shape[i])) return Fail(c::Check::kShape, op);
    }
    const size_t n = ts.shape.size();
    std::vector<int64_t> strides(n);
    if (t->strides != nullptr) {
      for (size_t i = 0; i < n; ++i) strides[i] = t->strides[i];
    } else {  // compact row-major; sizes below 1 count as 1; wrapping as the runtime's
      uint64_t acc = 1;
      for (size_t i = n; i-- > 0;) {
        strides[i] = static_cast<int64_t>(acc);
        acc *= static_cast<uint64_t>(t->shape[i] > 1 ? t->shape[i] : 1);
      }
    }
    if (ts.compact) {
      bool identity = true;
      for (size_t i = 0; i < n; ++i) identity &= ts.order[i] == static_cast<int32_t>(i);
      bool ok = t->strides == nullptr && identity;  // NULL strides are row-major by definition
      if (!ok) {
        bool empty = false, compact = true;
        uint64_t expected = 1;
        for (size_t k = n; k-- > 0;) {
          const size_t d = static_cast<size_t>(ts.order[k]);
          empty |= t->shape[d] == 0;
          compact &= t->shape[d] == 1 || static_cast<uint64_t>(strides[d]) == expected;
          expected *= static_cast<uint64_t>(t->shape[d]);
        }
        ok = compact || empty;
      }
      if (!ok) return Fail(c::Check::kLayout, op);
    }
    for (size_t i = 0; i < ts.strides.size(); ++i) {
      if (!Entry(ts.strides[i], strides[i])) return Fail(c::Check::kStrides, op);
    }
    return true;
  }

  const c::ContractAst& ast_;
  std::map<std::string, int64_t> values_;
  bool have_device_ = false;
  int32_t device_id_ = 0;
  int32_t next_op_ = 0;
  RefResult result_;
};

// ---- random calls -------------------------------------------------------------------------------
// Each call starts from arguments that pass (symbols get values that fit their declarations) and
// changes each field with a probability picked per call (0, 2%, 10% or 30%), so that passing
// calls, single faults and many faults all occur.

struct RandomTensor {
  std::vector<int64_t> shape, strides;  // may hold more entries than ndim says
  DLTensor t{};
};

const DLDataType kDtypes[] = {kffi::dtypes::float32, kffi::dtypes::float16, kffi::dtypes::bfloat16,
                              kffi::dtypes::int8, kffi::dtypes::bool_};
const DLDevice kDevices[] = {{kDLCPU, 0},
                             {kDLCUDA, 0},
                             {kDLCUDA, 1},
                             {static_cast<DLDeviceType>(70), 0},  // beyond the 64-bit mask
                             {kDLCPU, -1}};

struct NoopAlloc {
  void AllocData(DLTensor* t) { t->data = FakeData(); }
  void FreeData(DLTensor*) {}
};

template <typename Random>
class Generator {
 public:
  Generator(Random* rng, const c::ContractAst& ast) : rng_(*rng), ast_(ast) {
    const int rates[] = {0, 2, 10, 30};
    percent_ = rates[rng_(4)];
  }

  /// The arguments of one call; pointers stay valid while the generator lives.
  std::vector<KFFIAny> Args() {
    std::vector<KFFIAny> out;
    for (const c::ParamAst& p : ast_.params) {
      if (p.type.kind != c::Kind::kEnvStream) out.push_back(Value(p.type, true));
    }
    return out;
  }

 private:
  bool Mutate() { return static_cast<int>(rng_(100)) < percent_; }

  int64_t Symbol(const std::string& name) {
    auto it = symbols_.find(name);
    if (it != symbols_.end()) return it->second;
    int64_t div = 1;
    for (const c::SymbolDecl& d : ast_.symbols) {
      if (d.name == name) div = d.divisibility;
    }
    int64_t value;
    if (__builtin_mul_overflow(div, rng_.Range(0, 3), &value)) value = div;  // a huge divisor
    return symbols_[name] = value + (div == 1 ? 1 : 0);
  }
  int64_t Entry(const c::DimAst& d) { return d.is_symbol ? Symbol(d.symbol) : d.literal; }

  // Shape and strides that pass ts, then mutated.
  void Layout(const c::TensorAst& ts, std::vector<int64_t>* shape, std::vector<int64_t>* strides,
              bool* null_strides) {
    for (const c::DimAst& d : ts.shape) shape->push_back(Entry(d));
    const size_t n = shape->size();
    strides->assign(n, 0);
    uint64_t acc = 1;  // wrapping, as the runtime's compact strides (huge literal dimensions)
    for (size_t k = n; k-- > 0;) {  // compact in the layout's order (identity when none)
      const size_t d = ts.compact ? static_cast<size_t>(ts.order[k]) : k;
      (*strides)[d] = static_cast<int64_t>(acc);
      acc *= static_cast<uint64_t>((*shape)[d] > 1 ? (*shape)[d] : 1);
    }
    if (!ts.strides.empty()) {
      for (size_t i = 0; i < n; ++i) (*strides)[i] = Entry(ts.strides[i]);
    }
    bool identity = true;
    for (size_t i = 0; i < ts.order.size(); ++i) identity &= ts.order[i] == static_cast<int32_t>(i);
    *null_strides = ts.strides.empty() && identity && rng_(2) == 0;
    for (size_t i = 0; i < n; ++i) {
      if (Mutate()) (*shape)[i] = rng_(4) == 0 ? -rng_.Range(1, 3) : rng_.Range(0, 9);
      if (Mutate()) (*strides)[i] = rng_.Range(-2, 12);
    }
    if (Mutate()) *null_strides = !*null_strides;
  }

  KFFIAny Value(const c::TypeAst& t, bool top) {
    KFFIAny v{};
    // An optional record is mostly None: most record types here pass no value (see kRecord).
    if (t.optional && rng_(t.kind == c::Kind::kRecord ? 4 : 1) != 0) {
      v.type_index = kKFFINone;
      return v;
    }
    if (t.optional && rng_(4) == 0) {
      v.type_index = kKFFINone;
      return v;
    }
    if (Mutate()) {  // a value of another type
      const int32_t types[] = {kKFFINone, kKFFIFloat, kKFFIOpaquePtr, kKFFIInt};
      v.type_index = types[rng_(4)];
      return v;
    }
    switch (t.kind) {
      case c::Kind::kTensor:
        return top && rng_(8) != 0 ? Borrowed(t.tensor) : Owned(t.tensor, top);
      case c::Kind::kInt: {
        v.type_index = rng_(8) == 0 ? kKFFIBool : kKFFIInt;
        v.v_int64 = t.has_range ? rng_.Range(t.int_lo, t.int_hi) : rng_.Range(-5, 5);
        if (v.type_index == kKFFIBool) v.v_int64 &= 1;
        if (Mutate()) {
          // Just outside the range (wrapping at the ends of int64), and int32's and int64's edges.
          const int64_t odd[] = {static_cast<int64_t>(static_cast<uint64_t>(t.int_hi) + 1),
                                 static_cast<int64_t>(static_cast<uint64_t>(t.int_lo) - 1),
                                 int64_t{INT32_MAX} + 1, INT64_MIN};
          v.v_int64 = odd[rng_(4)];
        }
        return v;
      }
      case c::Kind::kFloat: {
        v.type_index = kKFFIFloat;
        v.v_float64 = t.has_range ? t.float_lo + (t.float_hi - t.float_lo) * 0.25 : 0.5;
        if (Mutate()) {
          const double odd[] = {1e39, -1e39, INFINITY, NAN, 3.0e38, t.float_hi + 1};
          v.v_float64 = odd[rng_(6)];
        }
        if (rng_(6) == 0) {
          v.type_index = kKFFIInt;
          v.v_int64 = rng_.Range(-2, 2);
        }
        return v;
      }
      case c::Kind::kBool:
        v.type_index = rng_(2) ? kKFFIBool : kKFFIInt;
        v.v_int64 = 1;
        return v;
      case c::Kind::kStream:
        v.type_index = rng_(2) ? kKFFIInt : kKFFIOpaquePtr;
        v.v_int64 = 0x1000;
        return v;
      case c::Kind::kRecord:  // an ffi.Shape object, else an int (see the checker's kRecord)
        if (t.name == "ffi.Shape" && rng_(4) != 0) {
          owned_.push_back(Any(kffi::Shape({1, 2})));
          return *reinterpret_cast<const KFFIAny*>(&owned_.back());
        }
        v.type_index = kKFFIInt;
        v.v_int64 = 7;
        return v;
      default: {  // tuple
        std::vector<Any> items;
        const size_t count = t.elems.size() + (Mutate() ? 1 : 0);
        for (size_t i = 0; i < count; ++i) {
          KFFIAny e = Value(t.elems[i < t.elems.size() ? i : 0], false);
          items.push_back(Any(*reinterpret_cast<const AnyView*>(&e)));
        }
        owned_.push_back(Any(kffi::Array<Any>(items)));
        return *reinterpret_cast<const KFFIAny*>(&owned_.back());
      }
    }
  }

  DLDataType Dtype(const c::TensorAst& ts) {
    if (!ts.dtypes.empty() && !Mutate()) return ts.dtypes[rng_(ts.dtypes.size())];
    return kDtypes[rng_(5)];
  }
  DLDevice Device(const c::TensorAst& ts) {
    DLDevice d{ts.device_types.empty() ? kDLCPU : static_cast<DLDeviceType>(ts.device_types[0]), 0};
    if (Mutate()) d = kDevices[rng_(5)];
    return d;
  }

  // A borrowed DLTensor (a call argument), possibly with wrong, negative or huge ndim.
  KFFIAny Borrowed(const c::TensorAst& ts) {
    tensors_.push_back(std::make_unique<RandomTensor>());
    RandomTensor& r = *tensors_.back();
    bool null_strides = false;
    Layout(ts, &r.shape, &r.strides, &null_strides);
    int32_t ndim = static_cast<int32_t>(r.shape.size());
    if (Mutate()) {
      const int32_t odd[] = {ndim + 1, ndim - 1, 40, 1000, -1, 0};
      ndim = odd[rng_(6)];
    }
    const size_t room = ndim > 0 ? static_cast<size_t>(ndim) : 0;
    while (r.shape.size() < room) r.shape.push_back(rng_.Range(0, 3));
    while (r.strides.size() < room) r.strides.push_back(1);
    const uint64_t align = ts.align > 0 ? static_cast<uint64_t>(ts.align) : 2;
    const uint64_t offset = ts.offset0 ? 0 : align * rng_(3);
    r.t = DLTensor{FakeData() + (Mutate() ? 2 * rng_(8) : 0),
                   Device(ts),
                   ndim,
                   Dtype(ts),
                   r.shape.data(),
                   null_strides ? nullptr : r.strides.data(),
                   Mutate() ? 2 * rng_(40) : offset};
    KFFIAny v{};
    v.type_index = kKFFIDLTensorPtr;
    v.tensor_flags = Mutate() ? kKFFITensorFlagReadOnly : 0;
    v.v_ptr = &r.t;
    return v;
  }

  // A Tensor object (tuple elements are stored ones; arguments may be ones too).
  KFFIAny Owned(const c::TensorAst& ts, bool top) {
    std::vector<int64_t> shape, strides;
    bool null_strides = false;
    Layout(ts, &shape, &strides, &null_strides);
    for (int64_t& d : shape) d = d < 0 ? 0 : d;  // the allocator takes valid layouts only
    for (int64_t& d : strides) d = d < 0 ? 0 : d;
    if (Mutate()) shape.push_back(2), strides.push_back(1);
    const DLDataType dtype = Dtype(ts);
    const DLDevice device = Device(ts);
    Any t;
    try {
      t = kffi::Tensor::FromNDAllocStrided(NoopAlloc(), shape, strides, dtype, device);
    } catch (const kffi::Error&) {
      // Dimensions whose product or span overflows int64 (the allocator refuses them, rightly;
      // huge literals, or many small dimensions): the same rank with sizes and strides of at most
      // 1, which the check then judges.
      for (int64_t& d : shape) d = d > 1 ? 1 : d;
      for (int64_t& d : strides) d = d > 1 ? 1 : d;
      t = kffi::Tensor::FromNDAllocStrided(NoopAlloc(), shape, strides, dtype, device);
    }
    owned_.push_back(std::move(t));
    KFFIAny v = *reinterpret_cast<const KFFIAny*>(&owned_.back());
    if (top && Mutate()) v.tensor_flags = kKFFITensorFlagReadOnly;
    return v;
  }

  Random& rng_;
  const c::ContractAst& ast_;
  int percent_;
  std::map<std::string, int64_t> symbols_;
  std::vector<std::unique_ptr<RandomTensor>> tensors_;
  std::vector<Any> owned_;
};

/// What one judged call came to.
struct Judgement {
  bool fast = false;     // FastRun passed
  c::Failure explained;  // the runtime's first failure (kNone: passed)
  RefResult reference;   // the model's
  int32_t fast_op = -1;  // where FastRun stopped when it failed
};

/// Judges one call three ways.
inline Judgement Judge(const c::Plan& plan, const KFFIAny* args, int32_t num_args) {
  Judgement j;
  c::RunState st;
  j.fast = c::FastRun(plan.layout, args, num_args, &st);
  j.fast_op = j.fast ? -1 : st.failed_op;
  j.explained = c::Explain(plan, args, num_args);
  j.reference = Reference(plan.ast).Run(args, num_args);
  return j;
}

/// "" when the three judges agree on whether the call passes, on the op that fails and on the
/// check; else what differs.
inline std::string Disagreement(const Judgement& j) {
  const bool explained_pass = j.explained.check == c::Check::kNone;
  const auto check = [](c::Check k) { return std::to_string(static_cast<int>(k)); };
  if (j.fast != explained_pass) {
    return std::string("fast run ") + (j.fast ? "passes" : "fails") + ", explaining run " +
           (explained_pass ? "passes" : "fails: " + j.explained.message);
  }
  if (j.explained.check != j.reference.check) {
    return "explaining run says check " + check(j.explained.check) + " (" + j.explained.message +
           "), the model check " + check(j.reference.check);
  }
  if (!j.fast && j.fast_op != j.explained.op) {
    return "fast run stops at op " + std::to_string(j.fast_op) + ", explaining run at op " +
           std::to_string(j.explained.op) + " (" + j.explained.message + ")";
  }
  if (!j.fast && j.reference.op != j.explained.op) {
    return "the model fails op " + std::to_string(j.reference.op) + ", explaining run op " +
           std::to_string(j.explained.op) + " (" + j.explained.message + ")";
  }
  if (!j.fast && j.explained.message.empty()) return "a failure without a message";
  return "";
}

}  // namespace kffi_contract_model

#endif  // KFFI_TESTS_FUZZ_CONTRACT_MODEL_H_
