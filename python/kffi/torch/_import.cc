// python/kffi/torch/_import.cc: torch.Tensor arguments of kffi calls read from the TensorImpl.
//
// torch's DLPack C exchange API imports a tensor through its Python bindings (pybind11's caster,
// which takes a GIL guard and a thread-specific look-up, and a reference count round trip):
// about 40 ns of the cost of each tensor argument. The import here reads the same fields from
// the tensor the Python object holds (THPVariable_Unpack, borrowed) with the view of
// _torch_dlpack.h, which the dispatcher kernels use too. Anything it does not cover (another
// layout or device, a dtype DLPack lacks, a tensor without storage, an object that is no
// torch.Tensor) goes to torch's own import, which converts it or raises its own error. The rest
// of torch's exchange API (allocator, streams, export) is used as it is: kffi_torch_exchange_api
// returns a copy of it with this import in its place, and kffi.torch installs it in kffi's
// argument table (_core._override_exchange_api).
//
// Lazy conjugate and negative views (x.conj(), x.conj().imag, x._neg_view()) are refused by both
// imports of the copy: DLPack cannot say that the memory holds unresolved values, and torch's own
// import hands the memory over as if it did not. kffi reads the same bits before it imports a
// tensor argument (kffi_torch_lazy_view_reader), to name the argument in its error and to check
// again, without Python code, when it retakes the views of a call.
//
// Built into the extension module of _eager.cc (kffi.torch._glue), whose method table calls the
// two functions below.
// SPDX-License-Identifier: Apache-2.0
#include <Python.h>
#include <torch/csrc/autograd/python_variable.h>  // THPVariable_Unpack (inline)

#include <exception>

#include "_torch_dlpack.h"

namespace {

DLPackExchangeAPI g_api;           // torch's, with the import below
const DLPackExchangeAPI* g_torch;  // torch's own (its capsule lives on torch.Tensor)
PyTypeObject* g_tensor_base;       // torch._C.TensorBase: objects laid out as a THPVariable

using kffi::torchglue::LazyViewBits;

/// The ValueError for a tensor with lazy-view bits; -1.
int RefuseLazyView(int bits) {
  PyErr_SetString(PyExc_ValueError, kffi::torchglue::LazyViewRefusal(bits));
  return -1;
}

int ImportDLTensor(void* py_object, DLTensor* out) {
  auto* obj = static_cast<PyObject*>(py_object);
  // Any type may name torch's API; only THPVariables are read directly (a type check, unlike
  // THPVariable_Check's isinstance, runs no Python code).
  if (C10_LIKELY(PyType_IsSubtype(Py_TYPE(obj), g_tensor_base))) {
    const at::Tensor& t = THPVariable_Unpack(obj);
    const int bits = LazyViewBits(t.unsafeGetTensorImpl());
    if (C10_UNLIKELY(bits != 0)) return RefuseLazyView(bits);
    try {
      if (C10_LIKELY(kffi::torchglue::ViewAsDLTensor(t, out))) return 0;
    } catch (const std::exception&) {
      // A tensor without storage (data_ptr() throws), say: torch's import says what is wrong.
    }
  }
  return g_torch->dltensor_from_py_object_no_sync(py_object, out);
}

int ImportManagedTensor(void* py_object, DLManagedTensorVersioned** out) {
  auto* obj = static_cast<PyObject*>(py_object);
  if (PyType_IsSubtype(Py_TYPE(obj), g_tensor_base)) {
    const int bits = LazyViewBits(THPVariable_Unpack(obj).unsafeGetTensorImpl());
    if (C10_UNLIKELY(bits != 0)) return RefuseLazyView(bits);
  }
  return g_torch->managed_tensor_from_py_object_no_sync(py_object, out);
}

/// The lazy-view bits (kffi::torchglue::kLazyConj | kLazyNeg) of a torch tensor, or -1 for an
/// object that is no torch._C.TensorBase. Runs no Python code and sets no error.
int ReadLazyViewBits(PyObject* obj) {
  if (C10_UNLIKELY(!PyType_IsSubtype(Py_TYPE(obj), g_tensor_base))) return -1;
  return LazyViewBits(THPVariable_Unpack(obj).unsafeGetTensorImpl());
}

}  // namespace

/// A "dlpack_exchange_api" capsule of torch's exchange API (torch_api: torch.Tensor's capsule)
/// with the import above; tensor_base: torch._C.TensorBase. The API is static: later calls
/// return capsules of the same one.
namespace kffi {
namespace torchglue {

PyObject* ExchangeApi(PyObject* torch_api, PyObject* tensor_base) {
  auto* api = static_cast<const DLPackExchangeAPI*>(
      PyCapsule_IsValid(torch_api, "dlpack_exchange_api")
          ? PyCapsule_GetPointer(torch_api, "dlpack_exchange_api")
          : nullptr);
  if (api == nullptr || api->header.version.major != DLPACK_MAJOR_VERSION ||
      api->dltensor_from_py_object_no_sync == nullptr) {
    PyErr_SetString(PyExc_TypeError,
                    "kffi_torch_exchange_api: expected torch.Tensor.__dlpack_c_exchange_api__ "
                    "with a DLTensor import");
    return nullptr;
  }
  if (!PyType_Check(tensor_base)) {
    PyErr_SetString(PyExc_TypeError, "kffi_torch_exchange_api: expected torch._C.TensorBase");
    return nullptr;
  }
  if (g_torch != nullptr && g_torch != api) {
    PyErr_SetString(PyExc_ValueError, "kffi_torch_exchange_api: a different torch API was given");
    return nullptr;
  }
  if (g_torch == nullptr) {
    Py_INCREF(tensor_base);  // for the process's life, as the library's
    g_tensor_base = reinterpret_cast<PyTypeObject*>(tensor_base);
    g_api = *api;
    g_api.dltensor_from_py_object_no_sync = &ImportDLTensor;
    if (api->managed_tensor_from_py_object_no_sync != nullptr) {
      g_api.managed_tensor_from_py_object_no_sync = &ImportManagedTensor;
    }
    g_torch = api;
  }
  return PyCapsule_New(&g_api, "dlpack_exchange_api", nullptr);
}

/// A "kffi.lazy_view_bits" capsule of ReadLazyViewBits (int (*)(PyObject*)), which
/// _core._override_exchange_api takes beside the API: kffi then reads the lazy-view bits of torch
/// tensor arguments from the TensorImpl instead of asking torch's Python methods. Needs
/// kffi_torch_exchange_api first (it fixes torch._C.TensorBase).
PyObject* LazyViewReader() {
  if (g_tensor_base == nullptr) {
    PyErr_SetString(PyExc_RuntimeError,
                    "kffi_torch_lazy_view_reader: call kffi_torch_exchange_api first");
    return nullptr;
  }
  return PyCapsule_New(reinterpret_cast<void*>(&ReadLazyViewBits), "kffi.lazy_view_bits", nullptr);
}

}  // namespace torchglue
}  // namespace kffi
