// include/kffi/env.h: C++ helpers over the per-thread environment (streams, allocator, signals).
// SPDX-License-Identifier: Apache-2.0
#ifndef KFFI_ENV_H_
#define KFFI_ENV_H_

#include <kffi/error.h>

namespace kffi {
namespace env {

/// The calling thread's current stream for device (e.g. a cudaStream_t, set by the calling
/// framework for this call); NULL means the device's default stream.
inline KFFIStreamHandle GetStream(DLDevice device) {
  return KFFIEnvGetStream(device.device_type, device.device_id);
}

/// Sets the calling thread's current stream for device; returns the previous one.
inline KFFIStreamHandle SetStream(DLDevice device, KFFIStreamHandle stream) {
  KFFIStreamHandle prev = nullptr;
  if (KFFIEnvSetStream(device.device_type, device.device_id, stream, &prev) != 0) {
    details::ThrowRaisedError(-1);
  }
  return prev;
}

/// Makes stream current for device on this thread until the scope ends, then restores the
/// stream that was current before (scopes nest). Other threads are not affected.
class StreamScope {
 public:
  StreamScope(DLDevice device, KFFIStreamHandle stream)
      : device_(device), prev_(SetStream(device, stream)) {}
  ~StreamScope() {
    // The device has an entry already, so restoring allocates nothing and cannot fail.
    KFFIEnvSetStream(device_.device_type, device_.device_id, prev_, nullptr);
  }
  StreamScope(const StreamScope&) = delete;
  StreamScope& operator=(const StreamScope&) = delete;

  /// The stream that was current when the scope began (restored at its end).
  KFFIStreamHandle previous() const { return prev_; }

 private:
  DLDevice device_;
  KFFIStreamHandle prev_;
};

/// The tensor allocator in force for this thread: its own, else the process-wide one, else NULL.
inline DLPackManagedTensorAllocator GetTensorAllocator() { return KFFIEnvGetTensorAllocator(); }

/// Sets the tensor allocator for this thread (or the process-wide fallback when global);
/// returns the previous one at that level.
inline DLPackManagedTensorAllocator SetTensorAllocator(DLPackManagedTensorAllocator allocator,
                                                       bool global = false) {
  DLPackManagedTensorAllocator prev = nullptr;
  if (KFFIEnvSetTensorAllocator(allocator, global ? 1 : 0, &prev) != 0) {
    details::ThrowRaisedError(-1);
  }
  return prev;
}

/// Installs a tensor allocator (used by Tensor::FromEnvAlloc) until the scope ends, then
/// restores the previous one at the same level: this thread's by default, the process-wide one
/// when global is true (which other threads see too).
class TensorAllocatorScope {
 public:
  explicit TensorAllocatorScope(DLPackManagedTensorAllocator allocator, bool global = false)
      : global_(global), prev_(SetTensorAllocator(allocator, global)) {}
  ~TensorAllocatorScope() { KFFIEnvSetTensorAllocator(prev_, global_ ? 1 : 0, nullptr); }
  TensorAllocatorScope(const TensorAllocatorScope&) = delete;
  TensorAllocatorScope& operator=(const TensorAllocatorScope&) = delete;

 private:
  bool global_;
  DLPackManagedTensorAllocator prev_;
};

/// Runs the signal hook a language binding installed (Python: pending Ctrl-C) and throws the
/// error it raised, e.g. a KeyboardInterrupt. Cheap; call it now and then in long native loops.
inline void CheckSignals() {
  int rc = KFFIEnvCheckSignals();
  if (KFFI_UNLIKELY(rc != 0)) details::ThrowRaisedError(rc);
}

}  // namespace env
}  // namespace kffi

#endif  // KFFI_ENV_H_
