// tests/python/kernels/catalogue_kernels.cc: one export per kind of parameter and per contract
// check, for the bad-input catalogue (tests/python/hostile/test_bad_input_catalogue.py). Every
// parameter is named, so each error names the argument it blames.
// SPDX-License-Identifier: Apache-2.0
#include <kffi/kffi.h>

#include <cstdint>
#include <string>
#include <tuple>

namespace {

int64_t TakesInt(int64_t n) { return n; }
double TakesFloat(double x) { return x; }
bool TakesBool(bool flag) { return flag; }
std::string TakesStr(std::string s) { return s; }
kffi::Bytes TakesBytes(kffi::Bytes b) { return b; }
int64_t TakesInt32(int32_t n) { return n; }
int64_t TakesUint8(uint8_t n) { return n; }
int64_t TakesTensor(kffi::ConstTensorView x) { return x.ndim(); }
int64_t TakesOwnedTensor(kffi::Tensor x) { return x.ndim(); }
int64_t TakesOptional(kffi::Optional<int64_t> n) { return n.has_value() ? *n : -1; }
int64_t TakesTuple(std::tuple<int64_t, std::string> t) {
  return std::get<0>(t) + static_cast<int64_t>(std::get<1>(t).size());
}
int64_t TakesArray(kffi::Array<int64_t> xs) {
  int64_t s = 0;
  for (int64_t x : xs) s += x;
  return s;
}
int64_t TakesMap(kffi::Map<kffi::String, int64_t> m) { return m.size(); }
int64_t TakesStream(void* stream) { return reinterpret_cast<intptr_t>(stream) != 0; }
kffi::Any TakesFunction(kffi::Function f) { return f(int64_t{1}); }
std::string TakesDtype(DLDataType d) { return kffi::details::DataTypeToString(d); }
int64_t TakesDevice(DLDevice dev) { return dev.device_id; }
int64_t TakesShape(kffi::Shape s) { return static_cast<int64_t>(s.size()); }
int64_t TwoInts(int64_t a, int64_t b) { return a + b; }

/// Writes x: a read-only argument is refused by the writability check.
void WritesTensor(kffi::TensorView x) {
  kffi::CheckWritable(x, "x");
  if (x.numel() > 0 && x.dtype() == DLDataType{kDLFloat, 32, 1}) {
    x.data<float>()[0] += 0;
  }
}

/// Checks with the tensor_checks helpers (ndim, dtype, shape, contiguity, alignment).
void Checked(kffi::ConstTensorView x) {
  kffi::CheckNdim(x, 2, "x");
  kffi::CheckDtype(x, {DLDataType{kDLFloat, 32, 1}}, "x");
  kffi::CheckContiguous(x, "x");
  kffi::CheckAlignment(x, 16, "x");
}

/// A kernel whose body fails with a standard C++ exception (it arrives as the mapped kind).
int64_t ThrowsStd(std::string kind) {
  if (kind == "runtime") throw std::runtime_error("the kernel's runtime_error text");
  if (kind == "invalid") throw std::invalid_argument("the kernel's invalid_argument text");
  if (kind == "range") throw std::out_of_range("the kernel's out_of_range text");
  if (kind == "alloc") throw std::bad_alloc();
  if (kind == "other") throw 42;
  return 0;
}

int64_t ContractOne(kffi::ConstTensorView) { return 1; }
int64_t ContractTwo(kffi::ConstTensorView, kffi::ConstTensorView) { return 2; }
int64_t ContractMutOne(kffi::TensorView) { return 1; }  // a `mut` tensor: a type that may write
int64_t ContractScalars(int64_t, double, bool) { return 3; }
int64_t ContractOptional(kffi::Optional<kffi::ConstTensorView> b) { return b.has_value() ? 1 : 0; }
int64_t ContractTuple(std::tuple<kffi::Tensor, int64_t>) { return 4; }
int64_t ContractStream(kffi::ConstTensorView, void*) { return 5; }

}  // namespace

KFFI_EXPORT_DOC(takes_int, TakesInt, "n", "n");
KFFI_EXPORT_DOC(takes_float, TakesFloat, "x", "x");
KFFI_EXPORT_DOC(takes_bool, TakesBool, "flag", "flag");
KFFI_EXPORT_DOC(takes_str, TakesStr, "s", "s");
KFFI_EXPORT_DOC(takes_bytes, TakesBytes, "b", "b");
KFFI_EXPORT_DOC(takes_int32, TakesInt32, "n as int32", "n");
KFFI_EXPORT_DOC(takes_uint8, TakesUint8, "n as uint8", "n");
KFFI_EXPORT_DOC(takes_tensor, TakesTensor, "x (borrowed)", "x");
KFFI_EXPORT_DOC(takes_owned_tensor, TakesOwnedTensor, "x (owned)", "x");
KFFI_EXPORT_DOC(takes_optional, TakesOptional, "n or None", "n");
KFFI_EXPORT_DOC(takes_tuple, TakesTuple, "(int, str)", "t");
KFFI_EXPORT_DOC(takes_array, TakesArray, "ints", "xs");
KFFI_EXPORT_DOC(takes_map, TakesMap, "str -> int", "m");
KFFI_EXPORT_DOC(takes_stream, TakesStream, "a stream", "stream");
KFFI_EXPORT_DOC(takes_function, TakesFunction, "f(1)", "f");
KFFI_EXPORT_DOC(takes_dtype, TakesDtype, "a dtype", "d");
KFFI_EXPORT_DOC(takes_device, TakesDevice, "a device", "dev");
KFFI_EXPORT_DOC(takes_shape, TakesShape, "a shape", "s");
KFFI_EXPORT_DOC(two_ints, TwoInts, "a + b", "a, b");
KFFI_EXPORT_DOC(writes_tensor, WritesTensor, "writes x", "x");
KFFI_EXPORT_DOC(checked, Checked, "tensor_checks on x", "x");
KFFI_EXPORT_DOC(throws_std, ThrowsStd, "throws a std exception", "kind");

KFFI_EXPORT_CONTRACT(c_shape, ContractTwo, "a: Tensor([n, 4], float32), b: Tensor([n], float32)");
KFFI_EXPORT_CONTRACT(c_dtype, ContractOne, "x: Tensor([n], float32|float64)");
KFFI_EXPORT_CONTRACT(c_device, ContractOne, "x: Tensor([n], float32, device=cuda)");
KFFI_EXPORT_CONTRACT(c_align, ContractOne, "x: Tensor([n], float32, align=64)");
KFFI_EXPORT_CONTRACT(c_div, ContractOne, "x: Tensor([n], float32); n: int32 % 4");
KFFI_EXPORT_CONTRACT(c_mut, ContractMutOne, "y: Tensor([n], float32, mut)");
KFFI_EXPORT_CONTRACT(c_contig, ContractOne, "x: Tensor([n, m], float32, contiguous)");
KFFI_EXPORT_CONTRACT(c_scalars, ContractScalars, "k: int32[0, 10], s: float, flag: bool");
KFFI_EXPORT_CONTRACT(c_optional, ContractOptional, "b: Optional[Tensor([4], float32)]");
KFFI_EXPORT_CONTRACT(c_tuple, ContractTuple, "t: Tuple[Tensor([n], float32), int]");
KFFI_EXPORT_CONTRACT(c_stream, ContractStream, "x: Tensor([n], float32), s: Stream");
