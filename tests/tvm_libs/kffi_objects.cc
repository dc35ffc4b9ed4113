// tests/tvm_libs/kffi_objects.cc: a kffi kernel library (built with kffi's headers, not TVM-FFI's)
// whose objects are of types registered in kffi's registry, for the object sweep of
// tests/python/kffi_tvm/test_tvm_objects.py: objects of every origin side by side with those of
// TVM-FFI libraries, including kffi types whose dynamic indices apache-tvm-ffi also gave its own
// types.
// SPDX-License-Identifier: Apache-2.0
#include <kffi/export.h>

#include <cstdint>
#include <string>

namespace {

class TaggedObj : public kffi::Object {
 public:
  KFFI_DECLARE_OBJECT_INFO("kffi_objects.Tagged", TaggedObj, kffi::Object)
  explicit TaggedObj(int64_t v) : value(v) {}
  int64_t value;
};

/// An object of kffi's type kffi_objects.Tagged.
kffi::ObjectRef MakeTagged(int64_t value) {
  return kffi::ObjectRef(kffi::make_object<TaggedObj>(value));
}

/// Registers the types kffi_objects.T0 ... T<n-1> (children of Object) in kffi's registry, so
/// that kffi's dynamic indices reach those apache-tvm-ffi gave its own types; returns the index of
/// T<n-1>.
int64_t RegisterTypes(int64_t n) {
  int32_t index = -1;
  for (int64_t i = 0; i < n; ++i) {
    std::string key = "kffi_objects.T" + std::to_string(i);
    KFFIByteArray k{key.data(), key.size()};
    if (KFFITypeGetOrAllocIndex(&k, -1, 1, kKFFIObject, &index) != 0) {
      kffi::details::ThrowRaisedError(-1);
    }
  }
  return index;
}

/// An object of the registered kffi type at type_index (a plain Object cell: the T<i> types
/// declare no fields).
kffi::ObjectRef MakeOfType(int64_t type_index) {
  const KFFITypeInfo* info = KFFIGetTypeInfo(static_cast<int32_t>(type_index));
  KFFI_CHECK(info != nullptr && info->type_depth == 1, ValueError)
      << "make_of_type: no kffi type of depth 1 at index " << type_index;
  kffi::ObjectPtr<TaggedObj> obj = kffi::make_object<TaggedObj>(type_index);
  kffi::details::ObjectUnsafe::Header(obj.get())->type_index = static_cast<int32_t>(type_index);
  return kffi::ObjectRef(std::move(obj));
}

/// An object whose type index no registry holds (how an object of a runtime kffi cannot ask looks
/// to kffi): its type must read as a placeholder, never crash.
kffi::ObjectRef MakeUnregistered(int64_t type_index) {
  KFFI_CHECK(KFFIGetTypeInfo(static_cast<int32_t>(type_index)) == nullptr, ValueError)
      << "make_unregistered: index " << type_index << " is registered";
  kffi::ObjectPtr<TaggedObj> obj = kffi::make_object<TaggedObj>(type_index);
  kffi::details::ObjectUnsafe::Header(obj.get())->type_index = static_cast<int32_t>(type_index);
  return kffi::ObjectRef(std::move(obj));
}

}  // namespace

KFFI_EXPORT(make_tagged, MakeTagged);
KFFI_EXPORT(make_unregistered, MakeUnregistered);
KFFI_EXPORT(register_types, RegisterTypes);
KFFI_EXPORT(make_of_type, MakeOfType);
