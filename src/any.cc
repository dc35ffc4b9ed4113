// src/any.cc: turning a borrowed value view into an owned value.
#include <kffi/c_api.h>

#include <cstring>
#include <string>

#include "runtime_internal.h"

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
      kffi::details::ThrowCApiError(
          "TypeError",
          "Cannot convert a borrowed DLTensor* into an owned value; pass a Tensor object");
    default:
      if (view.type_index < kKFFIStaticObjectBegin) {
        kffi::details::ThrowCApiError(
            "TypeError", "Cannot convert a value of unknown type index " +
                             std::to_string(view.type_index) + " into an owned value");
      }
      if (view.v_obj != nullptr) kffi::details::RuntimeIncRef(view.v_obj);
      break;
  }
  *out = result;
  KFFI_CAPI_END();
}
