/* tests/abi/layout_freeze.cc: the layout pins compiled as C++17, plus the C API's signatures.
 *
 * The same layout_freeze.h as the C translation units, so C and C++ agree on one layout. C++ can
 * also compare function types exactly (decltype), which pins every exported signature: a changed
 * parameter type is an ABI break that the layout pins alone would not see. No linking is needed,
 * so this runs before the runtime exists. */
/* SPDX-License-Identifier: Apache-2.0 */
#include "layout_freeze.h"

#include <cstdio>
#include <type_traits>

#include "kffi/c_api.h"  // first, so the header is proven self-contained in C++

// KFFI_ABI_SIGNATURE(fn, type): &fn has exactly the function pointer type `type`.
#define KFFI_ABI_SIGNATURE(fn, ...) \
  static_assert(std::is_same<decltype(&fn), __VA_ARGS__>::value, "signature of " #fn " changed")
// KFFI_ABI_SAME(T, type): a typedef or field type is exactly `type`.
#define KFFI_ABI_SAME(T, ...) static_assert(std::is_same<T, __VA_ARGS__>::value, #T " changed")

namespace {

using Handle = KFFIObjectHandle;
using ByteArray = KFFIByteArray;

// Types with no name of their own in the header.
using OpaqueDeleter = void (*)(void*);
using NameVisitor = int (*)(void* ctx, const ByteArray* name);
using SignalHook = int (*)();

// The call convention and the callbacks that live inside objects and tensors.
KFFI_ABI_SAME(KFFIObjectHandle, void*);
KFFI_ABI_SAME(KFFIStreamHandle, void*);
KFFI_ABI_SAME(KFFISafeCallType, int (*)(void*, const KFFIAny*, int32_t, KFFIAny*));
KFFI_ABI_SAME(std::underlying_type<KFFITypeIndex>::type, int32_t);
KFFI_ABI_SAME(decltype(KFFIObject::deleter), void (*)(void*, int));
KFFI_ABI_SAME(decltype(KFFIObject::combined_ref_count), uint64_t);
KFFI_ABI_SAME(decltype(KFFIObject::type_index), int32_t);
KFFI_ABI_SAME(decltype(KFFIAny::type_index), int32_t);
KFFI_ABI_SAME(decltype(KFFISeqCell::data_deleter), void (*)(void*));
KFFI_ABI_SAME(decltype(KFFISeqCell::size), int64_t);
KFFI_ABI_SAME(decltype(KFFIFunctionCell::safe_call), KFFISafeCallType);
KFFI_ABI_SAME(decltype(KFFIErrorCell::update_backtrace),
              void (*)(Handle, const ByteArray*, int32_t));
KFFI_ABI_SAME(decltype(KFFIErrorCell::cause_chain), Handle);
KFFI_ABI_SAME(decltype(KFFIErrorCell::extra_context), Handle);
KFFI_ABI_SAME(std::underlying_type<DLDeviceType>::type, int32_t);
KFFI_ABI_SAME(decltype(DLManagedTensor::deleter), void (*)(DLManagedTensor*));
KFFI_ABI_SAME(decltype(DLManagedTensorVersioned::deleter), void (*)(DLManagedTensorVersioned*));
KFFI_ABI_SAME(decltype(DLManagedTensorVersioned::flags), uint64_t);
KFFI_ABI_SAME(decltype(DLPackExchangeAPIHeader::prev_api), DLPackExchangeAPIHeader*);
KFFI_ABI_SAME(DLPackSetError, void (*)(void*, const char*, const char*));
KFFI_ABI_SAME(DLPackManagedTensorAllocator, int (*)(DLTensor*, DLManagedTensorVersioned**, void*,
                                                    void (*)(void*, const char*, const char*)));
KFFI_ABI_SAME(DLPackManagedTensorFromPyObjectNoSync, int (*)(void*, DLManagedTensorVersioned**));
KFFI_ABI_SAME(DLPackManagedTensorToPyObjectNoSync, int (*)(DLManagedTensorVersioned*, void**));
KFFI_ABI_SAME(DLPackDLTensorFromPyObjectNoSync, int (*)(void*, DLTensor*));
KFFI_ABI_SAME(DLPackCurrentWorkStream, int (*)(DLDeviceType, int32_t, void**));

// Every exported function, in header order (abi.signatures_complete checks none is missing).
KFFI_ABI_SIGNATURE(KFFIGetVersion, void (*)(KFFIVersion*));
KFFI_ABI_SIGNATURE(KFFIObjectIncRef, int (*)(Handle));
KFFI_ABI_SIGNATURE(KFFIObjectDecRef, int (*)(Handle));
KFFI_ABI_SIGNATURE(KFFIObjectIncWeakRef, int (*)(Handle));
KFFI_ABI_SIGNATURE(KFFIObjectDecWeakRef, int (*)(Handle));
KFFI_ABI_SIGNATURE(KFFIObjectWeakLock, int (*)(Handle, Handle*));
KFFI_ABI_SIGNATURE(KFFIObjectCreateOpaque, int (*)(void*, int32_t, OpaqueDeleter, Handle*));
KFFI_ABI_SIGNATURE(KFFIObjectGetCellPtr, void* (*)(Handle));
KFFI_ABI_SIGNATURE(KFFITypeKeyToIndex, int (*)(const ByteArray*, int32_t*));
KFFI_ABI_SIGNATURE(KFFITypeGetOrAllocIndex,
                   int (*)(const ByteArray*, int32_t, int32_t, int32_t, int32_t*));
KFFI_ABI_SIGNATURE(KFFIGetTypeInfo, const KFFITypeInfo* (*)(int32_t));
// Reflection (added in 0.5).
KFFI_ABI_SAME(KFFIFieldGetter, int (*)(void*, KFFIAny*));
KFFI_ABI_SAME(KFFIFieldSetter, int (*)(void*, const KFFIAny*));
KFFI_ABI_SAME(decltype(KFFITypeReflection::creator), int (*)(Handle*));
KFFI_ABI_SIGNATURE(KFFITypeRegisterReflection, int (*)(const KFFITypeReflection*));
KFFI_ABI_SIGNATURE(KFFIGetTypeReflection, const KFFITypeReflection* (*)(int32_t));
KFFI_ABI_SIGNATURE(KFFIObjectFindField, int (*)(Handle, const ByteArray*, const KFFIFieldInfo**));
KFFI_ABI_SIGNATURE(KFFIObjectGetField, int (*)(Handle, const ByteArray*, KFFIAny*));
KFFI_ABI_SIGNATURE(KFFIObjectSetField, int (*)(Handle, const ByteArray*, const KFFIAny*));
KFFI_ABI_SIGNATURE(KFFIFunctionCreate, int (*)(void*, KFFISafeCallType, OpaqueDeleter, Handle*));
KFFI_ABI_SIGNATURE(KFFIFunctionCall, int (*)(Handle, const KFFIAny*, int32_t, KFFIAny*));
KFFI_ABI_SIGNATURE(KFFIFunctionSetGlobal, int (*)(const ByteArray*, Handle, int));
KFFI_ABI_SIGNATURE(KFFIFunctionGetGlobal, int (*)(const ByteArray*, Handle*));
KFFI_ABI_SIGNATURE(KFFIFunctionRemoveGlobal, int (*)(const ByteArray*, int*));
KFFI_ABI_SIGNATURE(KFFIFunctionListGlobalNames, int (*)(NameVisitor, void*));
KFFI_ABI_SIGNATURE(KFFIErrorSetRaisedFromCStr, void (*)(const char*, const char*));
KFFI_ABI_SIGNATURE(KFFIErrorSetRaisedFromCStrParts, void (*)(const char*, const char**, int32_t));
KFFI_ABI_SIGNATURE(KFFIErrorSetRaisedArgument,
                   void (*)(const char*, const char*, const char*, const char*, const KFFIAny*,
                            int32_t, const char*));
KFFI_ABI_SIGNATURE(KFFIErrorSetRaisedCallArgument,
                   void (*)(const char*, const char*, const KFFIByteArray*, int32_t, int32_t,
                            const char*, const KFFIAny*, int32_t));
KFFI_ABI_SIGNATURE(KFFIErrorSetRaisedDataTypeMismatch,
                   void (*)(const DLDataType*, const DLDataType*));
KFFI_ABI_SIGNATURE(KFFIErrorSetRaisedShapeTooLarge,
                   void (*)(const char*, const int64_t*, int32_t, const char*));
KFFI_ABI_SIGNATURE(KFFIErrorGetArgumentType, int (*)(Handle, const KFFIAny**, size_t*, size_t*));
KFFI_ABI_SIGNATURE(KFFIErrorSetRaised, void (*)(Handle));
KFFI_ABI_SIGNATURE(KFFIErrorMoveFromRaised, void (*)(Handle*));
KFFI_ABI_SIGNATURE(KFFIErrorCreate,
                   int (*)(const ByteArray*, const ByteArray*, const ByteArray*, Handle*));
KFFI_ABI_SIGNATURE(KFFIErrorGetCellPtr, KFFIErrorCell* (*)(Handle));
KFFI_ABI_SIGNATURE(KFFIBacktrace, const ByteArray* (*)(const char*, int, const char*, int));
KFFI_ABI_SIGNATURE(KFFIStringFromByteArray, int (*)(const ByteArray*, KFFIAny*));
KFFI_ABI_SIGNATURE(KFFIBytesFromByteArray, int (*)(const ByteArray*, KFFIAny*));
KFFI_ABI_SIGNATURE(KFFIDataTypeFromString, int (*)(const ByteArray*, DLDataType*));
KFFI_ABI_SIGNATURE(KFFIDataTypeToString, int (*)(const DLDataType*, KFFIAny*));
KFFI_ABI_SIGNATURE(KFFIAnyViewToOwnedAny, int (*)(const KFFIAny*, KFFIAny*));
KFFI_ABI_SIGNATURE(KFFITensorGetDLTensorPtr, DLTensor* (*)(Handle));
KFFI_ABI_SIGNATURE(KFFITensorFromDLPack, int (*)(DLManagedTensor*, int32_t, int32_t, Handle*));
KFFI_ABI_SIGNATURE(KFFITensorFromDLPackVersioned,
                   int (*)(DLManagedTensorVersioned*, int32_t, int32_t, Handle*));
KFFI_ABI_SIGNATURE(KFFITensorGetFlags, int (*)(Handle, uint64_t*));
KFFI_ABI_SIGNATURE(KFFITensorToDLPack, int (*)(Handle, DLManagedTensor**));
KFFI_ABI_SIGNATURE(KFFITensorToDLPackVersioned, int (*)(Handle, DLManagedTensorVersioned**));
KFFI_ABI_SIGNATURE(KFFIEnvSetStream,
                   int (*)(int32_t, int32_t, KFFIStreamHandle, KFFIStreamHandle*));
KFFI_ABI_SIGNATURE(KFFIEnvGetStream, KFFIStreamHandle (*)(int32_t, int32_t));
KFFI_ABI_SIGNATURE(KFFIEnvSetTensorAllocator,
                   int (*)(DLPackManagedTensorAllocator, int, DLPackManagedTensorAllocator*));
KFFI_ABI_SIGNATURE(KFFIEnvGetTensorAllocator, DLPackManagedTensorAllocator (*)());
KFFI_ABI_SIGNATURE(KFFIEnvCheckSignals, int (*)());
KFFI_ABI_SIGNATURE(KFFIEnvSetCheckSignalsHook, void (*)(SignalHook, SignalHook*));
KFFI_ABI_SIGNATURE(KFFIEnvEnterDevice, int (*)(int32_t, int32_t, void**));
KFFI_ABI_SIGNATURE(KFFIEnvRestoreDevice, void (*)(int32_t, void*));
KFFI_ABI_SIGNATURE(KFFIModuleLoadFromFile, int (*)(const ByteArray*, Handle*));
KFFI_ABI_SIGNATURE(KFFIModuleGetSystemLib, int (*)(Handle*));
KFFI_ABI_SIGNATURE(KFFIModuleRegisterSystemLibSymbol, int (*)(const char*, void*));
KFFI_ABI_SIGNATURE(KFFIModuleReportLoadError,
                   int (*)(const KFFIByteArray*, const KFFIByteArray*, int32_t*));
KFFI_ABI_SIGNATURE(KFFIModuleGetFunction, int (*)(Handle, const ByteArray*, int, Handle*));
KFFI_ABI_SIGNATURE(KFFIModuleListFunctions, int (*)(Handle, int, NameVisitor, void*));
KFFI_ABI_SIGNATURE(KFFIModuleGetFunctionMetadata, int (*)(Handle, const ByteArray*, KFFIAny*));
KFFI_ABI_SIGNATURE(KFFIModuleImport, int (*)(Handle, Handle));
KFFI_ABI_SIGNATURE(KFFIModuleGetName, int (*)(Handle, KFFIAny*));
KFFI_ABI_SIGNATURE(KFFIModuleLoadObject, int (*)(const ByteArray*, Handle*));
// Export metadata and contracts (added in 0.3).
KFFI_ABI_SIGNATURE(KFFIExportGetMetadata,
                   int (*)(const char*, const char*, const char*, const ByteArray*, int32_t,
                           const ByteArray*, KFFIAny*));
KFFI_ABI_SIGNATURE(KFFIFunctionFormatSignature, int (*)(const char*, const char*, const ByteArray*,
                                                        int32_t, const ByteArray*, KFFIAny*));
KFFI_ABI_SIGNATURE(KFFIContractCreate,
                   int (*)(const ByteArray*, const ByteArray*, int32_t, Handle*));
KFFI_ABI_SIGNATURE(KFFIContractGetPlan, const void* (*)(Handle));
KFFI_ABI_SIGNATURE(KFFIContractCheckFrom, int32_t (*)(const void*, void*, int32_t));
KFFI_ABI_SIGNATURE(KFFIContractExplain,
                   int (*)(Handle, const KFFIAny*, int32_t, int32_t*, int32_t*));
KFFI_ABI_SIGNATURE(KFFIContractExpandArgs,
                   int (*)(Handle, const KFFIAny* const*, int32_t, KFFIAny*));
KFFI_ABI_SIGNATURE(KFFIContractCheckSignature, int (*)(Handle, const ByteArray*, int32_t));
KFFI_ABI_SIGNATURE(KFFIContractExportCreate, int (*)(const ByteArray*, const ByteArray*,
                                                     const ByteArray*, int32_t, int32_t, Handle*));
KFFI_ABI_SIGNATURE(KFFIContractGetMetadata,
                   int (*)(Handle, const ByteArray*, const ByteArray*, KFFIAny*));
KFFI_ABI_SIGNATURE(KFFIContractGetText, int (*)(Handle, int32_t, int32_t, ByteArray*));
KFFI_ABI_SIGNATURE(KFFIContractFindSymbol, int (*)(Handle, const ByteArray*, int32_t*));
KFFI_ABI_SIGNATURE(KFFIContractGetOutputShape,
                   int (*)(Handle, int64_t, const int64_t*, uint64_t, int64_t*, int32_t*));
static_assert(kKFFIContractTextName == 0 && kKFFIContractTextSource == 1 &&
                  kKFFIContractTextSignature == 2 && kKFFIContractTextParamName == 3 &&
                  kKFFIContractTextParamType == 4 && kKFFIContractTextOutputDtype == 5 &&
                  kKFFIContractTextSymbol == 6,
              "contract text numbers changed");

}  // namespace

int main() {
  // Same runtime check as the C translation unit: the inline accessors skip exactly the header.
  union {
    KFFIObject header;
    unsigned char bytes[sizeof(KFFIObject) + sizeof(DLTensor)];
  } storage;
  char* base = reinterpret_cast<char*>(&storage);
  if (static_cast<char*>(KFFIObjectGetCellPtr(&storage)) != base + 24 ||
      reinterpret_cast<char*>(KFFIErrorGetCellPtr(&storage)) != base + 24 ||
      reinterpret_cast<char*>(KFFITensorGetDLTensorPtr(&storage)) != base + 24) {
    std::fprintf(stderr, "a cell accessor does not point 24 bytes past the object header\n");
    return 1;
  }
  std::printf("abi layout_freeze (C++, __cplusplus=%ldL): layout and signatures pinned\n",
              static_cast<long>(__cplusplus));
  return 0;
}
