// python/src/py_tensor_object.cc: kffi.Tensor from Python: its layout for python/kffi, DLPack
// capsules of it, and kffi.Tensor as a producer of the DLPack C exchange API (the allocator checks
// every size).
// SPDX-License-Identifier: Apache-2.0
#include <kffi/tensor.h>

#include <cstdlib>
#include <new>
#include <string>
#include <vector>

#include "py_common.h"

namespace kffi {
namespace pyglue {

// ---- kffi.Tensor helpers exposed to python/kffi/_objects.py ------------------------------------

namespace {
KFFIObjectHandle TensorHandleArg(PyObject* obj) {
  return HandleOfType(obj, kKFFITensor, "kffi.Tensor");
}

PyObject* Int64Tuple(const int64_t* v, int n) {
  PyRef t(PyTuple_New(n));
  if (!t) return nullptr;
  for (int i = 0; i < n; ++i) {
    PyObject* item = PyLong_FromLongLong(v[i]);
    if (item == nullptr) return nullptr;
    PyTuple_SET_ITEM(t.get(), i, item);
  }
  return t.release();
}
}  // namespace

/// _tensor_info(t) -> (data_ptr, shape, strides, (code, bits, lanes), (type, id), byte_offset,
/// read_only)
PyObject* TensorInfo(PyObject*, PyObject* obj) {
  KFFIObjectHandle h = TensorHandleArg(obj);
  if (h == nullptr) return nullptr;
  DLTensor* t = KFFITensorGetDLTensorPtr(h);
  if (!TensorSizesFit(t)) return (RaiseLayoutTooLarge(t, ArgPlace()), nullptr);
  PyRef shape(Int64Tuple(t->shape, t->ndim));
  PyRef strides;
  if (t->strides != nullptr) {
    strides = PyRef(Int64Tuple(t->strides, t->ndim));
  } else {
    // The runtime's compact strides (checked; TensorSizesFit already bounds them).
    try {
      StrideArray s = StrideArray::Compact(IntArrayView(t->shape, static_cast<size_t>(t->ndim)));
      strides = PyRef(Int64Tuple(s.data(), t->ndim));
    }
    KFFI_CATCH_ALL { return RaiseFromCppException(); }
  }
  if (!shape || !strides) return nullptr;
  return Py_BuildValue("(NOO(iii)(ii)KO)", PyLong_FromVoidPtr(t->data), shape.get(), strides.get(),
                       t->dtype.code, t->dtype.bits, t->dtype.lanes,
                       static_cast<int>(t->device.device_type), t->device.device_id,
                       static_cast<unsigned long long>(t->byte_offset),  // NOLINT
                       OwnedTensorFlags(h) != 0 ? Py_True : Py_False);
}

/// _tensor_to_dlpack(t, versioned) -> a DLPack capsule that keeps t's data alive.
PyObject* TensorToDLPack(PyObject*, PyObject* args) {
  PyObject* obj;
  int versioned;
  if (!PyArg_ParseTuple(args, "Op", &obj, &versioned)) return nullptr;
  KFFIObjectHandle h = TensorHandleArg(obj);
  if (h == nullptr) return nullptr;
  if (versioned) {
    DLManagedTensorVersioned* mt = nullptr;
    if (KFFITensorToDLPackVersioned(h, &mt) != 0) return RaiseFromKFFIError(-1);
    PyObject* cap = PyCapsule_New(mt, "dltensor_versioned", DLPackVersionedCapsuleDeleter);
    if (cap == nullptr) mt->deleter(mt);
    return cap;
  }
  DLManagedTensor* mt = nullptr;
  if (KFFITensorToDLPack(h, &mt) != 0) return RaiseFromKFFIError(-1);
  PyObject* cap = PyCapsule_New(mt, "dltensor", DLPackCapsuleDeleter);
  if (cap == nullptr) mt->deleter(mt);
  return cap;
}

/// from_dlpack(obj) -> kffi.Tensor owning a reference to obj's data (zero-copy).
PyObject* FromDLPack(PyObject*, PyObject* obj) {
  KFFIObjectHandle h = nullptr;
  if (TensorToOwnedHandle(obj, &h) != 0) return nullptr;
  return WrapObject(h);
}

// ---- kffi.Tensor as a producer of the DLPack C exchange API ------------------------------------
namespace {
int ExchangeAllocator(DLTensor* prototype, DLManagedTensorVersioned** out, void* error_ctx,
                      void (*set_error)(void*, const char*, const char*)) {
  if (prototype->device.device_type != kDLCPU) {
    set_error(error_ctx, "RuntimeError", "kffi.Tensor's allocator only allocates CPU memory");
    return -1;
  }
  struct Holder {
    DLManagedTensorVersioned mt;
    std::vector<int64_t> shape;
  };
  Holder* holder = nullptr;
  void* data = nullptr;
  try {
    // The runtime's own layout check and byte count (kffi/tensor.h), then its allocation bound
    // (kffi/base.h): a shape whose size overflows is a ValueError naming it, before anything is
    // allocated. The buffer rounds up to whole 64-byte blocks, plus one.
    try {
      details::CheckLayoutSizes(prototype->shape, nullptr, prototype->ndim, prototype->dtype,
                                "kffi.Tensor's allocator");
    } catch (const Error&) {
      // The runtime decides; the message is the extension's own for every impossible size.
      std::string msg = "kffi.Tensor's allocator: a tensor of shape " + ShapeText(prototype) +
                        " and dtype " + DTypeText(prototype->dtype) +
                        " has an impossible size (a negative dimension, or a size in bytes that "
                        "overflows int64)";
      set_error(error_ctx, "ValueError", msg.c_str());
      return -1;
    }
    DLTensor compact = *prototype;
    compact.strides = nullptr;
    compact.byte_offset = 0;
    const int64_t bytes = GetDataSize(compact);
    const size_t blocks = static_cast<size_t>(bytes / 64) + (bytes % 64 != 0 ? 1 : 0) + 1;
    size_t total = 0;
    if (!details::AllocBytes(0, blocks, 64, &total)) {
      details::ThrowAllocSizeError(blocks, 64);
    }
    holder = new Holder();
    holder->shape.assign(prototype->shape, prototype->shape + prototype->ndim);
    data = std::aligned_alloc(64, total);
    if (data == nullptr) throw std::bad_alloc();
  }
  KFFI_CATCH_ALL {
    delete holder;
    // The one conversion from C++ exceptions to error kinds (kffi/error.h), read back here for
    // the allocator's error callback.
    details::SetRaisedFromCurrentException();
    std::string kind = "RuntimeError", message = "allocation failed";
    details::TakeRaisedKindMessage(&kind, &message);
    set_error(error_ctx, kind.c_str(), message.c_str());
    return -1;
  }
  DLManagedTensorVersioned& mt = holder->mt;
  mt.version = DLPackVersion{DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION};
  mt.manager_ctx = holder;
  mt.flags = 0;
  mt.deleter = [](DLManagedTensorVersioned* self) {
    std::free(self->dl_tensor.data);
    delete static_cast<Holder*>(self->manager_ctx);
  };
  mt.dl_tensor = *prototype;
  mt.dl_tensor.data = data;
  mt.dl_tensor.shape = holder->shape.data();
  mt.dl_tensor.strides = nullptr;
  mt.dl_tensor.byte_offset = 0;
  *out = &mt;
  return 0;
}

int ExchangeFromPy(void* py_obj, DLManagedTensorVersioned** out) {
  KFFIObjectHandle h = TensorHandleArg(static_cast<PyObject*>(py_obj));
  if (h == nullptr) return -1;
  if (KFFITensorToDLPackVersioned(h, out) != 0) return (RaiseFromKFFIError(-1), -1);
  return 0;
}

int ExchangeToPy(DLManagedTensorVersioned* mt, void** out) {
  KFFIObjectHandle h = nullptr;
  if (KFFITensorFromDLPackVersioned(mt, 0, 0, &h) != 0) return (RaiseFromKFFIError(-1), -1);
  if (CheckOwnedLayout(&h, ArgPlace()) != 0) return -1;
  PyObject* r = WrapObject(h);
  if (r == nullptr) return -1;
  *out = r;
  return 0;
}

int ExchangeView(void* py_obj, DLTensor* out) {
  KFFIObjectHandle h = TensorHandleArg(static_cast<PyObject*>(py_obj));
  if (h == nullptr) return -1;
  *out = *KFFITensorGetDLTensorPtr(h);
  return 0;
}

int ExchangeStream(DLDeviceType device_type, int32_t device_id, void** out) {
  *out = KFFIEnvGetStream(device_type, device_id);
  return 0;
}

DLPackExchangeAPI g_exchange_api = {
    {{DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION}, nullptr},
    ExchangeAllocator,
    ExchangeFromPy,
    ExchangeToPy,
    ExchangeView,
    ExchangeStream,
};
}  // namespace

int InitTensorSupport(PyObject* module) {
  PyObject* cap = PyCapsule_New(&g_exchange_api, "dlpack_exchange_api", nullptr);
  if (cap == nullptr) return -1;
  if (PyModule_AddObject(module, "_tensor_exchange_api", cap) != 0) {
    Py_DECREF(cap);
    return -1;
  }
  return 0;
}

}  // namespace pyglue
}  // namespace kffi
