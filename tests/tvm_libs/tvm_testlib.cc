// tests/tvm_libs/tvm_testlib.cc: a library written against apache-tvm-ffi's headers only, as
// TVM-FFI kernel libraries are. kffi's C++ and Python tests load it through kffi, built both with
// -ltvm_ffi (DT_NEEDED) and without (TVMFFI* imports left for the loader to bind).
// SPDX-License-Identifier: Apache-2.0
#include <dlfcn.h>
#include <tvm/ffi/big_int.h>
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/extra/c_env_api.h>
#include <tvm/ffi/reflection/registry.h>
#include <tvm/ffi/tvm_ffi.h>

#include <cmath>
#include <cstdint>
#include <string>

namespace ffi = tvm::ffi;

// The linked and unlinked builds may share a process (and apache-tvm-ffi's registry): they
// register their global function under different prefixes.
#ifndef TVM_TESTLIB_GLOBAL_PREFIX
#define TVM_TESTLIB_GLOBAL_PREFIX "tvm_testlib"
#endif

namespace {

int64_t AddInt(int64_t a, int64_t b) { return a + b; }
double ScaleFloat(double x, double factor) { return x * factor; }
bool Negate(bool b) { return !b; }
ffi::String Concat(ffi::String a, ffi::String b) { return std::string(a) + std::string(b); }
int64_t BytesLen(ffi::Bytes b) { return static_cast<int64_t>(b.size()); }

ffi::Array<int64_t> MakeRange(int64_t n) {
  ffi::Array<int64_t> out;
  for (int64_t i = 0; i < n; ++i) out.push_back(i);
  return out;
}
int64_t SumArray(ffi::Array<int64_t> values) {
  int64_t s = 0;
  for (int64_t v : values) s += v;
  return s;
}
ffi::Array<ffi::Array<int64_t>> Nested(int64_t n) {
  ffi::Array<ffi::Array<int64_t>> out;
  for (int64_t i = 0; i < n; ++i) out.push_back(MakeRange(i));
  return out;
}
ffi::Shape MakeShape(int64_t a, int64_t b) { return ffi::Shape({a, b}); }
ffi::String DTypeName(DLDataType dtype) { return ffi::DLDataTypeToString(dtype); }

// y[i] = x[i] + 1 for 1-d float32 tensors of one length.
void AddOne(ffi::TensorView x, ffi::TensorView y) {
  TVM_FFI_CHECK(x.ndim() == 1 && y.ndim() == 1, ValueError) << "add_one expects 1-d tensors";
  TVM_FFI_CHECK(x.dtype() == DLDataType({kDLFloat, 32, 1}), TypeError)
      << "add_one expects float32, got " << x.dtype();
  TVM_FFI_CHECK(x.size(0) == y.size(0), ValueError)
      << "add_one: x has " << x.size(0) << " elements, y has " << y.size(0);
  const float* src = static_cast<const float*>(x.data_ptr());
  float* dst = static_cast<float*>(y.data_ptr());
  for (int64_t i = 0; i < x.size(0); ++i) dst[i] = src[i] + 1.0f;
}

double TensorSum(ffi::TensorView x) {
  TVM_FFI_CHECK(x.dtype() == DLDataType({kDLFloat, 32, 1}), TypeError) << "expects float32";
  const float* p = static_cast<const float*>(x.data_ptr());
  double s = 0;
  for (int64_t i = 0; i < x.numel(); ++i) s += p[i];
  return s;
}

// A new float32 tensor [0, 1, ..., n-1] from the environment's allocator.
ffi::Tensor Iota(int64_t n) {
  ffi::Tensor t = ffi::Tensor::FromEnvAlloc(TVMFFIEnvTensorAlloc, ffi::Shape({n}),
                                            DLDataType({kDLFloat, 32, 1}), DLDevice({kDLCPU, 0}));
  float* p = static_cast<float*>(t.data_ptr());
  for (int64_t i = 0; i < n; ++i) p[i] = static_cast<float>(i);
  return t;
}

// The allocator the environment holds, as an integer (a direct call: the PLT slot).
int64_t EnvAllocator() {
  return static_cast<int64_t>(
      reinterpret_cast<intptr_t>(TVMFFIEnvGetDLPackManagedTensorAllocator()));
}

// The allocator apache-tvm-ffi's environment holds, read past this library's own slots (as other
// code in the process reads it). Looked up by name so that a library bound to kffi's shim loads.
int64_t RuntimeEnvAllocator() {
  using Getter = DLPackManagedTensorAllocator (*)();
  auto get =
      reinterpret_cast<Getter>(dlsym(RTLD_DEFAULT, "TVMFFIEnvGetDLPackManagedTensorAllocator"));
  return get == nullptr ? 0 : static_cast<int64_t>(reinterpret_cast<intptr_t>(get()));
}

// The address of TVMFFIEnvTensorAlloc as this library sees it (its GOT slot).
int64_t EnvTensorAllocAddress() {
  return static_cast<int64_t>(reinterpret_cast<intptr_t>(&TVMFFIEnvTensorAlloc));
}

// The stream the environment holds for a device, as an integer.
int64_t EnvStream(int32_t device_type, int32_t device_id) {
  return static_cast<int64_t>(
      reinterpret_cast<intptr_t>(TVMFFIEnvGetStream(device_type, device_id)));
}

// The stream of the first tensor's device, as a kernel launch would read it.
int64_t StreamOf(ffi::TensorView x) {
  return static_cast<int64_t>(
      reinterpret_cast<intptr_t>(TVMFFIEnvGetStream(x.device().device_type, x.device().device_id)));
}

int64_t CallTwice(ffi::Function f, int64_t x) { return f(f(x).cast<int64_t>()).cast<int64_t>(); }
ffi::Function MakeAdder(int64_t k) {
  return ffi::Function::FromTyped([k](int64_t x) { return x + k; });
}
ffi::Any Apply(ffi::Function f, ffi::Any x) { return f(x); }
ffi::Any Echo(ffi::Any x) { return x; }

void RaiseError(ffi::String kind, ffi::String message) {
  throw ffi::Error(std::string(kind), std::string(message),
                   TVMFFIBacktrace(__FILE__, __LINE__, "RaiseError", 0));
}
void CheckPositive(int64_t x) {
  TVM_FFI_CHECK(x > 0, ValueError) << "check_positive: expected a positive number, got " << x;
}

ffi::Map<ffi::String, int64_t> MakeMap(ffi::String key, int64_t value) { return {{key, value}}; }
int64_t MapSize(ffi::Map<ffi::String, int64_t> m) { return static_cast<int64_t>(m.size()); }

void Noop() {}
void ThreeTensors(ffi::TensorView, ffi::TensorView, ffi::TensorView) {}

// ---- ffi::Tensor by value, as FlashInfer's exports take tensors: the callee owns a reference
// and may keep it after the call.

const float* Float32Data(const ffi::Tensor& x, const char* who) {
  TVM_FFI_CHECK(x.defined(), ValueError) << who << ": no tensor";
  TVM_FFI_CHECK(x.dtype() == DLDataType({kDLFloat, 32, 1}), TypeError)
      << who << " expects float32, got " << x.dtype();
  TVM_FFI_CHECK(x.device().device_type == kDLCPU, ValueError) << who << " expects a CPU tensor";
  TVM_FFI_CHECK(x.IsContiguous(), ValueError) << who << " expects a contiguous tensor";
  return reinterpret_cast<const float*>(static_cast<const char*>(x.data_ptr()) + x.byte_offset());
}

double SumOf(const ffi::Tensor& x, const char* who) {
  const float* p = Float32Data(x, who);
  double s = 0;
  for (int64_t i = 0; i < x.numel(); ++i) s += p[i];
  return s;
}

double OwnedSum(ffi::Tensor x) { return SumOf(x, "owned_sum"); }

// y[i] = x[i] + 1, both taken by value.
void OwnedAddOne(ffi::Tensor x, ffi::Tensor y) {
  const float* src = Float32Data(x, "owned_add_one");
  float* dst = const_cast<float*>(Float32Data(y, "owned_add_one"));
  TVM_FFI_CHECK(x.numel() == y.numel(), ValueError) << "owned_add_one: sizes differ";
  for (int64_t i = 0; i < x.numel(); ++i) dst[i] = src[i] + 1.0f;
}

// One parameter of each kind: a view and an owner.
double MixedSum(ffi::TensorView a, ffi::Tensor b) {
  TVM_FFI_CHECK(a.dtype() == DLDataType({kDLFloat, 32, 1}), TypeError) << "mixed_sum: float32";
  const float* p = static_cast<const float*>(a.data_ptr());
  double s = 0;
  for (int64_t i = 0; i < a.numel(); ++i) s += p[i];
  return s + SumOf(b, "mixed_sum");
}

double OptionalSum(ffi::Optional<ffi::Tensor> x) {
  return x.has_value() ? SumOf(x.value(), "optional_sum") : -1.0;
}

ffi::Tensor OwnedIdentity(ffi::Tensor x) { return x; }

// The tensor keep_tensor stored (never destroyed at exit: its deleter may belong to a binding
// that is gone by then).
ffi::Tensor& Kept() {
  static ffi::Tensor* kept = new ffi::Tensor();
  return *kept;
}
void KeepTensor(ffi::Tensor x) { Kept() = std::move(x); }
double KeptSum() { return SumOf(Kept(), "kept_sum"); }
ffi::Tensor KeptTensor() { return Kept(); }
int64_t KeptUseCount() { return Kept().defined() ? Kept().use_count() : 0; }
void ReleaseKept() { Kept() = ffi::Tensor(); }

// FlashInfer's layernorm signature (output, input, gamma, beta, eps) on the CPU, float32,
// input of shape (rows, cols).
void LayerNorm(ffi::Tensor out, ffi::Tensor input, ffi::Tensor gamma, ffi::Tensor beta,
               double eps) {
  TVM_FFI_CHECK(input.ndim() == 2, ValueError) << "layernorm: input must be 2-d";
  const int64_t rows = input.size(0), cols = input.size(1);
  const float* x = Float32Data(input, "layernorm");
  const float* g = Float32Data(gamma, "layernorm");
  const float* b = Float32Data(beta, "layernorm");
  float* y = const_cast<float*>(Float32Data(out, "layernorm"));
  TVM_FFI_CHECK(gamma.numel() == cols && beta.numel() == cols && out.numel() == rows * cols,
                ValueError)
      << "layernorm: shapes do not match";
  for (int64_t r = 0; r < rows; ++r) {
    double mean = 0, var = 0;
    for (int64_t c = 0; c < cols; ++c) mean += x[r * cols + c];
    mean /= static_cast<double>(cols);
    for (int64_t c = 0; c < cols; ++c) var += (x[r * cols + c] - mean) * (x[r * cols + c] - mean);
    var /= static_cast<double>(cols);
    const double inv = 1.0 / std::sqrt(var + eps);
    for (int64_t c = 0; c < cols; ++c) {
      y[r * cols + c] = static_cast<float>((x[r * cols + c] - mean) * inv * g[c] + b[c]);
    }
  }
}

// ---- an object type of this library's own (a dynamic type index of its runtime's registry),
// and one of TVM-FFI's static types that kffi's registry lacks (ffi.BigInt).

class PointObj : public ffi::Object {
 public:
  PointObj(int64_t x_in, int64_t y_in) : x(x_in), y(y_in) {}
  int64_t x;
  int64_t y;
  TVM_FFI_DECLARE_OBJECT_INFO_FINAL("tvm_testlib.Point", PointObj, ffi::Object);
};

ffi::ObjectRef MakePoint(int64_t x, int64_t y) {
  return ffi::ObjectRef(ffi::make_object<PointObj>(x, y));
}
int64_t PointX(ffi::ObjectRef p) {
  const PointObj* point = p.as<PointObj>();
  TVM_FFI_CHECK(point != nullptr, TypeError) << "point_x expects a tvm_testlib.Point";
  return point->x;
}
ffi::BigInt MakeBigInt() { return ffi::BigInt(1) << ffi::BigInt(100); }

}  // namespace

