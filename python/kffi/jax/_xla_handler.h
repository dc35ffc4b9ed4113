// python/kffi/jax/_xla_handler.h: what the XLA FFI handler's files share: targets, the per-call
// state of the environment allocator, dtype conversion.
//
// The handler (libkffi_jax_handler, built with the package by cmake/jax_handler.cmake and loaded
// as a kffi module by kffi.jax._glue) is three files: _xla_handler.cc (the call: buffers,
// attributes, errors), _xla_alloc.cc (the environment allocator that hands out XLA's buffers) and
// _xla_targets.cc (one handler address per target, and the exports that make targets). They see
// XLA through _xla_ffi.h, kffi's own declaration of XLA's FFI C API, never through jaxlib's
// headers: one binary serves every jaxlib (the API version is settled at run time).
// SPDX-License-Identifier: Apache-2.0
#ifndef KFFI_JAX_XLA_HANDLER_H_
#define KFFI_JAX_XLA_HANDLER_H_

#include <kffi/kffi.h>

#include <cstdint>
#include <string>
#include <vector>

#include "_xla_ffi.h"

namespace kffi {
namespace jaxglue {

// ---- Targets ------------------------------------------------------------------------------------

/// What an arg_spec item passes: every input, every result, one input, one result, an attribute,
/// XLA's stream (an explicit stream parameter; None on CPU), None (an omitted optional), a record
/// (an object of a reflected type built from attributes, one per field).
enum SpecKind : int32_t {
  kArgsAll = 0,
  kRetsAll = 1,
  kArgOne = 2,
  kRetOne = 3,
  kAttr = 4,
  kStream = 5,
  kNone = 6,
  kRecord = 7
};

/// One arg_spec item, 8 bytes (the per-call loop walks these); attribute names live apart.
struct SpecItem {
  int32_t kind;
  int32_t index;  // kArgOne / kRetOne: the buffer; kAttr: into Target::attr_names; kRecord:
                  // into Target::records
};

/// A record argument: the type's creator and, per field, the attribute that holds it.
struct RecordField {
  std::string attr;            // the attribute's name: `cfg_alpha`
  const KFFIFieldInfo* field;  // the runtime's record (process lifetime)
  std::string label;           // `cfg.alpha`, for messages
};
struct RecordTarget {
  int (*creator)(KFFIObjectHandle* out);
  std::vector<RecordField> fields;
};

/// One registered target; lives as long as the process (XLA never forgets a handler).
struct Target {
  KFFIObjectHandle fn = nullptr;  // a strong reference
  KFFISafeCallType safe_call = nullptr;
  int32_t device_type = kDLCPU;
  uint32_t traits = 0;
  bool passes_all_rets = false;
  std::vector<SpecItem> spec;
  std::vector<std::string> attr_names;
  std::vector<RecordTarget> records;
  size_t fixed_values = 0;    // spec items that pass one value each
  size_t args_all_count = 0;  // "args" items (each passes every input)
  size_t rets_all_count = 0;  // "rets" items
  std::string label;          // the target name, for messages
};

/// What the allocator of the running call sees (one per thread, while a call runs).
struct CallState {
  const XLA_FFI_Api* api;
  XLA_FFI_ExecutionContext* ctx;
  XLA_FFI_Buffer* const* rets;
  int64_t num_rets;
  uint8_t* ret_free;  // 1: neither passed as an argument nor handed out yet
  DLDevice device;
  bool scratch_allowed;
  DLPackManagedTensorAllocator prev_alloc;
  uint64_t generation;
  int64_t live_scratch;
};

/// The call state of the calling thread (set while a call's allocator is installed).
extern thread_local CallState* tls_call;
/// Counts this thread's calls, so that a scratch tensor can tell whether its call is current.
extern thread_local uint64_t tls_generation;

/// XLA dtype codes (small integers) to DLPack dtypes; bits 0 where DLPack has none.
struct DTypeTable {
  static constexpr int kSize = 64;
  DLDataType entries[kSize];
  DTypeTable();
};
extern const DTypeTable kDTypes;

inline DLDataType DTypeOf(XLA_FFI_DataType t) {
  auto i = static_cast<unsigned>(t);
  return i < DTypeTable::kSize ? kDTypes.entries[i] : DLDataType{kDLOpaqueHandle, 0, 0};
}

inline bool SameDType(DLDataType a, DLDataType b) {
  return a.code == b.code && a.bits == b.bits && a.lanes == b.lanes;
}

/// Bytes of a compact tensor, or -1 on overflow / a negative dimension.
int64_t CompactBytes(const DLTensor* t);

/// The environment tensor allocator installed during a call (see _xla_alloc.cc).
int EnvAlloc(DLTensor* proto, DLManagedTensorVersioned** out, void* error_ctx,
             void (*set_error)(void* error_ctx, const char* kind, const char* message));

/// Whether api's table reaches XLA_FFI_DeviceOrdinal_Get (added within API 0.1: slots appended
/// to the table exist only where the runtime's struct_size covers them).
inline bool HasDeviceOrdinalGet(const XLA_FFI_Api* api) {
  return api->struct_size >= KFFI_XLA_FFI_SIZE_TO(XLA_FFI_Api, XLA_FFI_DeviceOrdinal_Get);
}

/// An XLA error of code with message (made through api).
XLA_FFI_Error* MakeError(const XLA_FFI_Api* api, XLA_FFI_Error_Code code, const std::string& msg);

}  // namespace jaxglue
}  // namespace kffi

/// Every target's handler enters here (through its trampoline, which supplies t).
extern "C" XLA_FFI_Error* KFFIJaxDispatch(XLA_FFI_CallFrame* frame, const kffi::jaxglue::Target* t);

#endif  // KFFI_JAX_XLA_HANDLER_H_
