// python/src/py_types.cc: the argument-conversion table: what kind of value each Python type is,
// decided once per type (partly by the Python hook kffi._types._classify) and looked up without
// a lock on every call.
// SPDX-License-Identifier: Apache-2.0
#include <cstring>
#include <new>

#include "py_common.h"

namespace kffi {
namespace pyglue {

State* g_state = nullptr;

void State::SetHook(Hook h, PyObject* value) {
  if (hooks[h] != nullptr) retired.push_back(hooks[h]);
  hooks[h] = value;
}

// ---- TypeTable -------------------------------------------------------------------------------

TypeTable::Table* TypeTable::NewTable(size_t capacity) {
  void* block = ::operator new(sizeof(Table) + capacity * sizeof(Slot));
  auto* t = new (block) Table{capacity - 1, 0};
  for (size_t i = 0; i < capacity; ++i) {
    new (&t->slots()[i]) Slot();
    t->slots()[i].type.store(nullptr, std::memory_order_relaxed);
    t->slots()[i].info = nullptr;
  }
  return t;
}

void TypeTable::FreeTable(Table* t) { ::operator delete(t); }

TypeTable::TypeTable() : table_(NewTable(64)) { last_.store(&none_, std::memory_order_release); }

TypeTable::~TypeTable() {
  Clear();
  FreeTable(table_.load(std::memory_order_relaxed));
}

const TypeInfo* TypeTable::Probe(PyTypeObject* tp) const {
  Table* t = table_.load(std::memory_order_acquire);
  size_t i = Hash(tp) & t->mask;
  for (;;) {
    const Slot& slot = t->slots()[i];
    PyTypeObject* k = slot.type.load(std::memory_order_acquire);
    if (k == tp) {
      last_.store(&slot, std::memory_order_release);
      return slot.info;
    }
    if (k == nullptr) return nullptr;
    i = (i + 1) & t->mask;
  }
}

const TypeInfo* TypeTable::Insert(PyTypeObject* tp, const TypeInfo& info) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (const TypeInfo* found = Find(tp)) return found;  // another thread got there first
  Table* t = table_.load(std::memory_order_relaxed);
  if ((t->used + 1) * 2 > t->mask + 1) {
    // Grow: readers keep using the old table until they see the new one; it stays allocated.
    Table* bigger = NewTable((t->mask + 1) * 2);
    for (size_t i = 0; i <= t->mask; ++i) {
      PyTypeObject* k = t->slots()[i].type.load(std::memory_order_relaxed);
      if (k == nullptr) continue;
      size_t j = Hash(k) & bigger->mask;
      while (bigger->slots()[j].type.load(std::memory_order_relaxed) != nullptr) {
        j = (j + 1) & bigger->mask;
      }
      bigger->slots()[j].info = t->slots()[i].info;
      bigger->slots()[j].type.store(k, std::memory_order_relaxed);
      ++bigger->used;
    }
    table_.store(bigger, std::memory_order_release);
    retired_.push_back(t);
    t = bigger;
  }
  auto* stored = new TypeInfo(info);
  for (PyObject* o : {reinterpret_cast<PyObject*>(tp), stored->from_dlpack, stored->stream_hook}) {
    if (o == nullptr) continue;
    Py_INCREF(o);
    held_.push_back(o);
  }
  infos_.push_back(stored);
  size_t i = Hash(tp) & t->mask;
  while (t->slots()[i].type.load(std::memory_order_relaxed) != nullptr) i = (i + 1) & t->mask;
  t->slots()[i].info = stored;
  t->slots()[i].type.store(tp, std::memory_order_release);  // publishes info with it
  ++t->used;
  return stored;
}

void TypeTable::Reset() {
  std::lock_guard<std::mutex> lock(mutex_);
  // Readers may still be in the old table: it and its entries stay allocated until Clear.
  retired_.push_back(table_.load(std::memory_order_relaxed));
  table_.store(NewTable(64), std::memory_order_release);
  last_.store(&none_, std::memory_order_release);
}

void TypeTable::Clear() {
  std::vector<PyObject*> drop;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    last_.store(&none_, std::memory_order_release);
    Table* t = table_.load(std::memory_order_relaxed);
    for (size_t i = 0; i <= t->mask; ++i) {
      t->slots()[i].type.store(nullptr, std::memory_order_relaxed);
      t->slots()[i].info = nullptr;
    }
    t->used = 0;
    drop.swap(held_);
    for (TypeInfo* info : infos_) delete info;
    infos_.clear();
    for (Table* old : retired_) FreeTable(old);
    retired_.clear();
  }
  // Released outside the lock: a type's deallocation may run Python code.
  for (PyObject* o : drop) Py_DECREF(o);
}

