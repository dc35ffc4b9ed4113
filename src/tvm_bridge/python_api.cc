// src/tvm_bridge/python_api.cc: the table kffi's Python extension reaches libkffi_tvm through
// (tvm_python_api.h), assembled from the bridge's halves (bridge.cc, types.cc,
// foreign_fields.cc).
// SPDX-License-Identifier: Apache-2.0
#include "tvm_bridge/bridge_internal.h"
#include "tvm_bridge/tvm_python_api.h"

namespace kffi {
namespace tvmglue {
namespace {

constexpr details::TvmPythonApi kPythonApi = {
    details::kTvmPythonApiVersion,
    &InstallObjectFromAddress,
    &ExportObject,
    &RealRuntimeLoaded,
    &SetInstalledRuntimePath,
    &FunctionOwnedTensorArgs,
    &ForeignTypeInfo,
    &ForeignField,
    &ForeignFieldName,
    &ForeignTypeDescOf,
    &ForeignTypeDescByKey,
    &RaiseFieldError,
};

}  // namespace
}  // namespace tvmglue
}  // namespace kffi

extern "C" __attribute__((visibility("default"))) const kffi::details::TvmPythonApi*
KFFITvmBridgeGetPythonApi(void) {
  return &kffi::tvmglue::kPythonApi;
}
