// bench/cpp/bench_aot.cc: a call through the typed entry point of a generated header (an exported
// object linked statically) against a direct call of the same C++ function.
//
// The entry points below are what kffi.aot.render_header writes for these functions
// (tests/python/toolchain/test_aot_stubs.py holds the generator to this text), and the safe-call
// symbols live in another translation unit (bench_aot_kernels.cc), as a linked object's do. The
// direct anchors call the functions through a volatile function pointer: what a call into another
// object costs at the least.
// SPDX-License-Identifier: Apache-2.0
#include <benchmark/benchmark.h>
#include <kffi/container/containers.h>
#include <kffi/module.h>
#include <kffi/optional.h>
#include <kffi/tensor.h>

#include <cstdint>
#include <vector>

extern "C" {
int __kffi_aot_add3(void* handle, const KFFIAny* args, int32_t num_args, KFFIAny* result);
int __kffi_aot_ndim3(void* handle, const KFFIAny* args, int32_t num_args, KFFIAny* result);
int __kffi_aot_nop(void* handle, const KFFIAny* args, int32_t num_args, KFFIAny* result);
}

int64_t BenchAotAdd3(int64_t a, int64_t b, int64_t c);
int64_t BenchAotNdim3(kffi::TensorView a, kffi::TensorView b, kffi::TensorView c);
void BenchAotNop();

// As generated (kffi.aot.render_header).
inline int64_t aot_add3(int64_t a, int64_t b, int64_t c) {
  return kffi::Module::InvokeSafeCall<&__kffi_aot_add3>(a, b, c).cast<int64_t>();
}
inline int64_t aot_ndim3(kffi::TensorView a, kffi::TensorView b, kffi::TensorView c) {
  return kffi::Module::InvokeSafeCall<&__kffi_aot_ndim3>(a, b, c).cast<int64_t>();
}
inline void aot_nop() { kffi::Module::InvokeSafeCall<&__kffi_aot_nop>(); }

namespace {

int64_t (*volatile g_add3)(int64_t, int64_t, int64_t) = &BenchAotAdd3;
int64_t (*volatile g_ndim3)(kffi::TensorView, kffi::TensorView, kffi::TensorView) = &BenchAotNdim3;
void (*volatile g_nop)() = &BenchAotNop;

struct Tensors3 {
  std::vector<float> data = std::vector<float>(16);
  int64_t shape[1] = {16};
  DLTensor t[3];
  Tensors3() {
    for (DLTensor& x : t) {
      x = DLTensor{
          data.data(), DLDevice{kDLCPU, 0}, 1, DLDataType{kDLFloat, 32, 1}, shape, nullptr, 0};
    }
  }
};

void BM_AotDirect_0Args(benchmark::State& state) {
  for (auto _ : state) g_nop();
}
void BM_AotHeader_0Args(benchmark::State& state) {
  for (auto _ : state) aot_nop();
}
void BM_AotDirect_3Ints(benchmark::State& state) {
  int64_t a = 1, b = 2, c = 3;
  for (auto _ : state) benchmark::DoNotOptimize(g_add3(a, b, c));
}
void BM_AotHeader_3Ints(benchmark::State& state) {
  int64_t a = 1, b = 2, c = 3;
  for (auto _ : state) benchmark::DoNotOptimize(aot_add3(a, b, c));
}
void BM_AotDirect_3Tensors(benchmark::State& state) {
  Tensors3 ts;
  kffi::TensorView a(&ts.t[0]), b(&ts.t[1]), c(&ts.t[2]);
  for (auto _ : state) benchmark::DoNotOptimize(g_ndim3(a, b, c));
}
void BM_AotHeader_3Tensors(benchmark::State& state) {
  Tensors3 ts;
  kffi::TensorView a(&ts.t[0]), b(&ts.t[1]), c(&ts.t[2]);
  for (auto _ : state) benchmark::DoNotOptimize(aot_ndim3(a, b, c));
}

BENCHMARK(BM_AotDirect_0Args);
BENCHMARK(BM_AotHeader_0Args);
BENCHMARK(BM_AotDirect_3Ints);
BENCHMARK(BM_AotHeader_3Ints);
BENCHMARK(BM_AotDirect_3Tensors);
BENCHMARK(BM_AotHeader_3Tensors);

}  // namespace

BENCHMARK_MAIN();
