// tests/python/kffi_jax/jax_kernels.cc: CPU kernels the kffi.jax tests run inside XLA.
// SPDX-License-Identifier: Apache-2.0
#include <kffi/export.h>
#include <kffi/kffi.h>

#include <cstdint>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

namespace {

/// The elements of a float32 tensor: writable through a TensorView, read-only through a
/// ConstTensorView (both include byte_offset).
float* F32(kffi::TensorView t) {
  KFFI_CHECK((t.dtype() == DLDataType{kDLFloat, 32, 1}), TypeError)
      << "expected float32, got " << t.dtype();
  return t.data<float>();
}
const float* F32(kffi::ConstTensorView t) {
  KFFI_CHECK((t.dtype() == DLDataType{kDLFloat, 32, 1}), TypeError)
      << "expected float32, got " << t.dtype();
  return t.data<float>();
}

/// y = x + 1
void AddOne(kffi::ConstTensorView x, kffi::TensorView y) {
  const float* a = F32(x);
  float* b = F32(y);
  for (int64_t i = 0; i < x.numel(); ++i) b[i] = a[i] + 1;
}

/// y = x * factor (the output first, as in many C kernels)
void ScaleInto(kffi::TensorView y, kffi::ConstTensorView x, double factor) {
  KFFI_CHECK(x.numel() == y.numel(), ValueError) << "scale_into: sizes differ";
  const float* a = F32(x);
  float* b = F32(y);
  for (int64_t i = 0; i < x.numel(); ++i) b[i] = static_cast<float>(a[i] * factor);
}

/// x += value, in place
void AddInplace(kffi::TensorView x, double value) {
  float* a = F32(x);
  for (int64_t i = 0; i < x.numel(); ++i) a[i] += static_cast<float>(value);
}

/// out = concatenation of a and b along dimension 0 (2-d, float32)
void ConcatRows(kffi::ConstTensorView a, kffi::ConstTensorView b, kffi::TensorView out) {
  KFFI_CHECK(out.numel() == a.numel() + b.numel(), ValueError) << "concat_rows: bad output size";
  std::memcpy(F32(out), F32(a), static_cast<size_t>(a.numel()) * 4);
  std::memcpy(F32(out) + a.numel(), F32(b), static_cast<size_t>(b.numel()) * 4);
}

/// A new [n + m, k] tensor: a on top of b (2-d, float32), from the environment allocator.
kffi::Tensor ConcatAlloc(kffi::ConstTensorView a, kffi::ConstTensorView b) {
  std::vector<int64_t> shape{a.shape()[0] + b.shape()[0], a.shape()[1]};
  kffi::Tensor out = kffi::Tensor::FromEnvAlloc(kffi::IntArrayView(shape.data(), shape.size()),
                                                a.dtype(), a.device());
  ConcatRows(a, b, out);
  return out;
}

/// Raises ValueError(message) (to check that errors reach Python through XLA).
void Fail(kffi::ConstTensorView, kffi::TensorView, kffi::String message) {
  KFFI_THROW(ValueError) << std::string(message);
}

std::mutex g_mu;
int64_t g_last_alloc = 0;

/// A new tensor x + 1 from the environment allocator (inside XLA: the result buffer).
kffi::Tensor AllocPlusOne(kffi::ConstTensorView x) {
  kffi::Tensor out = kffi::Tensor::FromEnvAlloc(x.shape(), x.dtype(), x.device());
  {
    std::lock_guard<std::mutex> lock(g_mu);
    g_last_alloc = static_cast<int64_t>(reinterpret_cast<intptr_t>(out.data_ptr()));
  }
  AddOne(x, out);
  return out;
}

/// Two new tensors (x + 1, x * 2) from the environment allocator.
kffi::Array<kffi::Tensor> AllocTwo(kffi::ConstTensorView x) {
  kffi::Tensor a = kffi::Tensor::FromEnvAlloc(x.shape(), x.dtype(), x.device());
  kffi::Tensor b = kffi::Tensor::FromEnvAlloc(x.shape(), x.dtype(), x.device());
  AddOne(x, a);
  ScaleInto(b, x, 2.0);
  return kffi::Array<kffi::Tensor>{a, b};
}

/// A new tensor x * 3 in memory of its own (not the environment's): XLA must copy it.
kffi::Tensor OwnHostTimesThree(kffi::ConstTensorView x) {
  kffi::Tensor out = kffi::Tensor::FromNDAlloc(kffi::details::HostAlignedAlloc(), x.shape(),
                                               x.dtype(), x.device());
  ScaleInto(out, x, 3.0);
  return out;
}

/// Allocates a scratch tensor of another shape, then returns nothing.
void AllocScratch(kffi::ConstTensorView x) {
  kffi::Tensor t =
      kffi::Tensor::FromEnvAlloc(kffi::IntArrayView({x.numel() + 7}), x.dtype(), x.device());
  std::memset(t.data_ptr(), 0, static_cast<size_t>(x.numel() + 7) * 4);
}

int64_t LastAlloc() {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_last_alloc;
}

/// Returns None where a tensor was expected.
void ReturnsNothing(kffi::ConstTensorView) {}

/// A function that adds k (for many distinct targets).
kffi::Function MakeAdder(int64_t k) {
  return kffi::Function::FromTyped([k](kffi::ConstTensorView x, kffi::TensorView y) {
    const float* a = F32(x);
    float* b = F32(y);
    for (int64_t i = 0; i < x.numel(); ++i) b[i] = a[i] + static_cast<float>(k);
  });
}

/// y = x + (bias or 0): an optional tensor argument.
void AddBias(kffi::ConstTensorView x, kffi::Optional<kffi::ConstTensorView> bias,
             kffi::TensorView y) {
  const float* a = F32(x);
  float* b = F32(y);
  for (int64_t i = 0; i < x.numel(); ++i) b[i] = a[i] + (bias.has_value() ? F32(*bias)[i] : 0.f);
}

// ---- Gradient kernels: y = x * x, dx = 2 x g, y' = 2 x t --------------------------------------

void Square(kffi::ConstTensorView x, kffi::TensorView y) {
  for (int64_t i = 0; i < x.numel(); ++i) F32(y)[i] = F32(x)[i] * F32(x)[i];
}
void SquareBwd(kffi::ConstTensorView x, kffi::ConstTensorView g, kffi::TensorView dx) {
  for (int64_t i = 0; i < x.numel(); ++i) F32(dx)[i] = 2 * F32(x)[i] * F32(g)[i];
}
void SquareJvp(kffi::ConstTensorView x, kffi::ConstTensorView t, kffi::TensorView dy) {
  for (int64_t i = 0; i < x.numel(); ++i) F32(dy)[i] = 2 * F32(x)[i] * F32(t)[i];
}
/// z = a * b + c * scale
void Fma(kffi::ConstTensorView a, kffi::ConstTensorView b, kffi::ConstTensorView c, double scale,
         kffi::TensorView z) {
  for (int64_t i = 0; i < a.numel(); ++i) {
    F32(z)[i] = F32(a)[i] * F32(b)[i] + F32(c)[i] * static_cast<float>(scale);
  }
}
/// da = g b, db = g a, dc = g scale
void FmaBwd(kffi::ConstTensorView a, kffi::ConstTensorView b, kffi::ConstTensorView,
            kffi::ConstTensorView g, double scale, kffi::TensorView da, kffi::TensorView db,
            kffi::TensorView dc) {
  for (int64_t i = 0; i < a.numel(); ++i) {
    F32(da)[i] = F32(g)[i] * F32(b)[i];
    F32(db)[i] = F32(g)[i] * F32(a)[i];
    F32(dc)[i] = F32(g)[i] * static_cast<float>(scale);
  }
}
/// The forward pass that also keeps a residual: y = x * x, r = 2 x
void SquareFwd(kffi::ConstTensorView x, kffi::TensorView y, kffi::TensorView r) {
  for (int64_t i = 0; i < x.numel(); ++i) {
    F32(y)[i] = F32(x)[i] * F32(x)[i];
    F32(r)[i] = 2 * F32(x)[i];
  }
}
/// dx = r g
void MulBwd(kffi::ConstTensorView r, kffi::ConstTensorView g, kffi::TensorView dx) {
  for (int64_t i = 0; i < r.numel(); ++i) F32(dx)[i] = F32(r)[i] * F32(g)[i];
}

/// The empty kernel of the benchmarks.
void Empty(kffi::ConstTensorView, kffi::TensorView) {}

}  // namespace

