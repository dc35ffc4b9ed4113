/* include/kffi/dlpack.h: DLPack 1.x declarations, written from the DLPack specification.
 *
 * The names and the include guard are DLPack's own, so this header composes with a dlpack.h that
 * another package (PyTorch, NumPy, CuPy) ships: whichever is included first wins and the layouts
 * are identical by specification. kffi needs DLPack 1.3 or a later 1.x (the versioned tensor,
 * its flags and the exchange API); when another dlpack.h came first, its version is checked
 * here, since its declarations are the ones every kffi header then uses. */
/* SPDX-License-Identifier: Apache-2.0 */
#if defined(DLPACK_DLPACK_H_) && !defined(KFFI_DLPACK_H_)
#if !defined(DLPACK_MAJOR_VERSION) || !defined(DLPACK_MINOR_VERSION)
#error \
    "kffi: a dlpack.h older than DLPack 1.0 (no DLPACK_MAJOR_VERSION) was included before kffi's headers; kffi needs DLPack 1.3 or a later 1.x: update that package's dlpack.h or include kffi's headers first"
#elif DLPACK_MAJOR_VERSION != 1
#error \
    "kffi: the dlpack.h included before kffi's headers declares another DLPack major version; kffi reads DLPack 1.x (1.3 or later)"
#elif DLPACK_MINOR_VERSION < 3
#error \
    "kffi: the dlpack.h included before kffi's headers declares DLPack 1.0 to 1.2; kffi needs DLPack 1.3 or a later 1.x (the exchange API): update that package's dlpack.h or include kffi's headers first"
#endif
#endif

#ifndef DLPACK_DLPACK_H_
#define DLPACK_DLPACK_H_
/* Marks that these declarations are kffi's own (the check above is for other dlpack.h files). */
#define KFFI_DLPACK_H_ 1

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
#define DLPACK_EXTERN_C extern "C"
#else
#define DLPACK_EXTERN_C
#endif

#ifndef DLPACK_DLL
#define DLPACK_DLL
#endif

/** Major version of the DLPack specification these declarations follow. */
#define DLPACK_MAJOR_VERSION 1
/** Minor version of the DLPack specification these declarations follow. */
#define DLPACK_MINOR_VERSION 3

