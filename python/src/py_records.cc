// python/src/py_records.cc: records: dataclass and NamedTuple arguments made into reflected kffi
// objects or KFFI_RECORD boxes (a plan per Python class, built once), and the record parameters
// of typed functions.
// SPDX-License-Identifier: Apache-2.0
#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "py_common.h"
#include "structmember.h"

namespace kffi {
namespace pyglue {
namespace {
// How instances of one Python record class become objects of one reflected type: the type's
// creator, then each record field read (the cheapest way the class allows, chosen once) and
// stored (straight into the object for int64, double and bool fields, else through the C++
// field's setter).
enum class ReadKind : uint8_t {
  kTupleItem,  // a NamedTuple: the item at `at`
  kSlot,       // a __slots__ member: the object pointer at byte offset `at`
  kDict,       // an instance attribute with no data descriptor on the class: the instance dict
  kGetAttr,    // anything else: getattr
};
enum class StoreKind : uint8_t { kDouble, kInt64, kBool, kSetter };

struct RecordField {
  PyObject* name;  // interned, strong (the plan lives for the process)
  const KFFIFieldInfo* field;
  Py_ssize_t at;
  ReadKind read;
  StoreKind store;
  std::string label;  // ".x"
};
struct RecordPlan {
  PyTypeObject* type;
  int32_t target;  // the type index asked for (-1: the class's own __kffi_type__)
  int (*creator)(KFFIObjectHandle* out);
  bool any_dict;  // some field reads the instance dict
  bool all_dict;  // every field reads it (a plain dataclass): one walk reads and stores them all
  // The type is a plain record (kKFFITypeFlagPlainRecord) whose every field the plan writes: a
  // box a call leaves as it came goes back to `spare`, and the next conversion writes every field
  // of it again instead of making a new one (GIL builds; read and written under the GIL).
  bool reusable;
  KFFIObject* spare = nullptr;
  std::vector<RecordField> fields;
};

std::mutex g_plans_mutex;
std::unordered_map<PyTypeObject*, std::vector<RecordPlan*>>* g_plans = nullptr;
// The plan found last: the arguments of one call site are usually of one record class.
std::atomic<RecordPlan*> g_last_plan{nullptr};

// Calls fn(field) for each field of type index and its ancestors (nearest declaration first for
// a name declared twice is left to the caller: FindTypeField).
template <typename Fn>
void ForEachTypeField(int32_t index, Fn fn) {
  const KFFITypeInfo* info = KFFIGetTypeInfo(index);
  if (info == nullptr) return;
  for (int32_t d = 0; d <= info->type_depth; ++d) {
    const KFFITypeReflection* r =
        KFFIGetTypeReflection(d == info->type_depth ? index : info->type_ancestors[d]);
    for (int32_t i = 0; r != nullptr && i < r->num_fields; ++i) fn(r->fields[i]);
  }
}

// The field name declared by type index or its nearest ancestor, or NULL.
const KFFIFieldInfo* FindTypeField(int32_t index, const char* name, size_t size) {
  const KFFIFieldInfo* found = nullptr;
  ForEachTypeField(index, [&](const KFFIFieldInfo& f) {
    if (f.name.size == size && std::memcmp(f.name.data, name, size) == 0) found = &f;
  });
  return found;
}

bool TypeStrIs(const KFFIFieldInfo* f, const char* text) {
  const size_t n = std::strlen(text);
  return f->type_str.size == n && std::memcmp(f->type_str.data, text, n) == 0;
}

// Fields kffi's own FieldSetter<F> writes as plain int64_t, double or bool (the type text and
// size say which F it is), stored without the setter call.
StoreKind StoreKindOf(const KFFIFieldInfo* f) {
  if (f->type_index == kKFFIFloat && f->size == 8 && TypeStrIs(f, "float")) {
    return StoreKind::kDouble;
  }
  if (f->type_index == kKFFIInt && f->size == 8 && TypeStrIs(f, "int")) return StoreKind::kInt64;
  if (f->type_index == kKFFIBool && f->size == 1 && TypeStrIs(f, "bool")) return StoreKind::kBool;
  return StoreKind::kSetter;
}

// How field `name` (interned) of instances of tp is read, given the class's layout now.
ReadKind ReadKindOf(PyTypeObject* tp, PyObject* name, bool named_tuple, Py_ssize_t* at) {
  if (named_tuple) return ReadKind::kTupleItem;  // *at: the field's position, set by the caller
  if (tp->tp_getattro != PyObject_GenericGetAttr) return ReadKind::kGetAttr;
  PyObject* attr = _PyType_Lookup(tp, name);  // borrowed
  if (attr != nullptr && Py_IS_TYPE(attr, &PyMemberDescr_Type)) {
    PyMemberDef* m = reinterpret_cast<PyMemberDescrObject*>(attr)->d_member;
    if (m->type == T_OBJECT_EX && m->offset > 0) {
      *at = m->offset;
      return ReadKind::kSlot;
    }
    return ReadKind::kGetAttr;
  }
#ifndef Py_GIL_DISABLED         // borrowed dict items are safe only under the GIL
#ifdef Py_TPFLAGS_MANAGED_DICT  // 3.11+: the dict may live before the object
  const bool has_dict = tp->tp_dictoffset != 0 || (tp->tp_flags & Py_TPFLAGS_MANAGED_DICT) != 0;
#else
  const bool has_dict = tp->tp_dictoffset != 0;
#endif
  if (has_dict && (attr == nullptr || Py_TYPE(attr)->tp_descr_set == nullptr)) {
    return ReadKind::kDict;
  }
#endif
  return ReadKind::kGetAttr;
}

// Raises TypeError "<param>.<field>: <text> (argument #k of `sig`)".
void RaiseFieldError(const CallContext* ctx, Py_ssize_t index, const std::string& field,
                     const std::string& text) {
  const ArgPlace place = ArgPlaceOf(ctx, index);
  std::string msg = place.subject.empty()
                        ? field + ": " + text
                        : place.subject + "." + field + ": " + text + place.context;
  PyErr_SetString(PyExc_TypeError, msg.c_str());
}

// The fields of a record class (kffi/_reflection.py's _record_fields): a tuple of names, or
// None for a class that is neither a dataclass nor a NamedTuple.
PyObject* RecordFieldNames(PyTypeObject* tp) {
  PyRef mod(PyImport_ImportModule("kffi._reflection"));
  if (!mod) return nullptr;
  return PyObject_CallMethod(mod.get(), "_record_fields", "O", tp);
}

// Builds the plan of tp for type index target; target -1 reads it from the class's
// __kffi_type__ (kffi/_reflection.py's _record_plan). A plan asked for by a parameter's type
// (target >= 0) is strict: every writable field of the type must be in the record. Errors name
// `param.field` through ctx and index.
RecordPlan* BuildPlan(PyTypeObject* tp, int32_t target, const CallContext* ctx, Py_ssize_t index) {
  int32_t type_index = target;
  PyRef names;
  if (target < 0) {
    PyRef mod(PyImport_ImportModule("kffi._reflection"));
    if (!mod) return nullptr;
    PyRef answer(PyObject_CallMethod(mod.get(), "_record_plan", "O", tp));
    if (!answer) return nullptr;
    int i;
    PyObject* n;
    if (!PyArg_ParseTuple(answer.get(), "iO!", &i, &PyTuple_Type, &n)) return nullptr;
    type_index = i;
    names = PyRef(Py_NewRef(n));
  } else {
    names = PyRef(RecordFieldNames(tp));
    if (!names) return nullptr;
    if (!PyTuple_Check(names.get())) {
      PyErr_SetString(PyExc_TypeError, "_record_fields must return a tuple");
      return nullptr;
    }
  }
  const KFFITypeReflection* r = KFFIGetTypeReflection(type_index);
  const KFFITypeInfo* info = KFFIGetTypeInfo(type_index);
  if (info == nullptr || r == nullptr || r->creator == nullptr) {
    PyErr_Format(PyExc_TypeError,
                 "record class %s: kffi type index %d has no fields or no default constructor, "
                 "so a record cannot build it",
                 tp->tp_name, static_cast<int>(type_index));
    return nullptr;
  }
  const std::string key(info->type_key.data, info->type_key.size);
  const bool named_tuple = PyType_IsSubtype(tp, &PyTuple_Type) != 0;
  auto plan = std::make_unique<RecordPlan>();
  plan->type = tp;
  plan->target = target;
  plan->creator = r->creator;
  plan->any_dict = false;
  plan->all_dict = PyTuple_GET_SIZE(names.get()) > 0;
  plan->reusable = false;
  struct Cleanup {
    RecordPlan* p;
    ~Cleanup() {
      if (p == nullptr) return;
      for (RecordField& f : p->fields) Py_DECREF(f.name);
    }
  } cleanup{plan.get()};
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(names.get()); ++i) {
    PyObject* name = PyTuple_GET_ITEM(names.get(), i);
    Py_ssize_t size = 0;
    const char* utf8 = PyUnicode_Check(name) ? PyUnicode_AsUTF8AndSize(name, &size) : nullptr;
    if (utf8 == nullptr) {
      if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "record field names must be str");
      return nullptr;
    }
    const std::string fname(utf8, static_cast<size_t>(size));
    const KFFIFieldInfo* f = FindTypeField(type_index, utf8, static_cast<size_t>(size));
    if (target >= 0 && (f == nullptr || f->setter == nullptr)) {
      RaiseFieldError(ctx, index, fname,
                      f == nullptr ? "expected a field of " + key + ", got a field of " +
                                         tp->tp_name + " that " + key + " does not have"
                                   : "expected a writable field of " + key +
                                         ", got a value for read-only field " + fname);
      return nullptr;
    }
    if (f == nullptr || f->setter == nullptr) {
      PyErr_Format(PyExc_TypeError, "record class %s: field '%s' is %s of kffi type `%s`",
                   tp->tp_name, utf8, f == nullptr ? "not a field" : "a read-only field",
                   key.c_str());
      return nullptr;
    }
    Py_INCREF(name);
    PyUnicode_InternInPlace(&name);
    RecordField rf{name, f, i, ReadKind::kGetAttr, StoreKindOf(f), "." + fname};
    plan->fields.push_back(rf);  // owns name from here (Cleanup releases it on failure)
    plan->fields.back().read = ReadKindOf(tp, name, named_tuple, &plan->fields.back().at);
    plan->any_dict |= plan->fields.back().read == ReadKind::kDict;
    plan->all_dict &= plan->fields.back().read == ReadKind::kDict;
  }
  if (target >= 0) {
    // Strict: a field of the type the record leaves out is an error, not a silent default.
    std::string missing;
    const KFFIFieldInfo* first = nullptr;
    ForEachTypeField(type_index, [&](const KFFIFieldInfo& f) {
      if (f.setter == nullptr || missing.size() > 0) return;
      for (const RecordField& rf : plan->fields) {
        if (rf.field->name.size == f.name.size &&
            std::memcmp(rf.field->name.data, f.name.data, f.name.size) == 0) {
          return;
        }
      }
      first = &f;
      missing.assign(f.name.data, f.name.size);
    });
    if (first != nullptr) {
      RaiseFieldError(ctx, index, missing,
                      "expected a value (" +
                          std::string(first->type_str.data, first->type_str.size) + "), got a " +
                          tp->tp_name + " without field " + missing);
      return nullptr;
    }
  }
#ifndef Py_GIL_DISABLED
  if ((r->flags & kKFFITypeFlagPlainRecord) != 0) {
    // Every field of the type written by each conversion (names are unique in a record class and
    // each maps to one field, so the counts say it), and no ancestor with fields of its own.
    size_t writable = 0;
    bool all_own = true;
    ForEachTypeField(type_index, [&](const KFFIFieldInfo& f) {
      writable += f.setter != nullptr ? 1 : 0;
      all_own &= f.setter != nullptr;
    });
    plan->reusable = all_own && writable == plan->fields.size() &&
                     static_cast<size_t>(r->num_fields) == plan->fields.size();
  }
#endif
  cleanup.p = nullptr;
  return plan.release();
}

// The plan of (tp, target), made on first use; NULL with a Python error.
RecordPlan* PlanOf(PyTypeObject* tp, int32_t target, const CallContext* ctx, Py_ssize_t index) {
  RecordPlan* last = g_last_plan.load(std::memory_order_acquire);
  if (KFFI_LIKELY(last != nullptr && last->type == tp && last->target == target)) return last;
  {
    std::lock_guard<std::mutex> lock(g_plans_mutex);
    if (g_plans != nullptr) {
      auto it = g_plans->find(tp);
      if (it != g_plans->end()) {
        for (RecordPlan* p : it->second) {
          if (p->target != target) continue;
          g_last_plan.store(p, std::memory_order_release);
          return p;
        }
      }
    }
  }
  RecordPlan* plan = BuildPlan(tp, target, ctx, index);  // runs Python code: outside the lock
  if (plan == nullptr) return nullptr;
  std::lock_guard<std::mutex> lock(g_plans_mutex);
  if (g_plans == nullptr)
    g_plans = new std::unordered_map<PyTypeObject*, std::vector<RecordPlan*>>();
  // Plans live for the process (and keep their class alive): a class id is never reused then.
  std::vector<RecordPlan*>& plans = (*g_plans)[tp];
  for (RecordPlan* p : plans) {
    if (p->target != target) continue;
    for (RecordField& f : plan->fields) Py_DECREF(f.name);
    delete plan;
    plan = p;
    break;
  }
  if (plans.empty() || plans.back() != plan) {
    if (plans.empty()) Py_INCREF(reinterpret_cast<PyObject*>(tp));
    if (std::find(plans.begin(), plans.end(), plan) == plans.end()) plans.push_back(plan);
  }
  g_last_plan.store(plan, std::memory_order_release);
  return plan;
}

// A record field's value: exact int, float and bool inline (the common fields of a
// configuration, with no conversion context), anything else through PyToOwnedAny, one level of
// the container depth limit deeper: a field may hold a record, and that record one in turn, or
// the record itself.
KFFI_INLINE int ScalarOrOwnedAny(PyObject* value, KFFIAny* out) {
  out->zero_padding = 0;
  PyTypeObject* tp = Py_TYPE(value);
  if (tp == &PyFloat_Type) {
    out->type_index = kKFFIFloat;
    out->v_float64 = PyFloat_AS_DOUBLE(value);
    return 0;
  }
  if (tp == &PyBool_Type) {
    out->type_index = kKFFIBool;
    out->v_int64 = value == Py_True ? 1 : 0;
    return 0;
  }
  if (tp == &PyLong_Type) {
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(value, &overflow);
    if (overflow == 0 && !(v == -1 && PyErr_Occurred())) {
      out->type_index = kKFFIInt;
      out->v_int64 = v;
      return 0;
    }
    PyErr_Clear();  // too large for int64: the general path names the problem
  }
  if (EnterContainer() != 0) return -1;
  const int rc = PyToOwnedAny(value, out);
  LeaveContainer();
  return rc;
}

// Field rf of record obj (a new reference), or NULL with an error set.
KFFI_INLINE PyObject* ReadField(PyObject* obj, PyObject* dict, const RecordField& rf) {
  switch (rf.read) {
    case ReadKind::kTupleItem:
      if (KFFI_LIKELY(PyTuple_GET_SIZE(obj) > rf.at)) {
        return Py_NewRef(PyTuple_GET_ITEM(obj, rf.at));
      }
      break;
    case ReadKind::kSlot: {
      PyObject* v = *reinterpret_cast<PyObject**>(reinterpret_cast<char*>(obj) + rf.at);
      if (KFFI_LIKELY(v != nullptr)) return Py_NewRef(v);
      break;  // unset: getattr raises the AttributeError
    }
    case ReadKind::kDict:
      if (KFFI_LIKELY(dict != nullptr)) {
        PyObject* v = PyDict_GetItemWithError(dict, rf.name);  // borrowed
        if (KFFI_LIKELY(v != nullptr)) return Py_NewRef(v);
        if (PyErr_Occurred()) return nullptr;
      }
      break;
    case ReadKind::kGetAttr:
      break;
  }
  return PyObject_GetAttr(obj, rf.name);
}

// Field rf of record obj as a borrowed reference, or NULL when it is not read that way (getattr)
// or is missing: a NamedTuple item, a __slots__ member, or walked (the dict walk's value, or
// NULL). Valid only until Python code runs.
KFFI_INLINE PyObject* BorrowField(PyObject* obj, const RecordField& rf, PyObject* walked) {
  switch (rf.read) {
    case ReadKind::kTupleItem:
      return PyTuple_GET_SIZE(obj) > rf.at ? PyTuple_GET_ITEM(obj, rf.at) : nullptr;
    case ReadKind::kSlot:
      return *reinterpret_cast<PyObject**>(reinterpret_cast<char*>(obj) + rf.at);
    case ReadKind::kDict:
      return walked;
    case ReadKind::kGetAttr:
      break;
  }
  return nullptr;
}

// Stores value into field rf of the new object h when that runs no Python code and cannot fail:
// a float into a double field, an int that fits into an int64 one, a bool into a bool one.
// False leaves it to StoreField.
KFFI_INLINE bool StoreFieldNoPython(char* h, const RecordField& rf, PyObject* value) {
  char* at = h + rf.field->offset;
  PyTypeObject* vt = Py_TYPE(value);
  switch (rf.store) {
    case StoreKind::kDouble:
      if (KFFI_LIKELY(vt == &PyFloat_Type)) {
        const double d = PyFloat_AS_DOUBLE(value);
        std::memcpy(at, &d, sizeof(d));
        return true;
      }
      return false;
    case StoreKind::kInt64:
      if (KFFI_LIKELY(vt == &PyLong_Type)) {
        int64_t i;
        if (KFFI_LIKELY(ReadCompactInt(value, &i))) {
          std::memcpy(at, &i, sizeof(i));
          return true;
        }
        int overflow = 0;
        const long long v = PyLong_AsLongLongAndOverflow(value, &overflow);
        if (KFFI_LIKELY(overflow == 0 && !(v == -1 && PyErr_Occurred()))) {
          i = v;
          std::memcpy(at, &i, sizeof(i));
          return true;
        }
        PyErr_Clear();
      }
      return false;
    case StoreKind::kBool:
      if (vt == &PyBool_Type) {
        const bool b = value == Py_True;
        std::memcpy(at, &b, sizeof(b));
        return true;
      }
      return false;
    case StoreKind::kSetter:
      return false;
  }
  return false;
}

// Stores value into field rf of the new object h through the field's setter (value converted
// first); 0, or -1 with the error raised by the setter (kffi's error slot) or by the conversion
// (a Python error: *python_error set).
KFFI_INLINE int StoreFieldBySetter(char* h, const RecordField& rf, PyObject* value,
                                   bool* python_error) {
  KFFIAny v;
  if (ScalarOrOwnedAny(value, &v) != 0) {
    *python_error = true;
    return -1;
  }
  const int rc = rf.field->setter(h + rf.field->offset, &v);
  if (v.type_index >= kKFFIStaticObjectBegin) ReleaseObject(v.v_obj);
  return rc;
}

// The most fields WalkDictFields reads (a plan with more looks each one up).
constexpr size_t kMaxWalkedFields = 16;

// Reads the plan's dict fields from dict in one walk over its entries, into walked[i] (borrowed:
// used only until Python code can run) for field i. A dataclass's __init__ stores the fields in
// declaration order under their interned names, so the entries are usually the dict fields in order
// and compare by identity: one step each, no hashing or probing. The walk stops at the first entry
// that is not the next dict field (another order, another attribute first); the fields left are
// looked up. Returns the end of the walked fields: walked[i] is set for each dict field i below it.
KFFI_INLINE size_t WalkDictFields(PyObject* dict, const RecordPlan* plan, PyObject** walked) {
  const size_t nfields = plan->fields.size();
  size_t next = 0;
  while (next < nfields && plan->fields[next].read != ReadKind::kDict) ++next;
  Py_ssize_t pos = 0;
  PyObject* key;
  PyObject* value;
  while (next < nfields && PyDict_Next(dict, &pos, &key, &value)) {
    if (key != plan->fields[next].name) return next;
    walked[next] = value;
    do {
      ++next;
    } while (next < nfields && plan->fields[next].read != ReadKind::kDict);
  }
  return next;
}

// WalkDictFields for a plan whose every field reads the dict, storing as it walks: the fields
// stored (all of them when the entries are the fields in order and each store ran no Python
// code). The stores run no Python code, so the borrowed values are never held across it.
KFFI_INLINE size_t WalkAndStoreDictFields(PyObject* dict, const RecordPlan* plan, char* h) {
  const size_t nfields = plan->fields.size();
  size_t next = 0;
  Py_ssize_t pos = 0;
  PyObject* key;
  PyObject* value;
  while (next < nfields && PyDict_Next(dict, &pos, &key, &value)) {
    const RecordField& rf = plan->fields[next];
    if (key != rf.name || !StoreFieldNoPython(h, rf, value)) break;
    ++next;
  }
  return next;
}

// Converts record obj with plan into a new object in *out, kept by ctx.
int ConvertWithPlan(PyObject* obj, RecordPlan* plan, KFFIAny* out, CallContext* ctx,
                    Py_ssize_t index) {
  KFFIObjectHandle h = plan->spare;
  if (h != nullptr) {
    plan->spare = nullptr;  // this call's now; every field is rewritten
  } else if (plan->creator(&h) != 0) {
    RaiseFromKFFIError(-1);
    return -1;
  }
  PyRef dict;
  // Dict fields read by one walk over the dict, by field position: borrowed values of the dict
  // fields below walked_end, stored only while no Python code has run since the walk.
  PyObject* walked[kMaxWalkedFields];
  size_t walked_end = 0;
  const size_t nfields = plan->fields.size();
  size_t stored = 0;  // fields below it are already in the object
  if (plan->any_dict) {
    dict = PyRef(PyObject_GenericGetDict(obj, nullptr));
    if (!dict) {
      PyErr_Clear();  // each field falls back to getattr
    } else if (plan->all_dict) {
      stored = WalkAndStoreDictFields(dict.get(), plan, static_cast<char*>(h));
    } else if (nfields <= kMaxWalkedFields) {
      walked_end = WalkDictFields(dict.get(), plan, walked);
    }
  }
  for (size_t i = stored; i < nfields; ++i) {
    const RecordField& rf = plan->fields[i];
    PyObject* borrowed = BorrowField(obj, rf, i < walked_end ? walked[i] : nullptr);
    if (borrowed != nullptr && StoreFieldNoPython(static_cast<char*>(h), rf, borrowed)) continue;
    // What follows may run Python code (getattr, __index__, ...), which may change the dict and
    // free a walked value: the fields left are read again, each one a new reference.
    walked_end = 0;
    PyObject* value = ReadField(obj, dict.get(), rf);
    bool python_error = value == nullptr;
    int rc = -1;
    std::string value_type;  // the value's Python type, for the setter's refusal
    if (value != nullptr) {
      // A borrowed value StoreFieldNoPython refused above is this one: straight to the setter.
      const bool direct =
          borrowed == nullptr && StoreFieldNoPython(static_cast<char*>(h), rf, value);
      rc = direct ? 0 : StoreFieldBySetter(static_cast<char*>(h), rf, value, &python_error);
      if (rc != 0) value_type = Py_TYPE(value)->tp_name;
      Py_DECREF(value);
    }
    if (KFFI_LIKELY(rc == 0)) {
      // The Python code that may have run (a getattr, an __index__) may have given the object
      // another __dict__: the fields left are read from the one it has now, not the old one.
      if (plan->any_dict && dict) {
        PyObject* now = PyObject_GenericGetDict(obj, nullptr);
        if (now == nullptr) PyErr_Clear();  // each field left falls back to getattr
        dict = PyRef(now);
      }
      continue;
    }
    ReleaseObject(h);
    if (python_error) {
      // "cfg.n: Python int too large ... (argument #0 of `f(...)`)", of the original's type.
      const ArgPlace place = ArgPlaceOf(ctx, index);
      // Records nested too deep (or holding themselves) are named at the argument's own level
      // (`cfg.next: ...`), passed on unchanged by the levels inside it.
      if (index < 0 && PyErr_ExceptionMatches(PyExc_RecursionError)) return -1;
      return LabelConversionError(place.subject + rf.label, place.context);
    }
    // "cfg.alpha: expected float, got str (argument #0 of `f(...)`)"
    std::string kind = "TypeError", message = "cannot be assigned";
    details::TakeRaisedKindMessage(&kind, &message);
    // A value of no kffi type crossed as a Python object: the message names its own type.
    const std::string opaque = "got OpaquePyObject";
    if (size_t at = message.find(opaque); at != std::string::npos && !value_type.empty()) {
      message.replace(at, opaque.size(), "got " + value_type);
    }
    const ArgPlace place = ArgPlaceOf(ctx, index);
    PyObject* exc = kind == "ValueError"    ? PyExc_ValueError
                    : kind == "TypeError"   ? PyExc_TypeError
                    : kind == "MemoryError" ? PyExc_MemoryError
                                            : PyExc_RuntimeError;
    std::string text = place.subject + rf.label + ": " + message + place.context;
    PyErr_SetString(exc, text.c_str());
    return -1;
  }
  out->type_index = static_cast<KFFIObject*>(h)->type_index;
  out->zero_padding = 0;
  out->v_obj = static_cast<KFFIObject*>(h);
  if (plan->reusable) {
    ctx->KeepRecordBox(*out, &plan->spare);
  } else {
    ctx->KeepAlive(*out);
  }
  return 0;
}

// Whether instances of tp may be records by field names (a dataclass or a NamedTuple): the
// cheap test before a plan is made (BuildPlan asks kffi/_reflection.py to be sure).
bool MayBeRecordClass(PyTypeObject* tp) {
  if (tp == &PyTuple_Type || tp == &PyLong_Type || tp == &PyFloat_Type || tp == &PyBool_Type ||
      tp == &PyUnicode_Type || tp == Py_TYPE(Py_None) || tp == &PyList_Type || tp == &PyDict_Type) {
    return false;
  }
  if (PyType_IsSubtype(tp, g_state->object_type)) return false;
  static PyObject* dataclass_fields = PyUnicode_InternFromString("__dataclass_fields__");
  static PyObject* fields = PyUnicode_InternFromString("_fields");
  if (dataclass_fields == nullptr || fields == nullptr) return false;
  if (PyType_IsSubtype(tp, &PyTuple_Type)) return _PyType_Lookup(tp, fields) != nullptr;
  return _PyType_Lookup(tp, dataclass_fields) != nullptr;
}

// _set_record_params(func, types): types a tuple of type indices (-1, or a type a record cannot
// build: not a record parameter), or None.
PyObject* SetRecordParams(PyObject*, PyObject* args) {
  PyObject* func;
  PyObject* types;
  if (!PyArg_ParseTuple(args, "O!O", g_state->function_type, &func, &types)) return nullptr;
  auto* f = reinterpret_cast<PyFunction*>(func);
  if (types == Py_None) {
    f->record_params = nullptr;
    Py_RETURN_NONE;
  }
  if (!PyTuple_Check(types)) {
    PyErr_SetString(PyExc_TypeError, "_set_record_params: types must be a tuple or None");
    return nullptr;
  }
  RecordParams p;
  bool any = false;
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(types); ++i) {
    long t = PyLong_AsLong(PyTuple_GET_ITEM(types, i));
    if (t == -1 && PyErr_Occurred()) return nullptr;
    // Only types a record can build count: reflected, with a default constructor.
    const KFFITypeReflection* r =
        t >= 0 && t <= INT32_MAX ? KFFIGetTypeReflection(static_cast<int32_t>(t)) : nullptr;
    const bool record = r != nullptr && r->creator != nullptr;
    p.types.push_back(record ? static_cast<int32_t>(t) : -1);
    any |= record;
  }
  if (!any) {
    f->record_params = nullptr;
    Py_RETURN_NONE;
  }
  // One shared copy per distinct list, for the process (functions keep a plain pointer).
  static std::mutex mutex;
  static std::vector<RecordParams*>* all = new std::vector<RecordParams*>();
  std::lock_guard<std::mutex> lock(mutex);
  for (RecordParams* q : *all) {
    if (q->types == p.types) {
      f->record_params = q;
      Py_RETURN_NONE;
    }
  }
  all->push_back(new RecordParams(std::move(p)));
  f->record_params = all->back();
  Py_RETURN_NONE;
}