// ---- probe: records what the callee received, raw (tensor flags, dtypes, attribute values) ----

namespace {
std::vector<kffi::Any>* g_probe = new std::vector<kffi::Any>();

kffi::Any Describe(const KFFIAny& a) {
  if (a.type_index == kKFFIDLTensorPtr) {
    const DLTensor* t = static_cast<const DLTensor*>(a.v_ptr);
    std::vector<int64_t> shape(t->shape, t->shape + t->ndim);
    std::vector<int64_t> strides;
    if (t->strides != nullptr) strides.assign(t->strides, t->strides + t->ndim);
    return kffi::Array<kffi::Any>{
        kffi::Any(kffi::String("tensor")),
        kffi::Any(static_cast<int64_t>(reinterpret_cast<intptr_t>(t->data))),
        kffi::Any(static_cast<int64_t>(a.tensor_flags)),
        kffi::Any(kffi::Shape(shape)),
        kffi::Any(kffi::Shape(strides)),
        kffi::Any(t->dtype),
        kffi::Any(t->device),
        kffi::Any(static_cast<int64_t>(t->byte_offset)),
        kffi::Any(t->strides != nullptr),
    };
  }
  return kffi::Any(kffi::AnyView(*reinterpret_cast<const kffi::AnyView*>(&a)));
}
}  // namespace

