// python/src/py_shape_rpn.cc: _core._eval_shape_rpn, the one RPN evaluator over Python values.
// SPDX-License-Identifier: Apache-2.0
#include <kffi/contract/shape_rpn.h>

#include <cstring>
#include <string>

#include "py_common.h"

namespace kffi {
namespace pyglue {
namespace {

/// kffi._abstract.eval_shape_rpn: the one RPN evaluator (kffi/contract/shape_rpn.h) over Python
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
      if (details::RpnOpFromName(t, op)) return;
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

PyMethodDef kShapeRpnMethods[] = {{"_eval_shape_rpn", EvalShapeRpn, METH_VARARGS, nullptr},
                                  {nullptr, nullptr, 0, nullptr}};

}  // namespace

int InitShapeRpn(PyObject* module) { return PyModule_AddFunctions(module, kShapeRpnMethods); }

}  // namespace pyglue
}  // namespace kffi