int TypeTable::Traverse(visitproc visit, void* arg) const {
  for (PyObject* o : held_) Py_VISIT(o);
  return 0;
}

// ---- classification --------------------------------------------------------------------------

namespace {

// The API in a "dlpack_exchange_api" capsule of this DLPack major version, or NULL.
const DLPackExchangeAPI* ApiInCapsule(PyObject* cap) {
  if (!PyCapsule_IsValid(cap, "dlpack_exchange_api")) return nullptr;
  auto* api =
      static_cast<const DLPackExchangeAPI*>(PyCapsule_GetPointer(cap, "dlpack_exchange_api"));
  if (api == nullptr || api->header.version.major != DLPACK_MAJOR_VERSION) return nullptr;
  return api;
}

bool ImportsTensors(const DLPackExchangeAPI* api) {
  return api->dltensor_from_py_object_no_sync != nullptr ||
         api->managed_tensor_from_py_object_no_sync != nullptr;
}

const DLPackExchangeAPI* ExchangeAPIOf(PyTypeObject* tp) {
  PyRef cap(PyObject_GetAttrString(reinterpret_cast<PyObject*>(tp), "__dlpack_c_exchange_api__"));
  if (!cap) {
    PyErr_Clear();
    return nullptr;
  }
  // The capsule lives on the type, which the table keeps alive.
  const DLPackExchangeAPI* api = ApiInCapsule(cap.get());
  if (api == nullptr || !ImportsTensors(api)) return nullptr;
  // exchange_to is stored before exchange_from (OverrideExchangeAPI).
  if (api == g_state->exchange_from.load(std::memory_order_acquire)) {
    return g_state->exchange_to.load(std::memory_order_relaxed);
  }
  return api;
}

const DLPackExchangeAPI* ExchangeAPIOfCapsule(PyObject* cap, const char* what) {
  const DLPackExchangeAPI* api = ApiInCapsule(cap);
  if (api == nullptr) {
    PyErr_Format(PyExc_TypeError,
                 "_override_exchange_api: %s is a \"dlpack_exchange_api\" capsule of DLPack %d, "
                 "got %.200s",
                 what, DLPACK_MAJOR_VERSION, Py_TYPE(cap)->tp_name);
  }
  return api;
}

bool IsNumpyArrayType(PyTypeObject* tp) {
  PyObject* mro = tp->tp_mro;
  if (mro == nullptr || !PyTuple_Check(mro)) return false;
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(mro); ++i) {
    auto* base = reinterpret_cast<PyTypeObject*>(PyTuple_GET_ITEM(mro, i));
    if (std::strcmp(base->tp_name, "numpy.ndarray") == 0) return true;
  }
  return false;
}

