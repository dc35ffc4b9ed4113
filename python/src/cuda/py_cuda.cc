// python/src/cuda/py_cuda.cc: kffi.cuda's launcher: a kffi Function that checks a contract,
// packs the arguments into kernel parameters and launches a cubin kernel on the environment
// stream.
//
// Everything per call is here in C++ (no Python runs unless a launch-configuration callback was
// given): the contract's compiled check, grid/block/shared-memory expressions evaluated from the
// symbols it bound, the device guard of the first CUDA tensor, the stream and cuLaunchKernel.
// SPDX-License-Identifier: Apache-2.0
#include <kffi/container/array.h>
#include <kffi/contract.h>
#include <kffi/contract/shape_rpn.h>
#include <kffi/cuda/cubin.h>

#include <algorithm>
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

/// Most bytes of kernel parameters a launch packs (CUDA's classic limit; larger ones are rare).
constexpr size_t kMaxParamBytes = 4096;

/// How a call argument becomes a kernel parameter.
enum class ParamKind : char {
  kPointer = 'P',  // a tensor (or None under Optional): its data pointer plus byte_offset
  kInt32 = 'i',
  kInt64 = 'l',
  kFloat32 = 'f',
  kFloat64 = 'd',
  kBool = 'b',
};

size_t KindSize(ParamKind k) {
  switch (k) {
    case ParamKind::kInt32:
    case ParamKind::kFloat32:
      return 4;
    case ParamKind::kBool:
      return 1;
    default:
      return 8;
  }
}

const char* KindName(ParamKind k) {
  switch (k) {
    case ParamKind::kPointer:
      return "a pointer";
    case ParamKind::kInt32:
      return "an int32";
    case ParamKind::kInt64:
      return "an int64";
    case ParamKind::kFloat32:
      return "a float32";
    case ParamKind::kFloat64:
      return "a float64";
    default:
      return "a bool";
  }
}

/// One value packed into a kernel parameter: a kernel parameter is one field (a pointer or a
/// scalar) or a struct of several passed by value (a CuTe DSL tensor: {data, shape..., stride...}).
struct Field {
  enum Source : char { kArg, kData, kShape, kStride, kConst } source;
  ParamKind type;   // as stored in the parameter
  int32_t arg;      // the contract argument (kArg, kData, kShape, kStride)
  int32_t dim;      // kShape, kStride: the dimension (negative counts from the end)
  int64_t value;    // kConst
  uint32_t offset;  // in the parameter
};

/// One kernel parameter: its bytes in the packing buffer and the fields that fill them.
struct KernelParam {
  uint32_t offset;  // in the launch's buffer (16-aligned)
  uint32_t size;
  std::vector<Field> fields;
  std::string text;  // as given, for messages
};

/// One token of an expression program in reverse Polish notation.
/// One token of a launch expression, in kffi's one RPN vocabulary (kffi/contract/shape_rpn.h).
struct Token {
  kffi::details::RpnOp op;
  bool from_arg;  // a kSym read from an integer argument rather than a contract symbol
  int64_t value;  // kLit: the constant; kSym: the symbol's slot or the argument's index
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
  std::vector<ParamKind> kinds;  // of each contract argument
  std::vector<KernelParam> params;
  size_t param_bytes = 0;
  std::vector<Token> programs[kLaunchValues];
  std::vector<std::string> symbol_names;  // by slot, for messages
  Function config;                        // a launch-configuration callback, or undefined
  std::atomic<int> shared_attr_set[kffi::cuda::CubinKernel::kMaxDevices] = {};
  std::atomic<bool> params_checked[kffi::cuda::CubinKernel::kMaxDevices] = {};
};

[[noreturn]] void ThrowExpr(const Launcher& l, int which, const std::string& why) {
  KFFI_THROW(ValueError) << "kffi.cuda kernel `" << l.name << "`: " << kLaunchValueNames[which]
                         << " " << why;
}

