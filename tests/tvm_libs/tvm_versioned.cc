// tests/tvm_libs/tvm_versioned.cc: one TVM-FFI library built against several apache-tvm-ffi
// releases' headers (tests/python/kffi_tvm/test_tvm_versions.py): a function that raises, which is
// where the error record's layout matters, and a marker set when its static initialisers run.
// SPDX-License-Identifier: Apache-2.0
#include <tvm/ffi/error.h>
#include <tvm/ffi/function.h>

#include <cstdint>
#include <cstdlib>

namespace {

int64_t CheckedSquare(int64_t x) {
  if (x < 0) TVM_FFI_THROW(ValueError) << "negative: " << x;
  return x * x;
}

[[maybe_unused]] const int kMarker = setenv("KFFI_TEST_TVM_VERSIONED_INITIALISED", "1", 1);

}  // namespace

TVM_FFI_DLL_EXPORT_TYPED_FUNC(checked_square, CheckedSquare);
