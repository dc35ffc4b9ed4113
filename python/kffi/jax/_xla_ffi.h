// python/kffi/jax/_xla_ffi.h: kffi's own declaration of the part of XLA's FFI C API that the JAX
// handler uses.
//
// The handler ships prebuilt with kffi, so it cannot be compiled against the headers of whichever
// jaxlib is installed; it is compiled against this file instead, and one binary serves every
// jaxlib whose XLA FFI API is 0.x with x >= KFFI_XLA_FFI_MIN_MINOR. Names are XLA's, so that the
// handler's code reads like any XLA FFI code; the binary layout (field order and types, enum
// values, the slots of XLA_FFI_Api) is XLA's, which is what crosses the boundary.
// tests/python/kffi_jax/test_jax_handler.py compiles this file next to jaxlib's
// xla/ffi/api/c_api.h and checks every size, offset and value declared here against it.
//
// Why the range starts at 0.1: API 0.0 (jaxlib 0.4.31 and older) has no extensions, so XLA never
// asks a handler for its version or traits. From 0.1 on (jaxlib 0.4.33 to 0.10 checked), every
// struct used here and every XLA_FFI_Api slot up to XLA_FFI_DeviceMemory_Free keep their places;
// data types and slots were added (the unused slots after XLA_FFI_DeviceMemory_Free moved once,
// within 0.1, when XLA_FFI_ThreadPool_NumThreads went in before XLA_FFI_Future_Create).
//
// Only what the handler touches is declared: structs that XLA allocates and hands over
// (XLA_FFI_Api, XLA_FFI_CallFrame, XLA_FFI_Metadata) are declared up to the last field used,
// and the unused slots of XLA_FFI_Api are plain pointers that keep the later slots in place.
// No macro takes one of XLA's names, the system headers come first, and each struct is declared
// on its own before a typedef names it (`typedef struct X X;` alone would name a struct X already
// declared outside): a test includes this file inside a C++ namespace in the same translation
// unit as jaxlib's header.
// SPDX-License-Identifier: Apache-2.0
#ifndef KFFI_JAX_XLA_FFI_H_
#define KFFI_JAX_XLA_FFI_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// The XLA FFI API versions the handler works with: major 0, minor from this one on.
enum { KFFI_XLA_FFI_MAJOR = 0, KFFI_XLA_FFI_MIN_MINOR = 1 };

// XLA's "struct size": the bytes up to the end of a struct's last field, which XLA compares
// (>=) with the size it expects of every argument struct.
#define KFFI_XLA_FFI_SIZE_TO(type, last_field) \
  (offsetof(type, last_field) + sizeof(((type*)0)->last_field))

// ---- Extensions and versions ----------------------------------------------------------------

typedef enum {
  XLA_FFI_Extension_Metadata = 1,  // XLA asks a handler for its metadata
} XLA_FFI_Extension_Type;

typedef struct XLA_FFI_Extension_Base {
  size_t struct_size;
  XLA_FFI_Extension_Type type;
  struct XLA_FFI_Extension_Base* next;
} XLA_FFI_Extension_Base;

typedef struct XLA_FFI_Api_Version {
  size_t struct_size;
  XLA_FFI_Extension_Base* extension_start;
  int major_version;
  int minor_version;
} XLA_FFI_Api_Version;
enum { XLA_FFI_Api_Version_STRUCT_SIZE = KFFI_XLA_FFI_SIZE_TO(XLA_FFI_Api_Version, minor_version) };

// ---- Errors -----------------------------------------------------------------------------------

// Opaque: made by XLA_FFI_Error_Create, owned by whoever receives it.
struct XLA_FFI_Error;
typedef struct XLA_FFI_Error XLA_FFI_Error;

// absl status codes; the handler maps the kinds of kffi errors onto these.
typedef enum {
  XLA_FFI_Error_Code_INVALID_ARGUMENT = 3,
  XLA_FFI_Error_Code_RESOURCE_EXHAUSTED = 8,
  XLA_FFI_Error_Code_FAILED_PRECONDITION = 9,
  XLA_FFI_Error_Code_UNIMPLEMENTED = 12,
  XLA_FFI_Error_Code_INTERNAL = 13,
} XLA_FFI_Error_Code;

typedef struct XLA_FFI_Error_Create_Args {
  size_t struct_size;
  XLA_FFI_Extension_Base* extension_start;
  const char* message;
  XLA_FFI_Error_Code errc;
} XLA_FFI_Error_Create_Args;
enum {
  XLA_FFI_Error_Create_Args_STRUCT_SIZE = KFFI_XLA_FFI_SIZE_TO(XLA_FFI_Error_Create_Args, errc)
};
typedef XLA_FFI_Error* XLA_FFI_Error_Create(XLA_FFI_Error_Create_Args* args);

