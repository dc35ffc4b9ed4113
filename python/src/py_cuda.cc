// python/src/py_cuda.cc: kffi.cuda's launcher: a kffi Function that checks a contract, packs the
// arguments into kernel parameters and launches a cubin kernel on the environment stream.
//
// Everything per call is here in C++ (no Python runs unless a launch-configuration callback was
// given): the contract's compiled check, grid/block/shared-memory expressions evaluated from the
// symbols it bound, the device guard of the first CUDA tensor, the stream and cuLaunchKernel.
#include <kffi/container/array.h>
#include <kffi/contract.h>
#include <kffi/cuda_cubin.h>
#include <kffi/shape_rpn_details.h>

#include <atomic>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "py_common.h"

namespace kffi {
namespace pyglue {
namespace {

namespace kc = ::kffi::details::contract;

/// Most kernel parameters a launcher packs (each a call argument of the contract).
constexpr size_t kMaxKernelParams = 128;

/// How a call argument becomes a kernel parameter.
enum class ParamKind : char {
  kPointer = 'P',  // a tensor (or None under Optional): its data pointer plus byte_offset
  kInt32 = 'i',
  kInt64 = 'l',
  kFloat32 = 'f',
  kFloat64 = 'd',
  kBool = 'b',
};

/// One token of an expression program in reverse Polish notation.
struct Token {
  enum Kind : int8_t { kConst, kSymbol, kArg, kAdd, kSub, kMul, kFloorDiv, kMod, kNeg } kind;
  int64_t value;  // the constant, the symbol's slot or the argument's index
};

/// The launch configuration's seven values, in this order: grid x, y, z, block x, y, z, shared
/// memory bytes.
constexpr int kLaunchValues = 7;
constexpr const char* kLaunchValueNames[kLaunchValues] = {
    "grid[0]", "grid[1]", "grid[2]", "block[0]", "block[1]", "block[2]", "shared_mem"};

struct Launcher {
  Launcher(Contract c, kffi::cuda::CubinKernel k, std::string n)
      : contract(std::move(c)), kernel(std::move(k)), name(std::move(n)) {}
  Contract contract;
  kffi::cuda::CubinKernel kernel;
  std::string name;
  std::vector<ParamKind> kinds;
  std::vector<Token> programs[kLaunchValues];
  std::vector<std::string> symbol_names;  // by slot, for messages
  Function config;                        // a launch-configuration callback, or undefined
  std::atomic<int> shared_attr_set[kffi::cuda::CubinKernel::kMaxDevices] = {};
};

[[noreturn]] void ThrowExpr(const Launcher& l, int which, const std::string& why) {
  KFFI_THROW(ValueError) << "kffi.cuda kernel `" << l.name << "`: " << kLaunchValueNames[which]
                         << " " << why;
}

/// Evaluates program `which` with Python's integer semantics (kffi's one RPN evaluator,
/// kffi/shape_rpn_details.h); overflow, division by zero and an unbound symbol are ValueErrors.
class LaunchRpn {
 public:
  using Value = int64_t;
  LaunchRpn(const Launcher& l, int which, const kc::RunState& st, uint64_t bound,
            const KFFIAny* args)
      : l_(l), which_(which), st_(st), bound_(bound), args_(args) {}

  void Token(size_t i, kffi::details::RpnOp* op, int64_t* literal, int64_t* value) {
    static constexpr kffi::details::RpnOp kOps[] = {
        kffi::details::RpnOp::kLit,      kffi::details::RpnOp::kSym, kffi::details::RpnOp::kSym,
        kffi::details::RpnOp::kAdd,      kffi::details::RpnOp::kSub, kffi::details::RpnOp::kMul,
        kffi::details::RpnOp::kFloorDiv, kffi::details::RpnOp::kMod, kffi::details::RpnOp::kNeg};
    const struct Token& t = l_.programs[which_][i];
    *op = kOps[t.kind];
    if (t.kind == Token::kConst) {
      *literal = t.value;
    } else if (t.kind == Token::kSymbol) {
      if (((bound_ >> t.value) & 1) == 0) {
        ThrowExpr(
            l_, which_,
            "uses the symbol `" + l_.symbol_names[t.value] + "`, which this call leaves unbound");
      }
      *value = st_.values[t.value];
    } else if (t.kind == Token::kArg) {
      const KFFIAny& a = args_[t.value];
      if (a.type_index != kKFFIInt && a.type_index != kKFFIBool) {
        ThrowExpr(l_, which_,
                  "reads argument " + std::to_string(t.value) + ", which is not an int");
      }
      *value = a.v_int64;
    }
  }
  int64_t Int(int64_t v) { return v; }
  bool AsInt(int64_t v, int64_t* out) {
    *out = v;
    return true;
  }
  // Every operand is an int64, so the evaluator never asks for symbolic arithmetic.
  int64_t Apply(kffi::details::RpnOp, int64_t a, int64_t) { return a; }
  [[noreturn]] void Fail(kffi::details::RpnFailure why, kffi::details::RpnOp, size_t) {
    using F = kffi::details::RpnFailure;
    ThrowExpr(l_, which_,
              why == F::kDivisionByZero || why == F::kModuloByZero ? "divides by zero"
              : why == F::kOverflow                                ? "overflows int64"
                                                                   : "is malformed");
  }

