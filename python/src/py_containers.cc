// python/src/py_containers.cc: _core's readers of kffi containers (Array, List, Map, Dict) for the
// Python wrappers in kffi.runtime._objects.
// SPDX-License-Identifier: Apache-2.0
#include <kffi/container/map.h>

#include <cmath>

#include "py_common.h"

namespace kffi {
namespace pyglue {
namespace {

/// An owned copy of a stored value (a reference more for objects); throws on failure.
Any OwnedCopy(const KFFIAny& stored) {
  KFFIAny out;
  if (KFFIAnyViewToOwnedAny(&stored, &out) != 0) details::ThrowRaisedError(-1);
  return details::AnyUnsafe::FromOwnedRaw(out);
}

/// The handle of obj when it wraps a kffi object of type index a or b (the immutable and the
/// mutable kind of one container), else NULL with HandleOfType's TypeError set.
KFFIObjectHandle HandleOfKinds(PyObject* obj, int32_t a, int32_t b, const char* what) {
  KFFIObjectHandle h = GetHandle(obj);
  if (h == nullptr && RaiseIfReleased(obj)) return nullptr;
  const int32_t index = h == nullptr ? -1 : static_cast<KFFIObject*>(h)->type_index;
  return HandleOfType(obj, index == b ? b : a, what);
}

/// _seq_items(obj) -> list: the elements of an Array or List.
PyObject* SeqItems(PyObject*, PyObject* obj) {
  KFFIObjectHandle h = HandleOfKinds(obj, kKFFIArray, kKFFIList, "kffi.Array or kffi.List");
  if (h == nullptr) return nullptr;
  // A snapshot of owned values first: converting one can run Python code (a finalizer during an
  // allocation, a hook) that changes a List or releases it.
  std::vector<Any> values;
  try {
    auto* cell = static_cast<KFFISeqCell*>(KFFIObjectGetCellPtr(h));
    auto* items = static_cast<const KFFIAny*>(cell->data);
    values.reserve(static_cast<size_t>(cell->size));
    for (int64_t i = 0; i < cell->size; ++i) values.push_back(OwnedCopy(items[i]));
  }
  KFFI_CATCH_ALL { return RaiseFromCppException(); }
  PyRef list(PyList_New(static_cast<Py_ssize_t>(values.size())));
  if (!list) return nullptr;
  for (size_t i = 0; i < values.size(); ++i) {
    PyObject* v = AnyViewToPy(details::AnyUnsafe::Raw(values[i]));
    if (v == nullptr) return nullptr;
    PyList_SET_ITEM(list.get(), static_cast<Py_ssize_t>(i), v);
  }
  return list.release();
}

/// _seq_len(obj), _seq_get(obj, i): element access without building a list.
PyObject* SeqGet(PyObject*, PyObject* args) {
  PyObject* obj;
  Py_ssize_t i;
  if (!PyArg_ParseTuple(args, "On", &obj, &i)) return nullptr;
  // Only an Array or a List has a sequence cell: another object's cell read as one is garbage.
  KFFIObjectHandle h = HandleOfKinds(obj, kKFFIArray, kKFFIList, "kffi.Array or kffi.List");
  if (h == nullptr) return nullptr;
  auto* cell = static_cast<KFFISeqCell*>(KFFIObjectGetCellPtr(h));
  Py_ssize_t n = static_cast<Py_ssize_t>(cell->size);
  if (i < 0) i += n;
  if (i < 0 || i >= n) {
    PyErr_Format(PyExc_IndexError, "index out of range for a sequence of length %zd", n);
    return nullptr;
  }
  return AnyViewToPy(&static_cast<KFFIAny*>(cell->data)[i]);
}

PyObject* SeqLen(PyObject*, PyObject* obj) {
  // Only an Array or a List has a sequence cell: another object's cell read as one is garbage.
  KFFIObjectHandle h = HandleOfKinds(obj, kKFFIArray, kKFFIList, "kffi.Array or kffi.List");
  if (h == nullptr) return nullptr;
  return PyLong_FromLongLong(static_cast<KFFISeqCell*>(KFFIObjectGetCellPtr(h))->size);
}

/// _map_items(obj) -> list of (key, value) for a Map or Dict, in insertion order.
PyObject* MapItems(PyObject*, PyObject* obj) {
  KFFIObjectHandle h = HandleOfKinds(obj, kKFFIMap, kKFFIDict, "kffi.Map or kffi.Dict");
  if (h == nullptr) return nullptr;
  // Owned pairs first (see SeqItems): a Dict may change, or the Map be released, while they
  // convert.
  std::vector<std::pair<Any, Any>> pairs;
  try {
    auto* base = static_cast<const details::MapObjBase*>(static_cast<Object*>(h));
    pairs.reserve(static_cast<size_t>(base->size()));
    for (int64_t i = base->NextLive(0); i < base->used(); i = base->NextLive(i + 1)) {
      const details::MapEntry& e = base->RawEntries()[i];
      pairs.emplace_back(OwnedCopy(e.key), OwnedCopy(e.value));
    }
  }
  KFFI_CATCH_ALL { return RaiseFromCppException(); }
  PyRef list(PyList_New(static_cast<Py_ssize_t>(pairs.size())));
  if (!list) return nullptr;
  for (size_t i = 0; i < pairs.size(); ++i) {
    PyRef k(AnyViewToPy(details::AnyUnsafe::Raw(pairs[i].first)));
    if (!k) return nullptr;
    PyRef v(AnyViewToPy(details::AnyUnsafe::Raw(pairs[i].second)));
    if (!v) return nullptr;
    PyObject* pair = PyTuple_Pack(2, k.get(), v.get());
    if (pair == nullptr) return nullptr;
    PyList_SET_ITEM(list.get(), static_cast<Py_ssize_t>(i), pair);
  }
  return list.release();
}

/// The stored numbers that Python's == makes equal to a number key of another kind (1 == 1.0 ==
/// True, 0.0 == -0.0): each is looked up by hash too, so that a lookup stays O(1).
int NumberAlternatives(const KFFIAny& k, KFFIAny* alts) {
  int n = 0;
  auto add = [&](int32_t index, uint64_t bits) {
    details::SetPOD(&alts[n], index);
    alts[n++].v_uint64 = bits;
  };
  auto add_float = [&](double d) {
    KFFIAny v;
    v.v_float64 = d;
    add(kKFFIFloat, v.v_uint64);
  };
  switch (k.type_index) {
    case kKFFIInt: {
      const int64_t v = k.v_int64;
      // Exactly representable as a double (|v| <= 2**53, or a multiple that rounds exactly).
      const double d = static_cast<double>(v);
      if (d >= -9223372036854775808.0 && d < 9223372036854775808.0 &&
          static_cast<int64_t>(d) == v) {
        add_float(d);
        if (v == 0) add_float(-0.0);
      }
      if (v == 0 || v == 1) add(kKFFIBool, static_cast<uint64_t>(v));
      break;
    }
    case kKFFIFloat: {
      const double d = k.v_float64;
      if (d >= -9223372036854775808.0 && d < 9223372036854775808.0 &&
          static_cast<double>(static_cast<int64_t>(d)) == d) {
        add(kKFFIInt, static_cast<uint64_t>(static_cast<int64_t>(d)));
      }
      if (d == 0.0) {
        add(kKFFIBool, 0);
        add_float(std::signbit(d) ? 0.0 : -0.0);
      }
      if (d == 1.0) add(kKFFIBool, 1);
      break;
    }
    case kKFFIBool:
      add(kKFFIInt, k.v_int64 != 0 ? 1 : 0);
      add_float(k.v_int64 != 0 ? 1.0 : 0.0);
      if (k.v_int64 == 0) add_float(-0.0);
      break;
    default:
      break;
  }
  return n;
}

/// _map_get(obj, key, missing) -> the value of key, or missing. Keys of the kinds a Map stores by
/// value (int, float, bool, None, str, bytes, kffi objects) are found by hash, numbers under each
/// kind Python's == equates them with (1 == 1.0 == True): O(1). Other keys (e.g. a tuple, which
/// would become a new Array) are compared with every key by Python's ==.
PyObject* MapGet(PyObject*, PyObject* args) {
  PyObject *obj, *key, *missing;
  if (!PyArg_ParseTuple(args, "OOO", &obj, &key, &missing)) return nullptr;
  KFFIObjectHandle h = HandleOfKinds(obj, kKFFIMap, kKFFIDict, "kffi.Map or kffi.Dict");
  if (h == nullptr) return nullptr;
  auto* base = static_cast<const details::MapObjBase*>(static_cast<Object*>(h));
  const Kind kind = TypeInfoOf(Py_TYPE(key))->kind;
  const bool by_hash = kind == Kind::kInt || kind == Kind::kFloat || kind == Kind::kBool ||
                       kind == Kind::kNone || kind == Kind::kStr || kind == Kind::kBytes ||
                       kind == Kind::kObject;
  if (by_hash) {
    KFFIAny k;
    if (PyToOwnedAny(key, &k) != 0) {
      // An int beyond int64 is no stored int; it can only equal a float key, exactly.
      if (kind != Kind::kInt || !PyErr_ExceptionMatches(PyExc_OverflowError)) return nullptr;
      PyErr_Clear();
      double d = PyLong_AsDouble(key);
      if (d == -1.0 && PyErr_Occurred()) {
        PyErr_Clear();
        return Py_NewRef(missing);  // beyond every double too
      }
      PyRef back(PyLong_FromDouble(d));
      if (!back) return nullptr;
      int exact = PyObject_RichCompareBool(back.get(), key, Py_EQ);
      if (exact < 0) return nullptr;
      if (!exact) return Py_NewRef(missing);
      details::SetPOD(&k, kKFFIFloat);
      k.v_float64 = d;
    }
    Any owned = details::AnyUnsafe::FromOwnedRaw(k);
    const KFFIAny& raw = *details::AnyUnsafe::Raw(owned);
    int64_t i = base->FindEntry(raw);
    KFFIAny alts[3];
    const int nalts = i >= 0 ? 0 : NumberAlternatives(raw, alts);
    for (int a = 0; a < nalts && i < 0; ++a) i = base->FindEntry(alts[a]);
    if (i >= 0) return AnyViewToPy(&base->RawEntries()[i].value);
    return Py_NewRef(missing);
  }
  // Compare by Python equality over a snapshot of the pairs (== may run any code).
  PyRef items(MapItems(nullptr, obj));
  if (!items) return nullptr;
  for (Py_ssize_t i = 0; i < PyList_GET_SIZE(items.get()); ++i) {
    PyObject* pair = PyList_GET_ITEM(items.get(), i);
    int eq = PyObject_RichCompareBool(PyTuple_GET_ITEM(pair, 0), key, Py_EQ);
    if (eq < 0) return nullptr;
    if (eq) return Py_NewRef(PyTuple_GET_ITEM(pair, 1));
  }
  return Py_NewRef(missing);
}

/// _map_len(obj) -> the number of pairs.
PyObject* MapLen(PyObject*, PyObject* obj) {
  KFFIObjectHandle h = HandleOfKinds(obj, kKFFIMap, kKFFIDict, "kffi.Map or kffi.Dict");
  if (h == nullptr) return nullptr;
  return PyLong_FromLongLong(
      static_cast<const details::MapObjBase*>(static_cast<Object*>(h))->size());
}

PyMethodDef kContainerMethods[] = {{"_seq_items", SeqItems, METH_O, nullptr},
                                   {"_seq_get", SeqGet, METH_VARARGS, nullptr},
                                   {"_seq_len", SeqLen, METH_O, nullptr},
                                   {"_map_items", MapItems, METH_O, nullptr},
                                   {"_map_get", MapGet, METH_VARARGS, nullptr},
                                   {"_map_len", MapLen, METH_O, nullptr},
                                   {nullptr, nullptr, 0, nullptr}};

}  // namespace

int InitContainers(PyObject* module) { return PyModule_AddFunctions(module, kContainerMethods); }

}  // namespace pyglue
}  // namespace kffi
