// python/src/py_error.cc: kffi errors <-> Python exceptions, keeping tracebacks on both sides;
// argument labels and exception chaining for conversion errors.
#include "py_common.h"

namespace kffi {
namespace py {

namespace {
PyObject* ByteArrayToStr(const KFFIByteArray& b) {
  return PyUnicode_DecodeUTF8(b.data, static_cast<Py_ssize_t>(b.size), "replace");
}

void PyObjectDeleter(void* handle) {
  if (!Py_IsInitialized()) return;
  PyGILState_STATE st = PyGILState_Ensure();
  Py_DECREF(static_cast<PyObject*>(handle));
  PyGILState_Release(st);
}

/// A builtin exception class (not a heap type): its constructor takes one message.
bool IsBuiltinException(PyObject* type) {
  return PyType_Check(type) &&
         !PyType_HasFeature(reinterpret_cast<PyTypeObject*>(type), Py_TPFLAGS_HEAPTYPE) &&
         PyType_IsSubtype(reinterpret_cast<PyTypeObject*>(type),
                          reinterpret_cast<PyTypeObject*>(PyExc_Exception));
}
}  // namespace

std::string ArgLabel(const CallContext* ctx, Py_ssize_t index, const char* type_name) {
  if (index < 0) return std::string();
  std::string s = "Argument #" + std::to_string(index);
  const char* name = nullptr;
  PyObject* names =
      ctx != nullptr && ctx->function != nullptr ? ctx->function->param_names : nullptr;
  if (names != nullptr && index < PyTuple_GET_SIZE(names)) {
    PyObject* n = PyTuple_GET_ITEM(names, index);
    name = PyUnicode_Check(n) ? PyUnicode_AsUTF8(n) : nullptr;
    if (name == nullptr) PyErr_Clear();
  }
  if (name != nullptr && type_name != nullptr) {
    s += std::string(" (`") + name + "`: " + type_name + ")";
  } else if (name != nullptr) {
    s += std::string(" (`") + name + "`)";
  } else if (type_name != nullptr) {
    s += std::string(" (") + type_name + ")";
  }
  return s;
}

thread_local CallArgsScope* CallArgsScope::top_ = nullptr;

const char* CallArgsScope::TypeNameOf(const KFFIAny* arg) noexcept {
  // Runs inside the failed call, perhaps without the GIL: it reads only the type's name, which
  // lives as long as the argument, which the caller holds.
  const CallArgsScope* s = top_;
  if (s == nullptr || arg < s->packed_ || arg >= s->packed_ + s->nargs_) return nullptr;
  return Py_TYPE(s->args_[arg - s->packed_])->tp_name;
}

void ChainError(PyObject* new_type, const std::string& prefix, bool keep_type, bool append_text) {
  PyObject *type, *value, *tb;
  PyErr_Fetch(&type, &value, &tb);
  if (type == nullptr) {
    PyErr_SetString(new_type, (prefix + "unknown error").c_str());
    return;
  }
  PyErr_NormalizeException(&type, &value, &tb);
  if (tb != nullptr && value != nullptr) PyException_SetTraceback(value, tb);
  // These say something about the process, not the argument: they pass unchanged.
  if (value == nullptr || PyErr_GivenExceptionMatches(type, PyExc_MemoryError) ||
      PyErr_GivenExceptionMatches(type, PyExc_RecursionError) ||
      !PyErr_GivenExceptionMatches(type, PyExc_Exception) ||
      (keep_type && prefix.empty() && IsBuiltinException(type))) {
    PyErr_Restore(type, value, tb);
    return;
  }
  PyRef t(type), v(value), tbr(tb);
  PyObject* cls = keep_type && IsBuiltinException(type) ? type : new_type;
  std::string msg = prefix;
  // The original's text, if it has one: its __str__ may raise (then its type name stands in).
  // A prefix that is a whole sentence leaves the original to __cause__ alone.
  PyRef text(append_text ? PyObject_Str(value) : PyUnicode_FromString(""));
  const char* utf8 = text ? PyUnicode_AsUTF8(text.get()) : nullptr;
  if (utf8 != nullptr) {
    msg += utf8;
  } else {
    PyErr_Clear();
    msg +=
        std::string("<") + reinterpret_cast<PyTypeObject*>(type)->tp_name + " whose str() failed>";
  }
  PyRef exc(PyObject_CallFunction(cls, "s#", msg.data(), static_cast<Py_ssize_t>(msg.size())));
  if (!exc || !PyExceptionInstance_Check(exc.get())) {
    // Could not make it (e.g. at the recursion limit): the original goes on unchanged.
    PyErr_Clear();
    PyErr_Restore(t.release(), v.release(), tbr.release());
    return;
  }
  PyException_SetCause(exc.get(), v.release());  // steals; sets __suppress_context__
  PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(exc.get())), exc.get());
}

