/* tests/abi/layout_freeze.h: pins every size, offset, alignment and enum value of the frozen ABI.
 *
 * Included from a C99, a C11 and a C++17 translation unit, so the three language modes must agree
 * on one layout. The numbers come from docs/abi.md (the source of truth) and from the DLPack
 * specification. A failure here means a layout break: either undo the change, or bump
 * KFFI_ABI_VERSION and update this file and docs/abi.md together. */
/* SPDX-License-Identifier: Apache-2.0 */
#ifndef KFFI_TESTS_ABI_LAYOUT_FREEZE_H_
#define KFFI_TESTS_ABI_LAYOUT_FREEZE_H_

#include <limits.h>
#include <stddef.h>

#include "kffi/c_api.h"

/* KFFI_ABI_PIN(cond, what): a compile-time check usable at file scope in every mode we build.
 * _Static_assert is C11, but gcc and clang accept it in C99 mode (without -pedantic). In C99 mode
 * glibc's <sys/cdefs.h> swaps it for a bit-field trick that drops `what`; the compiler's "in
 * expansion of macro" notes still name the failing line, and the C11 and C++17 builds of the same
 * pins print `what`. Other C99 compilers get a negative array size: repeated declarations of one
 * extern array are legal C99 as long as they agree (char[1]). */
#if defined(__cplusplus)
#define KFFI_ABI_PIN(cond, what) static_assert(cond, what)
#elif (defined(__STDC_VERSION__) && __STDC_VERSION__ >= 201112L) || defined(__GNUC__)
#define KFFI_ABI_PIN(cond, what) _Static_assert(cond, what)
#else
#define KFFI_ABI_PIN(cond, what) extern char kffi_abi_pin_failed[(cond) ? 1 : -1]
#endif

/* Alignment: alignof is C++11 and _Alignof C11; C99 has neither, so gcc/clang's __alignof__ is
 * used there (on x86-64 and aarch64 it agrees with _Alignof for every type pinned below). */
#if defined(__cplusplus)
#define KFFI_ABI_ALIGNOF(T) alignof(T)
#elif defined(__STDC_VERSION__) && __STDC_VERSION__ >= 201112L
#define KFFI_ABI_ALIGNOF(T) _Alignof(T)
#elif defined(__GNUC__)
#define KFFI_ABI_ALIGNOF(T) __alignof__(T)
#else
#define KFFI_ABI_ALIGNOF(T) \
  offsetof(                 \
      struct {              \
        char c;             \
        T member;           \
      },                    \
      member)
#endif

