// tests/abi/macros_alone/object_h.cc: every public macro of <kffi/object.h>, with that header
// alone.
// SPDX-License-Identifier: Apache-2.0
#include <kffi/object.h>

namespace {

class AloneObj : public kffi::Object {
 public:
  KFFI_DECLARE_OBJECT_INFO("test.abi.Alone", AloneObj, kffi::Object)
};

class AloneFinalObj : public AloneObj {
 public:
  KFFI_DECLARE_FINAL_OBJECT_INFO("test.abi.AloneFinal", AloneFinalObj, AloneObj)
};

class Alone : public kffi::ObjectRef {
 public:
  KFFI_DEFINE_OBJECT_REF_METHODS(Alone, kffi::ObjectRef, AloneObj)
};

}  // namespace

int32_t KffiAloneTypeIndex() {
  return AloneFinalObj::RuntimeTypeIndex() + (Alone(kffi::make_object<AloneObj>()).get() ? 0 : 1);
}
