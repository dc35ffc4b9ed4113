// tests/python/kernels/record_op_kernels.cc: record parameters (a KFFI_RECORD struct and a
// KFFI_OBJECT_DEF type) of functions called as torch ops and JAX calls
// (tests/python/kffi_torch/test_torch_records.py, test_jax_records.py).
// SPDX-License-Identifier: Apache-2.0
#include <kffi/contract.h>
#include <kffi/kffi.h>
#include <kffi/reflection.h>

#include <cstdint>
#include <string>

namespace {

struct Blend {
  double alpha = 1.0;
  int64_t n = 1;
  bool flag = false;
  std::string tag;
};
KFFI_RECORD(Blend, "flat.Blend", alpha, n, flag, tag);

class KnobsObj : public kffi::Object {
 public:
  KFFI_DECLARE_OBJECT_INFO("flat.Knobs", KnobsObj, kffi::Object)
  double scale = 1.0;
  int64_t shift = 0;
  int64_t version = 7;  // read-only: not an op argument
};
KFFI_OBJECT_DEF(KnobsObj)
    .field_rw("scale", &KnobsObj::scale)
    .field_rw("shift", &KnobsObj::shift)
    .field_ro("version", &KnobsObj::version);

// A field type a torch op or a JAX attribute cannot take.
struct Shaped {
  double alpha = 1.0;
  kffi::Array<int64_t> dims;
};
KFFI_RECORD(Shaped, "flat.Shaped", alpha, dims);

// An int32 field: a value past its range is refused by the field's setter.
struct Small {
  int32_t k = 0;
};
KFFI_RECORD(Small, "flat.Small", k);

// y = x * alpha * n + flag (+ the tag's length), a new tensor.
double Factor(const Blend& b) {
  return b.alpha * static_cast<double>(b.n) + (b.flag ? 1.0 : 0.0) +
         static_cast<double>(b.tag.size());
}
kffi::Tensor Blended(Blend b, kffi::ConstTensorView x) {
  kffi::Tensor y = kffi::Tensor::FromEnvAlloc(x.shape(), x.dtype(), x.device());
  const float* a = x.data<float>();
  for (int64_t i = 0; i < x.numel(); ++i) y.data<float>()[i] = a[i] * Factor(b);
  return y;
}
// y = x * scale + shift, written into y.
void Knobbed(kffi::TensorView y, kffi::ConstTensorView x, kffi::ObjectPtr<KnobsObj> k) {
  const float* a = x.data<float>();
  for (int64_t i = 0; i < x.numel(); ++i) {
    y.data<float>()[i] = a[i] * k->scale + static_cast<double>(k->shift);
  }
}
double BlendFactor(Blend b) { return Factor(b); }
double Shape(Shaped s) { return s.alpha; }
int64_t SmallK(Small s) { return s.k; }
kffi::Tensor SmallAdd(Small s, kffi::ConstTensorView x) {
  kffi::Tensor y = kffi::Tensor::FromEnvAlloc(x.shape(), x.dtype(), x.device());
  for (int64_t i = 0; i < x.numel(); ++i) y.data<float>()[i] = x.data<float>()[i] + s.k;
  return y;
}
Blend MakeBlend(double alpha, int64_t n) { return Blend{alpha, n, true, "made"}; }

}  // namespace

KFFI_EXPORT_DOC(blended, Blended, "", "b, x");
KFFI_EXPORT_DOC(knobbed, Knobbed, "", "y, x, k");
KFFI_EXPORT_DOC(blend_factor, BlendFactor, "", "b");
KFFI_EXPORT_DOC(shaped, Shape, "", "s");
KFFI_EXPORT_DOC(small_k, SmallK, "", "s");
KFFI_EXPORT_DOC(small_add, SmallAdd, "", "s, x");
KFFI_EXPORT_DOC(make_blend, MakeBlend, "", "alpha, n");