/// Makes the TorchRefs of torch._C (a new reference); NULL, with no error set, when it lacks them.
TorchRefs* MakeTorchRefs(PyObject* torch_c) {
  PyRef base(PyObject_GetAttrString(torch_c, "TensorBase"));
  PyRef is_conj(base ? PyObject_GetAttrString(base.get(), "is_conj") : nullptr);
  PyRef is_neg(is_conj ? PyObject_GetAttrString(base.get(), "is_neg") : nullptr);
  PyRef dtype(is_neg ? PyObject_GetAttrString(base.get(), "dtype") : nullptr);  // descriptor
  PyRef is_complex(dtype ? PyUnicode_InternFromString("is_complex") : nullptr);
  if (!is_complex || !PyType_Check(base.get()) || Py_TYPE(dtype.get())->tp_descr_get == nullptr) {
    PyErr_Clear();
    return nullptr;
  }
  return new TorchRefs{base.release(), is_conj.release(), is_neg.release(), dtype.release(),
                       is_complex.release()};
}

struct KindName {
  const char* name;
  Kind kind;
};
constexpr KindName kKindNames[] = {
    {"dtype", Kind::kDType},         {"device", Kind::kDevice},
    {"voidp", Kind::kVoidPtr},       {"index", Kind::kIndex},
    {"float", Kind::kFloatLike},     {"str", Kind::kStr},
    {"bytes", Kind::kBytes},         {"sequence", Kind::kSequence},
    {"mapping", Kind::kMapping},     {"callable", Kind::kCallable},
    {"stream", Kind::kStream},       {"jax_tracer", Kind::kJaxTracer},
    {"tensor", Kind::kDLPackTensor}, {"record", Kind::kRecord},
};

/// Reads the classify hook's answer (kind, flags, from_dlpack, stream_hook) into info.
void ReadHookAnswer(PyObject* r, TypeInfo* info) {
  if (!PyTuple_Check(r) || PyTuple_GET_SIZE(r) != 4) return;
  const char* s =
      PyUnicode_Check(PyTuple_GET_ITEM(r, 0)) ? PyUnicode_AsUTF8(PyTuple_GET_ITEM(r, 0)) : nullptr;
  if (s == nullptr) return;
  for (const KindName& kn : kKindNames) {
    if (std::strcmp(kn.name, s) == 0) info->kind = kn.kind;
  }
  long flags = PyLong_Check(PyTuple_GET_ITEM(r, 1)) ? PyLong_AsLong(PyTuple_GET_ITEM(r, 1)) : 0;
  // What the converter derives itself (kTypeTorchImportRefusesLazyViews) is not the hook's to say.
  info->flags = static_cast<uint8_t>(flags & (kTypeReadOnly | kTypeTorch));
  PyObject* from = PyTuple_GET_ITEM(r, 2);
  PyObject* stream = PyTuple_GET_ITEM(r, 3);
  info->from_dlpack = from != Py_None ? from : nullptr;
  info->stream_hook = stream != Py_None ? stream : nullptr;
}

/// Decides the entry of a type seen for the first time (may run Python code: the hook).
TypeInfo Classify(PyTypeObject* tp, PyRef* answer) {
  TypeInfo info;
  if (PyType_IsSubtype(tp, g_state->object_type)) {
    info.kind = Kind::kObject;
    return info;
  }
  if (PyObject* hook = g_state->hooks[kHookClassify]) {
    *answer = PyRef(PyObject_CallOneArg(hook, reinterpret_cast<PyObject*>(tp)));
    if (*answer) ReadHookAnswer(answer->get(), &info);
    if (PyErr_Occurred()) PyErr_Clear();
  }
  if (info.kind == Kind::kDLPackTensor) {
    // torch's tensors are the subclasses of torch._C.TensorBase, wherever they are defined (the
    // hook says the same; the lazy-view checks need this very class).
    const TorchRefs* torch = TorchRefsOf();
    const bool is_torch = torch != nullptr &&
                          PyType_IsSubtype(tp, reinterpret_cast<PyTypeObject*>(torch->tensor_base));
    info.flags =
        static_cast<uint8_t>(is_torch ? info.flags | kTypeTorch : info.flags & ~kTypeTorch);
    // Which tensor path: the exchange API, NumPy's fields, or the __dlpack__ protocol.
    if (const DLPackExchangeAPI* api = ExchangeAPIOf(tp)) {
      info.kind = Kind::kExchangeTensor;
      info.api = api;
      // OverrideExchangeAPI stores the reader before the APIs, and reclassifies after.
      if (is_torch && api == g_state->exchange_to.load(std::memory_order_acquire) &&
          g_state->torch_lazy_bits.load(std::memory_order_acquire) != nullptr) {
        info.flags |= kTypeTorchImportRefusesLazyViews;
      }
    } else if (IsNumpyArrayType(tp)) {
      info.kind = Kind::kNumpyTensor;
    }
  }
  if (info.kind == Kind::kOpaque && g_state->hooks[kHookClassify] == nullptr) {
    // Before kffi/_types.py installed its hook (only _core's own tests get here).
    if (PyType_IsSubtype(tp, &PyLong_Type))
      info.kind = Kind::kIndex;
    else if (PyType_IsSubtype(tp, &PyFloat_Type))
      info.kind = Kind::kFloatLike;
    else if (PyType_IsSubtype(tp, &PyUnicode_Type))
      info.kind = Kind::kStr;
    else if (PyType_IsSubtype(tp, &PyTuple_Type) || PyType_IsSubtype(tp, &PyList_Type))
      info.kind = Kind::kSequence;
    else if (PyType_IsSubtype(tp, &PyDict_Type))
      info.kind = Kind::kMapping;
  }
  return info;
}

