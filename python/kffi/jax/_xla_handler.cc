// python/kffi/jax/_xla_handler.cc: the XLA FFI handler that runs kffi functions as XLA targets.
//
// Built on first use (kffi.jax._build) against the XLA FFI headers of the jaxlib in use, and
// loaded as a kffi module whose exports make targets. Each target gets its own handler address
// (XLA gives a handler nothing but the call frame), so there is no fixed cap on targets: a small
// trampoline per target loads the target's record and jumps to Dispatch (see TrampolinePool).
//
// Per call, Dispatch turns XLA's buffers into DLTensor views on the stack (no copy; the dims XLA
// owns, row-major strides), attributes into kffi values, and calls the function's safe_call with
// XLA's stream as the environment stream and an allocator that hands out XLA's result buffers.
#include <kffi/export.h>
#include <kffi/kffi.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "xla/ffi/api/c_api.h"

namespace kffi {
namespace jaxffi {

// ---- Targets ------------------------------------------------------------------------------------

/// What an arg_spec item passes: every input, every result, one input, one result, an attribute,
/// XLA's stream (an explicit stream parameter; None on CPU), None (an omitted optional).
enum SpecKind : int32_t {
  kArgsAll = 0,
  kRetsAll = 1,
  kArgOne = 2,
  kRetOne = 3,
  kAttr = 4,
  kStream = 5,
  kNone = 6
};

/// One arg_spec item, 8 bytes (the per-call loop walks these); attribute names live apart.
struct SpecItem {
  int32_t kind;
  int32_t index;  // kArgOne / kRetOne: the buffer; kAttr: into Target::attr_names
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
  size_t fixed_values = 0;    // spec items that pass one value each
  size_t args_all_count = 0;  // "args" items (each passes every input)
  size_t rets_all_count = 0;  // "rets" items
  std::string label;          // the target name, for messages
};

// ---- Errors -------------------------------------------------------------------------------------

XLA_FFI_Error* MakeError(const XLA_FFI_Api* api, XLA_FFI_Error_Code code, const std::string& msg) {
  XLA_FFI_Error_Create_Args args;
  std::memset(&args, 0, sizeof(args));
  args.struct_size = XLA_FFI_Error_Create_Args_STRUCT_SIZE;
  args.extension_start = nullptr;
  args.message = msg.c_str();
  args.errc = code;
  return api->XLA_FFI_Error_Create(&args);
}

XLA_FFI_Error_Code CodeOfKind(const std::string& kind) {
  static const char* const kInvalid[] = {"ValueError", "TypeError", "IndexError", "KeyError",
                                         "AttributeError"};
  for (const char* k : kInvalid) {
    if (kind.compare(k) == 0) return XLA_FFI_Error_Code_INVALID_ARGUMENT;
  }
  if (kind.compare("MemoryError") == 0) return XLA_FFI_Error_Code_RESOURCE_EXHAUSTED;
  if (kind.compare("NotImplementedError") == 0) return XLA_FFI_Error_Code_UNIMPLEMENTED;
  return XLA_FFI_Error_Code_INTERNAL;
}

/// The error the function raised, as "Kind: message" in an XLA error of a matching code.
XLA_FFI_Error* ErrorFromRaised(const XLA_FFI_Api* api, const Target* t) {
  KFFIObjectHandle err = nullptr;
  KFFIErrorMoveFromRaised(&err);
  if (err == nullptr) {
    return MakeError(
        api, XLA_FFI_Error_Code_INTERNAL,
        "RuntimeError: kffi function of target `" + t->label + "` failed without raising an error");
  }
  const KFFIErrorCell* cell = KFFIErrorGetCellPtr(err);
  std::string kind(cell->kind.data, cell->kind.size);
  std::string msg = kind + ": " + std::string(cell->message.data, cell->message.size);
  KFFIObjectDecRef(err);
  return MakeError(api, CodeOfKind(kind), msg);
}

// ---- Metadata (traits and API version, asked by XLA at registration) ----------------------------

template <typename M, typename = void>
struct HasStateTypeId : std::false_type {};
template <typename M>
struct HasStateTypeId<M, std::void_t<decltype(std::declval<M&>().state_type_id)>> : std::true_type {
};

XLA_FFI_Error* FillMetadata(const XLA_FFI_Api* api, XLA_FFI_Metadata_Extension* ext,
                            const Target* t) {
  if (ext->extension_base.struct_size < XLA_FFI_Metadata_Extension_STRUCT_SIZE ||
      ext->metadata == nullptr || ext->metadata->struct_size < XLA_FFI_Metadata_STRUCT_SIZE) {
    if (api == nullptr) return nullptr;
    return MakeError(api, XLA_FFI_Error_Code_INVALID_ARGUMENT,
                     "kffi.jax handler: unexpected XLA_FFI_Metadata size (jaxlib differs from the "
                     "one the handler was built against)");
  }
  XLA_FFI_Metadata* md = ext->metadata;
  md->api_version.struct_size = XLA_FFI_Api_Version_STRUCT_SIZE;
  md->api_version.extension_start = nullptr;
  md->api_version.major_version = XLA_FFI_API_MAJOR;
  md->api_version.minor_version = XLA_FFI_API_MINOR;
  md->traits = t->traits;
  if constexpr (HasStateTypeId<XLA_FFI_Metadata>::value) {
    if (md->struct_size >= offsetof(XLA_FFI_Metadata, state_type_id) + sizeof(md->state_type_id)) {
      md->state_type_id.type_id = 0;  // stateless
    }
  }
  return nullptr;
}

// ---- Buffers ------------------------------------------------------------------------------------

/// XLA's element types as DLPack dtypes; bits 0 for those DLPack cannot say (tokens).
DLDataType DTypeOfSlow(XLA_FFI_DataType t) {
  switch (t) {
    case XLA_FFI_DataType_PRED:
      return DLDataType{kDLBool, 8, 1};
    case XLA_FFI_DataType_S1:
      return DLDataType{kDLInt, 1, 1};
    case XLA_FFI_DataType_S2:
      return DLDataType{kDLInt, 2, 1};
    case XLA_FFI_DataType_S4:
      return DLDataType{kDLInt, 4, 1};
    case XLA_FFI_DataType_S8:
      return DLDataType{kDLInt, 8, 1};
    case XLA_FFI_DataType_S16:
      return DLDataType{kDLInt, 16, 1};
    case XLA_FFI_DataType_S32:
      return DLDataType{kDLInt, 32, 1};
    case XLA_FFI_DataType_S64:
      return DLDataType{kDLInt, 64, 1};
    case XLA_FFI_DataType_U1:
      return DLDataType{kDLUInt, 1, 1};
    case XLA_FFI_DataType_U2:
      return DLDataType{kDLUInt, 2, 1};
    case XLA_FFI_DataType_U4:
      return DLDataType{kDLUInt, 4, 1};
    case XLA_FFI_DataType_U8:
      return DLDataType{kDLUInt, 8, 1};
    case XLA_FFI_DataType_U16:
      return DLDataType{kDLUInt, 16, 1};
    case XLA_FFI_DataType_U32:
      return DLDataType{kDLUInt, 32, 1};
    case XLA_FFI_DataType_U64:
      return DLDataType{kDLUInt, 64, 1};
    case XLA_FFI_DataType_F16:
      return DLDataType{kDLFloat, 16, 1};
    case XLA_FFI_DataType_F32:
      return DLDataType{kDLFloat, 32, 1};
    case XLA_FFI_DataType_F64:
      return DLDataType{kDLFloat, 64, 1};
    case XLA_FFI_DataType_BF16:
      return DLDataType{kDLBfloat, 16, 1};
    case XLA_FFI_DataType_C64:
      return DLDataType{kDLComplex, 64, 1};
    case XLA_FFI_DataType_C128:
      return DLDataType{kDLComplex, 128, 1};
    case XLA_FFI_DataType_F8E5M2:
      return DLDataType{kDLFloat8_e5m2, 8, 1};
    case XLA_FFI_DataType_F8E3M4:
      return DLDataType{kDLFloat8_e3m4, 8, 1};
    case XLA_FFI_DataType_F8E4M3:
      return DLDataType{kDLFloat8_e4m3, 8, 1};
    case XLA_FFI_DataType_F8E4M3FN:
      return DLDataType{kDLFloat8_e4m3fn, 8, 1};
    case XLA_FFI_DataType_F8E4M3B11FNUZ:
      return DLDataType{kDLFloat8_e4m3b11fnuz, 8, 1};
    case XLA_FFI_DataType_F8E5M2FNUZ:
      return DLDataType{kDLFloat8_e5m2fnuz, 8, 1};
    case XLA_FFI_DataType_F8E4M3FNUZ:
      return DLDataType{kDLFloat8_e4m3fnuz, 8, 1};
    case XLA_FFI_DataType_F4E2M1FN:
      return DLDataType{kDLFloat4_e2m1fn, 4, 1};
    case XLA_FFI_DataType_F8E8M0FNU:
      return DLDataType{kDLFloat8_e8m0fnu, 8, 1};
    default:
      return DLDataType{kDLOpaqueHandle, 0, 0};
  }
}

/// DTypeOfSlow as a table for the per-call path (XLA's codes are small).
struct DTypeTable {
  static constexpr int kSize = 64;
  DLDataType entries[kSize];
  DTypeTable() {
    for (int i = 0; i < kSize; ++i) entries[i] = DTypeOfSlow(static_cast<XLA_FFI_DataType>(i));
  }
};
const DTypeTable kDTypes;

inline DLDataType DTypeOf(XLA_FFI_DataType t) {
  auto i = static_cast<unsigned>(t);
  return i < DTypeTable::kSize ? kDTypes.entries[i] : DLDataType{kDLOpaqueHandle, 0, 0};
}

// ---- The per-call environment allocator
// ----------------------------------------------------------

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

thread_local CallState* tls_call = nullptr;
thread_local uint64_t tls_generation = 0;

bool SameDType(DLDataType a, DLDataType b) {
  return a.code == b.code && a.bits == b.bits && a.lanes == b.lanes;
}

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
    XLA_FFI_Error_GetMessage_Args m;
    std::memset(&m, 0, sizeof(m));
    m.struct_size = XLA_FFI_Error_GetMessage_Args_STRUCT_SIZE;
    m.error = err;
    st->api->XLA_FFI_Error_GetMessage(&m);
    std::string msg =
        std::string("kffi.jax: XLA's scratch allocator failed: ") + (m.message ? m.message : "");
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

// ---- Attributes ---------------------------------------------------------------------------------

float HalfToFloat(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t man = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    if (man == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      int e = -1;
      do {
        ++e;
        man <<= 1;
      } while ((man & 0x400u) == 0);
      bits = sign | (static_cast<uint32_t>(127 - 15 - e) << 23) | ((man & 0x3ffu) << 13);
    }
  } else if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (man << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (man << 13);
  }
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

float BFloat16ToFloat(uint16_t h) {
  uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

/// Reads one scalar of XLA dtype t at p into *out (an int, a bool or a float value).
bool ScalarToAny(XLA_FFI_DataType t, const void* p, KFFIAny* out, std::string* why) {
  out->zero_padding = 0;
  auto set_int = [&](int64_t v) {
    out->type_index = kKFFIInt;
    out->v_int64 = v;
  };
  auto set_float = [&](double v) {
    out->type_index = kKFFIFloat;
    out->v_float64 = v;
  };
  switch (t) {
    case XLA_FFI_DataType_PRED:
      out->type_index = kKFFIBool;
      out->v_int64 = *static_cast<const uint8_t*>(p) != 0;
      return true;
    case XLA_FFI_DataType_S8:
      set_int(*static_cast<const int8_t*>(p));
      return true;
    case XLA_FFI_DataType_S16:
      set_int(*static_cast<const int16_t*>(p));
      return true;
    case XLA_FFI_DataType_S32:
      set_int(*static_cast<const int32_t*>(p));
      return true;
    case XLA_FFI_DataType_S64:
      set_int(*static_cast<const int64_t*>(p));
      return true;
    case XLA_FFI_DataType_U8:
      set_int(*static_cast<const uint8_t*>(p));
      return true;
    case XLA_FFI_DataType_U16:
      set_int(*static_cast<const uint16_t*>(p));
      return true;
    case XLA_FFI_DataType_U32:
      set_int(*static_cast<const uint32_t*>(p));
      return true;
    case XLA_FFI_DataType_U64: {
      uint64_t v = *static_cast<const uint64_t*>(p);
      if (v > static_cast<uint64_t>(INT64_MAX)) {
        *why = "uint64 value " + std::to_string(v) + " does not fit int64";
        return false;
      }
      set_int(static_cast<int64_t>(v));
      return true;
    }
    case XLA_FFI_DataType_F16:
      set_float(HalfToFloat(*static_cast<const uint16_t*>(p)));
      return true;
    case XLA_FFI_DataType_BF16:
      set_float(BFloat16ToFloat(*static_cast<const uint16_t*>(p)));
      return true;
    case XLA_FFI_DataType_F32:
      set_float(*static_cast<const float*>(p));
      return true;
    case XLA_FFI_DataType_F64:
      set_float(*static_cast<const double*>(p));
      return true;
    default:
      *why = "unsupported scalar type (XLA dtype " + std::to_string(static_cast<int>(t)) + ")";
      return false;
  }
}

size_t ScalarBytes(XLA_FFI_DataType t) {
  DLDataType d = DTypeOf(t);
  return d.bits == 0 ? 0 : (d.bits + 7u) / 8u;
}

/// Owned values made for one call (strings over 7 bytes, arrays), released after it. Plain
/// storage: constructing and destroying an empty one costs nothing.
class Keep {
 public:
  Keep() = default;
  Keep(const Keep&) = delete;
  Keep& operator=(const Keep&) = delete;
  ~Keep() {
    for (size_t i = 0; i < n_ && i < kInline; ++i) KFFIObjectDecRef(inline_[i]);
    if (more_ != nullptr) {
      for (KFFIObjectHandle h : *more_) KFFIObjectDecRef(h);
      delete more_;
    }
  }
  /// Takes v's reference (when it holds an object) and returns its raw value.
  KFFIAny Add(Any v) {
    KFFIAny raw = details::AnyUnsafe::MoveToOwnedRaw(std::move(v));
    if (raw.type_index >= kKFFIStaticObjectBegin) {
      if (n_ < kInline) {
        inline_[n_] = raw.v_obj;
      } else {
        if (more_ == nullptr) more_ = new std::vector<KFFIObjectHandle>();
        more_->push_back(raw.v_obj);
      }
      ++n_;
    }
    return raw;
  }

 private:
  static constexpr size_t kInline = 4;
  KFFIObjectHandle inline_[kInline];
  size_t n_ = 0;
  std::vector<KFFIObjectHandle>* more_ = nullptr;
};

/// Converts attribute i of the call frame into *out. Returns false with *why on failure.
bool AttrToAny(const XLA_FFI_Attrs& attrs, int64_t i, KFFIAny* out, Keep* keep, std::string* why) {
  switch (attrs.types[i]) {
    case XLA_FFI_AttrType_SCALAR: {
      const auto* s = static_cast<const XLA_FFI_Scalar*>(attrs.attrs[i]);
      return ScalarToAny(s->dtype, s->value, out, why);
    }
    case XLA_FFI_AttrType_STRING: {
      const auto* s = static_cast<const XLA_FFI_ByteSpan*>(attrs.attrs[i]);
      *out = keep->Add(String(std::string_view(s->ptr, s->len)));
      return true;
    }
    case XLA_FFI_AttrType_ARRAY: {
      const auto* a = static_cast<const XLA_FFI_Array*>(attrs.attrs[i]);
      size_t width = ScalarBytes(a->dtype);
      if (width == 0) {
        *why = "unsupported array element type";
        return false;
      }
      std::vector<Any> items;
      items.reserve(a->size);
      for (size_t k = 0; k < a->size; ++k) {
        KFFIAny raw;
        if (!ScalarToAny(a->dtype, static_cast<const char*>(a->data) + k * width, &raw, why)) {
          return false;
        }
        items.push_back(details::AnyUnsafe::FromOwnedRaw(raw));
      }
      *out = keep->Add(Array<Any>(items));
      return true;
    }
    default:
      *why = "dictionary attributes are not supported";
      return false;
  }
}

int64_t FindAttr(const XLA_FFI_Attrs& attrs, const std::string& name) {
  for (int64_t i = 0; i < attrs.size; ++i) {
    const XLA_FFI_ByteSpan* n = attrs.names[i];
    if (n->len == name.size() && std::memcmp(n->ptr, name.data(), n->len) == 0) return i;
  }
  return -1;
}

std::string AttrNames(const XLA_FFI_Attrs& attrs) {
  std::string out;
  for (int64_t i = 0; i < attrs.size; ++i) {
    if (i) out += ", ";
    out.append(attrs.names[i]->ptr, attrs.names[i]->len);
  }
  return out.empty() ? "none" : out;
}

// ---- The call -----------------------------------------------------------------------------------

/// Restores the thread's environment (stream, allocator, call state) however the call ends.
struct EnvGuard {
  bool stream_set = false;
  bool alloc_set = false;
  DLDevice device{kDLCPU, 0};
  KFFIStreamHandle prev_stream = nullptr;
  DLPackManagedTensorAllocator prev_alloc = nullptr;
  CallState* prev_call = nullptr;
  ~EnvGuard() {
    if (stream_set) KFFIEnvSetStream(device.device_type, device.device_id, prev_stream, nullptr);
    if (alloc_set) {
      KFFIEnvSetTensorAllocator(prev_alloc, 0, nullptr);
      tls_call = prev_call;
    }
  }
};

/// Puts a returned tensor into result buffer buf: nothing to do when the kernel wrote XLA's
/// buffer (allocated through EnvAlloc); a host tensor elsewhere is copied.
bool PlaceResult(const KFFIAny& v, XLA_FFI_Buffer* buf, const Target* t, std::string* why) {
  if (v.type_index != kKFFITensor) {
    *why = "returned a value of type " + details::TypeIndexToKey(v.type_index) +
           " where a tensor (an XLA result) was expected";
    return false;
  }
  const DLTensor* src = KFFITensorGetDLTensorPtr(v.v_obj);
  bool same_shape = src->ndim == buf->rank && SameDType(src->dtype, DTypeOf(buf->dtype));
  for (int32_t i = 0; same_shape && i < src->ndim; ++i) same_shape = src->shape[i] == buf->dims[i];
  if (!same_shape) {
    *why = "returned a tensor whose shape or dtype differs from its XLA result";
    return false;
  }
  void* data = static_cast<char*>(src->data) + src->byte_offset;
  if (data == buf->data) return true;
  if (src->device.device_type != kDLCPU || t->device_type != kDLCPU ||
      !details::IsContiguousLayout(*src)) {
    *why =
        "returned a tensor that is not XLA's result buffer; on GPU, allocate outputs with "
        "Tensor::FromEnvAlloc (or take them as 'rets' arguments)";
    return false;
  }
  int64_t bytes = CompactBytes(src);
  if (bytes < 0) {
    *why = "returned a tensor whose size overflows";
    return false;
  }
  if (bytes > 0) std::memcpy(buf->data, data, static_cast<size_t>(bytes));
  return true;
}

/// "<Kind>: kffi.jax target `name`: <what>" as an XLA error. Cold: only failing calls format.
[[gnu::noinline, gnu::cold]] XLA_FFI_Error* TargetError(const XLA_FFI_Api* api,
                                                        XLA_FFI_Error_Code code, const char* kind,
                                                        const Target* t, const std::string& what) {
  return MakeError(api, code, std::string(kind) + ": kffi.jax target `" + t->label + "`: " + what);
}

/// Matches what the function returned (owned; released here) to the results no argument took
/// (free[0..nfree)). Out of line: most calls pass every result as an argument.
[[gnu::noinline]] XLA_FFI_Error* TakeReturned(const XLA_FFI_Api* api, const Target* t, KFFIAny out,
                                              XLA_FFI_Buffer* const* rets, const int64_t* free,
                                              int64_t nfree) {
  Any result = details::AnyUnsafe::FromOwnedRaw(out);
  if (nfree == 0) return nullptr;  // every result was an argument: a returned value is ignored
  const KFFIAny& raw = *details::AnyUnsafe::Raw(result);
  std::string why;
  bool ok = true;
  if (raw.type_index == kKFFINone) {
    why = "returned None, but " + std::to_string(nfree) +
          " XLA result(s) were neither arguments (arg_spec 'rets') nor returned";
    ok = false;
  } else if (raw.type_index == kKFFIArray) {
    const auto* cell = static_cast<const KFFISeqCell*>(KFFIObjectGetCellPtr(raw.v_obj));
    const auto* items = details::SeqData(cell);
    if (cell->size != nfree) {
      why = "returned " + std::to_string(cell->size) + " values for " + std::to_string(nfree) +
            " XLA result(s) not passed as arguments";
      ok = false;
    }
    for (int64_t k = 0; ok && k < cell->size; ++k)
      ok = PlaceResult(items[k], rets[free[k]], t, &why);
  } else if (nfree == 1) {
    ok = PlaceResult(raw, rets[free[0]], t, &why);
  } else {
    why = "returned one value for " + std::to_string(nfree) +
          " XLA result(s) not passed as arguments";
    ok = false;
  }
  if (!ok) {
    return TargetError(api, XLA_FFI_Error_Code_INVALID_ARGUMENT, "ValueError", t,
                       "the function " + why);
  }
  return nullptr;
}

/// Per-call storage: on the stack for typical arities, on the heap beyond.
template <typename T, size_t N>
class SmallBuf {
 public:
  explicit SmallBuf(size_t n) : data_(n <= N ? inline_ : new T[n]) {}
  ~SmallBuf() {
    if (data_ != inline_) delete[] data_;
  }
  SmallBuf(const SmallBuf&) = delete;
  SmallBuf& operator=(const SmallBuf&) = delete;
  T& operator[](size_t i) { return data_[i]; }
  T* data() { return data_; }

 private:
  T inline_[N];
  T* data_;
};

XLA_FFI_Error* Execute(XLA_FFI_CallFrame* frame, const Target* t) {
  const XLA_FFI_Api* api = frame->api;
  const int64_t nargs = frame->args.size;
  const int64_t nrets = frame->rets.size;
  auto* args = reinterpret_cast<XLA_FFI_Buffer* const*>(frame->args.args);
  auto* rets = reinterpret_cast<XLA_FFI_Buffer* const*>(frame->rets.rets);
  size_t total_rank = 0;
  for (int64_t i = 0; i < nargs; ++i) {
    if (KFFI_UNLIKELY(frame->args.types[i] != XLA_FFI_ArgType_BUFFER)) {
      return TargetError(api, XLA_FFI_Error_Code_INVALID_ARGUMENT, "TypeError", t,
                         "input " + std::to_string(i) + " is not a buffer");
    }
    total_rank += static_cast<size_t>(args[i]->rank);
  }
  for (int64_t i = 0; i < nrets; ++i) {
    if (KFFI_UNLIKELY(frame->rets.types[i] != XLA_FFI_RetType_BUFFER)) {
      return TargetError(api, XLA_FFI_Error_Code_INVALID_ARGUMENT, "TypeError", t,
                         "result " + std::to_string(i) + " is not a buffer");
    }
    total_rank += static_cast<size_t>(rets[i]->rank);
  }

  DLDevice device{static_cast<DLDeviceType>(t->device_type), 0};
  void* stream = nullptr;
  if (t->device_type != kDLCPU) {
    XLA_FFI_DeviceOrdinal_Get_Args o;
    std::memset(&o, 0, sizeof(o));
    o.struct_size = XLA_FFI_DeviceOrdinal_Get_Args_STRUCT_SIZE;
    o.ctx = frame->ctx;
    if (XLA_FFI_Error* e = api->XLA_FFI_DeviceOrdinal_Get(&o)) return e;
    device.device_id = o.device_ordinal;
    XLA_FFI_Stream_Get_Args s;
    std::memset(&s, 0, sizeof(s));
    s.struct_size = XLA_FFI_Stream_Get_Args_STRUCT_SIZE;
    s.ctx = frame->ctx;
    if (XLA_FFI_Error* e = api->XLA_FFI_Stream_Get(&s)) return e;
    stream = s.stream;
  }

  // DLTensor views: inputs first, then results; strides are compact row-major.
  const size_t nbuf = static_cast<size_t>(nargs + nrets);
  SmallBuf<DLTensor, 8> tensors(nbuf);
  SmallBuf<int64_t, 32> strides(total_rank);
  size_t stride_pos = 0;
  for (size_t b = 0; b < nbuf; ++b) {
    const XLA_FFI_Buffer* buf = b < static_cast<size_t>(nargs) ? args[b] : rets[b - nargs];
    DLTensor& dl = tensors[b];
    dl.data = buf->data;
    dl.device = device;
    dl.ndim = static_cast<int32_t>(buf->rank);
    dl.dtype = DTypeOf(buf->dtype);
    if (KFFI_UNLIKELY(dl.dtype.bits == 0)) {
      return TargetError(api, XLA_FFI_Error_Code_INVALID_ARGUMENT, "TypeError", t,
                         "a buffer has an element type DLPack cannot describe (XLA dtype " +
                             std::to_string(static_cast<int>(buf->dtype)) + ")");
    }
    dl.shape = buf->dims;
    int64_t* st = &strides[stride_pos];
    int64_t acc = 1;
    for (int64_t d = buf->rank - 1; d >= 0; --d) {
      st[d] = acc;
      acc *= buf->dims[d] > 0 ? buf->dims[d] : 1;
    }
    dl.strides = buf->rank > 0 ? st : nullptr;
    dl.byte_offset = 0;
    stride_pos += static_cast<size_t>(buf->rank);
  }

  // The arguments, in arg_spec order. passed[r]: result r went in as an argument.
  const size_t nvals = t->fixed_values + (t->args_all_count * static_cast<size_t>(nargs)) +
                       (t->rets_all_count * static_cast<size_t>(nrets));
  SmallBuf<KFFIAny, 8> values(nvals);
  SmallBuf<uint8_t, 8> passed(static_cast<size_t>(nrets));
  for (int64_t r = 0; r < nrets; ++r) passed[r] = 0;
  Keep keep;
  size_t v = 0;
  auto input = [&](int64_t i) {
    KFFIAny& a = values[v++];
    a.type_index = kKFFIDLTensorPtr;
    // An input aliased to a result (input_output_aliases) is that result's memory: writable.
    uint32_t flags = kKFFITensorFlagReadOnly;
    for (int64_t r = 0; r < nrets; ++r) {
      if (rets[r]->data == args[i]->data && rets[r]->data != nullptr) flags = 0;
    }
    a.tensor_flags = flags;
    a.v_ptr = &tensors[static_cast<size_t>(i)];
  };
  auto result = [&](int64_t r) {
    KFFIAny& a = values[v++];
    a.type_index = kKFFIDLTensorPtr;
    a.tensor_flags = 0;
    a.v_ptr = &tensors[static_cast<size_t>(nargs + r)];
    passed[r] = 1;
  };
  for (const SpecItem& s : t->spec) {
    switch (s.kind) {
      case kArgsAll:
        for (int64_t i = 0; i < nargs; ++i) input(i);
        break;
      case kRetsAll:
        for (int64_t r = 0; r < nrets; ++r) result(r);
        break;
      case kArgOne:
        if (KFFI_UNLIKELY(s.index >= nargs)) {
          return TargetError(api, XLA_FFI_Error_Code_INVALID_ARGUMENT, "IndexError", t,
                             "arg_spec names args." + std::to_string(s.index) +
                                 " but the call has " + std::to_string(nargs) + " inputs");
        }
        input(s.index);
        break;
      case kRetOne:
        if (KFFI_UNLIKELY(s.index >= nrets)) {
          return TargetError(api, XLA_FFI_Error_Code_INVALID_ARGUMENT, "IndexError", t,
                             "arg_spec names rets." + std::to_string(s.index) +
                                 " but the call has " + std::to_string(nrets) + " results");
        }
        result(s.index);
        break;
      case kStream: {
        KFFIAny& a = values[v++];
        a.zero_padding = 0;
        a.type_index = stream != nullptr ? kKFFIOpaquePtr : kKFFINone;
        a.v_ptr = stream;
        break;
      }
      case kNone: {
        KFFIAny& a = values[v++];
        a.type_index = kKFFINone;
        a.zero_padding = 0;
        a.v_int64 = 0;
        break;
      }
      default: {
        const std::string& name = t->attr_names[static_cast<size_t>(s.index)];
        int64_t i = FindAttr(frame->attrs, name);
        if (KFFI_UNLIKELY(i < 0)) {
          return TargetError(
              api, XLA_FFI_Error_Code_INVALID_ARGUMENT, "KeyError", t,
              "attribute '" + name +
                  "' named in arg_spec is not given (attributes: " + AttrNames(frame->attrs) + ")");
        }
        std::string why;
        if (KFFI_UNLIKELY(!AttrToAny(frame->attrs, i, &values[v++], &keep, &why))) {
          return TargetError(api, XLA_FFI_Error_Code_INVALID_ARGUMENT, "TypeError", t,
                             "attribute '" + name + "': " + why);
        }
      }
    }
  }

  // Results no argument took: the allocator hands them out, the return value fills them.
  int64_t nfree = 0;
  SmallBuf<int64_t, 8> free(static_cast<size_t>(nrets));
  SmallBuf<uint8_t, 8> avail(static_cast<size_t>(nrets));
  for (int64_t r = 0; r < nrets; ++r) {
    avail[r] = passed[r] ? 0 : 1;
    if (!passed[r]) free[static_cast<size_t>(nfree++)] = r;
  }

  CallState state;
  KFFIAny out;
  out.type_index = kKFFINone;
  out.zero_padding = 0;
  out.v_int64 = 0;
  {
    EnvGuard env;
    if (t->device_type != kDLCPU) {
      env.device = device;
      KFFIEnvSetStream(device.device_type, device.device_id, stream, &env.prev_stream);
      env.stream_set = true;
    }
    // CPU kernels that allocate nothing XLA returns keep the allocator in force; elsewhere ours
    // hands out XLA's result buffers (and, on GPU, its scratch memory).
    if (nfree > 0 || t->device_type != kDLCPU) {
      state.api = api;
      state.ctx = frame->ctx;
      state.rets = rets;
      state.num_rets = nrets;
      state.ret_free = avail.data();
      state.device = device;
      state.scratch_allowed = (t->traits & XLA_FFI_HANDLER_TRAITS_COMMAND_BUFFER_COMPATIBLE) == 0;
      state.generation = ++tls_generation;
      state.live_scratch = 0;
      KFFIEnvSetTensorAllocator(EnvAlloc, 0, &env.prev_alloc);
      state.prev_alloc = env.prev_alloc;
      env.prev_call = tls_call;
      tls_call = &state;
      env.alloc_set = true;
    }
    int rc = t->safe_call(t->fn, values.data(), static_cast<int32_t>(nvals), &out);
    if (KFFI_UNLIKELY(rc != 0)) return ErrorFromRaised(api, t);  // -1 error, -2 signal
    if (nfree > 0 || out.type_index != kKFFINone) {
      // Released inside the guard: scratch memory goes back while the call is current.
      if (XLA_FFI_Error* e = TakeReturned(api, t, out, rets, free.data(), nfree)) return e;
    }
    if (KFFI_UNLIKELY(env.alloc_set && state.live_scratch > 0)) {
      return TargetError(api, XLA_FFI_Error_Code_FAILED_PRECONDITION, "RuntimeError", t,
                         "the kernel kept " + std::to_string(state.live_scratch) +
                             " tensor(s) of XLA scratch memory past the call (leaked)");
    }
  }
  return nullptr;
}

/// Every target's handler enters here (through its trampoline, which supplies t).
extern "C" XLA_FFI_Error* KFFIJaxDispatch(XLA_FFI_CallFrame* frame, const Target* t) {
  if (frame->extension_start != nullptr &&
      frame->extension_start->type == XLA_FFI_Extension_Metadata) {
    return FillMetadata(frame->api,
                        reinterpret_cast<XLA_FFI_Metadata_Extension*>(frame->extension_start), t);
  }
  if (frame->stage != XLA_FFI_ExecutionStage_EXECUTE) return nullptr;  // only execute is bound
  try {
    return Execute(frame, t);
  } catch (const std::exception& e) {
    return MakeError(frame->api, XLA_FFI_Error_Code_INTERNAL,
                     std::string("RuntimeError: kffi.jax target `") + t->label + "`: " + e.what());
  } catch (...) {
    return MakeError(frame->api, XLA_FFI_Error_Code_INTERNAL,
                     "RuntimeError: kffi.jax target `" + t->label + "`: unknown C++ exception");
  }
}

// ---- Trampolines: one handler address per target --------------------------------------------
//
// A handler is a bare function pointer, so each target needs its own address. Stubs live in
// pages written once and then made read+execute; each stub loads its target record and the
// address of KFFIJaxDispatch from its slot in the writable page that follows, and jumps:
// handler(frame) becomes KFFIJaxDispatch(frame, target) with no extra frame. (XLA itself JITs
// host code, so wherever JAX runs, executable pages can be made.)

struct Slot {
  const Target* target;
  void* dispatch;
};

constexpr size_t kStubBytes = 32;

#if defined(__x86_64__)
void WriteStub(uint8_t* code, const Slot* slot) {
  const uint8_t endbr64[4] = {0xF3, 0x0F, 0x1E, 0xFA};
  std::memcpy(code, endbr64, 4);
  // mov rsi, [rip + disp32]: the target record, second argument of KFFIJaxDispatch.
  code[4] = 0x48;
  code[5] = 0x8B;
  code[6] = 0x35;
  int32_t d1 = static_cast<int32_t>(reinterpret_cast<const uint8_t*>(&slot->target) - (code + 11));
  std::memcpy(code + 7, &d1, 4);
  // jmp [rip + disp32]: KFFIJaxDispatch.
  code[11] = 0xFF;
  code[12] = 0x25;
  int32_t d2 =
      static_cast<int32_t>(reinterpret_cast<const uint8_t*>(&slot->dispatch) - (code + 17));
  std::memcpy(code + 13, &d2, 4);
  std::memset(code + 17, 0xCC, kStubBytes - 17);  // int3
}
constexpr bool kHaveTrampolines = true;
#elif defined(__aarch64__)
void WriteStub(uint8_t* code, const Slot* slot) {
  auto ldr_literal = [](uint32_t rt, const uint8_t* pc, const void* target) {
    int64_t off = (reinterpret_cast<const uint8_t*>(target) - pc) / 4;
    return 0x58000000u | ((static_cast<uint32_t>(off) & 0x7FFFFu) << 5) | rt;
  };
  uint32_t insns[4] = {
      0xD503245Fu,                                 // bti c
      ldr_literal(1, code + 4, &slot->target),     // ldr x1, target record
      ldr_literal(16, code + 8, &slot->dispatch),  // ldr x16, KFFIJaxDispatch
      0xD61F0200u,                                 // br x16
  };
  std::memcpy(code, insns, sizeof(insns));
  std::memset(code + sizeof(insns), 0, kStubBytes - sizeof(insns));
}
constexpr bool kHaveTrampolines = true;
#else
void WriteStub(uint8_t*, const Slot*) {}
constexpr bool kHaveTrampolines = false;
#endif

class TrampolinePool {
 public:
  /// A handler address that calls KFFIJaxDispatch(frame, t). Thread safe.
  XLA_FFI_Handler* Make(const Target* t) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!kHaveTrampolines) {
      KFFI_THROW(NotImplementedError) << "kffi.jax: handler trampolines are implemented for "
                                         "x86-64 and AArch64 only";
    }
    if (code_ == nullptr || used_ == per_page_) NewPage();
    size_t i = used_++;
    slots_[i].target = t;
    slots_[i].dispatch = reinterpret_cast<void*>(&KFFIJaxDispatch);
    ++count_;
    return reinterpret_cast<XLA_FFI_Handler*>(code_ + i * kStubBytes);
  }
  size_t count() {
    std::lock_guard<std::mutex> lock(mu_);
    return count_;
  }

