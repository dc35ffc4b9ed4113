// src/core/version.cc: the loaded runtime's version, from the macros in c_api.h.
// SPDX-License-Identifier: Apache-2.0
#include <kffi/c_api.h>

void KFFIGetVersion(KFFIVersion* out) {
  // Compiled into the library, so a caller learns what is loaded, not what it was built with.
  if (out == nullptr) return;
  out->major = KFFI_VERSION_MAJOR;
  out->minor = KFFI_VERSION_MINOR;
  out->patch = KFFI_VERSION_PATCH;
  out->abi = KFFI_ABI_VERSION;
}
