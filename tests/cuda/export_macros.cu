// tests/cuda/export_macros.cu: the kernels of tests/abi/export_macros.cc (one per export macro,
// <kffi/kffi.h> alone) compiled by nvcc, next to a CUDA kernel and its launch.
// SPDX-License-Identifier: Apache-2.0
#include "export_macros.cc"

__global__ void KffiExportMacrosKernel(float* out) { out[threadIdx.x] = 1.0f; }

// Compiled, never called: KFFI_CUDA_CHECK comes with <kffi/kffi.h> under nvcc.
void KffiExportMacrosLaunch(float* out, cudaStream_t stream) {
  KffiExportMacrosKernel<<<1, 32, 0, stream>>>(out);
  KFFI_CUDA_CHECK(cudaGetLastError());
}
