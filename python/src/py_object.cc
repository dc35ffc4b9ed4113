// python/src/py_object.cc: kffi.Object and kffi.Function (vectorcall) and Python callbacks.
#include <cstddef>
#include <unordered_map>

#include "py_common.h"
#include "structmember.h"

namespace kffi {
namespace py {

PyTypeObject* g_object_type = nullptr;
PyTypeObject* g_function_type = nullptr;
int g_default_release_gil = 1;

namespace {

// type index -> Python class (strong references), filled by _register_object_class.
std::unordered_map<int32_t, PyObject*>* g_classes = nullptr;

// ---- kffi.Object ------------------------------------------------------------------------------

void ObjectDealloc(PyObject* self) {
  auto* o = reinterpret_cast<PyObjectHandle*>(self);
  PyTypeObject* tp = Py_TYPE(self);
  if (PyType_HasFeature(tp, Py_TPFLAGS_HAVE_GC)) PyObject_GC_UnTrack(self);
  if (o->weakrefs != nullptr) PyObject_ClearWeakRefs(self);
  Py_CLEAR(o->dict);
  if (tp == g_function_type) {
    Py_CLEAR(reinterpret_cast<PyFunction*>(self)->param_names);
  }
  KFFIObjectHandle h = o->handle;
  o->handle = nullptr;
  if (h != nullptr) KFFIObjectDecRef(h);
  tp->tp_free(self);
  Py_DECREF(tp);
}

int ObjectTraverse(PyObject* self, visitproc visit, void* arg) {
  auto* o = reinterpret_cast<PyObjectHandle*>(self);
  Py_VISIT(o->dict);
  Py_VISIT(Py_TYPE(self));
  if (Py_TYPE(self) == g_function_type) Py_VISIT(reinterpret_cast<PyFunction*>(self)->param_names);
  return 0;
}

int ObjectClear(PyObject* self) {
  auto* o = reinterpret_cast<PyObjectHandle*>(self);
  Py_CLEAR(o->dict);
  if (Py_TYPE(self) == g_function_type) Py_CLEAR(reinterpret_cast<PyFunction*>(self)->param_names);
  return 0;
}

PyObject* ObjectRepr(PyObject* self) {
  KFFIObjectHandle h = reinterpret_cast<PyObjectHandle*>(self)->handle;
  if (h == nullptr) return PyUnicode_FromFormat("<%s (null)>", Py_TYPE(self)->tp_name);
  const KFFITypeInfo* info = KFFIGetTypeInfo(static_cast<KFFIObject*>(h)->type_index);
  return PyUnicode_FromFormat("<%s %s at %p>", Py_TYPE(self)->tp_name,
                              info ? info->type_key.data : "?", h);
}

Py_hash_t ObjectHash(PyObject* self) {
  return _Py_HashPointer(reinterpret_cast<PyObjectHandle*>(self)->handle);
}

PyObject* ObjectRichCompare(PyObject* a, PyObject* b, int op) {
  if ((op != Py_EQ && op != Py_NE) || !PyObject_TypeCheck(b, g_object_type)) {
    Py_RETURN_NOTIMPLEMENTED;
  }
  bool same =
      reinterpret_cast<PyObjectHandle*>(a)->handle == reinterpret_cast<PyObjectHandle*>(b)->handle;
  return PyBool_FromLong(op == Py_EQ ? same : !same);
}

PyObject* ObjectGetTypeKey(PyObject* self, void*) {
  KFFIObjectHandle h = reinterpret_cast<PyObjectHandle*>(self)->handle;
  if (h == nullptr) Py_RETURN_NONE;
  const KFFITypeInfo* info = KFFIGetTypeInfo(static_cast<KFFIObject*>(h)->type_index);
  return PyUnicode_FromStringAndSize(info->type_key.data,
                                     static_cast<Py_ssize_t>(info->type_key.size));
}

PyObject* ObjectGetTypeIndex(PyObject* self, void*) {
  KFFIObjectHandle h = reinterpret_cast<PyObjectHandle*>(self)->handle;
  if (h == nullptr) Py_RETURN_NONE;
  return PyLong_FromLong(static_cast<KFFIObject*>(h)->type_index);
}

PyObject* ObjectGetHandle(PyObject* self, void*) {
  return PyLong_FromVoidPtr(reinterpret_cast<PyObjectHandle*>(self)->handle);
}

PyObject* ObjectGetUseCount(PyObject* self, void*) {
  auto* h = static_cast<KFFIObject*>(reinterpret_cast<PyObjectHandle*>(self)->handle);
  if (h == nullptr) return PyLong_FromLong(0);
  uint64_t rc = __atomic_load_n(&h->combined_ref_count, __ATOMIC_RELAXED);
  return PyLong_FromUnsignedLong(static_cast<uint32_t>(rc));
}

PyObject* ObjectSameAs(PyObject* self, PyObject* other) {
  KFFIObjectHandle h = GetHandle(other);
  return PyBool_FromLong(h != nullptr && h == reinterpret_cast<PyObjectHandle*>(self)->handle);
}

/// Drops the native reference now (the Python object becomes null); later use is an error.
PyObject* ObjectRelease(PyObject* self, PyObject*) {
  auto* o = reinterpret_cast<PyObjectHandle*>(self);
  KFFIObjectHandle h = o->handle;
  o->handle = nullptr;
  if (h != nullptr) KFFIObjectDecRef(h);
  Py_RETURN_NONE;
}

PyGetSetDef kObjectGetSet[] = {
    {"type_key", ObjectGetTypeKey, nullptr, "The kffi type key, e.g. 'ffi.Array'.", nullptr},
    {"type_index", ObjectGetTypeIndex, nullptr, "The kffi type index.", nullptr},
    {"_handle", ObjectGetHandle, nullptr, "Address of the native object.", nullptr},
    {"_use_count", ObjectGetUseCount, nullptr, "Strong references to the native object.", nullptr},
    {nullptr, nullptr, nullptr, nullptr, nullptr}};

PyMethodDef kObjectMethods[] = {
    {"same_as", ObjectSameAs, METH_O, "True when both wrap the same native object."},
    {"_release", ObjectRelease, METH_NOARGS, "Release the native object now."},
    {nullptr, nullptr, 0, nullptr}};

PyObject* ObjectNew(PyTypeObject* type, PyObject*, PyObject*) {
  PyObject* self = type->tp_alloc(type, 0);
  if (self == nullptr) return nullptr;
  reinterpret_cast<PyObjectHandle*>(self)->handle = nullptr;
  return self;
}

PyType_Slot kObjectSlots[] = {
    {Py_tp_dealloc, reinterpret_cast<void*>(ObjectDealloc)},
    {Py_tp_traverse, reinterpret_cast<void*>(ObjectTraverse)},
    {Py_tp_clear, reinterpret_cast<void*>(ObjectClear)},
    {Py_tp_repr, reinterpret_cast<void*>(ObjectRepr)},
    {Py_tp_hash, reinterpret_cast<void*>(ObjectHash)},
    {Py_tp_richcompare, reinterpret_cast<void*>(ObjectRichCompare)},
    {Py_tp_getset, kObjectGetSet},
    {Py_tp_methods, kObjectMethods},
    {Py_tp_new, reinterpret_cast<void*>(ObjectNew)},
    {Py_tp_doc, const_cast<char*>("Base of every Python view of a kffi object.")},
    {0, nullptr}};

PyMemberDef kObjectMembers[] = {
    {"__weaklistoffset__", T_PYSSIZET, offsetof(PyObjectHandle, weakrefs), READONLY, nullptr},
    {"__dictoffset__", T_PYSSIZET, offsetof(PyObjectHandle, dict), READONLY, nullptr},
    {nullptr, 0, 0, 0, nullptr}};

// ---- kffi.Function ----------------------------------------------------------------------------

/// Places keyword arguments at their parameter positions. Fills *out (borrowed references).
int BindKeywords(PyFunction* f, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames,
                 std::vector<PyObject*>* out) {
  Py_ssize_t nkw = PyTuple_GET_SIZE(kwnames);
  if (f->param_names == nullptr) {
    PyErr_SetString(PyExc_TypeError,
                    "this function takes no keyword arguments (its metadata has no parameter "
                    "names)");
    return -1;
  }
  Py_ssize_t nparams = PyTuple_GET_SIZE(f->param_names);
  out->assign(static_cast<size_t>(nparams > nargs ? nparams : nargs), nullptr);
  for (Py_ssize_t i = 0; i < nargs; ++i) (*out)[static_cast<size_t>(i)] = args[i];
  for (Py_ssize_t k = 0; k < nkw; ++k) {
    PyObject* name = PyTuple_GET_ITEM(kwnames, k);
    Py_ssize_t pos = -1;
    for (Py_ssize_t j = 0; j < nparams; ++j) {
      int eq = PyUnicode_Compare(PyTuple_GET_ITEM(f->param_names, j), name);
      if (eq == 0) {
        pos = j;
        break;
      }
    }
    if (pos < 0) {
      PyErr_Format(PyExc_TypeError, "got an unexpected keyword argument '%U'", name);
      return -1;
    }
    if ((*out)[static_cast<size_t>(pos)] != nullptr) {
      PyErr_Format(PyExc_TypeError, "got multiple values for argument '%U'", name);
      return -1;
    }
    (*out)[static_cast<size_t>(pos)] = args[nargs + k];
  }
  for (size_t j = 0; j < out->size(); ++j) {
    if ((*out)[j] == nullptr) {
      PyErr_Format(PyExc_TypeError, "missing required argument '%U'",
                   PyTuple_GET_ITEM(f->param_names, static_cast<Py_ssize_t>(j)));
      return -1;
    }
  }
  return 0;
}

constexpr Py_ssize_t kInlineArgs = 8;

KFFI_NOINLINE PyObject* RaiseReleasedFunction() {
  PyErr_SetString(PyExc_ValueError, "Cannot call a released kffi.Function");
  return nullptr;
}

/// The native call itself, with the GIL released or not as the function says.
KFFI_INLINE int InvokeSafeCall(PyFunction* f, KFFIObject* h, const KFFIAny* packed,
                               Py_ssize_t nargs, KFFIAny* result) {
  if (f->release_gil < 0 ? g_default_release_gil != 0 : f->release_gil != 0) {
    PyThreadState* ts = PyEval_SaveThread();
    const int rc = f->safe_call(h, packed, static_cast<int32_t>(nargs), result);
    PyEval_RestoreThread(ts);
    return rc;
  }
  return f->safe_call(h, packed, static_cast<int32_t>(nargs), result);
}

/// The call when a tensor argument brought a device or a framework's exchange API: its stream
/// and allocator are the environment's during the call (out of line: most calls have neither).
KFFI_NOINLINE int InvokeWithEnv(PyFunction* f, KFFIObject* h, const KFFIAny* packed,
                                Py_ssize_t nargs, KFFIAny* result, const CallContext& ctx,
                                bool* failed) {
  CallEnvScope env(ctx);
  if (env.status() != 0) {
    *failed = true;
    return 0;
  }
  return InvokeSafeCall(f, h, packed, nargs, result);
}

/// Converts the (positional) arguments into packed, calls the function and converts its result.
inline PyObject* CallFunction(PyFunction* f, KFFIObject* h, PyObject* const* args, Py_ssize_t nargs,
                              KFFIAny* packed) {
  CallContext ctx;
  for (Py_ssize_t i = 0; i < nargs; ++i) {
    if (ConvertArg(args[i], &packed[i], &ctx, i) != 0) return nullptr;
  }
  KFFIAny result;
  kffi::details::SetNone(&result);
  int rc;
  if (KFFI_LIKELY(!ctx.has_device && ctx.api == nullptr)) {
    rc = InvokeSafeCall(f, h, packed, nargs, &result);
  } else {
    bool failed = false;
    rc = InvokeWithEnv(f, h, packed, nargs, &result, ctx, &failed);
    if (failed) return nullptr;
  }
  if (rc != 0) return RaiseFromKFFIError(rc);
  if (result.type_index == kKFFINone) Py_RETURN_NONE;  // the common case, as AnyToPy does
  return AnyToPy(&result, &ctx);
}

/// The packed arguments of a no-argument call: callees must get a valid pointer.
const KFFIAny kNoArgs[1] = {};

/// A result other than None, out of line so that the no-argument path keeps a small frame.
KFFI_NOINLINE PyObject* ResultToPy(KFFIAny* result) {
  CallContext ctx;
  return AnyToPy(result, &ctx);
}

/// The no-argument call with the GIL released (out of line: it keeps more across calls).
KFFI_NOINLINE PyObject* CallFunctionNoArgsReleased(PyFunction* f, void* h) {
  KFFIAny result;
  kffi::details::SetNone(&result);
  const KFFISafeCallType call = f->safe_call;
  PyThreadState* ts = PyEval_SaveThread();
  const int rc = call(h, kNoArgs, 0, &result);
  PyEval_RestoreThread(ts);
  if (KFFI_UNLIKELY(rc != 0)) return RaiseFromKFFIError(rc);
  if (result.type_index == kKFFINone) Py_RETURN_NONE;
  return ResultToPy(&result);
}

/// The no-argument call with the GIL held: nothing lives across the call but the result slot,
/// so it needs no saved registers.
KFFI_INLINE PyObject* CallFunctionNoArgsHeld(PyFunction* f, void* h) {
  KFFIAny result;
  kffi::details::SetNone(&result);
  const int rc = f->safe_call(h, kNoArgs, 0, &result);
  if (KFFI_UNLIKELY(rc != 0)) return RaiseFromKFFIError(rc);
  if (result.type_index == kKFFINone) Py_RETURN_NONE;
  return ResultToPy(&result);
}

/// Positional calls with up to kInlineArgs arguments, packed on the stack.
KFFI_NOINLINE PyObject* CallFunctionInline(PyFunction* f, PyObject* const* args, Py_ssize_t nargs) {
  auto* h = static_cast<KFFIObject*>(f->base.handle);
  if (KFFI_UNLIKELY(h == nullptr)) return RaiseReleasedFunction();
  KFFIAny packed[kInlineArgs];
  return CallFunction(f, h, args, nargs, packed);
}

/// Calls with keyword arguments or with more arguments than fit inline (kept out of line so the
/// common path stays small).
__attribute__((noinline)) PyObject* FunctionVectorcallSlow(PyFunction* f, PyObject* const* args,
                                                           Py_ssize_t nargs, PyObject* kwnames) {
  std::vector<PyObject*> bound;
  if (kwnames != nullptr && PyTuple_GET_SIZE(kwnames) != 0) {
    if (BindKeywords(f, args, nargs, kwnames, &bound) != 0) return nullptr;
    args = bound.data();
    nargs = static_cast<Py_ssize_t>(bound.size());
  }
  auto* h = static_cast<KFFIObject*>(f->base.handle);
  if (h == nullptr) return RaiseReleasedFunction();
  KFFIAny inline_packed[kInlineArgs];
  std::vector<KFFIAny> heap_packed;
  KFFIAny* packed = inline_packed;
  if (nargs > kInlineArgs) {
    heap_packed.resize(static_cast<size_t>(nargs));
    packed = heap_packed.data();
  }
  return CallFunction(f, h, args, nargs, packed);
}

PyObject* FunctionVectorcall(PyObject* self, PyObject* const* args, size_t nargsf,
                             PyObject* kwnames) {
  auto* f = reinterpret_cast<PyFunction*>(self);
  Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
  // The no-argument call runs here (it is the benchmark floor of every binding); the other
  // paths are tail calls into functions sized for them, so this frame stays small.
  if (KFFI_LIKELY(kwnames == nullptr || PyTuple_GET_SIZE(kwnames) == 0)) {
    if (nargs == 0) {
      void* h = f->base.handle;
      if (KFFI_UNLIKELY(h == nullptr)) return RaiseReleasedFunction();
      if (f->release_gil < 0 ? g_default_release_gil != 0 : f->release_gil != 0) {
        return CallFunctionNoArgsReleased(f, h);
      }
      return CallFunctionNoArgsHeld(f, h);
    }
    if (nargs <= kInlineArgs) return CallFunctionInline(f, args, nargs);
  }
  return FunctionVectorcallSlow(f, args, nargs, kwnames);
}

PyObject* FunctionNew(PyTypeObject* type, PyObject* args, PyObject* kwargs) {
  PyObject* callable = nullptr;
  static const char* kwlist[] = {"func", nullptr};
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O", const_cast<char**>(kwlist), &callable)) {
    return nullptr;
  }
  if (PyObject_TypeCheck(callable, type)) {
    Py_INCREF(callable);
    return callable;
  }
  if (!PyCallable_Check(callable)) {
    PyErr_Format(PyExc_TypeError, "kffi.Function expects a callable, got %s",
                 Py_TYPE(callable)->tp_name);
    return nullptr;
  }
  return FunctionFromCallable(callable);
}

/// kffi.Function is a descriptor that does not bind: inspect/pydoc then treat it as a routine,
/// so help() shows its signature and docstring.
PyObject* FunctionDescrGet(PyObject* self, PyObject*, PyObject*) {
  Py_INCREF(self);
  return self;
}

PyObject* FunctionGetReleaseGil(PyObject* self, void*) {
  auto* f = reinterpret_cast<PyFunction*>(self);
  if (f->release_gil < 0) Py_RETURN_NONE;
  return PyBool_FromLong(f->release_gil);
}

int FunctionSetReleaseGil(PyObject* self, PyObject* value, void*) {
  auto* f = reinterpret_cast<PyFunction*>(self);
  if (value == nullptr || value == Py_None) {
    f->release_gil = -1;
    return 0;
  }
  int v = PyObject_IsTrue(value);
  if (v < 0) return -1;
  f->release_gil = v;
  return 0;
}

PyObject* FunctionGetParamNames(PyObject* self, void*) {
  auto* f = reinterpret_cast<PyFunction*>(self);
  if (f->param_names == nullptr) Py_RETURN_NONE;
  Py_INCREF(f->param_names);
  return f->param_names;
}

int FunctionSetParamNames(PyObject* self, PyObject* value, void*) {
  auto* f = reinterpret_cast<PyFunction*>(self);
  if (value != nullptr && value != Py_None) {
    if (!PyTuple_Check(value)) {
      PyErr_SetString(PyExc_TypeError, "_param_names must be a tuple of str");
      return -1;
    }
    Py_INCREF(value);
    Py_XSETREF(f->param_names, value);
  } else {
    Py_CLEAR(f->param_names);
  }
  return 0;
}

PyGetSetDef kFunctionGetSet[] = {
    {"release_gil", FunctionGetReleaseGil, FunctionSetReleaseGil,
     "Release the GIL during native calls (None: follow kffi.set_default_release_gil).", nullptr},
    {"_param_names", FunctionGetParamNames, FunctionSetParamNames,
     "Parameter names used for keyword arguments.", nullptr},
    {nullptr, nullptr, nullptr, nullptr, nullptr}};

PyMemberDef kFunctionMembers[] = {
    {"__vectorcalloffset__", T_PYSSIZET, offsetof(PyFunction, vectorcall), READONLY, nullptr},
    {"__weaklistoffset__", T_PYSSIZET, offsetof(PyObjectHandle, weakrefs), READONLY, nullptr},
    {"__dictoffset__", T_PYSSIZET, offsetof(PyObjectHandle, dict), READONLY, nullptr},
    {nullptr, 0, 0, 0, nullptr}};

PyType_Slot kFunctionSlots[] = {
    {Py_tp_call, reinterpret_cast<void*>(PyVectorcall_Call)},
    {Py_tp_traverse, reinterpret_cast<void*>(ObjectTraverse)},
    {Py_tp_clear, reinterpret_cast<void*>(ObjectClear)},
    {Py_tp_descr_get, reinterpret_cast<void*>(FunctionDescrGet)},
    {Py_tp_getset, kFunctionGetSet},
    {Py_tp_members, kFunctionMembers},
    {Py_tp_new, reinterpret_cast<void*>(FunctionNew)},
    {Py_tp_doc, const_cast<char*>("A kffi function: native, or a wrapped Python callable.")},
    {0, nullptr}};

// ---- Python callables as kffi functions -------------------------------------------------------

int PyCallbackSafeCall(void* self, const KFFIAny* args, int32_t num_args, KFFIAny* result) {
  PyGILState_STATE st = PyGILState_Ensure();
  int rc = 0;
  PyObject* tuple = PyTuple_New(num_args);
  if (tuple == nullptr) rc = -1;
  for (int32_t i = 0; rc == 0 && i < num_args; ++i) {
    PyObject* a = AnyViewToPy(&args[i]);
    if (a == nullptr) {
      rc = -1;
      break;
    }
    PyTuple_SET_ITEM(tuple, i, a);
  }
  if (rc == 0) {
    PyObject* r = PyObject_Call(static_cast<PyObject*>(self), tuple, nullptr);
    if (r == nullptr) {
      rc = -1;
    } else {
      if (PyToOwnedAny(r, result) != 0) rc = -1;
      Py_DECREF(r);
    }
  }
  Py_XDECREF(tuple);
  if (rc != 0) SetKFFIErrorFromPython();
  PyGILState_Release(st);
  return rc;
}

void PyCallbackDeleter(void* self) {
  if (!Py_IsInitialized()) return;  // the interpreter is gone: nothing to release
  PyGILState_STATE st = PyGILState_Ensure();
  Py_DECREF(static_cast<PyObject*>(self));
  PyGILState_Release(st);
}

}  // namespace

int CallableToFunctionHandle(PyObject* callable, KFFIObjectHandle* out) {
  Py_INCREF(callable);
  if (KFFIFunctionCreate(callable, PyCallbackSafeCall, PyCallbackDeleter, out) != 0) {
    Py_DECREF(callable);
    RaiseFromKFFIError(-1);
    return -1;
  }
  return 0;
}

PyObject* FunctionFromCallable(PyObject* callable) {
  KFFIObjectHandle h = nullptr;
  if (CallableToFunctionHandle(callable, &h) != 0) return nullptr;
  return WrapObject(h);
}

KFFIObjectHandle GetHandle(PyObject* obj) {
  if (!PyObject_TypeCheck(obj, g_object_type)) return nullptr;
  return reinterpret_cast<PyObjectHandle*>(obj)->handle;
}

bool RaiseIfReleased(PyObject* obj) {
  if (!PyObject_TypeCheck(obj, g_object_type) ||
      reinterpret_cast<PyObjectHandle*>(obj)->handle != nullptr) {
    return false;
  }
  PyErr_Format(PyExc_ValueError, "Cannot use a released %s (its native object was released)",
               Py_TYPE(obj)->tp_name);
  return true;
}

PyObject* WrapObject(KFFIObjectHandle owned) {
  int32_t index = static_cast<KFFIObject*>(owned)->type_index;
  PyTypeObject* cls = index == kKFFIFunction ? g_function_type : g_object_type;
  if (g_classes != nullptr) {
    auto it = g_classes->find(index);
    if (it == g_classes->end() && index >= kKFFIDynObjectBegin) {
      // A subclass of a registered type: use the nearest registered ancestor's class.
      const KFFITypeInfo* info = KFFIGetTypeInfo(index);
      for (int32_t d = info ? info->type_depth - 1 : -1; d >= 0; --d) {
        it = g_classes->find(info->type_ancestors[d]);
        if (it != g_classes->end()) break;
      }
    }
    if (it != g_classes->end()) cls = reinterpret_cast<PyTypeObject*>(it->second);
  }
  PyObject* self = cls->tp_alloc(cls, 0);
  if (self == nullptr) {
    KFFIObjectDecRef(owned);
    return nullptr;
  }
  reinterpret_cast<PyObjectHandle*>(self)->handle = owned;
  if (PyObject_TypeCheck(self, g_function_type)) {
    auto* f = reinterpret_cast<PyFunction*>(self);
    f->vectorcall = FunctionVectorcall;
    f->param_names = nullptr;
    f->release_gil = -1;
    f->safe_call = static_cast<KFFIFunctionCell*>(KFFIObjectGetCellPtr(owned))->safe_call;
  }
  return self;
}

/// _register_object_class(type_index, cls): the Python class used for objects of that type.
PyObject* RegisterObjectClass(PyObject*, PyObject* args) {
  int index;
  PyObject* cls;
  if (!PyArg_ParseTuple(args, "iO!", &index, &PyType_Type, &cls)) return nullptr;
  if (!PyType_IsSubtype(reinterpret_cast<PyTypeObject*>(cls), g_object_type)) {
    PyErr_SetString(PyExc_TypeError, "the class must derive from kffi.Object");
    return nullptr;
  }
  if (g_classes == nullptr) g_classes = new std::unordered_map<int32_t, PyObject*>();
  Py_INCREF(cls);
  auto it = g_classes->find(index);
  if (it != g_classes->end()) {
    Py_DECREF(it->second);
    it->second = cls;
  } else {
    g_classes->emplace(index, cls);
  }
  Py_RETURN_NONE;
}

/// Allocates an object wrapper for new-object constructors in Python: _new_object(cls, handle)
/// is not offered; objects only come from native calls.

int InitObjectTypes(PyObject* module) {
  PyType_Spec object_spec = {"kffi.Object", sizeof(PyObjectHandle), 0,
                             Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
                             kObjectSlots};
  PyType_Slot obj_slots_with_members[sizeof(kObjectSlots) / sizeof(PyType_Slot) + 1];
  size_t n = 0;
  for (; kObjectSlots[n].slot != 0; ++n) obj_slots_with_members[n] = kObjectSlots[n];
  obj_slots_with_members[n++] = {Py_tp_members, kObjectMembers};
  obj_slots_with_members[n] = {0, nullptr};
  object_spec.slots = obj_slots_with_members;
  g_object_type = reinterpret_cast<PyTypeObject*>(PyType_FromSpec(&object_spec));
  if (g_object_type == nullptr) return -1;
  PyRef bases(PyTuple_Pack(1, g_object_type));
  PyType_Spec function_spec = {"kffi.Function", sizeof(PyFunction), 0,
                               Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL | Py_TPFLAGS_HAVE_GC,
                               kFunctionSlots};
  g_function_type =
      reinterpret_cast<PyTypeObject*>(PyType_FromSpecWithBases(&function_spec, bases.get()));
  if (g_function_type == nullptr) return -1;
  Py_INCREF(g_object_type);
  Py_INCREF(g_function_type);
  if (PyModule_AddObject(module, "Object", reinterpret_cast<PyObject*>(g_object_type)) != 0 ||
      PyModule_AddObject(module, "Function", reinterpret_cast<PyObject*>(g_function_type)) != 0) {
    return -1;
  }
  return 0;
}

}  // namespace py
}  // namespace kffi
