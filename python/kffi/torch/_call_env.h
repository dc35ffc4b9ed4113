// python/kffi/torch/_call_env.h: what a kffi call from torch's dispatcher runs in: dtype and
// device conversions, kffi errors as torch errors, and CallEnv (the allocator that makes torch
// tensors, the stream and the device of the call). _call_env.cc defines them; _dispatch.cc uses
// them. Private to the torch glue.
// SPDX-License-Identifier: Apache-2.0
#ifndef KFFI_TORCH_CALL_ENV_H_
#define KFFI_TORCH_CALL_ENV_H_

#include <ATen/core/Tensor.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <kffi/c_api.h>

#include <cstdint>
#include <string>
#include <vector>

#include "_torch_dlpack.h"

namespace kffi {
namespace torchglue {

/// A dtype as one int64 of a call plan (code | bits << 8 | lanes << 16), and back.
int64_t PackDType(DLDataType t);
DLDataType UnpackDType(int64_t v);

/// TypeError: a torch dtype or device that DLPack (so kffi) has no word for.
[[noreturn]] C10_NOINLINE void RefuseDType(c10::ScalarType s);
[[noreturn]] C10_NOINLINE void RefuseDevice(const c10::Device& d);

inline DLDataType ToDL(c10::ScalarType s) {
  DLDataType t;
  if (C10_UNLIKELY(!DLDTypeOf(s, &t))) RefuseDType(s);
  return t;
}

/// The torch dtype of a DLPack one (TypeError when torch has none).
c10::ScalarType FromDL(DLDataType t);

inline DLDevice ToDL(const c10::Device& d) {
  DLDevice out;
  if (C10_UNLIKELY(!DLDeviceOf(d, &out))) RefuseDevice(d);
  return out;
}

/// The torch device of a DLPack one (CPU and CUDA; TypeError otherwise).
c10::Device FromDL(DLDevice d);

/// Rethrows a kffi error as the c10 error torch turns into the Python exception of the same
/// kind, with the message unchanged (ValueError, TypeError, IndexError, NotImplementedError;
/// other kinds become RuntimeError "Kind: message").
[[noreturn]] void RethrowAsTorch(const std::string& kind, const std::string& message);

/// The error a safe call that returned rc raised, as the matching torch error.
[[noreturn]] C10_NOINLINE void RethrowRaised(int rc);

/// The environment allocator: a torch tensor for what the callee allocates (DLPack's allocator
/// signature, for KFFIEnvSetTensorAllocator).
int TorchAlloc(DLTensor* proto, DLManagedTensorVersioned** out, void* error_ctx,
               void (*set_error)(void*, const char*, const char*));

/// This thread's slot for the list of tensors TorchAlloc made during the current call: a
/// returned tensor that is one of them comes back as that very torch tensor.
std::vector<at::Tensor>** AllocatedSlot();

/// Sets the environment (allocator; stream and current device for CUDA) for one call. The
/// allocator's list of the tensors it made is set only for calls that can return tensors (the
/// thread-local slot costs a call through __tls_get_addr in a dlopen'ed library); without one,
/// a nested call's allocations are kept by the enclosing call's list, if any, until it ends.
class CallEnv {
 public:
  CallEnv(const c10::Device* cuda, std::vector<at::Tensor>* allocated) {
    if (allocated != nullptr) {
      slot_ = AllocatedSlot();
      prev_allocated_ = *slot_;
      *slot_ = allocated;
    }
    KFFIEnvSetTensorAllocator(&TorchAlloc, 0, &prev_alloc_);
    if (cuda != nullptr) EnterDevice(*cuda);
  }
  ~CallEnv() {
    if (stream_set_) KFFIEnvSetStream(dl_.device_type, dl_.device_id, prev_stream_, nullptr);
    KFFIEnvSetTensorAllocator(prev_alloc_, 0, nullptr);
    if (slot_ != nullptr) *slot_ = prev_allocated_;
  }
  CallEnv(const CallEnv&) = delete;
  CallEnv& operator=(const CallEnv&) = delete;

  void* stream() const { return stream_; }

 private:
  C10_NOINLINE void EnterDevice(const c10::Device& device) {
    const c10::impl::DeviceGuardImplInterface* impl = c10::impl::getDeviceGuardImpl(device.type());
    // A device guard only when the call's device is not the current one: one query instead of a
    // query, a set and a restore that checks the device's context (driver calls) per call.
    if (impl->getDevice() != device) guard_.reset_device(device);
    dl_ = ToDL(device);
    stream_ = impl->getStream(device).native_handle();
    KFFIEnvSetStream(dl_.device_type, dl_.device_id, stream_, &prev_stream_);
    stream_set_ = true;
  }

  std::vector<at::Tensor>** slot_ = nullptr;
  std::vector<at::Tensor>* prev_allocated_ = nullptr;
  c10::OptionalDeviceGuard guard_;
  DLPackManagedTensorAllocator prev_alloc_ = nullptr;
  DLDevice dl_{kDLCPU, 0};
  void* stream_ = nullptr;
  KFFIStreamHandle prev_stream_ = nullptr;
  bool stream_set_ = false;
};

}  // namespace torchglue
}  // namespace kffi

#endif  // KFFI_TORCH_CALL_ENV_H_
