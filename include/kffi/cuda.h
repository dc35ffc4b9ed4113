// include/kffi/cuda.h: CUDA helpers for kernels: device guard, current stream, error checks.
// SPDX-License-Identifier: Apache-2.0
#ifndef KFFI_CUDA_H_
#define KFFI_CUDA_H_

#include <kffi/env.h>
#include <kffi/error.h>

// Header-only and usable from nvcc and from a host compiler. The CUDA parts need
// <cuda_runtime.h>: they are on under nvcc, when KFFI_WITH_CUDA_RUNTIME is defined, or when the
// header is on the include path; define KFFI_WITHOUT_CUDA_RUNTIME to switch them off. Nothing
// here is compiled into libkffi, so libkffi never depends on the CUDA runtime: a kernel library
// that uses these helpers links cudart itself.
#if !defined(KFFI_WITHOUT_CUDA_RUNTIME) && !defined(KFFI_CUDA_RUNTIME_AVAILABLE)
#if defined(__CUDACC__) || defined(KFFI_WITH_CUDA_RUNTIME)
#define KFFI_CUDA_RUNTIME_AVAILABLE 1
#elif defined(__has_include)
#if __has_include(<cuda_runtime.h>)
#define KFFI_CUDA_RUNTIME_AVAILABLE 1
#endif
#endif
#endif

namespace kffi {
namespace cuda {

/// The environment's current stream for a CUDA device as an opaque handle (NULL = the default
/// stream); available without the CUDA headers.
inline KFFIStreamHandle current_stream_handle(int32_t device_id) {
  return KFFIEnvGetStream(kDLCUDA, device_id);
}

}  // namespace cuda
}  // namespace kffi

#if defined(KFFI_CUDA_RUNTIME_AVAILABLE)
#include <cuda_runtime.h>

namespace kffi {
namespace cuda {
namespace details {

/// Throws RuntimeError "CUDA error: <name>: <description> (in <expr>)" with the caller's frame.
[[noreturn]] KFFI_NOINLINE inline void ThrowCudaError(cudaError_t err, const char* expr,
                                                      const char* file, int line,
                                                      const char* func) {
  // A non-sticky error is also recorded as the thread's last error: clear it so that a later
  // cudaGetLastError() check (after a launch) does not report this one again.
  (void)cudaGetLastError();
  ::kffi::details::ErrorBuilder builder("RuntimeError", file, line, func);
  builder << "CUDA error: " << cudaGetErrorName(err) << ": " << cudaGetErrorString(err) << " (in "
          << expr << ")";
  builder.Throw();
}

}  // namespace details

/// The stream to launch on for a device: the one the calling framework made current (e.g.
/// torch.cuda.current_stream()), or the default stream (NULL) when none was set.
inline cudaStream_t current_stream(DLDevice device) {
  return static_cast<cudaStream_t>(KFFIEnvGetStream(device.device_type, device.device_id));
}

/// current_stream for the CUDA device of that index.
inline cudaStream_t current_stream(int32_t device_id) {
  return current_stream(DLDevice{kDLCUDA, device_id});
}

}  // namespace cuda
}  // namespace kffi

/// Evaluates a CUDA runtime call once and throws kffi::Error (RuntimeError) when it fails:
///   KFFI_CUDA_CHECK(cudaMemsetAsync(p, 0, n, stream));
/// The message reads "CUDA error: cudaErrorInvalidValue: invalid argument (in <expr>)".
#define KFFI_CUDA_CHECK(expr)                                                                \
  do {                                                                                       \
    cudaError_t kffi_cuda_check_err_ = (expr);                                               \
    if (KFFI_UNLIKELY(kffi_cuda_check_err_ != cudaSuccess)) {                                \
      ::kffi::cuda::details::ThrowCudaError(kffi_cuda_check_err_, #expr, __FILE__, __LINE__, \
                                            __func__);                                       \
    }                                                                                        \
  } while (0)

namespace kffi {
namespace cuda {

/// Makes a CUDA device current for the scope and restores the previous one at its end, so that
/// a kernel for a tensor on device 1 launches there without changing the caller's device.
/// cudaSetDevice is skipped when the device is current already (it is not free).
class DeviceGuard {
 public:
  explicit DeviceGuard(int device_id) {
    KFFI_CUDA_CHECK(cudaGetDevice(&original_));
    current_ = original_;
    set_device(device_id);
  }
  /// For a tensor's device(); the device type is not checked (use CheckDevice for that).
  explicit DeviceGuard(DLDevice device) : DeviceGuard(static_cast<int>(device.device_id)) {}
  ~DeviceGuard() {
    // Destructors must not throw; a failure here would also have failed the first call.
    if (current_ != original_) (void)cudaSetDevice(original_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

  /// Switches to another device inside the same scope (the original is still restored).
  void set_device(int device_id) {
    if (device_id == current_) return;
    KFFI_CUDA_CHECK(cudaSetDevice(device_id));
    current_ = device_id;
  }
  /// The device that was current when the guard was made.
  int original_device() const { return original_; }
  /// The device the guard made current.
  int current_device() const { return current_; }

 private:
  int original_ = 0;
  int current_ = 0;
};

}  // namespace cuda
}  // namespace kffi

#endif  // KFFI_CUDA_RUNTIME_AVAILABLE
#endif  // KFFI_CUDA_H_
