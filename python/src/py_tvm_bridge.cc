// python/src/py_tvm_bridge.cc: what the Python extension does for TVM-FFI libraries: owning
// Tensors for their `ffi::Tensor` parameters, and the type keys of objects of their types.
//
// Both need answers only the TVM-FFI bridge (libkffi_tvm, which libkffi opens with the first
// TVM-FFI library) has: which parameters of a function take owning Tensors, and whether an
// object's type belongs to the loaded apache-tvm-ffi's registry. kffi/_tvm.py hands the
// extension the bridge's two private entry points once it is in the process; before that no
// TVM-FFI function or object can exist, and kffi's registry answers alone.
// SPDX-License-Identifier: Apache-2.0
#include <dlfcn.h>
#include <kffi/tensor.h>

#include <atomic>
#include <string>

#include "py_common.h"

namespace kffi {
namespace pyglue {

namespace {

/// KFFITvmFunctionOwnedTensorArgs: 1 with the parameters that take owning Tensors when func is a
/// TVM-FFI library's function.
using OwnedArgsQuery = int (*)(void* func, uint64_t* owned);
/// KFFITvmForeignTypeInfo: 1 with the type key and nearest static ancestor when obj's type is not
/// kffi's registry's to describe.
using ForeignTypeQuery = int (*)(void* obj, KFFIByteArray* key, int32_t* static_ancestor);
/// KFFITvmForeignField: a field of an object of apache-tvm-ffi's registry, read (value NULL) or
/// assigned; KFFITvmForeignFieldName: the name of its field i.
using ForeignFieldQuery = int (*)(void* obj, const char* name, size_t size, const KFFIAny* value,
                                  KFFIAny* out);
using ForeignFieldNameQuery = int (*)(void* obj, int32_t i, KFFIByteArray* name);
std::atomic<OwnedArgsQuery> g_owned_args_query{nullptr};
std::atomic<ForeignFieldQuery> g_foreign_field_query{nullptr};
std::atomic<ForeignFieldNameQuery> g_foreign_field_name_query{nullptr};
std::atomic<ForeignTypeQuery> g_foreign_type_query{nullptr};

/// Drops a reference to a Python object from any thread (a Tensor below dies wherever the callee
/// that kept it releases it); after the interpreter is gone the reference is leaked.
void ReleasePyReference(PyObject* obj) {
  if (!Py_IsInitialized()) return;
  if (PyGILState_Check()) {
    PendingErrorScope keep;  // its finalizer may run Python code while an error is pending
    Py_DECREF(obj);
    return;
  }
  PyGILState_STATE st = PyGILState_Ensure();
  Py_DECREF(obj);
  PyGILState_Release(st);
}

/// A Tensor object over the memory of a framework tensor argument (torch, NumPy) that holds the
/// Python tensor, so the memory lives as long as the Tensor: what a TVM-FFI `ffi::Tensor`
/// parameter receives, since its callee may keep it. Zero-copy; shape and strides are copied
/// (the framework tensor may change its own in place later).
class PyOwnerTensorObj final : public TensorObj {
 public:
  PyOwnerTensorObj(const DLTensor& src, PyObject* owner, uint64_t flags) : owner_(owner) {
    InitLayout(InplaceArrayBegin<int64_t>(this),
               IntArrayView(src.shape, static_cast<size_t>(src.ndim)), src.strides);
    data = src.data;
    device = src.device;
    dtype = src.dtype;
    byte_offset = src.byte_offset;
    dlpack_flags_ = flags;
    Py_INCREF(owner_);
  }
  ~PyOwnerTensorObj() { ReleasePyReference(owner_); }
  PyOwnerTensorObj(const PyOwnerTensorObj&) = delete;
  PyOwnerTensorObj& operator=(const PyOwnerTensorObj&) = delete;

