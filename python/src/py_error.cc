// python/src/py_error.cc: kffi errors <-> Python exceptions, keeping tracebacks on both sides.
#include "py_common.h"

namespace kffi {
namespace py {

namespace {
// Hooks installed by kffi/_error.py (see _set_error_hooks):
//   make_exception(kind, message, backtrace, original_or_None) -> exception with traceback
//   describe_exception(exc) -> (kind, message, backtrace)
PyObject* g_make_exception = nullptr;
PyObject* g_describe_exception = nullptr;

PyObject* ByteArrayToStr(const KFFIByteArray& b) {
  return PyUnicode_DecodeUTF8(b.data, static_cast<Py_ssize_t>(b.size), "replace");
}

void PyObjectDeleter(void* handle) {
  if (!Py_IsInitialized()) return;
  PyGILState_STATE st = PyGILState_Ensure();
  Py_DECREF(static_cast<PyObject*>(handle));
  PyGILState_Release(st);
}
}  // namespace

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
  if (g_make_exception == nullptr) {
    PyErr_SetObject(PyExc_RuntimeError, message.get());
    return nullptr;
  }
  PyRef exc(PyObject_CallFunctionObjArgs(g_make_exception, kind.get(), message.get(),
                                         backtrace.get(), orig.get(), nullptr));
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
  if (g_describe_exception != nullptr) {
    PyRef r(PyObject_CallOneArg(g_describe_exception, value));
    if (r && PyTuple_Check(r.get()) && PyTuple_GET_SIZE(r.get()) == 3) {
      const char* k = PyUnicode_AsUTF8(PyTuple_GET_ITEM(r.get(), 0));
      const char* m = PyUnicode_AsUTF8(PyTuple_GET_ITEM(r.get(), 1));
      const char* b = PyUnicode_AsUTF8(PyTuple_GET_ITEM(r.get(), 2));
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

/// _set_error_hooks(make_exception, describe_exception)
PyObject* SetErrorHooks(PyObject*, PyObject* args) {
  PyObject *a, *b;
  if (!PyArg_ParseTuple(args, "OO", &a, &b)) return nullptr;
  Py_INCREF(a);
  Py_INCREF(b);
  Py_XSETREF(g_make_exception, a);
  Py_XSETREF(g_describe_exception, b);
  Py_RETURN_NONE;
}

int InitErrors(PyObject*) { return 0; }

}  // namespace py
}  // namespace kffi
