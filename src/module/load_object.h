// src/module/load_object.h: what module.cc needs to know of KFFIModuleLoadObject (load_object.cc).
// SPDX-License-Identifier: Apache-2.0
#ifndef KFFI_SRC_MODULE_LOAD_OBJECT_H_
#define KFFI_SRC_MODULE_LOAD_OBJECT_H_

namespace kffi {
namespace details {

/// True while KFFIModuleLoadObject opens a linked object on this thread: the object's exports
/// then skip their system-library registration (the loaded module serves them).
bool SystemLibRegistrationsSuspended() noexcept;

}  // namespace details
}  // namespace kffi

#endif  // KFFI_SRC_MODULE_LOAD_OBJECT_H_