 private:
  PyObject* owner_;
};

inline bool TakesOwnedTensor(uint64_t mask, Py_ssize_t index) {
  return ((mask >> (index < 63 ? index : 63)) & 1) != 0;
}

}  // namespace

PyObject* InstallTvmBridge(PyObject*, PyObject* args) {
  PyObject *owned_args, *foreign_type;
  if (!PyArg_ParseTuple(args, "O!O!", &PyLong_Type, &owned_args, &PyLong_Type, &foreign_type)) {
    return nullptr;
  }
  void* a = PyLong_AsVoidPtr(owned_args);
  void* b = PyLong_AsVoidPtr(foreign_type);
  if (PyErr_Occurred()) return nullptr;
  g_owned_args_query.store(reinterpret_cast<OwnedArgsQuery>(a), std::memory_order_release);
  // The field queries live in the same library (libkffi_tvm): found by its path, so that
  // kffi/_tvm.py's call stays as it is.
  Dl_info where{};
  if (b != nullptr && dladdr(b, &where) != 0 && where.dli_fname != nullptr) {
    if (void* lib = dlopen(where.dli_fname, RTLD_LAZY | RTLD_NOLOAD)) {
      g_foreign_field_query.store(
          reinterpret_cast<ForeignFieldQuery>(dlsym(lib, "KFFITvmForeignField")),
          std::memory_order_release);
      g_foreign_field_name_query.store(
          reinterpret_cast<ForeignFieldNameQuery>(dlsym(lib, "KFFITvmForeignFieldName")),
          std::memory_order_release);
      // The handle stays open: the library is never unloaded while kffi runs.
    }
  }
  g_foreign_type_query.store(reinterpret_cast<ForeignTypeQuery>(b), std::memory_order_release);
  Py_RETURN_NONE;
}

bool ForeignType(const KFFIObject* obj, KFFIByteArray* key, int32_t* static_ancestor) {
  const int32_t index = obj->type_index;
  if (index < kKFFIDynObjectBegin && KFFIGetTypeInfo(index) != nullptr) return false;
  ForeignTypeQuery query = g_foreign_type_query.load(std::memory_order_acquire);
  return query != nullptr && query(const_cast<KFFIObject*>(obj), key, static_ancestor) == 1;
}

std::string TypeKeyOf(const KFFIObject* obj) {
  KFFIByteArray key;
  int32_t ancestor;
  if (ForeignType(obj, &key, &ancestor)) return std::string(key.data, key.size);
  if (const KFFITypeInfo* info = KFFIGetTypeInfo(obj->type_index)) {
    return std::string(info->type_key.data, info->type_key.size);
  }
  return "<unknown type index " + std::to_string(obj->type_index) + ">";
}

int ForeignField(PyObject* self, PyObject* name, PyObject* value, PyObject** out) {
  ForeignFieldQuery query = g_foreign_field_query.load(std::memory_order_acquire);
  KFFIObjectHandle h = reinterpret_cast<PyObjectHandle*>(self)->handle;
  if (query == nullptr || h == nullptr || !PyUnicode_Check(name) ||
      static_cast<KFFIObject*>(h)->type_index < kKFFIDynObjectBegin) {
    return 0;
  }
  Py_ssize_t size = 0;
  const char* utf8 = PyUnicode_AsUTF8AndSize(name, &size);
  if (utf8 == nullptr) return -1;
  if (value == nullptr) {
    KFFIAny got;
    int rc = query(h, utf8, static_cast<size_t>(size), nullptr, &got);
    if (rc != 1) return rc < 0 ? (RaiseFromKFFIError(-1), -1) : 0;
    *out = AnyToPy(&got, nullptr);
    return *out != nullptr ? 1 : -1;
  }
  KFFIAny v;
  if (PyToOwnedAny(value, &v) != 0) return -1;
  int rc = query(h, utf8, static_cast<size_t>(size), &v, nullptr);
  if (v.type_index >= kKFFIStaticObjectBegin) ReleaseObject(v.v_obj);
  if (rc < 0) return (RaiseFromKFFIError(-1), -1);
  return rc;
}

PyObject* ForeignRepr(PyObject* self) {
  ForeignFieldNameQuery names = g_foreign_field_name_query.load(std::memory_order_acquire);
  KFFIObjectHandle h = reinterpret_cast<PyObjectHandle*>(self)->handle;
  if (names == nullptr || h == nullptr ||
      static_cast<KFFIObject*>(h)->type_index < kKFFIDynObjectBegin) {
    return nullptr;
  }
  std::string body;
  for (int32_t i = 0;; ++i) {
    KFFIByteArray n{nullptr, 0};
    int rc = names(h, i, &n);
    if (rc < 0) return RaiseFromKFFIError(-1);
    if (rc == 0) {
      if (i == 0) return nullptr;  // no fields: the plain repr
      break;
    }
    PyRef name(PyUnicode_DecodeUTF8(n.data, static_cast<Py_ssize_t>(n.size), "surrogateescape"));
    if (!name) return nullptr;
    PyObject* value = nullptr;
    rc = ForeignField(self, name.get(), nullptr, &value);
    if (rc < 0) return nullptr;
    PyRef v(value);
    PyRef text(rc == 1 ? PyObject_Repr(v.get()) : PyUnicode_FromString("?"));
    if (!text) return nullptr;
    const char* t = PyUnicode_AsUTF8(text.get());
    if (t == nullptr) return nullptr;
    body += (i ? ", " : "") + std::string(n.data, n.size) + "=" + t;
  }
  std::string key = TypeKeyOf(static_cast<KFFIObject*>(h));
  return PyUnicode_FromFormat("%s(%s)", key.c_str(), body.c_str());
}

uint64_t OwnedTensorArgsOf(KFFIObjectHandle func) {
  uint64_t mask = 0;
  OwnedArgsQuery query = g_owned_args_query.load(std::memory_order_acquire);
  return query != nullptr && query(func, &mask) == 1 ? mask : 0;
}

void OwnedArguments::Release() {
  for (uint64_t m = made_; m != 0; m &= m - 1) {
    ReleaseObject(packed_[__builtin_ctzll(m)].v_obj);
  }
  made_ = 0;
}

int OwnTensorArguments(uint64_t mask, PyObject* const* args, Py_ssize_t nargs, KFFIAny* packed,
                       CallContext* ctx, OwnedArguments* owned) {
  owned->Bind(packed);
  for (Py_ssize_t i = 0; i < nargs; ++i) {
    if (packed[i].type_index != kKFFIDLTensorPtr || !TakesOwnedTensor(mask, i)) continue;
    const DLTensor* view = static_cast<const DLTensor*>(packed[i].v_ptr);
    const uint32_t flags = packed[i].tensor_flags;
    KFFIObjectHandle h;
    try {
      h = details::ObjectUnsafe::MoveToHandle(make_inplace_array_object<PyOwnerTensorObj, int64_t>(
          2 * static_cast<size_t>(view->ndim), *view, args[i],
          (flags & kKFFITensorFlagReadOnly) != 0 ? uint64_t{DLPACK_FLAG_BITMASK_READ_ONLY} : 0));
    }
    KFFI_CATCH_ALL { return (RaiseFromCppException(), -1); }
    details::SetObject(&packed[i], static_cast<KFFIObject*>(h));
    packed[i].tensor_flags = flags;
    if (!owned->Note(i)) ctx->KeepAlive(packed[i]);
  }
  return 0;
}

}  // namespace pyglue
}  // namespace kffi
