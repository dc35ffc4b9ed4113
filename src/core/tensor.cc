// src/core/tensor.cc: the Tensor part of the C ABI: DLPack import (both forms) and export.
// SPDX-License-Identifier: Apache-2.0
#include <kffi/c_api.h>
#include <kffi/tensor.h>

#include <cstdint>
#include <exception>
#include <string>

#include "core/runtime_internal.h"

namespace {

using kffi::IntArrayView;
using kffi::TensorObj;

std::string Describe(const DLTensor& t) {
  return "shape " + kffi::KFFIToErrorString(IntArrayView(t.shape, static_cast<size_t>(t.ndim))) +
         ", strides " +
         (t.strides == nullptr
              ? std::string("NULL")
              : kffi::KFFIToErrorString(IntArrayView(t.strides, static_cast<size_t>(t.ndim))));
}

// A tensor imported from DLPack: it owns the producer's managed tensor and calls its deleter
// once, from its destructor. Shape and strides are copied into the object (strides computed when
// the producer gave NULL), so the object reads nothing of the producer's but the data.
template <typename Managed>
class DLPackTensorObj final : public TensorObj {
 public:
  DLPackTensorObj(Managed* managed, uint64_t flags) : managed_(managed) {
    const DLTensor& src = managed->dl_tensor;
    InitLayout(kffi::InplaceArrayBegin<int64_t>(this),
               IntArrayView(src.shape, static_cast<size_t>(src.ndim)), src.strides);
    data = src.data;
    device = src.device;
    dtype = src.dtype;
    byte_offset = src.byte_offset;
    dlpack_flags_ = flags;
  }
  ~DLPackTensorObj() {
    if (managed_->deleter != nullptr) managed_->deleter(managed_);
  }

 private:
  Managed* managed_;
};

// Checks what a consumer must check before trusting a DLPack tensor, plus the caller's requests.
void ValidateImport(const DLTensor& t, int32_t require_alignment, int32_t require_contiguous) {
  using kffi::details::ThrowCApiError;
  // ndim in range, a shape when ndim > 0, no negative size, and sizes, strides and bytes that
  // fit in int64: a tensor whose size overflows would have kernels read wild memory.
  kffi::details::CheckLayoutSizes(t.shape, t.strides, t.ndim, t.dtype, "DLPack tensor");
  if (require_alignment < 0) {
    ThrowCApiError("ValueError",
                   "require_alignment must be >= 0, got " + std::to_string(require_alignment));
  }
  if (require_alignment > 0) {
    uintptr_t first = reinterpret_cast<uintptr_t>(t.data) + static_cast<uintptr_t>(t.byte_offset);
    if (first % static_cast<uintptr_t>(require_alignment) != 0) {
      ThrowCApiError("ValueError", "DLPack tensor data is not aligned to " +
                                       std::to_string(require_alignment) + " bytes (data + " +
                                       "byte_offset " + std::to_string(t.byte_offset) +
                                       " leaves a remainder of " +
                                       std::to_string(first % require_alignment) + ")");
    }
  }
  if (require_contiguous != 0 && !kffi::details::IsContiguousLayout(t)) {
    ThrowCApiError("ValueError", "DLPack tensor is not contiguous: " + Describe(t));
  }
}

// The import shared by both DLPack forms. `from` is moved in: once the object exists it owns it;
// on any failure before that, the deleter runs here, so it runs exactly once either way.
// bad_major >= 0 names a DLPack major version this consumer cannot read.
template <typename Managed>
int ImportDLPack(Managed* from, uint64_t flags, int64_t bad_major, int32_t require_alignment,
                 int32_t require_contiguous, KFFIObjectHandle* out) {
  if (from == nullptr) {
    kffi::details::SetRaisedCApiError("ValueError", "Cannot import a NULL DLPack tensor");
    return -1;
  }
  bool owned = false;
  try {
    kffi::details::CheckOutArg(out, "KFFITensorFromDLPack: out");
    if (bad_major >= 0) {
      kffi::details::ThrowCApiError(
          "ValueError", "Unsupported DLPack major version " + std::to_string(bad_major) +
                            " (kffi reads DLPack " + std::to_string(DLPACK_MAJOR_VERSION) + ".x)");
    }
    ValidateImport(from->dl_tensor, require_alignment, require_contiguous);
    auto obj = kffi::make_inplace_array_object<DLPackTensorObj<Managed>, int64_t>(
        2 * static_cast<size_t>(from->dl_tensor.ndim), from, flags);
    owned = true;
    *out = kffi::details::ObjectUnsafe::MoveToHandle(std::move(obj));
    return 0;
  }
  KFFI_CATCH_ALL {
    if (!owned && from->deleter != nullptr) from->deleter(from);
    return kffi::details::HandleCApiException();
  }
}

// The DLTensor of a Tensor object argument; TypeError for anything else.
TensorObj* TensorArg(KFFIObjectHandle from, const char* what) {
  if (from == nullptr) {
    kffi::details::ThrowCApiError("ValueError", std::string(what) + ": tensor must not be NULL");
  }
  int32_t index = static_cast<KFFIObject*>(from)->type_index;
  if (index != kKFFITensor && !kffi::details::TypeIsSubtypeOf(index, kKFFITensor)) {
    kffi::details::ThrowCApiError("TypeError", std::string(what) + ": expected a Tensor, got " +
                                                   kffi::details::TypeKeyForMessage(index));
  }
  return static_cast<TensorObj*>(static_cast<kffi::Object*>(from));
}

// An exported tensor holds one strong reference in manager_ctx, dropped by the deleter.
template <typename Managed>
void ExportDeleter(Managed* self) {
  if (self == nullptr) return;
  kffi::details::HeaderDecRef(static_cast<KFFIObject*>(self->manager_ctx));
  delete self;
}

template <typename Managed>
Managed* Export(KFFIObjectHandle from, const char* what) {
  TensorObj* obj = TensorArg(from, what);
  Managed* out = new Managed();
  out->dl_tensor = *static_cast<const DLTensor*>(obj);
  out->manager_ctx = from;
  out->deleter = &ExportDeleter<Managed>;
  kffi::details::HeaderIncRef(static_cast<KFFIObject*>(from));
  return out;
}

}  // namespace