TVM_FFI_DLL_EXPORT_TYPED_FUNC(add_int, AddInt);
TVM_FFI_DLL_EXPORT_TYPED_FUNC_DOC(add_int, "Adds two integers.");
TVM_FFI_DLL_EXPORT_TYPED_FUNC(scale_float, ScaleFloat);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(negate, Negate);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(concat, Concat);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(bytes_len, BytesLen);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(make_range, MakeRange);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(sum_array, SumArray);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(nested, Nested);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(make_shape, MakeShape);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(dtype_name, DTypeName);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(add_one, AddOne);
TVM_FFI_DLL_EXPORT_TYPED_FUNC_DOC(add_one, "y = x + 1 for 1-d float32 tensors.");
TVM_FFI_DLL_EXPORT_TYPED_FUNC(tensor_sum, TensorSum);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(iota, Iota);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(env_stream, EnvStream);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(env_allocator, EnvAllocator);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(runtime_env_allocator, RuntimeEnvAllocator);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(env_tensor_alloc_address, EnvTensorAllocAddress);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(stream_of, StreamOf);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(call_twice, CallTwice);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(make_adder, MakeAdder);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(apply, Apply);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(echo, Echo);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(raise_error, RaiseError);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(check_positive, CheckPositive);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(make_map, MakeMap);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(map_size, MapSize);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(noop, Noop);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(three_tensors, ThreeTensors);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(owned_sum, OwnedSum);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(owned_add_one, OwnedAddOne);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(mixed_sum, MixedSum);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(optional_sum, OptionalSum);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(owned_identity, OwnedIdentity);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(keep_tensor, KeepTensor);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(kept_sum, KeptSum);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(kept_tensor, KeptTensor);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(kept_use_count, KeptUseCount);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(release_kept, ReleaseKept);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(layernorm, LayerNorm);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(make_point, MakePoint);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(point_x, PointX);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(make_big_int, MakeBigInt);

// A hand-written export whose metadata symbol returns malformed JSON (trailing text).
extern "C" TVM_FFI_DLL_EXPORT int __tvm_ffi_bad_meta(void*, const TVMFFIAny*, int32_t,
                                                     TVMFFIAny* result) {
  result->type_index = kTVMFFIInt;
  result->v_int64 = 7;
  return 0;
}
extern "C" TVM_FFI_DLL_EXPORT int __tvm_ffi__metadata_bad_meta(void*, const TVMFFIAny*, int32_t,
                                                               TVMFFIAny* result) {
  static const char kText[] = "{\"type_schema\": \"{}\"} and more";
  TVMFFIByteArray text{kText, sizeof(kText) - 1};
  return TVMFFIStringFromByteArray(&text, result);
}

// A global function, registered the way TVM-FFI libraries do at load time.
TVM_FFI_STATIC_INIT_BLOCK() {
  tvm::ffi::reflection::GlobalDef().def(TVM_TESTLIB_GLOBAL_PREFIX ".square",
                                        [](int64_t x) { return x * x; });
}
