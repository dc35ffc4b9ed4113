// python/src/tvm/py_tvm_bridge.cc: what the Python extension does for TVM-FFI libraries: owning
// Tensors for their `ffi::Tensor` parameters, the type keys of objects of their types, and a
// class per type of a loaded apache-tvm-ffi's registry with one descriptor per field.
//
// These need answers only the TVM-FFI bridge (libkffi_tvm, which libkffi opens with the first
// TVM-FFI library) has. The extension opens the same loaded library itself
// (`_tvm_bridge_open`, called by kffi/tvm/_bridge.py once it is in the process) and calls it only
// through its typed table (src/tvm_bridge/tvm_python_api.h), whose errors arrive in kffi's slot;
// before that no TVM-FFI function or object can exist, and kffi's registry answers alone.
// SPDX-License-Identifier: Apache-2.0
#include <dlfcn.h>
#include <kffi/tensor.h>

#include <atomic>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "py_common.h"
#include "tvm_bridge/tvm_python_api.h"

namespace kffi {
namespace pyglue {

namespace {

using details::TvmForeignField;
using details::TvmForeignTypeDesc;
using details::TvmPythonApi;

// The bridge's table once opened (process lifetime: the library is never unloaded).
std::atomic<const TvmPythonApi*> g_api{nullptr};

KFFI_INLINE const TvmPythonApi* Api() { return g_api.load(std::memory_order_acquire); }

// Classes of apache-tvm-ffi's types, by its type index (strong references, for the process; a
// type kffi makes no class for maps to None), and what each was made from.
std::mutex g_foreign_mutex;
std::unordered_map<int32_t, PyObject*>* g_foreign_classes = nullptr;
std::unordered_map<int32_t, const TvmForeignTypeDesc*>* g_foreign_descs = nullptr;
// kffi/tvm/_bridge.py's class maker: called with a type index, registers and returns a class.
PyObject* g_foreign_class_hook = nullptr;

// The error the bridge raised in kffi's slot dropped (a type it cannot describe keeps the plain
// class: the field access that needs the records reports the problem).
void DropKffiError() {
  KFFIObjectHandle err = nullptr;
  KFFIErrorMoveFromRaised(&err);
  if (err != nullptr) KFFIObjectDecRef(err);
}

// What a field descriptor of a foreign type reads: its checked record and the type that owns the
// class (objects are checked against it: a wrapper whose __class__ was reassigned must not read
// another type's memory).
struct ForeignSlot {
  const TvmForeignField* field;
  int32_t owner;
  std::string qualname;  // "tvm_refl.Point.x", for messages
};

KFFI_INLINE KFFIObject* ForeignSlotObject(PyObject* self, const ForeignSlot* slot) {
  auto* h = static_cast<KFFIObject*>(reinterpret_cast<PyObjectHandle*>(self)->handle);
  if (KFFI_LIKELY(h != nullptr && h->type_index == slot->owner)) return h;
  return RaiseNotFieldOwner(self, h, slot->qualname);
}

PyObject* ForeignFieldGet(PyObject* self, void* closure) {
  const auto* slot = static_cast<const ForeignSlot*>(closure);
  KFFIObject* h = ForeignSlotObject(self, slot);
  if (h == nullptr) return nullptr;
  KFFIAny out;
  out.type_index = kKFFINone;
  out.zero_padding = 0;
  out.v_int64 = 0;
  if (slot->field->getter(reinterpret_cast<char*>(h) + slot->field->offset, &out) != 0) {
    return RaiseFromKFFIError(Api()->raise_field_error(slot->qualname.c_str()));
  }
  return AnyToPy(&out, nullptr);
}

int ForeignFieldSet(PyObject* self, PyObject* value, void* closure) {
  const auto* slot = static_cast<const ForeignSlot*>(closure);
  KFFIObject* h = ForeignSlotObject(self, slot);
  if (h == nullptr) return -1;
  if (value == nullptr) {
    PyErr_Format(PyExc_AttributeError, "field `%s` cannot be deleted", slot->qualname.c_str());
    return -1;
  }
  const int32_t flags = slot->field->flags;
  if ((flags & details::kTvmForeignFieldSetterIsFunc) != 0) {
    PyErr_Format(PyExc_AttributeError,
                 "field `%s` has a setter kffi cannot call (a Function object)",
                 slot->qualname.c_str());
    return -1;
  }
  if ((flags & details::kTvmForeignFieldWritable) == 0 || slot->field->setter == nullptr) {
    PyErr_Format(PyExc_AttributeError, "field `%s` is read-only", slot->qualname.c_str());
    return -1;
  }
  KFFIAny v;
  if (PyToOwnedAny(value, &v) != 0) return -1;
  int rc = slot->field->setter(reinterpret_cast<char*>(h) + slot->field->offset, &v);
  if (v.type_index >= kKFFIStaticObjectBegin) ReleaseObject(v.v_obj);
  if (rc != 0) {
    RaiseFromKFFIError(Api()->raise_field_error(slot->qualname.c_str()));
    return -1;
  }
  return 0;
}

const TvmForeignTypeDesc* KnownDesc(int32_t index) {
  std::lock_guard<std::mutex> lock(g_foreign_mutex);
  if (g_foreign_descs == nullptr) return nullptr;
  auto it = g_foreign_descs->find(index);
  return it != g_foreign_descs->end() ? it->second : nullptr;
}

void NoteDesc(const TvmForeignTypeDesc* desc) {
  std::lock_guard<std::mutex> lock(g_foreign_mutex);
  if (g_foreign_descs == nullptr) {
    g_foreign_descs = new std::unordered_map<int32_t, const TvmForeignTypeDesc*>();
  }
  g_foreign_descs->emplace(desc->type_index, desc);
}

// Stores cls (borrowed; None for "no class") as the class of foreign type index.
void StoreForeignClass(int32_t index, PyObject* cls) {
  std::lock_guard<std::mutex> lock(g_foreign_mutex);
  if (g_foreign_classes == nullptr)
    g_foreign_classes = new std::unordered_map<int32_t, PyObject*>();
  PyObject*& slot = (*g_foreign_classes)[index];
  Py_XDECREF(slot);
  slot = Py_NewRef(cls);
}

// ---- functions of the module ---------------------------------------------------------------

// _tvm_bridge_open(path, load) -> bool: opens libkffi_tvm at path (load False: only when it is
// in the process already) and takes its table; True when the table is there.
PyObject* TvmBridgeOpen(PyObject*, PyObject* args) {
  const char* path;
  int load;
  if (!PyArg_ParseTuple(args, "sp", &path, &load)) return nullptr;
  if (Api() != nullptr) Py_RETURN_TRUE;
  // RTLD_LOCAL, as libkffi opens it: the same loaded object either way.
  void* lib = dlopen(path, RTLD_LAZY | RTLD_LOCAL | (load ? 0 : RTLD_NOLOAD));
  if (lib == nullptr) {
    if (!load) Py_RETURN_FALSE;
    const char* why = dlerror();
    return PyErr_Format(PyExc_OSError, "cannot open the TVM-FFI bridge %s: %s", path,
                        why != nullptr ? why : "unknown error");
  }
  auto get =
      reinterpret_cast<details::TvmPythonGetApiFn>(dlsym(lib, details::kTvmPythonEntrySymbol));
  const TvmPythonApi* api = get != nullptr ? get() : nullptr;
  if (api == nullptr || api->api_version != details::kTvmPythonApiVersion) {
    // The handle stays open: the library is never unloaded while kffi runs.
    return PyErr_Format(PyExc_RuntimeError,
                        "the TVM-FFI bridge %s does not match kffi's extension (table version %u, "
                        "expected %u): reinstall kffi",
                        path, api != nullptr ? api->api_version : 0u,
                        details::kTvmPythonApiVersion);
  }
  g_api.store(api, std::memory_order_release);
  Py_RETURN_TRUE;
}

const TvmPythonApi* RequireApi() {
  const TvmPythonApi* api = Api();
  if (api == nullptr) {
    PyErr_SetString(PyExc_RuntimeError, "the TVM-FFI bridge is not open (internal)");
  }
  return api;
}

// _tvm_install(): registers `kffi.object_from_address` in the loaded libtvm_ffi (once).
PyObject* TvmInstall(PyObject*, PyObject*) {
  const TvmPythonApi* api = RequireApi();
  if (api == nullptr) return nullptr;
  if (api->install() != 0) return RaiseFromKFFIError(-1);
  Py_RETURN_NONE;
}

// _tvm_export_object(obj) -> int: the address of an owned reference TVM-FFI code may hold.
PyObject* TvmExportObject(PyObject*, PyObject* obj) {
  const TvmPythonApi* api = RequireApi();
  if (api == nullptr) return nullptr;
  KFFIObjectHandle h = GetHandle(obj);
  if (h == nullptr) {
    if (!RaiseIfReleased(obj)) {
      PyErr_Format(PyExc_TypeError, "expected a kffi object, got %s", Py_TYPE(obj)->tp_name);
    }
    return nullptr;
  }
  KFFIObjectHandle out = nullptr;
  if (api->export_object(h, &out) != 0) return RaiseFromKFFIError(-1);
  return PyLong_FromVoidPtr(out);
}

// _tvm_set_installed_runtime(path: bytes).
PyObject* TvmSetInstalledRuntime(PyObject*, PyObject* args) {
  const char* path;
  if (!PyArg_ParseTuple(args, "y", &path)) return nullptr;
  const TvmPythonApi* api = RequireApi();
  if (api == nullptr) return nullptr;
  api->set_installed_runtime(path);
  Py_RETURN_NONE;
}

// _tvm_real_runtime_loaded() -> bool.
PyObject* TvmRealRuntimeLoaded(PyObject*, PyObject*) {
  const TvmPythonApi* api = RequireApi();
  if (api == nullptr) return nullptr;
  return PyBool_FromLong(api->real_runtime_loaded());
}

// _tvm_foreign_index(key) -> int or None: the index of a type key in the loaded apache-tvm-ffi's
// registry (its description made), None when none is loaded or it lacks the key.
PyObject* TvmForeignIndex(PyObject*, PyObject* arg) {
  Py_ssize_t size = 0;
  const char* key = PyUnicode_AsUTF8AndSize(arg, &size);
  if (key == nullptr) return nullptr;
  const TvmPythonApi* api = Api();
  if (api == nullptr) Py_RETURN_NONE;
  const TvmForeignTypeDesc* desc = nullptr;
  int rc = api->foreign_type_desc_by_key(key, static_cast<size_t>(size), &desc);
  if (rc < 0) return RaiseFromKFFIError(-1);
  if (rc == 0) Py_RETURN_NONE;
  NoteDesc(desc);
  return PyLong_FromLong(desc->type_index);
}

// _tvm_foreign_reflection(index) -> (key, structural, fields, methods, parent key or None):
// fields (name, writable, compared: False for a field left out of structural ==/hash), methods
// (name, Function, is_static), of a foreign type described earlier; the parent key when the
// parent is a dynamic type (a class of its own).
PyObject* TvmForeignReflection(PyObject*, PyObject* arg) {
  long index = PyLong_AsLong(arg);
  if (index == -1 && PyErr_Occurred()) return nullptr;
  const TvmForeignTypeDesc* d = KnownDesc(static_cast<int32_t>(index));
  if (d == nullptr) return PyErr_Format(PyExc_KeyError, "no foreign type %ld", index);
  PyRef fields(PyTuple_New(d->num_fields));
  PyRef methods(PyTuple_New(d->num_methods));
  if (!fields || !methods) return nullptr;
  for (int32_t i = 0; i < d->num_fields; ++i) {
    const TvmForeignField& f = d->fields[i];
    PyObject* t =
        Py_BuildValue("(s#OO)", f.name.data, static_cast<Py_ssize_t>(f.name.size),
                      (f.flags & details::kTvmForeignFieldWritable) != 0 ? Py_True : Py_False,
                      (f.flags & details::kTvmForeignFieldCompareOff) != 0 ? Py_False : Py_True);
    if (t == nullptr) return nullptr;
    PyTuple_SET_ITEM(fields.get(), i, t);
  }
  for (int32_t i = 0; i < d->num_methods; ++i) {
    KFFIObjectIncRef(d->methods[i].function);
    PyRef fn(WrapObject(d->methods[i].function));
    if (!fn) return nullptr;
    PyObject* t = Py_BuildValue("(s#Oi)", d->methods[i].name.data,
                                static_cast<Py_ssize_t>(d->methods[i].name.size), fn.get(),
                                d->methods[i].is_static);
    if (t == nullptr) return nullptr;
    PyTuple_SET_ITEM(methods.get(), i, t);
  }
  PyRef parent(d->parent_key.size != 0
                   ? PyUnicode_FromStringAndSize(d->parent_key.data,
                                                 static_cast<Py_ssize_t>(d->parent_key.size))
                   : Py_NewRef(Py_None));
  if (!parent) return nullptr;
  return Py_BuildValue("(s#OOOO)", d->type_key.data, static_cast<Py_ssize_t>(d->type_key.size),
                       d->structural ? Py_True : Py_False, fields.get(), methods.get(),
                       parent.get());
}

// _tvm_foreign_install(cls, index): a descriptor on cls for each field of foreign type index
// (its ancestors' included), and cls registered as the type's class.
PyObject* TvmForeignInstall(PyObject*, PyObject* args) {
  PyObject* cls;
  int index;
  if (!PyArg_ParseTuple(args, "O!i", &PyType_Type, &cls, &index)) return nullptr;
  auto* tp = reinterpret_cast<PyTypeObject*>(cls);
  if (!PyType_IsSubtype(tp, g_state->object_type)) {
    PyErr_SetString(PyExc_TypeError, "the class must derive from kffi.Object");
    return nullptr;
  }
  const TvmForeignTypeDesc* d = KnownDesc(index);
  if (d == nullptr) return PyErr_Format(PyExc_KeyError, "no foreign type %d", index);
  const std::string key(d->type_key.data, d->type_key.size);
  for (int32_t i = 0; i < d->num_fields; ++i) {
    const TvmForeignField* f = &d->fields[i];
    // Slot and getset record live for the process: descriptors keep pointers to them.
    auto* slot = new ForeignSlot{f, index, key + "." + std::string(f->name.data, f->name.size)};
    auto* def = new PyGetSetDef{f->name.data, ForeignFieldGet, ForeignFieldSet, nullptr, slot};
    PyRef name(PyUnicode_FromStringAndSize(f->name.data, static_cast<Py_ssize_t>(f->name.size)));
    PyRef descr(PyDescr_NewGetSet(tp, def));
    if (!name || !descr || PyObject_SetAttr(cls, name.get(), descr.get()) != 0) return nullptr;
  }
  StoreForeignClass(index, cls);
  Py_RETURN_NONE;
}

PyObject* TvmSetForeignClassHook(PyObject*, PyObject* hook) {
  PyObject* old = g_foreign_class_hook;
  g_foreign_class_hook = Py_NewRef(hook);
  Py_XDECREF(old);
  Py_RETURN_NONE;
}

PyMethodDef kTvmBridgeMethods[] = {
    {"_tvm_bridge_open", TvmBridgeOpen, METH_VARARGS, nullptr},
    {"_tvm_install", TvmInstall, METH_NOARGS, nullptr},
    {"_tvm_export_object", TvmExportObject, METH_O, nullptr},
    {"_tvm_set_installed_runtime", TvmSetInstalledRuntime, METH_VARARGS, nullptr},
    {"_tvm_real_runtime_loaded", TvmRealRuntimeLoaded, METH_NOARGS, nullptr},
    {"_tvm_foreign_index", TvmForeignIndex, METH_O, nullptr},
    {"_tvm_foreign_reflection", TvmForeignReflection, METH_O, nullptr},
    {"_tvm_foreign_install", TvmForeignInstall, METH_VARARGS, nullptr},
    {"_tvm_set_foreign_class_hook", TvmSetForeignClassHook, METH_O, nullptr},
    {nullptr, nullptr, 0, nullptr}};

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

/// A Tensor object over the memory of a framework tensor argument (torch, NumPy): what a TVM-FFI
/// `ffi::Tensor` parameter receives, since its callee may keep it. Zero-copy; shape and strides
/// are copied (the framework tensor may change its own in place later).
///
/// It holds the Python tensor only once a callee has kept it: during the call the caller's
/// argument keeps the tensor alive, and after the call a Tensor nobody else references is reused
/// for a later call on the same thread (OwnerTensorPool) instead of freed. A TVM-FFI library built
/// without metadata declares no parameter types, so every tensor argument it gets takes this path;
/// a fresh object per argument (allocation, two Python reference counts, a GIL check) cost more
/// than the rest of such a call.
class PyOwnerTensorObj final : public TensorObj {
 public:
  explicit PyOwnerTensorObj(int32_t room) : room_(room) {}
  ~PyOwnerTensorObj() {
    if (owner_ != nullptr) ReleasePyReference(owner_);
  }
  PyOwnerTensorObj(const PyOwnerTensorObj&) = delete;
  PyOwnerTensorObj& operator=(const PyOwnerTensorObj&) = delete;

