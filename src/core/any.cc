// src/core/any.cc: turning a borrowed value view into an owned value.
// SPDX-License-Identifier: Apache-2.0
#include <kffi/c_api.h>
#include <kffi/tensor.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/runtime_internal.h"

namespace {

/// The DLPack wrapper of a view tensor: owns copies of shape and strides, not the data.
struct BorrowedView {
  DLManagedTensorVersioned managed;
  std::vector<int64_t> dims;  // shape then strides
};

/// A Tensor that views the memory of a borrowed DLTensor without owning it: valid while the
/// caller's tensor is (as a TensorView would be). Bindings that know the owner of the memory
/// (e.g. the Python package) tie the two together when such a tensor reaches them. flags are
/// the argument's tensor_flags; a read-only argument gives a read-only Tensor.
KFFIAny OwnedViewOfBorrowedTensor(const DLTensor* src, uint32_t flags) {
  if (src == nullptr) kffi::details::ThrowCApiError("ValueError", "Cannot own a NULL DLTensor*");
  // Validated before anything is read past the header: ndim and the sizes come from a producer.
  kffi::details::CheckLayoutSizes(src->shape, src->strides, src->ndim, src->dtype, "DLTensor*");
  auto view = std::make_unique<BorrowedView>();
  const size_t ndim = static_cast<size_t>(src->ndim);
  view->dims.assign(src->shape, src->shape + ndim);
  if (src->strides != nullptr) {
    view->dims.insert(view->dims.end(), src->strides, src->strides + ndim);
  } else {
    kffi::StrideArray compact = kffi::StrideArray::Compact(kffi::IntArrayView(src->shape, ndim));
    view->dims.insert(view->dims.end(), compact.begin(), compact.end());
  }
  view->managed.version.major = DLPACK_MAJOR_VERSION;
  view->managed.version.minor = DLPACK_MINOR_VERSION;
  view->managed.flags = (flags & kKFFITensorFlagReadOnly) != 0 ? DLPACK_FLAG_BITMASK_READ_ONLY : 0;
  view->managed.dl_tensor = *src;
  view->managed.dl_tensor.shape = view->dims.data();
  view->managed.dl_tensor.strides = view->dims.data() + ndim;
  view->managed.manager_ctx = view.get();
  view->managed.deleter = [](DLManagedTensorVersioned* self) {
    delete static_cast<BorrowedView*>(self->manager_ctx);
  };
  KFFIObjectHandle h = nullptr;
  // From here the runtime owns the wrapper: it runs the deleter on failure too.
  DLManagedTensorVersioned* managed = &view.release()->managed;
  if (KFFITensorFromDLPackVersioned(managed, 0, 0, &h) != 0) kffi::details::ThrowRaisedError(-1);
  KFFIAny out;
  kffi::details::SetObject(&out, static_cast<KFFIObject*>(h));
  return out;
}

/// An owned Tensor value for a Tensor object argument: the object itself, or a read-only view
/// of it when the argument's tensor_flags ask for read-only and the object is not.
KFFIAny OwnedTensorArgument(const KFFIAny& view) {
  KFFIAny out;
  kffi::details::SetObject(&out, view.v_obj);
  kffi::details::HeaderIncRef(view.v_obj);
  if ((view.tensor_flags & kKFFITensorFlagReadOnly) == 0) return out;
  kffi::Tensor t(kffi::details::ObjectUnsafe::FromOwnedHandle<kffi::TensorObj>(out.v_obj));
  kffi::TypeTraits<kffi::Tensor>::MoveToAny(t.as_read_only(), &out);
  return out;
}

}  // namespace

int KFFIAnyViewToOwnedAny(const KFFIAny* any_view, KFFIAny* out) {
  KFFI_CAPI_BEGIN();
  kffi::details::CheckOutArg(any_view, "KFFIAnyViewToOwnedAny: any_view");
  kffi::details::CheckOutArg(out, "KFFIAnyViewToOwnedAny: out");
  // Built in a local and stored at the end: out may alias any_view, and on error out is left
  // untouched.
  const KFFIAny view = *any_view;
  KFFIAny result = view;
  switch (view.type_index) {
    case kKFFINone:
    case kKFFIInt:
    case kKFFIBool:
    case kKFFIFloat:
    case kKFFIOpaquePtr:
    case kKFFIDataType:
    case kKFFIDevice:
      // Plain values: the copy is the owned value, with the padding a stored value keeps (0).
      result.zero_padding = 0;
      break;
    case kKFFISmallStr:
    case kKFFISmallBytes:
      break;  // the padding word is the length
    case kKFFIRawStr:
      if (view.v_c_str == nullptr) {
        kffi::details::ThrowCApiError("ValueError",
                                      "Cannot convert a NULL const char* into an owned str");
      }
      kffi::details::MakeStringAny(view.v_c_str, std::strlen(view.v_c_str), false, &result);
      break;
    case kKFFIByteArrayPtr: {
      const KFFIByteArray* arr = static_cast<const KFFIByteArray*>(view.v_ptr);
      std::string_view bytes =
          kffi::details::ByteArrayArg(arr, "KFFIAnyViewToOwnedAny: the ByteArray* value");
      kffi::details::MakeStringAny(bytes.data(), bytes.size(), true, &result);
      break;
    }
    case kKFFIObjectRValueRef: {
      // v_ptr points at the caller's object slot; moving empties it so it is released once.
      KFFIObject** slot = static_cast<KFFIObject**>(view.v_ptr);
      KFFIObject* obj = slot != nullptr ? *slot : nullptr;
      if (obj == nullptr) {
        kffi::details::SetNone(&result);
      } else {
        *slot = nullptr;
        kffi::details::SetObject(&result, obj);
      }
      break;
    }
    case kKFFIDLTensorPtr:
      result =
          OwnedViewOfBorrowedTensor(static_cast<const DLTensor*>(view.v_ptr), view.tensor_flags);
      break;
    default:
      if (view.type_index < kKFFIStaticObjectBegin) {
        kffi::details::ThrowCApiError("TypeError", "Cannot convert a value of unknown type index " +
                                                       std::to_string(view.type_index) +
                                                       " into an owned value");
      }
      if (view.v_obj != nullptr &&
          (view.type_index == kKFFITensor ||
           (view.type_index >= kKFFIDynObjectBegin &&
            kffi::details::TypeIsSubtypeOf(view.type_index, kKFFITensor)))) {
        result = OwnedTensorArgument(view);
        break;
      }
      // Stored values keep zero_padding 0, whatever flags the argument carried.
      kffi::details::SetPOD(&result, view.type_index);
      result.v_obj = view.v_obj;
      if (view.v_obj != nullptr) kffi::details::HeaderIncRef(view.v_obj);
      break;
  }
  *out = result;
  KFFI_CAPI_END();
}
