// bench/cpp/bench_call.cc: typed Function calls against direct calls through a function pointer.
// SPDX-License-Identifier: Apache-2.0
#include <benchmark/benchmark.h>
#include <kffi/dispatch.h>
#include <kffi/function.h>
#include <kffi/tensor.h>

#include <cstdint>
#include <vector>

namespace {

// The direct anchors go through a volatile function pointer so the compiler cannot inline them,
// which is what a call across a library boundary costs at the least.
void Nop0() {}
int64_t Add3(int64_t a, int64_t b, int64_t c) { return a + b + c; }
int64_t Ndim3(DLTensor* a, DLTensor* b, DLTensor* c) { return a->ndim + b->ndim + c->ndim; }

void (*volatile g_nop0)() = &Nop0;

// Functions go through the global registry and come back opaque, so the compiler cannot see the
// callee through the function object (as it could not for a function from another library).
kffi::Function Opaque(const char* name, kffi::Function f) {
  kffi::Function::SetGlobal(name, f, true);
  kffi::Function out = kffi::Function::GetGlobalRequired(name);
  benchmark::DoNotOptimize(out);
  return out;
}
int64_t (*volatile g_add3)(int64_t, int64_t, int64_t) = &Add3;
int64_t (*volatile g_ndim3)(DLTensor*, DLTensor*, DLTensor*) = &Ndim3;

void BM_Direct_0Args(benchmark::State& state) {
  for (auto _ : state) g_nop0();
}
void BM_Typed_0Args(benchmark::State& state) {
  kffi::Function f = Opaque("bench.nop0", kffi::Function::FromTyped([]() {}, "nop0"));
  for (auto _ : state) benchmark::DoNotOptimize(f());
}

void BM_Direct_3Ints(benchmark::State& state) {
  int64_t a = 1, b = 2, c = 3;
  for (auto _ : state) {
    benchmark::DoNotOptimize(g_add3(a, b, c));
  }
}
void BM_Typed_3Ints(benchmark::State& state) {
  kffi::Function f = Opaque(
      "bench.add3",
      kffi::Function::FromTyped([](int64_t a, int64_t b, int64_t c) { return a + b + c; }, "add3"));
  int64_t a = 1, b = 2, c = 3;
  for (auto _ : state) {
    benchmark::DoNotOptimize(f(a, b, c).cast<int64_t>());
  }
}
void BM_TypedFunction_3Ints(benchmark::State& state) {
  kffi::TypedFunction<int64_t(int64_t, int64_t, int64_t)> f(Opaque(
      "bench.add3_typed", kffi::Function::FromTyped(
                              [](int64_t a, int64_t b, int64_t c) { return a + b + c; }, "add3")));
  int64_t a = 1, b = 2, c = 3;
  for (auto _ : state) {
    benchmark::DoNotOptimize(f(a, b, c));
  }
}

struct Tensors3 {
  std::vector<float> data = std::vector<float>(16);
  int64_t shape[1] = {16};
  DLTensor t[3];
  Tensors3() {
    for (DLTensor& x : t) {
      x.data = data.data();
      x.device = DLDevice{kDLCPU, 0};
      x.ndim = 1;
      x.dtype = DLDataType{kDLFloat, 32, 1};
      x.shape = shape;
      x.strides = nullptr;
      x.byte_offset = 0;
    }
  }
};

void BM_Direct_3Tensors(benchmark::State& state) {
  Tensors3 ts;
  for (auto _ : state) {
    benchmark::DoNotOptimize(g_ndim3(&ts.t[0], &ts.t[1], &ts.t[2]));
  }
}
void BM_Typed_3TensorViews(benchmark::State& state) {
  Tensors3 ts;
  kffi::Function f = Opaque(
      "bench.ndim3",
      kffi::Function::FromTyped([](kffi::TensorView a, kffi::TensorView b,
                                   kffi::TensorView c) { return a.ndim() + b.ndim() + c.ndim(); },
                                "ndim3"));
  kffi::TensorView a(&ts.t[0]), b(&ts.t[1]), c(&ts.t[2]);
  for (auto _ : state) {
    benchmark::DoNotOptimize(f(a, b, c).cast<int64_t>());
  }
}

// Dtype dispatch: a typed call that reads the first element of a bfloat16 tensor (the last of
// three dtypes), dispatched by hand (an if-chain on the dtype) and by kffi::DispatchDtype.
struct Bf16Tensor {
  kffi::bfloat16 data[16] = {};
  int64_t shape[1] = {16};
  DLTensor t{data, DLDevice{kDLCPU, 0}, 1, DLDataType{kDLBfloat, 16, 1}, shape, nullptr, 0};
};

void BM_Typed_HandDispatch(benchmark::State& state) {
  Bf16Tensor ts;
  kffi::Function f =
      Opaque("bench.hand_dispatch", kffi::Function::FromTyped(
                                        [](kffi::ConstTensorView x) -> double {
                                          if (x.dtype() == kffi::dtypes::float32) {
                                            return x.data<float>()[0];
                                          } else if (x.dtype() == kffi::dtypes::float16) {
                                            return x.data<kffi::half>()[0];
                                          } else if (x.dtype() == kffi::dtypes::bfloat16) {
                                            return x.data<kffi::bfloat16>()[0];
                                          }
                                          KFFI_THROW(TypeError) << "unsupported dtype";
                                        },
                                        "hand_dispatch"));
  kffi::ConstTensorView x(&ts.t);
  for (auto _ : state) benchmark::DoNotOptimize(f(x).cast<double>());
}
void BM_Typed_DispatchDtype(benchmark::State& state) {
  Bf16Tensor ts;
  kffi::Function f = Opaque(
      "bench.dispatch_dtype",
      kffi::Function::FromTyped(
          [](kffi::ConstTensorView x) -> double {
            return kffi::DispatchDtype<float, kffi::half, kffi::bfloat16>(x, "x", [&](auto tag) {
              return static_cast<double>(x.data<typename decltype(tag)::type>()[0]);
            });
          },
          "dispatch_dtype"));
  kffi::ConstTensorView x(&ts.t);
  for (auto _ : state) benchmark::DoNotOptimize(f(x).cast<double>());
}

BENCHMARK(BM_Direct_0Args);
BENCHMARK(BM_Typed_0Args);
BENCHMARK(BM_Direct_3Ints);
BENCHMARK(BM_Typed_3Ints);
BENCHMARK(BM_TypedFunction_3Ints);
BENCHMARK(BM_Direct_3Tensors);
BENCHMARK(BM_Typed_3TensorViews);
BENCHMARK(BM_Typed_HandDispatch);
BENCHMARK(BM_Typed_DispatchDtype);

}  // namespace

BENCHMARK_MAIN();
