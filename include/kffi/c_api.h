/* include/kffi/c_api.h: the frozen kffi C ABI (C99 plus C11 anonymous unions, which gcc and
 * clang accept in C99 mode; also valid C++17).
 *
 * Ownership words used below:
 *   borrowed  the callee may read it during the call only; the caller keeps ownership.
 *   owned     the receiver holds one strong reference and must release it (KFFIObjectDecRef).
 *   moved     ownership passes to the callee; the caller must not release it again.
 * Every function returns 0 on success and -1 on error, with the error left in the calling
 * thread's slot (KFFIErrorMoveFromRaised), unless its comment says otherwise. No C++ exception
 * ever crosses this boundary. docs/abi.md holds the versioning and compatibility rules. */
/* SPDX-License-Identifier: Apache-2.0 */
#ifndef KFFI_C_API_H_
#define KFFI_C_API_H_

#include <stddef.h>
#include <stdint.h>

#include "kffi/dlpack.h"

/* ---------------------------------------------------------------------------------------------
 * Version. One source: the build, the Python package and the docs read these macros.
 * ------------------------------------------------------------------------------------------- */
#define KFFI_VERSION_MAJOR 0
#define KFFI_VERSION_MINOR 5
#define KFFI_VERSION_PATCH 0
/** The ABI version: bumped on any break of layout or behaviour (docs/abi.md). */
#define KFFI_ABI_VERSION 1

#if defined(_WIN32)
#define KFFI_DLL_EXPORT __declspec(dllexport)
#else
#define KFFI_DLL_EXPORT __attribute__((visibility("default")))
#endif

#ifndef KFFI_DLL
#define KFFI_DLL KFFI_DLL_EXPORT
#endif

