// bench/cpp/bench_aot_kernels.cc: the kernels of bench_aot.cc, in their own translation unit (as
// an exported object is), compiled for the system library (-DKFFI_EXPORT_TO_SYSTEM_LIB=1).
#include <kffi/export.h>
#include <kffi/tensor.h>

#include <cstdint>

// The functions themselves, which the direct anchors call through a function pointer.
int64_t BenchAotAdd3(int64_t a, int64_t b, int64_t c) { return a + b + c; }
int64_t BenchAotNdim3(kffi::TensorView a, kffi::TensorView b, kffi::TensorView c) {
  return a.ndim() + b.ndim() + c.ndim();
}
void BenchAotNop() {}

KFFI_EXPORT_DOC(aot_add3, BenchAotAdd3, "", "a, b, c");
KFFI_EXPORT_DOC(aot_ndim3, BenchAotNdim3, "", "a, b, c");
KFFI_EXPORT_DOC(aot_nop, BenchAotNop, "", "");
