// python/kffi/jax/_xla_alloc.cc: the environment tensor allocator during an XLA call: XLA's result
// buffers first, then (CPU) the allocator that was in force or host memory, (GPU) XLA's scratch
// memory unless the target may be captured into a CUDA graph.
// SPDX-License-Identifier: Apache-2.0
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "_xla_handler.h"

namespace kffi {
namespace jaxglue {

// ---- The per-call environment allocator ---------------------------------------------------------

/// The text of an XLA error (owned by err: copied out before err is destroyed).
std::string XlaErrorMessage(const XLA_FFI_Api* api, XLA_FFI_Error* err) {
  XLA_FFI_Error_GetMessage_Args m;
  std::memset(&m, 0, sizeof(m));
  m.struct_size = XLA_FFI_Error_GetMessage_Args_STRUCT_SIZE;
  m.error = err;
  api->XLA_FFI_Error_GetMessage(&m);
  return m.message != nullptr ? m.message : "";
}

thread_local CallState* tls_call = nullptr;
thread_local uint64_t tls_generation = 0;

/// A DLManagedTensorVersioned with its own copy of the shape, freed by its deleter.
template <typename Extra>
struct ManagedBlock {
  DLManagedTensorVersioned managed;
  Extra extra;
  int64_t shape[1];  // ndim entries (at least one slot)

