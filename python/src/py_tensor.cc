// python/src/py_tensor.cc: tensors in and out: the DLPack C exchange API (PyTorch), a direct
// NumPy path, the __dlpack__ protocol, and kffi.Tensor as a DLPack producer.
#include <cstdlib>
#include <cstring>
#include <unordered_map>

#include "py_common.h"

namespace kffi {
namespace py {

namespace {

enum class TensorKind : uint8_t { kNone, kExchange, kNumpy, kDLPack };

struct TensorTypeInfo {
  TensorKind kind;
  const DLPackExchangeAPI* api;
};

std::unordered_map<PyTypeObject*, TensorTypeInfo>* g_tensor_types = nullptr;

// The public layout of a NumPy array object and of its dtype's leading fields (stable across
// NumPy 1.x and 2.x for the fields read here).
struct NumpyArrayFields {
  PyObject_HEAD char* data;
  int nd;
  Py_intptr_t* dimensions;
  Py_intptr_t* strides;
  PyObject* base;
  PyObject* descr;
  int flags;
};
struct NumpyDescrHead {
  PyObject_HEAD PyTypeObject* typeobj;
  char kind;
  char type;
  char byteorder;
  char former_flags;
  int type_num;
};
constexpr int kNumpyWriteable = 0x0400;

/// DLPack dtype of a NumPy type number; false when there is none (fall back to __dlpack__).
bool NumpyDType(int type_num, DLDataType* out, int* itemsize) {
  static const struct {
    uint8_t code, bits;
  } kTable[] = {
      {kDLBool, 8},   {kDLInt, 8},  {kDLUInt, 8},     {kDLInt, 16},
      {kDLUInt, 16},  {kDLInt, 32}, {kDLUInt, 32},    {kDLInt, 64},
      {kDLUInt, 64},  {kDLInt, 64}, {kDLUInt, 64},    {kDLFloat, 32},
      {kDLFloat, 64}, {0, 0},       {kDLComplex, 64}, {kDLComplex, 128},
  };
  if (type_num == 23) {  // NPY_HALF
    *out = DLDataType{kDLFloat, 16, 1};
    *itemsize = 2;
    return true;
  }
  if (type_num < 0 || type_num >= static_cast<int>(sizeof(kTable) / sizeof(kTable[0])) ||
      kTable[type_num].bits == 0) {
    return false;
  }
  // NPY_LONG/ULONG are 64-bit on LP64 platforms, which are the ones this path supports.
  static_assert(sizeof(long) == 8, "NumPy fast path assumes LP64");  // NOLINT
  *out = DLDataType{kTable[type_num].code, kTable[type_num].bits, 1};
  *itemsize = kTable[type_num].bits / 8;
  return true;
}

bool IsNumpyArrayType(PyTypeObject* tp) {
  PyObject* mro = tp->tp_mro;
  if (mro == nullptr || !PyTuple_Check(mro)) return false;
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(mro); ++i) {
    auto* base = reinterpret_cast<PyTypeObject*>(PyTuple_GET_ITEM(mro, i));
    if (std::strcmp(base->tp_name, "numpy.ndarray") == 0) {
      return base->tp_basicsize >= static_cast<Py_ssize_t>(sizeof(NumpyArrayFields));
    }
  }
  return false;
}

const DLPackExchangeAPI* ExchangeAPIOf(PyTypeObject* tp) {
  PyObject* cap =
      PyObject_GetAttrString(reinterpret_cast<PyObject*>(tp), "__dlpack_c_exchange_api__");
  if (cap == nullptr) {
    PyErr_Clear();
    return nullptr;
  }
  const DLPackExchangeAPI* api = nullptr;
  if (PyCapsule_IsValid(cap, "dlpack_exchange_api")) {
    api = static_cast<const DLPackExchangeAPI*>(PyCapsule_GetPointer(cap, "dlpack_exchange_api"));
    if (api != nullptr && api->header.version.major != DLPACK_MAJOR_VERSION) api = nullptr;
  }
  Py_DECREF(cap);  // the capsule lives on the type, which the cache keeps alive
  return api;
}

// The last type classified, answered without hashing (entries are never removed, and the map
// keeps the type alive).
PyTypeObject* g_last_tensor_type = nullptr;
TensorTypeInfo g_last_tensor_info{TensorKind::kNone, nullptr};

TensorTypeInfo ClassifyNew(PyTypeObject* tp);

inline TensorTypeInfo Classify(PyTypeObject* tp) {
  if (tp == g_last_tensor_type) return g_last_tensor_info;
  if (g_tensor_types == nullptr) {
    g_tensor_types = new std::unordered_map<PyTypeObject*, TensorTypeInfo>();
  }
  auto it = g_tensor_types->find(tp);
  TensorTypeInfo info = it != g_tensor_types->end() ? it->second : ClassifyNew(tp);
  g_last_tensor_type = tp;
  g_last_tensor_info = info;
  return info;
}

TensorTypeInfo ClassifyNew(PyTypeObject* tp) {
  TensorTypeInfo info{TensorKind::kNone, nullptr};
  if (const DLPackExchangeAPI* api = ExchangeAPIOf(tp)) {
    info = {TensorKind::kExchange, api};
  } else if (IsNumpyArrayType(tp)) {
    info = {TensorKind::kNumpy, nullptr};
  } else if (PyObject_HasAttrString(reinterpret_cast<PyObject*>(tp), "__dlpack__")) {
    info = {TensorKind::kDLPack, nullptr};
  }
  Py_INCREF(tp);
  g_tensor_types->emplace(tp, info);
  return info;
}

void DLPackCapsuleDeleter(PyObject* cap) {
  if (PyCapsule_IsValid(cap, "dltensor")) {
    auto* mt = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(cap, "dltensor"));
    if (mt != nullptr && mt->deleter != nullptr) mt->deleter(mt);
  }
}

void DLPackVersionedCapsuleDeleter(PyObject* cap) {
  if (PyCapsule_IsValid(cap, "dltensor_versioned")) {
    auto* mt =
        static_cast<DLManagedTensorVersioned*>(PyCapsule_GetPointer(cap, "dltensor_versioned"));
    if (mt != nullptr && mt->deleter != nullptr) mt->deleter(mt);
  }
}

/// Calls obj.__dlpack__() (asking for a versioned capsule first) and takes the tensor.
int ImportViaDLPackProtocol(PyObject* obj, KFFIObjectHandle* out) {
  PyRef method(PyObject_GetAttrString(obj, "__dlpack__"));
  if (!method) return -1;
  PyRef kwargs(
      Py_BuildValue("{s:(ii)}", "max_version", DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION));
  PyRef empty(PyTuple_New(0));
  PyRef cap(PyObject_Call(method.get(), empty.get(), kwargs.get()));
  if (!cap && PyErr_ExceptionMatches(PyExc_TypeError)) {
    // A producer from before DLPack 1.0 does not know max_version.
    PyErr_Clear();
    cap = PyRef(PyObject_CallNoArgs(method.get()));
  }
  if (!cap) return -1;
  if (PyCapsule_IsValid(cap.get(), "dltensor_versioned")) {
    auto* mt = static_cast<DLManagedTensorVersioned*>(
        PyCapsule_GetPointer(cap.get(), "dltensor_versioned"));
    // Ownership moves to kffi even on failure (the runtime calls the deleter then).
    PyCapsule_SetName(cap.get(), "used_dltensor_versioned");
    if (KFFITensorFromDLPackVersioned(mt, 0, 0, out) != 0) return (RaiseFromKFFIError(-1), -1);
    return 0;
  }
  if (PyCapsule_IsValid(cap.get(), "dltensor")) {
    auto* mt = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(cap.get(), "dltensor"));
    PyCapsule_SetName(cap.get(), "used_dltensor");
    if (KFFITensorFromDLPack(mt, 0, 0, out) != 0) return (RaiseFromKFFIError(-1), -1);
    return 0;
  }
  PyErr_Format(PyExc_TypeError, "%s.__dlpack__() did not return a DLPack capsule",
               Py_TYPE(obj)->tp_name);
  return -1;
}

