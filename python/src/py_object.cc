// python/src/py_object.cc: kffi.Object and kffi.Function (vectorcall) and Python callbacks.
// SPDX-License-Identifier: Apache-2.0
#include <cstddef>
#include <cstdlib>
#include <string>

#include "py_common.h"
#include "structmember.h"

namespace kffi {
namespace pyglue {

namespace {

bool IsFunctionType(PyTypeObject* tp) { return g_state != nullptr && tp == g_state->function_type; }

bool DefaultReleaseGil() {
  return g_state->default_release_gil.load(std::memory_order_relaxed) != 0;
}

// Whether a call of f detaches from the interpreter (releases the GIL) around the native code.
// On a free-threaded CPython there is no GIL to serialise calls; detaching still lets a
// stop-the-world pause (the garbage collector's) proceed while native code runs.
KFFI_INLINE bool ReleasesGil(const PyFunction* f) {
  const int v = ReleaseGilSetting(f);
  return v < 0 ? DefaultReleaseGil() : v != 0;
}

// ---- kffi.Object ------------------------------------------------------------------------------

void ObjectDealloc(PyObject* self) {
  auto* o = reinterpret_cast<PyObjectHandle*>(self);
  PyTypeObject* tp = Py_TYPE(self);
  if (PyType_HasFeature(tp, Py_TPFLAGS_HAVE_GC)) PyObject_GC_UnTrack(self);
  if (o->weakrefs != nullptr) PyObject_ClearWeakRefs(self);
  Py_CLEAR(o->dict);
  if (IsFunctionType(tp)) {
    Py_CLEAR(reinterpret_cast<PyFunction*>(self)->param_names);
    Py_CLEAR(reinterpret_cast<PyFunction*>(self)->defaults);
  }
  KFFIObjectHandle h = o->handle;
  o->handle = nullptr;
  // Deallocation often happens while an exception propagates (a frame's locals): the native
  // deleter may be foreign code that calls into Python.
  if (h != nullptr) ReleaseObject(h);
  tp->tp_free(self);
  Py_DECREF(tp);
}

int ObjectTraverse(PyObject* self, visitproc visit, void* arg) {
  auto* o = reinterpret_cast<PyObjectHandle*>(self);
  Py_VISIT(o->dict);
  Py_VISIT(Py_TYPE(self));
  if (IsFunctionType(Py_TYPE(self))) {
    Py_VISIT(reinterpret_cast<PyFunction*>(self)->param_names);
    Py_VISIT(reinterpret_cast<PyFunction*>(self)->defaults);
  }
  return 0;
}

int ObjectClear(PyObject* self) {
  auto* o = reinterpret_cast<PyObjectHandle*>(self);
  Py_CLEAR(o->dict);
  if (IsFunctionType(Py_TYPE(self))) {
    Py_CLEAR(reinterpret_cast<PyFunction*>(self)->param_names);
    Py_CLEAR(reinterpret_cast<PyFunction*>(self)->defaults);
  }
  return 0;
}

PyObject* ObjectRepr(PyObject* self) {
  KFFIObjectHandle h = reinterpret_cast<PyObjectHandle*>(self)->handle;
  if (h == nullptr) return PyUnicode_FromFormat("<%s (null)>", Py_TYPE(self)->tp_name);
  if (PyObject* fields = ForeignRepr(self)) return fields;  // apache-tvm-ffi's reflected types
  if (PyErr_Occurred()) return nullptr;
  std::string key = TypeKeyOf(static_cast<KFFIObject*>(h));
  return PyUnicode_FromFormat("<%s %s at %p>", Py_TYPE(self)->tp_name, key.c_str(), h);
}

/// The class's attributes, then the fields of a type of apache-tvm-ffi's registry (kffi's own
/// reflected types have descriptors on their classes).
PyObject* ObjectGetAttr(PyObject* self, PyObject* name) {
  PyObject* r = PyObject_GenericGetAttr(self, name);
  if (r != nullptr || !PyErr_ExceptionMatches(PyExc_AttributeError)) return r;
  PyObject *type, *value, *tb;
  PyErr_Fetch(&type, &value, &tb);
  int rc = ForeignField(self, name, nullptr, &r);
  if (rc == 0) {
    PyErr_Restore(type, value, tb);
    return nullptr;
  }
  Py_XDECREF(type);
  Py_XDECREF(value);
  Py_XDECREF(tb);
  return rc == 1 ? r : nullptr;
}

Py_hash_t ObjectHash(PyObject* self) {
  return _Py_HashPointer(reinterpret_cast<PyObjectHandle*>(self)->handle);
}

PyObject* ObjectRichCompare(PyObject* a, PyObject* b, int op) {
  if ((op != Py_EQ && op != Py_NE) || !PyObject_TypeCheck(b, g_state->object_type)) {
    Py_RETURN_NOTIMPLEMENTED;
  }
  bool same =
      reinterpret_cast<PyObjectHandle*>(a)->handle == reinterpret_cast<PyObjectHandle*>(b)->handle;
  return PyBool_FromLong(op == Py_EQ ? same : !same);
}

PyObject* ObjectGetTypeKey(PyObject* self, void*) {
  KFFIObjectHandle h = reinterpret_cast<PyObjectHandle*>(self)->handle;
  if (h == nullptr) Py_RETURN_NONE;
  std::string key = TypeKeyOf(static_cast<KFFIObject*>(h));
  return PyUnicode_DecodeUTF8(key.data(), static_cast<Py_ssize_t>(key.size()), "surrogateescape");
}

/// Attributes of kffi objects are the native object's (fields and reflection to come) or the
/// Python class's: setting one the object does not have would succeed in Python only, unseen by
/// the native object, so it is refused. Data descriptors of the class (properties with setters,
/// slots) and attributes kffi itself stored on the instance (SetInternalAttr) stay settable.
/// kffi.Function keeps the attributes of a Python function (functools.wraps, kffi's own).
int ObjectSetAttr(PyObject* self, PyObject* name, PyObject* value) {
  PyTypeObject* tp = Py_TYPE(self);
  if (!PyUnicode_Check(name) || PyObject_TypeCheck(self, g_state->function_type)) {
    return PyObject_GenericSetAttr(self, name, value);
  }
  PyObject* descr = _PyType_Lookup(tp, name);  // borrowed
  if (descr != nullptr && Py_TYPE(descr)->tp_descr_set != nullptr) {
    return PyObject_GenericSetAttr(self, name, value);
  }
  PyObject* dict = reinterpret_cast<PyObjectHandle*>(self)->dict;
  if (dict != nullptr) {
    int has = PyDict_Contains(dict, name);
    if (has < 0) return -1;
    if (has == 1) return PyObject_GenericSetAttr(self, name, value);
  }
  if (descr != nullptr) {
    PyErr_Format(PyExc_AttributeError, "'%s' object attribute '%U' is read-only", tp->tp_name,
                 name);
    return -1;
  }
  if (value != nullptr) {  // a field of a type of apache-tvm-ffi's registry
    int rc = ForeignField(self, name, value, nullptr);
    if (rc != 0) return rc == 1 ? 0 : -1;
  }
  KFFIObjectHandle h = reinterpret_cast<PyObjectHandle*>(self)->handle;
  std::string key = h != nullptr ? TypeKeyOf(static_cast<KFFIObject*>(h)) : "released";
  PyErr_Format(PyExc_AttributeError,
               "'%s' object (kffi type `%s`) has no attribute '%U': kffi objects take no new "
               "Python attributes (the native object would never see them)",
               tp->tp_name, key.c_str(), name);
  return -1;
}

/// kffi.Object._store_attr(obj, name, value): SetInternalAttr for kffi's Python code.
PyObject* ObjectStoreAttr(PyObject*, PyObject* args) {
  PyObject *obj, *name, *value;
  if (!PyArg_ParseTuple(args, "O!UO", g_state->object_type, &obj, &name, &value)) return nullptr;
  if (PyObject_GenericSetAttr(obj, name, value) != 0) return nullptr;
  Py_RETURN_NONE;
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
  KFFIObjectHandle h = reinterpret_cast<PyObjectHandle*>(self)->handle;
  if (h == nullptr) return PyLong_FromLong(0);
  return PyLong_FromUnsignedLong(static_cast<Object*>(h)->use_count());
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
  if (h != nullptr) ReleaseObject(h);
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
    {"_store_attr", ObjectStoreAttr, METH_VARARGS | METH_STATIC,
     "Stores an attribute of kffi's own on an object (internal)."},
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
    {Py_tp_setattro, reinterpret_cast<void*>(ObjectSetAttr)},
    {Py_tp_getattro, reinterpret_cast<void*>(ObjectGetAttr)},
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

/// The arguments of a call with keywords or left-out defaults, in parameter order (borrowed
/// references: the caller's arguments and the function's defaults, which `names`/`defaults`
/// hold until the call ends).
int BindArguments(PyFunction* f, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames,
                  PyRef* names, PyRef* defaults, std::vector<PyObject*>* out) {
  // Strong references for the call: a setter may replace the tuples while arguments convert.
  *names = PyRef(Py_XNewRef(f->param_names));
  *defaults = PyRef(Py_XNewRef(f->defaults));
  Py_ssize_t nkw = kwnames != nullptr ? PyTuple_GET_SIZE(kwnames) : 0;
  if (!*names) {
    if (nkw != 0) {
      PyErr_SetString(PyExc_TypeError,
                      "this function takes no keyword arguments (its metadata has no parameter "
                      "names)");
      return -1;
    }
    out->assign(args, args + nargs);
    return 0;
  }
  Py_ssize_t nparams = PyTuple_GET_SIZE(names->get());
  out->assign(static_cast<size_t>(nparams > nargs ? nparams : nargs), nullptr);
  for (Py_ssize_t i = 0; i < nargs; ++i) (*out)[static_cast<size_t>(i)] = args[i];
  for (Py_ssize_t k = 0; k < nkw; ++k) {
    PyObject* name = PyTuple_GET_ITEM(kwnames, k);
    Py_ssize_t pos = -1;
    for (Py_ssize_t j = 0; j < nparams; ++j) {
      if (PyUnicode_Compare(PyTuple_GET_ITEM(names->get(), j), name) == 0) {
        pos = j;
        break;
      }
    }
    if (PyErr_Occurred()) return -1;
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
  const Py_ssize_t ndefaults = *defaults ? PyTuple_GET_SIZE(defaults->get()) : 0;
  const Py_ssize_t first_default = nparams - ndefaults;
  for (size_t j = 0; j < out->size(); ++j) {
    if ((*out)[j] != nullptr) continue;
    const Py_ssize_t pj = static_cast<Py_ssize_t>(j);
    if (pj >= first_default) {
      (*out)[j] = PyTuple_GET_ITEM(defaults->get(), pj - first_default);
      continue;
    }
    PyErr_Format(PyExc_TypeError, "missing required argument '%U'",
                 PyTuple_GET_ITEM(names->get(), pj));
    return -1;
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
  if (ReleasesGil(f)) {
    PyThreadState* ts = PyEval_SaveThread();
    const int rc = f->safe_call(h, packed, static_cast<int32_t>(nargs), result);
    PyEval_RestoreThread(ts);
    return rc;
  }
  return f->safe_call(h, packed, static_cast<int32_t>(nargs), result);
}

/// The call when a tensor argument is on a device: the framework's stream and allocator are the
/// environment's during the call (out of line: most calls have no device tensor).
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
  ctx.function = f;
  if (ConvertArgs(args, nargs, packed, &ctx) != 0) return nullptr;
  OwnedArguments owned;  // released before the context's temporaries, after the call
  if (KFFI_UNLIKELY(f->owned_tensor_args != 0) && ctx.has_tensor_sources() &&
      OwnTensorArguments(f->owned_tensor_args, args, nargs, packed, &ctx, &owned) != 0) {
    return nullptr;
  }
  KFFIAny result;
  kffi::details::SetNone(&result);
  int rc;
  if (KFFI_LIKELY(!ctx.has_device)) {
    rc = InvokeSafeCall(f, h, packed, nargs, &result);
  } else {
    bool failed = false;
    rc = InvokeWithEnv(f, h, packed, nargs, &result, ctx, &failed);
    if (failed) return nullptr;
  }
  if (rc != 0) return RaiseFromCallError(f, rc, packed, args, nargs);
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
  if (KFFI_UNLIKELY(rc != 0)) return RaiseFromCallError(f, rc);
  if (result.type_index == kKFFINone) Py_RETURN_NONE;
  return ResultToPy(&result);
}

/// The no-argument call with the GIL held: nothing lives across the call but the result slot,
/// so it needs no saved registers. Out of line, so that FunctionVectorcall needs no frame of its
/// own on the paths that take arguments.
KFFI_NOINLINE PyObject* CallFunctionNoArgsHeld(PyFunction* f, void* h) {
  KFFIAny result;
  kffi::details::SetNone(&result);
  const int rc = f->safe_call(h, kNoArgs, 0, &result);
  if (KFFI_UNLIKELY(rc != 0)) return RaiseFromCallError(f, rc);
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

/// Whether PackPlainArg may pack obj: the test FunctionVectorcall makes on the first argument
/// before it tries CallFunctionPlain (a call that starts with a tensor goes straight on).
KFFI_INLINE bool MayBePlain(PyObject* obj) {
  PyTypeObject* tp = Py_TYPE(obj);
  return tp == &PyLong_Type || tp == &PyFloat_Type || tp == &PyUnicode_Type;
}

/// The frame of CallFunctionPlain: the packed arguments and the result slot, whose addresses the
/// callee gets, next to what an error after the call needs. One address then reaches all of it
/// after the call, where separate ones would each stay in a saved register on every path.
struct PlainCall {
  PyFunction* f;
  PyObject* const* args;
  Py_ssize_t nargs;
  KFFIAny result;
  KFFIAny packed[kInlineArgs];
};

/// After a plain call that failed (rc) or returned something other than None (out of line: the
/// common call returns None).
KFFI_NOINLINE PyObject* FinishPlainCall(int rc, PlainCall* call) {
  if (KFFI_UNLIKELY(rc != 0)) {
    return RaiseFromCallError(call->f, rc, call->packed, call->args, call->nargs);
  }
  if (call->result.type_index == kKFFINone) Py_RETURN_NONE;
  return ResultToPy(&call->result);
}

/// Positional calls with up to kInlineArgs arguments, of a function without record parameters, that
/// start with an int, float or str. When every argument packs without a call context
/// (PackPlainArg), the call runs here with none: nothing to keep alive, no tensor, no device, and a
/// result converts as after any call without tensors.
///
/// kQuick (the entry FunctionVectorcall takes): the packing calls nothing (PackPlainArg<true>),
/// so with the GIL held the function is the only call and nearly nothing lives across it; an
/// argument that needs more (a long str, a big int) goes on to the kQuick = false version, which
/// packs everything plain and leaves the rest to CallFunctionInline, which converts every argument
/// again with a call context. kRelease: the GIL is released for the call (FunctionVectorcall picks
/// the version, so the held one keeps no thread state). N > 0: a count known at compile time (the
/// loop unrolls); 0: nargs says.
template <Py_ssize_t N, bool kQuick, bool kRelease>
KFFI_NOINLINE PyObject* CallFunctionPlain(PyFunction* f, PyObject* const* args, Py_ssize_t nargs) {
  if constexpr (N > 0) nargs = N;
  auto* h = static_cast<KFFIObject*>(f->base.handle);
  if (KFFI_UNLIKELY(h == nullptr)) return RaiseReleasedFunction();
  PlainCall call;
  for (Py_ssize_t i = 0; i < nargs; ++i) {
    if (KFFI_UNLIKELY(!PackPlainArg<kQuick>(args[i], &call.packed[i]))) {
      if constexpr (kQuick) return CallFunctionPlain<N, false, kRelease>(f, args, nargs);
      return CallFunctionInline(f, args, nargs);
    }
  }
  call.f = f;
  call.args = args;
  call.nargs = nargs;
  kffi::details::SetNone(&call.result);
  int rc;
  if constexpr (kRelease) {
    const KFFISafeCallType safe_call = f->safe_call;
    PyThreadState* ts = PyEval_SaveThread();
    rc = safe_call(h, call.packed, static_cast<int32_t>(nargs), &call.result);
    PyEval_RestoreThread(ts);
  } else {
    rc = f->safe_call(h, call.packed, static_cast<int32_t>(nargs), &call.result);
  }
  if (KFFI_LIKELY(rc == 0) && call.result.type_index == kKFFINone) Py_RETURN_NONE;
  return FinishPlainCall(rc, &call);
}

/// CallFunctionPlain by whether the GIL is released (a value, not a branch: the no-argument call
/// keeps its own branch on the setting) and by argument count (1 to kInlineArgs): one load and
/// jump in place of a chain of compares.
using CallFunctionPlainType = PyObject* (*)(PyFunction*, PyObject* const*, Py_ssize_t);
constexpr CallFunctionPlainType kCallFunctionPlain[2][kInlineArgs + 1] = {
    {nullptr, CallFunctionPlain<1, true, false>, CallFunctionPlain<2, true, false>,
     CallFunctionPlain<3, true, false>, CallFunctionPlain<0, true, false>,
     CallFunctionPlain<0, true, false>, CallFunctionPlain<0, true, false>,
     CallFunctionPlain<0, true, false>, CallFunctionPlain<0, true, false>},
    {nullptr, CallFunctionPlain<1, true, true>, CallFunctionPlain<2, true, true>,
     CallFunctionPlain<3, true, true>, CallFunctionPlain<0, true, true>,
     CallFunctionPlain<0, true, true>, CallFunctionPlain<0, true, true>,
     CallFunctionPlain<0, true, true>, CallFunctionPlain<0, true, true>}};
static_assert(kInlineArgs == 8,
              "kCallFunctionPlain has an entry for every count up to kInlineArgs");

/// Calls with keyword arguments, left-out defaults or more arguments than fit inline (kept out
/// of line so the common path stays small).
KFFI_NOINLINE PyObject* FunctionVectorcallSlow(PyFunction* f, PyObject* const* args,
                                               Py_ssize_t nargs, PyObject* kwnames) {
  std::vector<PyObject*> bound;
  PyRef names, defaults;
  if (BindArguments(f, args, nargs, kwnames, &names, &defaults, &bound) != 0) return nullptr;
  args = bound.data();
  nargs = static_cast<Py_ssize_t>(bound.size());
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

/// Fewer arguments than parameters with defaults: the defaults fill in (slow path).
inline bool NeedsDefaults(const PyFunction* f, Py_ssize_t nargs) {
  return f->defaults != nullptr && f->param_names != nullptr &&
         nargs < PyTuple_GET_SIZE(f->param_names);
}

PyObject* FunctionVectorcall(PyObject* self, PyObject* const* args, size_t nargsf,
                             PyObject* kwnames) {
  auto* f = reinterpret_cast<PyFunction*>(self);
  Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
  // Every path is a tail call into a function sized for it, so this one needs no frame (the
  // saved registers a call here would need cost every other path more than the jump costs the
  // no-argument call).
  if (KFFI_LIKELY(kwnames == nullptr || PyTuple_GET_SIZE(kwnames) == 0)) {
    if (KFFI_LIKELY(f->defaults == nullptr) || !NeedsDefaults(f, nargs)) {
      if (nargs == 0) {
        void* h = f->base.handle;
        if (KFFI_UNLIKELY(h == nullptr)) return RaiseReleasedFunction();
        if (ReleasesGil(f)) return CallFunctionNoArgsReleased(f, h);
        return CallFunctionNoArgsHeld(f, h);
      }
      if (nargs <= kInlineArgs) {
        if (MayBePlain(args[0]) && f->record_params == nullptr) {
          return kCallFunctionPlain[ReleasesGil(f)][nargs](f, args, nargs);
        }
        return CallFunctionInline(f, args, nargs);
      }
    }
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

/// <kffi.Function name> (the name _annotate or get_global_func gave it), else the plain repr.
PyObject* FunctionRepr(PyObject* self) {
  auto* o = reinterpret_cast<PyObjectHandle*>(self);
  if (o->handle == nullptr) return PyUnicode_FromString("<kffi.Function (released)>");
  PyObject* name = o->dict != nullptr ? PyDict_GetItemString(o->dict, "__name__") : nullptr;
  if (name != nullptr && PyUnicode_Check(name) && PyUnicode_GET_LENGTH(name) != 0) {
    return PyUnicode_FromFormat("<kffi.Function %U>", name);
  }
  return PyUnicode_FromFormat("<kffi.Function at %p>", o->handle);
}

/// kffi.Function is a descriptor that does not bind: inspect/pydoc then treat it as a routine,
/// so help() shows its signature and docstring.
PyObject* FunctionDescrGet(PyObject* self, PyObject*, PyObject*) {
  Py_INCREF(self);
  return self;
}

PyObject* FunctionGetReleaseGil(PyObject* self, void*) {
  auto* f = reinterpret_cast<PyFunction*>(self);
  const int v = ReleaseGilSetting(f);
  if (v < 0) Py_RETURN_NONE;
  return PyBool_FromLong(v);
}

int FunctionSetReleaseGil(PyObject* self, PyObject* value, void*) {
  auto* f = reinterpret_cast<PyFunction*>(self);
  if (value == nullptr || value == Py_None) {
    SetReleaseGilSetting(f, -1);
    return 0;
  }
  int v = PyObject_IsTrue(value);
  if (v < 0) return -1;
  SetReleaseGilSetting(f, v);
  return 0;
}

PyObject* GetTupleField(PyObject* field) {
  if (field == nullptr) Py_RETURN_NONE;
  return Py_NewRef(field);
}

int SetTupleField(PyObject** field, PyObject* value, const char* what) {
  if (value != nullptr && value != Py_None) {
    if (!PyTuple_Check(value)) {
      PyErr_Format(PyExc_TypeError, "%s must be a tuple", what);
      return -1;
    }
    Py_XSETREF(*field, Py_NewRef(value));
  } else {
    Py_CLEAR(*field);
  }
  return 0;
}

PyObject* FunctionGetParamNames(PyObject* self, void*) {
  return GetTupleField(reinterpret_cast<PyFunction*>(self)->param_names);
}

int FunctionSetParamNames(PyObject* self, PyObject* value, void*) {
  return SetTupleField(&reinterpret_cast<PyFunction*>(self)->param_names, value, "_param_names");
}

PyObject* FunctionGetDefaults(PyObject* self, void*) {
  return GetTupleField(reinterpret_cast<PyFunction*>(self)->defaults);
}

int FunctionSetDefaults(PyObject* self, PyObject* value, void*) {
  return SetTupleField(&reinterpret_cast<PyFunction*>(self)->defaults, value, "_param_defaults");
}

PyObject* FunctionGetOwnedTensorArgs(PyObject* self, void*) {
  return PyLong_FromUnsignedLongLong(reinterpret_cast<PyFunction*>(self)->owned_tensor_args);
}

int FunctionSetOwnedTensorArgs(PyObject* self, PyObject* value, void*) {
  if (value == nullptr) value = Py_False;  // del: none
  unsigned long long mask = PyLong_AsUnsignedLongLong(value);
  if (mask == static_cast<unsigned long long>(-1) && PyErr_Occurred()) return -1;
  reinterpret_cast<PyFunction*>(self)->owned_tensor_args = mask;
  return 0;
}

PyGetSetDef kFunctionGetSet[] = {
    {"release_gil", FunctionGetReleaseGil, FunctionSetReleaseGil,
     "Release the GIL during native calls (None: follow kffi.set_default_release_gil). On a "
     "free-threaded CPython calls never serialise; False keeps the thread attached.",
     nullptr},
    {"_param_names", FunctionGetParamNames, FunctionSetParamNames,
     "Parameter names used for keyword arguments.", nullptr},
    {"_param_defaults", FunctionGetDefaults, FunctionSetDefaults,
     "Default values of the trailing parameters (a call may leave them out).", nullptr},
    {"_owned_tensor_args", FunctionGetOwnedTensorArgs, FunctionSetOwnedTensorArgs,
     "Parameters that get framework tensors as owning Tensors (bit i: parameter i; bit 63: the "
     "rest): a TVM-FFI export's ffi::Tensor parameters.",
     nullptr},
    {nullptr, nullptr, nullptr, nullptr, nullptr}};

PyMemberDef kFunctionMembers[] = {
    {"__vectorcalloffset__", T_PYSSIZET, offsetof(PyFunction, vectorcall), READONLY, nullptr},
    {"__weaklistoffset__", T_PYSSIZET, offsetof(PyObjectHandle, weakrefs), READONLY, nullptr},
    {"__dictoffset__", T_PYSSIZET, offsetof(PyObjectHandle, dict), READONLY, nullptr},
    {nullptr, 0, 0, 0, nullptr}};

PyType_Slot kFunctionSlots[] = {
    {Py_tp_call, reinterpret_cast<void*>(PyVectorcall_Call)},
    {Py_tp_repr, reinterpret_cast<void*>(FunctionRepr)},
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
  if (g_state == nullptr) {
    KFFIErrorSetRaisedFromCStr("RuntimeError", "kffi._core is gone: cannot call into Python");
    PyGILState_Release(st);
    return -1;
  }
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
  if (CannotReleaseInPython()) return;  // the interpreter is ending: the callable leaks
  PyGILState_STATE st = PyGILState_Ensure();
  Py_DECREF(static_cast<PyObject*>(self));
  PyGILState_Release(st);
}

/// The Python class registered for a type index (borrowed), or NULL.
PyObject* RegisteredClass(int32_t index) {
  State* s = g_state;
  if (index >= 0 && index < State::kStaticClasses) {
    return s->static_classes[index].load(std::memory_order_acquire);
  }
  std::lock_guard<std::mutex> lock(s->dyn_classes_mutex);
  for (const auto& entry : s->dyn_classes) {
    if (entry.first == index) return entry.second;
  }
  return nullptr;
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
  if (!PyObject_TypeCheck(obj, g_state->object_type)) return nullptr;
  return reinterpret_cast<PyObjectHandle*>(obj)->handle;
}

bool RaiseIfReleased(PyObject* obj) {
  if (!PyObject_TypeCheck(obj, g_state->object_type) ||
      reinterpret_cast<PyObjectHandle*>(obj)->handle != nullptr) {
    return false;
  }
  PyErr_Format(PyExc_ValueError, "Cannot use a released %s (its native object was released)",
               Py_TYPE(obj)->tp_name);
  return true;
}

PyObject* WrapObject(KFFIObjectHandle owned) {
  if (g_state == nullptr) {
    ReleaseObject(owned);
    PyErr_SetString(PyExc_RuntimeError, "kffi._core is gone");
    return nullptr;
  }
  int32_t index = static_cast<KFFIObject*>(owned)->type_index;
  KFFIByteArray foreign_key;
  int32_t foreign_ancestor;
  PyObject* cls = nullptr;
  if (ForeignType(static_cast<KFFIObject*>(owned), &foreign_key, &foreign_ancestor)) {
    // A type of another runtime's registry: its own class (fields, methods) where the bridge
    // describes it, else kffi's class of its static ancestor.
    if (ForeignClass(static_cast<KFFIObject*>(owned), &cls) != 0) {
      ReleaseObject(owned);
      return nullptr;
    }
    if (cls == nullptr) cls = RegisteredClass(foreign_ancestor);
    if (foreign_ancestor == kKFFIFunction) index = kKFFIFunction;
  } else {
    cls = RegisteredClass(index);
    // A reflected type without a class of its own gets one made (py_reflection.cc).
    if (cls == nullptr && ReflectedClass(index, &cls) != 0) {
      ReleaseObject(owned);
      return nullptr;
    }
    if (cls == nullptr && index >= kKFFIDynObjectBegin) {
      // A subclass of a registered type: use the nearest registered ancestor's class.
      const KFFITypeInfo* info = KFFIGetTypeInfo(index);
      for (int32_t d = info ? info->type_depth - 1 : -1; d >= 0 && cls == nullptr; --d) {
        cls = RegisteredClass(info->type_ancestors[d]);
      }
    }
  }
  PyTypeObject* tp = cls != nullptr           ? reinterpret_cast<PyTypeObject*>(cls)
                     : index == kKFFIFunction ? g_state->function_type
                                              : g_state->object_type;
  PyObject* self = tp->tp_alloc(tp, 0);
  if (self == nullptr) {
    ReleaseObject(owned);
    return nullptr;
  }
  reinterpret_cast<PyObjectHandle*>(self)->handle = owned;
  if (PyObject_TypeCheck(self, g_state->function_type)) {
    auto* f = reinterpret_cast<PyFunction*>(self);
    f->vectorcall = FunctionVectorcall;
    f->param_names = nullptr;
    f->defaults = nullptr;
    f->release_gil = -1;
    f->safe_call = static_cast<KFFIFunctionCell*>(KFFIObjectGetCellPtr(owned))->safe_call;
    f->owned_tensor_args = OwnedTensorArgsOf(owned);
  }
  return self;
}

int SetInternalAttr(PyObject* obj, const char* name, PyObject* value) {
  PyRef key(PyUnicode_InternFromString(name));
  if (!key) return -1;
  return PyObject_GenericSetAttr(obj, key.get(), value);
}

/// _register_object_class(type_index, cls): the Python class used for objects of that type.
PyObject* RegisterObjectClass(PyObject*, PyObject* args) {
  int index;
  PyObject* cls;
  if (!PyArg_ParseTuple(args, "iO!", &index, &PyType_Type, &cls)) return nullptr;
  if (!PyType_IsSubtype(reinterpret_cast<PyTypeObject*>(cls), g_state->object_type)) {
    PyErr_SetString(PyExc_TypeError, "the class must derive from kffi.Object");
    return nullptr;
  }
  State* s = g_state;
  // A replaced class is retired, not released: another thread may be wrapping with it.
  if (index >= 0 && index < State::kStaticClasses) {
    PyObject* old = s->static_classes[index].exchange(Py_NewRef(cls), std::memory_order_acq_rel);
    if (old != nullptr) s->retired.push_back(old);
    Py_RETURN_NONE;
  }
  std::lock_guard<std::mutex> lock(s->dyn_classes_mutex);
  for (auto& entry : s->dyn_classes) {
    if (entry.first == index) {
      s->retired.push_back(entry.second);
      entry.second = Py_NewRef(cls);
      Py_RETURN_NONE;
    }
  }
  s->dyn_classes.emplace_back(index, Py_NewRef(cls));
  Py_RETURN_NONE;
}

int InitObjectTypes(PyObject* module, State* state) {
  PyType_Spec object_spec = {"kffi.Object", sizeof(PyObjectHandle), 0,
                             Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
                             kObjectSlots};
  PyType_Slot obj_slots_with_members[sizeof(kObjectSlots) / sizeof(PyType_Slot) + 1];
  size_t n = 0;
  for (; kObjectSlots[n].slot != 0; ++n) obj_slots_with_members[n] = kObjectSlots[n];
  obj_slots_with_members[n++] = {Py_tp_members, kObjectMembers};
  obj_slots_with_members[n] = {0, nullptr};
  object_spec.slots = obj_slots_with_members;
  auto* object_type =
      reinterpret_cast<PyTypeObject*>(PyType_FromModuleAndSpec(module, &object_spec, nullptr));
  if (object_type == nullptr) return -1;
  state->object_type = object_type;
  PyRef bases(PyTuple_Pack(1, object_type));
  if (!bases) return -1;
  PyType_Spec function_spec = {"kffi.Function", sizeof(PyFunction), 0,
                               Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL | Py_TPFLAGS_HAVE_GC,
                               kFunctionSlots};
  auto* function_type = reinterpret_cast<PyTypeObject*>(
      PyType_FromModuleAndSpec(module, &function_spec, bases.get()));
  if (function_type == nullptr) return -1;
  state->function_type = function_type;
  if (PyModule_AddObjectRef(module, "Object", reinterpret_cast<PyObject*>(object_type)) != 0 ||
      PyModule_AddObjectRef(module, "Function", reinterpret_cast<PyObject*>(function_type)) != 0) {
    return -1;
  }
  return 0;
}

}  // namespace pyglue
}  // namespace kffi
