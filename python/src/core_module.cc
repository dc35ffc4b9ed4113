// python/src/core_module.cc: the kffi._core extension module: registry, modules, helpers.
// SPDX-License-Identifier: Apache-2.0
#include <kffi/contract.h>
#include <kffi/type_traits.h>

#include <cstring>
#include <new>
#include <string>
#include <vector>

#include "py_common.h"

namespace kffi {
namespace pyglue {

PyObject* SetErrorHooks(PyObject* self, PyObject* args);
PyObject* RegisterObjectClass(PyObject* self, PyObject* args);
PyObject* EnvPushStream(PyObject* self, PyObject* args);
PyObject* EnvPopStream(PyObject* self, PyObject* args);
PyObject* EnvGetStream(PyObject* self, PyObject* args);
PyObject* TensorInfo(PyObject* self, PyObject* obj);
PyObject* TensorToDLPack(PyObject* self, PyObject* args);
PyObject* FromDLPack(PyObject* self, PyObject* obj);

KFFIObjectHandle HandleOfType(PyObject* obj, int32_t type_index, const char* what) {
  KFFIObjectHandle h = GetHandle(obj);
  if (h == nullptr && RaiseIfReleased(obj)) return nullptr;
  if (h == nullptr || static_cast<KFFIObject*>(h)->type_index != type_index) {
    PyErr_Format(PyExc_TypeError, "expected a %s, got %s", what, Py_TYPE(obj)->tp_name);
    return nullptr;
  }
  return h;
}

namespace {

/// Reads a str argument as a byte array (borrowed from the str object).
bool StrArg(PyObject* obj, KFFIByteArray* out, const char* what) {
  if (!PyUnicode_Check(obj)) {
    PyErr_Format(PyExc_TypeError, "%s must be a str, got %s", what, Py_TYPE(obj)->tp_name);
    return false;
  }
  Py_ssize_t n = 0;
  out->data = PyUnicode_AsUTF8AndSize(obj, &n);
  out->size = static_cast<size_t>(n);
  return out->data != nullptr;
}

/// Reads a function name as a byte array: its UTF-8, where the bytes a name listed by
/// CollectName had that are not UTF-8 come back as they were (surrogateescape), so that every
/// listed name can be looked up. *keep owns the bytes when they are not the str's own UTF-8.
/// Returns 1; 0 with a TypeError for a non-str; -1 (no exception) for a str that no name can
/// decode to (a surrogate outside surrogateescape's range): no function has that name.
int NameArg(PyObject* obj, KFFIByteArray* out, PyRef* keep) {
  if (!PyUnicode_Check(obj)) {
    PyErr_Format(PyExc_TypeError, "name must be a str, got %s", Py_TYPE(obj)->tp_name);
    return 0;
  }
  Py_ssize_t n = 0;
  const char* utf8 = PyUnicode_AsUTF8AndSize(obj, &n);
  if (utf8 == nullptr) {
    if (!PyErr_ExceptionMatches(PyExc_UnicodeEncodeError)) return 0;
    PyErr_Clear();
    *keep = PyRef(PyUnicode_AsEncodedString(obj, "utf-8", "surrogateescape"));
    if (!*keep) {
      if (!PyErr_ExceptionMatches(PyExc_UnicodeEncodeError)) return 0;
      PyErr_Clear();
      return -1;
    }
    utf8 = PyBytes_AS_STRING(keep->get());
    n = PyBytes_GET_SIZE(keep->get());
  }
  out->data = utf8;
  out->size = static_cast<size_t>(n);
  return 1;
}

/// Adds a name to a list, decoded as NameArg reads it back: bytes that are not UTF-8 become
/// lone surrogates (surrogateescape), never a replacement character that matches no name.
int CollectName(void* ctx, const KFFIByteArray* name) {
  PyObject* s =
      PyUnicode_DecodeUTF8(name->data, static_cast<Py_ssize_t>(name->size), "surrogateescape");
  if (s == nullptr) return 1;
  int rc = PyList_Append(static_cast<PyObject*>(ctx), s);
  Py_DECREF(s);
  return rc != 0 ? 1 : 0;
}

PyObject* GetGlobalFunc(PyObject*, PyObject* name) {
  KFFIByteArray n;
  PyRef keep;
  const int got = NameArg(name, &n, &keep);
  if (got == 0) return nullptr;
  if (got < 0) Py_RETURN_NONE;
  KFFIObjectHandle h = nullptr;
  if (KFFIFunctionGetGlobal(&n, &h) != 0) return RaiseFromKFFIError(-1);
  if (h == nullptr) Py_RETURN_NONE;
  return WrapObject(h);
}

PyObject* RegisterGlobalFunc(PyObject*, PyObject* args) {
  PyObject *name, *func;
  int allow_override = 0;
  if (!PyArg_ParseTuple(args, "OO|p", &name, &func, &allow_override)) return nullptr;
  KFFIByteArray n;
  PyRef keep;
  const int got = NameArg(name, &n, &keep);
  if (got == 0) return nullptr;
  if (got < 0) {
    PyErr_Format(PyExc_ValueError,
                 "register_global_func: the name %R holds a surrogate that no UTF-8 byte sequence "
                 "decodes to",
                 name);
    return nullptr;
  }
  PyRef wrapped;
  KFFIObjectHandle h = GetHandle(func);
  // A released kffi.Function is callable in Python terms, but would fail on every call.
  if (h == nullptr && RaiseIfReleased(func)) return nullptr;
  if (h == nullptr || static_cast<KFFIObject*>(h)->type_index != kKFFIFunction) {
    if (!PyCallable_Check(func)) {
      PyErr_Format(PyExc_TypeError, "register_global_func expects a callable, got %s",
                   Py_TYPE(func)->tp_name);
      return nullptr;
    }
    wrapped = PyRef(FunctionFromCallable(func));
    if (!wrapped) return nullptr;
    h = GetHandle(wrapped.get());
  }
  if (KFFIFunctionSetGlobal(&n, h, allow_override) != 0) return RaiseFromKFFIError(-1);
  Py_RETURN_NONE;
}

PyObject* RemoveGlobalFunc(PyObject*, PyObject* name) {
  KFFIByteArray n;
  PyRef keep;
  const int got = NameArg(name, &n, &keep);
  if (got == 0) return nullptr;
  if (got < 0) Py_RETURN_FALSE;
  int removed = 0;
  if (KFFIFunctionRemoveGlobal(&n, &removed) != 0) return RaiseFromKFFIError(-1);
  return PyBool_FromLong(removed);
}

PyObject* ListGlobalFuncNames(PyObject*, PyObject*) {
  PyRef list(PyList_New(0));
  if (!list) return nullptr;
  if (KFFIFunctionListGlobalNames(CollectName, list.get()) != 0) return RaiseFromKFFIError(-1);
  if (PyErr_Occurred()) return nullptr;
  return list.release();
}

PyObject* LoadModule(PyObject*, PyObject* path) {
  KFFIByteArray p;
  if (!StrArg(path, &p, "path")) return nullptr;
  KFFIObjectHandle h = nullptr;
  int rc;
  Py_BEGIN_ALLOW_THREADS rc = KFFIModuleLoadFromFile(&p, &h);
  Py_END_ALLOW_THREADS if (rc != 0) return RaiseFromKFFIError(-1);
  return WrapObject(h);
}

PyObject* LoadObject(PyObject*, PyObject* path) {
  KFFIByteArray p;
  if (!StrArg(path, &p, "path")) return nullptr;
  KFFIObjectHandle h = nullptr;
  int rc;
  // The first load of an object runs the linker: other threads go on meanwhile.
  Py_BEGIN_ALLOW_THREADS rc = KFFIModuleLoadObject(&p, &h);
  Py_END_ALLOW_THREADS if (rc != 0) return RaiseFromKFFIError(-1);
  return WrapObject(h);
}

PyObject* SystemLib(PyObject*, PyObject*) {
  KFFIObjectHandle h = nullptr;
  if (KFFIModuleGetSystemLib(&h) != 0) return RaiseFromKFFIError(-1);
  return WrapObject(h);
}

PyObject* ModuleGetFunction(PyObject*, PyObject* args) {
  PyObject *mod, *name;
  int query_imports = 1;
  if (!PyArg_ParseTuple(args, "OO|p", &mod, &name, &query_imports)) return nullptr;
  KFFIObjectHandle m = HandleOfType(mod, kKFFIModule, "kffi.Module");
  if (m == nullptr) return nullptr;
  KFFIByteArray n;
  PyRef keep;
  const int got = NameArg(name, &n, &keep);
  if (got == 0) return nullptr;
  if (got < 0) Py_RETURN_NONE;
  KFFIObjectHandle h = nullptr;
  if (KFFIModuleGetFunction(m, &n, query_imports, &h) != 0) return RaiseFromKFFIError(-1);
  if (h == nullptr) Py_RETURN_NONE;
  return WrapObject(h);
}

PyObject* ModuleListFunctions(PyObject*, PyObject* args) {
  PyObject* mod;
  int query_imports = 1;
  if (!PyArg_ParseTuple(args, "O|p", &mod, &query_imports)) return nullptr;
  KFFIObjectHandle m = HandleOfType(mod, kKFFIModule, "kffi.Module");
  if (m == nullptr) return nullptr;
  PyRef list(PyList_New(0));
  if (!list) return nullptr;
  if (KFFIModuleListFunctions(m, query_imports, CollectName, list.get()) != 0) {
    return RaiseFromKFFIError(-1);
  }
  if (PyErr_Occurred()) return nullptr;
  return list.release();
}

PyObject* ModuleGetMetadata(PyObject*, PyObject* args) {
  PyObject *mod, *name;
  if (!PyArg_ParseTuple(args, "OO", &mod, &name)) return nullptr;
  KFFIObjectHandle m = HandleOfType(mod, kKFFIModule, "kffi.Module");
  if (m == nullptr) return nullptr;
  KFFIByteArray n;
  PyRef keep;
  const int got = NameArg(name, &n, &keep);
  if (got == 0) return nullptr;
  if (got < 0) Py_RETURN_NONE;
  KFFIAny out;
  kffi::details::SetNone(&out);
  if (KFFIModuleGetFunctionMetadata(m, &n, &out) != 0) return RaiseFromKFFIError(-1);
  return AnyToPy(&out, nullptr);
}

// kffi.with_contract's native half: fn (a kffi.Function, borrowed) wrapped in a Function that
// checks every call against the contract text before calling fn (Contract::Wrap), and the
// metadata of that contract (as an export with it would carry). Returns (function, metadata str).
// The name, text and doc point into Python str objects; nothing here runs Python code.
PyObject* ContractWrap(PyObject*, PyObject* args) {
  PyObject *fn, *name, *text, *doc;
  if (!PyArg_ParseTuple(args, "OOOO", &fn, &name, &text, &doc)) return nullptr;
  KFFIObjectHandle f = HandleOfType(fn, kKFFIFunction, "kffi.Function");
  KFFIByteArray n, t, d;
  if (f == nullptr || !StrArg(name, &n, "name") || !StrArg(text, &t, "contract") ||
      !StrArg(doc, &d, "doc")) {
    return nullptr;
  }
  KFFIAny wrapped, meta;
  details::SetNone(&wrapped);
  details::SetNone(&meta);
  try {
    Contract c =
        Contract::Parse(std::string_view(n.data, n.size), std::string_view(t.data, t.size));
    Function inner(details::ObjectUnsafe::FromBorrowedHandle<FunctionObj>(f));
    Any w = c.Wrap(std::move(inner), "kffi.with_contract", 0);
    const KFFIByteArray none = details::ToByteArray("None", 4);
    if (KFFIContractGetMetadata(details::ObjectUnsafe::GetHandle(c.object()), &none, &d, &meta) !=
        0) {
      return RaiseFromKFFIError(-1);
    }
    wrapped = details::AnyUnsafe::MoveToOwnedRaw(std::move(w));
  }
  KFFI_CATCH_ALL { return RaiseFromCppException(); }
  PyRef py_meta(AnyToPy(&meta, nullptr));
  PyRef py_fn(AnyToPy(&wrapped, nullptr));
  if (!py_meta || !py_fn) return nullptr;
  return PyTuple_Pack(2, py_fn.get(), py_meta.get());
}

PyObject* ModuleImport(PyObject*, PyObject* args) {
  PyObject *mod, *other;
  if (!PyArg_ParseTuple(args, "OO", &mod, &other)) return nullptr;
  KFFIObjectHandle m = HandleOfType(mod, kKFFIModule, "kffi.Module");
  if (m == nullptr) return nullptr;
  KFFIObjectHandle o = HandleOfType(other, kKFFIModule, "kffi.Module");
  if (o == nullptr) return nullptr;
  if (KFFIModuleImport(m, o) != 0) return RaiseFromKFFIError(-1);
  Py_RETURN_NONE;
}

PyObject* ModuleName(PyObject*, PyObject* mod) {
  KFFIObjectHandle m = HandleOfType(mod, kKFFIModule, "kffi.Module");
  if (m == nullptr) return nullptr;
  KFFIAny out;
  if (KFFIModuleGetName(m, &out) != 0) return RaiseFromKFFIError(-1);
  return AnyToPy(&out, nullptr);
}

PyObject* DTypeFromStr(PyObject*, PyObject* s) {
  KFFIByteArray b;
  if (!StrArg(s, &b, "dtype")) return nullptr;
  DLDataType d;
  if (KFFIDataTypeFromString(&b, &d) != 0) return RaiseFromKFFIError(-1);
  return Py_BuildValue("(iii)", d.code, d.bits, d.lanes);
}

/// _argument_context(index, signature) -> " (argument #index of `signature`)": the end of an
/// argument error, by the runtime's one formatter, for messages Python code builds.
PyObject* ArgumentContextOf(PyObject*, PyObject* args) {
  int index;
  const char* sig;
  if (!PyArg_ParseTuple(args, "is", &index, &sig)) return nullptr;
  const std::string context = kffi::details::ArgumentContext(index, sig);
  return PyUnicode_FromStringAndSize(context.data(), static_cast<Py_ssize_t>(context.size()));
}

PyObject* DTypeToStr(PyObject*, PyObject* args) {
  int code, bits, lanes;
  if (!PyArg_ParseTuple(args, "iii", &code, &bits, &lanes)) return nullptr;
  DLDataType d{static_cast<uint8_t>(code), static_cast<uint8_t>(bits),
               static_cast<uint16_t>(lanes)};
  KFFIAny out;
  if (KFFIDataTypeToString(&d, &out) != 0) return RaiseFromKFFIError(-1);
  return AnyToPy(&out, nullptr);
}

/// _shape_tuple(obj) -> tuple of ints.
PyObject* ShapeTuple(PyObject*, PyObject* obj) {
  KFFIObjectHandle h = HandleOfType(obj, kKFFIShape, "kffi.Shape");
  if (h == nullptr) return nullptr;
  auto* cell = static_cast<KFFIShapeCell*>(KFFIObjectGetCellPtr(h));
  PyObject* t = PyTuple_New(static_cast<Py_ssize_t>(cell->size));
  if (t == nullptr) return nullptr;
  for (size_t i = 0; i < cell->size; ++i) {
    PyTuple_SET_ITEM(t, static_cast<Py_ssize_t>(i), PyLong_FromLongLong(cell->data[i]));
  }
  return t;
}

/// _error_info(obj) -> (kind, message, backtrace) of an Error object.
PyObject* ErrorInfo(PyObject*, PyObject* obj) {
  KFFIObjectHandle h = HandleOfType(obj, kKFFIError, "kffi error object");
  if (h == nullptr) return nullptr;
  KFFIErrorCell* c = KFFIErrorGetCellPtr(h);
  return Py_BuildValue("(s#s#s#)", c->kind.data, static_cast<Py_ssize_t>(c->kind.size),
                       c->message.data, static_cast<Py_ssize_t>(c->message.size), c->backtrace.data,
                       static_cast<Py_ssize_t>(c->backtrace.size));
}

/// _to_kffi(obj) -> the kffi value obj converts to, as Python sees it after a round trip.
PyObject* ToKFFIObject(PyObject*, PyObject* obj) {
  KFFIAny v;
  if (PyToOwnedAny(obj, &v) != 0) return nullptr;
  if (v.type_index < kKFFIStaticObjectBegin) return AnyToPy(&v, nullptr);
  return WrapObject(v.v_obj);
}

PyObject* SetDefaultReleaseGil(PyObject*, PyObject* flag) {
  int v = PyObject_IsTrue(flag);
  if (v < 0) return nullptr;
  g_state->default_release_gil.store(v, std::memory_order_relaxed);
  Py_RETURN_NONE;
}

PyObject* GetDefaultReleaseGil(PyObject*, PyObject*) {
  return PyBool_FromLong(g_state->default_release_gil.load(std::memory_order_relaxed));
}

PyObject* RuntimeVersion(PyObject*, PyObject*) {
  KFFIVersion v;
  KFFIGetVersion(&v);
  return Py_BuildValue("(IIII)", v.major, v.minor, v.patch, v.abi);
}

PyObject* CheckSignals(PyObject*, PyObject*) {
  if (KFFIEnvCheckSignals() != 0) return RaiseFromKFFIError(-1);
  Py_RETURN_NONE;
}

PyMethodDef kMethods[] = {{"get_global_func", GetGlobalFunc, METH_O, nullptr},
                          {"register_global_func", RegisterGlobalFunc, METH_VARARGS, nullptr},
                          {"remove_global_func", RemoveGlobalFunc, METH_O, nullptr},
                          {"list_global_func_names", ListGlobalFuncNames, METH_NOARGS, nullptr},
                          {"load_module", LoadModule, METH_O, nullptr},
                          {"load_object", LoadObject, METH_O, nullptr},
                          {"system_lib", SystemLib, METH_NOARGS, nullptr},
                          {"_module_get_function", ModuleGetFunction, METH_VARARGS, nullptr},
                          {"_module_list_functions", ModuleListFunctions, METH_VARARGS, nullptr},
                          {"_module_get_metadata", ModuleGetMetadata, METH_VARARGS, nullptr},
                          {"_module_import", ModuleImport, METH_VARARGS, nullptr},
                          {"_contract_wrap", ContractWrap, METH_VARARGS, nullptr},
                          {"_module_name", ModuleName, METH_O, nullptr},
                          {"_dtype_from_str", DTypeFromStr, METH_O, nullptr},
                          {"_dtype_to_str", DTypeToStr, METH_VARARGS, nullptr},
                          {"_argument_context", ArgumentContextOf, METH_VARARGS, nullptr},
                          {"_shape_tuple", ShapeTuple, METH_O, nullptr},
                          {"_error_info", ErrorInfo, METH_O, nullptr},
                          {"_to_kffi", ToKFFIObject, METH_O, nullptr},
                          {"_tensor_info", TensorInfo, METH_O, nullptr},
                          {"_tensor_to_dlpack", TensorToDLPack, METH_VARARGS, nullptr},
                          {"from_dlpack", FromDLPack, METH_O, nullptr},
                          {"set_default_release_gil", SetDefaultReleaseGil, METH_O, nullptr},
                          {"get_default_release_gil", GetDefaultReleaseGil, METH_NOARGS, nullptr},
                          {"runtime_version", RuntimeVersion, METH_NOARGS, nullptr},
                          {"check_signals", CheckSignals, METH_NOARGS, nullptr},
                          {"_set_converter_hooks", SetConverterHooks, METH_VARARGS, nullptr},
                          {"_override_exchange_api", OverrideExchangeAPI, METH_VARARGS, nullptr},
                          {"_set_lazy_views", SetLazyViews, METH_VARARGS, nullptr},
                          {"_set_error_hooks", SetErrorHooks, METH_VARARGS, nullptr},
                          {"_register_object_class", RegisterObjectClass, METH_VARARGS, nullptr},
                          {"_env_push_stream", EnvPushStream, METH_VARARGS, nullptr},
                          {"_env_pop_stream", EnvPopStream, METH_VARARGS, nullptr},
                          {"_env_get_stream", EnvGetStream, METH_VARARGS, nullptr},
                          {nullptr, nullptr, 0, nullptr}};

/// Every dtype the package names as an attribute (kffi.float32, kffi.bfloat16, ..., kffi.bool), in
/// the order of kffi.__all__. The runtime formats each (KFFIDataTypeToString), so the spellings
/// are its own; _core.DTYPE_NAMES hands them to Python.
constexpr DLDataType kNamedDtypes[] = {
    {kDLBool, 8, 1},           {kDLInt, 8, 1},
    {kDLInt, 16, 1},           {kDLInt, 32, 1},
    {kDLInt, 64, 1},           {kDLUInt, 8, 1},
    {kDLUInt, 16, 1},          {kDLUInt, 32, 1},
    {kDLUInt, 64, 1},          {kDLFloat, 16, 1},
    {kDLFloat, 32, 1},         {kDLFloat, 64, 1},
    {kDLBfloat, 16, 1},        {kDLComplex, 64, 1},
    {kDLComplex, 128, 1},      {kDLFloat8_e3m4, 8, 1},
    {kDLFloat8_e4m3, 8, 1},    {kDLFloat8_e4m3b11fnuz, 8, 1},
    {kDLFloat8_e4m3fn, 8, 1},  {kDLFloat8_e4m3fnuz, 8, 1},
    {kDLFloat8_e5m2, 8, 1},    {kDLFloat8_e5m2fnuz, 8, 1},
    {kDLFloat8_e8m0fnu, 8, 1}, {kDLFloat6_e2m3fn, 6, 1},
    {kDLFloat6_e3m2fn, 6, 1},  {kDLFloat4_e2m1fn, 4, 1},
};

/// The names of kNamedDtypes as a tuple of str, or NULL with an exception set.
PyObject* NamedDtypes() {
  constexpr Py_ssize_t n = sizeof(kNamedDtypes) / sizeof(kNamedDtypes[0]);
  PyRef names(PyTuple_New(n));
  if (!names) return nullptr;
  for (Py_ssize_t i = 0; i < n; ++i) {
    KFFIAny out;
    if (KFFIDataTypeToString(&kNamedDtypes[i], &out) != 0) return RaiseFromKFFIError(-1);
    PyObject* name = AnyToPy(&out, nullptr);
    if (name == nullptr) return nullptr;
    PyTuple_SET_ITEM(names.get(), i, name);  // steals the reference
  }
  return names.release();
}

/// Module constants: the ABI's type indices, the device type names, the dtype names, limits and
/// the conversion table's type flags, so that Python does not retype them.
int AddConstants(PyObject* m) {
  static const std::pair<const char*, int32_t> kIndices[] = {
      {"None", kKFFINone},
      {"Int", kKFFIInt},
      {"Bool", kKFFIBool},
      {"Float", kKFFIFloat},
      {"OpaquePtr", kKFFIOpaquePtr},
      {"DataType", kKFFIDataType},
      {"Device", kKFFIDevice},
      {"DLTensorPtr", kKFFIDLTensorPtr},
      {"RawStr", kKFFIRawStr},
      {"SmallStr", kKFFISmallStr},
      {"SmallBytes", kKFFISmallBytes},
      {"Object", kKFFIObject},
      {"Str", kKFFIStr},
      {"Bytes", kKFFIBytes},
      {"Error", kKFFIError},
      {"Function", kKFFIFunction},
      {"Shape", kKFFIShape},
      {"Tensor", kKFFITensor},
      {"Array", kKFFIArray},
      {"Map", kKFFIMap},
      {"Module", kKFFIModule},
      {"OpaquePyObject", kKFFIOpaquePyObject},
      {"List", kKFFIList},
      {"Dict", kKFFIDict},
  };
  PyRef indices(PyDict_New());
  PyRef devices(PyDict_New());
  if (!indices || !devices) return -1;
  for (const auto& kv : kIndices) {
    PyRef v(PyLong_FromLong(kv.second));
    if (!v || PyDict_SetItemString(indices.get(), kv.first, v.get()) != 0) return -1;
  }
  for (int32_t d = 1; d < 64; ++d) {
    const char* name = details::DeviceTypeName(d);
    if (std::strcmp(name, "unknown_device") == 0) continue;
    PyRef k(PyLong_FromLong(d));
    PyRef v(PyUnicode_FromString(name));
    if (!k || !v || PyDict_SetItem(devices.get(), k.get(), v.get()) != 0) return -1;
  }
  if (PyModule_AddObjectRef(m, "TYPE_INDEX", indices.get()) != 0 ||
      PyModule_AddObjectRef(m, "DEVICE_TYPE_NAMES", devices.get()) != 0 ||
      PyModule_AddIntConstant(m, "TENSOR_FLAG_READ_ONLY", kKFFITensorFlagReadOnly) != 0 ||
      PyModule_AddIntConstant(m, "MAX_CONTAINER_DEPTH", kMaxContainerDepth) != 0 ||
      PyModule_AddIntConstant(m, "MAX_CONTRACT_BYTES",
                              static_cast<long>(kffi::details::contract::kMaxContractBytes)) != 0 ||
      PyModule_AddIntConstant(m, "MAX_NDIM",
                              static_cast<long>(kffi::details::contract::kMaxNdim)) != 0 ||
      PyModule_AddIntConstant(m, "TYPE_FLAG_READ_ONLY", kTypeReadOnly) != 0 ||
      PyModule_AddIntConstant(m, "TYPE_FLAG_LAZY_VIEWS", kTypeLazyViews) != 0) {
    return -1;
  }
  PyRef dtype_names(NamedDtypes());
  if (!dtype_names || PyModule_AddObjectRef(m, "DTYPE_NAMES", dtype_names.get()) != 0) {
    return -1;
  }
  return 0;
}

State* GetModuleState(PyObject* m) { return static_cast<State*>(PyModule_GetState(m)); }

int ModuleExec(PyObject* m) {
  if (g_state != nullptr) {
    // libkffi's registries (global functions, Python callbacks) are process-wide: one module.
    PyErr_SetString(PyExc_ImportError,
                    "kffi._core can be initialised only once per process (no subinterpreters, "
                    "no second copy)");
    return -1;
  }
  State* state = new (GetModuleState(m)) State();
  g_state = state;
  if (InitObjectTypes(m, state) != 0 || InitTensorSupport(m) != 0 || InitEnv(m) != 0 ||
      InitCuda(m) != 0 || InitReflection(m) != 0 || InitRecords(m) != 0 || InitTvmBridge(m) != 0 ||
      InitShapeRpn(m) != 0 || InitContainers(m) != 0 || AddConstants(m) != 0) {
    return -1;
  }
  return 0;
}

int ModuleTraverse(PyObject* m, visitproc visit, void* arg) {
  State* s = GetModuleState(m);
  if (s == nullptr || s != g_state) return 0;
  Py_VISIT(s->object_type);
  Py_VISIT(s->function_type);
  for (PyObject* h : s->hooks) Py_VISIT(h);
  for (PyObject* r : s->retired) Py_VISIT(r);
  if (const LazyViewMethods* l = s->lazy_views.load(std::memory_order_relaxed)) {
    Py_VISIT(l->tensor_base);
    Py_VISIT(l->is_conj);
    Py_VISIT(l->is_neg);
    Py_VISIT(l->dtype);
  }
  for (auto& c : s->static_classes) Py_VISIT(c.load(std::memory_order_relaxed));
  for (auto& c : s->dyn_classes) Py_VISIT(c.second);
  return s->types.Traverse(visit, arg);
}

int ModuleClear(PyObject* m) {
  State* s = GetModuleState(m);
  if (s == nullptr || s != g_state) return 0;
  // The types and classes stay: objects being torn down may still wrap and convert. What the
  // state holds is released by ModuleFree.
  for (PyObject*& h : s->hooks) Py_CLEAR(h);
  return 0;
}

void ModuleFree(void* mod) {
  auto* m = static_cast<PyObject*>(mod);
  State* s = GetModuleState(m);
  if (s == nullptr || s != g_state) return;
  g_state = nullptr;
  s->types.Clear();
  for (PyObject*& h : s->hooks) Py_CLEAR(h);
  for (PyObject* r : s->retired) Py_DECREF(r);
  s->retired.clear();
  FreeLazyViewMethods(s->lazy_views.exchange(nullptr));
  for (auto& c : s->static_classes) Py_XDECREF(c.exchange(nullptr));
  for (auto& c : s->dyn_classes) Py_DECREF(c.second);
  s->dyn_classes.clear();
  Py_CLEAR(s->function_type);
  Py_CLEAR(s->object_type);
  s->~State();
}

PyModuleDef_Slot kSlots[] = {
    {Py_mod_exec, reinterpret_cast<void*>(ModuleExec)},
#ifdef Py_mod_multiple_interpreters
    {Py_mod_multiple_interpreters, Py_MOD_MULTIPLE_INTERPRETERS_NOT_SUPPORTED},
#endif
#ifdef Py_mod_gil
    // Free-threaded CPython: the conversion table is read without a lock, registries are
    // published atomically, and per-call state lives on the C stack.
    {Py_mod_gil, Py_MOD_GIL_NOT_USED},
#endif
    {0, nullptr}};

PyModuleDef kModuleDef = {PyModuleDef_HEAD_INIT,
                          "kffi._core",
                          "The kffi CPython extension: fast calls into kffi functions.",
                          sizeof(State),
                          kMethods,
                          kSlots,
                          ModuleTraverse,
                          ModuleClear,
                          ModuleFree};

}  // namespace
}  // namespace pyglue
}  // namespace kffi

PyMODINIT_FUNC PyInit__core() { return PyModuleDef_Init(&kffi::pyglue::kModuleDef); }
