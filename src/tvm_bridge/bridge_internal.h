// src/tvm_bridge/bridge_internal.h: what the sources of libkffi_tvm share.
// SPDX-License-Identifier: Apache-2.0
#ifndef KFFI_SRC_TVM_BRIDGE_BRIDGE_INTERNAL_H_
#define KFFI_SRC_TVM_BRIDGE_BRIDGE_INTERNAL_H_

#include <kffi/c_api.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "module/module_elf.h"
#include "tvm_bridge/tvm_python_api.h"

namespace kffi {
namespace tvmglue {

using details::TvmForeignField;
using details::TvmForeignMethod;
using details::TvmForeignTypeDesc;

/// The apache-tvm-ffi release whose ABI the shim follows. TVMFFIGetVersion reports 0.1.16, as
/// that release's headers and runtime do (its post releases carry the next patch number).
constexpr uint32_t kTvmCompatMajor = 0;
constexpr uint32_t kTvmCompatMinor = 1;
constexpr uint32_t kTvmCompatPatch = 16;
constexpr const char kTvmRuntimeVersionText[] = "0.1.15.post2 (version 0.1.16)";

/// TVM-FFI's static index of ffi.BigInt, a type kffi's own registry does not have.
constexpr int32_t kTvmBigIntIndex = 78;

/// TVM-FFI's type record (TVMFFITypeInfo), by layout: what TVMFFIGetTypeInfo returns in either
/// runtime (the shim builds them from kffi's registry).
struct TvmTypeInfo {
  int32_t type_index;
  int32_t type_depth;
  KFFIByteArray type_key;
  const TvmTypeInfo** type_ancestors;
  uint64_t type_key_hash;
  int32_t num_fields;
  int32_t num_methods;
  const void* fields;
  const void* methods;
  const void* metadata;
};

/// TVM-FFI's field record (TVMFFIFieldInfo), by layout: what refl::ObjectDef registers and
/// TVMFFITypeInfo.fields lists.
struct TvmFieldInfo {
  KFFIByteArray name;
  KFFIByteArray doc;
  KFFIByteArray metadata;
  int64_t flags;
  int64_t size;
  int64_t alignment;
  int64_t offset;
  KFFIFieldGetter getter;
  void* setter;  // a KFFIFieldSetter, or a Function object when kTvmSetterIsFunction is set
  KFFIAny default_value_or_factory;
  int32_t field_static_type_index;
};
/// TVM-FFI's type metadata record (TVMFFITypeMetadata, TVMFFITypeInfo.metadata), by layout.
struct TvmTypeMetadata {
  KFFIByteArray doc;
  int (*creator)(KFFIObjectHandle* out);
  int32_t total_size;
  int32_t structural_eq_hash_kind;
};
/// TVM-FFI's method record (TVMFFIMethodInfo), by layout.
struct TvmMethodInfo {
  KFFIByteArray name;
  KFFIByteArray doc;
  KFFIByteArray metadata;
  int64_t flags;  // kTvmFieldStaticMethod
  KFFIAny method;
};
/// TvmFieldInfo.flags (and TvmMethodInfo.flags) bits.
constexpr int64_t kTvmFieldWritable = 1 << 0;
constexpr int64_t kTvmFieldStaticMethod = 1 << 2;
constexpr int64_t kTvmFieldSEqHashIgnore = 1 << 3;
constexpr int64_t kTvmFieldCompareOff = 1 << 7;
/// TvmTypeMetadata.structural_eq_hash_kind values that compare by field values (tree, DAG and
/// constant tree nodes); 0 (unsupported), free variables and unique instances compare by identity.
inline bool TvmKindIsStructural(int32_t kind) { return kind == 1 || kind == 3 || kind == 4; }
constexpr int64_t kTvmSetterIsFunction = 1 << 11;

/// The functions of a loaded apache-tvm-ffi runtime (libtvm_ffi) that the bridge calls. Found
/// with dlsym; the bridge never names a TVMFFI* function in its own code (it defines them).
struct RealRuntime {
  void* handle = nullptr;      // dlopen handle (RTLD_NOLOAD), never closed
  const void* base = nullptr;  // load address, identifies the object
  std::string path;
  int (*env_set_stream)(int32_t, int32_t, void*, void**) = nullptr;
  void* (*env_get_stream)(int32_t, int32_t) = nullptr;
  int (*env_set_allocator)(DLPackManagedTensorAllocator, int,
                           DLPackManagedTensorAllocator*) = nullptr;
  DLPackManagedTensorAllocator (*env_get_allocator)(void) = nullptr;
  int (*env_tensor_alloc)(DLTensor*, KFFIObjectHandle*) = nullptr;  // NULL in a runtime lacking it
  void (*error_move_from_raised)(KFFIObjectHandle*) = nullptr;
  void (*error_set_raised)(KFFIObjectHandle) = nullptr;
  int (*function_set_global)(const KFFIByteArray*, KFFIObjectHandle, int) = nullptr;
  // Ends the process for an index its registry lacks: call it only for types it allocated.
  const TvmTypeInfo* (*get_type_info)(int32_t) = nullptr;
  // 0 with *out the index of a key its registry has (then get_type_info may be asked about it).
  int (*type_key_to_index)(const KFFIByteArray*, int32_t*) = nullptr;
};

/// A libtvm_ffi already loaded in the process (found by its soname, else by file name), promoted
/// to RTLD_GLOBAL when promote is set so that libraries opened later bind to it; NULL when none.
const RealRuntime* FindLoadedRealRuntime(bool promote);

/// The runtime that defines the code at address (dladdr), or NULL when that is this library.
const RealRuntime* RealRuntimeAt(const void* address);

/// Raises kind/message in the error slot that code bound to real reads (kffi's when NULL).
void RaiseFor(const RealRuntime* real, const char* kind, const std::string& message);

/// Moves the error raised in real's slot into kffi's (no-op when real is NULL or nothing is
/// raised there).
void MoveErrorToKffi(const RealRuntime* real);

/// What of kffi's environment a foreign function can read, so what a call copies into a real
/// runtime's (from the library's imports: only what it can read costs anything per call).
enum EnvUse : unsigned {
  kEnvStream = 1,     // imports TVMFFIEnvGetStream
  kEnvAllocator = 2,  // imports TVMFFIEnvTensorAlloc or ...GetDLPackManagedTensorAllocator
  kEnvAll = 3,
  // The library's allocator imports are redirected to kffi's forwarders (RebindEnvAllocator):
  // a call only marks the thread instead of copying the allocator.
  kEnvAllocatorRebound = 4,
  // The same for its TVMFFIEnvGetStream import (RebindEnvStream): no stream copy per call.
  kEnvStreamRebound = 8,
  kEnvRebound = kEnvAllocatorRebound | kEnvStreamRebound,
};

/// One imported function to redirect (RedirectImports).
struct Redirect {
  const char* symbol;
  const void* original;     // the function the dynamic loader bound the slots to
  const void* replacement;  // what they get
};

/// Points every slot of the loaded library (handle, read as elf) that holds symbol's address at
/// replacement, for each redirect. Returns whether the library now calls the replacements
/// (rebind.cc says when it refuses).
bool RedirectImports(void* handle, const details::ElfExports& elf,
                     const std::vector<Redirect>& redirects);

/// Redirects the library's imports of TVMFFIEnvTensorAlloc and
/// TVMFFIEnvGetDLPackManagedTensorAllocator (bound to real) to forwarders that give kffi's
/// allocator inside calls kffi makes with kEnvAllocatorRebound, and real's elsewhere. False when
/// it cannot (the library then keeps kEnvAllocator).
bool RebindEnvAllocator(void* handle, const details::ElfExports& elf, const RealRuntime* real);

/// Redirects the library's imports of TVMFFIEnvGetStream (bound to real) to a forwarder that gives
/// kffi's stream inside calls kffi makes with kEnvStreamRebound, and real's elsewhere. False when
/// it cannot (the library then keeps kEnvStream: the stream is copied per call).
bool RebindEnvStream(void* handle, const details::ElfExports& elf, const RealRuntime* real);

/// Which parameters of a foreign function take tensors as owning `ffi.Tensor` objects: bit i for
/// parameter i, bit 63 for parameter 63 and every one after it.
using OwnedTensorMask = uint64_t;
/// Every parameter: what a function with no (readable) signature gets.
constexpr OwnedTensorMask kAllOwned = ~OwnedTensorMask{0};
/// Whether the parameter at index may need an owning Tensor.
inline bool TakesOwnedTensor(OwnedTensorMask mask, int32_t index) {
  return ((mask >> (index < 63 ? index : 63)) & 1) != 0;
}

/// The parameters of a TVM-FFI export that need an owning Tensor where kffi's callers pass a
/// borrowed DLTensor*, from its metadata JSON (`__tvm_ffi__metadata_<name>`): every parameter
/// whose type is not `DLTensor*` (what TensorView and DLTensor* parameters declare, the only
/// types that accept a borrowed tensor). Without metadata, or with metadata kffi cannot read,
/// kAllOwned: as apache-tvm-ffi itself does, every tensor argument is then an owning Tensor.
OwnedTensorMask OwnedTensorParams(const std::string& tvm_metadata);

/// A kffi Function (owned) calling call(handle, ...), a function of code bound to real: kffi's
/// callers get the environment stream and allocator copied into real's environment (as env_use
/// says) and errors moved into kffi's slot; Map and Dict values are refused both ways (their
/// layouts differ); a borrowed DLTensor* argument for a parameter of owned (OwnedTensorParams)
/// becomes a Tensor object viewing it for the call. keep (owned, moved in; may be NULL) lives as
/// long as the function. name is for messages.
KFFIObjectHandle WrapForeignCallable(KFFISafeCallType call, void* handle, KFFIObjectHandle keep,
                                     const RealRuntime* real, std::string name,
                                     unsigned env_use = kEnvAll, OwnedTensorMask owned = kAllOwned);

/// What a foreign object's type is, as kffi's Python view needs it.
struct ForeignType {
  KFFIByteArray key;        // the type key (valid for the life of the process)
  int32_t static_ancestor;  // nearest ancestor index below kKFFIDynObjectBegin
};

/// Records the runtime a library the bridge opened (handle) is bound to (NULL: the shim), for
/// ForeignTypeOf.
void NoteBoundLibrary(void* handle, const RealRuntime* real);

/// Whether obj's type is not kffi's registry's to describe: a type of the loaded apache-tvm-ffi
/// (obj was made by code bound to it; the two runtimes number dynamic types independently), or
/// a static TVM-FFI type kffi's registry lacks. Never asks a runtime about an index it did not
/// allocate.
bool ForeignTypeOf(const KFFIObject* obj, ForeignType* out);

/// The record of obj's type in the loaded apache-tvm-ffi's registry (*real: that runtime) when
/// obj was made by code bound to it; NULL otherwise (never asks about an index it did not make).
const TvmTypeInfo* RealTypeInfoOf(const KFFIObject* obj, const RealRuntime** real);

/// Whether func (borrowed) is a function WrapForeignCallable made; *owned is then its mask.
bool ForeignTensorParams(KFFIObjectHandle func, OwnedTensorMask* owned);

/// The other direction: a Function (owned) that code bound to real can call, running the kffi
/// Function func (borrowed) with real's environment copied into kffi's and errors moved into
/// real's slot. A function that WrapForeignCallable made comes back unwrapped.
KFFIObjectHandle WrapKffiFunctionForForeign(KFFIObjectHandle func, const RealRuntime* real);

/// The TVM-FFI C functions the shim provides, sorted (for the pre-load coverage check).
const std::vector<std::string_view>& ShimCoveredFunctions();

/// kffi's metadata JSON for function name, from the library's TVM-FFI metadata JSON (the
/// `{"type_schema": ...}` document; may be empty) and docstring. Empty when there is nothing to
/// say. Throws kffi::Error (ValueError) for malformed metadata, naming the function.
std::string ConvertMetadata(const std::string& name, const std::string& tvm_metadata,
                            const std::string& doc);

/// The same without exceptions: false with the reason in *why for malformed metadata.
bool TryConvertMetadata(const std::string& name, const std::string& tvm_metadata,
                        const std::string& doc, std::string* out_json, std::string* why);

/// TVMFFITypeRegisterMetadata and TVMFFITypeRegisterField on the shim (shim_reflection.cc): the
/// type's size and creator, then its fields one by one, into kffi's reflection registry. 0, or
/// -1 with kffi's error raised (a field outside the object, an unknown type, ...).
int ShimRegisterTypeMetadata(int32_t type_index, const void* metadata);
int ShimRegisterField(int32_t type_index, const void* field);

/// TVMFFITypeRegisterMethod on the shim: an instance method (a Function) into kffi's
/// reflection registry (a static method, and a repeat of a name, which is an overload the first
/// registration dispatches, only into the TVM records). 0, or -1 with kffi's error raised.
int ShimRegisterMethod(int32_t type_index, const void* method);

/// A type's records as libraries registered them through the shim, in TVM-FFI's layout (every
/// field flag, default value, setter, creator, static method and overload, none of which kffi's
/// own registry holds): what TVMFFIGetTypeInfo reports for the type. The arrays stay valid for
/// the life of the process; a later registration may replace them.
struct ShimTvmRecords {
  const TvmFieldInfo* fields = nullptr;
  int32_t num_fields = 0;
  const TvmMethodInfo* methods = nullptr;
  int32_t num_methods = 0;
  const TvmTypeMetadata* metadata = nullptr;  // NULL until the type's metadata is registered
  uint64_t version = 0;                       // grows with every registration for the type
};

/// Whether a library registered anything for type_index through the shim; *out its records.
bool ShimTvmRecordsOf(int32_t type_index, ShimTvmRecords* out);

/// A type attribute apache-tvm-ffi's runtime registers for a type of its own: ffi.BigInt's hash
/// and equality (shim_values.cc), the containers' structural visit and mutate hooks
/// (shim_structural.cc). The shim's attribute table starts with these.
struct RuntimeTypeAttr {
  int32_t type_index;
  const char* name;
  KFFIAny value;  // owned: the table that registers it keeps its own reference
};
void RuntimeTypeAttrs(std::vector<RuntimeTypeAttr>* out);
void StructuralTypeAttrs(std::vector<RuntimeTypeAttr>* out);

/// Registers, once, the global functions apache-tvm-ffi's runtime registers itself (`ffi.Array`,
/// `ffi.GetKwargsObject`, ...; shim_globals.cc): called when a library first asks the shim for a
/// global function or registers one.
void EnsureShimGlobals() noexcept;

/// Every registered type key, in index order, as TVM-FFI spells them (`ffi.GetRegisteredTypeKeys`).
std::vector<std::string> ShimRegisteredTypeKeys();

/// Records the metadata (a JSON text; empty: none) of the global function name, for
/// `ffi.GetGlobalFuncMetadata`.
void SetShimGlobalMetadata(const KFFIByteArray& name, const KFFIByteArray& metadata);

/// The entries of the Python extension's table (tvm_python_api.h; python_api.cc assembles it):
/// bridge.cc's, types.cc's and foreign_fields.cc's halves. Each returns as its entry says.
void SetInstalledRuntimePath(const char* path);
int RealRuntimeLoaded();
int InstallObjectFromAddress();
int ExportObject(KFFIObjectHandle obj, KFFIObjectHandle* out);
int FunctionOwnedTensorArgs(KFFIObjectHandle func, uint64_t* owned);
int ForeignTypeInfo(KFFIObjectHandle obj, KFFIByteArray* key, int32_t* static_ancestor);
int ForeignField(KFFIObjectHandle obj, const char* name, size_t size, const KFFIAny* value,
                 KFFIAny* out);
int ForeignFieldName(KFFIObjectHandle obj, int32_t i, KFFIByteArray* name);
int ForeignTypeDescOf(KFFIObjectHandle obj, const details::TvmForeignTypeDesc** out);
int ForeignTypeDescByKey(const char* key, size_t size, const details::TvmForeignTypeDesc** out);
int RaiseFieldError(const char* qualname);

/// Sets the calling thread's kffi error from the exception being handled; returns -1.
int RaiseCurrentException() noexcept;

}  // namespace tvmglue
}  // namespace kffi

#endif  // KFFI_SRC_TVM_BRIDGE_BRIDGE_INTERNAL_H_
