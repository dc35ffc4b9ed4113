// src/tvm_bridge/shim_values.cc: the TVM-FFI C functions for values whose spelling or layout is
// TVM-FFI's own: tensor views, big integers, the object allocator, backtraces and dtype strings.
//
// shim.cc forwards the functions whose meaning is the same in both runtimes; these are where
// TVM-FFI's headers expect something kffi's C API does not say the same way (a BigInt object's
// layout, a view whose data pointer already holds its offset, a backtrace that ends each frame
// with a newline, the empty name of the void dtype).
// SPDX-License-Identifier: Apache-2.0
#include <kffi/error.h>
#include <kffi/function.h>
#include <kffi/tensor.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "tvm_bridge/bridge_internal.h"

namespace {

// TVM-FFI's BigInt (static type index 78): the header, the number of 64-bit words, then the
// words, least significant first, in two's complement and minimal (no redundant sign word).
// Values that fit int64 are never BigInt objects: they travel as plain ints.
using kffi::tvmglue::kTvmBigIntIndex;

class BigIntObj final : public kffi::Object {
 public:
  KFFI_DECLARE_STATIC_OBJECT_INFO("ffi.BigInt", BigIntObj, kffi::Object, kTvmBigIntIndex, true)
  explicit BigIntObj(size_t size) : size_(size) {}
  int64_t* words() { return kffi::InplaceArrayBegin<int64_t>(this); }

 private:
  size_t size_;
};
static_assert(sizeof(BigIntObj) == sizeof(KFFIObject) + sizeof(size_t),
              "TVM-FFI's BigInt cell is one size_t after the header");

// The number of words left once redundant sign-extension words are dropped from the top.
size_t MinimalWords(const int64_t* words, size_t size) {
  while (size > 1) {
    int64_t top = words[size - 1];
    bool next_negative = words[size - 2] < 0;
    if ((top == 0 && !next_negative) || (top == -1 && next_negative)) {
      --size;
    } else {
      break;
    }
  }
  return size;
}

// TVM-FFI's object allocator interface (TVMFFICustomAllocator) and the header it puts before
// each object body (TVMFFIObjectAllocHeader), by layout.
struct TvmObjectAllocHeader {
  void (*delete_space)(void* ptr);
};
struct TvmCustomAllocator {
  void* (*allocate)(size_t size, size_t alignment, int32_t type_index, void* context);
  void* context;
};

// The builtin allocator TVMFFIGetCustomAllocator reports: [raw pointer][header][body], the body
// aligned as asked; delete_space frees the whole block. kffi's own objects do not come from it.
void BuiltinDeleteSpace(void* body) {
  void* raw = nullptr;
  std::memcpy(&raw, static_cast<char*>(body) - 2 * sizeof(void*), sizeof(raw));
  std::free(raw);
}
void* BuiltinAllocate(size_t size, size_t alignment, int32_t /*type_index*/, void* /*context*/) {
  if (alignment < alignof(std::max_align_t)) alignment = alignof(std::max_align_t);
  if ((alignment & (alignment - 1)) != 0) {
    KFFIErrorSetRaisedFromCStr("ValueError", "TVMFFICustomAllocator: alignment not a power of 2");
    return nullptr;
  }
  constexpr size_t kPrefix = sizeof(void*) + sizeof(TvmObjectAllocHeader);
  size_t offset = (kPrefix + alignment - 1) / alignment * alignment;
  size_t total = 0;
  if (__builtin_add_overflow(size, offset + alignment, &total)) {
    KFFIErrorSetRaisedFromCStr("MemoryError", "TVMFFICustomAllocator: size overflows");
    return nullptr;
  }
  void* raw = std::malloc(total);
  if (raw == nullptr) {
    KFFIErrorSetRaisedFromCStr("MemoryError", "TVMFFICustomAllocator: out of memory");
    return nullptr;
  }
  uintptr_t start = reinterpret_cast<uintptr_t>(raw) + kPrefix;
  char* body = reinterpret_cast<char*>((start + alignment - 1) / alignment * alignment);
  std::memcpy(body - 2 * sizeof(void*), &raw, sizeof(raw));
  TvmObjectAllocHeader header{&BuiltinDeleteSpace};
  std::memcpy(body - sizeof(TvmObjectAllocHeader), &header, sizeof(header));
  return body;
}
TvmCustomAllocator kBuiltinAllocator{&BuiltinAllocate, nullptr};

// A backtrace frame in TVM-FFI's form: each frame ends with a newline (its error printer splits
// on them, and drops a last frame without one).
struct BacktraceBuffer {
  std::string text;
  KFFIByteArray view{nullptr, 0};
};

}  // namespace

#define SHIM extern "C" __attribute__((visibility("default")))

