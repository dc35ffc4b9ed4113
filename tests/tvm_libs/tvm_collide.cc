// tests/tvm_libs/tvm_collide.cc: registers a global function name that tvm_testlib registers too.
// Loaded through kffi's shim after tvm_testlib, the load fails cleanly (TVM-FFI's own code throws
// from the static initialiser, which would otherwise abort the process).
// SPDX-License-Identifier: Apache-2.0
#include <tvm/ffi/reflection/registry.h>
#include <tvm/ffi/tvm_ffi.h>

#include <cstdint>

namespace {
int64_t Cube(int64_t x) { return x * x * x; }
}  // namespace

TVM_FFI_DLL_EXPORT_TYPED_FUNC(cube, Cube);

TVM_FFI_STATIC_INIT_BLOCK() {
  tvm::ffi::reflection::GlobalDef().def("tvm_testlib.square", [](int64_t x) { return -x; });
}