/// Fills a borrowed DLTensor straight from a NumPy array's fields; false to fall back.
bool FillFromNumpy(PyObject* obj, DLTensor* t, CallContext* ctx) {
  auto* a = reinterpret_cast<NumpyArrayFields*>(obj);
  // A borrowed DLTensor* has no flags: a read-only array goes through __dlpack__, whose tensor
  // carries DLPack's read-only flag (kffi::Tensor::is_read_only()).
  if ((a->flags & kNumpyWriteable) == 0) return false;
  auto* d = reinterpret_cast<NumpyDescrHead*>(a->descr);
  if (d == nullptr || d->byteorder == '>') return false;  // not native byte order
  int itemsize = 0;
  if (!NumpyDType(d->type_num, &t->dtype, &itemsize)) return false;
  int64_t* strides = ctx->NewInt64Buffer(static_cast<size_t>(a->nd));
  // Every item size in the table is a power of two: mask and shift instead of dividing.
  const int64_t mask = itemsize - 1;
  if ((itemsize & mask) != 0) return false;
  const int shift = __builtin_ctz(static_cast<unsigned>(itemsize));
  for (int i = 0; i < a->nd; ++i) {
    const int64_t bytes = a->strides[i];
    if ((bytes & mask) != 0) return false;  // DLPack strides count elements
    strides[i] = bytes >> shift;            // exact: a multiple of itemsize (sign kept)
  }
  t->data = a->data;
  t->device = DLDevice{kDLCPU, 0};
  t->ndim = a->nd;
  static_assert(sizeof(Py_intptr_t) == sizeof(int64_t), "64-bit platforms only");
  t->shape = reinterpret_cast<int64_t*>(a->dimensions);
  t->strides = strides;
  t->byte_offset = 0;
  return true;
}