typedef struct XLA_FFI_Error_GetMessage_Args {
  size_t struct_size;
  XLA_FFI_Extension_Base* extension_start;
  XLA_FFI_Error* error;
  const char* message;  // set by XLA; owned by the error
} XLA_FFI_Error_GetMessage_Args;
enum {
  XLA_FFI_Error_GetMessage_Args_STRUCT_SIZE =
      KFFI_XLA_FFI_SIZE_TO(XLA_FFI_Error_GetMessage_Args, message)
};
typedef void XLA_FFI_Error_GetMessage(XLA_FFI_Error_GetMessage_Args* args);

typedef struct XLA_FFI_Error_Destroy_Args {
  size_t struct_size;
  XLA_FFI_Extension_Base* extension_start;
  XLA_FFI_Error* error;
} XLA_FFI_Error_Destroy_Args;
enum {
  XLA_FFI_Error_Destroy_Args_STRUCT_SIZE = KFFI_XLA_FFI_SIZE_TO(XLA_FFI_Error_Destroy_Args, error)
};
typedef void XLA_FFI_Error_Destroy(XLA_FFI_Error_Destroy_Args* args);

// ---- Data types (xla::PrimitiveType's numbers) ------------------------------------------------

// The element types the handler converts to DLPack; a number not listed has no DLPack dtype.
typedef enum {
  XLA_FFI_DataType_PRED = 1,
  XLA_FFI_DataType_S8 = 2,
  XLA_FFI_DataType_S16 = 3,
  XLA_FFI_DataType_S32 = 4,
  XLA_FFI_DataType_S64 = 5,
  XLA_FFI_DataType_U8 = 6,
  XLA_FFI_DataType_U16 = 7,
  XLA_FFI_DataType_U32 = 8,
  XLA_FFI_DataType_U64 = 9,
  XLA_FFI_DataType_F16 = 10,
  XLA_FFI_DataType_F32 = 11,
  XLA_FFI_DataType_F64 = 12,
  XLA_FFI_DataType_C64 = 15,
  XLA_FFI_DataType_BF16 = 16,
  XLA_FFI_DataType_C128 = 18,
  XLA_FFI_DataType_F8E5M2 = 19,
  XLA_FFI_DataType_F8E4M3FN = 20,
  XLA_FFI_DataType_S4 = 21,
  XLA_FFI_DataType_U4 = 22,
  XLA_FFI_DataType_F8E4M3B11FNUZ = 23,
  XLA_FFI_DataType_F8E5M2FNUZ = 24,
  XLA_FFI_DataType_F8E4M3FNUZ = 25,
  XLA_FFI_DataType_S2 = 26,
  XLA_FFI_DataType_U2 = 27,
  XLA_FFI_DataType_F8E4M3 = 28,
  XLA_FFI_DataType_F8E3M4 = 29,
  XLA_FFI_DataType_S1 = 30,
  XLA_FFI_DataType_U1 = 31,
  XLA_FFI_DataType_F4E2M1FN = 32,
  XLA_FFI_DataType_F8E8M0FNU = 33,
} XLA_FFI_DataType;

// ---- Arguments, results, attributes -----------------------------------------------------------

typedef struct XLA_FFI_Buffer {
  size_t struct_size;
  XLA_FFI_Extension_Base* extension_start;
  XLA_FFI_DataType dtype;
  void* data;
  int64_t rank;
  int64_t* dims;  // rank entries, row-major
} XLA_FFI_Buffer;

typedef enum {
  XLA_FFI_ArgType_BUFFER = 1,
} XLA_FFI_ArgType;

typedef enum {
  XLA_FFI_RetType_BUFFER = 1,
} XLA_FFI_RetType;

// Dictionaries (2) are refused by the handler's default case, so they need no name here.
typedef enum {
  XLA_FFI_AttrType_ARRAY = 1,
  XLA_FFI_AttrType_SCALAR = 3,
  XLA_FFI_AttrType_STRING = 4,
} XLA_FFI_AttrType;

// A string that need not end in NUL.
typedef struct XLA_FFI_ByteSpan {
  const char* ptr;
  size_t len;
} XLA_FFI_ByteSpan;

typedef struct XLA_FFI_Scalar {
  XLA_FFI_DataType dtype;
  void* value;
} XLA_FFI_Scalar;

typedef struct XLA_FFI_Array {
  XLA_FFI_DataType dtype;
  size_t size;
  void* data;
} XLA_FFI_Array;

