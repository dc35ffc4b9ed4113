// bench/cpp/compile_unit_dispatch.cc: the export translation unit whose compile time says what
// contract-driven dtype dispatch costs: a contract export over three dtypes, dispatched by
// kffi::DispatchDtype<kffi::ContractDtypes(...)> or, with -DKFFI_BENCH_HAND_DISPATCH, by an
// if-chain with the same three instantiations.
// SPDX-License-Identifier: Apache-2.0
#include <kffi/contract.h>
#include <kffi/dispatch.h>
#include <kffi/tensor.h>

namespace {

constexpr char kAddOne[] =
    "x: Tensor([n], float32|float16|bfloat16), y: Tensor([n], float32|float16|bfloat16, mut)";

template <typename T>
void AddOneLoop(kffi::ConstTensorView x, kffi::TensorView y) {
  const T* a = x.data<T>();
  T* b = y.data<T>();
  for (int64_t i = 0; i < x.numel(); ++i) b[i] = T(static_cast<float>(a[i]) + 1.0f);
}

void AddOne(kffi::ConstTensorView x, kffi::TensorView y) {
#if defined(KFFI_BENCH_HAND_DISPATCH)
  if (x.dtype() == kffi::dtypes::float32) {
    AddOneLoop<float>(x, y);
  } else if (x.dtype() == kffi::dtypes::float16) {
    AddOneLoop<kffi::half>(x, y);
  } else {
    AddOneLoop<kffi::bfloat16>(x, y);
  }
#else
  kffi::DispatchDtype<kffi::ContractDtypes(kAddOne, "x")>(
      x, "x", [&](auto tag) { AddOneLoop<typename decltype(tag)::type>(x, y); });
#endif
}

}  // namespace

KFFI_EXPORT_CONTRACT(add_one, AddOne, kAddOne);
