// tests/tvm_libs/tvm_testlib.cc: a library written against apache-tvm-ffi's headers only, as
// TVM-FFI kernel libraries are. kffi's C++ and Python tests load it through kffi, built both with
// -ltvm_ffi (DT_NEEDED) and without (TVMFFI* imports left for the loader to bind).
#include <dlfcn.h>
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/extra/c_env_api.h>
#include <tvm/ffi/reflection/registry.h>
#include <tvm/ffi/tvm_ffi.h>

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
