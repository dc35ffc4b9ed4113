// python/kffi/torch/_meta.cc: meta (fake) kernels of kffi ops, computed from the contract in C++.
//
// kffi::torch::RegisterOps(module, ns) registers this kernel for the Meta dispatch key, so fake
// tensors (torch.export tracing, AOTInductor's shape propagation) need no Python: the outputs'
// shapes come from the contract (its symbols bound from the tensor arguments' sizes, then the
// outputs' shape expressions evaluated by kffi's one RPN evaluator, kffi/contract/shape_rpn.h,
// over c10::SymInt, so dynamic shapes stay symbolic), their dtypes as the CPU kernel picks them.
// The rules are kffi.torch's Python fake implementation's (_op.py, _contract_fake).
// SPDX-License-Identifier: Apache-2.0
#include "_meta.h"

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/core/SymInt.h>
#include <kffi/contract/shape_rpn.h>
#include <kffi/details/function.h>
#include <kffi/dtype.h>
#include <torch/library.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "_dispatch.h"
#include "_torch_dlpack.h"

namespace kffi {
namespace torchglue {
namespace {

using details::Json;
using details::RpnFailure;
using details::RpnOp;

using SymbolMap = std::map<std::string, c10::SymInt>;

std::string SymbolsText(const SymbolMap& env) {
  std::string out = "{";
  bool first = true;
  for (const auto& [name, value] : env) {
    std::ostringstream v;
    v << value;
    out += (first ? "" : ", ") + PyRepr(name) + ": " + v.str();
    first = false;
  }
  return out + "}";
}

std::string TokensText(const std::vector<Json>& tokens) {
  std::string out = "[";
  for (size_t i = 0; i < tokens.size(); ++i) {
    const Json& t = tokens[i];
    std::string item = t.kind == Json::kString                 ? PyRepr(t.str)
                       : t.kind == Json::kNumber && t.integral ? std::to_string(t.integer)
                                                               : "?";
    out += (i ? ", " : "") + item;
  }
  return out + "]";
}

/// The evaluator's domain for a meta kernel: symbols bound to the arguments' (symbolic) sizes.
class SymRpnDomain {
 public:
  using Value = c10::SymInt;
  SymRpnDomain(const std::vector<Json>& tokens, const SymbolMap& env, std::string what)
      : tokens_(tokens), env_(env), what_(std::move(what)) {}

  void Token(size_t i, RpnOp* op, int64_t* literal, c10::SymInt* symbol) {
    const Json& t = tokens_[i];
    if (t.kind == Json::kNumber && t.integral) {
      *op = RpnOp::kLit;
      *literal = t.integer;
      return;
    }
    if (t.kind != Json::kString) Fail(": cannot read a token in " + TokensText(tokens_));
    if (kffi::details::RpnOpFromName(t.str, op)) return;
    auto it = env_.find(t.str);
    if (it == env_.end()) {
      std::string bound;
      for (const auto& kv : env_) bound += (bound.empty() ? "" : ", ") + kv.first;
      Fail(": symbol " + PyRepr(t.str) +
           " is not bound by any input (bound: " + (bound.empty() ? "none" : bound) + ")");
    }
    *op = RpnOp::kSym;
    *symbol = it->second;
  }
  c10::SymInt Int(int64_t v) { return c10::SymInt(v); }
  bool AsInt(const c10::SymInt& v, int64_t* out) {
    std::optional<int64_t> i = v.maybe_as_int();
    if (i.has_value()) *out = *i;
    return i.has_value();
  }
  c10::SymInt Apply(RpnOp op, const c10::SymInt& a, const c10::SymInt& c) {
    switch (op) {
      case RpnOp::kAdd:
        return a + c;
      case RpnOp::kSub:
        return a - c;
      case RpnOp::kMul:
        return a * c;
      case RpnOp::kFloorDiv:
        return a / c;  // a symbolic operand: SymInt's / is a floor division node
      case RpnOp::kMod:
        return a % c;
      default:
        return -a;
    }
  }
  [[noreturn]] void Fail(RpnFailure why, RpnOp op, size_t count) {
    switch (why) {
      case RpnFailure::kMissingOperand:
        Fail(": operator '" + std::string(details::RpnOpName(op)) + "' lacks an operand in " +
             TokensText(tokens_));
      case RpnFailure::kDivisionByZero:
        Fail(": division by zero in " + TokensText(tokens_) + " with " + SymbolsText(env_));
      case RpnFailure::kModuloByZero:
        Fail(": modulo by zero in " + TokensText(tokens_) + " with " + SymbolsText(env_));
      case RpnFailure::kOverflow:
        Fail(": int64 overflow in " + TokensText(tokens_) + " with " + SymbolsText(env_));
      default:
        Fail(": " + TokensText(tokens_) + " leaves " + std::to_string(count) +
             " values instead of one");
    }
  }
  [[noreturn]] void Fail(const std::string& why) { TORCH_CHECK_VALUE(false, what_ + why); }