PyObject* RaiseFromKFFIError(int code) {
  KFFIObjectHandle err = nullptr;
  KFFIErrorMoveFromRaised(&err);
  if (err == nullptr) {
    if (PyErr_Occurred()) return nullptr;  // e.g. a signal already raised in Python
    PyErr_Format(PyExc_RuntimeError, "kffi: a native call failed (code %d) but raised no error",
                 code);
    return nullptr;
  }
  KFFIErrorCell* cell = KFFIErrorGetCellPtr(err);
  PyObject* original = Py_None;
  if (cell->extra_context != nullptr &&
      static_cast<KFFIObject*>(cell->extra_context)->type_index == kKFFIOpaquePyObject) {
    // The error started as a Python exception in a callback: raise that same exception.
    auto* oc = static_cast<KFFIOpaqueObjectCell*>(KFFIObjectGetCellPtr(cell->extra_context));
    original = static_cast<PyObject*>(oc->handle);
  }
  PyRef kind(ByteArrayToStr(cell->kind));
  PyRef message(ByteArrayToStr(cell->message));
  PyRef backtrace(ByteArrayToStr(cell->backtrace));
  Py_INCREF(original);
  PyRef orig(original);
  KFFIObjectDecRef(err);
  if (!kind || !message || !backtrace) return nullptr;
  PyObject* make = GetHook(kHookMakeError);
  if (make == nullptr) {
    PyErr_SetObject(PyExc_RuntimeError, message.get());
    return nullptr;
  }
  PyRef exc(PyObject_CallFunctionObjArgs(make, kind.get(), message.get(), backtrace.get(),
                                         orig.get(), nullptr));
  if (!exc) return nullptr;
  PyObject* tb = PyException_GetTraceback(exc.get());
  PyObject* type = reinterpret_cast<PyObject*>(Py_TYPE(exc.get()));
  Py_INCREF(type);
  PyErr_Restore(type, exc.release(), tb);
  return nullptr;
}

void SetKFFIErrorFromPython() {
  PyObject *type, *value, *tb;
  PyErr_Fetch(&type, &value, &tb);
  if (type == nullptr) {
    KFFIErrorSetRaisedFromCStr("RuntimeError", "unknown Python error");
    return;
  }
  PyErr_NormalizeException(&type, &value, &tb);
  if (tb != nullptr) PyException_SetTraceback(value, tb);
  PyRef t(type), v(value), tbr(tb);
  std::string kind = "RuntimeError", message, backtrace;
  if (PyObject* describe = GetHook(kHookDescribeError)) {
    PyRef r(PyObject_CallOneArg(describe, value));
    if (r && PyTuple_Check(r.get()) && PyTuple_GET_SIZE(r.get()) == 3) {
      const char* k = PyUnicode_AsUTF8(PyTuple_GET_ITEM(r.get(), 0));
      const char* m = k ? PyUnicode_AsUTF8(PyTuple_GET_ITEM(r.get(), 1)) : nullptr;
      const char* b = m ? PyUnicode_AsUTF8(PyTuple_GET_ITEM(r.get(), 2)) : nullptr;
      if (k && m && b) {
        kind = k;
        message = m;
        backtrace = b;
      }
    }
    if (PyErr_Occurred()) PyErr_Clear();
  }
  KFFIByteArray kb{kind.data(), kind.size()}, mb{message.data(), message.size()},
      bb{backtrace.data(), backtrace.size()};
  KFFIObjectHandle err = nullptr;
  if (KFFIErrorCreate(&kb, &mb, &bb, &err) != 0) return;  // the runtime raised MemoryError
  // Keep the exception itself so that it comes back unchanged if it reaches Python again.
  KFFIObjectHandle opaque = nullptr;
  Py_INCREF(value);
  if (KFFIObjectCreateOpaque(value, kKFFIOpaquePyObject, PyObjectDeleter, &opaque) == 0) {
    KFFIErrorGetCellPtr(err)->extra_context = opaque;
  } else {
    Py_DECREF(value);
  }
  KFFIErrorSetRaised(err);
  KFFIObjectDecRef(err);
}

PyObject* RaiseFromCppException() {
  details::SetRaisedFromCurrentException();
  return RaiseFromKFFIError(-1);
}

void ReleaseObject(KFFIObjectHandle h) {
  PendingErrorScope keep;
  if (KFFIObjectDecRef(h) != 0) {
    RaiseFromKFFIError(-1);
    PyErr_WriteUnraisable(nullptr);
  }
}

/// _set_error_hooks(make_exception, describe_exception)
PyObject* SetErrorHooks(PyObject*, PyObject* args) {
  PyObject *a, *b;
  if (!PyArg_ParseTuple(args, "OO", &a, &b)) return nullptr;
  Py_INCREF(a);
  Py_INCREF(b);
  g_state->SetHook(kHookMakeError, a);
  g_state->SetHook(kHookDescribeError, b);
  Py_RETURN_NONE;
}

}  // namespace py
}  // namespace kffi
