// python/kffi/torch/_call_env.cc: what a kffi call from torch's dispatcher runs in (see
// _call_env.h): dtype and device conversions, kffi errors as torch errors, and the allocator
// that makes torch tensors for what the callee allocates.
// SPDX-License-Identifier: Apache-2.0
#include "_call_env.h"

#include <ATen/ops/empty.h>
#include <kffi/error.h>

#include <memory>
#include <new>
#include <string>
#include <vector>

namespace kffi {
namespace torchglue {

// ---- dtypes and devices ---------------------------------------------------------------------

int64_t PackDType(DLDataType t) {
  return static_cast<int64_t>(t.code) | (static_cast<int64_t>(t.bits) << 8) |
         (static_cast<int64_t>(t.lanes) << 16);
}

DLDataType UnpackDType(int64_t v) {
  DLDataType t;
  t.code = static_cast<uint8_t>(v & 0xff);
  t.bits = static_cast<uint8_t>((v >> 8) & 0xff);
  t.lanes = static_cast<uint16_t>((v >> 16) & 0xffff);
  return t;
}

[[noreturn]] C10_NOINLINE void RefuseDType(c10::ScalarType s) {
  TORCH_CHECK_TYPE(false, "kffi.torch: dtype ", c10::toString(s), " has no DLPack equivalent");
}

c10::ScalarType FromDL(DLDataType t) {
  for (const DTypePair& p : kDTypes) {
    if (p.dl.code == t.code && p.dl.bits == t.bits && p.dl.lanes == t.lanes) return p.scalar;
  }
  TORCH_CHECK_TYPE(false, "kffi.torch: the DLPack dtype (code ", int(t.code), ", bits ",
                   int(t.bits), ", lanes ", int(t.lanes), ") has no torch equivalent");
}

[[noreturn]] C10_NOINLINE void RefuseDevice(const c10::Device& d) {
  TORCH_CHECK_TYPE(false, "kffi.torch: tensors on ", d.str(),
                   " are not supported (CPU and CUDA are)");
}

c10::Device FromDL(DLDevice d) {
  switch (d.device_type) {
    case kDLCPU:
    case kDLCUDAHost:
      return c10::Device(c10::DeviceType::CPU);
    case kDLCUDA:
    case kDLCUDAManaged:
      return c10::Device(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(d.device_id));
    default:
      TORCH_CHECK_TYPE(false, "kffi.torch: a kffi function returned a tensor on device type ",
                       d.device_type, ", which torch does not take (CPU and CUDA are)");
  }
}

// ---- errors -----------------------------------------------------------------------------------

/// Rethrows a kffi error as the c10 error torch turns into the Python exception of the same
/// kind, with the message unchanged (ValueError, TypeError, IndexError, NotImplementedError;
/// other kinds become RuntimeError "Kind: message").
[[noreturn]] void RethrowAsTorch(const std::string& kind, const std::string& message) {
  if (kind == "ValueError") TORCH_CHECK_VALUE(false, message);
  if (kind == "TypeError") TORCH_CHECK_TYPE(false, message);
  if (kind == "IndexError") TORCH_CHECK_INDEX(false, message);
  if (kind == "NotImplementedError") TORCH_CHECK_NOT_IMPLEMENTED(false, message);
  TORCH_CHECK(false, kind, ": ", message);
}

/// The error a safe call that returned rc raised, as the matching torch error.
[[noreturn]] C10_NOINLINE void RethrowRaised(int rc) {
  try {
    details::ThrowRaisedError(rc);
  } catch (const Error& e) {
    RethrowAsTorch(e.kind(), e.message());
  }
}

// ---- the environment allocator: torch tensors for what the callee allocates --------------------

// Tensors the allocator made during the current call on this thread: a returned tensor that is
// one of them comes back as that very torch tensor (same storage: the caching allocator, CUDA
// graph pools and memory planning see their own block).
thread_local std::vector<at::Tensor>* tls_allocated = nullptr;

std::vector<at::Tensor>** AllocatedSlot() { return &tls_allocated; }

struct AllocatedBlock {
  DLManagedTensorVersioned managed;
  at::Tensor tensor;
};

void FreeAllocated(DLManagedTensorVersioned* self) {
  delete static_cast<AllocatedBlock*>(self->manager_ctx);
}

int TorchAlloc(DLTensor* proto, DLManagedTensorVersioned** out, void* error_ctx,
               void (*set_error)(void*, const char*, const char*)) {
  try {
    std::vector<int64_t> shape(proto->shape, proto->shape + proto->ndim);
    auto options = at::TensorOptions().dtype(FromDL(proto->dtype)).device(FromDL(proto->device));
    auto block = std::make_unique<AllocatedBlock>();
    block->tensor = at::empty(shape, options);
    DLManagedTensorVersioned& m = block->managed;
    m.version.major = DLPACK_MAJOR_VERSION;
    m.version.minor = DLPACK_MINOR_VERSION;
    m.manager_ctx = block.get();
    m.deleter = &FreeAllocated;
    m.flags = 0;
    m.dl_tensor.data = block->tensor.data_ptr();
    m.dl_tensor.device = proto->device;
    m.dl_tensor.ndim = proto->ndim;
    m.dl_tensor.dtype = proto->dtype;
    m.dl_tensor.shape = const_cast<int64_t*>(block->tensor.sizes().data());
    m.dl_tensor.strides = const_cast<int64_t*>(block->tensor.strides().data());
    m.dl_tensor.byte_offset = 0;
    if (tls_allocated != nullptr) tls_allocated->push_back(block->tensor);
    *out = &block.release()->managed;
    return 0;
  } catch (const c10::OutOfMemoryError& e) {
    set_error(error_ctx, "MemoryError", e.what_without_backtrace());
  } catch (const c10::TypeError& e) {
    set_error(error_ctx, "TypeError", e.what_without_backtrace());
  } catch (const c10::Error& e) {
    set_error(error_ctx, "RuntimeError", e.what_without_backtrace());
  } catch (const std::bad_alloc& e) {
    set_error(error_ctx, "MemoryError", e.what());
  } catch (const std::exception& e) {
    set_error(error_ctx, "RuntimeError", e.what());
  }
  return -1;
}

}  // namespace torchglue
}  // namespace kffi
