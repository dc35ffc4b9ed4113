// python/src/py_convert.cc: Python values <-> KFFIAny, with converters chosen once per type.
#include <kffi/container/array.h>
#include <kffi/container/map.h>

#include <unordered_map>

#include "py_common.h"

namespace kffi {
namespace py {

namespace {

/// How values of one Python type convert. Decided the first time the type is seen.
enum class Kind : uint8_t {
  kInt,
  kFloat,
  kBool,
  kNone,
  kStr,
  kBytes,
  kObject,
  kTensor,
  kSequence,
  kMapping,
  kIndex,      // int-like (__index__): numpy integers, IntEnum
  kFloatLike,  // float-like (__float__): numpy floats
  kDType,      // kffi.dtype, torch.dtype, numpy.dtype, ...
  kDevice,     // kffi.Device, torch.device
  kVoidPtr,    // ctypes.c_void_p
  kCallable,
  kOpaque,  // anything else: held by reference as an OpaquePyObject
};

struct TypeEntry {
  Kind kind;
};

// Guarded by the GIL. Types are kept alive by the cache (one reference each).
std::unordered_map<PyTypeObject*, TypeEntry>* g_cache = nullptr;
// Python hooks installed by kffi/__init__.py (see _set_converter_hooks).
PyObject* g_classify = nullptr;     // classify(type) -> str kind
PyObject* g_to_dtype = nullptr;     // to_dtype(obj) -> (code, bits, lanes)
PyObject* g_to_device = nullptr;    // to_device(obj) -> (device_type, device_id)
PyObject* g_make_dtype = nullptr;   // make_dtype(code, bits, lanes) -> kffi.dtype
PyObject* g_make_device = nullptr;  // make_device(device_type, device_id) -> kffi.Device
PyObject* g_make_voidp = nullptr;   // make_voidp(address) -> ctypes.c_void_p

/// What the Python classify hook says of tp; kOpaque when it has no opinion.
Kind ClassifyByHook(PyTypeObject* tp) {
  if (g_classify == nullptr) return Kind::kOpaque;
  PyRef r(PyObject_CallOneArg(g_classify, reinterpret_cast<PyObject*>(tp)));
  if (!r) {
    PyErr_Clear();
    return Kind::kOpaque;
  }
  if (!PyUnicode_Check(r.get())) return Kind::kOpaque;
  const char* s = PyUnicode_AsUTF8(r.get());
  std::string k = s ? s : "";
  if (k == "dtype") return Kind::kDType;
  if (k == "device") return Kind::kDevice;
  if (k == "voidp") return Kind::kVoidPtr;
  if (k == "index") return Kind::kIndex;
  if (k == "float") return Kind::kFloatLike;
  if (k == "sequence") return Kind::kSequence;
  if (k == "mapping") return Kind::kMapping;
  if (k == "callable") return Kind::kCallable;
  return Kind::kOpaque;
}

Kind ClassifySlow(PyTypeObject* tp) {
  if (PyType_IsSubtype(tp, g_object_type)) return Kind::kObject;
  if (IsTensorType(tp)) return Kind::kTensor;
  if (PyType_IsSubtype(tp, &PyLong_Type)) return Kind::kIndex;
  if (PyType_IsSubtype(tp, &PyFloat_Type)) return Kind::kFloatLike;
  if (PyType_IsSubtype(tp, &PyUnicode_Type)) {
    // kffi.dtype is a str subclass, and must travel as a DataType, not as its spelling.
    return ClassifyByHook(tp) == Kind::kDType ? Kind::kDType : Kind::kStr;
  }
  if (PyType_IsSubtype(tp, &PyBytes_Type) || tp == &PyByteArray_Type) return Kind::kBytes;
  Kind hooked = ClassifyByHook(tp);
  if (hooked != Kind::kOpaque) return hooked;
  if (PyType_IsSubtype(tp, &PyTuple_Type) || PyType_IsSubtype(tp, &PyList_Type)) {
    return Kind::kSequence;
  }
  if (PyType_IsSubtype(tp, &PyDict_Type)) return Kind::kMapping;
  if (tp->tp_call != nullptr) return Kind::kCallable;
  return Kind::kOpaque;
}

// The last type looked up (arguments of one call are often of one type, e.g. three tensors):
// answered without hashing. The type is in g_cache, which keeps it alive; reset with it.
PyTypeObject* g_last_type = nullptr;
Kind g_last_kind = Kind::kOpaque;

Kind KindOf(PyTypeObject* tp) {
  if (tp == g_last_type) return g_last_kind;
  if (g_cache == nullptr) g_cache = new std::unordered_map<PyTypeObject*, TypeEntry>();
  auto it = g_cache->find(tp);
  Kind k;
  if (it != g_cache->end()) {
    k = it->second.kind;
  } else {
    k = ClassifySlow(tp);
    Py_INCREF(tp);
    g_cache->emplace(tp, TypeEntry{k});
  }
  g_last_type = tp;
  g_last_kind = k;
  return k;
}

void SetPOD(KFFIAny* out, int32_t index) {
  out->type_index = index;
  out->zero_padding = 0;
  out->v_int64 = 0;
}

/// index < 0: a value inside a container or a callback result, which has no argument position.
int SetOverflow(Py_ssize_t index) {
  if (index < 0) {
    PyErr_SetString(PyExc_OverflowError,
                    "Python int too large to convert to int64 (kffi ints are 64-bit)");
    return -1;
  }
  PyErr_Format(PyExc_OverflowError,
               "Argument #%zd: Python int too large to convert to int64 (kffi ints are 64-bit)",
               index);
  return -1;
}

/// A container argument failed to convert: an overflow of one of its elements names the
/// argument (the element itself was converted without a position). Returns -1.
int ContainerArgError(Py_ssize_t index) {
  if (index < 0 || !PyErr_Occurred() || PyErr_Occurred() != PyExc_OverflowError) return -1;
  PyObject *type, *value, *tb;
  PyErr_Fetch(&type, &value, &tb);
  PyErr_NormalizeException(&type, &value, &tb);
  PyRef msg(PyObject_Str(value));
  Py_XDECREF(type);
  Py_XDECREF(value);
  Py_XDECREF(tb);
  if (!msg) return -1;
  PyErr_Format(PyExc_OverflowError, "Argument #%zd: %U", index, msg.get());
  return -1;
}

int ConvertInt(PyObject* obj, KFFIAny* out, Py_ssize_t index) {
  int overflow = 0;
  long long v = PyLong_AsLongLongAndOverflow(obj, &overflow);
  if (overflow != 0) return SetOverflow(index);
  if (v == -1 && PyErr_Occurred()) return -1;
  SetPOD(out, kKFFIInt);
  out->v_int64 = v;
  return 0;
}

/// Stores the UTF-8 text s[0:n] of a str argument (held by the caller) into out.
int StoreStr(const char* s, Py_ssize_t n, KFFIAny* out, CallContext* ctx) {
  if (n <= 7) {
    SetPOD(out, kKFFISmallStr);
    out->small_str_len = static_cast<uint32_t>(n);
    std::memcpy(out->v_bytes, s, static_cast<size_t>(n));
    return 0;
  }
  if (std::memchr(s, 0, static_cast<size_t>(n)) == nullptr) {
    // Borrowed: the UTF-8 buffer is cached in the str object, which the caller holds.
    SetPOD(out, kKFFIRawStr);
    out->v_c_str = s;
    return 0;
  }
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

/// Reads a one-digit int (|v| < 2**30) straight from the object, as CPython's own fast paths
/// do; false for anything else (then PyLong_AsLongLongAndOverflow decides).
inline bool ReadCompactInt(PyObject* obj, int64_t* v) {
#if PY_VERSION_HEX >= 0x030C0000
  auto* l = reinterpret_cast<PyLongObject*>(obj);
  if (!PyUnstable_Long_IsCompact(l)) return false;
  *v = static_cast<int64_t>(PyUnstable_Long_CompactValue(l));
  return true;
#elif PY_VERSION_HEX >= 0x030B0000
  Py_ssize_t size = Py_SIZE(obj);
  if (size < -1 || size > 1) return false;
  *v = static_cast<int64_t>(size) *
       static_cast<int64_t>(reinterpret_cast<PyLongObject*>(obj)->ob_digit[0]);
  return true;
#else
  (void)obj;
  (void)v;
  return false;
#endif
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
  if (KFFIBytesFromByteArray(&ba, out) != 0) return (RaiseFromKFFIError(-1), -1);
  if (out->type_index >= kKFFIStaticObjectBegin) ctx->KeepAlive(*out);
  return 0;
}

int ConvertTupleOfInts(PyObject* r, int64_t* vals, int n, const char* what) {
  if (!PyTuple_Check(r) || PyTuple_GET_SIZE(r) != n) {
    PyErr_Format(PyExc_TypeError, "internal: %s hook returned a bad value", what);
    return -1;
  }
  for (int i = 0; i < n; ++i) {
    vals[i] = PyLong_AsLongLong(PyTuple_GET_ITEM(r, i));
    if (vals[i] == -1 && PyErr_Occurred()) return -1;
  }
  return 0;
}

int ConvertDType(PyObject* obj, KFFIAny* out) {
  PyRef r(PyObject_CallOneArg(g_to_dtype, obj));
  if (!r) return -1;
  int64_t v[3];
  if (ConvertTupleOfInts(r.get(), v, 3, "dtype") != 0) return -1;
  SetPOD(out, kKFFIDataType);
  out->v_dtype = DLDataType{static_cast<uint8_t>(v[0]), static_cast<uint8_t>(v[1]),
                            static_cast<uint16_t>(v[2])};
  return 0;
}

int ConvertDevice(PyObject* obj, KFFIAny* out) {
  PyRef r(PyObject_CallOneArg(g_to_device, obj));
  if (!r) return -1;
  int64_t v[2];
  if (ConvertTupleOfInts(r.get(), v, 2, "device") != 0) return -1;
  SetPOD(out, kKFFIDevice);
  out->v_device = DLDevice{static_cast<DLDeviceType>(v[0]), static_cast<int32_t>(v[1])};
  return 0;
}

void PyObjectDeleter(void* handle) {
  // May run on any thread, possibly after the interpreter is gone: then the object leaks.
  if (!Py_IsInitialized()) return;
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
  SetPOD(out, kKFFIOpaquePyObject);
  out->v_obj = static_cast<KFFIObject*>(h);
  return 0;
}

/// Builds an owned Array from a tuple/list (elements converted to owned values).
int MakeArray(PyObject* obj, KFFIAny* out) {
  PyRef seq(PySequence_Fast(obj, "expected a sequence"));
  if (!seq) return -1;
  Py_ssize_t n = PySequence_Fast_GET_SIZE(seq.get());
  PyObject** items = PySequence_Fast_ITEMS(seq.get());
  try {
    std::vector<Any> values;
    values.reserve(static_cast<size_t>(n));
    for (Py_ssize_t i = 0; i < n; ++i) {
      KFFIAny v;
      if (PyToOwnedAny(items[i], &v) != 0) return -1;
      values.push_back(details::AnyUnsafe::FromOwnedRaw(v));
    }
    Array<Any> arr(values.begin(), values.end());
    TypeTraits<Array<Any>>::MoveToAny(std::move(arr), out);
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
    return -1;
  }
  return 0;
}

/// Builds an owned Map from a dict.
int MakeMap(PyObject* obj, KFFIAny* out) {
  try {
    Map<Any, Any> map;
    PyObject *key, *value;
    Py_ssize_t pos = 0;
    if (!PyDict_Check(obj)) {
      // A mapping that is not a dict: go through its items().
      PyRef d(PyDict_New());
      if (!d || PyDict_Update(d.get(), obj) != 0) return -1;
      return MakeMap(d.get(), out);
    }
    while (PyDict_Next(obj, &pos, &key, &value)) {
      KFFIAny k, v;
      if (PyToOwnedAny(key, &k) != 0) return -1;
      Any kk = details::AnyUnsafe::FromOwnedRaw(k);
      if (PyToOwnedAny(value, &v) != 0) return -1;
      map.Set(std::move(kk), details::AnyUnsafe::FromOwnedRaw(v));
    }
    TypeTraits<Map<Any, Any>>::MoveToAny(std::move(map), out);
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
    return -1;
  }
  return 0;
}

}  // namespace

/// Every argument type (ConvertArg answers the commonest ones before calling it).
__attribute__((noinline)) int ConvertArgGeneral(PyObject* obj, KFFIAny* out, CallContext* ctx,
                                                Py_ssize_t index) {
  PyTypeObject* tp = Py_TYPE(obj);
  // The most common argument types are tested before any table lookup.
  if (tp == &PyLong_Type) return ConvertInt(obj, out, index);
  if (tp == &PyFloat_Type) {
    SetPOD(out, kKFFIFloat);
    out->v_float64 = PyFloat_AS_DOUBLE(obj);
    return 0;
  }
  if (obj == Py_None) {
    SetPOD(out, kKFFINone);
    return 0;
  }
  if (tp == &PyBool_Type) {
    SetPOD(out, kKFFIBool);
    out->v_int64 = obj == Py_True;
    return 0;
  }
  if (tp == &PyUnicode_Type) return ConvertStr(obj, out, ctx);
  Kind kind = KindOf(tp);
  switch (kind) {
    case Kind::kObject: {
      KFFIObjectHandle h = reinterpret_cast<PyObjectHandle*>(obj)->handle;
      if (h == nullptr) {
        if (index < 0) {
          PyErr_Format(PyExc_ValueError, "the %s object is null (destroyed)", tp->tp_name);
        } else {
          PyErr_Format(PyExc_ValueError, "Argument #%zd: the %s object is null (destroyed)", index,
                       tp->tp_name);
        }
        return -1;
      }
      SetPOD(out, static_cast<KFFIObject*>(h)->type_index);
      out->v_obj = static_cast<KFFIObject*>(h);
      if (out->type_index == kKFFITensor) {
        // A kffi.Tensor handed straight back (e.g. echo) returns as the same Python object.
        ctx->NoteTensorSource(KFFITensorGetDLTensorPtr(h), obj);
      }
      return 0;
    }
    case Kind::kTensor:
      break;
    case Kind::kIndex: {
      PyRef i(PyNumber_Index(obj));
      if (!i) return -1;
      return ConvertInt(i.get(), out, index);
    }
    case Kind::kFloatLike: {
      double v = PyFloat_AsDouble(obj);
      if (v == -1.0 && PyErr_Occurred()) return -1;
      SetPOD(out, kKFFIFloat);
      out->v_float64 = v;
      return 0;
    }
    case Kind::kStr:
      return ConvertStr(obj, out, ctx);
    case Kind::kBytes:
      return ConvertBytes(obj, out, ctx);
    case Kind::kDType:
      return ConvertDType(obj, out);
    case Kind::kDevice:
      return ConvertDevice(obj, out);
    case Kind::kVoidPtr: {
      PyRef value(PyObject_GetAttrString(obj, "value"));
      if (!value) return -1;
      if (value.get() == Py_None) {
        SetPOD(out, kKFFINone);
        return 0;
      }
      SetPOD(out, kKFFIOpaquePtr);
      out->v_ptr = PyLong_AsVoidPtr(value.get());
      return PyErr_Occurred() ? -1 : 0;
    }
    case Kind::kSequence:
    case Kind::kMapping: {
      // A container that holds itself would recurse until the C stack overflows. Nesting is
      // bounded by Python's recursion limit, counted here too: Python 3.12+ checks C code
      // against a much deeper limit of its own, too deep for this recursion's stack frames.
      static thread_local int depth = 0;
      if (depth >= Py_GetRecursionLimit()) {
        PyErr_SetString(PyExc_RecursionError,
                        "maximum recursion depth exceeded while converting a container for kffi");
        return -1;
      }
      if (Py_EnterRecursiveCall(" while converting a container for kffi") != 0) return -1;
      ++depth;
      int rc = kind == Kind::kSequence ? MakeArray(obj, out) : MakeMap(obj, out);
      --depth;
      Py_LeaveRecursiveCall();
      if (rc != 0) return ContainerArgError(index);
      ctx->KeepAlive(*out);
      return 0;
    }
    case Kind::kCallable: {
      KFFIObjectHandle h = nullptr;
      if (CallableToFunctionHandle(obj, &h) != 0) return -1;
      SetPOD(out, kKFFIFunction);
      out->v_obj = static_cast<KFFIObject*>(h);
      ctx->KeepAlive(*out);
      return 0;
    }
    case Kind::kOpaque:
    default:
      break;
  }
  if (kind == Kind::kTensor) {
    int rc = ConvertTensorArg(obj, tp, out, ctx, index);
    if (rc != 0) return rc < 0 ? -1 : 0;
  }
  // Anything else is carried by reference so that it can come back unchanged.
  if (MakeOpaque(obj, out) != 0) return -1;
  ctx->KeepAlive(*out);
  return 0;
}

int ConvertArg(PyObject* obj, KFFIAny* out, CallContext* ctx, Py_ssize_t index) {
  // Small ints, floats and ASCII str without calls into CPython; the rest in ConvertArgGeneral.
  PyTypeObject* tp = Py_TYPE(obj);
  if (tp == &PyLong_Type) {
    int64_t v;
    if (!ReadCompactInt(obj, &v)) return ConvertInt(obj, out, index);
    SetPOD(out, kKFFIInt);
    out->v_int64 = v;
    return 0;
  }
  if (tp == &PyFloat_Type) {
    SetPOD(out, kKFFIFloat);
    out->v_float64 = PyFloat_AS_DOUBLE(obj);
    return 0;
  }
  if (tp == &PyUnicode_Type && PyUnicode_IS_COMPACT_ASCII(obj)) {
    // ASCII is its own UTF-8: the same buffer PyUnicode_AsUTF8AndSize returns for it.
    return StoreStr(static_cast<const char*>(PyUnicode_DATA(obj)), PyUnicode_GET_LENGTH(obj), out,
                    ctx);
  }
  if (tp == g_last_type && g_last_kind == Kind::kTensor) {
    // Another tensor of the type just seen (e.g. the second of three torch tensors).
    int rc = ConvertTensorArg(obj, tp, out, ctx, index);
    if (rc != 0) return rc < 0 ? -1 : 0;
  }
  return ConvertArgGeneral(obj, out, ctx, index);
}

int PyToOwnedAny(PyObject* obj, KFFIAny* out) {
  CallContext ctx;
  KFFIAny view;
  if (ConvertArg(obj, &view, &ctx, -1) != 0) return -1;
  if (view.type_index == kKFFIDLTensorPtr) {
    // A borrowed tensor cannot outlive the call: take an owning reference through DLPack.
    KFFIObjectHandle h = nullptr;
    if (TensorToOwnedHandle(obj, &h) != 0) return -1;
    SetPOD(out, kKFFITensor);
    out->v_obj = static_cast<KFFIObject*>(h);
    return 0;
  }
  if (KFFIAnyViewToOwnedAny(&view, out) != 0) return (RaiseFromKFFIError(-1), -1);
  return 0;
}

PyObject* AnyToPy(KFFIAny* v, const CallContext* ctx) {
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
    case kKFFIOpaquePtr:
      return PyObject_CallFunction(g_make_voidp, "N", PyLong_FromVoidPtr(v->v_ptr));
    case kKFFIDataType:
      return PyObject_CallFunction(g_make_dtype, "iii", v->v_dtype.code, v->v_dtype.bits,
                                   v->v_dtype.lanes);
    case kKFFIDevice:
      return PyObject_CallFunction(g_make_device, "ii", v->v_device.device_type,
                                   v->v_device.device_id);
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
    default:
      break;
  }
  if (v->type_index >= kKFFIStaticObjectBegin) return WrapObject(v->v_obj);
  PyErr_Format(PyExc_TypeError, "kffi: cannot return a borrowed value of type index %d",
               v->type_index);
  return nullptr;
}

PyObject* AnyViewToPy(const KFFIAny* view) {
  // A borrowed DLTensor* becomes a kffi.Tensor viewing the same memory; like the C++ caller's
  // TensorView it is valid while the caller's tensor is (at least for the callback).
  KFFIAny owned;
  if (KFFIAnyViewToOwnedAny(view, &owned) != 0) return RaiseFromKFFIError(-1);
  return AnyToPy(&owned, nullptr);
}

void ClearConverterCache() {
  g_last_type = nullptr;
  if (g_cache == nullptr) return;
  for (auto& kv : *g_cache) Py_DECREF(kv.first);
  g_cache->clear();
}

/// _set_converter_hooks(classify, to_dtype, to_device, make_dtype, make_device, make_voidp)
PyObject* SetConverterHooks(PyObject*, PyObject* args) {
  PyObject *a, *b, *c, *d, *e, *f;
  if (!PyArg_ParseTuple(args, "OOOOOO", &a, &b, &c, &d, &e, &f)) return nullptr;
  PyObject** slots[] = {&g_classify,   &g_to_dtype,    &g_to_device,
                        &g_make_dtype, &g_make_device, &g_make_voidp};
  PyObject* values[] = {a, b, c, d, e, f};
  for (int i = 0; i < 6; ++i) {
    Py_INCREF(values[i]);
    Py_XSETREF(*slots[i], values[i]);
  }
  ClearConverterCache();
  Py_RETURN_NONE;
}

/// Marks a Python type as a tensor type so ConvertArg goes straight to the tensor paths.
void MarkTensorType(PyTypeObject* tp) {
  if (g_cache == nullptr) g_cache = new std::unordered_map<PyTypeObject*, TypeEntry>();
  if (g_cache->find(tp) != g_cache->end()) return;
  Py_INCREF(tp);
  g_cache->emplace(tp, TypeEntry{Kind::kTensor});
}

}  // namespace py
}  // namespace kffi