#ifdef __cplusplus
extern "C" {
#endif

/** A DLPack version pair; a consumer refuses a major version it does not know. */
typedef struct {
  uint32_t major;
  uint32_t minor;
} DLPackVersion;

/** Device kinds; the numbers are fixed by the specification. */
#ifdef __cplusplus
typedef enum : int32_t {
#else
typedef enum {
#endif
  kDLCPU = 1,
  kDLCUDA = 2,
  kDLCUDAHost = 3,
  kDLOpenCL = 4,
  kDLVulkan = 7,
  kDLMetal = 8,
  kDLVPI = 9,
  kDLROCM = 10,
  kDLROCMHost = 11,
  kDLExtDev = 12,
  kDLCUDAManaged = 13,
  kDLOneAPI = 14,
  kDLWebGPU = 15,
  kDLHexagon = 16,
  kDLMAIA = 17,
  kDLTrn = 18,
} DLDeviceType;

/** A device: its kind and its index among devices of that kind. */
typedef struct {
  DLDeviceType device_type;
  int32_t device_id;
} DLDevice;

/** Type codes of DLDataType.code; the numbers are fixed by the specification. */
typedef enum {
  kDLInt = 0U,
  kDLUInt = 1U,
  kDLFloat = 2U,
  kDLOpaqueHandle = 3U,
  kDLBfloat = 4U,
  kDLComplex = 5U,
  kDLBool = 6U,
  kDLFloat8_e3m4 = 7U,
  kDLFloat8_e4m3 = 8U,
  kDLFloat8_e4m3b11fnuz = 9U,
  kDLFloat8_e4m3fn = 10U,
  kDLFloat8_e4m3fnuz = 11U,
  kDLFloat8_e5m2 = 12U,
  kDLFloat8_e5m2fnuz = 13U,
  kDLFloat8_e8m0fnu = 14U,
  kDLFloat6_e2m3fn = 15U,
  kDLFloat6_e3m2fn = 16U,
  kDLFloat4_e2m1fn = 17U,
} DLDataTypeCode;

/** An element type: code, bits per lane and number of lanes (4 bytes in all). */
typedef struct {
  uint8_t code;
  uint8_t bits;
  uint16_t lanes;
} DLDataType;

/** A borrowed view of a strided array. strides may be NULL (compact row-major). */
typedef struct {
  void* data;
  DLDevice device;
  int32_t ndim;
  DLDataType dtype;
  int64_t* shape;
  int64_t* strides;
  uint64_t byte_offset;
} DLTensor;

/** A tensor handed from a producer to a consumer (pre-1.0 form). The consumer calls deleter once.
 */
typedef struct DLManagedTensor {
  DLTensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(struct DLManagedTensor* self);
} DLManagedTensor;

/** The data must not be written through this tensor. */
#define DLPACK_FLAG_BITMASK_READ_ONLY (1UL << 0UL)
/** The producer made a copy: the consumer is the sole owner of the data. */
#define DLPACK_FLAG_BITMASK_IS_COPIED (1UL << 1UL)
/** Sub-byte element types are padded to whole bytes. */
#define DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED (1UL << 2UL)

/** A tensor handed from a producer to a consumer (1.x form, versioned, with flags). */
typedef struct DLManagedTensorVersioned {
  DLPackVersion version;
  void* manager_ctx;
  void (*deleter)(struct DLManagedTensorVersioned* self);
  uint64_t flags;
  DLTensor dl_tensor;
} DLManagedTensorVersioned;

/** Reports an error from a DLPack C function: kind is an exception kind such as "MemoryError". */
typedef void (*DLPackSetError)(void* error_ctx, const char* kind, const char* message);

/** Allocates a new tensor in the producer framework, shaped like prototype (dtype, ndim, shape,
 * device are read). Returns 0 and an owned *out, or -1 after calling SetError. */
typedef int (*DLPackManagedTensorAllocator)(DLTensor* prototype, DLManagedTensorVersioned** out,
                                            void* error_ctx,
                                            void (*SetError)(void* error_ctx, const char* kind,
                                                             const char* message));

/** Exports a Python object (a PyObject*) as an owned versioned tensor, without stream sync.
 * Returns 0, or -1 with a Python exception set. */
typedef int (*DLPackManagedTensorFromPyObjectNoSync)(void* py_object,
                                                     DLManagedTensorVersioned** out);

/** Wraps an owned versioned tensor as a new Python object of the producer's type (PyObject**).
 * Returns 0, or -1 with a Python exception set. */
typedef int (*DLPackManagedTensorToPyObjectNoSync)(DLManagedTensorVersioned* tensor,
                                                   void** out_py_object);

/** Fills a borrowed DLTensor that views a Python object; valid while the object lives. */
typedef int (*DLPackDLTensorFromPyObjectNoSync)(void* py_object, DLTensor* out);

/** Reads the producer's current work stream for a device. Returns 0, or -1 with a Python
 * exception set. */
typedef int (*DLPackCurrentWorkStream)(DLDeviceType device_type, int32_t device_id,
                                       void** out_current_stream);

/** Common header of an exchange API table: its version and the previous table, if any. */
typedef struct DLPackExchangeAPIHeader {
  DLPackVersion version;
  struct DLPackExchangeAPIHeader* prev_api;
} DLPackExchangeAPIHeader;

/** The DLPack C exchange API a framework type publishes as type(x).__dlpack_c_exchange_api__,
 * a PyCapsule named "dlpack_exchange_api". Entries other than the header may be NULL. */
typedef struct DLPackExchangeAPI {
  DLPackExchangeAPIHeader header;
  DLPackManagedTensorAllocator managed_tensor_allocator;
  DLPackManagedTensorFromPyObjectNoSync managed_tensor_from_py_object_no_sync;
  DLPackManagedTensorToPyObjectNoSync managed_tensor_to_py_object_no_sync;
  DLPackDLTensorFromPyObjectNoSync dltensor_from_py_object_no_sync;
  DLPackCurrentWorkStream current_work_stream;
} DLPackExchangeAPI;

#ifdef __cplusplus
}  // extern "C"
#endif
#endif  // DLPACK_DLPACK_H_
