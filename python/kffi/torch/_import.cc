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
// Built into the library of _eager.cc (kffi.torch._native), loaded with ctypes.PyDLL.
#include <Python.h>
#include <torch/csrc/autograd/python_variable.h>  // THPVariable_Unpack (inline)

#include <exception>

#include "_torch_dlpack.h"

namespace {

DLPackExchangeAPI g_api;           // torch's, with the import below
const DLPackExchangeAPI* g_torch;  // torch's own (its capsule lives on torch.Tensor)
PyTypeObject* g_tensor_base;       // torch._C.TensorBase: objects laid out as a THPVariable

int ImportDLTensor(void* py_object, DLTensor* out) {
  auto* obj = static_cast<PyObject*>(py_object);
  // Any type may name torch's API; only THPVariables are read directly (a type check, unlike
  // THPVariable_Check's isinstance, runs no Python code).
  if (C10_LIKELY(PyType_IsSubtype(Py_TYPE(obj), g_tensor_base))) {
    try {
      if (C10_LIKELY(kffi::torchglue::ViewAsDLTensor(THPVariable_Unpack(obj), out))) return 0;
    } catch (const std::exception&) {
      // A tensor without storage (data_ptr() throws), say: torch's import says what is wrong.
    }
  }
  return g_torch->dltensor_from_py_object_no_sync(py_object, out);
}

}  // namespace

/// A "dlpack_exchange_api" capsule of torch's exchange API (torch_api: torch.Tensor's capsule)
/// with the import above; tensor_base: torch._C.TensorBase. The API is static: later calls
/// return capsules of the same one.
extern "C" __attribute__((visibility("default"))) PyObject* kffi_torch_exchange_api(
    PyObject* torch_api, PyObject* tensor_base) {
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
    g_torch = api;
  }
  return PyCapsule_New(&g_api, "dlpack_exchange_api", nullptr);
}