void SetTensorView(KFFIAny* out, DLTensor* t) {
  out->type_index = kKFFIDLTensorPtr;
  out->zero_padding = 0;
  out->v_ptr = t;
}

void SetObject(KFFIAny* out, KFFIObjectHandle h) {
  out->type_index = kKFFITensor;
  out->zero_padding = 0;
  out->v_obj = static_cast<KFFIObject*>(h);
}

}  // namespace

bool IsTensorType(PyTypeObject* tp) { return Classify(tp).kind != TensorKind::kNone; }

int ConvertTensorArg(PyObject* obj, PyTypeObject* tp, KFFIAny* out, CallContext* ctx,
                     Py_ssize_t index) {
  TensorTypeInfo info = Classify(tp);
  switch (info.kind) {
    case TensorKind::kExchange: {
      const DLPackExchangeAPI* api = info.api;
      ctx->NoteExchangeAPI(api);
      if (api->dltensor_from_py_object_no_sync != nullptr) {
        DLTensor* t = ctx->NewTensorSlot();
        if (api->dltensor_from_py_object_no_sync(obj, t) != 0) return -1;
        ctx->NoteDevice(t->device, api);
        ctx->NoteTensorSource(t, obj);
        SetTensorView(out, t);
        return 1;
      }
      DLManagedTensorVersioned* mt = nullptr;
      if (api->managed_tensor_from_py_object_no_sync(obj, &mt) != 0) return -1;
      KFFIObjectHandle h = nullptr;
      if (KFFITensorFromDLPackVersioned(mt, 0, 0, &h) != 0) return (RaiseFromKFFIError(-1), -1);
      SetObject(out, h);
      ctx->KeepAlive(*out);
      ctx->NoteDevice(KFFITensorGetDLTensorPtr(h)->device, api);
      ctx->NoteTensorSource(KFFITensorGetDLTensorPtr(h), obj);
      return 1;
    }
    case TensorKind::kNumpy: {
      DLTensor* t = ctx->NewTensorSlot();
      if (FillFromNumpy(obj, t, ctx)) {
        ctx->NoteTensorSource(t, obj);
        SetTensorView(out, t);
        return 1;
      }
      break;  // unusual dtype or byte order: let NumPy's own __dlpack__ decide
    }
    case TensorKind::kDLPack:
      break;
    case TensorKind::kNone:
    default:
      return 0;
  }
  KFFIObjectHandle h = nullptr;
  if (ImportViaDLPackProtocol(obj, &h) != 0) {
    if (index < 0) return -1;  // inside a container: no argument position to name
    // Say which argument it was; keep the producer's exception type.
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    PyRef msg(PyObject_Str(value));
    PyErr_Format(type, "Argument #%zd (%s): %U", index, tp->tp_name, msg.get());
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(tb);
    return -1;
  }
  SetObject(out, h);
  ctx->KeepAlive(*out);
  ctx->NoteDevice(KFFITensorGetDLTensorPtr(h)->device, nullptr);
  ctx->NoteTensorSource(KFFITensorGetDLTensorPtr(h), obj);
  return 1;
}

int TensorToOwnedHandle(PyObject* obj, KFFIObjectHandle* out) {
  KFFIObjectHandle h = GetHandle(obj);
  if (h != nullptr && static_cast<KFFIObject*>(h)->type_index == kKFFITensor) {
    KFFIObjectIncRef(h);
    *out = h;
    return 0;
  }
  TensorTypeInfo info = Classify(Py_TYPE(obj));
  if (info.kind == TensorKind::kExchange &&
      info.api->managed_tensor_from_py_object_no_sync != nullptr) {
    DLManagedTensorVersioned* mt = nullptr;
    if (info.api->managed_tensor_from_py_object_no_sync(obj, &mt) != 0) return -1;
    if (KFFITensorFromDLPackVersioned(mt, 0, 0, out) != 0) return (RaiseFromKFFIError(-1), -1);
    return 0;
  }
  if (info.kind == TensorKind::kNone) {
    PyErr_Format(PyExc_TypeError, "Expected a tensor (an object with __dlpack__), got %s",
                 Py_TYPE(obj)->tp_name);
    return -1;
  }
  return ImportViaDLPackProtocol(obj, out);
}