/// Records its arguments (readable with last_probe()); returns None.
extern "C" KFFI_DLL_EXPORT int __kffi_probe(void*, const KFFIAny* args, int32_t num_args,
                                            KFFIAny* result) {
  try {
    std::vector<kffi::Any> seen;
    for (int32_t i = 0; i < num_args; ++i) seen.push_back(Describe(args[i]));
    std::lock_guard<std::mutex> lock(g_mu);
    *g_probe = std::move(seen);
    result->type_index = kKFFINone;
    return 0;
  } catch (const std::exception& e) {
    KFFIErrorSetRaisedFromCStr("RuntimeError", e.what());
    return -1;
  }
}

namespace {
kffi::Array<kffi::Any> LastProbe() {
  std::lock_guard<std::mutex> lock(g_mu);
  return kffi::Array<kffi::Any>(*g_probe);
}
/// The environment stream the callee sees for the CPU, and whether an allocator is set.
kffi::Array<int64_t> EnvOnCpu(kffi::ConstTensorView) {
  return kffi::Array<int64_t>{
      static_cast<int64_t>(reinterpret_cast<intptr_t>(KFFIEnvGetStream(kDLCPU, 0))),
      KFFIEnvGetTensorAllocator() != nullptr ? 1 : 0};
}
}  // namespace

KFFI_EXPORT_DOC(add_one, AddOne, "y = x + 1", "x, y");
KFFI_EXPORT_DOC(scale_into, ScaleInto, "y = x * factor", "y, x, factor");
KFFI_EXPORT_DOC(add_inplace, AddInplace, "x += value", "x, value");
KFFI_EXPORT_DOC(concat_rows, ConcatRows, "out = [a; b]", "a, b, out");
KFFI_EXPORT_DOC(concat_alloc, ConcatAlloc, "[a; b], allocated", "a, b");
KFFI_EXPORT_DOC(fail, Fail, "raises ValueError(message)", "x, y, message");
KFFI_EXPORT_DOC(alloc_plus_one, AllocPlusOne, "x + 1, allocated", "x");
KFFI_EXPORT_DOC(alloc_two, AllocTwo, "(x + 1, x * 2), allocated", "x");
KFFI_EXPORT_DOC(own_host_times_three, OwnHostTimesThree, "x * 3 in its own memory", "x");
KFFI_EXPORT_DOC(alloc_scratch, AllocScratch, "allocates scratch", "x");
KFFI_EXPORT_DOC(last_alloc, LastAlloc, "data pointer of the last alloc_plus_one", "");
KFFI_EXPORT_DOC(returns_nothing, ReturnsNothing, "returns None", "x");
KFFI_EXPORT_DOC(make_adder, MakeAdder, "a function y = x + k", "k");
KFFI_EXPORT_DOC(add_bias, AddBias, "y = x + bias", "x, bias, y");
KFFI_EXPORT_DOC(square, Square, "y = x * x", "x, y");
KFFI_EXPORT_DOC(square_bwd, SquareBwd, "dx = 2 x g", "x, g, dx");
KFFI_EXPORT_DOC(square_jvp, SquareJvp, "dy = 2 x t", "x, t, dy");
KFFI_EXPORT_DOC(fma, Fma, "z = a b + c scale", "a, b, c, scale, z");
KFFI_EXPORT_DOC(fma_bwd, FmaBwd, "gradients of fma", "a, b, c, g, scale, da, db, dc");
KFFI_EXPORT_DOC(square_fwd, SquareFwd, "y = x * x, r = 2 x", "x, y, r");
KFFI_EXPORT_DOC(mul_bwd, MulBwd, "dx = r g", "r, g, dx");
KFFI_EXPORT_DOC(empty, Empty, "does nothing", "x, y");
KFFI_EXPORT_DOC(last_probe, LastProbe, "what probe received", "");
KFFI_EXPORT_DOC(env_on_cpu, EnvOnCpu, "[cpu env stream, allocator set]", "x");
