// tests/module_libs/contractlib.cc: exports with contracts, read by test_contract_module.cc and
// the Python tests (the malformed ones are in contractlib_bad.cc and contractlib_hostile.cc: a
// library holding one does not load). Only <kffi/kffi.h> is included: it has every export macro.
// SPDX-License-Identifier: Apache-2.0
#include <kffi/kffi.h>

#include <cstdint>

namespace {

int64_t AddOne(kffi::ConstTensorView a, kffi::ConstTensorView b) {
  return a.size(0) + b.size(0) - a.size(0);
}

int64_t StreamOf(kffi::ConstTensorView, void* stream) { return reinterpret_cast<int64_t>(stream); }

// y = x * factor, written into y.
void Scale(kffi::TensorView y, kffi::ConstTensorView x, double factor) {
  float* out = y.data<float>();
  const float* in = x.data<float>();
  for (int64_t i = 0; i < x.numel(); ++i) out[i] = static_cast<float>(in[i] * factor);
}

int64_t WithBias(kffi::ConstTensorView x, kffi::Optional<kffi::ConstTensorView> bias,
                 void* stream) {
  return x.size(0) * 10 + (bias.has_value() ? 1 : 0) + reinterpret_cast<int64_t>(stream) * 100;
}

}  // namespace

KFFI_EXPORT_CONTRACT_DOC(add_one, AddOne,
                         "a: Tensor([n], float32, align=16), b: Tensor([n], float32, align=16); "
                         "n: int32 % 16",
                         "Returns n.");
KFFI_EXPORT_CONTRACT(stream_of, StreamOf, "x: Tensor([n], *), stream: EnvStream");
KFFI_EXPORT_CONTRACT_DOC(scale, Scale,
                         "y: Tensor([n], float32, mut), x: Tensor([n], float32), factor: float "
                         "-> out: Tensor([n], float32)",
                         "y = x * factor");
KFFI_EXPORT_CONTRACT(with_bias, WithBias,
                     "x: Tensor([n, m], *), bias: Optional[Tensor([m], *)], stream: Stream "
                     "-> Tensor([n * 2, m // 2 + 1], float32)");
// A plain export in the same library, with an Optional parameter and an unnamed one.
KFFI_EXPORT(plain_optional,
            [](int64_t x, kffi::Optional<int64_t> y) { return x + (y.has_value() ? *y : 0); });
