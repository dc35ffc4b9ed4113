/* tests/abi/c_program.c: a pure C99 client of libkffi, using nothing but the frozen C API.
 *
 * It plays the part of a foreign library (a kernel DSL's generated code, another language's
 * binding): it never sees a C++ type, only the structs and functions of c_api.h, so anything it
 * can do any C client can do. Every check counts; the first failure prints where and exits 1. */
/* SPDX-License-Identifier: Apache-2.0 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kffi/c_api.h"

static int g_checks = 0;

/* Stops at the first failure: later checks would only read the wreckage of an earlier one. */
#define CHECK(cond, ...)                                                         \
  do {                                                                           \
    ++g_checks;                                                                  \
    if (!(cond)) {                                                               \
      fprintf(stderr, "%s:%d: check failed: %s\n  ", __FILE__, __LINE__, #cond); \
      fprintf(stderr, __VA_ARGS__);                                              \
      fprintf(stderr, "\n");                                                     \
      exit(1);                                                                   \
    }                                                                            \
  } while (0)

/* Makes a borrowed byte array over a NUL-terminated literal. */
static KFFIByteArray Bytes(const char* text) {
  KFFIByteArray array;
  array.data = text;
  array.size = strlen(text);
  return array;
}

/* Byte arrays are not NUL-terminated in general, so compare by size and bytes. */
static int ByteArrayEquals(KFFIByteArray array, const char* expected) {
  size_t size = strlen(expected);
  return array.size == size && (size == 0 || memcmp(array.data, expected, size) == 0);
}

/* Prints at most 200 bytes of a byte array in diagnostics. */
#define SHOW(array) \
  (int)((array).size < 200 ? (array).size : 200), ((array).data ? (array).data : "")

static int64_t StrongCount(KFFIObjectHandle obj) {
  return (int64_t)(((KFFIObject*)obj)->combined_ref_count & 0xffffffffu);
}

static int64_t WeakCount(KFFIObjectHandle obj) {
  return (int64_t)(((KFFIObject*)obj)->combined_ref_count >> 32);
}

/* Reads the text of a str value, whichever of its two forms the runtime chose. */
static KFFIByteArray StrValueText(const KFFIAny* value) {
  KFFIByteArray text = {NULL, 0};
  if (value->type_index == kKFFISmallStr) {
    text.data = value->v_bytes;
    text.size = value->small_str_len;
  } else if (value->type_index == kKFFIStr) {
    text = *(const KFFIStrCell*)KFFIObjectGetCellPtr(value->v_obj);
  }
  return text;
}

/* Takes the raised error out of the thread's slot, checks its kind, and returns it (owned). */
static KFFIObjectHandle TakeError(const char* expected_kind) {
  KFFIObjectHandle error = NULL;
  KFFIErrorMoveFromRaised(&error);
  CHECK(error != NULL, "a call returned -1 but no error was raised (expected %s)", expected_kind);
  CHECK(((KFFIObject*)error)->type_index == kKFFIError, "the raised object has type index %d",
        (int)((KFFIObject*)error)->type_index);
  const KFFIErrorCell* cell = KFFIErrorGetCellPtr(error);
  CHECK(ByteArrayEquals(cell->kind, expected_kind), "error kind is '%.*s', expected '%s'",
        SHOW(cell->kind), expected_kind);
  return error;
}

/* ---------------------------------------------------------------------------------------------
 * A C function exported through the C API: abi_test.add(int, int) -> int
 * ------------------------------------------------------------------------------------------- */

/* The resource behind the function: lets the test see which self the runtime passes back and
 * how many times it released it. */
typedef struct {
  int calls;
  int deleter_calls;
} AddState;

static AddState g_add_state = {0, 0};

static int AddSafeCall(void* self, const KFFIAny* args, int32_t num_args, KFFIAny* result) {
  AddState* state = (AddState*)self;
  int32_t i;
  /* KFFIFunctionCreate promises safe_call(self, ...): the user pointer, not the object. */
  if (state != &g_add_state) {
    KFFIErrorSetRaisedFromCStr("InternalError", "abi_test.add received a foreign self pointer");
    return -1;
  }
  ++state->calls;
  if (num_args != 2) {
    KFFIErrorSetRaisedFromCStr("TypeError", "abi_test.add expects 2 arguments");
    return -1;
  }
  for (i = 0; i < num_args; ++i) {
    if (args[i].type_index != kKFFIInt) {
      KFFIErrorSetRaisedFromCStr("ValueError", "abi_test.add expects int arguments");
      return -1;
    }
  }
  result->type_index = kKFFIInt;
  result->zero_padding = 0;
  result->v_int64 = args[0].v_int64 + args[1].v_int64;
  return 0;
}

static void AddDeleter(void* self) { ++((AddState*)self)->deleter_calls; }

static KFFIAny IntValue(int64_t v) {
  KFFIAny value;
  memset(&value, 0, sizeof(value)); /* zero padding: values compare bytewise */
  value.type_index = kKFFIInt;
  value.v_int64 = v;
  return value;
}

static KFFIAny NoneValue(void) {
  KFFIAny value;
  memset(&value, 0, sizeof(value));
  value.type_index = kKFFINone;
  return value;
}

/* Looks for one name in the global listing and checks the listing is sorted. */
typedef struct {
  const char* wanted;
  int found;
  int sorted;
  char previous[256];
  int has_previous;
} NameWalk;

static int VisitName(void* ctx, const KFFIByteArray* name) {
  NameWalk* walk = (NameWalk*)ctx;
  char current[256];
  size_t n = name->size < sizeof(current) - 1 ? name->size : sizeof(current) - 1;
  memcpy(current, name->data, n);
  current[n] = '\0';
  if (ByteArrayEquals(*name, walk->wanted)) walk->found = 1;
  if (walk->has_previous && strcmp(walk->previous, current) > 0) walk->sorted = 0;
  memcpy(walk->previous, current, n + 1);
  walk->has_previous = 1;
  return 0;
}

static void TestVersion(void) {
  KFFIVersion version;
  memset(&version, 0xff, sizeof(version));
  KFFIGetVersion(&version);
  printf("kffi runtime %u.%u.%u, abi %u (header %d.%d.%d, abi %d)\n", (unsigned)version.major,
         (unsigned)version.minor, (unsigned)version.patch, (unsigned)version.abi,
         KFFI_VERSION_MAJOR, KFFI_VERSION_MINOR, KFFI_VERSION_PATCH, KFFI_ABI_VERSION);
  CHECK(version.abi == KFFI_ABI_VERSION, "runtime abi %u, header abi %d", (unsigned)version.abi,
        KFFI_ABI_VERSION);
}

static void TestFunctions(void) {
  const KFFIByteArray name = Bytes("abi_test.add");
  const KFFIByteArray absent = Bytes("abi_test.no_such_function");
  KFFIObjectHandle func = NULL;
  KFFIObjectHandle found = NULL;
  KFFIObjectHandle error = NULL;
  const KFFIErrorCell* error_cell;
  const KFFIFunctionCell* func_cell;
  KFFIAny args[2];
  KFFIAny result;
  NameWalk walk;
  int removed = -1;

  /* Create: one strong and one weak reference (the strong ones' shared weak reference). */
  CHECK(KFFIFunctionCreate(&g_add_state, AddSafeCall, AddDeleter, &func) == 0,
        "KFFIFunctionCreate failed");
  CHECK(func != NULL, "KFFIFunctionCreate returned 0 but no object");
  CHECK(((KFFIObject*)func)->type_index == kKFFIFunction, "function object has type index %d",
        (int)((KFFIObject*)func)->type_index);
  CHECK(StrongCount(func) == 1 && WeakCount(func) == 1,
        "a new object must start at strong 1, weak 1; got strong %lld, weak %lld",
        (long long)StrongCount(func), (long long)WeakCount(func));
  func_cell = (const KFFIFunctionCell*)KFFIObjectGetCellPtr(func);
  CHECK(func_cell->safe_call != NULL, "the function cell has no safe_call");
  CHECK(func_cell->cpp_call == NULL, "cpp_call must be NULL for functions made by the C API");

  /* Register; a second registration without override is a KeyError and changes nothing. */
  CHECK(KFFIFunctionSetGlobal(&name, func, 0) == 0, "KFFIFunctionSetGlobal failed");
  CHECK(StrongCount(func) == 2, "the registry must hold its own reference; strong count %lld",
        (long long)StrongCount(func));
  CHECK(KFFIFunctionSetGlobal(&name, func, 0) == -1,
        "registering a taken name without allow_override must fail with -1");
  error = TakeError("KeyError");
  KFFIObjectDecRef(error);
  error = NULL;
  KFFIErrorMoveFromRaised(&error);
  CHECK(error == NULL, "the error slot must be empty after the error was moved out");

  /* The global listing names it, in sorted order. */
  memset(&walk, 0, sizeof(walk));
  walk.wanted = "abi_test.add";
  walk.sorted = 1;
  CHECK(KFFIFunctionListGlobalNames(VisitName, &walk) == 0, "KFFIFunctionListGlobalNames failed");
  CHECK(walk.found, "abi_test.add is missing from KFFIFunctionListGlobalNames");
  CHECK(walk.sorted, "KFFIFunctionListGlobalNames must visit names in sorted order");

  /* Look it up: the registry hands back the object it keeps, with a new reference. */
  CHECK(KFFIFunctionGetGlobal(&name, &found) == 0, "KFFIFunctionGetGlobal failed");
  CHECK(found == func, "KFFIFunctionGetGlobal returned %p, registered %p", found, func);
  CHECK(StrongCount(func) == 3, "a looked-up function is owned; strong count %lld",
        (long long)StrongCount(func));

  /* Call it: 2 + 3. */
  args[0] = IntValue(2);
  args[1] = IntValue(3);
  result = NoneValue();
  CHECK(KFFIFunctionCall(found, args, 2, &result) == 0, "KFFIFunctionCall(2, 3) failed");
  CHECK(result.type_index == kKFFIInt, "result type index %d, expected Int",
        (int)result.type_index);
  CHECK(result.v_int64 == 5, "2 + 3 gave %lld", (long long)result.v_int64);
  CHECK(g_add_state.calls == 1, "safe_call ran %d times for one call", g_add_state.calls);

  /* The cell's entry point is callable directly with the object as handle: this is how a
   * library that does not link this runtime calls a kffi function. */
  result = NoneValue();
  CHECK(func_cell->safe_call(found, args, 2, &result) == 0, "calling cell->safe_call failed");
  CHECK(result.type_index == kKFFIInt && result.v_int64 == 5,
        "cell->safe_call(2, 3) gave type %d value %lld", (int)result.type_index,
        (long long)result.v_int64);

  /* A bad argument: the C callback's ValueError comes back through the thread's slot. */
  args[1].type_index = kKFFIFloat;
  args[1].v_float64 = 1.5;
  result = NoneValue();
  CHECK(KFFIFunctionCall(found, args, 2, &result) == -1, "a float argument must fail with -1");
  error = TakeError("ValueError");
  error_cell = KFFIErrorGetCellPtr(error);
  CHECK(ByteArrayEquals(error_cell->message, "abi_test.add expects int arguments"),
        "error message is '%.*s'", SHOW(error_cell->message));
  CHECK(error_cell->backtrace.size == 0 || error_cell->backtrace.data != NULL,
        "the backtrace has a size but no data");
  CHECK(error_cell->update_backtrace != NULL,
        "update_backtrace must be set so other libraries can extend the backtrace");
  CHECK(KFFIObjectDecRef(error) == 0, "releasing the error failed");
  error = NULL;

  /* Wrong argument count: the TypeError path. */
  result = NoneValue();
  CHECK(KFFIFunctionCall(found, args, 1, &result) == -1, "one argument must fail with -1");
  KFFIObjectDecRef(TakeError("TypeError"));

  /* An absent name is not an error: 0 and NULL. */
  {
    KFFIObjectHandle missing = (KFFIObjectHandle)&walk; /* sentinel: must be overwritten */
    CHECK(KFFIFunctionGetGlobal(&absent, &missing) == 0,
          "KFFIFunctionGetGlobal of an absent name must succeed");
    CHECK(missing == NULL, "KFFIFunctionGetGlobal of an absent name must give NULL");
  }

  /* Remove it; a second removal reports that nothing was there. */
  CHECK(KFFIFunctionRemoveGlobal(&name, &removed) == 0, "KFFIFunctionRemoveGlobal failed");
  CHECK(removed == 1, "removing a registered name gave removed=%d", removed);
  CHECK(KFFIFunctionRemoveGlobal(&name, &removed) == 0, "a second KFFIFunctionRemoveGlobal failed");
  CHECK(removed == 0, "removing an absent name gave removed=%d", removed);
  {
    KFFIObjectHandle again = (KFFIObjectHandle)&walk;
    CHECK(KFFIFunctionGetGlobal(&name, &again) == 0 && again == NULL,
          "a removed name must no longer be found");
  }
  CHECK(StrongCount(func) == 2, "removal must drop the registry's reference; strong count %lld",
        (long long)StrongCount(func));

  /* Release: the deleter runs once, and only with the last reference. */
  CHECK(KFFIObjectDecRef(found) == 0, "releasing the looked-up handle failed");
  CHECK(g_add_state.deleter_calls == 0, "the deleter ran while a reference was still held");
  CHECK(KFFIObjectDecRef(func) == 0, "releasing the created handle failed");
  CHECK(g_add_state.deleter_calls == 1, "the deleter ran %d times, expected exactly once",
        g_add_state.deleter_calls);
  CHECK(KFFIObjectDecRef(NULL) == 0, "KFFIObjectDecRef(NULL) must be accepted");
}

static void TestStrings(void) {
  KFFIAny value;
  const KFFIByteArray small = Bytes("abc");
  const KFFIByteArray seven = Bytes("1234567");
  const KFFIByteArray large = Bytes("a string longer than seven bytes");
  const KFFIByteArray empty = Bytes("");
  const KFFIStrCell* cell;
  int i;

  /* Up to 7 bytes: inline, no object, the unused bytes zero so values compare bytewise. */
  CHECK(KFFIStringFromByteArray(&small, &value) == 0, "KFFIStringFromByteArray(abc) failed");
  CHECK(value.type_index == kKFFISmallStr, "'abc' gave type index %d", (int)value.type_index);
  CHECK(value.small_str_len == 3, "'abc' gave small_str_len %u", (unsigned)value.small_str_len);
  CHECK(memcmp(value.v_bytes, "abc", 3) == 0, "'abc' bytes are '%.3s'", value.v_bytes);
  for (i = 3; i < 8; ++i) {
    CHECK(value.v_bytes[i] == 0, "v_bytes[%d] of a SmallStr is %d, expected 0", i,
          (int)value.v_bytes[i]);
  }

  CHECK(KFFIStringFromByteArray(&empty, &value) == 0, "KFFIStringFromByteArray('') failed");
  CHECK(value.type_index == kKFFISmallStr && value.small_str_len == 0,
        "'' gave type index %d, len %u", (int)value.type_index, (unsigned)value.small_str_len);

  CHECK(KFFIStringFromByteArray(&seven, &value) == 0, "KFFIStringFromByteArray(7 bytes) failed");
  CHECK(value.type_index == kKFFISmallStr && value.small_str_len == 7,
        "7 bytes gave type index %d, len %u (7 still fits inline)", (int)value.type_index,
        (unsigned)value.small_str_len);
  CHECK(memcmp(value.v_bytes, "1234567", 7) == 0, "7-byte SmallStr holds the wrong bytes");

  /* Longer: an owned Str object whose cell holds a NUL-terminated copy. */
  CHECK(KFFIStringFromByteArray(&large, &value) == 0, "KFFIStringFromByteArray(large) failed");
  CHECK(value.type_index == kKFFIStr, "a 32-byte string gave type index %d", (int)value.type_index);
  CHECK(value.zero_padding == 0, "zero_padding of a Str value is %u", (unsigned)value.zero_padding);
  CHECK(value.v_obj != NULL && value.v_obj->type_index == kKFFIStr,
        "the Str value's object is missing or has the wrong type index");
  cell = (const KFFIStrCell*)KFFIObjectGetCellPtr(value.v_obj);
  CHECK(ByteArrayEquals(*cell, "a string longer than seven bytes"), "Str cell holds '%.*s'",
        SHOW(*cell));
  CHECK(cell->data != large.data, "a Str must own a copy, not borrow the input");
  CHECK(cell->data[cell->size] == '\0', "Str data must be NUL-terminated");
  CHECK(KFFIObjectDecRef(value.v_obj) == 0, "releasing the Str failed");

  /* Bytes follow the same split. */
  CHECK(KFFIBytesFromByteArray(&small, &value) == 0, "KFFIBytesFromByteArray(abc) failed");
  CHECK(value.type_index == kKFFISmallBytes && value.small_str_len == 3,
        "bytes 'abc' gave type index %d, len %u", (int)value.type_index,
        (unsigned)value.small_str_len);
  CHECK(KFFIBytesFromByteArray(&large, &value) == 0, "KFFIBytesFromByteArray(large) failed");
  CHECK(value.type_index == kKFFIBytes && value.v_obj->type_index == kKFFIBytes,
        "large bytes gave type index %d", (int)value.type_index);
  CHECK(ByteArrayEquals(*(const KFFIStrCell*)KFFIObjectGetCellPtr(value.v_obj),
                        "a string longer than seven bytes"),
        "Bytes cell holds the wrong bytes");
  CHECK(KFFIObjectDecRef(value.v_obj) == 0, "releasing the Bytes failed");
}

/* Parses text, checks the fields, formats it back and checks the text and a second parse. */
static void CheckDataType(const char* text, int code, int bits, int lanes) {
  const KFFIByteArray input = Bytes(text);
  DLDataType dtype;
  DLDataType reparsed;
  KFFIAny formatted;
  KFFIByteArray formatted_text;

  memset(&dtype, 0xff, sizeof(dtype));
  CHECK(KFFIDataTypeFromString(&input, &dtype) == 0, "KFFIDataTypeFromString(%s) failed", text);
  CHECK(dtype.code == code && dtype.bits == bits && dtype.lanes == lanes,
        "%s parsed as code %d bits %d lanes %d, expected %d/%d/%d", text, (int)dtype.code,
        (int)dtype.bits, (int)dtype.lanes, code, bits, lanes);

  formatted = NoneValue();
  CHECK(KFFIDataTypeToString(&dtype, &formatted) == 0, "KFFIDataTypeToString(%s) failed", text);
  CHECK(formatted.type_index == kKFFISmallStr || formatted.type_index == kKFFIStr,
        "KFFIDataTypeToString(%s) gave type index %d, expected a str", text,
        (int)formatted.type_index);
  formatted_text = StrValueText(&formatted);
  CHECK(ByteArrayEquals(formatted_text, text), "%s formatted as '%.*s'", text,
        SHOW(formatted_text));

  memset(&reparsed, 0, sizeof(reparsed));
  CHECK(KFFIDataTypeFromString(&formatted_text, &reparsed) == 0 && reparsed.code == dtype.code &&
            reparsed.bits == dtype.bits && reparsed.lanes == dtype.lanes,
        "%s does not survive a round trip", text);
  if (formatted.type_index == kKFFIStr) {
    CHECK(KFFIObjectDecRef(formatted.v_obj) == 0, "releasing the formatted dtype failed");
  }
}

static void TestDataTypes(void) {
  const KFFIByteArray bad = Bytes("not_a_dtype");
  DLDataType dtype;
  KFFIObjectHandle error;

  CheckDataType("bfloat16", kDLBfloat, 16, 1);
  CheckDataType("float32", kDLFloat, 32, 1);
  CheckDataType("int8", kDLInt, 8, 1);
  CheckDataType("float32x4", kDLFloat, 32, 4);

  CHECK(KFFIDataTypeFromString(&bad, &dtype) == -1, "parsing 'not_a_dtype' must fail");
  error = TakeError("ValueError");
  {
    const KFFIErrorCell* cell = KFFIErrorGetCellPtr(error);
    /* The message must name the bad string so the user can find it. */
    int names_it = 0;
    size_t i;
    for (i = 0; i + bad.size <= cell->message.size; ++i) {
      if (memcmp(cell->message.data + i, bad.data, bad.size) == 0) names_it = 1;
    }
    CHECK(names_it, "the ValueError message '%.*s' does not name the bad string",
          SHOW(cell->message));
  }
  KFFIObjectDecRef(error);
}

/* ---------------------------------------------------------------------------------------------
 * Tensors: flags recorded at import, and layouts that must be refused before anything is read.
 * ------------------------------------------------------------------------------------------- */

typedef struct {
  DLManagedTensorVersioned managed;
  int64_t shape[2];
  float data[4];
  int deletes;
} CTensor;

static void CTensorDeleter(DLManagedTensorVersioned* self) {
  ++((CTensor*)self->manager_ctx)->deletes;
}

/* A 1-d float32 tensor of n elements (n may be absurd: the data is never read then). */
static void CTensorInit(CTensor* t, int64_t n, uint64_t flags) {
  memset(t, 0, sizeof(*t));
  t->shape[0] = n;
  t->managed.version.major = DLPACK_MAJOR_VERSION;
  t->managed.version.minor = 0;
  t->managed.manager_ctx = t;
  t->managed.deleter = CTensorDeleter;
  t->managed.flags = flags;
  t->managed.dl_tensor.data = t->data;
  t->managed.dl_tensor.device.device_type = kDLCPU;
  t->managed.dl_tensor.device.device_id = 0;
  t->managed.dl_tensor.ndim = 1;
  t->managed.dl_tensor.dtype.code = kDLFloat;
  t->managed.dl_tensor.dtype.bits = 32;
  t->managed.dl_tensor.dtype.lanes = 1;
  t->managed.dl_tensor.shape = t->shape;
  t->managed.dl_tensor.strides = NULL;
}

/* True when the message of error contains text. */
static int MessageHas(KFFIObjectHandle error, const char* text) {
  const KFFIErrorCell* cell = KFFIErrorGetCellPtr(error);
  size_t n = strlen(text);
  size_t i;
  for (i = 0; i + n <= cell->message.size; ++i) {
    if (memcmp(cell->message.data + i, text, n) == 0) return 1;
  }
  return 0;
}

static void TestTensors(void) {
  CTensor in;
  KFFIObjectHandle tensor = NULL;
  KFFIObjectHandle error;
  uint64_t flags = 99;
  DLManagedTensorVersioned* out = NULL;
  KFFIAny arg;
  KFFIAny owned;

  /* A read-only import remembers the flag, and exports it again. */
  CTensorInit(&in, 4, DLPACK_FLAG_BITMASK_READ_ONLY);
  CHECK(KFFITensorFromDLPackVersioned(&in.managed, 0, 0, &tensor) == 0, "read-only import failed");
  CHECK(KFFITensorGetFlags(tensor, &flags) == 0, "KFFITensorGetFlags failed");
  CHECK(flags == DLPACK_FLAG_BITMASK_READ_ONLY, "flags %llu, expected read-only",
        (unsigned long long)flags);
  CHECK(KFFITensorToDLPackVersioned(tensor, &out) == 0, "re-export failed");
  CHECK(out->flags == DLPACK_FLAG_BITMASK_READ_ONLY, "the export dropped the read-only flag");
  out->deleter(out);
  CHECK(KFFIObjectDecRef(tensor) == 0 && in.deletes == 1, "the import's deleter ran %d times",
        in.deletes);

  /* 2^60 float32 elements overflow the size in bits: refused, deleter run once. */
  CTensorInit(&in, (int64_t)1 << 60, 0);
  CHECK(KFFITensorFromDLPackVersioned(&in.managed, 0, 0, &tensor) == -1,
        "a 2^60-element float32 tensor must be refused");
  error = TakeError("ValueError");
  CHECK(MessageHas(error, "shape [1152921504606846976] is too large"),
        "the message does not name the shape: '%.*s'", SHOW(KFFIErrorGetCellPtr(error)->message));
  KFFIObjectDecRef(error);
  CHECK(in.deletes == 1, "a refused import must run the deleter once, ran %d", in.deletes);

  CTensorInit(&in, 4, 0);
  in.managed.dl_tensor.ndim = 2;
  in.managed.dl_tensor.shape = NULL;
  CHECK(KFFITensorFromDLPackVersioned(&in.managed, 0, 0, &tensor) == -1, "NULL shape accepted");
  error = TakeError("ValueError");
  CHECK(MessageHas(error, "ndim 2 with a NULL shape"), "NULL shape message: '%.*s'",
        SHOW(KFFIErrorGetCellPtr(error)->message));
  KFFIObjectDecRef(error);

  CTensorInit(&in, -3, 0);
  CHECK(KFFITensorFromDLPackVersioned(&in.managed, 0, 0, &tensor) == -1, "negative size accepted");
  KFFIObjectDecRef(TakeError("ValueError"));

  /* A borrowed read-only argument becomes an owned Tensor that records the flag; the stored
   * value has zero_padding 0. */
  CTensorInit(&in, 4, 0);
  arg.type_index = kKFFIDLTensorPtr;
  arg.tensor_flags = kKFFITensorFlagReadOnly;
  arg.v_ptr = &in.managed.dl_tensor;
  CHECK(KFFIAnyViewToOwnedAny(&arg, &owned) == 0, "owning a DLTensor* argument failed");
  CHECK(owned.type_index == kKFFITensor && owned.zero_padding == 0,
        "owned tensor value: type index %d, padding %u", (int)owned.type_index,
        (unsigned)owned.zero_padding);
  CHECK(KFFITensorGetFlags(owned.v_obj, &flags) == 0 && flags == DLPACK_FLAG_BITMASK_READ_ONLY,
        "the owned view lost the read-only flag (%llu)", (unsigned long long)flags);
  CHECK(KFFITensorGetDLTensorPtr(owned.v_obj)->data == in.data, "the view must share the data");
  KFFIObjectDecRef(owned.v_obj);

  in.shape[0] = (int64_t)1 << 62;
  CHECK(KFFIAnyViewToOwnedAny(&arg, &owned) == -1, "an oversized DLTensor* was owned");
  KFFIObjectDecRef(TakeError("ValueError"));

  /* KFFITensorGetFlags on something else is a TypeError. */
  CHECK(KFFITensorGetFlags(NULL, &flags) == -1, "KFFITensorGetFlags(NULL) must fail");
  KFFIObjectDecRef(TakeError("ValueError"));
}

int main(void) {
  TestVersion();
  TestFunctions();
  TestStrings();
  TestDataTypes();
  TestTensors();
  printf("abi c_program: %d checks passed\n", g_checks);
  return 0;
}
