// bench/cpp/bench_contract.cc: the per-call cost of a contract: the same no-op with three tensors
// called without a contract and with contracts of growing detail.
//
// Per-tensor check cost = (BM_Contract_* - BM_NoContract_3Tensors) / 3.
// SPDX-License-Identifier: Apache-2.0
#include <benchmark/benchmark.h>
#include <kffi/contract.h>

#include <cstdint>
#include <vector>

namespace {

// Functions go through the global registry and come back opaque, so the compiler cannot see the
// callee through the function object (as it could not for a function from another library).
kffi::Function Opaque(const char* name, kffi::Function f) {
  kffi::Function::SetGlobal(name, f, true);
  kffi::Function out = kffi::Function::GetGlobalRequired(name);
  benchmark::DoNotOptimize(out);
  return out;
}

void Nop3(kffi::ConstTensorView a, kffi::ConstTensorView b, kffi::ConstTensorView c) {
  benchmark::DoNotOptimize(a);
  benchmark::DoNotOptimize(b);
  benchmark::DoNotOptimize(c);
}
// What a `mut` contract tensor needs: a parameter that may be written (a ConstTensorView would
// make the contract invalid).
void Nop3Mut(kffi::TensorView a, kffi::TensorView b, kffi::TensorView c) {
  benchmark::DoNotOptimize(a);
  benchmark::DoNotOptimize(b);
  benchmark::DoNotOptimize(c);
}
void Nop3Stream(kffi::ConstTensorView a, kffi::ConstTensorView b, kffi::ConstTensorView c,
                void* stream) {
  Nop3(a, b, c);
  benchmark::DoNotOptimize(stream);
}

// Three 64x32 float32 tensors on one (fake) CUDA device, 64-byte aligned, compact row-major.
struct Tensors3 {
  alignas(64) float data[64 * 32];
  int64_t shape[2] = {64, 32};
  int64_t strides[2] = {32, 1};
  DLTensor t[3];
  explicit Tensors3(int ndim) {
    for (DLTensor& x : t) {
      x = DLTensor{data, {kDLCUDA, 0}, ndim, {kDLFloat, 32, 1}, shape, strides, 0};
    }
  }
};

void Run(benchmark::State& state, const kffi::Function& f, int ndim) {
  Tensors3 ts(ndim);
  kffi::TensorView a(&ts.t[0]), b(&ts.t[1]), c(&ts.t[2]);
  for (auto _ : state) benchmark::DoNotOptimize(f(a, b, c));
}

void BM_NoContract_3Tensors(benchmark::State& state) {
  Run(state, Opaque("bench.nop3", kffi::Function::FromTyped(Nop3, "nop3")), 2);
}

// Per tensor: type, device index, ndim, dtype, one bound and one matched symbol.
void BM_Contract_3Tensors_DtypeShape(benchmark::State& state) {
  Run(state,
      Opaque("bench.nop3_contract", kffi::FunctionWithContract(Nop3, "nop3",
                                                               "a: Tensor([n, m], float32), "
                                                               "b: Tensor([n, m], float32), "
                                                               "c: Tensor([n, m], float32)")),
      2);
}

// Everything a tensor can say: alignment, device type, dtype alternatives, offset, int32 width
// and divisibility, a literal dimension, contiguity.
void BM_Contract_3Tensors_Full(benchmark::State& state) {
  Run(state,
      Opaque("bench.nop3_full",
             kffi::FunctionWithContract(
                 Nop3, "nop3",
                 "a: Tensor([n, 32], float32|float16, device=cuda, align=16, offset0, contiguous), "
                 "b: Tensor([n, 32], float32|float16, device=cuda, align=16, offset0, contiguous), "
                 "c: Tensor([n, 32], float32|float16, device=cuda, align=16, offset0, contiguous)"
                 "; n: int32 % 16")),
      2);
}

// The full contract with every tensor declared `mut` (the read-only flag joins the type compare).
void BM_Contract_3Tensors_Full_Mut(benchmark::State& state) {
  Run(state,
      Opaque("bench.nop3_mut",
             kffi::FunctionWithContract(
                 Nop3Mut, "nop3",
                 "a: Tensor([n, 32], float32|float16, device=cuda, align=16, offset0, contiguous, "
                 "mut), b: Tensor([n, 32], float32|float16, device=cuda, align=16, offset0, "
                 "contiguous, mut), c: Tensor([n, 32], float32|float16, device=cuda, align=16, "
                 "offset0, contiguous, mut); n: int32 % 16")),
      2);
}

// The full contract plus an environment stream parameter (one KFFIEnvGetStream per call).
void BM_Contract_3Tensors_Full_EnvStream(benchmark::State& state) {
  Run(state,
      Opaque("bench.nop3_stream",
             kffi::FunctionWithContract(
                 Nop3Stream, "nop3",
                 "a: Tensor([n, 32], float32|float16, device=cuda, align=16, offset0, contiguous), "
                 "b: Tensor([n, 32], float32|float16, device=cuda, align=16, offset0, contiguous), "
                 "c: Tensor([n, 32], float32|float16, device=cuda, align=16, offset0, contiguous), "
                 "stream: EnvStream; n: int32 % 16")),
      2);
}

// Tensors of two ranks, as most kernels with a bias or a weight have: the leading run of rank-2
// tensors is checked inline, the rest by the runtime in one call (KFFIContractCheckFrom).
void BM_Contract_3Tensors_MixedRanks(benchmark::State& state) {
  Tensors3 ts(2);
  ts.t[1].ndim = 1;  // b: the [32] row of a [64, 32] buffer
  ts.t[1].shape = &ts.shape[1];
  ts.t[1].strides = &ts.strides[1];
  const kffi::Function f =
      Opaque("bench.nop3_mixed", kffi::FunctionWithContract(Nop3, "nop3",
                                                            "a: Tensor([n, m], float32), "
                                                            "b: Tensor([m], float32), "
                                                            "c: Tensor([n, m], float32)"));
  kffi::TensorView a(&ts.t[0]), b(&ts.t[1]), c(&ts.t[2]);
  for (auto _ : state) benchmark::DoNotOptimize(f(a, b, c));
}

BENCHMARK(BM_NoContract_3Tensors);
BENCHMARK(BM_Contract_3Tensors_DtypeShape);
BENCHMARK(BM_Contract_3Tensors_Full);
BENCHMARK(BM_Contract_3Tensors_Full_Mut);
BENCHMARK(BM_Contract_3Tensors_Full_EnvStream);
BENCHMARK(BM_Contract_3Tensors_MixedRanks);

}  // namespace

BENCHMARK_MAIN();
