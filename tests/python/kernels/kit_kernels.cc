// tests/python/kernels/kit_kernels.cc: the kernel author's kit under test: kffi/half.h's types
// (conversions of whole arrays of bit patterns, compared with NumPy / ml_dtypes in
// tests/python/toolchain/test_kernel_kit.py), DispatchDtype (explicit and contract-driven) and the
// typed accessors. Built without NDEBUG (conftest.py), so the debug checks of data<T>() are on.
// SPDX-License-Identifier: Apache-2.0
#include <kffi/contract.h>
#include <kffi/dispatch.h>
#include <kffi/export.h>
#include <kffi/tensor_checks.h>

#include <cstdint>
#include <string>

namespace {

/// The C++ type a dispatch reached, spelled out.
template <typename T>
const char* CppName() {
  if constexpr (std::is_same_v<T, bool>) return "bool";
  if constexpr (std::is_same_v<T, int8_t>) return "int8_t";
  if constexpr (std::is_same_v<T, int16_t>) return "int16_t";
  if constexpr (std::is_same_v<T, int32_t>) return "int32_t";
  if constexpr (std::is_same_v<T, int64_t>) return "int64_t";
  if constexpr (std::is_same_v<T, uint8_t>) return "uint8_t";
  if constexpr (std::is_same_v<T, uint16_t>) return "uint16_t";
  if constexpr (std::is_same_v<T, uint32_t>) return "uint32_t";
  if constexpr (std::is_same_v<T, uint64_t>) return "uint64_t";
  if constexpr (std::is_same_v<T, float>) return "float";
  if constexpr (std::is_same_v<T, double>) return "double";
  if constexpr (std::is_same_v<T, kffi::half>) return "kffi::half";
  if constexpr (std::is_same_v<T, kffi::bfloat16>) return "kffi::bfloat16";
  if constexpr (std::is_same_v<T, kffi::float8_e4m3fn>) return "kffi::float8_e4m3fn";
  if constexpr (std::is_same_v<T, kffi::float8_e5m2>) return "kffi::float8_e5m2";
}

/// Calls f(TypeTag<T>) for the small float type named by format, whose bits are Bits.
template <typename F>
void WithFormat(const std::string& format, F f) {
  if (format == "float16") return f(kffi::TypeTag<kffi::half>{});
  if (format == "bfloat16") return f(kffi::TypeTag<kffi::bfloat16>{});
  if (format == "float8_e4m3fn") return f(kffi::TypeTag<kffi::float8_e4m3fn>{});
  if (format == "float8_e5m2") return f(kffi::TypeTag<kffi::float8_e5m2>{});
  KFFI_THROW(ValueError) << "unknown format " << format;
}

/// y[i] = float(T::from_bits(bits[i])): bits is uint16 (half, bfloat16) or uint8 (fp8).
void BitsToFloat(kffi::TensorView y, kffi::ConstTensorView bits, std::string format) {
  kffi::CheckContiguous(bits, "bits");
  kffi::CheckContiguous(y, "y");
  kffi::CheckSameShape(y, bits, "y", "bits");
  WithFormat(format, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using Bits = decltype(T{}.x);
    const Bits* in = bits.data<Bits>();
    float* out = y.data<float>();
    for (int64_t i = 0; i < y.numel(); ++i) out[i] = T::from_bits(in[i]);
  });
}

/// bits[i] = T(x[i]).x: the rounded value's bits.
void FloatToBits(kffi::TensorView bits, kffi::ConstTensorView x, std::string format) {
  kffi::CheckContiguous(bits, "bits");
  kffi::CheckContiguous(x, "x");
  kffi::CheckSameShape(bits, x, "bits", "x");
  WithFormat(format, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using Bits = decltype(T{}.x);
    const float* in = x.data<float>();
    Bits* out = bits.data<Bits>();
    for (int64_t i = 0; i < x.numel(); ++i) out[i] = T(in[i]).x;
  });
}

/// The element type every dtype with a C++ type dispatches to, and its size.
std::string DispatchAll(kffi::ConstTensorView x) {
  return kffi::DispatchDtype<bool, int8_t, int16_t, int32_t, int64_t, uint8_t, uint16_t, uint32_t,
                             uint64_t, float, double, kffi::half, kffi::bfloat16,
                             kffi::float8_e4m3fn, kffi::float8_e5m2>(x, "x", [](auto tag) {
    using T = typename decltype(tag)::type;
    return std::string(CppName<T>()) + ":" + std::to_string(sizeof(T));
  });
}

/// Dispatch over three float types: the sum of x in double (also checks data<T>() agrees).
double DispatchFloats(kffi::ConstTensorView x) {
  kffi::CheckContiguous(x, "x");
  return kffi::DispatchDtype<float, kffi::half, kffi::bfloat16>(x.dtype(), "x", [&](auto tag) {
    using T = typename decltype(tag)::type;
    double sum = 0;
    for (int64_t i = 0; i < x.numel(); ++i) sum += static_cast<float>(x.data<T>()[i]);
    return sum;
  });
}

// ---- contract-driven dispatch ----------------------------------------------------------------
constexpr char kCastContract[] =
    "y: Tensor([n], float32|float64, mut), "
    "x: Tensor([n], float16 | bfloat16 | float8_e4m3fn | int8, device=cpu)";

