// tests/python/kernels/pyext_kernels.cc: exports for the Python extension's tests: Optional
// parameters (defaults), a stream parameter, tuple results and tensor flags.
// SPDX-License-Identifier: Apache-2.0
#include <kffi/container/array.h>
#include <kffi/export.h>
#include <kffi/optional.h>
#include <kffi/tensor.h>

#include <cstdint>

namespace {

/// x clamped to [low, high]; a missing bound does not clamp.
int64_t Clamp(int64_t x, kffi::Optional<int64_t> low, kffi::Optional<int64_t> high) {
  if (low.has_value() && x < *low) x = *low;
  if (high.has_value() && x > *high) x = *high;
  return x;
}

/// The stream handle a stream parameter received, as an int (0 for None, the default stream).
int64_t StreamHandle(void* stream) {
  return static_cast<int64_t>(reinterpret_cast<intptr_t>(stream));
}

/// (numel, ndim) of x: a tuple result.
kffi::Array<int64_t> NumelAndNdim(kffi::ConstTensorView x) {
  int64_t numel = 1;
  for (int32_t i = 0; i < x.ndim(); ++i) numel *= x.shape()[i];
  return kffi::Array<int64_t>{numel, static_cast<int64_t>(x.ndim())};
}

}  // namespace

KFFI_EXPORT_DOC(clamp, Clamp, "x clamped to [low, high] (either bound optional).", "x, low, high");
KFFI_EXPORT_DOC(stream_handle, StreamHandle, "The handle a stream parameter received.", "stream");
KFFI_EXPORT_DOC(numel_and_ndim, NumelAndNdim, "(numel, ndim) of x.", "x");
