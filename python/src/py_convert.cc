// python/src/py_convert.cc: Python values <-> KFFIAny, with the converter chosen once per type
// (py_types.cc's table).
// SPDX-License-Identifier: Apache-2.0
#include <kffi/container/array.h>
#include <kffi/container/map.h>

#include <cstring>

#include "py_common.h"

namespace kffi {
namespace pyglue {

namespace {

// Value headers are written through the public helpers of kffi/base.h (SetPOD, SetNone,
// SetObject, SetSmallBytes): one place says what a well-formed KFFIAny is.
using details::SetNone;
using details::SetObject;
using details::SetPOD;

int SetOverflow(const CallContext* ctx, Py_ssize_t index) {
  PyErr_SetString(PyExc_OverflowError,
                  ArgPlaceOf(ctx, index)
                      .Say("Python int too large to convert to int64 (kffi ints are 64-bit)")
                      .c_str());
  return -1;
}

int ConvertInt(PyObject* obj, KFFIAny* out, const CallContext* ctx, Py_ssize_t index) {
  int overflow = 0;
  long long v = PyLong_AsLongLongAndOverflow(obj, &overflow);  // NOLINT
  if (overflow != 0) return SetOverflow(ctx, index);
  if (v == -1 && PyErr_Occurred()) return -1;
  SetPOD(out, kKFFIInt);
  out->v_int64 = v;
  return 0;
}

/// Stores the UTF-8 text s[0:n] of a str argument (held by the caller) into out: in place when
/// it can be, else an owned copy that the call keeps alive.
KFFI_INLINE int StoreStr(const char* s, Py_ssize_t n, KFFIAny* out, CallContext* ctx) {
  if (StoreStrInPlace(s, n, out)) return 0;
  KFFIByteArray ba{s, static_cast<size_t>(n)};
  if (KFFIStringFromByteArray(&ba, out) != 0) return (RaiseFromKFFIError(-1), -1);
  ctx->KeepAlive(*out);
  return 0;
}

int ConvertStr(PyObject* obj, KFFIAny* out, CallContext* ctx) {
  Py_ssize_t n = 0;
  const char* s = PyUnicode_AsUTF8AndSize(obj, &n);
  if (s == nullptr) return -1;
  return StoreStr(s, n, out, ctx);
}

int ConvertBytes(PyObject* obj, KFFIAny* out, CallContext* ctx) {
  char* data = nullptr;
  Py_ssize_t n = 0;
  if (PyByteArray_Check(obj)) {
    data = PyByteArray_AsString(obj);
    n = PyByteArray_Size(obj);
  } else if (PyBytes_AsStringAndSize(obj, &data, &n) != 0) {
    return -1;
  }
  KFFIByteArray ba{data, static_cast<size_t>(n)};
  // Copied here, before any other argument's conversion can run Python code that resizes it.
  if (KFFIBytesFromByteArray(&ba, out) != 0) return (RaiseFromKFFIError(-1), -1);
  if (out->type_index >= kKFFIStaticObjectBegin) ctx->KeepAlive(*out);
  return 0;
}

int ConvertTupleOfInts(PyObject* r, int64_t* vals, int n, const char* what) {
  if (!PyTuple_Check(r) || PyTuple_GET_SIZE(r) != n) {
    PyErr_Format(PyExc_TypeError, "internal: the %s hook returned a bad value", what);
    return -1;
  }
  for (int i = 0; i < n; ++i) {
    vals[i] = PyLong_AsLongLong(PyTuple_GET_ITEM(r, i));
    if (vals[i] == -1 && PyErr_Occurred()) return -1;
  }
  return 0;
}

/// Calls a converter hook on obj; NULL with an error set when the hook is missing or fails.
PyObject* CallHook(Hook h, PyObject* obj) {
  PyObject* hook = GetHook(h);
  if (hook == nullptr) {
    PyErr_SetString(PyExc_RuntimeError, "kffi: the converter hooks are not installed");
    return nullptr;
  }
  return PyObject_CallOneArg(hook, obj);
}

int ConvertDType(PyObject* obj, KFFIAny* out) {
  PyRef r(CallHook(kHookToDType, obj));
  if (!r) return -1;
  int64_t v[3];
  if (ConvertTupleOfInts(r.get(), v, 3, "dtype") != 0) return -1;
  SetPOD(out, kKFFIDataType);
  out->v_int64 = 0;  // the dtype fills 4 of the 8 payload bytes
  out->v_dtype = DLDataType{static_cast<uint8_t>(v[0]), static_cast<uint8_t>(v[1]),
                            static_cast<uint16_t>(v[2])};
  return 0;
}

int ConvertDevice(PyObject* obj, KFFIAny* out) {
  PyRef r(CallHook(kHookToDevice, obj));
  if (!r) return -1;
  int64_t v[2];
  if (ConvertTupleOfInts(r.get(), v, 2, "device") != 0) return -1;
  SetPOD(out, kKFFIDevice);
  out->v_device = DLDevice{static_cast<DLDeviceType>(v[0]), static_cast<int32_t>(v[1])};
  return 0;
}

/// A stream object (torch.cuda.Stream, CuPy, __cuda_stream__) becomes its handle as an opaque
/// pointer, which is what an explicit stream parameter receives.
int ConvertStream(PyObject* obj, KFFIAny* out, const CallContext* ctx, Py_ssize_t index) {
  PyRef r(CallHook(kHookToStream, obj));
  if (!r) {
    const ArgPlace place = ArgPlaceOf(ctx, index);
    ChainError(PyExc_TypeError,
               (place.subject.empty() ? "" : place.subject + ": ") +
                   "cannot read the stream handle of a " + Py_TYPE(obj)->tp_name + ": ",
               false, true, place.context);
    return -1;
  }
  void* handle = PyLong_AsVoidPtr(r.get());
  if (handle == nullptr && PyErr_Occurred()) return -1;
  SetPOD(out, kKFFIOpaquePtr);
  out->v_ptr = handle;
  return 0;
}

void PyObjectDeleter(void* handle) {
  // May run on any thread, possibly while the interpreter ends: then the object leaks.
  if (CannotReleaseInPython()) return;
  PyGILState_STATE st = PyGILState_Ensure();
  Py_DECREF(static_cast<PyObject*>(handle));
  PyGILState_Release(st);
}

/// Wraps any Python object as an owned OpaquePyObject.
int MakeOpaque(PyObject* obj, KFFIAny* out) {
  KFFIObjectHandle h = nullptr;
  Py_INCREF(obj);
  if (KFFIObjectCreateOpaque(obj, kKFFIOpaquePyObject, PyObjectDeleter, &h) != 0) {
    Py_DECREF(obj);
    RaiseFromKFFIError(-1);
    return -1;
  }
  SetObject(out, static_cast<KFFIObject*>(h));
  return 0;
}

}  // namespace

// Nesting of containers being converted on this thread (either way), against kMaxContainerDepth.
namespace {
thread_local int t_container_depth = 0;
}  // namespace

/// Enters one container (or record) level; -1 with RecursionError set past the limit (a fixed
/// limit: the C stack, not Python's adjustable recursion limit, is what deep nesting would
/// exhaust).
int EnterContainer() {
  if (t_container_depth >= kMaxContainerDepth) {
    PyErr_Format(PyExc_RecursionError,
                 "containers or records nest deeper than kffi's limit of %d levels (or hold "
                 "themselves) while converting them for kffi",
                 kMaxContainerDepth);
    return -1;
  }
  if (Py_EnterRecursiveCall(" while converting a container or record for kffi") != 0) return -1;
  ++t_container_depth;
  return 0;
}

void LeaveContainer() {
  --t_container_depth;
  Py_LeaveRecursiveCall();
}

int LabelConversionError(const std::string& subject, const std::string& context) {
  if (PyErr_ExceptionMatches(PyExc_UnicodeError)) {
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    PyRef reason(value != nullptr ? PyObject_GetAttrString(value, "reason") : nullptr);
    // The message is built from the fields: the reason carries the argument's place.
    PyRef labelled(
        reason ? PyUnicode_FromFormat("%s: %S%s", subject.c_str(), reason.get(), context.c_str())
               : nullptr);
    if (!labelled || PyObject_SetAttrString(value, "reason", labelled.get()) != 0) PyErr_Clear();
    PyErr_Restore(type, value, tb);
    return -1;
  }
  if (PyErr_ExceptionMatches(PyExc_RecursionError)) return LabelRecursionError(subject, context);
  ChainError(PyExc_TypeError, subject + ": ", /*keep_type=*/true, true, context);
  return -1;
}

int LabelRecursionError(const std::string& subject, const std::string& context) {
  PyObject *type, *value, *tb;
  PyErr_Fetch(&type, &value, &tb);
  PyErr_NormalizeException(&type, &value, &tb);
  if (tb != nullptr && value != nullptr) PyException_SetTraceback(value, tb);
  PyRef text(value != nullptr ? PyObject_Str(value) : nullptr);
  PyRef msg(text ? PyUnicode_FromFormat("%s: %U%s", subject.c_str(), text.get(), context.c_str())
                 : nullptr);
  PyRef exc(msg ? PyObject_CallOneArg(PyExc_RecursionError, msg.get()) : nullptr);
  if (!exc) {
    // At the recursion limit even a new exception may fail: the original goes on.
    PyErr_Clear();
    PyErr_Restore(type, value, tb);
    return -1;
  }
  Py_XDECREF(type);
  Py_XDECREF(tb);
  PyException_SetCause(exc.get(), value);  // steals value
  PyErr_SetObject(PyExc_RecursionError, exc.get());
  return -1;
}

namespace {

/// Builds an owned Array from a tuple/list. Elements are converted from a tuple snapshot that
/// holds a reference to each: converting one can run Python code that mutates the list.
int MakeArray(PyObject* obj, KFFIAny* out) {
  PyRef snap;
  if (PyTuple_Check(obj)) {
    Py_INCREF(obj);
    snap = PyRef(obj);
  } else {
    snap = PyRef(PySequence_Tuple(obj));
    if (!snap) return -1;
  }
  Py_ssize_t n = PyTuple_GET_SIZE(snap.get());
  try {
    std::vector<Any> values;
    values.reserve(static_cast<size_t>(n));
    for (Py_ssize_t i = 0; i < n; ++i) {
      KFFIAny v;
      if (PyToOwnedAny(PyTuple_GET_ITEM(snap.get(), i), &v) != 0) {
        PendingErrorScope keep;  // the elements converted so far go with the error pending
        values.clear();
        return -1;
      }
      values.push_back(details::AnyUnsafe::FromOwnedRaw(v));
    }
    Array<Any> arr(values.begin(), values.end());
    TypeTraits<Array<Any>>::MoveToAny(std::move(arr), out);
  }
  KFFI_CATCH_ALL { return (RaiseFromCppException(), -1); }
  return 0;
}

/// Builds an owned Map from a mapping, through a list of (key, value) pairs that holds
/// references to both (the mapping may change while its items convert).
int MakeMap(PyObject* obj, KFFIAny* out) {
  PyRef items;
  if (PyDict_Check(obj)) {
    items = PyRef(PyDict_Items(obj));
  } else {
    PyRef d(PyDict_New());
    if (!d || PyDict_Update(d.get(), obj) != 0) return -1;
    items = PyRef(PyDict_Items(d.get()));
  }
  if (!items) return -1;
  try {
    Map<Any, Any> map;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(items.get()); ++i) {
      PyObject* pair = PyList_GET_ITEM(items.get(), i);
      KFFIAny k, v;
      if (PyToOwnedAny(PyTuple_GET_ITEM(pair, 0), &k) != 0) {
        PendingErrorScope keep;  // the pairs converted so far go with the error pending
        map.clear();
        return -1;
      }
      Any kk = details::AnyUnsafe::FromOwnedRaw(k);
      if (PyToOwnedAny(PyTuple_GET_ITEM(pair, 1), &v) != 0) {
        PendingErrorScope keep;
        kk.reset();
        map.clear();
        return -1;
      }
      map.Set(std::move(kk), details::AnyUnsafe::FromOwnedRaw(v));
    }
    TypeTraits<Map<Any, Any>>::MoveToAny(std::move(map), out);
  }
  KFFI_CATCH_ALL { return (RaiseFromCppException(), -1); }
  return 0;
}

/// An owned Array or Map for a container; -1 with an error set.
int MakeContainer(PyObject* obj, Kind kind, KFFIAny* out) {
  if (EnterContainer() != 0) return -1;
  int rc = kind == Kind::kSequence ? MakeArray(obj, out) : MakeMap(obj, out);
  LeaveContainer();
  return rc;
}

/// An argument whose conversion ran Python code that failed (__index__, __float__, a converter
/// hook, an element of a container, a str that is no UTF-8): the error names the argument
/// (LabelConversionError). Values without a position (index < 0) are left alone. Returns -1.
KFFI_NOINLINE int LabelArgError(const CallContext* ctx, Py_ssize_t index) {
  if (index < 0 || !PyErr_Occurred()) return -1;
  const ArgPlace place = ArgPlaceOf(ctx, index);
  return LabelConversionError(place.subject, place.context);
}

/// A kffi object argument whose native object was released.
int RaiseNullObject(PyTypeObject* tp, const CallContext* ctx, Py_ssize_t index) {
  PyErr_SetString(PyExc_ValueError,
                  ArgPlaceOf(ctx, index)
                      .Say(std::string("the ") + tp->tp_name + " object is null (destroyed)")
                      .c_str());
  return -1;
}

}  // namespace

/// Every argument type but the ones ConvertArg answers inline.
KFFI_NOINLINE int ConvertArgGeneral(PyObject* obj, KFFIAny* out, CallContext* ctx, Py_ssize_t index,
                                    const TypeInfo* info) {
  PyTypeObject* tp = Py_TYPE(obj);
  switch (info->kind) {
    case Kind::kInt:
      return ConvertInt(obj, out, ctx, index);
    case Kind::kFloat:
      SetPOD(out, kKFFIFloat);
      out->v_float64 = PyFloat_AS_DOUBLE(obj);
      return 0;
    case Kind::kNone:
      SetNone(out);
      return 0;
    case Kind::kBool:
      SetPOD(out, kKFFIBool);
      out->v_int64 = obj == Py_True;
      return 0;
    case Kind::kObject: {
      KFFIObjectHandle h = reinterpret_cast<PyObjectHandle*>(obj)->handle;
      if (h == nullptr) return RaiseNullObject(tp, ctx, index);
      SetObject(out, static_cast<KFFIObject*>(h));
      if (out->type_index == kKFFITensor) {
        out->tensor_flags = OwnedTensorFlags(h);
        // A kffi.Tensor handed straight back (e.g. echo) returns as the same Python object.
        ctx->NoteTensorSource(KFFITensorGetDLTensorPtr(h), obj);
      }
      return 0;
    }
    case Kind::kExchangeTensor:
    case Kind::kNumpyTensor:
    case Kind::kDLPackTensor:
    case Kind::kJaxTracer:
      return ConvertTensorArg(obj, info, out, ctx, index);
    case Kind::kIndex: {
      ctx->NotePythonRuns();
      PyRef i(PyNumber_Index(obj));
      if (!i) return LabelArgError(ctx, index);
      return ConvertInt(i.get(), out, ctx, index);
    }
    case Kind::kFloatLike: {
      ctx->NotePythonRuns();
      double v = PyFloat_AsDouble(obj);
      if (v == -1.0 && PyErr_Occurred()) return LabelArgError(ctx, index);
      SetPOD(out, kKFFIFloat);
      out->v_float64 = v;
      return 0;
    }
    case Kind::kStr:
      return ConvertStr(obj, out, ctx) != 0 ? LabelArgError(ctx, index) : 0;
    case Kind::kBytes:
      return ConvertBytes(obj, out, ctx) != 0 ? LabelArgError(ctx, index) : 0;
    case Kind::kDType:
      ctx->NotePythonRuns();
      return ConvertDType(obj, out) != 0 ? LabelArgError(ctx, index) : 0;
    case Kind::kDevice:
      ctx->NotePythonRuns();
      return ConvertDevice(obj, out) != 0 ? LabelArgError(ctx, index) : 0;
    case Kind::kStream:
      ctx->NotePythonRuns();
      return ConvertStream(obj, out, ctx, index);
    case Kind::kVoidPtr: {
      ctx->NotePythonRuns();
      PyRef value(PyObject_GetAttrString(obj, "value"));
      if (!value) return LabelArgError(ctx, index);
      if (value.get() == Py_None) {
        SetNone(out);
        return 0;
      }
      SetPOD(out, kKFFIOpaquePtr);
      out->v_ptr = PyLong_AsVoidPtr(value.get());
      return PyErr_Occurred() ? LabelArgError(ctx, index) : 0;
    }
    case Kind::kSequence:
    case Kind::kMapping: {
      ctx->NotePythonRuns();
      if (MakeContainer(obj, info->kind, out) != 0) return LabelArgError(ctx, index);
      ctx->KeepAlive(*out);
      return 0;
    }
    case Kind::kCallable: {
      KFFIObjectHandle h = nullptr;
      if (CallableToFunctionHandle(obj, &h) != 0) return -1;
      SetObject(out, static_cast<KFFIObject*>(h));
      ctx->KeepAlive(*out);
      return 0;
    }
    case Kind::kRecord:
      return ConvertRecordArg(obj, out, ctx, index);
    case Kind::kOpaque:
    default:
      break;
  }
  // Anything else is carried by reference so that it can come back unchanged.
  if (MakeOpaque(obj, out) != 0) return -1;
  ctx->KeepAlive(*out);
  return 0;
}

/// Ints that fit int64, floats and ASCII str without a call (inlined into the argument loop);
/// the rest (ints past int64 and longer str with a NUL byte among them) through the table.
KFFI_INLINE int ConvertArgFast(PyObject* obj, KFFIAny* out, CallContext* ctx, Py_ssize_t index) {
  if (KFFI_LIKELY(PackPlainArg(obj, out))) return 0;
  return ConvertArgByTable(obj, out, ctx, index);
}

int ConvertArg(PyObject* obj, KFFIAny* out, CallContext* ctx, Py_ssize_t index) {
  return ConvertArgFast(obj, out, ctx, index);
}

KFFI_NOINLINE int RetakeStaleViews(PyObject* const* args, Py_ssize_t nargs, KFFIAny* packed,
                                   CallContext* ctx) {
  // Python code ran after some borrowed views were taken and may have resized or freed their
  // memory (set_, resize_): take them again now that no more Python code runs before the call.
  // Retaking runs none either (no __dlpack__, no torch method, no hook), so one pass leaves no
  // view stale; what cannot be read without Python code any more is refused.
  ctx->stale_views = false;
  for (Py_ssize_t i = 0; i < nargs; ++i) {
    if (packed[i].type_index != kKFFIDLTensorPtr) continue;
    if (RetakeTensorView(args[i], &packed[i], ctx, i) != 0) return -1;
  }
  return 0;
}

/// ConvertArgs for a function with record parameters (out of line: most have none).
KFFI_NOINLINE int ConvertArgsWithRecords(PyObject* const* args, Py_ssize_t nargs, KFFIAny* packed,
                                         CallContext* ctx, const RecordParams* records) {
  const Py_ssize_t nrecords = static_cast<Py_ssize_t>(records->types.size());
  for (Py_ssize_t i = 0; i < nargs; ++i) {
    if (i < nrecords && records->types[static_cast<size_t>(i)] >= 0) {
      const int rc = ConvertRecordParamArg(args[i], records->types[static_cast<size_t>(i)],
                                           &packed[i], ctx, i);
      if (rc < 0) return -1;
      if (rc == 0) continue;
    }
    if (ConvertArgFast(args[i], &packed[i], ctx, i) != 0) return -1;
  }
  if (KFFI_UNLIKELY(ctx->stale_views)) return RetakeStaleViews(args, nargs, packed, ctx);
  return 0;
}

int ConvertArgs(PyObject* const* args, Py_ssize_t nargs, KFFIAny* packed, CallContext* ctx) {
  ctx->args = args;
  ctx->nargs = nargs;
  ctx->lazy_checked_end = 0;
  if (KFFI_UNLIKELY(ctx->function != nullptr && ctx->function->record_params != nullptr)) {
    return ConvertArgsWithRecords(args, nargs, packed, ctx, ctx->function->record_params);
  }
  for (Py_ssize_t i = 0; i < nargs; ++i) {
    if (ConvertArgFast(args[i], &packed[i], ctx, i) != 0) return -1;
  }
  if (KFFI_UNLIKELY(ctx->stale_views)) return RetakeStaleViews(args, nargs, packed, ctx);
  return 0;
}

int PyToOwnedAny(PyObject* obj, KFFIAny* out) {
  const TypeInfo* info = TypeInfoOf(Py_TYPE(obj));
  switch (info->kind) {
    case Kind::kSequence:
    case Kind::kMapping:
      // Straight to the owned container: nested containers recurse through here only.
      return MakeContainer(obj, info->kind, out);
    case Kind::kExchangeTensor:
    case Kind::kNumpyTensor:
    case Kind::kDLPackTensor:
    case Kind::kJaxTracer: {
      // A borrowed tensor cannot outlive the call: take an owning reference through DLPack.
      KFFIObjectHandle h = nullptr;
      if (TensorToOwnedHandle(obj, &h) != 0) return -1;
      SetObject(out, static_cast<KFFIObject*>(h));
      return 0;
    }
    default:
      break;
  }
  CallContext ctx;
  KFFIAny view;
  if (ConvertArg(obj, &view, &ctx, -1) != 0) return -1;
  // Stored values carry no tensor flags (an owned Tensor keeps its read-only flag itself).
  if (view.type_index == kKFFITensor) view.tensor_flags = 0;
  if (KFFIAnyViewToOwnedAny(&view, out) != 0) return (RaiseFromKFFIError(-1), -1);
  return 0;
}

namespace {

PyObject* AnyToPyImpl(KFFIAny* v, const CallContext* ctx, int depth);

/// A call's Array result as a tuple (nested Arrays too, up to the container depth limit; deeper
/// ones stay kffi.Array). Steals the array reference.
PyObject* ArrayToTuple(KFFIObjectHandle arr, const CallContext* ctx, int depth) {
  auto* cell = static_cast<KFFISeqCell*>(KFFIObjectGetCellPtr(arr));
  PyRef tuple(PyTuple_New(static_cast<Py_ssize_t>(cell->size)));
  if (!tuple) {
    ReleaseObject(arr);
    return nullptr;
  }
  auto* items = static_cast<const KFFIAny*>(cell->data);
  for (int64_t i = 0; i < cell->size; ++i) {
    KFFIAny owned;
    if (KFFIAnyViewToOwnedAny(&items[i], &owned) != 0) {
      RaiseFromKFFIError(-1);
      ReleaseObject(arr);  // with the error pending: see PendingErrorScope
      return nullptr;
    }
    PyObject* item = AnyToPyImpl(&owned, ctx, depth + 1);
    if (item == nullptr) {
      ReleaseObject(arr);
      return nullptr;
    }
    PyTuple_SET_ITEM(tuple.get(), static_cast<Py_ssize_t>(i), item);
  }
  KFFIObjectDecRef(arr);
  return tuple.release();
}

PyObject* AnyToPyImpl(KFFIAny* v, const CallContext* ctx, int depth) {
  switch (v->type_index) {
    case kKFFINone:
      Py_RETURN_NONE;
    case kKFFIInt:
      return PyLong_FromLongLong(v->v_int64);
    case kKFFIBool:
      return PyBool_FromLong(v->v_int64 != 0);
    case kKFFIFloat:
      return PyFloat_FromDouble(v->v_float64);
    case kKFFISmallStr:
      return PyUnicode_DecodeUTF8(v->v_bytes, v->small_str_len, "surrogateescape");
    case kKFFISmallBytes:
      return PyBytes_FromStringAndSize(v->v_bytes, v->small_str_len);
    case kKFFIOpaquePtr: {
      PyObject* hook = GetHook(kHookMakeVoidp);
      if (hook == nullptr) return PyLong_FromVoidPtr(v->v_ptr);
      return PyObject_CallFunction(hook, "N", PyLong_FromVoidPtr(v->v_ptr));
    }
    case kKFFIDataType: {
      PyObject* hook = GetHook(kHookMakeDType);
      if (hook == nullptr) {
        return Py_BuildValue("(iii)", v->v_dtype.code, v->v_dtype.bits, v->v_dtype.lanes);
      }
      return PyObject_CallFunction(hook, "iii", v->v_dtype.code, v->v_dtype.bits, v->v_dtype.lanes);
    }
    case kKFFIDevice: {
      PyObject* hook = GetHook(kHookMakeDevice);
      if (hook == nullptr) {
        return Py_BuildValue("(ii)", v->v_device.device_type, v->v_device.device_id);
      }
      return PyObject_CallFunction(hook, "ii", v->v_device.device_type, v->v_device.device_id);
    }
    case kKFFIStr:
    case kKFFIBytes: {
      auto* cell = static_cast<KFFIByteArray*>(KFFIObjectGetCellPtr(v->v_obj));
      PyObject* r =
          v->type_index == kKFFIStr
              ? PyUnicode_DecodeUTF8(cell->data, static_cast<Py_ssize_t>(cell->size),
                                     "surrogateescape")
              : PyBytes_FromStringAndSize(cell->data, static_cast<Py_ssize_t>(cell->size));
      KFFIObjectDecRef(v->v_obj);
      return r;
    }
    case kKFFIOpaquePyObject: {
      auto* cell = static_cast<KFFIOpaqueObjectCell*>(KFFIObjectGetCellPtr(v->v_obj));
      PyObject* r = static_cast<PyObject*>(cell->handle);
      Py_INCREF(r);
      KFFIObjectDecRef(v->v_obj);
      return r;
    }
    case kKFFITensor:
      return WrapTensor(v->v_obj, ctx);
    case kKFFIArray:
      if (ctx != nullptr && depth < kMaxContainerDepth) return ArrayToTuple(v->v_obj, ctx, depth);
      break;
    default:
      break;
  }
  if (v->type_index >= kKFFIStaticObjectBegin) return WrapObject(v->v_obj);
  PyErr_Format(PyExc_TypeError, "kffi: cannot return a borrowed value of type index %d",
               v->type_index);
  return nullptr;
}

}  // namespace

PyObject* AnyToPy(KFFIAny* v, const CallContext* ctx) { return AnyToPyImpl(v, ctx, 0); }

PyObject* AnyViewToPy(const KFFIAny* view) {
  // A borrowed DLTensor* becomes a kffi.Tensor viewing the same memory; like the C++ caller's
  // TensorView it is valid while the caller's tensor is (at least for the callback).
  KFFIAny owned;
  if (KFFIAnyViewToOwnedAny(view, &owned) != 0) return RaiseFromKFFIError(-1);
  return AnyToPy(&owned, nullptr);
}

}  // namespace pyglue
}  // namespace kffi