/// y = float(x): both dispatches take their lists from the contract.
void CastNames(kffi::TensorView y, kffi::ConstTensorView x) {
  kffi::DispatchDtype<kffi::ContractDtypes(kCastContract, "y")>(y, "y", [&](auto out_tag) {
    using Out = typename decltype(out_tag)::type;
    kffi::DispatchDtype<kffi::ContractDtypes(kCastContract, "x")>(x, "x", [&](auto in_tag) {
      using In = typename decltype(in_tag)::type;
      auto in = x.accessor<In, 1>();
      auto out = y.accessor<Out, 1>();
      for (int64_t i = 0; i < x.size(0); ++i) out[i] = static_cast<Out>(static_cast<float>(in[i]));
    });
  });
}

/// The same dispatch without the contract's check in front: what it alone lets through.
std::string ContractDispatchName(kffi::ConstTensorView x) {
  return kffi::DispatchDtype<kffi::ContractDtypes(kCastContract, "x")>(
      x, "x", [](auto tag) { return std::string(CppName<typename decltype(tag)::type>()); });
}

template <typename... Ts>
std::string NamesOf(kffi::details::TypeList<Ts...>) {
  std::string out;
  ((out += (out.empty() ? "" : "|") + kffi::DataTypeToString(kffi::dtypes::of<Ts>)), ...);
  return out;
}

/// The instantiated list, as dtype names in order: compared with the contract's metadata.
std::string ContractListNames() {
  return NamesOf(kffi::details::ContractTypes<kffi::ContractDtypes(kCastContract, "x")>{});
}

// The parser of ContractDtypes: Optional, free whitespace, a parameter after a Tuple.
constexpr char kOddContract[] =
    " a : Tuple[Tensor([2], int8), int], b:Optional[ Optional [Tensor( [ n,m ] ,bool|uint64 ,"
    " mut)]] , c: float[0.0, 1.0] -> Tensor([n], float32); n: int32 % 4";
static_assert(std::is_same_v<kffi::details::ContractTypes<kffi::ContractDtypes(kOddContract, "b")>,
                             kffi::details::TypeList<bool, uint64_t>>);
static_assert(kffi::dtypes::of<kffi::half> == kffi::dtypes::float16 &&
              kffi::dtypes::of<const kffi::bfloat16> == kffi::dtypes::bfloat16);

// ---- typed accessors -------------------------------------------------------------------------

/// sum(x[i][j] * (i + 1) * 10^j) over a 2-d float32 tensor of any strides and byte_offset.
double AccessorWeighted(kffi::ConstTensorView x) {
  auto a = x.accessor<float, 2>();
  double sum = 0, row_weight = 1;
  for (int64_t i = 0; i < a.size(0); ++i, row_weight += 1) {
    double col_weight = 1;
    for (int64_t j = 0; j < a.size(1); ++j, col_weight *= 10) {
      sum += a[i][j] * row_weight * col_weight;
      if (a(i, j) != a[i][j]) KFFI_THROW(RuntimeError) << "a(i, j) disagrees with a[i][j]";
    }
  }
  return sum;
}

/// y[i][j] = i * 100 + j through accessor<float, 2>() (strided y).
void AccessorFill(kffi::TensorView y) {
  auto a = y.accessor<float, 2>();
  for (int64_t i = 0; i < a.size(0); ++i) {
    for (int64_t j = 0; j < a.size(1); ++j) a[i][j] = static_cast<float>(i * 100 + j);
  }
}

/// x.accessor<float, 1>()[index]: an index out of bounds is an IndexError (debug builds).
double AccessorAt(kffi::ConstTensorView x, int64_t index) { return x.accessor<float, 1>()[index]; }

/// x.data<float>()[0]: a tensor of another dtype is a TypeError (debug builds).
double FirstAsFloat(kffi::ConstTensorView x) { return x.data<float>()[0]; }

}  // namespace

KFFI_EXPORT_DOC(bits_to_float, BitsToFloat, "y = float(T::from_bits(bits))", "y, bits, format");
KFFI_EXPORT_DOC(float_to_bits, FloatToBits, "bits = T(x).x", "bits, x, format");
KFFI_EXPORT_DOC(dispatch_all, DispatchAll, "The C++ type x's dtype dispatches to.", "x");
KFFI_EXPORT_DOC(dispatch_floats, DispatchFloats, "sum(x) for float32|float16|bfloat16.", "x");
KFFI_EXPORT_CONTRACT(cast_contract, CastNames, kCastContract);
KFFI_EXPORT_DOC(contract_dispatch_name, ContractDispatchName, "The contract list's dispatch.", "x");
KFFI_EXPORT(contract_list_names, ContractListNames);
KFFI_EXPORT_DOC(accessor_weighted, AccessorWeighted, "sum(x[i][j] * (i + 1) * 10^j)", "x");
KFFI_EXPORT_DOC(accessor_fill, AccessorFill, "y[i][j] = i * 100 + j", "y");
KFFI_EXPORT_DOC(accessor_at, AccessorAt, "x[index]", "x, index");
KFFI_EXPORT_DOC(first_as_float, FirstAsFloat, "x.data<float>()[0]", "x");