// A view of source's memory with the prototype's layout, holding source alive. TVM-FFI's inline
// Tensor::as_strided folds the offset into the prototype's data pointer on devices that address
// memory directly, so the view takes data, byte_offset, dtype and device from the prototype as
// given, and copies its shape and strides (compact strides when it has none).
SHIM int TVMFFITensorCreateUnsafeView(KFFIObjectHandle source, const DLTensor* prototype,
                                      KFFIObjectHandle* out) {
  try {
    KFFI_CHECK(source != nullptr && prototype != nullptr && out != nullptr, ValueError)
        << "TVMFFITensorCreateUnsafeView: source, prototype and out must not be NULL";
    KFFI_CHECK(static_cast<KFFIObject*>(source)->type_index == kKFFITensor, TypeError)
        << "TVMFFITensorCreateUnsafeView: the source is not a Tensor";
    KFFI_CHECK(prototype->ndim >= 0 && (prototype->ndim == 0 || prototype->shape != nullptr),
               ValueError)
        << "TVMFFITensorCreateUnsafeView: the prototype has no shape";
    size_t ndim = static_cast<size_t>(prototype->ndim);
    kffi::IntArrayView shape(prototype->shape, ndim);
    std::vector<int64_t> compact;
    if (prototype->strides == nullptr) {
      compact.assign(ndim, 1);
      for (size_t i = ndim; i > 1; --i) {
        // Overflow is caught where the layout is checked (as_strided); saturate meanwhile.
        int64_t next = 0;
        compact[i - 2] =
            __builtin_mul_overflow(compact[i - 1], shape[i - 1], &next) ? INT64_MAX : next;
      }
    }
    kffi::IntArrayView strides(prototype->strides != nullptr ? prototype->strides : compact.data(),
                               ndim);
    kffi::Tensor src(kffi::details::ObjectUnsafe::FromBorrowedHandle<kffi::TensorObj>(source));
    kffi::Tensor view = src.as_strided(shape, strides, prototype->byte_offset);
    DLTensor* t = const_cast<DLTensor*>(view.GetDLTensorPtr());
    t->data = prototype->data;
    t->dtype = prototype->dtype;
    t->device = prototype->device;
    *out = kffi::details::ObjectUnsafe::MoveToHandle(
        std::move(kffi::details::ObjectUnsafe::RefData(view)));
    return 0;
  }
  KFFI_CATCH_ALL { return kffi::tvmglue::RaiseCurrentException(); }
}

// An integer from its 64-bit words (least significant first, two's complement): a plain int
// when it fits int64, else a BigInt object with the minimal words.
SHIM int TVMFFIBigIntFromByteArray(const KFFIByteArray* input, KFFIAny* out) {
  try {
    KFFI_CHECK(input != nullptr && out != nullptr, ValueError)
        << "TVMFFIBigIntFromByteArray: input and out must not be NULL";
    KFFI_CHECK(input->size % sizeof(int64_t) == 0, ValueError)
        << "BigInt content must contain whole 64-bit words (got " << input->size << " bytes)";
    KFFI_CHECK(input->data != nullptr || input->size == 0, ValueError)
        << "TVMFFIBigIntFromByteArray: the content is NULL";
    size_t size = input->size / sizeof(int64_t);
    std::vector<int64_t> words(size);
    if (size != 0) std::memcpy(words.data(), input->data, input->size);
    size = MinimalWords(words.data(), size);
    KFFIAny result{};
    if (size <= 1) {
      result.type_index = kKFFIInt;
      result.v_int64 = size == 0 ? 0 : words[0];
    } else {
      auto obj = kffi::make_inplace_array_object<BigIntObj, int64_t>(size, size);
      std::memcpy(obj->words(), words.data(), size * sizeof(int64_t));
      result.type_index = kTvmBigIntIndex;
      result.v_obj = static_cast<KFFIObject*>(
          kffi::details::ObjectUnsafe::MoveToHandle(kffi::ObjectPtr<kffi::Object>(std::move(obj))));
    }
    *out = result;
    return 0;
  }
  KFFI_CATCH_ALL { return kffi::tvmglue::RaiseCurrentException(); }
}

// The words of an int (the value's own 8 bytes) or of a BigInt object (borrowed from it). Any
// other value has no words: an empty array.
SHIM KFFIByteArray TVMFFIBigIntGetContentByteArray(const KFFIAny* value) {
  if (value == nullptr) return KFFIByteArray{nullptr, 0};
  if (value->type_index == kKFFIInt) {
    return KFFIByteArray{reinterpret_cast<const char*>(&value->v_int64), sizeof(int64_t)};
  }
  if (value->type_index == kTvmBigIntIndex && value->v_obj != nullptr) {
    const char* cell = reinterpret_cast<const char*>(value->v_obj) + sizeof(KFFIObject);
    size_t size = 0;
    std::memcpy(&size, cell, sizeof(size));
    return KFFIByteArray{cell + sizeof(size_t), size * sizeof(int64_t)};
  }
  return KFFIByteArray{nullptr, 0};
}