 private:
  const std::vector<Json>& tokens_;
  const SymbolMap& env_;
  std::string what_;
};

c10::ScalarType DTypeOf(const std::string& name) {
  DLDataType dl = StringToDataType(name);
  for (const DTypePair& p : kDTypes) {
    if (p.dl.code == dl.code && p.dl.bits == dl.bits && p.dl.lanes == dl.lanes) return p.scalar;
  }
  TORCH_CHECK_TYPE(false, "kffi.torch: dtype '", name, "' has no torch equivalent");
}

class MetaKernel final : public c10::OperatorKernel {
 public:
  explicit MetaKernel(OpSignature sig) : sig_(std::move(sig)) {
    for (const SigParam* p : sig_.SchemaArgs()) args_.push_back(p);
    device_arg_ = sig_.DeviceArg();
    untraceable_ = sig_.ret_kind != kRetNone && sig_.outputs.empty();
  }

  void operator()(const c10::OperatorHandle&, c10::DispatchKeySet, torch::jit::Stack* stack) {
    TORCH_CHECK_NOT_IMPLEMENTED(!untraceable_, "kffi.torch: ", sig_.qualname, " returns ",
                                Joined(sig_.returns),
                                ", which its contract cannot predict while tracing (torch.compile, "
                                "fake tensors); register it with a contract that declares its "
                                "outputs");
    const size_t n = args_.size();
    TORCH_CHECK(stack->size() >= n, "kffi.torch: ", sig_.qualname, ": unexpected stack");
    const c10::IValue* args = stack->data() + (stack->size() - n);
    std::string mismatch;
    SymbolMap env = Bind(args, &mismatch);
    std::vector<c10::ScalarType> tensor_dtypes;
    for (size_t i = 0; i < n; ++i) {
      if (args[i].isTensor()) tensor_dtypes.push_back(args[i].toTensor().scalar_type());
    }
    c10::Device device(c10::DeviceType::Meta);
    if (device_arg_ >= 0 && args[device_arg_].isTensor()) {
      device = args[device_arg_].toTensor().device();
    }
    std::vector<at::Tensor> outs;
    for (const SigParam& p : sig_.params) {
      if (!p.allocated) continue;
      std::vector<c10::SymInt> shape;
      for (size_t d = 0; d < p.shape.size(); ++d) {
        const SigDim& dim = p.shape[d];
        if (dim.kind == SigDim::kInt) {
          shape.emplace_back(dim.value);
          continue;
        }
        auto it = env.find(dim.symbol);
        TORCH_CHECK_VALUE(it != env.end() && dim.kind == SigDim::kSymbol,
                          !mismatch.empty()
                              ? mismatch
                              : "kffi.torch: " + sig_.label + ": " + p.name + ".shape[" +
                                    std::to_string(d) + "] = " + dim.symbol +
                                    " is not bound by the tensor arguments given");
        shape.push_back(it->second);
      }
      outs.push_back(Empty(shape, PickDType(p.dtypes, tensor_dtypes, "'" + p.name + "'"), device));
    }
    for (size_t k = 0; k < sig_.outputs.size(); ++k) {
      const SigOutput& o = sig_.outputs[k];
      const std::string what = "output " + (o.name.empty() ? std::to_string(k) : PyRepr(o.name));
      std::vector<c10::SymInt> shape;
      for (size_t d = 0; d < o.shape_rpn.size(); ++d) {
        SymRpnDomain domain(
            o.shape_rpn[d], env,
            "kffi.torch: " + sig_.label + ": " + what + " dimension " + std::to_string(d));
        if (!mismatch.empty()) {
          // The rank mismatch hides the symbols this output needs: its message says why.
          try {
            shape.push_back(details::EvalRpn(domain, o.shape_rpn[d].size()));
          } catch (const c10::ValueError&) {
            TORCH_CHECK_VALUE(false, mismatch);
          }
        } else {
          shape.push_back(details::EvalRpn(domain, o.shape_rpn[d].size()));
        }
        std::optional<int64_t> concrete = shape.back().maybe_as_int();
        TORCH_CHECK_VALUE(!concrete.has_value() || *concrete >= 0, "kffi.torch: ", sig_.label, ": ",
                          what, " dimension ", d, ": evaluates to ", *concrete, " (negative) with ",
                          SymbolsText(env));
      }
      outs.push_back(Empty(shape, PickDType(o.dtypes, tensor_dtypes, what), device));
    }
    torch::jit::drop(*stack, n);
    for (at::Tensor& t : outs) stack->emplace_back(std::move(t));
  }