  /// Room for shape and strides of this many dimensions.
  int32_t room() const { return room_; }
  /// Views src for one call; owner is the caller's argument (borrowed for the call).
  void View(const DLTensor& src, PyObject* owner, uint64_t flags) {
    InitLayout(InplaceArrayBegin<int64_t>(this),
               IntArrayView(src.shape, static_cast<size_t>(src.ndim)), src.strides);
    data = src.data;
    device = src.device;
    dtype = src.dtype;
    byte_offset = src.byte_offset;
    dlpack_flags_ = flags;
    borrowed_ = owner;
  }
  /// The Tensor outlives the call (someone kept it): it holds the Python tensor from now on.
  /// GIL held; the caller's argument is still alive.
  void TakeOwner() {
    owner_ = borrowed_;
    Py_INCREF(owner_);
  }

 private:
  int32_t room_;
  PyObject* borrowed_ = nullptr;
  PyObject* owner_ = nullptr;
};

/// The thread's Tensors that no callee kept, for reuse (each holds one reference, no owner).
struct OwnerTensorPool {
  static constexpr int kSize = 8;
  /// Dimensions every pooled Tensor has room for (an argument with more gets a Tensor of its own).
  static constexpr int32_t kRoom = 6;
  PyOwnerTensorObj* free[kSize];
  int count = 0;
  ~OwnerTensorPool() {  // thread exit: no owner is held, so no Python runs here
    while (count > 0) KFFIObjectDecRef(static_cast<Object*>(free[--count]));
  }
};
thread_local OwnerTensorPool t_owner_pool;

PyOwnerTensorObj* TakeOwnerTensor(OwnerTensorPool& pool, int32_t ndim) {
  if (ndim <= OwnerTensorPool::kRoom && pool.count > 0) return pool.free[--pool.count];
  const int32_t room = ndim > OwnerTensorPool::kRoom ? ndim : OwnerTensorPool::kRoom;
  return static_cast<PyOwnerTensorObj*>(static_cast<Object*>(details::ObjectUnsafe::MoveToHandle(
      make_inplace_array_object<PyOwnerTensorObj, int64_t>(2 * static_cast<size_t>(room), room))));
}

/// Strong count 1 with the one weak reference all strong ones share: nobody else can reach it.
constexpr uint64_t kOnlyReference = (uint64_t{1} << 32) | 1;

/// The end of a call for a Tensor OwnTensorArguments made: back to the pool when the callee kept
/// no reference, else it takes its own reference to the Python tensor and drops the call's.
void ReleaseOwnerTensor(OwnerTensorPool& pool, KFFIObject* obj) {
  auto* t = static_cast<PyOwnerTensorObj*>(static_cast<Object*>(static_cast<void*>(obj)));
  if (__atomic_load_n(&obj->combined_ref_count, __ATOMIC_ACQUIRE) == kOnlyReference) {
    if (t->room() == OwnerTensorPool::kRoom && pool.count < OwnerTensorPool::kSize) {
      pool.free[pool.count++] = t;
      return;
    }
  } else {
    t->TakeOwner();
  }
  ReleaseObject(obj);
}

inline bool TakesOwnedTensor(uint64_t mask, Py_ssize_t index) {
  return ((mask >> (index < 63 ? index : 63)) & 1) != 0;
}

}  // namespace

int InitTvmBridge(PyObject* module) { return PyModule_AddFunctions(module, kTvmBridgeMethods); }

int ForeignClass(const KFFIObject* obj, PyObject** out) {
  *out = nullptr;
  const TvmPythonApi* api = Api();
  const int32_t index = obj->type_index;
  if (api == nullptr || index < kKFFIDynObjectBegin) return 0;
  {
    std::lock_guard<std::mutex> lock(g_foreign_mutex);
    if (g_foreign_classes != nullptr) {
      auto it = g_foreign_classes->find(index);
      if (it != g_foreign_classes->end()) {
        *out = it->second != Py_None ? it->second : nullptr;
        return 0;
      }
    }
  }
  const TvmForeignTypeDesc* desc = nullptr;
  int rc = api->foreign_type_desc(const_cast<KFFIObject*>(obj), &desc);
  if (rc <= 0) {
    if (rc < 0) DropKffiError();
    StoreForeignClass(index, Py_None);
    return 0;
  }
  NoteDesc(desc);
  // A class only for types under Object (kffi's classes of other static ancestors stay) with
  // something to show.
  if (g_foreign_class_hook == nullptr || desc->static_ancestor != kKFFIObject ||
      (desc->num_fields == 0 && desc->num_methods == 0 && !desc->structural)) {
    StoreForeignClass(index, Py_None);
    return 0;
  }
  PyObject* cls = PyObject_CallFunction(g_foreign_class_hook, "i", static_cast<int>(index));
  if (cls == nullptr) return -1;
  Py_DECREF(cls);  // the hook registered it (TvmForeignInstall): the table holds a reference
  std::lock_guard<std::mutex> lock(g_foreign_mutex);
  auto it = g_foreign_classes->find(index);
  *out = it != g_foreign_classes->end() && it->second != Py_None ? it->second : nullptr;
  return 0;
}

bool ForeignType(const KFFIObject* obj, KFFIByteArray* key, int32_t* static_ancestor) {
  const int32_t index = obj->type_index;
  if (index < kKFFIDynObjectBegin && KFFIGetTypeInfo(index) != nullptr) return false;
  const TvmPythonApi* api = Api();
  return api != nullptr &&
         api->foreign_type_info(const_cast<KFFIObject*>(obj), key, static_ancestor) == 1;
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
  const TvmPythonApi* api = Api();
  KFFIObjectHandle h = reinterpret_cast<PyObjectHandle*>(self)->handle;
  if (api == nullptr || h == nullptr || !PyUnicode_Check(name) ||
      static_cast<KFFIObject*>(h)->type_index < kKFFIDynObjectBegin) {
    return 0;
  }
  Py_ssize_t size = 0;
  const char* utf8 = PyUnicode_AsUTF8AndSize(name, &size);
  if (utf8 == nullptr) return -1;
  if (value == nullptr) {
    KFFIAny got;
    int rc = api->foreign_field(h, utf8, static_cast<size_t>(size), nullptr, &got);
    if (rc != 1) return rc < 0 ? (RaiseFromKFFIError(-1), -1) : 0;
    *out = AnyToPy(&got, nullptr);
    return *out != nullptr ? 1 : -1;
  }
  KFFIAny v;
  if (PyToOwnedAny(value, &v) != 0) return -1;
  int rc = api->foreign_field(h, utf8, static_cast<size_t>(size), &v, nullptr);
  if (v.type_index >= kKFFIStaticObjectBegin) ReleaseObject(v.v_obj);
  if (rc < 0) return (RaiseFromKFFIError(-1), -1);
  return rc;
}

PyObject* ForeignRepr(PyObject* self) {
  const TvmPythonApi* api = Api();
  KFFIObjectHandle h = reinterpret_cast<PyObjectHandle*>(self)->handle;
  if (api == nullptr || h == nullptr ||
      static_cast<KFFIObject*>(h)->type_index < kKFFIDynObjectBegin) {
    return nullptr;
  }
  std::string body;
  for (int32_t i = 0;; ++i) {
    KFFIByteArray n{nullptr, 0};
    int rc = api->foreign_field_name(h, i, &n);
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
  const TvmPythonApi* api = Api();
  return api != nullptr && api->function_owned_tensor_args(func, &mask) == 1 ? mask : 0;
}

void OwnedArguments::Release() {
  OwnerTensorPool& pool = t_owner_pool;  // one thread-local lookup per call
  for (uint64_t m = made_; m != 0; m &= m - 1) {
    ReleaseOwnerTensor(pool, packed_[__builtin_ctzll(m)].v_obj);
  }
  made_ = 0;
}

int OwnTensorArguments(uint64_t mask, PyObject* const* args, Py_ssize_t nargs, KFFIAny* packed,
                       CallContext* ctx, OwnedArguments* owned) {
  owned->Bind(packed);
  OwnerTensorPool& pool = t_owner_pool;
  for (Py_ssize_t i = 0; i < nargs; ++i) {
    if (packed[i].type_index != kKFFIDLTensorPtr || !TakesOwnedTensor(mask, i)) continue;
    const DLTensor* view = static_cast<const DLTensor*>(packed[i].v_ptr);
    const uint32_t flags = packed[i].tensor_flags;
    PyOwnerTensorObj* t;
    try {
      t = TakeOwnerTensor(pool, view->ndim);
    }
    KFFI_CATCH_ALL { return (RaiseFromCppException(), -1); }
    t->View(*view, args[i],
            (flags & kKFFITensorFlagReadOnly) != 0 ? uint64_t{DLPACK_FLAG_BITMASK_READ_ONLY} : 0);
    details::SetObject(&packed[i], details::ObjectUnsafe::Header(t));
    packed[i].tensor_flags = flags;
    if (!owned->Note(i)) {
      t->TakeOwner();  // the context releases it as any object, whoever else holds it
      ctx->KeepAlive(packed[i]);
    }
  }
  return 0;
}

}  // namespace pyglue
}  // namespace kffi