/* A type's size and alignment. */
#define KFFI_ABI_TYPE(T, size, align)                                 \
  KFFI_ABI_PIN(sizeof(T) == (size), "sizeof(" #T ") must be " #size); \
  KFFI_ABI_PIN(KFFI_ABI_ALIGNOF(T) == (align), "alignof(" #T ") must be " #align)

/* A field's offset and size: the size check catches a field whose type changed in place (e.g.
 * int32_t -> int64_t at the end of a struct, which would not move any offset). */
#define KFFI_ABI_FIELD(T, field, offset, size)                                                   \
  KFFI_ABI_PIN(offsetof(T, field) == (offset), "offsetof(" #T ", " #field ") must be " #offset); \
  KFFI_ABI_PIN(sizeof(((T*)0)->field) == (size), "sizeof(" #T "." #field ") must be " #size)

/* An enumerator or macro value. */
#define KFFI_ABI_VALUE(name, value) KFFI_ABI_PIN((name) == (value), #name " must be " #value)

/* ---------------------------------------------------------------------------------------------
 * Target assumptions. The tables in abi.md are written for LP64-style 64-bit targets (8-byte
 * pointers and size_t); on anything else the layout would differ silently, so refuse it here.
 * ------------------------------------------------------------------------------------------- */
KFFI_ABI_PIN(CHAR_BIT == 8, "kffi's frozen layout assumes 8-bit bytes");
KFFI_ABI_PIN(sizeof(void*) == 8, "kffi's frozen layout is defined for 64-bit targets");
KFFI_ABI_PIN(sizeof(size_t) == 8, "kffi's frozen layout assumes an 8-byte size_t");
KFFI_ABI_PIN(sizeof(void (*)(void)) == 8, "kffi's frozen layout assumes 8-byte function pointers");
KFFI_ABI_TYPE(int64_t, 8, 8);
KFFI_ABI_TYPE(double, 8, 8);

/* ---------------------------------------------------------------------------------------------
 * Versions and constants
 * ------------------------------------------------------------------------------------------- */
/* This file describes ABI version 1; a deliberate break bumps both together. */
KFFI_ABI_VALUE(KFFI_ABI_VERSION, 1);

KFFI_ABI_TYPE(KFFIVersion, 16, 4);
KFFI_ABI_FIELD(KFFIVersion, major, 0, 4);
KFFI_ABI_FIELD(KFFIVersion, minor, 4, 4);
KFFI_ABI_FIELD(KFFIVersion, patch, 8, 4);
KFFI_ABI_FIELD(KFFIVersion, abi, 12, 4);

/* Deleter flags and backtrace modes travel between libraries as plain ints. */
KFFI_ABI_VALUE(kKFFIObjectDeleterFlagStrong, 1);
KFFI_ABI_VALUE(kKFFIObjectDeleterFlagWeak, 2);
KFFI_ABI_VALUE(kKFFIObjectDeleterFlagBoth, 3);
KFFI_ABI_VALUE(kKFFIBacktraceUpdateModeReplace, 0);
KFFI_ABI_VALUE(kKFFIBacktraceUpdateModeAppend, 1);

/* ---------------------------------------------------------------------------------------------
 * Type indices: the numbers are shared with TVM-FFI, so every one is pinned.
 * ------------------------------------------------------------------------------------------- */
KFFI_ABI_PIN(sizeof(KFFITypeIndex) == 4, "KFFITypeIndex must be a 4-byte integer");
KFFI_ABI_VALUE(kKFFIAny, -1);
KFFI_ABI_VALUE(kKFFINone, 0);
KFFI_ABI_VALUE(kKFFIInt, 1);
KFFI_ABI_VALUE(kKFFIBool, 2);
KFFI_ABI_VALUE(kKFFIFloat, 3);
KFFI_ABI_VALUE(kKFFIOpaquePtr, 4);
KFFI_ABI_VALUE(kKFFIDataType, 5);
KFFI_ABI_VALUE(kKFFIDevice, 6);
KFFI_ABI_VALUE(kKFFIDLTensorPtr, 7);
KFFI_ABI_VALUE(kKFFIRawStr, 8);
KFFI_ABI_VALUE(kKFFIByteArrayPtr, 9);
KFFI_ABI_VALUE(kKFFIObjectRValueRef, 10);
KFFI_ABI_VALUE(kKFFISmallStr, 11);
KFFI_ABI_VALUE(kKFFISmallBytes, 12);
KFFI_ABI_VALUE(kKFFIStaticObjectBegin, 64);
KFFI_ABI_VALUE(kKFFIObject, 64);
KFFI_ABI_VALUE(kKFFIStr, 65);
KFFI_ABI_VALUE(kKFFIBytes, 66);
KFFI_ABI_VALUE(kKFFIError, 67);
KFFI_ABI_VALUE(kKFFIFunction, 68);
KFFI_ABI_VALUE(kKFFIShape, 69);
KFFI_ABI_VALUE(kKFFITensor, 70);
KFFI_ABI_VALUE(kKFFIArray, 71);
KFFI_ABI_VALUE(kKFFIMap, 72);
KFFI_ABI_VALUE(kKFFIModule, 73);
KFFI_ABI_VALUE(kKFFIOpaquePyObject, 74);
KFFI_ABI_VALUE(kKFFIList, 75);
KFFI_ABI_VALUE(kKFFIDict, 76);
KFFI_ABI_VALUE(kKFFIDynObjectBegin, 128);

/* ---------------------------------------------------------------------------------------------
 * Objects
 * ------------------------------------------------------------------------------------------- */
KFFI_ABI_PIN(sizeof(KFFIObjectHandle) == 8, "KFFIObjectHandle must be a pointer");

/* The cell starts right after this header (KFFIObjectGetCellPtr adds sizeof(KFFIObject)), so its
 * size is part of every object's layout, not only of the header's. */
KFFI_ABI_TYPE(KFFIObject, 24, 8);
KFFI_ABI_FIELD(KFFIObject, combined_ref_count, 0, 8);
KFFI_ABI_FIELD(KFFIObject, type_index, 8, 4);
KFFI_ABI_FIELD(KFFIObject, padding, 12, 4);
KFFI_ABI_FIELD(KFFIObject, deleter, 16, 8);
KFFI_ABI_FIELD(KFFIObject, ensure_align_, 16, 8);

/* ---------------------------------------------------------------------------------------------
 * Values
 * ------------------------------------------------------------------------------------------- */
KFFI_ABI_TYPE(KFFIAny, 16, 8);
KFFI_ABI_FIELD(KFFIAny, type_index, 0, 4);
KFFI_ABI_FIELD(KFFIAny, zero_padding, 4, 4);
KFFI_ABI_FIELD(KFFIAny, small_str_len, 4, 4);
KFFI_ABI_FIELD(KFFIAny, tensor_flags, 4, 4);
KFFI_ABI_FIELD(KFFIAny, v_int64, 8, 8);
KFFI_ABI_FIELD(KFFIAny, v_float64, 8, 8);
KFFI_ABI_FIELD(KFFIAny, v_ptr, 8, 8);
KFFI_ABI_FIELD(KFFIAny, v_c_str, 8, 8);
KFFI_ABI_FIELD(KFFIAny, v_obj, 8, 8);
KFFI_ABI_FIELD(KFFIAny, v_dtype, 8, 4);
KFFI_ABI_FIELD(KFFIAny, v_device, 8, 8);
KFFI_ABI_FIELD(KFFIAny, v_bytes, 8, 8);
KFFI_ABI_FIELD(KFFIAny, v_uint64, 8, 8);

KFFI_ABI_TYPE(KFFIByteArray, 16, 8);
KFFI_ABI_FIELD(KFFIByteArray, data, 0, 8);
KFFI_ABI_FIELD(KFFIByteArray, size, 8, 8);

/* ---------------------------------------------------------------------------------------------
 * Cells (the payload after the object header)
 * ------------------------------------------------------------------------------------------- */
KFFI_ABI_TYPE(KFFIStrCell, 16, 8);
KFFI_ABI_FIELD(KFFIStrCell, data, 0, 8);
KFFI_ABI_FIELD(KFFIStrCell, size, 8, 8);

KFFI_ABI_TYPE(KFFIShapeCell, 16, 8);
KFFI_ABI_FIELD(KFFIShapeCell, data, 0, 8);
KFFI_ABI_FIELD(KFFIShapeCell, size, 8, 8);

KFFI_ABI_TYPE(KFFISeqCell, 32, 8);
KFFI_ABI_FIELD(KFFISeqCell, data, 0, 8);
KFFI_ABI_FIELD(KFFISeqCell, size, 8, 8);
KFFI_ABI_FIELD(KFFISeqCell, capacity, 16, 8);
KFFI_ABI_FIELD(KFFISeqCell, data_deleter, 24, 8);

KFFI_ABI_PIN(sizeof(KFFISafeCallType) == 8, "KFFISafeCallType must be a function pointer");
KFFI_ABI_TYPE(KFFIFunctionCell, 16, 8);
KFFI_ABI_FIELD(KFFIFunctionCell, safe_call, 0, 8);
KFFI_ABI_FIELD(KFFIFunctionCell, cpp_call, 8, 8);

KFFI_ABI_TYPE(KFFIOpaqueObjectCell, 8, 8);
KFFI_ABI_FIELD(KFFIOpaqueObjectCell, handle, 0, 8);

KFFI_ABI_TYPE(KFFIErrorCell, 72, 8);
KFFI_ABI_FIELD(KFFIErrorCell, kind, 0, 16);
KFFI_ABI_FIELD(KFFIErrorCell, message, 16, 16);
KFFI_ABI_FIELD(KFFIErrorCell, backtrace, 32, 16);
KFFI_ABI_FIELD(KFFIErrorCell, update_backtrace, 48, 8);
KFFI_ABI_FIELD(KFFIErrorCell, cause_chain, 56, 8);
KFFI_ABI_FIELD(KFFIErrorCell, extra_context, 64, 8);

/* ---------------------------------------------------------------------------------------------
 * Types
 * ------------------------------------------------------------------------------------------- */
KFFI_ABI_TYPE(KFFITypeInfo, 32, 8);
KFFI_ABI_FIELD(KFFITypeInfo, type_index, 0, 4);
KFFI_ABI_FIELD(KFFITypeInfo, type_depth, 4, 4);
KFFI_ABI_FIELD(KFFITypeInfo, type_key, 8, 16);
KFFI_ABI_FIELD(KFFITypeInfo, type_ancestors, 24, 8);

/* Reflection (added in 0.5). */
KFFI_ABI_VALUE(kKFFIFieldFlagWritable, 1);
KFFI_ABI_VALUE(kKFFIFieldFlagCompareOff, 2);
KFFI_ABI_VALUE(kKFFITypeFlagStructuralEq, 1);
KFFI_ABI_VALUE(kKFFITypeFlagPlainRecord, 2);
KFFI_ABI_TYPE(KFFIFieldInfo, 72, 8);
KFFI_ABI_FIELD(KFFIFieldInfo, name, 0, 16);
KFFI_ABI_FIELD(KFFIFieldInfo, offset, 16, 8);
KFFI_ABI_FIELD(KFFIFieldInfo, size, 24, 8);
KFFI_ABI_FIELD(KFFIFieldInfo, type_index, 32, 4);
KFFI_ABI_FIELD(KFFIFieldInfo, flags, 36, 4);
KFFI_ABI_FIELD(KFFIFieldInfo, type_str, 40, 16);
KFFI_ABI_FIELD(KFFIFieldInfo, getter, 56, 8);
KFFI_ABI_FIELD(KFFIFieldInfo, setter, 64, 8);
KFFI_ABI_TYPE(KFFIMethodInfo, 24, 8);
KFFI_ABI_FIELD(KFFIMethodInfo, name, 0, 16);
KFFI_ABI_FIELD(KFFIMethodInfo, method, 16, 8);
KFFI_ABI_TYPE(KFFITypeReflection, 48, 8);
KFFI_ABI_FIELD(KFFITypeReflection, type_index, 0, 4);
KFFI_ABI_FIELD(KFFITypeReflection, flags, 4, 4);
KFFI_ABI_FIELD(KFFITypeReflection, object_size, 8, 8);
KFFI_ABI_FIELD(KFFITypeReflection, num_fields, 16, 4);
KFFI_ABI_FIELD(KFFITypeReflection, num_methods, 20, 4);
KFFI_ABI_FIELD(KFFITypeReflection, fields, 24, 8);
KFFI_ABI_FIELD(KFFITypeReflection, methods, 32, 8);
KFFI_ABI_FIELD(KFFITypeReflection, creator, 40, 8);

/* ---------------------------------------------------------------------------------------------
 * Environment
 * ------------------------------------------------------------------------------------------- */
KFFI_ABI_PIN(sizeof(KFFIStreamHandle) == 8, "KFFIStreamHandle must be a pointer");

/* ---------------------------------------------------------------------------------------------
 * DLPack (layouts and numbers fixed by the DLPack specification, major version 1)
 * ------------------------------------------------------------------------------------------- */
KFFI_ABI_VALUE(DLPACK_MAJOR_VERSION, 1);
KFFI_ABI_VALUE(DLPACK_FLAG_BITMASK_READ_ONLY, 1);
KFFI_ABI_VALUE(DLPACK_FLAG_BITMASK_IS_COPIED, 2);
KFFI_ABI_VALUE(DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED, 4);

KFFI_ABI_TYPE(DLPackVersion, 8, 4);
KFFI_ABI_FIELD(DLPackVersion, major, 0, 4);
KFFI_ABI_FIELD(DLPackVersion, minor, 4, 4);

KFFI_ABI_PIN(sizeof(DLDeviceType) == 4, "DLDeviceType must be a 4-byte integer");
KFFI_ABI_VALUE(kDLCPU, 1);
KFFI_ABI_VALUE(kDLCUDA, 2);
KFFI_ABI_VALUE(kDLCUDAHost, 3);
KFFI_ABI_VALUE(kDLOpenCL, 4);
KFFI_ABI_VALUE(kDLVulkan, 7);
KFFI_ABI_VALUE(kDLMetal, 8);
KFFI_ABI_VALUE(kDLVPI, 9);
KFFI_ABI_VALUE(kDLROCM, 10);
KFFI_ABI_VALUE(kDLROCMHost, 11);
KFFI_ABI_VALUE(kDLExtDev, 12);
KFFI_ABI_VALUE(kDLCUDAManaged, 13);
KFFI_ABI_VALUE(kDLOneAPI, 14);
KFFI_ABI_VALUE(kDLWebGPU, 15);
KFFI_ABI_VALUE(kDLHexagon, 16);
KFFI_ABI_VALUE(kDLMAIA, 17);
KFFI_ABI_VALUE(kDLTrn, 18);

KFFI_ABI_TYPE(DLDevice, 8, 4);
KFFI_ABI_FIELD(DLDevice, device_type, 0, 4);
KFFI_ABI_FIELD(DLDevice, device_id, 4, 4);

/* DLDataType.code is a uint8_t, so the enum's own size is not part of any layout; its values are.
 */
KFFI_ABI_VALUE(kDLInt, 0);
KFFI_ABI_VALUE(kDLUInt, 1);
KFFI_ABI_VALUE(kDLFloat, 2);
KFFI_ABI_VALUE(kDLOpaqueHandle, 3);
KFFI_ABI_VALUE(kDLBfloat, 4);
KFFI_ABI_VALUE(kDLComplex, 5);
KFFI_ABI_VALUE(kDLBool, 6);
KFFI_ABI_VALUE(kDLFloat8_e3m4, 7);
KFFI_ABI_VALUE(kDLFloat8_e4m3, 8);
KFFI_ABI_VALUE(kDLFloat8_e4m3b11fnuz, 9);
KFFI_ABI_VALUE(kDLFloat8_e4m3fn, 10);
KFFI_ABI_VALUE(kDLFloat8_e4m3fnuz, 11);
KFFI_ABI_VALUE(kDLFloat8_e5m2, 12);
KFFI_ABI_VALUE(kDLFloat8_e5m2fnuz, 13);
KFFI_ABI_VALUE(kDLFloat8_e8m0fnu, 14);
KFFI_ABI_VALUE(kDLFloat6_e2m3fn, 15);
KFFI_ABI_VALUE(kDLFloat6_e3m2fn, 16);
KFFI_ABI_VALUE(kDLFloat4_e2m1fn, 17);

KFFI_ABI_TYPE(DLDataType, 4, 2);
KFFI_ABI_FIELD(DLDataType, code, 0, 1);
KFFI_ABI_FIELD(DLDataType, bits, 1, 1);
KFFI_ABI_FIELD(DLDataType, lanes, 2, 2);

KFFI_ABI_TYPE(DLTensor, 48, 8);
KFFI_ABI_FIELD(DLTensor, data, 0, 8);
KFFI_ABI_FIELD(DLTensor, device, 8, 8);
KFFI_ABI_FIELD(DLTensor, ndim, 16, 4);
KFFI_ABI_FIELD(DLTensor, dtype, 20, 4);
KFFI_ABI_FIELD(DLTensor, shape, 24, 8);
KFFI_ABI_FIELD(DLTensor, strides, 32, 8);
KFFI_ABI_FIELD(DLTensor, byte_offset, 40, 8);

KFFI_ABI_TYPE(DLManagedTensor, 64, 8);
KFFI_ABI_FIELD(DLManagedTensor, dl_tensor, 0, 48);
KFFI_ABI_FIELD(DLManagedTensor, manager_ctx, 48, 8);
KFFI_ABI_FIELD(DLManagedTensor, deleter, 56, 8);

KFFI_ABI_TYPE(DLManagedTensorVersioned, 80, 8);
KFFI_ABI_FIELD(DLManagedTensorVersioned, version, 0, 8);
KFFI_ABI_FIELD(DLManagedTensorVersioned, manager_ctx, 8, 8);
KFFI_ABI_FIELD(DLManagedTensorVersioned, deleter, 16, 8);
KFFI_ABI_FIELD(DLManagedTensorVersioned, flags, 24, 8);
KFFI_ABI_FIELD(DLManagedTensorVersioned, dl_tensor, 32, 48);

KFFI_ABI_TYPE(DLPackExchangeAPIHeader, 16, 8);
KFFI_ABI_FIELD(DLPackExchangeAPIHeader, version, 0, 8);
KFFI_ABI_FIELD(DLPackExchangeAPIHeader, prev_api, 8, 8);

KFFI_ABI_TYPE(DLPackExchangeAPI, 56, 8);
KFFI_ABI_FIELD(DLPackExchangeAPI, header, 0, 16);
KFFI_ABI_FIELD(DLPackExchangeAPI, managed_tensor_allocator, 16, 8);
KFFI_ABI_FIELD(DLPackExchangeAPI, managed_tensor_from_py_object_no_sync, 24, 8);
KFFI_ABI_FIELD(DLPackExchangeAPI, managed_tensor_to_py_object_no_sync, 32, 8);
KFFI_ABI_FIELD(DLPackExchangeAPI, dltensor_from_py_object_no_sync, 40, 8);
KFFI_ABI_FIELD(DLPackExchangeAPI, current_work_stream, 48, 8);

#endif /* KFFI_TESTS_ABI_LAYOUT_FREEZE_H_ */
