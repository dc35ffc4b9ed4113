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
  for (PyObject* o : {reinterpret_cast<PyObject*>(tp), stored->from_dlpack, stored->stream_hook,
                      stored->explain_export}) {
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

/// Reads the classify hook's answer (kind, flags, from_dlpack, stream_hook, explain_export)
/// into info.
void ReadHookAnswer(PyObject* r, TypeInfo* info) {
  if (!PyTuple_Check(r) || PyTuple_GET_SIZE(r) != 5) return;
  const char* s =
      PyUnicode_Check(PyTuple_GET_ITEM(r, 0)) ? PyUnicode_AsUTF8(PyTuple_GET_ITEM(r, 0)) : nullptr;
  if (s == nullptr) return;
  for (const KindName& kn : kKindNames) {
    if (std::strcmp(kn.name, s) == 0) info->kind = kn.kind;
  }
  long flags = PyLong_Check(PyTuple_GET_ITEM(r, 1)) ? PyLong_AsLong(PyTuple_GET_ITEM(r, 1)) : 0;
  // What the converter derives itself (kTypeImportRefusesLazyViews) is not the hook's to say.
  info->flags = static_cast<uint8_t>(flags & (kTypeReadOnly | kTypeLazyViews));
  PyObject* from = PyTuple_GET_ITEM(r, 2);
  PyObject* stream = PyTuple_GET_ITEM(r, 3);
  PyObject* explain = PyTuple_GET_ITEM(r, 4);
  info->from_dlpack = from != Py_None ? from : nullptr;
  info->stream_hook = stream != Py_None ? stream : nullptr;
  info->explain_export = explain != Py_None ? explain : nullptr;
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
    // The hook's lazy-view flag holds for subclasses of the base class whose methods are asked
    // (torch._C.TensorBase, wherever a subclass is defined): those methods need this very class.
    const LazyViewMethods* lazy = LazyViewMethodsOf();
    const bool lazy_views =
        (info.flags & kTypeLazyViews) != 0 && lazy != nullptr &&
        PyType_IsSubtype(tp, reinterpret_cast<PyTypeObject*>(lazy->tensor_base));
    info.flags = static_cast<uint8_t>(lazy_views ? info.flags : info.flags & ~kTypeLazyViews);
    // Which tensor path: the exchange API, NumPy's fields, or the __dlpack__ protocol.
    if (const DLPackExchangeAPI* api = ExchangeAPIOf(tp)) {
      info.kind = Kind::kExchangeTensor;
      info.api = api;
      // OverrideExchangeAPI stores the reader before the APIs, and reclassifies after.
      if (lazy_views && api == g_state->exchange_to.load(std::memory_order_acquire) &&
          g_state->lazy_bits.load(std::memory_order_acquire) != nullptr) {
        info.flags |= kTypeImportRefusesLazyViews;
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

void FreeLazyViewMethods(LazyViewMethods* methods) {
  if (methods == nullptr) return;
  for (PyObject* o : {methods->framework, methods->tensor_base, methods->is_conj, methods->is_neg,
                      methods->dtype, methods->is_complex}) {
    Py_DECREF(o);
  }
  delete methods;
}

/// _set_lazy_views(framework, tensor_base, is_conj, is_neg, dtype): the adapter of the framework
/// whose tensors have lazy views gives the methods that read them (runtime/_frameworks.py). The
/// first set stays (types classified with it point at it); setting it again with the same
/// framework is a no-op, with another one a ValueError.
PyObject* SetLazyViews(PyObject*, PyObject* args) {
  PyObject *framework, *base, *is_conj, *is_neg, *dtype;
  if (!PyArg_ParseTuple(args, "UOOOO", &framework, &base, &is_conj, &is_neg, &dtype)) {
    return nullptr;
  }
  if (!PyType_Check(base) || !PyCallable_Check(is_conj) || !PyCallable_Check(is_neg) ||
      Py_TYPE(dtype)->tp_descr_get == nullptr) {
    PyErr_Format(PyExc_TypeError,
                 "_set_lazy_views: expected a type, two callables and a descriptor, got %.100s, "
                 "%.100s, %.100s and %.100s",
                 Py_TYPE(base)->tp_name, Py_TYPE(is_conj)->tp_name, Py_TYPE(is_neg)->tp_name,
                 Py_TYPE(dtype)->tp_name);
    return nullptr;
  }
  if (const LazyViewMethods* set = LazyViewMethodsOf()) {
    const int same = PyObject_RichCompareBool(set->framework, framework, Py_EQ);
    if (same < 0) return nullptr;
    if (same == 0) {
      PyErr_Format(PyExc_ValueError,
                   "_set_lazy_views: the lazy views of %U are set already; %U cannot set its own",
                   set->framework, framework);
      return nullptr;
    }
    Py_RETURN_NONE;
  }
  PyRef is_complex(PyUnicode_InternFromString("is_complex"));
  if (!is_complex) return nullptr;
  for (PyObject* o : {framework, base, is_conj, is_neg, dtype}) Py_INCREF(o);
  auto* made = new LazyViewMethods{framework, base, is_conj, is_neg, dtype, is_complex.release()};
  LazyViewMethods* expected = nullptr;
  if (!g_state->lazy_views.compare_exchange_strong(expected, made, std::memory_order_acq_rel)) {
    FreeLazyViewMethods(made);  // another thread set them first
  }
  Py_RETURN_NONE;
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
/// import of torch.Tensor without torch's Python-binding layer), and the lazy-view bits of
/// kTypeLazyViews tensors are read by the function of the "kffi.lazy_view_bits" capsule (a
/// LazyViewBitsFn) instead of their framework's methods; None asks the methods again. The capsules
/// are kept for the module's life.
PyObject* OverrideExchangeAPI(PyObject*, PyObject* args) {
  PyObject *original, *replacement, *lazy_bits = Py_None;
  if (!PyArg_ParseTuple(args, "OO|O", &original, &replacement, &lazy_bits)) return nullptr;
  LazyViewBitsFn reader = nullptr;
  if (lazy_bits != Py_None) {
    reader = PyCapsule_IsValid(lazy_bits, "kffi.lazy_view_bits")
                 ? reinterpret_cast<LazyViewBitsFn>(
                       PyCapsule_GetPointer(lazy_bits, "kffi.lazy_view_bits"))
                 : nullptr;
    if (reader == nullptr) {
      PyErr_Format(PyExc_TypeError,
                   "_override_exchange_api: lazy_view_bits is a \"kffi.lazy_view_bits\" capsule "
                   "or None, got %.200s",
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
  g_state->lazy_bits.store(reader, std::memory_order_release);
  g_state->exchange_to.store(to, std::memory_order_relaxed);
  g_state->exchange_from.store(from, std::memory_order_release);
  Reclassify();  // the overridden type, if classified already, takes the replacement
  Py_RETURN_NONE;
}

}  // namespace pyglue
}  // namespace kffi
