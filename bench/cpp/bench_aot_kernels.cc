// bench/cpp/bench_aot_kernels.cc: the kernels of bench_aot.cc, in their own translation unit (as
// an exported object is), compiled for the system library (-DKFFI_EXPORT_TO_SYSTEM_LIB=1).
// SPDX-License-Identifier: Apache-2.0
#include <kffi/export.h>
#include <kffi/tensor.h>

#include <cstdint>

// The functions themselves, which the direct anchors call through a function pointer. They stay
// calls in the exports too, as a real kernel's body would (and under LTO, where the export inlines
// into its caller, the compiler may neither inline them nor treat their results as constants).
#if defined(__GNUC__) && !defined(__clang__)
#define BENCH_OPAQUE __attribute__((noipa))
#else
#define BENCH_OPAQUE __attribute__((noinline, optnone))
#endif
BENCH_OPAQUE int64_t BenchAotAdd3(int64_t a, int64_t b, int64_t c) { return a + b + c; }
BENCH_OPAQUE int64_t BenchAotNdim3(kffi::TensorView a, kffi::TensorView b, kffi::TensorView c) {
  return a.ndim() + b.ndim() + c.ndim();
}
BENCH_OPAQUE void BenchAotNop() {}

KFFI_EXPORT_DOC(aot_add3, BenchAotAdd3, "", "a, b, c");
KFFI_EXPORT_DOC(aot_ndim3, BenchAotNdim3, "", "a, b, c");
KFFI_EXPORT_DOC(aot_nop, BenchAotNop, "", "");
