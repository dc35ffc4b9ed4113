// python/src/core_module.cc: the kffi._core extension module: registry, modules, helpers.
// SPDX-License-Identifier: Apache-2.0
#include <kffi/container/map.h>
#include <kffi/contract.h>
#include <kffi/shape_rpn_details.h>
#include <kffi/type_traits.h>

#include <cmath>
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

KFFIObjectHandle HandleOfType(PyObject* obj, int32_t type_index, const char* what) {
  KFFIObjectHandle h = GetHandle(obj);
  if (h == nullptr && RaiseIfReleased(obj)) return nullptr;
  if (h == nullptr || static_cast<KFFIObject*>(h)->type_index != type_index) {
    PyErr_Format(PyExc_TypeError, "expected a %s, got %s", what, Py_TYPE(obj)->tp_name);
    return nullptr;
  }
  return h;
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

PyObject* DTypeToStr(PyObject*, PyObject* args) {
  int code, bits, lanes;
  if (!PyArg_ParseTuple(args, "iii", &code, &bits, &lanes)) return nullptr;
  DLDataType d{static_cast<uint8_t>(code), static_cast<uint8_t>(bits),
               static_cast<uint16_t>(lanes)};
  KFFIAny out;
  if (KFFIDataTypeToString(&d, &out) != 0) return RaiseFromKFFIError(-1);
  return AnyToPy(&out, nullptr);
}

/// kffi._abstract.eval_shape_rpn: the one RPN evaluator (kffi/shape_rpn_details.h) over Python
/// values: ints computed as checked int64, symbolic dimensions (torch.SymInt, JAX's) through
/// their own operators. Its messages are _abstract's (Python reprs of the tokens, the expression
/// and the symbols), returned for it to raise as a ContractError.
class PyRpnDomain {
 public:
  struct Value {
    bool is_int = false;
    int64_t i = 0;
    PyRef obj;  // a symbolic value (not is_int)
  };
  struct Failed {};  // unwinds the evaluator: message_ holds why, or a Python error is set

  PyRpnDomain(PyObject* rpn, PyObject* symbols, std::string what)
      : rpn_(rpn), symbols_(symbols), what_(std::move(what)) {}

  void Token(size_t i, details::RpnOp* op, int64_t* literal, Value* symbol) {
    // Read from the domain's own tuple: a symbolic value's operator (Python code) may change a
    // list the caller passed while the evaluation runs.
    PyObject* tok = PyTuple_GET_ITEM(tokens_.get(), static_cast<Py_ssize_t>(i));  // borrowed
    if (PyLong_Check(tok) && !PyBool_Check(tok)) {
      *op = details::RpnOp::kLit;
      *literal = IntOrOverflow(tok);
      return;
    }
    if (PyUnicode_Check(tok)) {
      const char* t = PyUnicode_AsUTF8(tok);
      if (t == nullptr) throw Failed{};
      static constexpr std::pair<const char*, details::RpnOp> kOps[] = {
          {"+", details::RpnOp::kAdd}, {"-", details::RpnOp::kSub},
          {"*", details::RpnOp::kMul}, {"//", details::RpnOp::kFloorDiv},
          {"%", details::RpnOp::kMod}, {"neg", details::RpnOp::kNeg}};
      for (const auto& [name, o] : kOps) {
        if (std::strcmp(t, name) == 0) {
          *op = o;
          return;
        }
      }
      *op = details::RpnOp::kSym;
      *symbol = SymbolValue(tok);
      return;
    }
    Fail(": cannot read token " + Repr(tok) + " in " + Str(rpn_));
  }
  Value Int(int64_t v) { return Value{true, v, PyRef()}; }
  bool AsInt(const Value& v, int64_t* out) {
    *out = v.i;
    return v.is_int;
  }
  Value Apply(details::RpnOp op, const Value& a, const Value& c) {
    PyRef pa = Object(a), pc = Object(c);
    PyObject* r = nullptr;
    switch (op) {
      case details::RpnOp::kAdd:
        r = PyNumber_Add(pa.get(), pc.get());
        break;
      case details::RpnOp::kSub:
        r = PyNumber_Subtract(pa.get(), pc.get());
        break;
      case details::RpnOp::kMul:
        r = PyNumber_Multiply(pa.get(), pc.get());
        break;
      case details::RpnOp::kFloorDiv:
        r = PyNumber_FloorDivide(pa.get(), pc.get());
        break;
      case details::RpnOp::kMod:
        r = PyNumber_Remainder(pa.get(), pc.get());
        break;
      default:
        r = PyNumber_Negative(pa.get());
    }
    if (r == nullptr) throw Failed{};
    return FromObject(PyRef(r));
  }
  [[noreturn]] void Fail(details::RpnFailure why, details::RpnOp op, size_t count) {
    switch (why) {
      case details::RpnFailure::kMissingOperand:
        if (op == details::RpnOp::kNeg) Fail(": operator 'neg' needs an operand in " + Str(rpn_));
        Fail(std::string(" needs two operands in ").insert(0, OpRepr(op)) + Str(rpn_));
      case details::RpnFailure::kDivisionByZero:
      case details::RpnFailure::kModuloByZero:
        Fail(std::string(": ") +
             (why == details::RpnFailure::kDivisionByZero ? "division" : "modulo") +
             " by zero in " + Str(rpn_) + " with " + SymbolsText());
      case details::RpnFailure::kOverflow:
        Fail(": int64 overflow in " + Str(rpn_) + " with " + SymbolsText());
      default:
        Fail(": " + Str(rpn_) + " leaves " + std::to_string(count) + " values instead of one");
    }
  }
  [[noreturn]] void Fail(const std::string& why) {
    message_ = what_ + why;
    throw Failed{};
  }
  std::string SymbolsText() {
    PyRef d(PyObject_CallOneArg(reinterpret_cast<PyObject*>(&PyDict_Type), symbols_));
    if (!d) throw Failed{};
    return Str(d.get());
  }
  const std::string& message() const { return message_; }
  size_t num_tokens() const { return static_cast<size_t>(PyTuple_GET_SIZE(tokens_.get())); }
  /// Takes the tokens (a tuple of rpn's items); false with a Python error set.
  bool SetTokens() {
    tokens_ = PyRef(PySequence_Tuple(rpn_));
    return static_cast<bool>(tokens_);
  }

 private:
  static std::string Text(PyObject* s) {
    if (s == nullptr) throw Failed{};
    PyRef keep(s);
    const char* t = PyUnicode_AsUTF8(s);
    if (t == nullptr) throw Failed{};
    return t;
  }
  static std::string Repr(PyObject* o) { return Text(PyObject_Repr(o)); }
  static std::string OpRepr(details::RpnOp op) {
    return std::string(": operator '") + details::RpnOpName(op) + "'";
  }
  static std::string Str(PyObject* o) { return Text(PyObject_Str(o)); }

  int64_t IntOrOverflow(PyObject* v) {
    int overflow = 0;
    long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (x == -1 && PyErr_Occurred()) throw Failed{};
    if (overflow != 0) Fail(details::RpnFailure::kOverflow, details::RpnOp::kLit, 0);
    return static_cast<int64_t>(x);
  }
  PyRef Object(const Value& v) {
    if (!v.is_int) return PyRef(Py_NewRef(v.obj.get()));
    PyObject* o = PyLong_FromLongLong(v.i);
    if (o == nullptr) throw Failed{};
    return PyRef(o);
  }
  Value FromObject(PyRef o) {
    if (PyLong_Check(o.get()) && !PyBool_Check(o.get())) return Int(IntOrOverflow(o.get()));
    return Value{false, 0, std::move(o)};
  }
  /// _abstract._symbol_value: integral numbers as ints, symbolic values as they are; bools and
  /// other numbers refused.
  Value SymbolValue(PyObject* tok) {
    int has = PySequence_Contains(symbols_, tok);
    if (has < 0) throw Failed{};
    if (has == 0) {
      PyRef names(PySequence_List(symbols_));
      if (!names || PyList_Sort(names.get()) != 0) throw Failed{};
      std::string bound;
      for (Py_ssize_t k = 0; k < PyList_GET_SIZE(names.get()); ++k) {
        bound += (k ? ", " : "") + Str(PyList_GET_ITEM(names.get(), k));
      }
      Fail(": symbol " + Repr(tok) +
           " is not bound by any input (bound: " + (bound.empty() ? "none" : bound) + ")");
    }
    PyRef value(PyObject_GetItem(symbols_, tok));
    if (!value) throw Failed{};
    if (!numbers_) {
      PyRef mod(PyImport_ImportModule("numbers"));
      if (!mod) throw Failed{};
      numbers_ = PyRef(PyObject_GetAttrString(mod.get(), "Number"));
      integral_ = PyRef(PyObject_GetAttrString(mod.get(), "Integral"));
      if (!numbers_ || !integral_) throw Failed{};
    }
    int is_number = PyObject_IsInstance(value.get(), numbers_.get());
    int is_integral = PyObject_IsInstance(value.get(), integral_.get());
    if (is_number < 0 || is_integral < 0) throw Failed{};
    if (PyBool_Check(value.get()) || (is_number && !is_integral)) {
      Fail(": symbol " + Repr(tok) + " is bound to " + Repr(value.get()) + ", not an integer");
    }
    if (is_integral) {
      PyRef as_int(PyNumber_Long(value.get()));
      if (!as_int) throw Failed{};
      return FromObject(std::move(as_int));
    }
    return FromObject(std::move(value));
  }

  PyObject* rpn_;      // a list or tuple (borrowed from the call), for messages
  PyRef tokens_;       // its items when the evaluation starts (SetTokens)
  PyObject* symbols_;  // a mapping (borrowed from the call)
  std::string what_;
  std::string message_;
  PyRef numbers_, integral_;
};

/// _eval_shape_rpn(rpn, symbols, what, nonnegative, max_tokens) -> (value, None) or
/// (None, message of the ContractError to raise).
PyObject* EvalShapeRpn(PyObject*, PyObject* args) {
  PyObject *rpn, *symbols;
  const char* what;
  int nonnegative;
  Py_ssize_t max_tokens;
  if (!PyArg_ParseTuple(args, "OOspn", &rpn, &symbols, &what, &nonnegative, &max_tokens)) {
    return nullptr;
  }
  PyRpnDomain domain(rpn, symbols, what);
  try {
    if (!PyList_Check(rpn) && !PyTuple_Check(rpn)) {
      PyRef type_name(
          PyObject_GetAttrString(reinterpret_cast<PyObject*>(Py_TYPE(rpn)), "__name__"));
      const char* t = type_name ? PyUnicode_AsUTF8(type_name.get()) : nullptr;
      if (t == nullptr) return nullptr;
      domain.Fail(std::string(": shape_rpn must be a list of tokens, got ") + t);
    }
    const Py_ssize_t n = PySequence_Fast_GET_SIZE(rpn);
    if (n > max_tokens) {
      domain.Fail(": expression has " + std::to_string(n) + " tokens (at most " +
                  std::to_string(max_tokens) + ")");
    }
    if (!domain.SetTokens()) return nullptr;
    PyRpnDomain::Value v = details::EvalRpn(domain, domain.num_tokens());
    if (v.is_int && v.i < 0 && nonnegative) {
      domain.Fail(": evaluates to " + std::to_string(v.i) + " (negative) with " +
                  domain.SymbolsText());
    }
    PyObject* out = v.is_int ? PyLong_FromLongLong(v.i) : v.obj.release();
    if (out == nullptr) return nullptr;
    return Py_BuildValue("(NO)", out, Py_None);
  } catch (const PyRpnDomain::Failed&) {
    if (PyErr_Occurred()) return nullptr;
    return Py_BuildValue("(Os)", Py_None, domain.message().c_str());
  }
}

/// An owned copy of a stored value (a reference more for objects); throws on failure.
Any OwnedCopy(const KFFIAny& stored) {
  KFFIAny out;
  if (KFFIAnyViewToOwnedAny(&stored, &out) != 0) details::ThrowRaisedError(-1);
  return details::AnyUnsafe::FromOwnedRaw(out);
}

/// _seq_items(obj) -> list: the elements of an Array or List.
PyObject* SeqItems(PyObject*, PyObject* obj) {
  KFFIObjectHandle h = GetHandle(obj);
  if (h == nullptr && RaiseIfReleased(obj)) return nullptr;
  if (h == nullptr || (static_cast<KFFIObject*>(h)->type_index != kKFFIArray &&
                       static_cast<KFFIObject*>(h)->type_index != kKFFIList)) {
    PyErr_Format(PyExc_TypeError, "expected a kffi.Array or kffi.List, got %s",
                 Py_TYPE(obj)->tp_name);
    return nullptr;
  }
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
  KFFIObjectHandle h = GetHandle(obj);
  if (h == nullptr && RaiseIfReleased(obj)) return nullptr;
  if (h == nullptr) {
    PyErr_SetString(PyExc_TypeError, "expected a kffi sequence");
    return nullptr;
  }
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
  KFFIObjectHandle h = GetHandle(obj);
  if (h == nullptr && RaiseIfReleased(obj)) return nullptr;
  if (h == nullptr) {
    PyErr_SetString(PyExc_TypeError, "expected a kffi sequence");
    return nullptr;
  }
  return PyLong_FromLongLong(static_cast<KFFISeqCell*>(KFFIObjectGetCellPtr(h))->size);
}

/// _map_items(obj) -> list of (key, value) for a Map or Dict, in insertion order.
PyObject* MapItems(PyObject*, PyObject* obj) {
  KFFIObjectHandle h = GetHandle(obj);
  if (h == nullptr && RaiseIfReleased(obj)) return nullptr;
  if (h == nullptr || (static_cast<KFFIObject*>(h)->type_index != kKFFIMap &&
                       static_cast<KFFIObject*>(h)->type_index != kKFFIDict)) {
    PyErr_Format(PyExc_TypeError, "expected a kffi.Map or kffi.Dict, got %s",
                 Py_TYPE(obj)->tp_name);
    return nullptr;
  }
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
  KFFIObjectHandle h = GetHandle(obj);
  if (h == nullptr && RaiseIfReleased(obj)) return nullptr;
  if (h == nullptr || (static_cast<KFFIObject*>(h)->type_index != kKFFIMap &&
                       static_cast<KFFIObject*>(h)->type_index != kKFFIDict)) {
    PyErr_Format(PyExc_TypeError, "expected a kffi.Map or kffi.Dict, got %s",
                 Py_TYPE(obj)->tp_name);
    return nullptr;
  }
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
  KFFIObjectHandle h = GetHandle(obj);
  if (h == nullptr && RaiseIfReleased(obj)) return nullptr;
  if (h == nullptr || (static_cast<KFFIObject*>(h)->type_index != kKFFIMap &&
                       static_cast<KFFIObject*>(h)->type_index != kKFFIDict)) {
    PyErr_Format(PyExc_TypeError, "expected a kffi.Map or kffi.Dict, got %s",
                 Py_TYPE(obj)->tp_name);
    return nullptr;
  }
  return PyLong_FromLongLong(
      static_cast<const details::MapObjBase*>(static_cast<Object*>(h))->size());
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
                          {"_eval_shape_rpn", EvalShapeRpn, METH_VARARGS, nullptr},
                          {"_seq_items", SeqItems, METH_O, nullptr},
                          {"_seq_get", SeqGet, METH_VARARGS, nullptr},
                          {"_seq_len", SeqLen, METH_O, nullptr},
                          {"_map_items", MapItems, METH_O, nullptr},
                          {"_map_get", MapGet, METH_VARARGS, nullptr},
                          {"_map_len", MapLen, METH_O, nullptr},
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
      PyModule_AddIntConstant(m, "TYPE_FLAG_TORCH", kTypeTorch) != 0) {
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
      InitCuda(m) != 0 || InitReflection(m) != 0 || InitTvmBridge(m) != 0 || AddConstants(m) != 0) {
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
  if (const TorchRefs* t = s->torch.load(std::memory_order_relaxed)) {
    Py_VISIT(t->tensor_base);
    Py_VISIT(t->is_conj);
    Py_VISIT(t->is_neg);
    Py_VISIT(t->dtype);
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
  FreeTorchRefs(s->torch.exchange(nullptr));
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