#ifdef __cplusplus
extern "C" {
#endif

/** Versions of the runtime that is loaded (not the header that was compiled against). */
typedef struct {
  uint32_t major;
  uint32_t minor;
  uint32_t patch;
  uint32_t abi;
} KFFIVersion;

/** Writes the loaded runtime's version into *out (borrowed). Never fails. */
KFFI_DLL void KFFIGetVersion(KFFIVersion* out);

/* ---------------------------------------------------------------------------------------------
 * Values
 * ------------------------------------------------------------------------------------------- */

/** Type indices. Values below kKFFIStaticObjectBegin are plain values held inline in KFFIAny;
 * values from it on are objects (KFFIAny.v_obj). Indices from kKFFIDynObjectBegin on are
 * allocated at run time by type key (KFFITypeGetOrAllocIndex). */
#ifdef __cplusplus
enum KFFITypeIndex : int32_t {
#else
typedef enum {
#endif
  kKFFIAny = -1,
  kKFFINone = 0,
  kKFFIInt = 1,
  kKFFIBool = 2,
  kKFFIFloat = 3,
  kKFFIOpaquePtr = 4,
  kKFFIDataType = 5,
  kKFFIDevice = 6,
  kKFFIDLTensorPtr = 7,
  kKFFIRawStr = 8,
  kKFFIByteArrayPtr = 9,
  kKFFIObjectRValueRef = 10,
  kKFFISmallStr = 11,
  kKFFISmallBytes = 12,
  kKFFIStaticObjectBegin = 64,
  kKFFIObject = 64,
  kKFFIStr = 65,
  kKFFIBytes = 66,
  kKFFIError = 67,
  kKFFIFunction = 68,
  kKFFIShape = 69,
  kKFFITensor = 70,
  kKFFIArray = 71,
  kKFFIMap = 72,
  kKFFIModule = 73,
  kKFFIOpaquePyObject = 74,
  kKFFIList = 75,
  kKFFIDict = 76,
  kKFFIDynObjectBegin = 128
#ifdef __cplusplus
};
#else
} KFFITypeIndex;
#endif

/** An opaque object pointer: points at a KFFIObject header. */
typedef void* KFFIObjectHandle;

/** Header shared by every object (24 bytes). The payload ("cell") follows it directly. */
typedef struct KFFIObject {
  /** Strong count in the low 32 bits, weak count in the high 32 bits; updated atomically.
   * A new object starts at strong 1, weak 1 (all strong references together hold one weak
   * reference). The strong count reaching 0 calls deleter(Strong) and then drops that weak
   * reference; the weak count reaching 0 calls deleter(Weak). When the last strong reference
   * goes with no other weak reference, one deleter(Both) call does both. */
  uint64_t combined_ref_count;
  /** The object's type index (>= kKFFIStaticObjectBegin). */
  int32_t type_index;
  /** Reserved; zero. */
  uint32_t padding;
  /** Called with flags kKFFIObjectDeleterFlagStrong (run the destructor), ...Weak (free the
   * memory) or both; travels with the object so any library can release it. */
  union {
    void (*deleter)(void* self, int flags);
    int64_t ensure_align_;
  };
} KFFIObject;

/** Deleter flags: strong runs the destructor, weak frees the memory. */
#define kKFFIObjectDeleterFlagStrong 1
#define kKFFIObjectDeleterFlagWeak 2
#define kKFFIObjectDeleterFlagBoth 3

/** A value (16 bytes). zero_padding is 0 except for small str/bytes and for tensor arguments that
 * carry flags, so stored values compare and hash bytewise. Objects in a KFFIAny are owned or
 * borrowed as the surrounding call says. */
typedef struct {
  int32_t type_index;
  union {
    /** Must be 0 for every type except kKFFISmallStr / kKFFISmallBytes, and the tensor arguments
     * below. */
    uint32_t zero_padding;
    /** Length (0..7) of the bytes stored inline in v_bytes. */
    uint32_t small_str_len;
    /** kKFFIDLTensorPtr or kKFFITensor passed as a call argument (a borrowed view): a bit set of
     * kKFFITensorFlag* saying what the callee may do with the memory. 0 (writable) is what every
     * producer that predates the flags sends. Added in 0.3. */
    uint32_t tensor_flags;
  };
  union {
    int64_t v_int64;
    double v_float64;
    void* v_ptr;
    const char* v_c_str;
    KFFIObject* v_obj;
    DLDataType v_dtype;
    DLDevice v_device;
    char v_bytes[8];
    uint64_t v_uint64;
  };
} KFFIAny;

/** tensor_flags bit: the argument's memory must not be written (a read-only NumPy array, an
 * immutable JAX array, a DLPack tensor marked DLPACK_FLAG_BITMASK_READ_ONLY). Same value as
 * DLPack's read-only bit. Added in 0.3. */
#define kKFFITensorFlagReadOnly 1

/** A borrowed run of bytes; not NUL-terminated unless said so. */
typedef struct {
  const char* data;
  size_t size;
} KFFIByteArray;

/** Cell of Str and Bytes objects: data is NUL-terminated for convenience (size excludes it). */
typedef KFFIByteArray KFFIStrCell;

/** Cell of Shape objects. */
typedef struct {
  const int64_t* data;
  size_t size;
} KFFIShapeCell;

/** Cell of Array and List objects: a run of owned KFFIAny values. */
typedef struct {
  void* data;
  int64_t size;
  int64_t capacity;
  /** Frees data (not the elements); NULL when data is stored inline after the cell. */
  void (*data_deleter)(void* data);
} KFFISeqCell;

/** The call convention. handle: the function object (or NULL for exported symbols); args:
 * borrowed; result: owned by the caller, who sets its type_index to kKFFINone before the call.
 * Returns 0, -1 (error in the thread's slot) or -2 (a Python signal is pending). */
typedef int (*KFFISafeCallType)(void* handle, const KFFIAny* args, int32_t num_args,
                                KFFIAny* result);

/** Cell of Function objects. */
typedef struct {
  /** Entry point, called with the function object itself as handle. */
  KFFISafeCallType safe_call;
  /** Reserved for a same-runtime fast path; NULL in functions made through this C API. */
  void* cpp_call;
} KFFIFunctionCell;

/** Cell of Opaque objects (e.g. kKFFIOpaquePyObject): the foreign pointer (its deleter is kept
 * privately after the cell). */
typedef struct {
  void* handle;
} KFFIOpaqueObjectCell;

/** Backtrace update modes for KFFIErrorCell.update_backtrace. */
#define kKFFIBacktraceUpdateModeReplace 0
#define kKFFIBacktraceUpdateModeAppend 1

/** Cell of Error objects. The byte arrays are owned by the error object. */
typedef struct {
  /** The kind: "TypeError", "ValueError", "RuntimeError", ..., "InternalError". */
  KFFIByteArray kind;
  KFFIByteArray message;
  /** Frames, one a line, most recent first: `File "path", line N, in func`. */
  KFFIByteArray backtrace;
  /** Appends older frames (or replaces all of them) on an error made by any library. */
  void (*update_backtrace)(KFFIObjectHandle self, const KFFIByteArray* backtrace,
                           int32_t update_mode);
  /** The error that caused this one, owned; NULL when none. */
  KFFIObjectHandle cause_chain;
  /** Extra context for a language binding (e.g. the Python exception), owned; may be NULL. */
  KFFIObjectHandle extra_context;
} KFFIErrorCell;

/* ---------------------------------------------------------------------------------------------
 * Objects
 * ------------------------------------------------------------------------------------------- */

/** Adds a strong reference. */
KFFI_DLL int KFFIObjectIncRef(KFFIObjectHandle obj);
/** Drops a strong reference; the last one runs the deleter. NULL is accepted and ignored. */
KFFI_DLL int KFFIObjectDecRef(KFFIObjectHandle obj);
/** Adds a weak reference (keeps the memory, not the value). */
KFFI_DLL int KFFIObjectIncWeakRef(KFFIObjectHandle obj);
/** Drops a weak reference; the last one frees the memory. */
KFFI_DLL int KFFIObjectDecWeakRef(KFFIObjectHandle obj);
/** Turns a weak reference into a strong one: *out is owned, or NULL when the object is dead. */
KFFI_DLL int KFFIObjectWeakLock(KFFIObjectHandle obj, KFFIObjectHandle* out);
/** Wraps a foreign pointer: the object owns handle and calls deleter(handle) once when the last
 * strong reference goes. type_index names what it holds (e.g. kKFFIOpaquePyObject). *out owned. */
KFFI_DLL int KFFIObjectCreateOpaque(void* handle, int32_t type_index, void (*deleter)(void*),
                                    KFFIObjectHandle* out);

/** Reads the cell that follows an object's header. */
static inline void* KFFIObjectGetCellPtr(KFFIObjectHandle obj) {
  return (void*)((char*)obj + sizeof(KFFIObject));
}

/* ---------------------------------------------------------------------------------------------
 * Types
 * ------------------------------------------------------------------------------------------- */

/** What the registry knows of a type; lives as long as the process. */
typedef struct KFFITypeInfo {
  int32_t type_index;
  /** Depth in the single-inheritance tree: Object is 0, its children 1, ... */
  int32_t type_depth;
  /** The type key, e.g. "ffi.Str"; NUL-terminated. */
  KFFIByteArray type_key;
  /** type_ancestors[d] is the index of the ancestor at depth d, for d < type_depth. */
  const int32_t* type_ancestors;
} KFFITypeInfo;

/** Looks up a registered type key into *out_index; an unknown key is a KeyError. */
KFFI_DLL int KFFITypeKeyToIndex(const KFFIByteArray* type_key, int32_t* out_index);
/** Returns the index of type_key, registering it on first use under parent_type_index at depth
 * type_depth (parent's depth + 1). static_type_index is the fixed index for built-in types, or
 * -1 to allocate one from kKFFIDynObjectBegin on. A key registered again with a different parent
 * is an error. Thread safe. */
KFFI_DLL int KFFITypeGetOrAllocIndex(const KFFIByteArray* type_key, int32_t static_type_index,
                                     int32_t type_depth, int32_t parent_type_index,
                                     int32_t* out_index);
/** The type's information (borrowed, process lifetime), or NULL for an unknown index. */
KFFI_DLL const KFFITypeInfo* KFFIGetTypeInfo(int32_t type_index);

/* ---------------------------------------------------------------------------------------------
 * Reflection: the fields and methods of an object type (added in 0.5). A library registers them
 * once per type (kffi/reflection.h's KFFI_OBJECT_DEF does it at load); a language binding reads
 * them to show an object's fields. Fields are read and written through the type's own getter and
 * setter (compiled into the library that knows the C++ type), never as raw memory.
 * ------------------------------------------------------------------------------------------- */

/** KFFIFieldInfo.flags: the field may be assigned (setter is not NULL). Added in 0.5. */
#define kKFFIFieldFlagWritable 1
/** KFFIFieldInfo.flags: the field is left out of structural == and hash (a counter, a cache:
 * TVM-FFI's SEqHashIgnore and CompareOff). Added in 0.5. */
#define kKFFIFieldFlagCompareOff 2
/** KFFITypeReflection.flags: instances compare and hash by their fields' values (structural
 * equality) instead of by identity. Added in 0.5. */
#define kKFFITypeFlagStructuralEq 1
/** KFFITypeReflection.flags: the type is a box around a plain struct (kffi/reflection.h's
 * KFFI_RECORD): an instance's value is its fields, and a function that takes the struct gets a
 * copy, never the box. So a binding that made an instance, wrote every field and holds its only
 * reference after a call may write every field again and pass it to the next call instead of
 * making a new one. Added in 0.5. */
#define kKFFITypeFlagPlainRecord 2

/** Reads the field at field (the object's address plus the field's offset) into *out (owned).
 * 0, or -1 with the error raised. Added in 0.5. */
typedef int (*KFFIFieldGetter)(void* field, KFFIAny* out);
/** Assigns value (borrowed) to the field at field; a value of the wrong type is a TypeError
 * "expected <type>, got <type>". 0, or -1 with the error raised. Added in 0.5. */
typedef int (*KFFIFieldSetter)(void* field, const KFFIAny* value);

/** One field of an object type. Added in 0.5. */
typedef struct {
  /** The field's name (UTF-8, not empty, unique in its type). */
  KFFIByteArray name;
  /** Byte offset of the field from the start of the object (the KFFIObject header). */
  int64_t offset;
  /** Size of the field in bytes: offset + size never passes the object's size. */
  int64_t size;
  /** The type index of the field's C++ type (kKFFIInt, kKFFIFloat, kKFFIStr, kKFFITensor, an
   * object type's index, or kKFFIAny when it holds any value). */
  int32_t type_index;
  /** kKFFIFieldFlag* bits. */
  int32_t flags;
  /** The field's type as kffi spells it in signatures ("int", "float", "str", "Tensor",
   * "test.Point"). */
  KFFIByteArray type_str;
  KFFIFieldGetter getter;
  /** NULL unless flags has kKFFIFieldFlagWritable. */
  KFFIFieldSetter setter;
} KFFIFieldInfo;

/** One method of an object type: a Function called with the object as its first argument. */
typedef struct {
  /** The method's name (UTF-8, not empty, unique in its type). */
  KFFIByteArray name;
  /** The Function (borrowed at registration; the registry keeps its own reference). */
  KFFIObjectHandle method;
} KFFIMethodInfo;

/** The fields and methods a type declares (not those of its ancestors: a binding walks
 * KFFITypeInfo.type_ancestors for those). Added in 0.5. */
typedef struct {
  int32_t type_index;
  /** kKFFITypeFlag* bits. */
  int32_t flags;
  /** sizeof the C++ object type, header included: every field lies inside it. */
  int64_t object_size;
  int32_t num_fields;
  int32_t num_methods;
  const KFFIFieldInfo* fields;
  const KFFIMethodInfo* methods;
  /** Makes a default-constructed object of the type into *out (owned), or NULL when the type has
   * no default constructor: a language binding builds an object from a record's fields with it
   * (a Python dataclass passed where the object is expected). 0, or -1 with the error raised. */
  int (*creator)(KFFIObjectHandle* out);
} KFFITypeReflection;

/** Registers the reflection of a dynamic type (info borrowed: the runtime copies it). Refused with
 * a ValueError naming the type and the record: an unregistered or static type, a type key or a
 * name that is not UTF-8, a field outside the object (offset before the end of the header, or
 * offset + size past object_size), a missing getter, a setter that disagrees with the writable
 * flag, an unknown flag, a duplicate name, a method that is not a Function, a type whose ancestor
 * chain is inconsistent. Registering the same type again is accepted when the fields are the same
 * (names, offsets, sizes, types and flags: a type whose header two libraries include), and a
 * ValueError otherwise, except that a registration appending fields or methods to the earlier
 * one's (its fields and methods first, same size, flags and creator) replaces it: TVM-FFI's
 * registrations arrive one record at a time. Thread safe. Added in 0.5. */
KFFI_DLL int KFFITypeRegisterReflection(const KFFITypeReflection* info);
/** The reflection registered for type_index (borrowed, process lifetime), or NULL when none.
 * Never fails. Added in 0.5. */
KFFI_DLL const KFFITypeReflection* KFFIGetTypeReflection(int32_t type_index);
/** Finds the field name (borrowed) of obj's type or of its nearest ancestor that declares it:
 * *out_field (borrowed, process lifetime) or NULL when there is none. Added in 0.5. */
KFFI_DLL int KFFIObjectFindField(KFFIObjectHandle obj, const KFFIByteArray* name,
                                 const KFFIFieldInfo** out_field);
/** Reads field name of obj (borrowed) into *out (owned); a field obj's type lacks is an
 * AttributeError naming the type. Added in 0.5. */
KFFI_DLL int KFFIObjectGetField(KFFIObjectHandle obj, const KFFIByteArray* name, KFFIAny* out);
/** Assigns value (borrowed) to field name of obj (borrowed); a read-only or missing field is an
 * AttributeError, a value of the wrong type a TypeError naming "TYPE_KEY.FIELD". Added in 0.5.
 */
KFFI_DLL int KFFIObjectSetField(KFFIObjectHandle obj, const KFFIByteArray* name,
                                const KFFIAny* value);

/* ---------------------------------------------------------------------------------------------
 * Functions
 * ------------------------------------------------------------------------------------------- */

/** Makes a Function object that calls safe_call(self, ...). deleter(self) runs once when the
 * function dies (may be NULL). *out owned. */
KFFI_DLL int KFFIFunctionCreate(void* self, KFFISafeCallType safe_call, void (*deleter)(void* self),
                                KFFIObjectHandle* out);
/** Calls a Function object: args borrowed, *result owned (set to None before calling). */
KFFI_DLL int KFFIFunctionCall(KFFIObjectHandle func, const KFFIAny* args, int32_t num_args,
                              KFFIAny* result);
/** Registers func (borrowed; the registry keeps a reference) under a global name. Registering a
 * taken name is a KeyError unless allow_override is nonzero. */
KFFI_DLL int KFFIFunctionSetGlobal(const KFFIByteArray* name, KFFIObjectHandle func,
                                   int allow_override);
/** Looks up a global function: *out owned, or NULL when no function has that name. */
KFFI_DLL int KFFIFunctionGetGlobal(const KFFIByteArray* name, KFFIObjectHandle* out);
/** Removes a global function; *out_removed is 1 if it existed, else 0. */
KFFI_DLL int KFFIFunctionRemoveGlobal(const KFFIByteArray* name, int* out_removed);
/** Calls visit(ctx, name) for each global name (sorted); a nonzero return stops the walk. */
KFFI_DLL int KFFIFunctionListGlobalNames(int (*visit)(void* ctx, const KFFIByteArray* name),
                                         void* ctx);

/* ---------------------------------------------------------------------------------------------
 * Errors
 * ------------------------------------------------------------------------------------------- */

/** Raises a new error of kind with message in the calling thread's slot (both borrowed). */
KFFI_DLL void KFFIErrorSetRaisedFromCStr(const char* kind, const char* message);
/** Like KFFIErrorSetRaisedFromCStr with the message given as parts to concatenate, so that
 * generated code can share string pieces. */
KFFI_DLL void KFFIErrorSetRaisedFromCStrParts(const char* kind, const char** message_parts,
                                              int32_t num_parts);
/** Raises an error about an argument in kffi's one format of argument errors:
 *   "<subject>: expected <expected>, got <got> (argument #<index> of `<signature>`)"
 * subject names the parameter or a part of it ("x", "x.dtype", "x.shape[0]"). The parenthesis
 * is " (`<signature>`)" when index < 0, and left out when signature is NULL (a check inside the
 * function, which knows the parameter's name only). got NULL: the name of *arg's type (`int`,
 * `Array`; "nothing" when arg is NULL too). expected NULL: got is the whole text after
 * "<subject>: ". kind NULL is "ValueError"; all strings and arg (may be NULL) are borrowed.
 * Where got names *arg's type (or starts with that name: "Array[index 2: str]"), the error
 * records where, for KFFIErrorGetArgumentType. Added in 0.4. */
KFFI_DLL void KFFIErrorSetRaisedArgument(const char* kind, const char* subject,
                                         const char* expected, const char* got, const KFFIAny* arg,
                                         int32_t index, const char* signature);
/** Raises the error of a call to a typed function (KFFI_EXPORT's, kffi::Function's) in kffi's one
 * format of argument errors. The signature is written from name, param_names (comma separated, as
 * KFFI_EXPORT_DOC takes them; a parameter without one is argN) and types (num_params parameter
 * type names, then the return type's) as KFFIFunctionFormatSignature writes it, and:
 *   index -1: the call passed num_args arguments: TypeError
 *     "<name>: expected <num_params> arguments, got <num_args> (`<signature>`)";
 *   index >= 0, got not NULL: argument number index is a value its parameter cannot take:
 *     TypeError "<param>: expected <types[index]>, got <got> (argument #<index> of
 *     `<signature>`)", with arg (the value) recorded as KFFIErrorSetRaisedArgument records it;
 *   index >= 0, got NULL: the parameter's conversion failed with the error raised now (a dtype
 *     string that does not parse): it is raised again as "<param>: <its message> (argument
 *     #<index> of `<signature>`)", its kind and backtrace kept.
 * All inputs are borrowed. The messages of a kernel's argument errors are thus written here, not
 * compiled into every kernel. Added in 0.5. */
KFFI_DLL void KFFIErrorSetRaisedCallArgument(const char* name, const char* param_names,
                                             const KFFIByteArray* types, int32_t num_params,
                                             int32_t index, const char* got, const KFFIAny* arg,
                                             int32_t num_args);
/** Raises the TypeError of data<T>() (or const_data<T>()) on a tensor whose dtype is not T's:
 *   "data<expected>(): expected a tensor of <expected>, got a tensor of <received>"
 * with the dtypes written as KFFIDataTypeToString writes them. Both are borrowed; NULL raises a
 * ValueError naming the argument. Written here so that a kernel compiles no message. Added in
 * 0.5. */
KFFI_DLL void KFFIErrorSetRaisedDataTypeMismatch(const DLDataType* expected,
                                                 const DLDataType* received);
/** Raises the ValueError of a tensor whose layout overflows int64:
 *   "<what>: shape [<shape[0]>, ...] is too large: <why>"
 * what NULL is "Tensor", why NULL is "". shape (ndim sizes, borrowed) may be NULL only when ndim
 * is 0; a negative ndim or a NULL shape raises a ValueError naming the argument. Written here so
 * that a kernel compiles no message. Added in 0.5. */
KFFI_DLL void KFFIErrorSetRaisedShapeTooLarge(const char* what, const int64_t* shape, int32_t ndim,
                                              const char* why);
/** For the calling thread's latest argument error (KFFIErrorSetRaisedArgument, or a contract's
 * type check) whose message names the type of the argument value it is about: when error is that
 * error, *out_arg is the value (the pointer the failed call was given: a language binding finds
 * its own object by it) and bytes [*out_offset, *out_offset + *out_size) of the message are kffi's
 * name of its type, which the binding may replace by the name its caller knows (a Python `list`
 * where kffi says Array), and the result is 1; otherwise 0. Runs on error paths only; never
 * fails. Added in 0.4. */
KFFI_DLL int KFFIErrorGetArgumentType(KFFIObjectHandle error, const KFFIAny** out_arg,
                                      size_t* out_offset, size_t* out_size);
/** Raises an existing error object (borrowed: the slot takes its own reference). */
KFFI_DLL void KFFIErrorSetRaised(KFFIObjectHandle error);
/** Moves the raised error out of the thread's slot: *out owned, or NULL when none is raised. */
KFFI_DLL void KFFIErrorMoveFromRaised(KFFIObjectHandle* out);
/** Makes an error object (inputs borrowed; backtrace may be NULL). *out owned. */
KFFI_DLL int KFFIErrorCreate(const KFFIByteArray* kind, const KFFIByteArray* message,
                             const KFFIByteArray* backtrace, KFFIObjectHandle* out);

/** The cell of an Error object. */
static inline KFFIErrorCell* KFFIErrorGetCellPtr(KFFIObjectHandle error) {
  return (KFFIErrorCell*)((char*)error + sizeof(KFFIObject));
}

/** Formats one backtrace frame `File "filename", line N, in func` (plus a marker when
 * cross_ffi_boundary is nonzero). The result is borrowed, valid until the thread's next call. */
KFFI_DLL const KFFIByteArray* KFFIBacktrace(const char* filename, int lineno, const char* func,
                                            int cross_ffi_boundary);

/* ---------------------------------------------------------------------------------------------
 * Strings, bytes, data types, values
 * ------------------------------------------------------------------------------------------- */

/** Makes a str value from bytes (borrowed): a SmallStr for up to 7 bytes, else an owned Str. */
KFFI_DLL int KFFIStringFromByteArray(const KFFIByteArray* input, KFFIAny* out);
/** Makes a bytes value: SmallBytes for up to 7 bytes, else an owned Bytes object. */
KFFI_DLL int KFFIBytesFromByteArray(const KFFIByteArray* input, KFFIAny* out);
/** Parses "float32", "bfloat16", "int8", "bool", "float32x4", "float8_e4m3fn", ... A bad string
 * is a ValueError naming it. */
KFFI_DLL int KFFIDataTypeFromString(const KFFIByteArray* str, DLDataType* out);
/** Formats a dtype as a str value (owned). */
KFFI_DLL int KFFIDataTypeToString(const DLDataType* dtype, KFFIAny* out);
/** Turns a borrowed view into an owned value: RawStr and ByteArrayPtr are copied into Str/Bytes,
 * ObjectRValueRef is moved from, objects gain a reference. A DLTensorPtr becomes a Tensor that
 * views the same memory without owning it (valid while the caller's tensor is), validated as
 * KFFITensorFromDLPack validates. The owned value has zero_padding 0: a tensor argument marked
 * kKFFITensorFlagReadOnly becomes a Tensor that records the flag (KFFITensorGetFlags). */
KFFI_DLL int KFFIAnyViewToOwnedAny(const KFFIAny* any_view, KFFIAny* out);

/* ---------------------------------------------------------------------------------------------
 * Tensors (cell: a DLTensor)
 * ------------------------------------------------------------------------------------------- */

/** The DLTensor inside a Tensor object. */
static inline DLTensor* KFFITensorGetDLTensorPtr(KFFIObjectHandle tensor) {
  return (DLTensor*)((char*)tensor + sizeof(KFFIObject));
}

/** Takes a DLPack tensor (moved: its deleter runs exactly once, when the Tensor dies or on
 * error). require_alignment (bytes, 0 = none) and require_contiguous are checked. A layout kffi
 * cannot represent is a ValueError naming the shape: ndim outside 0..1024, a NULL shape with
 * ndim > 0, a negative size, or sizes, strides or bytes that overflow int64. *out owned. */
KFFI_DLL int KFFITensorFromDLPack(DLManagedTensor* from, int32_t require_alignment,
                                  int32_t require_contiguous, KFFIObjectHandle* out);
/** Like KFFITensorFromDLPack for a versioned DLPack tensor; its flags are recorded
 * (KFFITensorGetFlags). */
KFFI_DLL int KFFITensorFromDLPackVersioned(DLManagedTensorVersioned* from,
                                           int32_t require_alignment, int32_t require_contiguous,
                                           KFFIObjectHandle* out);
/** The DLPack flags (DLPACK_FLAG_BITMASK_READ_ONLY, ..._IS_COPIED) a Tensor (borrowed) recorded
 * when it was imported or made: a tensor imported read-only stays read-only, and a kernel that
 * receives it as an argument sees kKFFITensorFlagReadOnly. A non-Tensor is a TypeError. Added in
 * 0.3. */
KFFI_DLL int KFFITensorGetFlags(KFFIObjectHandle tensor, uint64_t* out_flags);
/** Exports a Tensor (borrowed) as a DLPack tensor that keeps it alive; *out owned. */
KFFI_DLL int KFFITensorToDLPack(KFFIObjectHandle from, DLManagedTensor** out);
/** Exports a Tensor (borrowed) as a versioned DLPack tensor; *out owned. */
KFFI_DLL int KFFITensorToDLPackVersioned(KFFIObjectHandle from, DLManagedTensorVersioned** out);

/* ---------------------------------------------------------------------------------------------
 * Environment: per thread and per device
 * ------------------------------------------------------------------------------------------- */

/** A stream (e.g. cudaStream_t), never dereferenced by kffi. */
typedef void* KFFIStreamHandle;

/** Sets the calling thread's current stream for a device; the previous one goes to *opt_out_prev
 * when not NULL, so a caller can restore it. */
KFFI_DLL int KFFIEnvSetStream(int32_t device_type, int32_t device_id, KFFIStreamHandle stream,
                              KFFIStreamHandle* opt_out_prev);
/** The calling thread's current stream for a device; NULL (the default stream) when unset. */
KFFI_DLL KFFIStreamHandle KFFIEnvGetStream(int32_t device_type, int32_t device_id);
/** Sets the tensor allocator: for the calling thread, or the process-wide fallback when
 * write_to_global is nonzero. The previous one goes to *opt_out_prev when not NULL. */
KFFI_DLL int KFFIEnvSetTensorAllocator(DLPackManagedTensorAllocator allocator, int write_to_global,
                                       DLPackManagedTensorAllocator* opt_out_prev);
/** The allocator in force: the thread's own, else the global one, else NULL. */
KFFI_DLL DLPackManagedTensorAllocator KFFIEnvGetTensorAllocator(void);
/** Runs the signal hook (installed by a language binding): returns -1 with the error raised
 * (e.g. a KeyboardInterrupt) when a signal is pending, else 0. Cheap; for long native loops. */
KFFI_DLL int KFFIEnvCheckSignals(void);
/** Installs the signal hook (NULL removes it); the previous one goes to *opt_out_prev. */
KFFI_DLL void KFFIEnvSetCheckSignalsHook(int (*hook)(void), int (**opt_out_prev)(void));
/** Makes a device current on the calling thread for a call's duration, when it is not current
 * already: for kDLCUDA, the primary context of CUDA device device_id (the context CUDA's runtime,
 * PyTorch, JAX and CuPy use), through the CUDA driver, which must already be loaded in the
 * process (no CUDA memory exists otherwise: then nothing changes). Other device types change
 * nothing. *out_restore receives what KFFIEnvRestoreDevice needs: NULL when nothing changed.
 * A device index that does not exist is a ValueError. Exports call it for the first CUDA tensor
 * argument (kffi/function.h); costs one query of the current context when already current, and
 * none in a process that sees one CUDA device. Added in 0.4. */
KFFI_DLL int KFFIEnvEnterDevice(int32_t device_type, int32_t device_id, void** out_restore);
/** Restores what KFFIEnvEnterDevice changed (restore NULL: nothing). Never fails. Added in 0.4. */
KFFI_DLL void KFFIEnvRestoreDevice(int32_t device_type, void* restore);

/* ---------------------------------------------------------------------------------------------
 * Modules: kernel libraries (shared objects exporting `__kffi_<name>` safe-call symbols, built
 * with kffi/export.h) and the system library (symbols registered by statically linked code).
 * A loaded library is never unloaded: objects it made (tensors, functions) may outlive every
 * reference to its module and still need its code.
 * ------------------------------------------------------------------------------------------- */

/** Loads the kernel library at path (borrowed; need not be NUL-terminated). Loading the same file
 * again returns the same module while it is alive. *out owned. */
KFFI_DLL int KFFIModuleLoadFromFile(const KFFIByteArray* path, KFFIObjectHandle* out);
/** The process's system library module (one per process). *out owned. */
KFFI_DLL int KFFIModuleGetSystemLib(KFFIObjectHandle* out);
/** Registers a symbol of statically linked code in the system library. name (borrowed,
 * NUL-terminated) is the symbol's exported name, e.g. "__kffi_scale", "__kffi__meta_scale" or
 * "__kffi__abi_version" (then symbol points at a uint32_t, and a value other than this runtime's
 * ABI version is refused). The same name with another symbol is a KeyError. */
KFFI_DLL int KFFIModuleRegisterSystemLibSymbol(const char* name, void* symbol);
/** Reports a problem that a library's static initialisation found in one of its exports (e.g. a
 * malformed contract): kind and message (borrowed) as an error's. When KFFIModuleLoadFromFile is
 * opening that library on this thread, the load fails with this error, then and on every later
 * load of the file, and *taken is set to 1; otherwise *taken is 0 and the library reports the
 * problem itself (e.g. on every call of the export). Added in 0.2. */
KFFI_DLL int KFFIModuleReportLoadError(const KFFIByteArray* kind, const KFFIByteArray* message,
                                       int32_t* taken);
/** Looks up function name (borrowed) in mod (borrowed) and, when query_imports is nonzero, then
 * in its imports (depth first, in import order): *out owned (the function keeps mod alive), or
 * NULL when absent. */
KFFI_DLL int KFFIModuleGetFunction(KFFIObjectHandle mod, const KFFIByteArray* name,
                                   int query_imports, KFFIObjectHandle* out);
/** Calls visit(ctx, name) (name borrowed for the call) for each function mod (borrowed) exports,
 * and those of its imports when query_imports is nonzero; sorted, without duplicates. A nonzero
 * return from visit stops the walk. */
KFFI_DLL int KFFIModuleListFunctions(KFFIObjectHandle mod, int query_imports,
                                     int (*visit)(void* ctx, const KFFIByteArray* name), void* ctx);
/** The metadata of function name (borrowed) as found by KFFIModuleGetFunction with imports: *out
 * is an owned str holding JSON {"name", "params": [{"name", "type"}], "return", "doc"}, or None
 * when the function or its metadata is absent. */
KFFI_DLL int KFFIModuleGetFunctionMetadata(KFFIObjectHandle mod, const KFFIByteArray* name,
                                           KFFIAny* out);
/** Makes mod (borrowed) search other (borrowed; mod keeps a reference) after its own functions.
 * An import that would make a cycle is a ValueError. */
KFFI_DLL int KFFIModuleImport(KFFIObjectHandle mod, KFFIObjectHandle other);
/** The module's name as an owned str: the library's canonical path, or "system_lib". */
KFFI_DLL int KFFIModuleGetName(KFFIObjectHandle mod, KFFIAny* out);
/** Loads a relocatable object file (path borrowed; e.g. a `.o` written by kffi.compile(...)
 * .export("x.o"), or any -fPIC object with kffi exports) as a module: the object is linked once
 * into a shared object with the system's C++ driver ($CXX, else c++) against this libkffi, kept
 * in the cache ($KFFI_CACHE_DIR, else $XDG_CACHE_HOME/kffi, else ~/.cache/kffi; under objects/)
 * under a hash of its bytes, and loaded like KFFIModuleLoadFromFile. Registrations of its exports
 * in the system library are left out while it loads (the module serves them). *out owned. Added
 * in 0.3. */
KFFI_DLL int KFFIModuleLoadObject(const KFFIByteArray* path, KFFIObjectHandle* out);

/* ---------------------------------------------------------------------------------------------
 * Export metadata and contracts (added in 0.3). The runtime writes the metadata JSON of exports
 * and compiles contracts (parser, check planner, messages), so that kernel libraries carry only
 * the per-call check: they read a compiled contract's check plan in the layout that
 * kffi/contract/plan.h fixes (versioned there; not part of this header's freeze). The export
 * macros reference these functions weakly: a library built with newer headers reports a clear
 * error in an older runtime instead of failing to resolve them.
 * ------------------------------------------------------------------------------------------- */

/** The metadata of a plain export (KFFI_EXPORT*): *out is an owned str holding JSON {"name",
 * "params": [{"name", "type"}], "return", "doc"}. name, doc and param_names are NUL-terminated
 * (param_names comma separated, "" or fewer names than parameters: arg0, arg1, ...);
 * param_types[num_params] and return_type are the C++ types as kffi spells them ("Tensor",
 * "Optional<float>": such a parameter gets "default": null). All borrowed. */
KFFI_DLL int KFFIExportGetMetadata(const char* name, const char* doc, const char* param_names,
                                   const KFFIByteArray* param_types, int32_t num_params,
                                   const KFFIByteArray* return_type, KFFIAny* out);
/** The signature of a typed function as messages show it: *out is an owned str
 * "name(a: int, arg1: str) -> None". Arguments as KFFIExportGetMetadata's (parameter names given
 * for all parameters or for none: unnamed ones are arg0, arg1, ...). */
KFFI_DLL int KFFIFunctionFormatSignature(const char* name, const char* param_names,
                                         const KFFIByteArray* param_types, int32_t num_params,
                                         const KFFIByteArray* return_type, KFFIAny* out);
/** Compiles the contract text (borrowed; grammar in kffi/contract.h) of the function name
 * (borrowed): *out is an owned contract object (type key "kffi.Contract") whose check plan is laid
 * out as plan_version (kffi/contract/plan.h's kPlanLayoutVersion) says. A malformed contract is a
 * ValueError "Invalid contract for `name` at column N: ..."; a plan_version this runtime does not
 * build is a RuntimeError. */
KFFI_DLL int KFFIContractCreate(const KFFIByteArray* name, const KFFIByteArray* text,
                                int32_t plan_version, KFFIObjectHandle* out);
/** The check plan of contract (borrowed), valid while the contract lives; NULL (error raised) when
 * contract is not one. */
KFFI_DLL const void* KFFIContractGetPlan(KFFIObjectHandle contract);
/** Runs the checks of ops [first_op, end) of a check plan (KFFIContractGetPlan's, borrowed) over a
 * call whose state (kffi/contract/plan.h's RunState, the kernel's inline check's) holds the checks
 * so far: the part of a check that kernels do not inline (scalars, tuples, optionals, strided
 * layouts, ...). Returns the index of the first op that fails, or -1 when all pass; raises
 * nothing. */
KFFI_DLL int32_t KFFIContractCheckFrom(const void* plan, void* state, int32_t first_op);
/** Runs the explaining check over a call's arguments (borrowed), check by check in catalogue
 * order. When a check fails it returns -1 with that check's error raised (TypeError or ValueError,
 * the message of kffi/contract.h's catalogue) and, where given, *out_check (kffi/contract/plan.h's
 * Check number) and *out_op (the op that failed, -1 for the argument count) set. When every check
 * passes it returns 0 with *out_check = 0, except with out_check NULL (a kernel whose inline check
 * failed asks why): then it raises an InternalError, as the two checks disagree. */
KFFI_DLL int KFFIContractExplain(KFFIObjectHandle contract, const KFFIAny* args, int32_t num_args,
                                 int32_t* out_check, int32_t* out_op);
/** Checks that a C++ function whose parameter types (borrowed; spelled as kffi spells them, one
 * per contract parameter, EnvStream ones included) can take what contract lets through; a
 * ValueError "Invalid contract for `name`: ..." otherwise. */
KFFI_DLL int KFFIContractCheckSignature(KFFIObjectHandle contract, const KFFIByteArray* param_types,
                                        int32_t num_params);
/** What KFFI_EXPORT_CONTRACT does once, when its library loads: compiles the contract (as
 * KFFIContractCreate) and checks it against the C++ parameter types (as
 * KFFIContractCheckSignature), so that the kernel compiles one call. On failure it returns -1 with
 * the error raised, *out NULL, and the error also reported to the module loader
 * (KFFIModuleReportLoadError), which then fails the load in progress on this thread. */
KFFI_DLL int KFFIContractExportCreate(const KFFIByteArray* name, const KFFIByteArray* text,
                                      const KFFIByteArray* param_types, int32_t num_params,
                                      int32_t plan_version, KFFIObjectHandle* out);
/** The metadata of an export with this contract: *out is an owned str holding the JSON of a plain
 * export's keys plus "contract", the parameters' structured fields, "outputs", "symbols",
 * "env_stream" and "mutates" (kffi/contract.h). return_type and doc borrowed. */
KFFI_DLL int KFFIContractGetMetadata(KFFIObjectHandle contract, const KFFIByteArray* return_type,
                                     const KFFIByteArray* doc, KFFIAny* out);
/** The arguments of the function behind contract for a call whose check passed: out[i] for each
 * function parameter (EnvStream ones included): the call argument, with the current environment
 * stream (KFFIEnvGetStream of the first non-CPU tensor's device, else the first tensor's) in place
 * of each EnvStream parameter and each Stream argument as an opaque pointer (an int handle's bits,
 * None as NULL). A NULL pointer is None when null_as_none is nonzero. frames are the check's value
 * frames (kffi/contract/details.h's RunState::frames; frames[0] the call arguments), borrowed. */
KFFI_DLL int KFFIContractExpandArgs(KFFIObjectHandle contract, const KFFIAny* const* frames,
                                    int32_t null_as_none, KFFIAny* out);
/** Texts of a contract, for KFFIContractGetText's what: */
#define kKFFIContractTextName 0        /* the function's name */
#define kKFFIContractTextSource 1      /* the contract text */
#define kKFFIContractTextSignature 2   /* "name(a: Tensor([n], float32), s: int32)" */
#define kKFFIContractTextParamName 3   /* call parameter #index's name */
#define kKFFIContractTextParamType 4   /* call parameter #index's type as written */
#define kKFFIContractTextOutputDtype 5 /* output #index's dtype as written ("float16|bfloat16") */
#define kKFFIContractTextSymbol 6      /* the name of symbol slot #index */
/** *out points at a text of contract (valid while the contract lives; not NUL-terminated).
 * An index out of range is an IndexError. */
KFFI_DLL int KFFIContractGetText(KFFIObjectHandle contract, int32_t what, int32_t index,
                                 KFFIByteArray* out);
/** *out_slot is the slot of the symbol named symbol (borrowed), or -1 when the contract binds no
 * such symbol. */
KFFI_DLL int KFFIContractFindSymbol(KFFIObjectHandle contract, const KFFIByteArray* symbol,
                                    int32_t* out_slot);
/** The shape of the output at index output, from symbol values (values[slot] for each slot whose
 * bit is set in bound): out_shape (room for 32 dimensions) and *out_ndim. An unbound symbol, a
 * division by zero or an int64 overflow is a ValueError, an output that does not exist an
 * IndexError. */
KFFI_DLL int KFFIContractGetOutputShape(KFFIObjectHandle contract, int64_t output,
                                        const int64_t* values, uint64_t bound, int64_t* out_shape,
                                        int32_t* out_ndim);

#ifdef __cplusplus
}  // extern "C"
#endif
#endif  // KFFI_C_API_H_
