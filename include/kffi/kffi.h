// include/kffi/kffi.h: the whole C++ API in one include: enough to write a kernel and export it
// (KFFI_EXPORT*, KFFI_EXPORT_CONTRACT*) or to load and call modules. Including it adds no symbol
// to a program: the ABI version record comes with the export macros.
// SPDX-License-Identifier: Apache-2.0
#ifndef KFFI_KFFI_H_
#define KFFI_KFFI_H_

#include <kffi/any.h>
#include <kffi/container/containers.h>
#include <kffi/contract.h>
#include <kffi/dispatch.h>
#include <kffi/dtype.h>
#include <kffi/env.h>
#include <kffi/error.h>
#include <kffi/export.h>
#include <kffi/function.h>
#include <kffi/half.h>
#include <kffi/module.h>
#include <kffi/object.h>
#include <kffi/optional.h>
#include <kffi/string.h>
#include <kffi/tensor.h>
#include <kffi/tensor_checks.h>
#include <kffi/variant.h>

// Under nvcc, the CUDA helpers too (KFFI_CUDA_CHECK, kffi::cuda::DeviceGuard, current_stream).
#if defined(__CUDACC__)
#include <kffi/cuda.h>
#endif

#endif  // KFFI_KFFI_H_
