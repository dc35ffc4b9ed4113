// python/kffi/torch/_eager.cc: the eager call of a kffi.torch op, in C: decide in a few
// nanoseconds whether anything traces the call and, when nothing does, call the kffi function
// with the caller's arguments as they are.
//
// Nothing traces when no torch dispatch mode (fake tensors, make_fx, functionalization, user
// modes) and no torch function mode is active, no functorch transform is on, every tensor
// argument is exactly a torch.Tensor (no subclass, no FakeTensor) and no lazy conjugate or
// negative view (kffi refuses those; torch's dispatcher resolves them) and, with grad mode on,
// none requires grad. Otherwise the call goes to the op (the OpOverload), as it does for keyword
// arguments (through the Python path). These are the Python gate's checks in kffi/torch/_op.py,
// read from torch's thread-local state directly instead of through five Python calls. After
// a call the tensors the op writes get new versions, as through the dispatcher.
//
// A CPython extension module (PyInit_kffi_torch_eager, built on first use by kffi.torch._glue and
// loaded with importlib's ExtensionFileLoader, as kffi's own _core is imported): it needs the
// GIL and takes and returns Python objects. kffi_torch_make_eager returns the callable; the
// module carries _import.cc's two functions too.
// SPDX-License-Identifier: Apache-2.0
#include <ATen/PythonTorchFunctionTLS.h>
#include <Python.h>
#include <c10/core/GradMode.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <c10/core/impl/TorchDispatchModeTLS.h>
#include <structmember.h>                         // T_PYSSIZET, READONLY before Python 3.12
#include <torch/csrc/autograd/python_variable.h>  // THPVariable_Unpack (inline)

#include <cstdint>
#include <vector>

#include "_torch_dlpack.h"  // LazyViewBits

namespace kffi {
namespace torchglue {
// _import.cc's functions, which this module's method table exposes.
PyObject* ExchangeApi(PyObject* torch_api, PyObject* tensor_base);
PyObject* LazyViewReader();
}  // namespace torchglue
}  // namespace kffi