void InsertBuiltins(TypeTable* table) {
  const std::pair<PyTypeObject*, Kind> builtins[] = {
      {&PyLong_Type, Kind::kInt},        {&PyFloat_Type, Kind::kFloat},
      {&PyBool_Type, Kind::kBool},       {Py_TYPE(Py_None), Kind::kNone},
      {&PyUnicode_Type, Kind::kStr},     {&PyBytes_Type, Kind::kBytes},
      {&PyByteArray_Type, Kind::kBytes}, {&PyTuple_Type, Kind::kSequence},
      {&PyList_Type, Kind::kSequence},   {&PyDict_Type, Kind::kMapping},
  };
  for (const auto& b : builtins) {
    TypeInfo info;
    info.kind = b.second;
    table->Insert(b.first, info);
  }
}

// Empties the table (readers of the old one finish with its entries) for types to be classified
// again, with the builtins back in.
void Reclassify() {
  g_state->types.Reset();
  InsertBuiltins(&g_state->types);
}

}  // namespace

const TorchRefs* TorchRefsOf() {
  if (const TorchRefs* found = g_state->torch.load(std::memory_order_acquire)) return found;
  // Found, never imported: a torch tensor exists only once torch._C is loaded.
  PyRef name(PyUnicode_FromString("torch._C"));
  PyRef torch_c(name ? PyImport_GetModule(name.get()) : nullptr);
  if (!torch_c) {
    PyErr_Clear();
    return nullptr;
  }
  TorchRefs* made = MakeTorchRefs(torch_c.get());
  if (made == nullptr) return nullptr;
  TorchRefs* expected = nullptr;
  if (!g_state->torch.compare_exchange_strong(expected, made, std::memory_order_acq_rel)) {
    FreeTorchRefs(made);  // another thread stored the same first
    return expected;
  }
  return made;
}

void FreeTorchRefs(TorchRefs* refs) {
  if (refs == nullptr) return;
  Py_DECREF(refs->tensor_base);
  Py_DECREF(refs->is_conj);
  Py_DECREF(refs->is_neg);
  Py_DECREF(refs->dtype);
  Py_DECREF(refs->is_complex);
  delete refs;
}

const TypeInfo* TypeInfoOf(PyTypeObject* tp) {
  if (const TypeInfo* found = g_state->types.Find(tp)) return found;
  PyRef answer;  // keeps the hook's objects alive until Insert takes its references
  if (tp == &PyLong_Type || tp == Py_TYPE(Py_None)) InsertBuiltins(&g_state->types);
  if (const TypeInfo* found = g_state->types.Find(tp)) return found;
  TypeInfo info = Classify(tp, &answer);
  return g_state->types.Insert(tp, info);
}

