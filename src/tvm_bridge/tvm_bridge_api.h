// src/tvm_bridge/tvm_bridge_api.h: the private interface between libkffi's loader and libkffi_tvm.
//
// libkffi loads libraries built for the TVM-FFI ABI (`__tvm_ffi_<name>` exports) through
// libkffi_tvm, a separate library that it opens (RTLD_LOCAL) the first time it meets one.
// libkffi_tvm holds everything TVM-specific: the TVM-FFI C functions on kffi's runtime (the
// shim), the binding of a library to that shim or to a loaded apache-tvm-ffi, the call wrappers
// and the metadata conversion. Both libraries come from one build, so this interface is checked
// by version only. Nothing here is part of kffi's C ABI. docs/tvm_ffi.md explains the design.
// SPDX-License-Identifier: Apache-2.0
#ifndef KFFI_SRC_TVM_BRIDGE_TVM_BRIDGE_API_H_
#define KFFI_SRC_TVM_BRIDGE_TVM_BRIDGE_API_H_

#include <kffi/c_api.h>

#include <cstdint>

namespace kffi {
namespace details {

struct ElfExports;

/// Bumped whenever TvmBridgeApi or its meaning changes.
// 2: ElfExports::tvm_shared_statics; 3: ElfExports::metadata, misplaced_code, tvm_library_ctx_*
constexpr uint32_t kTvmBridgeApiVersion = 3;
/// File name of the bridge library, found next to libkffi.
constexpr const char kTvmBridgeLibraryName[] = "libkffi_tvm.so";
/// The one symbol libkffi looks up in it: `const TvmBridgeApi* KFFITvmBridgeGetApi(void)`.
constexpr const char kTvmBridgeEntrySymbol[] = "KFFITvmBridgeGetApi";

/// Every function returns 0, or -1 with the error raised in kffi's slot (no exception crosses).
struct TvmBridgeApi {
  uint32_t api_version;  // kTvmBridgeApiVersion
  uint32_t abi_version;  // KFFI_ABI_VERSION the bridge was built with

  /// Opens the library at path (canonical) whose file says elf: binds its TVM-FFI imports to a
  /// loaded apache-tvm-ffi runtime or to the shim, and dlopens it. *out_handle: the dlopen
  /// handle; *out_state: the bridge's record of the library (lives as long as the process).
  int (*open_library)(const char* path, const ElfExports* elf, void** out_handle, void** out_state);

  /// A Function (owned, *out) calling the library's exported symbol: the calling convention of
  /// the runtime the library is bound to, errors moved into kffi's slot. The function holds a
  /// strong reference to module (borrowed here).
  int (*make_function)(void* state, KFFISafeCallType symbol, const char* name,
                       KFFIObjectHandle module, KFFIObjectHandle* out);

  /// The metadata of function name in kffi's JSON format (an owned str in *out), made from the
  /// library's `__tvm_ffi__metadata_<name>` and `__tvm_ffi__doc_<name>`; None when it has none.
  int (*get_metadata)(void* state, const char* name, KFFIAny* out);
};

/// The signature of kTvmBridgeEntrySymbol.
typedef const TvmBridgeApi* (*TvmBridgeGetApiFn)(void);

}  // namespace details
}  // namespace kffi

#endif  // KFFI_SRC_TVM_BRIDGE_TVM_BRIDGE_API_H_
