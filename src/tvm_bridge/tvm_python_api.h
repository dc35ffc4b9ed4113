// src/tvm_bridge/tvm_python_api.h: the private interface between kffi's Python extension and
// libkffi_tvm (the TVM-FFI bridge): one typed function table, found by one symbol.
//
// The extension (python/src/tvm/py_tvm_bridge.cc) dlopens libkffi_tvm, which libkffi opens with the
// first TVM-FFI library, and calls the bridge only through this table; errors travel in kffi's
// error slot (one format: the extension raises them as kffi raises any native error). Both come
// from one build, so the table is checked by version only. Nothing here is part of kffi's C ABI.
// SPDX-License-Identifier: Apache-2.0
#ifndef KFFI_SRC_TVM_BRIDGE_TVM_PYTHON_API_H_
#define KFFI_SRC_TVM_BRIDGE_TVM_PYTHON_API_H_

#include <kffi/c_api.h>

#include <cstdint>

namespace kffi {
namespace details {

/// Bumped whenever TvmPythonApi or its meaning changes.
constexpr uint32_t kTvmPythonApiVersion = 2;
/// `const TvmPythonApi* KFFITvmBridgeGetPythonApi(void)`, the table's one symbol.
constexpr const char kTvmPythonEntrySymbol[] = "KFFITvmBridgeGetPythonApi";

/// TvmForeignField.flags bits.
constexpr int32_t kTvmForeignFieldWritable = 1;      // setter may be called
constexpr int32_t kTvmForeignFieldSetterIsFunc = 2;  // writable in TVM-FFI, by a Function setter
constexpr int32_t kTvmForeignFieldCompareOff = 4;    // left out of structural ==/hash

/// One field of a foreign type, its record checked to lie inside the object.
struct TvmForeignField {
  KFFIByteArray name;  // valid for the process
  int64_t offset;
  int32_t flags;  // kTvmForeignField* bits
  KFFIFieldGetter getter;
  KFFIFieldSetter setter;  // NULL unless kTvmForeignFieldWritable
};

/// One method of a foreign type: a kffi Function (process lifetime) whose errors arrive in
/// kffi's slot; an instance method takes the object first.
struct TvmForeignMethod {
  KFFIByteArray name;
  KFFIObjectHandle function;
  int32_t is_static;
};

/// What kffi's Python binding needs to make a class for a type of a loaded apache-tvm-ffi's
/// registry: made once per type index, kept for the process.
struct TvmForeignTypeDesc {
  int32_t type_index;
  int32_t static_ancestor;  // nearest ancestor index below kKFFIDynObjectBegin
  KFFIByteArray type_key;
  KFFIByteArray parent_key;  // the parent's key when the parent is a dynamic type, else empty
  int32_t structural;        // 1 when TVMFFITypeMetadata declares a structural equality kind
  int32_t num_fields;        // the type's and its ancestors' fields, ancestors first
  const TvmForeignField* fields;
  int32_t num_methods;
  const TvmForeignMethod* methods;
};

/// Functions returning int give 0 (or 1/0 where noted), or -1 with the error raised in kffi's
/// slot; no exception crosses.
struct TvmPythonApi {
  uint32_t api_version;  // kTvmPythonApiVersion

  /// Registers `kffi.object_from_address` in the loaded libtvm_ffi's global registry (once).
  int (*install)(void);
  /// An owned reference (*out) TVM-FFI code may hold for the kffi object obj (borrowed): a
  /// Function is wrapped, a Tensor, Shape, Str or Bytes is the object itself; others refused.
  int (*export_object)(KFFIObjectHandle obj, KFFIObjectHandle* out);
  /// 1 when a libtvm_ffi is loaded, else 0.
  int (*real_runtime_loaded)(void);
  /// The path of the installed apache-tvm-ffi's libtvm_ffi.so (copied), for libraries that must
  /// run on it.
  void (*set_installed_runtime)(const char* path);
  /// 1 when func is a TVM-FFI library's function, with *owned its parameters that take owning
  /// Tensors (bit i for parameter i, bit 63 for the rest); else 0.
  int (*function_owned_tensor_args)(KFFIObjectHandle func, uint64_t* owned);
  /// 1 when obj's type is not kffi's registry's to describe, with *key (process lifetime) and
  /// *static_ancestor; else 0.
  int (*foreign_type_info)(KFFIObjectHandle obj, KFFIByteArray* key, int32_t* static_ancestor);
  /// The field name of obj (a type of apache-tvm-ffi's registry): read (value NULL) into *out or
  /// assigned. 1 done, 0 not such an object or no such field, -1 raised.
  int (*foreign_field)(KFFIObjectHandle obj, const char* name, size_t size, const KFFIAny* value,
                       KFFIAny* out);
  /// The name of field i (ancestors' first) of such an object: 1, 0 past the last, -1 raised.
  int (*foreign_field_name)(KFFIObjectHandle obj, int32_t i, KFFIByteArray* name);
  /// The description of obj's type when it is apache-tvm-ffi's registry's: 1 with *out (process
  /// lifetime), 0 for any other object, -1 raised (records kffi cannot use: a field outside the
  /// object, a malformed ancestor list).
  int (*foreign_type_desc)(KFFIObjectHandle obj, const TvmForeignTypeDesc** out);
  /// The same for the type key (size bytes) in the loaded apache-tvm-ffi's registry: 1, 0 when
  /// none is loaded or it lacks the key, -1 raised.
  int (*foreign_type_desc_by_key)(const char* key, size_t size, const TvmForeignTypeDesc** out);
  /// After a foreign field's getter or setter returned nonzero: moves the error from the runtime
  /// the field's code is bound to into kffi's slot as "<qualname>: <message>". Returns -1.
  int (*raise_field_error)(const char* qualname);
};

/// The signature of kTvmPythonEntrySymbol.
typedef const TvmPythonApi* (*TvmPythonGetApiFn)(void);

}  // namespace details
}  // namespace kffi

#endif  // KFFI_SRC_TVM_BRIDGE_TVM_PYTHON_API_H_