 private:
  void NewPage() {
    size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    void* mem = mmap(nullptr, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    KFFI_CHECK(mem != MAP_FAILED, MemoryError)
        << "kffi.jax: cannot map memory for handler trampolines (" << std::strerror(errno) << ")";
    auto* code = static_cast<uint8_t*>(mem);
    auto* slots = reinterpret_cast<Slot*>(code + page);
    size_t n = std::min(page / kStubBytes, page / sizeof(Slot));
    for (size_t i = 0; i < n; ++i) WriteStub(code + i * kStubBytes, &slots[i]);
    __builtin___clear_cache(reinterpret_cast<char*>(code), reinterpret_cast<char*>(code + page));
    if (mprotect(code, page, PROT_READ | PROT_EXEC) != 0) {
      int err = errno;
      munmap(mem, 2 * page);
      KFFI_THROW(RuntimeError) << "kffi.jax: cannot make handler trampolines executable ("
                               << std::strerror(err) << ")";
    }
    code_ = code;  // earlier pages stay mapped: their handlers are registered for good
    slots_ = slots;
    per_page_ = n;
    used_ = 0;
  }

  std::mutex mu_;
  uint8_t* code_ = nullptr;
  Slot* slots_ = nullptr;
  size_t per_page_ = 0;
  size_t used_ = 0;
  size_t count_ = 0;
};

TrampolinePool& Pool() {
  static auto* pool = new TrampolinePool();  // never destroyed: handlers outlive static teardown
  return *pool;
}

std::mutex& TargetsMutex() {
  static auto* mu = new std::mutex();
  return *mu;
}

std::deque<Target>& Targets() {
  static auto* targets = new std::deque<Target>();  // stable addresses, never freed
  return *targets;
}

// ---- Exports (called by kffi/jax/_ffi.py) -------------------------------------------------------

/// Makes a target for fn and returns its handler address. kinds/indices/names describe arg_spec
/// item by item (see SpecKind); traits is XLA_FFI_Handler_Traits.
int64_t MakeTarget(Function fn, Array<int64_t> kinds, Array<int64_t> indices, Array<String> names,
                   int64_t device_type, int64_t traits, String label) {
  KFFI_CHECK(fn.defined(), ValueError) << "kffi.jax: the function is None";
  KFFI_CHECK(kinds.size() == indices.size() && kinds.size() == names.size(), ValueError)
      << "kffi.jax: arg_spec arrays differ in length";
  Target t;
  KFFIObjectHandle h = details::ObjectUnsafe::Header(fn.get());
  t.safe_call = static_cast<const KFFIFunctionCell*>(KFFIObjectGetCellPtr(h))->safe_call;
  t.device_type = static_cast<int32_t>(device_type);
  t.traits = static_cast<uint32_t>(traits);
  t.label = std::string(label);
  for (int64_t i = 0; i < kinds.size(); ++i) {
    int64_t k = kinds[i];
    KFFI_CHECK(k >= kArgsAll && k <= kNone, ValueError) << "kffi.jax: bad arg_spec kind " << k;
    KFFI_CHECK(indices[i] >= 0 && indices[i] <= INT32_MAX, ValueError)
        << "kffi.jax: arg_spec index out of range: " << indices[i];
    int32_t index = static_cast<int32_t>(indices[i]);
    if (k == kAttr) {
      index = static_cast<int32_t>(t.attr_names.size());
      t.attr_names.emplace_back(names[i]);
    }
    t.spec.push_back(SpecItem{static_cast<int32_t>(k), index});
    if (k == kRetsAll) t.passes_all_rets = true;
    if (k == kArgsAll) {
      ++t.args_all_count;
    } else if (k == kRetsAll) {
      ++t.rets_all_count;
    } else {
      ++t.fixed_values;
    }
  }
  std::lock_guard<std::mutex> lock(TargetsMutex());
  std::deque<Target>& all = Targets();
  all.push_back(std::move(t));
  Target* stored = &all.back();
  XLA_FFI_Handler* handler;
  try {
    handler = Pool().Make(stored);
  } catch (...) {
    all.pop_back();
    throw;
  }
  KFFIObjectIncRef(h);  // the target keeps the function for good
  stored->fn = h;
  return static_cast<int64_t>(reinterpret_cast<intptr_t>(handler));
}

/// The traits a handler reports when XLA asks for its metadata (as at registration).
int64_t HandlerTraits(int64_t address) {
  XLA_FFI_Metadata md;
  std::memset(&md, 0, sizeof(md));
  md.struct_size = XLA_FFI_Metadata_STRUCT_SIZE;
  XLA_FFI_Metadata_Extension ext;
  std::memset(&ext, 0, sizeof(ext));
  ext.extension_base.struct_size = XLA_FFI_Metadata_Extension_STRUCT_SIZE;
  ext.extension_base.type = XLA_FFI_Extension_Metadata;
  ext.metadata = &md;
  XLA_FFI_CallFrame frame;
  std::memset(&frame, 0, sizeof(frame));
  frame.struct_size = XLA_FFI_CallFrame_STRUCT_SIZE;
  frame.extension_start = &ext.extension_base;
  auto* handler = reinterpret_cast<XLA_FFI_Handler*>(static_cast<intptr_t>(address));
  XLA_FFI_Error* err = handler(&frame);
  KFFI_CHECK(err == nullptr, RuntimeError) << "kffi.jax: the metadata query failed";
  KFFI_CHECK(md.api_version.major_version == XLA_FFI_API_MAJOR, RuntimeError)
      << "kffi.jax: the handler reported API version " << md.api_version.major_version;
  return md.traits;
}

/// How many targets this process made.
int64_t TargetCount() { return static_cast<int64_t>(Pool().count()); }

/// The XLA FFI API version of the headers this handler was built against: "major.minor".
String HeaderApiVersion() {
  return String(std::to_string(XLA_FFI_API_MAJOR) + "." + std::to_string(XLA_FFI_API_MINOR));
}

}  // namespace jaxffi
}  // namespace kffi

KFFI_EXPORT_DOC(make_target, kffi::jaxffi::MakeTarget, "A handler address for a kffi function.",
                "fn, kinds, indices, names, device_type, traits, label");
KFFI_EXPORT_DOC(handler_traits, kffi::jaxffi::HandlerTraits, "The XLA traits a handler reports.",
                "address");
KFFI_EXPORT_DOC(target_count, kffi::jaxffi::TargetCount, "Targets made in this process.", "");
KFFI_EXPORT_DOC(header_api_version, kffi::jaxffi::HeaderApiVersion,
                "The XLA FFI API version of the headers built against.", "");
