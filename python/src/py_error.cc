// python/src/py_error.cc: kffi errors <-> Python exceptions, keeping tracebacks on both sides;
// argument errors' places and exception chaining for conversion errors.
// SPDX-License-Identifier: Apache-2.0
#include <kffi/details/function.h>

#include <cstring>

#include "py_common.h"

namespace kffi {
namespace pyglue {

namespace {
PyObject* ByteArrayToStr(const KFFIByteArray& b) {
  return PyUnicode_DecodeUTF8(b.data, static_cast<Py_ssize_t>(b.size), "replace");
}

void PyObjectDeleter(void* handle) {
  if (CannotReleaseInPython()) return;
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

namespace {
/// The signature the function shows (the first line of its __doc__, "scale(y: Tensor(mut), ...) ->
/// None"), else its name; empty when neither is known. Error paths only.
std::string SignatureOf(const PyFunction* f) {
  if (f == nullptr) return std::string();
  PendingErrorScope keep;  // the error being explained stays pending (the reads below clear theirs)
  PyObject* fn = reinterpret_cast<PyObject*>(const_cast<PyFunction*>(f));
  std::string name, doc;
  PyRef n(PyObject_GetAttrString(fn, "__name__"));
  if (n && PyUnicode_Check(n.get())) {
    const char* u = PyUnicode_AsUTF8(n.get());
    if (u != nullptr) name = u;
  }
  PyRef d(PyObject_GetAttrString(fn, "__doc__"));
  if (d && PyUnicode_Check(d.get())) {
    const char* u = PyUnicode_AsUTF8(d.get());
    if (u != nullptr) doc = u;
  }
  PyErr_Clear();
  doc = doc.substr(0, doc.find('\n'));
  if (!name.empty() && doc.compare(0, name.size() + 1, name + "(") == 0) return doc;
  return name;
}
}  // namespace

std::string ArgumentText(const char* subject, const char* expected, const char* got,
                         Py_ssize_t index, const std::string& signature) {
  // The runtime's error slot, not Python's, carries the text: a pending Python error is kept.
  return kffi::details::ArgumentText(subject, expected, got, static_cast<int32_t>(index),
                                     signature.empty() ? nullptr : signature.c_str());
}

ArgPlace ArgPlaceOf(const CallContext* ctx, Py_ssize_t index) {
  ArgPlace place;
  if (index < 0) return place;
  // Called while the error it places is pending: the attribute reads below keep it aside.
  PendingErrorScope keep;
  const PyFunction* f = ctx != nullptr ? ctx->function : nullptr;
  PyObject* names = f != nullptr ? f->param_names : nullptr;
  if (names != nullptr && index < PyTuple_GET_SIZE(names)) {
    PyObject* n = PyTuple_GET_ITEM(names, index);
    const char* u = PyUnicode_Check(n) ? PyUnicode_AsUTF8(n) : nullptr;
    if (u == nullptr) PyErr_Clear();
    if (u != nullptr) place.subject = u;
  }
  const std::string sig = SignatureOf(f);
  if (place.subject.empty()) {
    place.subject =
        sig.empty() ? "argument #" + std::to_string(index) : "arg" + std::to_string(index);
  }
  if (!sig.empty()) {
    place.context = kffi::details::ArgumentContext(static_cast<int32_t>(index), sig.c_str());
  }
  return place;
}

std::string ArgPlace::Say(const std::string& text) const {
  if (subject.empty()) return text;
  return subject + ": " + text + context;
}

void ChainError(PyObject* new_type, const std::string& prefix, bool keep_type, bool append_text,
                const std::string& suffix) {
  PyObject *type, *value, *tb;
  PyErr_Fetch(&type, &value, &tb);
  if (type == nullptr) {
    PyErr_SetString(new_type, (prefix + "unknown error" + suffix).c_str());
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
    // torch's C++ errors append their C++ frames: the message stops before them (the original,
    // frames and all, stays the __cause__).
    const char* frames = std::strstr(utf8, "\nException raised from ");
    msg.append(utf8, frames != nullptr ? static_cast<size_t>(frames - utf8) : std::strlen(utf8));
  } else {
    PyErr_Clear();
    msg +=
        std::string("<") + reinterpret_cast<PyTypeObject*>(type)->tp_name + " whose str() failed>";
  }
  msg += suffix;
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

namespace {
/// An argument error about one of the call's own values, with its type named as the caller passed
/// it (`list`, `numpy.bool`, `None`) where the runtime names the kffi value it became (Array,
/// bool): the runtime says where that name stands (KFFIErrorGetArgumentType). Takes err; returns
/// the error to raise.
KFFIObjectHandle NameCallersType(KFFIObjectHandle err, const KFFIAny* packed, PyObject* const* args,
                                 Py_ssize_t nargs) {
  const KFFIAny* arg = nullptr;
  size_t offset = 0, size = 0;
  if (packed == nullptr || KFFIErrorGetArgumentType(err, &arg, &offset, &size) != 1 ||
      arg < packed || arg >= packed + nargs) {
    return err;
  }
  PyObject* obj = args[arg - packed];
  const char* name = obj == Py_None ? "None" : Py_TYPE(obj)->tp_name;
  const KFFIErrorCell* cell = KFFIErrorGetCellPtr(err);
  std::string message(cell->message.data, cell->message.size);
  message.replace(offset, size, name);
  const KFFIByteArray text{message.data(), message.size()};
  KFFIObjectHandle renamed = nullptr;
  if (KFFIErrorCreate(&cell->kind, &text, &cell->backtrace, &renamed) != 0) {
    KFFIErrorMoveFromRaised(&renamed);  // out of memory: the original goes on
    KFFIObjectDecRef(renamed);
    return err;
  }
  KFFIObjectDecRef(err);
  return renamed;
}
}  // namespace

PyObject* RaiseFromCallError(const PyFunction* f, int code, const KFFIAny* packed,
                             PyObject* const* args, Py_ssize_t nargs) {
  KFFIObjectHandle err = nullptr;
  KFFIErrorMoveFromRaised(&err);
  if (err == nullptr) return RaiseFromKFFIError(code);
  err = NameCallersType(err, packed, args, nargs);
  const KFFIErrorCell* cell = KFFIErrorGetCellPtr(err);
  // Textless: no kind, or the kind a NULL one becomes (KFFIErrorSetRaisedFromCStr) and no
  // message. A kind with an empty message (ValueError("")) is the library's choice, and a Python
  // exception that came back (extra_context) is raised as it was.
  const std::string_view kind_given(cell->kind.data, cell->kind.size);
  const bool textless = kind_given.empty() ||
                        (kind_given == std::string_view("RuntimeError") && cell->message.size == 0);
  if (!textless || cell->extra_context != nullptr) {
    KFFIErrorSetRaised(err);
    KFFIObjectDecRef(err);
    return RaiseFromKFFIError(code);
  }
  const std::string kind =
      cell->kind.size != 0 ? std::string(cell->kind.data, cell->kind.size) : "RuntimeError";
  const std::string sig = SignatureOf(f);
  std::string message = (sig.empty() ? std::string("a kffi function") : "`" + sig + "`") +
                        " raised " + (cell->kind.size != 0 ? kind : "an error of no kind") +
                        " with no message: the library gave the error no text (a NULL or empty "
                        "kind and message)";
  if (cell->message.size != 0) {
    message = (sig.empty() ? std::string("a kffi function") : "`" + sig + "`") +
              " raised an error of no kind: " + std::string(cell->message.data, cell->message.size);
  }
  const KFFIByteArray k{kind.data(), kind.size()};
  const KFFIByteArray m{message.data(), message.size()};
  KFFIObjectHandle replaced = nullptr;
  if (KFFIErrorCreate(&k, &m, &cell->backtrace, &replaced) == 0) {
    KFFIErrorSetRaised(replaced);
    KFFIObjectDecRef(replaced);
  }  // else the runtime raised MemoryError in its place
  KFFIObjectDecRef(err);
  return RaiseFromKFFIError(code);
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
  // A daemon thread that CPython ends during finalization unwinds through its call's frames with
  // no thread state (3.12+): their temporaries leak, as the process is ending. Touching Python
  // (even PyErr_Occurred) there would crash it.
  if (KFFI_UNLIKELY(CannotReleaseInPython())) return;
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

}  // namespace pyglue
}  // namespace kffi