typedef struct XLA_FFI_Args {
  size_t struct_size;
  XLA_FFI_Extension_Base* extension_start;
  int64_t size;
  XLA_FFI_ArgType* types;
  void** args;  // XLA_FFI_Buffer* for XLA_FFI_ArgType_BUFFER
} XLA_FFI_Args;

typedef struct XLA_FFI_Rets {
  size_t struct_size;
  XLA_FFI_Extension_Base* extension_start;
  int64_t size;
  XLA_FFI_RetType* types;
  void** rets;  // XLA_FFI_Buffer* for XLA_FFI_RetType_BUFFER
} XLA_FFI_Rets;

typedef struct XLA_FFI_Attrs {
  size_t struct_size;
  XLA_FFI_Extension_Base* extension_start;
  int64_t size;
  XLA_FFI_AttrType* types;
  XLA_FFI_ByteSpan** names;  // sorted by name
  void** attrs;              // XLA_FFI_Scalar*, XLA_FFI_Array* or XLA_FFI_ByteSpan*, by type
} XLA_FFI_Attrs;

// ---- The call ---------------------------------------------------------------------------------

// Opaque: what the runtime functions (stream, device memory) need to find the running call.
struct XLA_FFI_ExecutionContext;
typedef struct XLA_FFI_ExecutionContext XLA_FFI_ExecutionContext;

struct XLA_FFI_Api;
typedef struct XLA_FFI_Api XLA_FFI_Api;

typedef enum {
  XLA_FFI_ExecutionStage_EXECUTE = 3,  // the only stage the handler binds
} XLA_FFI_ExecutionStage;

// Declared up to `attrs`, the last field the handler reads (XLA's struct size ends there too).
typedef struct XLA_FFI_CallFrame {
  size_t struct_size;
  XLA_FFI_Extension_Base* extension_start;
  const XLA_FFI_Api* api;  // null when XLA asks for metadata (jaxlib 0.7 and older)
  XLA_FFI_ExecutionContext* ctx;
  XLA_FFI_ExecutionStage stage;
  XLA_FFI_Args args;
  XLA_FFI_Rets rets;
  XLA_FFI_Attrs attrs;
} XLA_FFI_CallFrame;
enum { XLA_FFI_CallFrame_STRUCT_SIZE = KFFI_XLA_FFI_SIZE_TO(XLA_FFI_CallFrame, attrs) };

typedef XLA_FFI_Error* XLA_FFI_Handler(XLA_FFI_CallFrame* call_frame);

enum XLA_FFI_Handler_TraitsBits {
  // Calls launch the same device work every time, so XLA may capture them into CUDA graphs.
  XLA_FFI_HANDLER_TRAITS_COMMAND_BUFFER_COMPATIBLE = 1u << 0,
};
typedef uint32_t XLA_FFI_Handler_Traits;

// ---- Metadata (what XLA asks a handler at registration) -------------------------------------

// Declared up to `traits` (XLA's struct size ends there; newer XLA has more after it, which XLA
// fills in itself).
typedef struct XLA_FFI_Metadata {
  size_t struct_size;
  XLA_FFI_Api_Version api_version;
  XLA_FFI_Handler_Traits traits;
} XLA_FFI_Metadata;
enum { XLA_FFI_Metadata_STRUCT_SIZE = KFFI_XLA_FFI_SIZE_TO(XLA_FFI_Metadata, traits) };

typedef struct XLA_FFI_Metadata_Extension {
  XLA_FFI_Extension_Base extension_base;
  XLA_FFI_Metadata* metadata;
} XLA_FFI_Metadata_Extension;
enum {
  XLA_FFI_Metadata_Extension_STRUCT_SIZE =
      KFFI_XLA_FFI_SIZE_TO(XLA_FFI_Metadata_Extension, metadata)
};

// ---- Runtime functions the handler calls ------------------------------------------------------

typedef struct XLA_FFI_Stream_Get_Args {
  size_t struct_size;
  XLA_FFI_Extension_Base* extension_start;
  XLA_FFI_ExecutionContext* ctx;
  void* stream;  // set by XLA: the platform's stream (a cudaStream_t on CUDA)
} XLA_FFI_Stream_Get_Args;
enum {
  XLA_FFI_Stream_Get_Args_STRUCT_SIZE = KFFI_XLA_FFI_SIZE_TO(XLA_FFI_Stream_Get_Args, stream)
};
typedef XLA_FFI_Error* XLA_FFI_Stream_Get(XLA_FFI_Stream_Get_Args* args);

