// tests/tvm_libs/tvm_uncovered.cc: needs apache-tvm-ffi's extra C++ API (json::Parse), which kffi's
// shim does not provide, so kffi must refuse it by name before running any of its code.
// SPDX-License-Identifier: Apache-2.0
#include <tvm/ffi/container/array.h>
#include <tvm/ffi/extra/json.h>
#include <tvm/ffi/function.h>
#include <tvm/ffi/string.h>

#include <cstdint>
#include <cstdlib>

namespace {

// The number of items in a JSON array, parsed by libtvm_ffi.
int64_t ParsedLength(tvm::ffi::String text) {
  return tvm::ffi::json::Parse(text).cast<tvm::ffi::Array<tvm::ffi::Any>>().size();
}

[[maybe_unused]] const int kMarker = setenv("KFFI_TEST_TVM_UNCOVERED_INITIALISED", "1", 1);

}  // namespace

TVM_FFI_DLL_EXPORT_TYPED_FUNC(parsed_length, ParsedLength);
