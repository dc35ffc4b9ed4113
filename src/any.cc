// src/any.cc: turning a borrowed value view into an owned value.
#include <kffi/c_api.h>

#include <cstring>
#include <string>
#include <vector>

#include "runtime_internal.h"

namespace {

/// The DLPack wrapper of a view tensor: owns copies of shape and strides, not the data.
struct BorrowedView {
  DLManagedTensor managed;
  std::vector<int64_t> dims;  // shape then strides
};

/// A Tensor that views the memory of a borrowed DLTensor without owning it: valid while the
/// caller's tensor is (as a TensorView would be). Bindings that know the owner of the memory
/// (e.g. the Python package) tie the two together when such a tensor reaches them.
KFFIAny OwnedViewOfBorrowedTensor(const DLTensor* src) {
  if (src == nullptr) kffi::details::ThrowCApiError("ValueError", "Cannot own a NULL DLTensor*");
  auto* view = new BorrowedView();
  int ndim = src->ndim;
  view->dims.resize(static_cast<size_t>(ndim) * 2);
  int64_t stride = 1;
  for (int i = ndim - 1; i >= 0; --i) {
    view->dims[static_cast<size_t>(i)] = src->shape[i];
    view->dims[static_cast<size_t>(ndim + i)] = src->strides ? src->strides[i] : stride;
    stride *= src->shape[i];
  }
  view->managed.dl_tensor = *src;
  view->managed.dl_tensor.shape = view->dims.data();
  view->managed.dl_tensor.strides = view->dims.data() + ndim;
  view->managed.manager_ctx = view;
  view->managed.deleter = [](DLManagedTensor* self) {
    delete static_cast<BorrowedView*>(self->manager_ctx);
  };
  KFFIObjectHandle h = nullptr;
  if (KFFITensorFromDLPack(&view->managed, 0, 0, &h) != 0) {
    // The runtime ran the deleter; report what it raised.
    KFFIObjectHandle err = nullptr;
    KFFIErrorMoveFromRaised(&err);
    std::string kind = "RuntimeError", message = "cannot view a borrowed DLTensor*";
    if (err != nullptr) {
      KFFIErrorCell* cell = KFFIErrorGetCellPtr(err);
      kind.assign(cell->kind.data, cell->kind.size);
      message.assign(cell->message.data, cell->message.size);
      KFFIObjectDecRef(err);
    }
    kffi::details::ThrowCApiError(kind, message);
  }
  KFFIAny out;
  out.type_index = kKFFITensor;
  out.zero_padding = 0;
  out.v_obj = static_cast<KFFIObject*>(h);
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
    case kKFFISmallStr:
    case kKFFISmallBytes:
      break;  // plain values: the copy is the owned value
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
        result.type_index = kKFFINone;
        result.zero_padding = 0;
        result.v_int64 = 0;
      } else {
        *slot = nullptr;
        result.type_index = obj->type_index;
        result.zero_padding = 0;
        result.v_obj = obj;
      }
      break;
    }
    case kKFFIDLTensorPtr:
      result = OwnedViewOfBorrowedTensor(static_cast<const DLTensor*>(view.v_ptr));
      break;
    default:
      if (view.type_index < kKFFIStaticObjectBegin) {
        kffi::details::ThrowCApiError("TypeError", "Cannot convert a value of unknown type index " +
                                                       std::to_string(view.type_index) +
                                                       " into an owned value");
      }
      if (view.v_obj != nullptr) kffi::details::RuntimeIncRef(view.v_obj);
      break;
  }
  *out = result;
  KFFI_CAPI_END();
}