typedef struct XLA_FFI_DeviceMemory_Allocate_Args {
  size_t struct_size;
  XLA_FFI_Extension_Base* extension_start;
  XLA_FFI_ExecutionContext* ctx;
  size_t size;
  size_t alignment;
  void* data;  // set by XLA
} XLA_FFI_DeviceMemory_Allocate_Args;
enum {
  XLA_FFI_DeviceMemory_Allocate_Args_STRUCT_SIZE =
      KFFI_XLA_FFI_SIZE_TO(XLA_FFI_DeviceMemory_Allocate_Args, data)
};
typedef XLA_FFI_Error* XLA_FFI_DeviceMemory_Allocate(XLA_FFI_DeviceMemory_Allocate_Args* args);

typedef struct XLA_FFI_DeviceMemory_Free_Args {
  size_t struct_size;
  XLA_FFI_Extension_Base* extension_start;
  XLA_FFI_ExecutionContext* ctx;
  size_t size;
  void* data;
} XLA_FFI_DeviceMemory_Free_Args;
enum {
  XLA_FFI_DeviceMemory_Free_Args_STRUCT_SIZE =
      KFFI_XLA_FFI_SIZE_TO(XLA_FFI_DeviceMemory_Free_Args, data)
};
typedef XLA_FFI_Error* XLA_FFI_DeviceMemory_Free(XLA_FFI_DeviceMemory_Free_Args* args);

typedef struct XLA_FFI_DeviceOrdinal_Get_Args {
  size_t struct_size;
  XLA_FFI_Extension_Base* extension_start;
  XLA_FFI_ExecutionContext* ctx;
  int32_t device_ordinal;  // set by XLA
} XLA_FFI_DeviceOrdinal_Get_Args;
enum {
  XLA_FFI_DeviceOrdinal_Get_Args_STRUCT_SIZE =
      KFFI_XLA_FFI_SIZE_TO(XLA_FFI_DeviceOrdinal_Get_Args, device_ordinal)
};
typedef XLA_FFI_Error* XLA_FFI_DeviceOrdinal_Get(XLA_FFI_DeviceOrdinal_Get_Args* args);

// ---- The API table --------------------------------------------------------------------------

// A slot of the table the handler never calls: only its place matters.
typedef void (*KFFI_XLA_FFI_Unused)(void);

// Declared up to XLA_FFI_DeviceOrdinal_Get, the last slot used. Every slot up to
// XLA_FFI_DeviceMemory_Free exists from API 0.1 on; XLA_FFI_DeviceOrdinal_Get was added within
// 0.1 (jaxlib 0.5.3 lacks it, 0.6.0 has it), so the handler reads it only where struct_size
// covers it. Runtimes up to jaxlib 0.5 report a struct_size that ends at XLA_FFI_Stream_Get
// although their table goes on: the slots up to XLA_FFI_DeviceMemory_Free are there all the same,
// and XLA_FFI_DeviceOrdinal_Get counts as absent, as it is in those releases.
struct XLA_FFI_Api {
  size_t struct_size;
  XLA_FFI_Extension_Base* extension_start;
  XLA_FFI_Api_Version api_version;
  const void* internal_api;
  XLA_FFI_Error_Create* XLA_FFI_Error_Create;
  XLA_FFI_Error_GetMessage* XLA_FFI_Error_GetMessage;
  XLA_FFI_Error_Destroy* XLA_FFI_Error_Destroy;
  KFFI_XLA_FFI_Unused XLA_FFI_Handler_Register;
  XLA_FFI_Stream_Get* XLA_FFI_Stream_Get;
  KFFI_XLA_FFI_Unused XLA_FFI_Type_Register;  // XLA_FFI_TypeId_Register before API 0.2
  KFFI_XLA_FFI_Unused XLA_FFI_ExecutionContext_Get;
  KFFI_XLA_FFI_Unused XLA_FFI_State_Set;
  KFFI_XLA_FFI_Unused XLA_FFI_State_Get;
  XLA_FFI_DeviceMemory_Allocate* XLA_FFI_DeviceMemory_Allocate;
  XLA_FFI_DeviceMemory_Free* XLA_FFI_DeviceMemory_Free;
  KFFI_XLA_FFI_Unused XLA_FFI_ThreadPool_Schedule;
  KFFI_XLA_FFI_Unused XLA_FFI_ThreadPool_NumThreads;
  KFFI_XLA_FFI_Unused XLA_FFI_Future_Create;
  KFFI_XLA_FFI_Unused XLA_FFI_Future_SetAvailable;
  KFFI_XLA_FFI_Unused XLA_FFI_Future_SetError;
  KFFI_XLA_FFI_Unused XLA_FFI_RunId_Get;
  XLA_FFI_DeviceOrdinal_Get* XLA_FFI_DeviceOrdinal_Get;
};

#ifdef __cplusplus
}
#endif

#endif  // KFFI_JAX_XLA_FFI_H_