  static ManagedBlock* Make(const DLTensor* proto, void* data,
                            void (*deleter)(DLManagedTensorVersioned*)) {
    size_t n = proto->ndim > 0 ? static_cast<size_t>(proto->ndim) : 1;
    void* mem = std::malloc(offsetof(ManagedBlock, shape) + n * sizeof(int64_t));
    if (mem == nullptr) return nullptr;
    auto* b = static_cast<ManagedBlock*>(mem);
    b->managed.version.major = DLPACK_MAJOR_VERSION;
    b->managed.version.minor = DLPACK_MINOR_VERSION;
    b->managed.manager_ctx = b;
    b->managed.deleter = deleter;
    b->managed.flags = 0;
    DLTensor& t = b->managed.dl_tensor;
    t.data = data;
    t.device = proto->device;
    t.ndim = proto->ndim;
    t.dtype = proto->dtype;
    for (int32_t i = 0; i < proto->ndim; ++i) b->shape[i] = proto->shape[i];
    t.shape = b->shape;
    t.strides = nullptr;  // compact row-major
    t.byte_offset = 0;
    return b;
  }
};

struct NoExtra {};
struct ScratchExtra {
  CallState* owner;
  uint64_t generation;
  size_t size;
};

void FreeBlock(DLManagedTensorVersioned* self) { std::free(self->manager_ctx); }

void FreeHostBlock(DLManagedTensorVersioned* self) {
  std::free(self->dl_tensor.data);
  std::free(self->manager_ctx);
}

/// Scratch memory goes back to XLA only inside the call that took it (the execution context is
/// valid only there); a tensor kept past the call leaks its memory and the call reports it.
void FreeScratchBlock(DLManagedTensorVersioned* self) {
  auto* b = static_cast<ManagedBlock<ScratchExtra>*>(self->manager_ctx);
  CallState* st = tls_call;
  if (st != nullptr && st == b->extra.owner && st->generation == b->extra.generation) {
    XLA_FFI_DeviceMemory_Free_Args args;
    std::memset(&args, 0, sizeof(args));
    args.struct_size = XLA_FFI_DeviceMemory_Free_Args_STRUCT_SIZE;
    args.ctx = st->ctx;
    args.size = b->extra.size;
    args.data = self->dl_tensor.data;
    XLA_FFI_Error* err = st->api->XLA_FFI_DeviceMemory_Free(&args);
    if (err != nullptr) {
      XLA_FFI_Error_Destroy_Args d;
      std::memset(&d, 0, sizeof(d));
      d.struct_size = XLA_FFI_Error_Destroy_Args_STRUCT_SIZE;
      d.error = err;
      st->api->XLA_FFI_Error_Destroy(&d);
    }
    --st->live_scratch;
  }
  std::free(b);
}

bool MatchesBuffer(const DLTensor* proto, const XLA_FFI_Buffer* buf) {
  if (proto->ndim != buf->rank || !SameDType(proto->dtype, DTypeOf(buf->dtype))) return false;
  for (int32_t i = 0; i < proto->ndim; ++i) {
    if (proto->shape[i] != buf->dims[i]) return false;
  }
  return true;
}

/// Bytes of a compact tensor, or -1 on overflow / a negative dimension.
int64_t CompactBytes(const DLTensor* t) {
  uint64_t n = 1;
  for (int32_t i = 0; i < t->ndim; ++i) {
    if (t->shape[i] < 0) return -1;
    if (__builtin_mul_overflow(n, static_cast<uint64_t>(t->shape[i]), &n)) return -1;
  }
  uint64_t bits;
  if (__builtin_mul_overflow(n, static_cast<uint64_t>(t->dtype.bits) * t->dtype.lanes, &bits)) {
    return -1;
  }
  uint64_t bytes = (bits + 7) / 8;
  return bytes > static_cast<uint64_t>(INT64_MAX) ? -1 : static_cast<int64_t>(bytes);
}

/// The environment allocator during a call: a request that matches a result buffer no argument
/// took gets that buffer (the kernel then writes XLA's output in place); other CPU requests go
/// to the allocator that was in force (else aligned host memory); other GPU requests get XLA's
/// scratch memory, unless the target may be captured into a CUDA graph.
int EnvAlloc(DLTensor* proto, DLManagedTensorVersioned** out, void* error_ctx,
             void (*set_error)(void* error_ctx, const char* kind, const char* message)) {
  CallState* st = tls_call;
  if (st == nullptr) {
    set_error(error_ctx, "RuntimeError", "kffi.jax: the XLA allocator was used outside a call");
    return -1;
  }
  if (proto->device.device_type == st->device.device_type &&
      proto->device.device_id == st->device.device_id) {
    for (int64_t i = 0; i < st->num_rets; ++i) {
      if (st->ret_free[i] && MatchesBuffer(proto, st->rets[i])) {
        auto* b = ManagedBlock<NoExtra>::Make(proto, st->rets[i]->data, FreeBlock);
        if (b == nullptr) break;
        st->ret_free[i] = 0;
        *out = &b->managed;
        return 0;
      }
    }
  }
  if (proto->device.device_type == kDLCPU) {
    if (st->prev_alloc != nullptr) return st->prev_alloc(proto, out, error_ctx, set_error);
    int64_t bytes = CompactBytes(proto);
    if (bytes < 0) {
      set_error(error_ctx, "ValueError", "kffi.jax: tensor size overflows");
      return -1;
    }
    size_t rounded = (static_cast<size_t>(bytes) + 63) / 64 * 64;
    void* data = std::aligned_alloc(64, rounded == 0 ? 64 : rounded);
    auto* b = data ? ManagedBlock<NoExtra>::Make(proto, data, FreeHostBlock) : nullptr;
    if (b == nullptr) {
      std::free(data);
      set_error(error_ctx, "MemoryError", "kffi.jax: cannot allocate host memory");
      return -1;
    }
    *out = &b->managed;
    return 0;
  }
  if (proto->device.device_type != st->device.device_type ||
      proto->device.device_id != st->device.device_id) {
    set_error(error_ctx, "ValueError",
              "kffi.jax: a kernel inside XLA can allocate only on the call's own device");
    return -1;
  }
  if (!st->scratch_allowed) {
    set_error(error_ctx, "RuntimeError",
              "kffi.jax: a target registered with allow_cuda_graph=True allocated a tensor that "
              "is not one of its results; a CUDA graph would replay a freed address. Declare it "
              "as an output, or register the target without allow_cuda_graph");
    return -1;
  }
  int64_t bytes = CompactBytes(proto);
  if (bytes < 0) {
    set_error(error_ctx, "ValueError", "kffi.jax: tensor size overflows");
    return -1;
  }
  XLA_FFI_DeviceMemory_Allocate_Args args;
  std::memset(&args, 0, sizeof(args));
  args.struct_size = XLA_FFI_DeviceMemory_Allocate_Args_STRUCT_SIZE;
  args.ctx = st->ctx;
  args.size = static_cast<size_t>(bytes == 0 ? 1 : bytes);
  args.alignment = 16;  // the most XLA's scratch allocator accepts (its buffers are aligned more)
  XLA_FFI_Error* err = st->api->XLA_FFI_DeviceMemory_Allocate(&args);
  if (err != nullptr) {
    std::string msg = "kffi.jax: XLA's scratch allocator failed: " + XlaErrorMessage(st->api, err);
    XLA_FFI_Error_Destroy_Args d;
    std::memset(&d, 0, sizeof(d));
    d.struct_size = XLA_FFI_Error_Destroy_Args_STRUCT_SIZE;
    d.error = err;
    st->api->XLA_FFI_Error_Destroy(&d);
    set_error(error_ctx, "MemoryError", msg.c_str());
    return -1;
  }
  auto* b = ManagedBlock<ScratchExtra>::Make(proto, args.data, FreeScratchBlock);
  if (b == nullptr) {
    XLA_FFI_DeviceMemory_Free_Args f;
    std::memset(&f, 0, sizeof(f));
    f.struct_size = XLA_FFI_DeviceMemory_Free_Args_STRUCT_SIZE;
    f.ctx = st->ctx;
    f.size = args.size;
    f.data = args.data;
    if (XLA_FFI_Error* e = st->api->XLA_FFI_DeviceMemory_Free(&f)) {
      XLA_FFI_Error_Destroy_Args d;
      std::memset(&d, 0, sizeof(d));
      d.struct_size = XLA_FFI_Error_Destroy_Args_STRUCT_SIZE;
      d.error = e;
      st->api->XLA_FFI_Error_Destroy(&d);
    }
    set_error(error_ctx, "MemoryError", "kffi.jax: cannot allocate a tensor header");
    return -1;
  }
  b->extra = ScratchExtra{st, st->generation, args.size};
  ++st->live_scratch;
  *out = &b->managed;
  return 0;
}

}  // namespace jaxglue
}  // namespace kffi