namespace {

// Return kinds, as in _schema.py (4..6, int / float / bool, are returned as they come, as 1).
enum RetKind : int {
  kRetNone = 0,
  kRetTensor = 1,
  kRetTensors = 2,
  kRetTensorList = 3,
  kRetLast = 6
};

struct EagerCall {
  PyObject_HEAD vectorcallfunc vectorcall;
  PyObject* fn;       // the kffi function
  PyObject* op;       // the OpOverload: tracing, subclasses, autograd
  PyObject* slow;     // keyword arguments: the Python path
  PyObject* tensor;   // torch.Tensor
  PyObject* missing;  // the TypeError message when the function returns None for a tensor
  std::vector<Py_ssize_t>* tensor_pos;
  std::vector<Py_ssize_t>* written_pos;  // the tensors the op writes (`mut`)
  int ret_kind;
};

PyObject* g_requires_grad = nullptr;  // interned "requires_grad"

bool SomethingTraces() {
  return c10::impl::TorchDispatchModeTLS::stack_len() > 0 ||
         at::impl::PythonTorchFunctionTLS::stack_len() > 0 ||
         c10::impl::tls_is_dispatch_key_included(c10::DispatchKey::FuncTorchDynamicLayerFrontMode);
}

PyObject* Call(PyObject* self_obj, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
  auto* self = reinterpret_cast<EagerCall*>(self_obj);
  if (kwnames != nullptr && PyTuple_GET_SIZE(kwnames) > 0) {
    return PyObject_Vectorcall(self->slow, args, nargsf, kwnames);
  }
  const Py_ssize_t n = PyVectorcall_NARGS(nargsf);
  if (SomethingTraces()) return PyObject_Vectorcall(self->op, args, nargsf, nullptr);
  const bool grad = c10::GradMode::is_enabled();
  for (Py_ssize_t pos : *self->tensor_pos) {
    if (pos >= n) break;
    PyObject* a = args[pos];
    if (Py_TYPE(a) != reinterpret_cast<PyTypeObject*>(self->tensor)) {
      if (a != Py_None) return PyObject_Vectorcall(self->op, args, nargsf, nullptr);
    } else if (C10_UNLIKELY(
                   kffi::torchglue::LazyViewBits(THPVariable_Unpack(a).unsafeGetTensorImpl()))) {
      return PyObject_Vectorcall(self->op, args, nargsf, nullptr);
    } else if (grad) {
      PyObject* rg = PyObject_GetAttr(a, g_requires_grad);
      if (rg == nullptr) return nullptr;
      const bool requires_grad = rg == Py_True;
      Py_DECREF(rg);
      if (requires_grad) return PyObject_Vectorcall(self->op, args, nargsf, nullptr);
    }
  }
  PyObject* out = PyObject_Vectorcall(self->fn, args, nargsf, nullptr);
  if (out == nullptr) return nullptr;
  // What the op wrote gets a new version, as the dispatcher's kernel does: autograd then notices
  // a tensor it saved for backward was changed. (The gate let only exact torch.Tensors or None
  // through; inference tensors have no version counter.)
  for (Py_ssize_t pos : *self->written_pos) {
    if (pos >= n || args[pos] == Py_None) continue;
    c10::TensorImpl* impl = THPVariable_Unpack(args[pos]).unsafeGetTensorImpl();
    if (!impl->is_inference()) impl->bump_version();
  }
  switch (self->ret_kind) {
    case kRetNone:
      Py_DECREF(out);
      Py_RETURN_NONE;
    case kRetTensors: {
      PyObject* t = PySequence_Tuple(out);
      Py_DECREF(out);
      return t;
    }
    case kRetTensorList: {
      PyObject* l = PySequence_List(out);
      Py_DECREF(out);
      return l;
    }
    default:
      if (out == Py_None) {
        Py_DECREF(out);
        PyErr_SetObject(PyExc_TypeError, self->missing);
        return nullptr;
      }
      return out;
  }
}

void Dealloc(PyObject* self_obj) {
  auto* self = reinterpret_cast<EagerCall*>(self_obj);
  PyObject_GC_UnTrack(self_obj);
  Py_CLEAR(self->fn);
  Py_CLEAR(self->op);
  Py_CLEAR(self->slow);
  Py_CLEAR(self->tensor);
  Py_CLEAR(self->missing);
  delete self->tensor_pos;
  self->tensor_pos = nullptr;
  delete self->written_pos;
  self->written_pos = nullptr;
  Py_TYPE(self_obj)->tp_free(self_obj);
}

int Traverse(PyObject* self_obj, visitproc visit, void* arg) {
  auto* self = reinterpret_cast<EagerCall*>(self_obj);
  Py_VISIT(self->fn);
  Py_VISIT(self->op);
  Py_VISIT(self->slow);
  Py_VISIT(self->tensor);
  Py_VISIT(self->missing);
  return 0;
}

int Clear(PyObject* self_obj) {
  auto* self = reinterpret_cast<EagerCall*>(self_obj);
  Py_CLEAR(self->fn);
  Py_CLEAR(self->op);
  Py_CLEAR(self->slow);
  Py_CLEAR(self->tensor);
  Py_CLEAR(self->missing);
  return 0;
}

PyTypeObject* g_type = nullptr;

PyTypeObject* Type() {
  if (g_type != nullptr) return g_type;
  static PyType_Slot slots[] = {
      {Py_tp_dealloc, reinterpret_cast<void*>(&Dealloc)},
      {Py_tp_traverse, reinterpret_cast<void*>(&Traverse)},
      {Py_tp_clear, reinterpret_cast<void*>(&Clear)},
      {Py_tp_call, reinterpret_cast<void*>(&PyVectorcall_Call)},
      {0, nullptr},
  };
  static PyMemberDef members[] = {
      {"__vectorcalloffset__", T_PYSSIZET, offsetof(EagerCall, vectorcall), READONLY, nullptr},
      {nullptr, 0, 0, 0, nullptr},
  };
  static PyType_Slot with_members[sizeof(slots) / sizeof(slots[0]) + 1];
  size_t i = 0;
  for (; slots[i].slot != 0; ++i) with_members[i] = slots[i];
  with_members[i++] = {Py_tp_members, members};
  with_members[i] = {0, nullptr};
  static PyType_Spec spec = {"kffi.torch._EagerCall", sizeof(EagerCall), 0,
                             Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
                             with_members};
  g_type = reinterpret_cast<PyTypeObject*>(PyType_FromSpec(&spec));
  return g_type;
}

}  // namespace

/// The increasing non-negative positions in a tuple of ints, or nullptr with a Python exception
/// set.
static std::vector<Py_ssize_t>* Positions(PyObject* positions) {
  auto* pos = new std::vector<Py_ssize_t>();
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(positions); ++i) {
    Py_ssize_t p = PyLong_AsSsize_t(PyTuple_GET_ITEM(positions, i));
    if (p < 0 || (!pos->empty() && p <= pos->back())) {
      delete pos;
      if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "positions must increase");
      return nullptr;
    }
    pos->push_back(p);
  }
  return pos;
}