PyMethodDef kRecordMethods[] = {{"_set_record_params", SetRecordParams, METH_VARARGS, nullptr},
                                {nullptr, nullptr, 0, nullptr}};

}  // namespace

int ConvertRecordArg(PyObject* obj, KFFIAny* out, CallContext* ctx, Py_ssize_t index) {
  ctx->NotePythonRuns();
  RecordPlan* plan = PlanOf(Py_TYPE(obj), -1, ctx, index);
  if (plan == nullptr) return -1;
  return ConvertWithPlan(obj, plan, out, ctx, index);
}

int ConvertRecordParamArg(PyObject* obj, int32_t type_index, KFFIAny* out, CallContext* ctx,
                          Py_ssize_t index) {
  PyTypeObject* tp = Py_TYPE(obj);
  RecordPlan* last = g_last_plan.load(std::memory_order_acquire);
  // The plan of the last record, for this type or, for a class declared with register_record
  // (its plan goes by its own declaration: target -1), any.
  if (KFFI_LIKELY(last != nullptr && last->type == tp &&
                  (last->target == type_index || last->target < 0))) {
    ctx->NotePythonRuns();
    return ConvertWithPlan(obj, last, out, ctx, index);
  }
  // A class declared with register_record converts as its declaration says (ConvertArg).
  if (!MayBeRecordClass(tp) || TypeInfoOf(tp)->kind == Kind::kRecord) return 1;
  ctx->NotePythonRuns();
  RecordPlan* plan = PlanOf(tp, type_index, ctx, index);
  if (plan == nullptr) return -1;
  return ConvertWithPlan(obj, plan, out, ctx, index);
}

int InitRecords(PyObject* module) { return PyModule_AddFunctions(module, kRecordMethods); }

}  // namespace pyglue
}  // namespace kffi