namespace {

// The words of a BigInt object (minimal, so equal values have equal words).
std::string_view BigIntWords(const kffi::Any& v) {
  const KFFIAny* raw = kffi::details::AnyUnsafe::Raw(v);
  KFFI_CHECK(raw->type_index == kTvmBigIntIndex, TypeError)
      << "expected ffi.BigInt, got " << v.GetTypeKey();
  KFFIByteArray words = TVMFFIBigIntGetContentByteArray(raw);
  return std::string_view(words.data, words.size);
}

// apache-tvm-ffi's runtime registers ffi.BigInt (a static type) and how TVM-FFI's containers hash
// and compare it (the `__any_hash__` / `__any_equal__` columns its inline AnyHash and AnyEqual
// read). Here when the shim loads: an object its headers make inline must find its type.
[[maybe_unused]] const bool kBigIntRegistered = [] {
  const char key[] = "ffi.BigInt";
  KFFIByteArray name{key, sizeof(key) - 1};
  int32_t index = -1;
  if (KFFITypeGetOrAllocIndex(&name, kTvmBigIntIndex, 1, kKFFIObject, &index) != 0) {
    KFFIObjectHandle err = nullptr;
    KFFIErrorMoveFromRaised(&err);
    if (err != nullptr) KFFIObjectDecRef(err);
    return false;
  }
  return true;
}();

}  // namespace

namespace kffi {
namespace tvmglue {

void RuntimeTypeAttrs(std::vector<RuntimeTypeAttr>* out) {
  Function hash = Function::FromTyped([](Any v) -> int64_t {
    return static_cast<int64_t>(std::hash<std::string_view>()(BigIntWords(v)));
  });
  Function equal =
      Function::FromTyped([](Any a, Any b) { return BigIntWords(a) == BigIntWords(b); });
  auto owned = [](const Function& f) {
    KFFIAny v{};
    v.type_index = kKFFIFunction;
    v.v_obj = static_cast<KFFIObject*>(const_cast<void*>(static_cast<const void*>(f.get())));
    KFFIObjectIncRef(v.v_obj);
    return v;
  };
  out->push_back({kTvmBigIntIndex, "__any_hash__", owned(hash)});
  out->push_back({kTvmBigIntIndex, "__any_equal__", owned(equal)});
}

}  // namespace tvmglue
}  // namespace kffi

SHIM TvmCustomAllocator* TVMFFIGetCustomAllocator(void) { return &kBuiltinAllocator; }

// kffi's runtime allocates its objects itself, so an allocator cannot be put in front of it
// (a frontend doing so would expect every object to carry its header): refused, where NULL
// (restore the builtin) and the builtin itself are accepted.
SHIM int TVMFFISetCustomAllocator(TvmCustomAllocator* allocator) {
  if (allocator == nullptr || allocator == &kBuiltinAllocator) return 0;
  KFFIErrorSetRaisedFromCStr(
      "RuntimeError",
      "TVMFFISetCustomAllocator: kffi's TVM-FFI runtime allocates objects itself and takes no "
      "custom allocator; load apache-tvm-ffi's libtvm_ffi for a frontend that installs one");
  return -1;
}

SHIM const KFFIByteArray* TVMFFIBacktrace(const char* filename, int lineno, const char* func,
                                          int cross_ffi_boundary) {
  thread_local BacktraceBuffer buffer;
  const KFFIByteArray* frame = KFFIBacktrace(filename, lineno, func, cross_ffi_boundary);
  try {
    buffer.text.assign(frame->data, frame->size);
    if (!buffer.text.empty() && buffer.text.back() != '\n') buffer.text += '\n';
  }
  KFFI_CATCH_ALL { return frame; }
  buffer.view = KFFIByteArray{buffer.text.data(), buffer.text.size()};
  return &buffer.view;
}

// TVM-FFI names the void dtype (opaque handle, 0 bits, 0 lanes) with an empty string, where
// kffi says "void"; both parse "void".
SHIM int TVMFFIDataTypeToString(const DLDataType* dtype, KFFIAny* out) {
  if (dtype != nullptr && out != nullptr && dtype->code == kDLOpaqueHandle && dtype->bits == 0 &&
      dtype->lanes == 0) {
    KFFIByteArray empty{"", 0};
    return KFFIStringFromByteArray(&empty, out);
  }
  return KFFIDataTypeToString(dtype, out);
}

#undef SHIM