namespace {

/// A callable that runs an op's eager calls (see the file comment): fn (the kffi function), op
/// (the OpOverload), slow (called with keyword arguments), tensor (torch.Tensor), positions (a
/// tuple of the tensor arguments' positions), ret_kind (0 none, 1 one value, 2 a tuple, 3 a
/// list), missing (the message when fn returns None for an op that returns a value), written (a
/// tuple of the positions of the tensors the op writes: their versions are bumped after a call).
/// Returns a new reference, or NULL with a Python exception set.
PyObject* MakeEager(PyObject* fn, PyObject* op, PyObject* slow, PyObject* tensor,
                    PyObject* positions, int ret_kind, PyObject* missing, PyObject* written) {
  if (g_requires_grad == nullptr) {
    g_requires_grad = PyUnicode_InternFromString("requires_grad");
    if (g_requires_grad == nullptr) return nullptr;
  }
  if (!PyTuple_Check(positions) || !PyTuple_Check(written) || !PyType_Check(tensor) ||
      !PyUnicode_Check(missing) || ret_kind < kRetNone || ret_kind > kRetLast) {
    PyErr_SetString(PyExc_TypeError, "kffi_torch_make_eager: bad arguments");
    return nullptr;
  }
  std::vector<Py_ssize_t>* pos = Positions(positions);
  if (pos == nullptr) return nullptr;
  std::vector<Py_ssize_t>* written_pos = Positions(written);
  if (written_pos == nullptr) {
    delete pos;
    return nullptr;
  }
  for (Py_ssize_t w : *written_pos) {  // a written argument is a tensor argument
    bool found = false;
    for (Py_ssize_t p : *pos) found = found || p == w;
    if (!found) {
      delete pos;
      delete written_pos;
      PyErr_SetString(PyExc_ValueError, "written positions must be tensor positions");
      return nullptr;
    }
  }
  PyTypeObject* type = Type();
  auto* self = type == nullptr ? nullptr : PyObject_GC_New(EagerCall, type);
  if (self == nullptr) {
    delete pos;
    delete written_pos;
    return nullptr;
  }
  self->vectorcall = &Call;
  Py_INCREF(fn);
  Py_INCREF(op);
  Py_INCREF(slow);
  Py_INCREF(tensor);
  Py_INCREF(missing);
  self->fn = fn;
  self->op = op;
  self->slow = slow;
  self->tensor = tensor;
  self->missing = missing;
  self->tensor_pos = pos;
  self->written_pos = written_pos;
  // Scalar results (int, float, bool) are returned as they are: kRetTensor's rule.
  self->ret_kind = ret_kind > kRetTensorList ? kRetTensor : ret_kind;
  PyObject_GC_Track(reinterpret_cast<PyObject*>(self));
  return reinterpret_cast<PyObject*>(self);
}

PyObject* PyMakeEager(PyObject*, PyObject* args) {
  PyObject *fn, *op, *slow, *tensor, *positions, *missing, *written;
  int ret_kind;
  if (!PyArg_ParseTuple(args, "OOOOOiOO:kffi_torch_make_eager", &fn, &op, &slow, &tensor,
                        &positions, &ret_kind, &missing, &written)) {
    return nullptr;
  }
  return MakeEager(fn, op, slow, tensor, positions, ret_kind, missing, written);
}

PyObject* PyExchangeApi(PyObject*, PyObject* args) {
  PyObject *torch_api, *tensor_base;
  if (!PyArg_ParseTuple(args, "OO:kffi_torch_exchange_api", &torch_api, &tensor_base)) {
    return nullptr;
  }
  return kffi::torchglue::ExchangeApi(torch_api, tensor_base);
}

PyObject* PyLazyViewReader(PyObject*, PyObject*) { return kffi::torchglue::LazyViewReader(); }

PyMethodDef g_methods[] = {
    {"kffi_torch_make_eager", PyMakeEager, METH_VARARGS,
     "kffi_torch_make_eager(fn, op, slow, tensor, positions, ret_kind, missing, written)"},
    {"kffi_torch_exchange_api", PyExchangeApi, METH_VARARGS,
     "kffi_torch_exchange_api(torch_api, tensor_base): a capsule of the exchange API (_import.cc)"},
    {"kffi_torch_lazy_view_reader", PyLazyViewReader, METH_NOARGS,
     "kffi_torch_lazy_view_reader(): a capsule of the lazy-view bits reader (_import.cc)"},
    {nullptr, nullptr, 0, nullptr}};

PyModuleDef g_module = {PyModuleDef_HEAD_INIT, "kffi_torch_eager",
                        "kffi.torch's eager gate and tensor import (python/kffi/torch/_eager.cc)",
                        -1, g_methods};

}  // namespace

PyMODINIT_FUNC PyInit_kffi_torch_eager() { return PyModule_Create(&g_module); }