/// _set_converter_hooks(classify, to_dtype, to_device, make_dtype, make_device, make_voidp,
/// to_stream)
PyObject* SetConverterHooks(PyObject*, PyObject* args) {
  PyObject* values[7];
  if (!PyArg_ParseTuple(args, "OOOOOOO", &values[0], &values[1], &values[2], &values[3], &values[4],
                        &values[5], &values[6])) {
    return nullptr;
  }
  const Hook slots[] = {kHookClassify,   kHookToDType,   kHookToDevice, kHookMakeDType,
                        kHookMakeDevice, kHookMakeVoidp, kHookToStream};
  for (int i = 0; i < 7; ++i) {
    Py_INCREF(values[i]);
    g_state->SetHook(slots[i], values[i]);
  }
  Reclassify();  // types classified before the hooks decide again
  Py_RETURN_NONE;
}

/// _override_exchange_api(original, replacement, lazy_view_bits=None): from now on, types whose
/// DLPack C exchange API is original convert their values through replacement (kffi.torch's
/// import of torch.Tensor without torch's Python-binding layer), and torch tensors' lazy-view
/// bits are read by the function of the "kffi.torch.lazy_view_bits" capsule (a LazyViewBitsFn)
/// instead of torch's methods; None asks torch's methods again. The capsules are kept for the
/// module's life.
PyObject* OverrideExchangeAPI(PyObject*, PyObject* args) {
  PyObject *original, *replacement, *lazy_bits = Py_None;
  if (!PyArg_ParseTuple(args, "OO|O", &original, &replacement, &lazy_bits)) return nullptr;
  LazyViewBitsFn reader = nullptr;
  if (lazy_bits != Py_None) {
    reader = PyCapsule_IsValid(lazy_bits, "kffi.torch.lazy_view_bits")
                 ? reinterpret_cast<LazyViewBitsFn>(
                       PyCapsule_GetPointer(lazy_bits, "kffi.torch.lazy_view_bits"))
                 : nullptr;
    if (reader == nullptr) {
      PyErr_Format(PyExc_TypeError,
                   "_override_exchange_api: lazy_view_bits is a \"kffi.torch.lazy_view_bits\" "
                   "capsule or None, got %.200s",
                   Py_TYPE(lazy_bits)->tp_name);
      return nullptr;
    }
  }
  const DLPackExchangeAPI* from = ExchangeAPIOfCapsule(original, "original");
  if (from == nullptr) return nullptr;
  const DLPackExchangeAPI* to = ExchangeAPIOfCapsule(replacement, "replacement");
  if (to == nullptr) return nullptr;
  if (!ImportsTensors(to)) {
    PyErr_SetString(PyExc_ValueError,
                    "_override_exchange_api: the replacement imports no tensors (both "
                    "dltensor_from_py_object_no_sync and managed_tensor_from_py_object_no_sync "
                    "are NULL)");
    return nullptr;
  }
  const DLPackExchangeAPI* current = g_state->exchange_from.load(std::memory_order_acquire);
  if (current != nullptr && current != from) {
    PyErr_SetString(PyExc_ValueError,
                    "_override_exchange_api: another framework's exchange API is already "
                    "overridden");
    return nullptr;
  }
  Py_INCREF(replacement);
  g_state->retired.push_back(replacement);
  if (reader != nullptr) {
    Py_INCREF(lazy_bits);
    g_state->retired.push_back(lazy_bits);
  }
  g_state->torch_lazy_bits.store(reader, std::memory_order_release);
  g_state->exchange_to.store(to, std::memory_order_relaxed);
  g_state->exchange_from.store(from, std::memory_order_release);
  Reclassify();  // torch.Tensor, if classified already, takes the replacement
  Py_RETURN_NONE;
}

}  // namespace pyglue
}  // namespace kffi
