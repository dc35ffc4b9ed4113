// python/src/py_reflection.cc: fields of reflected kffi objects as Python attributes (one getset
// descriptor per field, made once per type) and the reflection queries of kffi/_reflection.py.
// SPDX-License-Identifier: Apache-2.0
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "py_common.h"

namespace kffi {
namespace pyglue {

KFFIObject* RaiseNotFieldOwner(PyObject* self, const KFFIObject* h, const std::string& qualname) {
  if (!RaiseIfReleased(self)) {
    PyErr_Format(PyExc_TypeError, "field `%s` cannot be read from a `%s` object", qualname.c_str(),
                 h != nullptr ? TypeKeyOf(h).c_str() : Py_TYPE(self)->tp_name);
  }
  return nullptr;
}

namespace {

// What a field descriptor reads: the field record (the runtime's, process lifetime) and the type
// that declares it, checked against each object (a wrapper whose __class__ was reassigned must
// not read another type's memory).
struct FieldSlot {
  const KFFIFieldInfo* field;
  int32_t owner;
  std::string qualname;  // "test.Point.x", for messages
};

// Slots and getset records per declaring type, made once and kept for the process (descriptors
// point at them; the records they describe live as long).
std::mutex g_slots_mutex;
std::unordered_map<int32_t, std::vector<FieldSlot*>>* g_slots = nullptr;

// kffi/_reflection.py's class maker: called with a type index, returns the class it registered.
PyObject* g_class_hook = nullptr;

KFFI_INLINE bool IsOfType(const KFFIObject* obj, int32_t owner) {
  if (obj->type_index == owner) return true;
  const KFFITypeInfo* info = KFFIGetTypeInfo(obj->type_index);
  const KFFITypeInfo* base = KFFIGetTypeInfo(owner);
  return info != nullptr && base != nullptr && info->type_depth > base->type_depth &&
         info->type_ancestors[base->type_depth] == owner;
}

// The object behind self when it is of the slot's type, else NULL with an error set.
KFFI_INLINE KFFIObject* SlotObject(PyObject* self, const FieldSlot* slot) {
  auto* h = static_cast<KFFIObject*>(reinterpret_cast<PyObjectHandle*>(self)->handle);
  if (KFFI_LIKELY(h != nullptr && IsOfType(h, slot->owner))) return h;
  return RaiseNotFieldOwner(self, h, slot->qualname);
}

PyObject* FieldGet(PyObject* self, void* closure) {
  const auto* slot = static_cast<const FieldSlot*>(closure);
  KFFIObject* h = SlotObject(self, slot);
  if (h == nullptr) return nullptr;
  KFFIAny out;
  out.type_index = kKFFINone;
  out.zero_padding = 0;
  out.v_int64 = 0;
  if (slot->field->getter(reinterpret_cast<char*>(h) + slot->field->offset, &out) != 0) {
    return RaiseFromKFFIError(-1);
  }
  return AnyToPy(&out, nullptr);
}

int FieldSet(PyObject* self, PyObject* value, void* closure) {
  const auto* slot = static_cast<const FieldSlot*>(closure);
  KFFIObject* h = SlotObject(self, slot);
  if (h == nullptr) return -1;
  if (value == nullptr) {
    PyErr_Format(PyExc_AttributeError, "field `%s` cannot be deleted", slot->qualname.c_str());
    return -1;
  }
  if (slot->field->setter == nullptr) {
    PyErr_Format(PyExc_AttributeError, "field `%s` is read-only", slot->qualname.c_str());
    return -1;
  }
  KFFIAny v;
  if (PyToOwnedAny(value, &v) != 0) return -1;
  // By name through the runtime: it names `type.field` in a setter's error.
  int rc = KFFIObjectSetField(h, &slot->field->name, &v);
  if (v.type_index >= kKFFIStaticObjectBegin) ReleaseObject(v.v_obj);
  if (rc != 0) {
    RaiseFromKFFIError(rc);
    return -1;
  }
  return 0;
}

// The slots of the fields type_index declares itself (made on first use).
const std::vector<FieldSlot*>& SlotsOf(int32_t type_index, const KFFITypeReflection* r) {
  std::lock_guard<std::mutex> lock(g_slots_mutex);
  if (g_slots == nullptr) g_slots = new std::unordered_map<int32_t, std::vector<FieldSlot*>>();
  auto it = g_slots->find(type_index);
  if (it != g_slots->end()) return it->second;
  std::vector<FieldSlot*>& slots = (*g_slots)[type_index];
  const KFFITypeInfo* info = KFFIGetTypeInfo(type_index);
  std::string key = info != nullptr ? std::string(info->type_key.data, info->type_key.size) : "";
  for (int32_t i = 0; i < r->num_fields; ++i) {
    const KFFIFieldInfo* f = &r->fields[i];
    slots.push_back(
        new FieldSlot{f, type_index, key + "." + std::string(f->name.data, f->name.size)});
  }
  return slots;
}

// _install_fields(cls, type_index): a descriptor on cls for each field of the type and of its
// ancestors (a subclass's field of the same name wins).
PyObject* InstallFields(PyObject*, PyObject* args) {
  PyObject* cls;
  int index;
  if (!PyArg_ParseTuple(args, "O!i", &PyType_Type, &cls, &index)) return nullptr;
  auto* tp = reinterpret_cast<PyTypeObject*>(cls);
  if (!PyType_IsSubtype(tp, g_state->object_type)) {
    PyErr_SetString(PyExc_TypeError, "the class must derive from kffi.Object");
    return nullptr;
  }
  const KFFITypeInfo* info = KFFIGetTypeInfo(index);
  if (info == nullptr) return PyErr_Format(PyExc_ValueError, "unknown type index %d", index);
  for (int32_t d = 0; d <= info->type_depth; ++d) {
    const int32_t at = d == info->type_depth ? index : info->type_ancestors[d];
    const KFFITypeReflection* r = KFFIGetTypeReflection(at);
    if (r == nullptr) continue;
    for (FieldSlot* slot : SlotsOf(at, r)) {
      // The getset record lives as long as the slot (the process): descriptors keep a pointer.
      auto* def = new PyGetSetDef{slot->field->name.data, FieldGet, FieldSet, nullptr, slot};
      PyRef descr(PyDescr_NewGetSet(tp, def));
      if (!descr || PyObject_SetAttrString(cls, def->name, descr.get()) != 0) return nullptr;
    }
  }
  Py_RETURN_NONE;
}

// _reflection(type_index) -> None, or (key, parent index, flags, fields, methods) for the type's
// own declarations: fields (name, type_str, type_index, writable, compared: not CompareOff),
// methods (name, Function).
PyObject* Reflection(PyObject*, PyObject* arg) {
  long index = PyLong_AsLong(arg);
  if (index == -1 && PyErr_Occurred()) return nullptr;
  const KFFITypeInfo* info = KFFIGetTypeInfo(static_cast<int32_t>(index));
  const KFFITypeReflection* r = KFFIGetTypeReflection(static_cast<int32_t>(index));
  if (info == nullptr) Py_RETURN_NONE;
  int32_t parent = info->type_depth > 0 ? info->type_ancestors[info->type_depth - 1] : -1;
  PyRef fields(PyTuple_New(r != nullptr ? r->num_fields : 0));
  PyRef methods(PyTuple_New(r != nullptr ? r->num_methods : 0));
  if (!fields || !methods) return nullptr;
  for (int32_t i = 0; r != nullptr && i < r->num_fields; ++i) {
    const KFFIFieldInfo& f = r->fields[i];
    PyObject* t = Py_BuildValue("(s#s#iOO)", f.name.data, static_cast<Py_ssize_t>(f.name.size),
                                f.type_str.data, static_cast<Py_ssize_t>(f.type_str.size),
                                f.type_index, f.setter != nullptr ? Py_True : Py_False,
                                (f.flags & kKFFIFieldFlagCompareOff) != 0 ? Py_False : Py_True);
    if (t == nullptr) return nullptr;
    PyTuple_SET_ITEM(fields.get(), i, t);
  }
  for (int32_t i = 0; r != nullptr && i < r->num_methods; ++i) {
    const KFFIMethodInfo& m = r->methods[i];
    KFFIObjectIncRef(m.method);
    PyRef fn(WrapObject(m.method));
    if (!fn) return nullptr;
    PyObject* t =
        Py_BuildValue("(s#O)", m.name.data, static_cast<Py_ssize_t>(m.name.size), fn.get());
    if (t == nullptr) return nullptr;
    PyTuple_SET_ITEM(methods.get(), i, t);
  }
  return Py_BuildValue("(s#iiOO)", info->type_key.data,
                       static_cast<Py_ssize_t>(info->type_key.size), parent,
                       r != nullptr ? r->flags : 0, fields.get(), methods.get());
}

// _type_key_to_index(key) -> int; an unknown key is a KeyError.
PyObject* TypeKeyToIndex(PyObject*, PyObject* arg) {
  Py_ssize_t size = 0;
  const char* data = PyUnicode_AsUTF8AndSize(arg, &size);
  if (data == nullptr) return nullptr;
  KFFIByteArray key{data, static_cast<size_t>(size)};
  int32_t index = -1;
  if (KFFITypeKeyToIndex(&key, &index) != 0) return RaiseFromKFFIError(-1);
  return PyLong_FromLong(index);
}

PyObject* SetReflectionHook(PyObject*, PyObject* hook) {
  PyObject* old = g_class_hook;
  g_class_hook = Py_NewRef(hook);
  Py_XDECREF(old);
  Py_RETURN_NONE;
}

PyMethodDef kReflectionMethods[] = {{"_install_fields", InstallFields, METH_VARARGS, nullptr},
                                    {"_reflection", Reflection, METH_O, nullptr},
                                    {"_type_key_to_index", TypeKeyToIndex, METH_O, nullptr},
                                    {"_set_reflection_hook", SetReflectionHook, METH_O, nullptr},
                                    {nullptr, nullptr, 0, nullptr}};

}  // namespace

int ReflectedClass(int32_t index, PyObject** out) {
  *out = nullptr;
  if (g_class_hook == nullptr || index < kKFFIDynObjectBegin) return 0;
  const KFFITypeInfo* info = KFFIGetTypeInfo(index);
  if (info == nullptr) return 0;
  bool reflected = false;
  for (int32_t d = 0; d <= info->type_depth && !reflected; ++d) {
    reflected =
        KFFIGetTypeReflection(d == info->type_depth ? index : info->type_ancestors[d]) != nullptr;
  }
  if (!reflected) return 0;
  PyObject* cls = PyObject_CallFunction(g_class_hook, "i", static_cast<int>(index));
  if (cls == nullptr) return -1;
  *out = cls;  // the hook registered it: RegisterObjectClass holds a reference
  Py_DECREF(cls);
  return 0;
}

int InitReflection(PyObject* module) { return PyModule_AddFunctions(module, kReflectionMethods); }

}  // namespace pyglue
}  // namespace kffi