/// Evaluates program `which` with Python's integer semantics (kffi's one RPN evaluator,
/// kffi/contract/shape_rpn.h); overflow, division by zero and an unbound symbol are ValueErrors.
class LaunchRpn {
 public:
  using Value = int64_t;
  LaunchRpn(const Launcher& l, int which, const kc::RunState& st, uint64_t bound,
            const KFFIAny* args)
      : l_(l), which_(which), st_(st), bound_(bound), args_(args) {}

  void Token(size_t i, kffi::details::RpnOp* op, int64_t* literal, int64_t* value) {
    const struct Token& t = l_.programs[which_][i];
    *op = t.op;
    if (t.op == kffi::details::RpnOp::kLit) {
      *literal = t.value;
    } else if (t.op == kffi::details::RpnOp::kSym && !t.from_arg) {
      if (((bound_ >> t.value) & 1) == 0) {
        ThrowExpr(
            l_, which_,
            "uses the symbol `" + l_.symbol_names[t.value] + "`, which this call leaves unbound");
      }
      *value = st_.values[t.value];
    } else if (t.from_arg) {
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

[[noreturn]] void ThrowParam(const Launcher& l, const KernelParam& p, const std::string& why) {
  KFFI_THROW(ValueError) << "kffi.cuda kernel `" << l.name << "`: the kernel parameter `" << p.text
                         << "`: " << why;
}

/// An integer into a field of type `type` (int32: range-checked).
void StoreInt(const Launcher& l, const KernelParam& p, ParamKind type, int64_t v, void* out) {
  if (type == ParamKind::kInt32) {
    if (KFFI_UNLIKELY(v < INT32_MIN || v > INT32_MAX)) {
      ThrowParam(l, p, std::to_string(v) + " does not fit in int32");
    }
    const int32_t x = static_cast<int32_t>(v);
    std::memcpy(out, &x, 4);
  } else {
    std::memcpy(out, &v, 8);
  }
}

/// Writes one field of a kernel parameter from the call's arguments.
void Pack(const Launcher& l, const KernelParam& p, const Field& f, const KFFIAny* args,
          unsigned char* out) {
  if (f.source == Field::kConst) return StoreInt(l, p, f.type, f.value, out);
  const KFFIAny& a = args[f.arg];
  if (f.source == Field::kArg) {
    switch (f.type) {
      case ParamKind::kPointer: {
        const DLTensor* t = kffi::details::TensorValuePtr(&a);
        void* ptr = t == nullptr ? nullptr : static_cast<char*>(t->data) + t->byte_offset;
        std::memcpy(out, &ptr, sizeof(ptr));
        return;
      }
      case ParamKind::kInt32:
      case ParamKind::kInt64:
        return StoreInt(l, p, f.type, a.v_int64, out);
      case ParamKind::kFloat32: {
        const float x = static_cast<float>(
            a.type_index == kKFFIFloat ? a.v_float64 : static_cast<double>(a.v_int64));
        std::memcpy(out, &x, 4);
        return;
      }
      case ParamKind::kFloat64: {
        const double x = a.type_index == kKFFIFloat ? a.v_float64 : static_cast<double>(a.v_int64);
        std::memcpy(out, &x, 8);
        return;
      }
      case ParamKind::kBool: {
        const bool x = a.v_int64 != 0;
        std::memcpy(out, &x, 1);
        return;
      }
    }
  }
  const DLTensor* t = kffi::details::TensorValuePtr(&a);
  if (f.source == Field::kData) {
    void* ptr = t == nullptr ? nullptr : static_cast<char*>(t->data) + t->byte_offset;
    std::memcpy(out, &ptr, sizeof(ptr));
    return;
  }
  if (KFFI_UNLIKELY(t == nullptr)) ThrowParam(l, p, "reads the shape of a tensor that is None");
  const int32_t dim = f.dim < 0 ? f.dim + t->ndim : f.dim;
  if (KFFI_UNLIKELY(dim < 0 || dim >= t->ndim)) {
    ThrowParam(l, p,
               "reads dimension " + std::to_string(f.dim) + " of a tensor of " +
                   kffi::details::Counted(t->ndim, "dimension"));
  }
  if (f.source == Field::kShape) return StoreInt(l, p, f.type, t->shape[dim], out);
  int64_t stride = 1;  // DLPack's compact row-major strides when strides is NULL
  if (t->strides != nullptr) {
    stride = t->strides[dim];
  } else {
    for (int32_t d = dim + 1; d < t->ndim; ++d) {
      if (__builtin_mul_overflow(stride, t->shape[d], &stride)) {
        ThrowParam(l, p, "a stride overflows int64");
      }
    }
  }
  StoreInt(l, p, f.type, stride, out);
}

/// The packed parameters' sizes against the kernel's own as the driver reports them (the image
/// loaded for this device may be PTX or a fatbin, which carry no sizes kffi can read offline).
void CheckParams(const Launcher& l, int device) {
  std::vector<std::pair<size_t, size_t>> info;
  if (!l.kernel.ParamInfo(device, &info)) return;
  for (size_t i = 0; i < l.params.size() || i < info.size(); ++i) {
    if (i >= info.size()) {
      KFFI_THROW(ValueError) << "kffi.cuda kernel `" << l.name << "`: the contract packs "
                             << l.params.size() << " kernel parameters, `" << l.kernel.name()
                             << "` takes " << info.size() << ": parameter " << i << " (`"
                             << l.params[i].text << "`, " << l.params[i].size
                             << " bytes) is not in the kernel";
    }
    if (i >= l.params.size()) {
      KFFI_THROW(ValueError) << "kffi.cuda kernel `" << l.name << "`: `" << l.kernel.name()
                             << "` takes "
                             << kffi::details::Counted(static_cast<int64_t>(info.size()),
                                                       "parameter")
                             << ", the contract packs " << l.params.size() << ": parameter " << i
                             << " (" << info[i].second << " bytes) is missing";
    }
    if (info[i].second != l.params[i].size) {
      KFFI_THROW(ValueError) << "kffi.cuda kernel `" << l.name << "`: parameter " << i << " (`"
                             << l.params[i].text << "`) is " << info[i].second << " bytes in `"
                             << l.kernel.name() << "`, " << l.params[i].size
                             << " bytes as the contract packs it";
    }
  }
}

void Launch(Launcher& l, PackedArgs packed, Any*) {
  const KFFIAny* args = reinterpret_cast<const KFFIAny*>(packed.data());
  const int32_t n = packed.size();
  kc::RunState st;
  kc::Run(*l.contract.plan(), args, n, &st);
  const uint64_t bound = st.bound | l.contract.plan()->static_bound;

  // The device of the first CUDA tensor: current for the launch, and its environment stream.
  const DLTensor* first = nullptr;
  for (size_t i = 0; i < l.kinds.size() && first == nullptr; ++i) {
    if (l.kinds[i] != ParamKind::kPointer) continue;
    const DLTensor* t = kffi::details::TensorValuePtr(&args[i]);
    if (t != nullptr && t->device.device_type == kDLCUDA) first = t;
  }
  void* params[kMaxKernelParams];
  alignas(16) unsigned char buffer[kMaxParamBytes];
  for (size_t i = 0; i < l.params.size(); ++i) {
    const KernelParam& p = l.params[i];
    unsigned char* base = buffer + p.offset;
    if (p.fields.size() > 1) std::memset(base, 0, p.size);  // padding is zero
    for (const Field& f : p.fields) Pack(l, p, f, args, base + f.offset);
    params[i] = base;
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
  if (device >= 0 && device < kffi::cuda::CubinKernel::kMaxDevices &&
      KFFI_UNLIKELY(!l.params_checked[device].load(std::memory_order_acquire))) {
    CheckParams(l, device);
    l.params_checked[device].store(true, std::memory_order_release);
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
  if (slot >= 0) return Token{kffi::details::RpnOp::kSym, false, slot};
  const auto params = c.params();
  for (size_t i = 0; i < params.size(); ++i) {
    if (params[i].first != name) continue;
    const ParamKind k = l.kinds[i];
    if (k != ParamKind::kInt32 && k != ParamKind::kInt64 && k != ParamKind::kBool) {
      KFFI_THROW(ValueError) << "kffi.cuda kernel `" << l.name << "`: the launch expression uses "
                             << "the parameter `" << name << "`, which is not an integer";
    }
    return Token{kffi::details::RpnOp::kSym, true, static_cast<int64_t>(i)};
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
    Token tok{kffi::details::RpnOp::kLit, false, 0};
    if (PyLong_Check(t)) {
      int overflow = 0;
      tok.value = PyLong_AsLongLongAndOverflow(t, &overflow);
      if (overflow != 0) KFFI_THROW(ValueError) << "kffi.cuda: a constant overflows int64";
    } else {
      const std::string s = Utf8(t);
      bool found = kffi::details::RpnOpFromName(s, &tok.op);
      if (!found && s.rfind("name:", 0) == 0) {
        tok = ResolveName(s.substr(5), c, l);
        found = true;
      }
      if (!found) KFFI_THROW(ValueError) << "kffi.cuda: unknown token `" << s << "`";
    }
    using kffi::details::RpnOp;
    const bool operand = tok.op == RpnOp::kLit || tok.op == RpnOp::kSym;
    if (operand) {
      ++depth;
    } else if (tok.op == RpnOp::kNeg ? depth < 1 : depth < 2) {
      KFFI_THROW(ValueError) << "kffi.cuda: a malformed expression program";
    } else if (tok.op != RpnOp::kNeg) {
      --depth;
    }
    if (depth > 32) KFFI_THROW(ValueError) << "kffi.cuda: an expression nests too deeply";
    out.push_back(tok);
  }
  if (depth != 1) KFFI_THROW(ValueError) << "kffi.cuda: a malformed expression program";
  return out;
}

int64_t TupleInt(PyObject* t, Py_ssize_t i) {
  // Exact ints only: no __index__ runs while the layout's items are borrowed.
  PyObject* o = PyTuple_GET_ITEM(t, i);
  if (!PyLong_CheckExact(o)) KFFI_THROW(TypeError) << "kffi.cuda: a parameter layout holds ints";
  const long long v = PyLong_AsLongLong(o);
  if (v == -1 && PyErr_Occurred()) {
    PyErr_Clear();
    KFFI_THROW(TypeError) << "kffi.cuda: a parameter layout holds ints";
  }
  return v;
}

/// The kernel parameters of a layout from Python: a list of (text, fields), each field (source:
/// "a" argument / "p" data pointer / "s" shape / "t" stride / "c" constant, type: one of
/// "Pilfdb" or "?" (an argument's own kind), argument name, dim, constant). A parameter of several
/// fields is a struct laid out as C does (each field at its natural alignment, the size a
/// multiple of the largest). Checked here: names, sources against argument kinds, sizes.
void ReadLayout(PyObject* layout, Launcher* l) {
  if (!PyList_Check(layout) || static_cast<size_t>(PyList_GET_SIZE(layout)) > kMaxKernelParams) {
    KFFI_THROW(ValueError) << "kffi.cuda: a parameter layout is a list of at most "
                           << kMaxKernelParams << " parameters";
  }
  const auto cparams = l->contract.params();
  size_t offset = 0;
  for (Py_ssize_t i = 0; i < PyList_GET_SIZE(layout); ++i) {
    PyObject* item = PyList_GET_ITEM(layout, i);
    if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 2 ||
        !PyList_Check(PyTuple_GET_ITEM(item, 1)) ||
        PyList_GET_SIZE(PyTuple_GET_ITEM(item, 1)) < 1 ||
        static_cast<size_t>(PyList_GET_SIZE(PyTuple_GET_ITEM(item, 1))) > kMaxParamBytes) {
      KFFI_THROW(TypeError) << "kffi.cuda: a kernel parameter is (text, fields)";
    }
    KernelParam p;
    p.text = Utf8(PyTuple_GET_ITEM(item, 0));
    PyObject* fields = PyTuple_GET_ITEM(item, 1);
    size_t end = 0, align = 1;
    for (Py_ssize_t j = 0; j < PyList_GET_SIZE(fields); ++j) {
      PyObject* f = PyList_GET_ITEM(fields, j);
      if (!PyTuple_Check(f) || PyTuple_GET_SIZE(f) != 5) {
        KFFI_THROW(TypeError) << "kffi.cuda: a parameter field is a 5-tuple";
      }
      const std::string src = Utf8(PyTuple_GET_ITEM(f, 0));
      const std::string type = Utf8(PyTuple_GET_ITEM(f, 1));
      const std::string arg_name = Utf8(PyTuple_GET_ITEM(f, 2));
      if (src.size() != 1 || std::string_view("apstc").find(src[0]) == std::string_view::npos ||
          type.size() != 1 || std::string_view("Pilfdb?").find(type[0]) == std::string_view::npos) {
        KFFI_THROW(ValueError) << "kffi.cuda: unknown field source or type in `" << p.text << "`";
      }
      static const Field::Source kSources[] = {Field::kArg, Field::kData, Field::kShape,
                                               Field::kStride, Field::kConst};
      Field fld{kSources[std::string_view("apstc").find(src[0])],
                static_cast<ParamKind>(type[0]),
                0,
                0,
                TupleInt(f, 4),
                0};
      const int64_t dim = TupleInt(f, 3);
      size_t arg = 0;
      if (fld.source != Field::kConst) {
        while (arg < cparams.size() && cparams[arg].first != arg_name) ++arg;
        if (arg == cparams.size()) {
          std::string known;
          for (const auto& cp : cparams) known += (known.empty() ? "" : ", ") + cp.first;
          KFFI_THROW(ValueError) << "kffi.cuda kernel `" << l->name << "`: the kernel parameter `"
                                 << p.text << "` names `" << arg_name
                                 << "`, which is not a parameter of the contract (it has: " << known
                                 << ")";
        }
        fld.arg = static_cast<int32_t>(arg);
        if (dim < -64 || dim > 64) KFFI_THROW(ValueError) << "kffi.cuda: bad dim " << dim;
        fld.dim = static_cast<int32_t>(dim);
      }
      if (type[0] == '?') {
        fld.type = fld.source == Field::kConst  ? ParamKind::kInt64
                   : fld.source == Field::kArg  ? l->kinds[arg]
                   : fld.source == Field::kData ? ParamKind::kPointer
                                                : ParamKind::kInt64;
      }
      const auto is_int = [](ParamKind k) {
        return k == ParamKind::kInt32 || k == ParamKind::kInt64 || k == ParamKind::kBool;
      };
      const auto is_float = [](ParamKind k) {
        return k == ParamKind::kFloat32 || k == ParamKind::kFloat64;
      };
      const ParamKind arg_kind = fld.source == Field::kConst ? ParamKind::kInt64 : l->kinds[arg];
      const bool tensor = arg_kind == ParamKind::kPointer;
      bool ok = true;
      switch (fld.source) {
        case Field::kArg:
          ok = tensor ? fld.type == ParamKind::kPointer
                      : (is_int(arg_kind) && is_int(fld.type)) ||
                            (is_float(arg_kind) && is_float(fld.type));
          break;
        case Field::kData:
          ok = tensor && fld.type == ParamKind::kPointer;
          break;
        case Field::kShape:
        case Field::kStride:
          ok = tensor && (fld.type == ParamKind::kInt32 || fld.type == ParamKind::kInt64);
          break;
        case Field::kConst:
          ok = fld.type == ParamKind::kInt32 || fld.type == ParamKind::kInt64 ||
               fld.type == ParamKind::kPointer;
          break;
      }
      if (!ok) {
        KFFI_THROW(TypeError) << "kffi.cuda kernel `" << l->name << "`: the kernel parameter `"
                              << p.text << "` cannot pass "
                              << (fld.source == Field::kConst
                                      ? std::string("a constant")
                                      : "`" + l->contract.params()[arg].first + "` (`" +
                                            l->contract.params()[arg].second + "`)")
                              << " as " << KindName(fld.type);
      }
      const size_t fsize = KindSize(fld.type);
      end = (end + fsize - 1) / fsize * fsize;
      fld.offset = static_cast<uint32_t>(end);
      end += fsize;
      align = std::max(align, fsize);
      p.fields.push_back(fld);
      if (end > kMaxParamBytes) break;  // reported below
    }
    end = (end + align - 1) / align * align;
    offset = (offset + 15) / 16 * 16;
    if (end > kMaxParamBytes - std::min(offset, kMaxParamBytes)) {
      KFFI_THROW(ValueError) << "kffi.cuda kernel `" << l->name << "`: the kernel parameters take "
                             << "more than " << kMaxParamBytes << " bytes";
    }
    p.offset = static_cast<uint32_t>(offset);
    p.size = static_cast<uint32_t>(end);
    offset += end;
    l->params.push_back(std::move(p));
  }
  l->param_bytes = offset;
}

/// _cuda_kernel(module, kernel_name, name, contract, doc, layout: list | None, programs: list of 7
/// token lists, callback: Function | None) -> (Function, metadata JSON, [(size, text)] of the
/// kernel parameters). layout None: each contract argument is one kernel parameter, as its type
/// says.
PyObject* CudaKernel(PyObject*, PyObject* args) {
  PyObject *cap, *kernel_name, *name, *text, *doc, *layout, *programs, *callback;
  if (!PyArg_ParseTuple(args, "OUUUUOO!O", &cap, &kernel_name, &name, &text, &doc, &layout,
                        &PyList_Type, &programs, &callback)) {
    return nullptr;
  }
  auto* mod = static_cast<kffi::cuda::CubinModule*>(PyCapsule_GetPointer(cap, kModuleCapsule));
  if (mod == nullptr) return nullptr;
  KFFIAny meta;
  details::SetNone(&meta);
  Function fn;
  std::vector<std::pair<uint32_t, std::string>> sizes;
  try {
    auto l = std::make_shared<Launcher>(Contract::Parse(Utf8(name), Utf8(text)),
                                        mod->GetKernel(Utf8(kernel_name)), Utf8(name));
    if (l->contract.num_args() > static_cast<int32_t>(kMaxKernelParams)) {
      KFFI_THROW(ValueError) << "kffi.cuda: a contract of " << l->contract.num_args()
                             << " arguments (at most " << kMaxKernelParams << ")";
    }
    for (const auto& [pname, ptype] : l->contract.params()) {
      l->kinds.push_back(KindOfType(ptype, pname, l->name));
    }
    if (layout == Py_None) {
      size_t offset = 0;
      const auto params = l->contract.params();
      for (size_t i = 0; i < l->kinds.size(); ++i) {
        const uint32_t size = static_cast<uint32_t>(KindSize(l->kinds[i]));
        offset = (offset + 15) / 16 * 16;
        l->params.push_back(
            KernelParam{static_cast<uint32_t>(offset),
                        size,
                        {Field{Field::kArg, l->kinds[i], static_cast<int32_t>(i), 0, 0, 0}},
                        params[i].first});
        offset += size;
      }
      l->param_bytes = offset;
    } else {
      ReadLayout(layout, l.get());
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
    for (const KernelParam& p : l->params) sizes.emplace_back(p.size, p.text);
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
  PyRef py_sizes(PyList_New(static_cast<Py_ssize_t>(sizes.size())));
  if (!py_sizes) return nullptr;
  for (size_t i = 0; i < sizes.size(); ++i) {
    PyObject* v =
        Py_BuildValue("(ks#)", static_cast<unsigned long>(sizes[i].first), sizes[i].second.data(),
                      static_cast<Py_ssize_t>(sizes[i].second.size()));
    if (v == nullptr) return nullptr;
    PyList_SET_ITEM(py_sizes.get(), static_cast<Py_ssize_t>(i), v);
  }
  return PyTuple_Pack(3, py_fn.get(), py_meta.get(), py_sizes.get());
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