 private:
  static std::string Joined(const std::vector<std::string>& items) {
    std::string out;
    for (const std::string& s : items) out += (out.empty() ? "" : ", ") + s;
    return out;
  }

  static at::Tensor Empty(const std::vector<c10::SymInt>& shape, c10::ScalarType dtype,
                          c10::Device device) {
    return at::empty_symint(shape, at::TensorOptions().dtype(dtype).device(device));
  }

  /// Binds each symbol to the size of the first tensor argument that declares it (required
  /// arguments first). Lenient, as the Python fake: contradictions are the kernel's contract
  /// check's to report; a rank mismatch is kept (*mismatch) for when an output needs it.
  SymbolMap Bind(const c10::IValue* args, std::string* mismatch) const {
    SymbolMap env;
    for (bool optional : {false, true}) {
      for (size_t i = 0; i < args_.size(); ++i) {
        const SigParam& p = *args_[i];
        if (p.kind != "tensor" || !p.has_shape || p.optional != optional) continue;
        if (!args[i].isTensor()) continue;
        const at::Tensor& t = args[i].toTensor();
        if (static_cast<size_t>(t.dim()) != p.shape.size()) {
          if (mismatch->empty()) {
            *mismatch = kffi::details::ArgumentText(
                (p.name + ".ndim").c_str(), std::to_string(p.shape.size()).c_str(),
                std::to_string(t.dim()).c_str(), static_cast<int32_t>(p.index), sig_.label.c_str());
          }
          continue;
        }
        c10::SymIntArrayRef sizes = t.sym_sizes();
        for (size_t d = 0; d < p.shape.size(); ++d) {
          if (p.shape[d].kind == SigDim::kSymbol && env.count(p.shape[d].symbol) == 0) {
            env.emplace(p.shape[d].symbol, sizes[d]);
          }
        }
      }
    }
    return env;
  }

  /// The dtype of an output: the contract's one dtype, else that of the first tensor argument
  /// the contract allows for it (as the CPU kernel picks).
  c10::ScalarType PickDType(const std::vector<std::string>& dtypes,
                            const std::vector<c10::ScalarType>& tensors,
                            const std::string& what) const {
    if (dtypes.size() == 1) return DTypeOf(dtypes[0]);
    for (c10::ScalarType t : tensors) {
      if (dtypes.empty()) return t;
      for (const std::string& d : dtypes) {
        if (DTypeOf(d) == t) return t;
      }
    }
    TORCH_CHECK_TYPE(!dtypes.empty(), "kffi.torch: ", sig_.label,
                     ": no tensor argument fixes the dtype of ", what);
    return DTypeOf(dtypes[0]);
  }

  OpSignature sig_;
  std::vector<const SigParam*> args_;  // into sig_.params
  int64_t device_arg_ = -1;
  bool untraceable_ = false;
};

}  // namespace

void RegisterMetaKernel(::torch::Library* lib, const std::string& name, const OpSignature& sig) {
  lib->impl(name.c_str(),
            ::torch::dispatch(c10::DispatchKey::Meta, ::torch::CppFunction::makeFromBoxedFunctor(
                                                          std::make_unique<MetaKernel>(sig))));
}

}  // namespace torchglue
}  // namespace kffi
