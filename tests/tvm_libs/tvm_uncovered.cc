// tests/tvm_libs/tvm_uncovered.cc: needs a TVM-FFI runtime function that kffi's shim does not
// provide (big integers), so kffi must refuse it by name before running any of its code.
// SPDX-License-Identifier: Apache-2.0
#include <tvm/ffi/c_api.h>

#include <cstdlib>

extern "C" TVM_FFI_DLL_EXPORT int __tvm_ffi_big(void*, const TVMFFIAny*, int32_t,
                                                TVMFFIAny* result) {
  TVMFFIByteArray bytes{"\x01\0\0\0\0\0\0\0", 8};
  return TVMFFIBigIntFromByteArray(&bytes, result);
}

namespace {
[[maybe_unused]] const int kMarker = setenv("KFFI_TEST_TVM_UNCOVERED_INITIALISED", "1", 1);
}  // namespace
