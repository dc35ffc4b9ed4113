// python/kffi/jax/_xla_handler.cc: the XLA FFI handler that runs kffi functions as XLA targets.
//
// Per call, KFFIJaxDispatch turns XLA's buffers into DLTensor views on the stack (no copy; the dims
// XLA owns, row-major strides), attributes into kffi values, and calls the function's safe_call
// with XLA's stream as the environment stream and an allocator that hands out XLA's result
// buffers. Each target reaches it through its own trampoline (_xla_targets.cc).
// SPDX-License-Identifier: Apache-2.0
#include "_xla_handler.h"

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

namespace kffi {
namespace jaxglue {

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

/// The error the function raised, as "Kind: message (in kffi.jax target `label`)" in an XLA error
/// of a matching code. The target is named because one program calls many kernels, and in a
/// multi-process program the failing one may run in one process only.
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
  std::string msg = kind + ": " + std::string(cell->message.data, cell->message.size) +
                    " (in kffi.jax target `" + t->label + "`)";
  KFFIObjectDecRef(err);
  return MakeError(api, CodeOfKind(kind), msg);
}

// ---- Metadata (traits and API version, asked by XLA at registration) ----------------------------

/// Fills what XLA asks of a handler: its traits, and the XLA FFI API version it was written for.
///
/// One binary serves every jaxlib, so the version is the runtime's own, read from its table:
/// layouts only grow within a major version, and every 0.x from KFFI_XLA_FFI_MIN_MINOR on lays
/// out what the handler uses as _xla_ffi.h declares it. The runtime's own version is the one every
/// XLA accepts: releases of API 0.1 (jaxlib 0.4.33 to 0.7) accept only a handler of exactly their
/// version, later ones any version from 0.1 to theirs. Those 0.1 releases ask without passing
/// their table (api is null): the answer is then 0.1. A table of another major version may be laid
/// out differently, so nothing in it is called: the handler reports the version it was written
/// for, and XLA's own check refuses it (its message names both versions) unless that XLA still
/// serves 0.x handlers.
XLA_FFI_Error* FillMetadata(const XLA_FFI_Api* api, XLA_FFI_Metadata_Extension* ext,
                            const Target* t) {
  if (ext->extension_base.struct_size < XLA_FFI_Metadata_Extension_STRUCT_SIZE ||
      ext->metadata == nullptr || ext->metadata->struct_size < XLA_FFI_Metadata_STRUCT_SIZE) {
    if (api == nullptr || api->api_version.major_version != KFFI_XLA_FFI_MAJOR) return nullptr;
    return MakeError(api, XLA_FFI_Error_Code_INVALID_ARGUMENT,
                     "kffi.jax handler: XLA asked for metadata in a struct smaller than "
                     "XLA_FFI_Metadata (XLA FFI API " +
                         std::to_string(api->api_version.major_version) + "." +
                         std::to_string(api->api_version.minor_version) + ")");
  }
  int major = KFFI_XLA_FFI_MAJOR;
  int minor = KFFI_XLA_FFI_MIN_MINOR;
  if (api != nullptr && api->api_version.major_version == KFFI_XLA_FFI_MAJOR) {
    minor = api->api_version.minor_version;
    if (minor < KFFI_XLA_FFI_MIN_MINOR) {
      return MakeError(api, XLA_FFI_Error_Code_FAILED_PRECONDITION,
                       "kffi.jax handler: this jaxlib's XLA FFI API is " + std::to_string(major) +
                           "." + std::to_string(minor) + "; kffi's handler needs API " +
                           std::to_string(KFFI_XLA_FFI_MAJOR) + "." +
                           std::to_string(KFFI_XLA_FFI_MIN_MINOR) +
                           " or a later minor version (a newer jaxlib)");
    }
  }
  XLA_FFI_Metadata* md = ext->metadata;
  md->api_version.struct_size = XLA_FFI_Api_Version_STRUCT_SIZE;
  md->api_version.extension_start = nullptr;
  md->api_version.major_version = major;
  md->api_version.minor_version = minor;
  md->traits = t->traits;
  return nullptr;
}

// ---- Buffers ------------------------------------------------------------------------------------

/// XLA's element types as DLPack dtypes (those DLPack cannot say, e.g. tokens, are absent).
const DTypeTable kDTypes;

DTypeTable::DTypeTable() {
  static const struct {
    XLA_FFI_DataType xla;
    DLDataType dl;
  } kPairs[] = {
      {XLA_FFI_DataType_PRED, {kDLBool, 8, 1}},
      {XLA_FFI_DataType_S1, {kDLInt, 1, 1}},
      {XLA_FFI_DataType_S2, {kDLInt, 2, 1}},
      {XLA_FFI_DataType_S4, {kDLInt, 4, 1}},
      {XLA_FFI_DataType_S8, {kDLInt, 8, 1}},
      {XLA_FFI_DataType_S16, {kDLInt, 16, 1}},
      {XLA_FFI_DataType_S32, {kDLInt, 32, 1}},
      {XLA_FFI_DataType_S64, {kDLInt, 64, 1}},
      {XLA_FFI_DataType_U1, {kDLUInt, 1, 1}},
      {XLA_FFI_DataType_U2, {kDLUInt, 2, 1}},
      {XLA_FFI_DataType_U4, {kDLUInt, 4, 1}},
      {XLA_FFI_DataType_U8, {kDLUInt, 8, 1}},
      {XLA_FFI_DataType_U16, {kDLUInt, 16, 1}},
      {XLA_FFI_DataType_U32, {kDLUInt, 32, 1}},
      {XLA_FFI_DataType_U64, {kDLUInt, 64, 1}},
      {XLA_FFI_DataType_F16, {kDLFloat, 16, 1}},
      {XLA_FFI_DataType_F32, {kDLFloat, 32, 1}},
      {XLA_FFI_DataType_F64, {kDLFloat, 64, 1}},
      {XLA_FFI_DataType_BF16, {kDLBfloat, 16, 1}},
      {XLA_FFI_DataType_C64, {kDLComplex, 64, 1}},
      {XLA_FFI_DataType_C128, {kDLComplex, 128, 1}},
      {XLA_FFI_DataType_F8E5M2, {kDLFloat8_e5m2, 8, 1}},
      {XLA_FFI_DataType_F8E3M4, {kDLFloat8_e3m4, 8, 1}},
      {XLA_FFI_DataType_F8E4M3, {kDLFloat8_e4m3, 8, 1}},
      {XLA_FFI_DataType_F8E4M3FN, {kDLFloat8_e4m3fn, 8, 1}},
      {XLA_FFI_DataType_F8E4M3B11FNUZ, {kDLFloat8_e4m3b11fnuz, 8, 1}},
      {XLA_FFI_DataType_F8E5M2FNUZ, {kDLFloat8_e5m2fnuz, 8, 1}},
      {XLA_FFI_DataType_F8E4M3FNUZ, {kDLFloat8_e4m3fnuz, 8, 1}},
      {XLA_FFI_DataType_F4E2M1FN, {kDLFloat4_e2m1fn, 4, 1}},
      {XLA_FFI_DataType_F8E8M0FNU, {kDLFloat8_e8m0fnu, 8, 1}},
  };
  for (DLDataType& e : entries) e = DLDataType{kDLOpaqueHandle, 0, 0};
  for (const auto& p : kPairs) entries[static_cast<int>(p.xla)] = p.dl;
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

/// Builds record rec's object from its attributes into *out (kept by keep), or an error naming
/// the field (`cfg.alpha`).
XLA_FFI_Error* BuildRecord(const XLA_FFI_Api* api, const Target* t, const RecordTarget& rec,
                           const XLA_FFI_Attrs& attrs, Keep* keep, KFFIAny* out) {
  KFFIObjectHandle h = nullptr;
  if (rec.creator(&h) != 0) return ErrorFromRaised(api, t);
  KFFIAny raw;
  raw.type_index = static_cast<KFFIObject*>(h)->type_index;
  raw.zero_padding = 0;
  raw.v_obj = static_cast<KFFIObject*>(h);
  *out = keep->Add(details::AnyUnsafe::FromOwnedRaw(raw));  // keep owns h from here
  for (const RecordField& rf : rec.fields) {
    int64_t i = FindAttr(attrs, rf.attr);
    if (KFFI_UNLIKELY(i < 0)) {
      return MakeError(api, XLA_FFI_Error_Code_INVALID_ARGUMENT,
                       "KeyError: kffi.jax target `" + t->label + "`: " + rf.label +
                           ": attribute '" + rf.attr +
                           "' is not given (attributes: " + AttrNames(attrs) + ")");
    }
    KFFIAny v;
    std::string why;
    if (KFFI_UNLIKELY(!AttrToAny(attrs, i, &v, keep, &why))) {
      return MakeError(api, XLA_FFI_Error_Code_INVALID_ARGUMENT,
                       "TypeError: kffi.jax target `" + t->label + "`: " + rf.label + ": " + why);
    }
    if (KFFI_UNLIKELY(rf.field->setter(static_cast<char*>(h) + rf.field->offset, &v) != 0)) {
      std::string kind = "TypeError", msg = "cannot be assigned";
      details::TakeRaisedKindMessage(&kind, &msg);
      return MakeError(api, CodeOfKind(kind), kind + ": " + rf.label + ": " + msg);
    }
  }
  return nullptr;
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
    if (KFFI_UNLIKELY(!HasDeviceOrdinalGet(api))) {
      return TargetError(api, XLA_FFI_Error_Code_UNIMPLEMENTED, "RuntimeError", t,
                         "this jaxlib's XLA FFI cannot tell which device a call runs on "
                         "(XLA_FFI_DeviceOrdinal_Get is missing); GPU targets need jaxlib 0.6 "
                         "or later");
    }
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
      case kRecord: {
        KFFIAny& a = values[v++];
        if (XLA_FFI_Error* e = BuildRecord(api, t, t->records[static_cast<size_t>(s.index)],
                                           frame->attrs, &keep, &a)) {
          return e;
        }
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

}  // namespace jaxglue
}  // namespace kffi

extern "C" XLA_FFI_Error* KFFIJaxDispatch(XLA_FFI_CallFrame* frame,
                                          const kffi::jaxglue::Target* t) {
  using kffi::jaxglue::Execute;
  using kffi::jaxglue::FillMetadata;
  using kffi::jaxglue::MakeError;
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