int KFFITensorFromDLPack(DLManagedTensor* from, int32_t require_alignment,
                         int32_t require_contiguous, KFFIObjectHandle* out) {
  return ImportDLPack(from, 0, -1, require_alignment, require_contiguous, out);
}

int KFFITensorFromDLPackVersioned(DLManagedTensorVersioned* from, int32_t require_alignment,
                                  int32_t require_contiguous, KFFIObjectHandle* out) {
  // Only version and deleter are at fixed places across major versions, so a tensor of an
  // unknown major version is released without reading anything else.
  bool version_ok = from == nullptr || from->version.major == DLPACK_MAJOR_VERSION;
  uint64_t flags = (from != nullptr && version_ok) ? from->flags : 0;
  int64_t bad_major = version_ok ? -1 : static_cast<int64_t>(from->version.major);
  return ImportDLPack(from, flags, bad_major, require_alignment, require_contiguous, out);
}

int KFFITensorToDLPack(KFFIObjectHandle from, DLManagedTensor** out) {
  KFFI_CAPI_BEGIN();
  kffi::details::CheckOutArg(out, "KFFITensorToDLPack: out");
  *out = Export<DLManagedTensor>(from, "KFFITensorToDLPack");
  KFFI_CAPI_END();
}

int KFFITensorToDLPackVersioned(KFFIObjectHandle from, DLManagedTensorVersioned** out) {
  KFFI_CAPI_BEGIN();
  kffi::details::CheckOutArg(out, "KFFITensorToDLPackVersioned: out");
  DLManagedTensorVersioned* managed =
      Export<DLManagedTensorVersioned>(from, "KFFITensorToDLPackVersioned");
  managed->version.major = DLPACK_MAJOR_VERSION;
  managed->version.minor = DLPACK_MINOR_VERSION;
  // Read-only travels on; IS_COPIED does not: the consumer shares the data with this tensor.
  managed->flags = static_cast<const TensorObj*>(static_cast<kffi::Object*>(from))->dlpack_flags() &
                   DLPACK_FLAG_BITMASK_READ_ONLY;
  *out = managed;
  KFFI_CAPI_END();
}

int KFFITensorGetFlags(KFFIObjectHandle tensor, uint64_t* out_flags) {
  KFFI_CAPI_BEGIN();
  kffi::details::CheckOutArg(out_flags, "KFFITensorGetFlags: out_flags");
  *out_flags = TensorArg(tensor, "KFFITensorGetFlags")->dlpack_flags();
  KFFI_CAPI_END();
}

// The cold errors of a kernel's tensor accessors (kffi/tensor.h, kffi/tensor_layout.h): their
// messages are put together here, so that a kernel's build compiles no formatting code.

void KFFIErrorSetRaisedDataTypeMismatch(const DLDataType* expected, const DLDataType* received) {
  using kffi::details::SetRaisedCApiError;
  if (expected == nullptr || received == nullptr) {
    SetRaisedCApiError("ValueError",
                       expected == nullptr
                           ? "KFFIErrorSetRaisedDataTypeMismatch: expected must not be NULL"
                           : "KFFIErrorSetRaisedDataTypeMismatch: received must not be NULL");
    return;
  }
  try {
    const std::string want = kffi::details::FormatDataType(*expected);
    const std::string subject = "data<" + want + ">()";
    const std::string expected_text = "a tensor of " + want;
    const std::string received_text = "a tensor of " + kffi::details::FormatDataType(*received);
    KFFIErrorSetRaisedArgument("TypeError", subject.c_str(), expected_text.c_str(),
                               received_text.c_str(), nullptr, -1, nullptr);
  }
  KFFI_CATCH_ALL { SetRaisedCApiError("MemoryError", "out of memory while raising an error"); }
}

void KFFIErrorSetRaisedShapeTooLarge(const char* what, const int64_t* shape, int32_t ndim,
                                     const char* why) {
  using kffi::details::SetRaisedCApiError;
  try {
    if (ndim < 0) {
      SetRaisedCApiError("ValueError", "KFFIErrorSetRaisedShapeTooLarge: ndim must be >= 0, got " +
                                           std::to_string(ndim));
      return;
    }
    if (shape == nullptr && ndim > 0) {
      SetRaisedCApiError("ValueError",
                         "KFFIErrorSetRaisedShapeTooLarge: shape must not be NULL when ndim is "
                         "not 0");
      return;
    }
    const std::string dims =
        kffi::KFFIToErrorString(IntArrayView(shape, static_cast<size_t>(ndim)));
    SetRaisedCApiError("ValueError", std::string(what != nullptr ? what : "Tensor") + ": shape " +
                                         dims + " is too large: " + (why != nullptr ? why : ""));
  }
  KFFI_CATCH_ALL { SetRaisedCApiError("MemoryError", "out of memory while raising an error"); }
}