PyObject* WrapTensor(KFFIObjectHandle owned, const CallContext* ctx) {
  if (ctx != nullptr && ctx->has_tensor_sources()) {
    // A tensor argument coming straight back (e.g. an echo): return the caller's own object.
    if (PyObject* src = ctx->FindTensorSource(KFFITensorGetDLTensorPtr(owned))) {
      KFFIObjectDecRef(owned);
      Py_INCREF(src);
      return src;
    }
  }
  if (ctx != nullptr && ctx->api != nullptr &&
      ctx->api->managed_tensor_to_py_object_no_sync != nullptr) {
    // The inputs were framework tensors: give back the framework's tensor type.
    DLManagedTensorVersioned* mt = nullptr;
    int rc = KFFITensorToDLPackVersioned(owned, &mt);
    KFFIObjectDecRef(owned);
    if (rc != 0) return RaiseFromKFFIError(-1);
    void* py = nullptr;
    if (ctx->api->managed_tensor_to_py_object_no_sync(mt, &py) != 0) return nullptr;
    return static_cast<PyObject*>(py);
  }
  PyObject* wrapped = WrapObject(owned);
  if (wrapped != nullptr && ctx != nullptr && ctx->has_tensor_sources()) {
    // The result may view an argument's memory without owning it: keep the arguments alive.
    PyRef sources(ctx->TensorSourcesTuple());
    if (!sources || PyObject_SetAttrString(wrapped, "_kffi_keepalive", sources.get()) != 0) {
      Py_DECREF(wrapped);
      return nullptr;
    }
  }
  return wrapped;
}

// ---- kffi.Tensor helpers exposed to python/kffi/tensor.py --------------------------------------

namespace {
KFFIObjectHandle TensorHandleArg(PyObject* obj) {
  KFFIObjectHandle h = GetHandle(obj);
  if (h == nullptr && RaiseIfReleased(obj)) return nullptr;
  if (h == nullptr || static_cast<KFFIObject*>(h)->type_index != kKFFITensor) {
    PyErr_Format(PyExc_TypeError, "expected a kffi.Tensor, got %s", Py_TYPE(obj)->tp_name);
    return nullptr;
  }
  return h;
}

PyObject* Int64Tuple(const int64_t* v, int n) {
  PyObject* t = PyTuple_New(n);
  if (t == nullptr) return nullptr;
  for (int i = 0; i < n; ++i) PyTuple_SET_ITEM(t, i, PyLong_FromLongLong(v[i]));
  return t;
}
}  // namespace

/// _tensor_info(t) -> (data_ptr, shape, strides, (code, bits, lanes), (type, id), byte_offset)
PyObject* TensorInfo(PyObject*, PyObject* obj) {
  KFFIObjectHandle h = TensorHandleArg(obj);
  if (h == nullptr) return nullptr;
  DLTensor* t = KFFITensorGetDLTensorPtr(h);
  PyRef shape(Int64Tuple(t->shape, t->ndim));
  PyRef strides;
  if (t->strides != nullptr) {
    strides = PyRef(Int64Tuple(t->strides, t->ndim));
  } else {
    std::vector<int64_t> s(static_cast<size_t>(t->ndim));
    int64_t acc = 1;
    for (int i = t->ndim - 1; i >= 0; --i) {
      s[static_cast<size_t>(i)] = acc;
      acc *= t->shape[i];
    }
    strides = PyRef(Int64Tuple(s.data(), t->ndim));
  }
  return Py_BuildValue("(NOO(iii)(ii)K)", PyLong_FromVoidPtr(t->data), shape.get(), strides.get(),
                       t->dtype.code, t->dtype.bits, t->dtype.lanes,
                       static_cast<int>(t->device.device_type), t->device.device_id,
                       static_cast<unsigned long long>(t->byte_offset));  // NOLINT
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

/// _from_dlpack(obj) -> kffi.Tensor owning a reference to obj's data (zero-copy).
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
  auto* holder = new (std::nothrow) Holder();
  if (holder == nullptr) {
    set_error(error_ctx, "MemoryError", "out of memory");
    return -1;
  }
  holder->shape.assign(prototype->shape, prototype->shape + prototype->ndim);
  size_t n = 1;
  for (int64_t d : holder->shape) n *= static_cast<size_t>(d);
  size_t bytes = (n * prototype->dtype.bits * prototype->dtype.lanes + 7) / 8;
  void* data = std::aligned_alloc(64, ((bytes + 63) / 64) * 64 + 64);
  if (data == nullptr) {
    delete holder;
    set_error(error_ctx, "MemoryError", "out of memory");
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
  return PyModule_AddObject(module, "_tensor_exchange_api", cap);
}

}  // namespace py
}  // namespace kffi