 private:
  const Launcher& l_;
  const int which_;
  const kc::RunState& st_;
  const uint64_t bound_;
  const KFFIAny* const args_;
};

int64_t Evaluate(const Launcher& l, int which, const kc::RunState& st, uint64_t bound,
                 const KFFIAny* args) {
  LaunchRpn d(l, which, st, bound, args);
  return kffi::details::EvalRpn(d, l.programs[which].size());
}

/// The seven launch values from the callback's result (a sequence of seven ints).
void ConfigFromCallback(const Launcher& l, const KFFIAny* args, int32_t n, int64_t out[]) {
  Any r = l.config.CallPacked(PackedArgs(reinterpret_cast<const AnyView*>(args), n));
  std::optional<Array<int64_t>> a = r.as<Array<int64_t>>();
  if (!a.has_value() || a->size() != kLaunchValues) {
    KFFI_THROW(TypeError) << "kffi.cuda kernel `" << l.name
                          << "`: the launch callback must return (grid, block) or (grid, block, "
                             "shared_mem) of ints";
  }
  for (int i = 0; i < kLaunchValues; ++i) out[i] = (*a)[i];
}

void Launch(Launcher& l, PackedArgs packed, Any*) {
  const KFFIAny* args = reinterpret_cast<const KFFIAny*>(packed.data());
  const int32_t n = packed.size();
  kc::RunState st;
  kc::Run(*l.contract.plan(), args, n, &st);
  const uint64_t bound = st.bound | l.contract.plan()->static_bound;

  // The device of the first CUDA tensor: current for the launch, and its environment stream.
  const DLTensor* first = nullptr;
  void* params[kMaxKernelParams];
  union Slot {
    void* p;
    int64_t i64;
    int32_t i32;
    float f32;
    double f64;
    bool b;
  } storage[kMaxKernelParams];
  for (size_t i = 0; i < l.kinds.size(); ++i) {
    const KFFIAny& a = args[i];
    Slot& s = storage[i];
    switch (l.kinds[i]) {
      case ParamKind::kPointer: {
        const DLTensor* t = kffi::details::TensorValuePtr(&a);
        s.p = t == nullptr ? nullptr : static_cast<char*>(t->data) + t->byte_offset;
        if (first == nullptr && t != nullptr && t->device.device_type == kDLCUDA) first = t;
        break;
      }
      case ParamKind::kInt32:
        s.i32 = static_cast<int32_t>(a.v_int64);
        break;
      case ParamKind::kInt64:
        s.i64 = a.v_int64;
        break;
      case ParamKind::kFloat32:
        s.f32 = static_cast<float>(a.type_index == kKFFIFloat ? a.v_float64
                                                              : static_cast<double>(a.v_int64));
        break;
      case ParamKind::kFloat64:
        s.f64 = a.type_index == kKFFIFloat ? a.v_float64 : static_cast<double>(a.v_int64);
        break;
      case ParamKind::kBool:
        s.b = a.v_int64 != 0;
        break;
    }
    params[i] = &s;
  }
  if (KFFI_UNLIKELY(first == nullptr)) {
    KFFI_THROW(ValueError) << "kffi.cuda kernel `" << l.name
                           << "`: no argument is a CUDA tensor; a launch takes its device and "
                              "stream from the first one";
  }
  int64_t v[kLaunchValues];
  if (l.config.defined()) {
    ConfigFromCallback(l, args, n, v);
  } else {
    for (int i = 0; i < kLaunchValues; ++i) v[i] = Evaluate(l, i, st, bound, args);
  }
  for (int i = 0; i < kLaunchValues; ++i) {
    const int64_t lo = i == kLaunchValues - 1 ? 0 : 1;
    if (KFFI_UNLIKELY(v[i] < lo || v[i] > INT32_MAX)) {
      ThrowExpr(l, i,
                "is " + std::to_string(v[i]) + "; expected " + std::to_string(lo) +
                    " <= value <= 2147483647");
    }
  }
  const int device = first->device.device_id;
  kffi::details::DeviceRestore restore;
  kffi::details::EnterCudaDevice(first, &restore);
  if (v[6] > 48 * 1024 && device >= 0 && device < kffi::cuda::CubinKernel::kMaxDevices &&
      l.shared_attr_set[device].load(std::memory_order_relaxed) < v[6]) {
    // Launches above 48 KiB need the kernel's limit raised first (once per device and size).
    l.kernel.SetMaxDynamicSharedMemory(device, static_cast<int>(v[6]));
    l.shared_attr_set[device].store(static_cast<int>(v[6]), std::memory_order_relaxed);
  }
  void* stream = KFFIEnvGetStream(kDLCUDA, device);
  l.kernel.Launch(
      device,
      {static_cast<uint32_t>(v[0]), static_cast<uint32_t>(v[1]), static_cast<uint32_t>(v[2])},
      {static_cast<uint32_t>(v[3]), static_cast<uint32_t>(v[4]), static_cast<uint32_t>(v[5])},
      params, stream, static_cast<uint32_t>(v[6]));
}

// ---- Python entry points -----------------------------------------------------------------------

const char kModuleCapsule[] = "kffi.cuda.CubinModule";

void DeleteModuleCapsule(PyObject* cap) {
  delete static_cast<kffi::cuda::CubinModule*>(PyCapsule_GetPointer(cap, kModuleCapsule));
}

std::string Utf8(PyObject* s) {
  Py_ssize_t size = 0;
  const char* data = PyUnicode_AsUTF8AndSize(s, &size);
  if (data == nullptr) {
    PyErr_Clear();
    KFFI_THROW(TypeError) << "kffi.cuda: expected a str";
  }
  return std::string(data, static_cast<size_t>(size));
}

/// _cuda_module(images: list[tuple[str, bytes]], label: str) -> capsule of a CubinModule.
PyObject* CudaModule(PyObject*, PyObject* args) {
  PyObject *images, *label;
  if (!PyArg_ParseTuple(args, "O!U", &PyList_Type, &images, &label)) return nullptr;
  try {
    std::vector<std::pair<std::string, std::string>> list;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(images); ++i) {
      PyObject* item = PyList_GET_ITEM(images, i);
      if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 2 ||
          !PyUnicode_Check(PyTuple_GET_ITEM(item, 0)) ||
          !PyBytes_Check(PyTuple_GET_ITEM(item, 1))) {
        KFFI_THROW(TypeError) << "kffi.cuda: images are (arch: str, image: bytes) pairs";
      }
      PyObject* data = PyTuple_GET_ITEM(item, 1);
      list.emplace_back(
          Utf8(PyTuple_GET_ITEM(item, 0)),
          std::string(PyBytes_AS_STRING(data), static_cast<size_t>(PyBytes_GET_SIZE(data))));
    }
    auto* mod = new kffi::cuda::CubinModule(std::move(list), Utf8(label));
    PyObject* cap = PyCapsule_New(mod, kModuleCapsule, &DeleteModuleCapsule);
    if (cap == nullptr) delete mod;
    return cap;
  }
  KFFI_CATCH_ALL { return RaiseFromCppException(); }
}

/// A name in a launch expression: a symbol of the contract, else an integer parameter.
Token ResolveName(const std::string& name, const Contract& c, const Launcher& l) {
  KFFIByteArray b{name.data(), name.size()};
  int32_t slot = -1;
  if (KFFIContractFindSymbol(c.Handle(), &b, &slot) != 0) {
    KFFIObjectHandle ignored = nullptr;  // not a symbol: perhaps a parameter
    KFFIErrorMoveFromRaised(&ignored);
    KFFIObjectDecRef(ignored);
    slot = -1;
  }
  if (slot >= 0) return Token{Token::kSymbol, slot};
  const auto params = c.params();
  for (size_t i = 0; i < params.size(); ++i) {
    if (params[i].first != name) continue;
    const ParamKind k = l.kinds[i];
    if (k != ParamKind::kInt32 && k != ParamKind::kInt64 && k != ParamKind::kBool) {
      KFFI_THROW(ValueError) << "kffi.cuda kernel `" << l.name << "`: the launch expression uses "
                             << "the parameter `" << name << "`, which is not an integer";
    }
    return Token{Token::kArg, static_cast<int64_t>(i)};
  }
  std::string known;
  for (const std::string& n : l.symbol_names) known += (known.empty() ? "" : ", ") + n;
  for (const auto& p : params) known += (known.empty() ? "" : ", ") + p.first;
  KFFI_THROW(ValueError) << "kffi.cuda kernel `" << l.name << "`: the launch expression uses `"
                         << name << "`, which is neither a symbol nor a parameter of the "
                         << "contract (it has: " << known << ")";
}

/// The kernel parameter kind of a contract parameter type as written.
ParamKind KindOfType(const std::string& type, const std::string& param, const std::string& fn) {
  auto starts = [&](const char* p) { return type.rfind(p, 0) == 0; };
  auto word = [&](const char* w) {
    const size_t n = std::strlen(w);
    return type.rfind(w, 0) == 0 && (type.size() == n || type[n] == '[' || type[n] == ' ');
  };
  if (starts("Tensor(") || starts("Optional[Tensor(")) return ParamKind::kPointer;
  if (word("int32")) return ParamKind::kInt32;
  if (word("int64")) return ParamKind::kInt64;
  if (word("float32")) return ParamKind::kFloat32;
  if (word("float64")) return ParamKind::kFloat64;
  if (word("bool")) return ParamKind::kBool;
  KFFI_THROW(TypeError) << "kffi.cuda kernel `" << fn << "`: the parameter `" << param
                        << "` of type `" << type << "` cannot be passed to a kernel (tensors, "
                        << "Optional tensors, int32, int64, float32, float64 and bool can)";
}

/// An expression program from Python's token list (ints, operators, "name:NAME").
std::vector<Token> ReadProgram(PyObject* prog, const Contract& c, const Launcher& l) {
  if (!PyList_Check(prog)) KFFI_THROW(TypeError) << "kffi.cuda: a program is a list of tokens";
  std::vector<Token> out;
  int depth = 0;
  for (Py_ssize_t i = 0; i < PyList_GET_SIZE(prog); ++i) {
    PyObject* t = PyList_GET_ITEM(prog, i);
    Token tok{Token::kConst, 0};
    if (PyLong_Check(t)) {
      int overflow = 0;
      tok.value = PyLong_AsLongLongAndOverflow(t, &overflow);
      if (overflow != 0) KFFI_THROW(ValueError) << "kffi.cuda: a constant overflows int64";
    } else {
      const std::string s = Utf8(t);
      static const std::pair<const char*, Token::Kind> kOps[] = {
          {"+", Token::kAdd},       {"-", Token::kSub}, {"*", Token::kMul},
          {"//", Token::kFloorDiv}, {"%", Token::kMod}, {"neg", Token::kNeg}};
      bool found = false;
      for (const auto& [text, kind] : kOps) {
        if (s == text) {
          tok.kind = kind;
          found = true;
        }
      }
      if (!found && s.rfind("name:", 0) == 0) {
        tok = ResolveName(s.substr(5), c, l);
        found = true;
      }
      if (!found) KFFI_THROW(ValueError) << "kffi.cuda: unknown token `" << s << "`";
    }
    const bool operand =
        tok.kind == Token::kConst || tok.kind == Token::kSymbol || tok.kind == Token::kArg;
    if (operand) {
      ++depth;
    } else if (tok.kind == Token::kNeg ? depth < 1 : depth < 2) {
      KFFI_THROW(ValueError) << "kffi.cuda: a malformed expression program";
    } else if (tok.kind != Token::kNeg) {
      --depth;
    }
    if (depth > 32) KFFI_THROW(ValueError) << "kffi.cuda: an expression nests too deeply";
    out.push_back(tok);
  }
  if (depth != 1) KFFI_THROW(ValueError) << "kffi.cuda: a malformed expression program";
  return out;
}

/// _cuda_kernel(module, kernel_name, name, contract, doc, kinds: str, programs: list of 7 token
/// lists, callback: Function | None) -> (Function, metadata JSON).
PyObject* CudaKernel(PyObject*, PyObject* args) {
  PyObject *cap, *kernel_name, *name, *text, *doc, *kinds, *programs, *callback;
  if (!PyArg_ParseTuple(args, "OUUUUUO!O", &cap, &kernel_name, &name, &text, &doc, &kinds,
                        &PyList_Type, &programs, &callback)) {
    return nullptr;
  }
  auto* mod = static_cast<kffi::cuda::CubinModule*>(PyCapsule_GetPointer(cap, kModuleCapsule));
  if (mod == nullptr) return nullptr;
  KFFIAny meta;
  details::SetNone(&meta);
  Function fn;
  try {
    auto l = std::make_shared<Launcher>(Contract::Parse(Utf8(name), Utf8(text)),
                                        mod->GetKernel(Utf8(kernel_name)), Utf8(name));
    std::string k = Utf8(kinds);
    if (k.empty()) {  // from the contract's parameter types
      for (const auto& [pname, ptype] : l->contract.params()) {
        k += static_cast<char>(KindOfType(ptype, pname, l->name));
      }
    }
    if (static_cast<int32_t>(k.size()) != l->contract.num_args() || k.size() > kMaxKernelParams) {
      KFFI_THROW(ValueError) << "kffi.cuda: " << k.size() << " parameter kinds for "
                             << l->contract.num_args() << " contract arguments (at most "
                             << kMaxKernelParams << ")";
    }
    for (char c : k) {
      if (std::string_view("Pilfdb").find(c) == std::string_view::npos) {
        KFFI_THROW(ValueError) << "kffi.cuda: unknown parameter kind `" << c << "`";
      }
      l->kinds.push_back(static_cast<ParamKind>(c));
    }
    for (int32_t i = 0;; ++i) {
      KFFIByteArray out{nullptr, 0};
      if (KFFIContractGetText(l->contract.Handle(), kKFFIContractTextSymbol, i, &out) != 0) {
        KFFIObjectHandle ignored = nullptr;
        KFFIErrorMoveFromRaised(&ignored);
        KFFIObjectDecRef(ignored);
        break;
      }
      l->symbol_names.emplace_back(out.data, out.size);
    }
    if (callback != Py_None) {
      KFFIObjectHandle h = GetHandle(callback);
      if (h == nullptr || static_cast<KFFIObject*>(h)->type_index != kKFFIFunction) {
        KFFI_THROW(TypeError) << "kffi.cuda: the launch callback must be a kffi.Function";
      }
      l->config = Function(details::ObjectUnsafe::FromBorrowedHandle<FunctionObj>(h));
    } else {
      if (PyList_GET_SIZE(programs) != kLaunchValues) {
        KFFI_THROW(ValueError) << "kffi.cuda: expected " << kLaunchValues << " programs";
      }
      for (int i = 0; i < kLaunchValues; ++i) {
        l->programs[i] = ReadProgram(PyList_GET_ITEM(programs, i), l->contract, *l);
      }
    }
    fn = Function::FromPacked([l](PackedArgs a, Any* rv) { Launch(*l, a, rv); }, l->name);
    const KFFIByteArray none = details::ToByteArray("None", 4);
    const std::string d = Utf8(doc);
    const KFFIByteArray db = details::ToByteArray(d.data(), d.size());
    if (KFFIContractGetMetadata(l->contract.Handle(), &none, &db, &meta) != 0) {
      return RaiseFromKFFIError(-1);
    }
  }
  KFFI_CATCH_ALL { return RaiseFromCppException(); }
  KFFIAny owned = details::AnyUnsafe::MoveToOwnedRaw(Any(std::move(fn)));
  PyRef py_meta(AnyToPy(&meta, nullptr));
  PyRef py_fn(AnyToPy(&owned, nullptr));
  if (!py_meta || !py_fn) return nullptr;
  return PyTuple_Pack(2, py_fn.get(), py_meta.get());
}

/// _cuda_pick_image(archs: list[str], cc: int) -> index or -1 (the rule launches use).
PyObject* CudaPickImage(PyObject*, PyObject* args) {
  PyObject* archs;
  int cc;
  if (!PyArg_ParseTuple(args, "O!i", &PyList_Type, &archs, &cc)) return nullptr;
  try {
    std::vector<std::string> tags;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(archs); ++i) {
      tags.push_back(Utf8(PyList_GET_ITEM(archs, i)));
    }
    return PyLong_FromLong(kffi::cuda::details::PickImage(tags, cc));
  }
  KFFI_CATCH_ALL { return RaiseFromCppException(); }
}

PyMethodDef kCudaMethods[] = {{"_cuda_module", CudaModule, METH_VARARGS, nullptr},
                              {"_cuda_kernel", CudaKernel, METH_VARARGS, nullptr},
                              {"_cuda_pick_image", CudaPickImage, METH_VARARGS, nullptr},
                              {nullptr, nullptr, 0, nullptr}};

}  // namespace

int InitCuda(PyObject* module) { return PyModule_AddFunctions(module, kCudaMethods); }

}  // namespace pyglue
}  // namespace kffi
