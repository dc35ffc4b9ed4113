// tests/cuda/export_macros.cu: the kernels of tests/abi/export_macros.cc (one per export macro,
// <kffi/kffi.h> alone) compiled by nvcc, next to a CUDA kernel.
#include "export_macros.cc"

__global__ void KffiExportMacrosKernel(float* out) { out[threadIdx.x] = 1.0f; }
