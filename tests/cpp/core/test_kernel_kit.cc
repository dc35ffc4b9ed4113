// tests/cpp/core/test_kernel_kit.cc: kffi/half.h, kffi/dispatch.h and TensorAccessor from C++ (the
// exhaustive conversion tests against NumPy/ml_dtypes are
// tests/python/toolchain/test_kernel_kit.py).
// SPDX-License-Identifier: Apache-2.0
#include <gtest/gtest.h>
#include <kffi/contract.h>
#include <kffi/details/json.h>
#include <kffi/dispatch.h>

#include <cmath>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

namespace {

using kffi::details::ContractTypes;
using kffi::details::TypeList;

// ---- the types -------------------------------------------------------------------------------

TEST(KernelKitTypes, ConvertKnownValues) {
  EXPECT_EQ(kffi::half(1.0f).x, 0x3c00);
  EXPECT_EQ(kffi::half(-2.5f).x, 0xc100);
  EXPECT_EQ(kffi::half(65504.0f).x, 0x7bff);
  EXPECT_EQ(kffi::half(1e6f).x, 0x7c00);
  EXPECT_EQ(static_cast<float>(kffi::half::from_bits(0x0001)), std::ldexp(1.0f, -24));
  EXPECT_EQ(kffi::bfloat16(1.0f).x, 0x3f80);
  EXPECT_EQ(static_cast<float>(kffi::bfloat16::from_bits(0x4049)), 3.140625f);
  EXPECT_EQ(kffi::float8_e4m3fn(448.0f).x, 0x7e);
  EXPECT_TRUE(std::isnan(static_cast<float>(kffi::float8_e4m3fn(1000.0f))));
  EXPECT_EQ(kffi::float8_e5m2(57344.0f).x, 0x7b);
  EXPECT_TRUE(std::isinf(static_cast<float>(kffi::float8_e5m2(1e9f))));
  EXPECT_TRUE(std::isnan(static_cast<float>(kffi::half(std::numeric_limits<float>::quiet_NaN()))));
  // Arithmetic goes through float.
  const kffi::half a(1.5f), b(2.0f);
  EXPECT_EQ(kffi::half(a * b).x, kffi::half(3.0f).x);
  static_assert(kffi::half::from_bits(0x3c00).x == 0x3c00, "from_bits is constexpr");
}

TEST(KernelKitTypes, DtypesOf) {
  static_assert(kffi::dtypes::of<kffi::half> == kffi::dtypes::float16);
  static_assert(kffi::dtypes::of<kffi::bfloat16> == kffi::dtypes::bfloat16);
  static_assert(kffi::dtypes::of<kffi::float8_e4m3fn> == kffi::dtypes::float8_e4m3fn);
  static_assert(kffi::dtypes::of<kffi::float8_e5m2> == kffi::dtypes::float8_e5m2);
  static_assert(kffi::dtypes::of<const float> == kffi::dtypes::float32);
  static_assert(kffi::dtypes::of<bool> == kffi::dtypes::bool_);
  static_assert(kffi::dtypes::of<uint64_t> == kffi::dtypes::uint64);
}

// ---- dispatch --------------------------------------------------------------------------------

template <typename F>
std::string ErrorOf(F f, const char* kind) {
  try {
    f();
  } catch (const kffi::Error& e) {
    EXPECT_EQ(e.kind(), kind);
    return e.message();
  }
  ADD_FAILURE() << "expected a " << kind;
  return "";
}

TEST(KernelKitDispatch, ReachesTheInstantiationAndReturnsItsResult) {
  const auto size_of = [](DLDataType dtype) {
    return kffi::DispatchDtype<float, double, kffi::half, int8_t>(
        dtype, "x", [](auto tag) { return sizeof(typename decltype(tag)::type); });
  };
  EXPECT_EQ(size_of(kffi::dtypes::float32), 4u);
  EXPECT_EQ(size_of(kffi::dtypes::float64), 8u);
  EXPECT_EQ(size_of(kffi::dtypes::float16), 2u);
  EXPECT_EQ(size_of(kffi::dtypes::int8), 1u);
  EXPECT_EQ(ErrorOf([&] { size_of(kffi::dtypes::bfloat16); }, "TypeError"),
            "x.dtype: expected float32|float64|float16|int8, got bfloat16");
  // Lanes count: float32x4 is not float32.
  EXPECT_EQ(ErrorOf(
                [&] {
                  size_of(DLDataType{kDLFloat, 32, 4});
                },
                "TypeError"),
            "x.dtype: expected float32|float64|float16|int8, got float32x4");
}

constexpr char kContract[] =
    "a: Tuple[Tensor([2], int8), int], b : Optional[Tensor([n, 4], bfloat16 | float8_e5m2 "
    "| uint16, mut)], c: float, d: Tensor([n], float64|int32|bool) -> Tensor([n], float32); "
    "n: int32 % 4";

TEST(KernelKitDispatch, ContractListsAreReadAtCompileTime) {
  static_assert(std::is_same_v<ContractTypes<kffi::ContractDtypes(kContract, "b")>,
                               TypeList<kffi::bfloat16, kffi::float8_e5m2, uint16_t>>);
  static_assert(std::is_same_v<ContractTypes<kffi::ContractDtypes(kContract, "d")>,
                               TypeList<double, int32_t, bool>>);
  EXPECT_EQ(ErrorOf(
                [] {
                  kffi::DispatchDtype<kffi::ContractDtypes(kContract, "d")>(kffi::dtypes::float32,
                                                                            "d", [](auto) {});
                },
                "TypeError"),
            "d.dtype: expected float64|int32|bool, got float32");
}

/// The dtypes the runtime's parser finds for a parameter, from the contract's metadata (the
/// parameter itself, not a record field of the same name).
std::string RuntimeDtypes(const char* text, const std::string& param) {
  const std::string meta = kffi::Contract::Parse("f", text).MetadataJson("None", "");
  kffi::details::Json doc;
  EXPECT_TRUE(kffi::details::JsonReader(meta).Parse(&doc));
  const kffi::details::Json* params = doc.Get("params");
  if (params == nullptr) return "(no params)";
  for (const kffi::details::Json& p : params->items) {
    const std::string* name = p.GetString("name");
    const kffi::details::Json* dtypes = p.Get("dtypes");
    if (name == nullptr || *name != param || dtypes == nullptr) continue;
    std::string out;
    for (const kffi::details::Json& d : dtypes->items) out += (out.empty() ? "" : "|") + d.str;
    return out;
  }
  return "(no such parameter)";
}

template <typename... Ts>
std::string Names(TypeList<Ts...>) {
  std::string out;
  ((out += (out.empty() ? "" : "|") + kffi::DataTypeToString(kffi::dtypes::of<Ts>)), ...);
  return out;
}

// Records whose fields are named like the tensor parameters after them: the fields are no
// parameters, for the compile-time reader as for the runtime's parser.
constexpr char kRecordContract[] =
    "cfg: demo.KitTiling{d: float64[0, 1], b: int64[1, 64]}, b: Tensor([n], float16|int8), "
    "o: Optional[demo.KitTiling{b: int64}], d: Tensor([n, 2], uint8|float32, mut); n: int64";

TEST(KernelKitDispatch, CompileTimeListEqualsTheRuntimeContract) {
  EXPECT_EQ(Names(ContractTypes<kffi::ContractDtypes(kContract, "b")>{}),
            RuntimeDtypes(kContract, "b"));
  EXPECT_EQ(Names(ContractTypes<kffi::ContractDtypes(kContract, "d")>{}),
            RuntimeDtypes(kContract, "d"));
  static_assert(std::is_same_v<ContractTypes<kffi::ContractDtypes(kRecordContract, "b")>,
                               TypeList<kffi::half, int8_t>>);
  EXPECT_EQ(Names(ContractTypes<kffi::ContractDtypes(kRecordContract, "b")>{}),
            RuntimeDtypes(kRecordContract, "b"));
  EXPECT_EQ(Names(ContractTypes<kffi::ContractDtypes(kRecordContract, "d")>{}),
            RuntimeDtypes(kRecordContract, "d"));
}

// ---- typed accessors -------------------------------------------------------------------------

TEST(KernelKitAccessor, FollowsStridesAndComputesCompactOnes) {
  std::vector<float> buf(12);
  for (size_t i = 0; i < buf.size(); ++i) buf[i] = static_cast<float>(i);
  int64_t shape[2] = {3, 2};
  int64_t strides[2] = {1, 3};  // column-major 3x2 inside the buffer
  DLTensor t{buf.data(), {kDLCPU, 0}, 2, kffi::dtypes::float32, shape, strides, 4};
  kffi::TensorView v(&t);  // byte_offset 4: the first element is buf[1]
  auto a = v.accessor<float, 2>();
  EXPECT_EQ(a[0][0], 1.0f);
  EXPECT_EQ(a[2][1], 6.0f);
  EXPECT_EQ(a(1, 1), 5.0f);
  a[1][0] = 100.0f;
  EXPECT_EQ(buf[2], 100.0f);
  t.strides = nullptr;  // compact row-major
  auto c = kffi::ConstTensorView(&t).accessor<float, 2>();
  static_assert(std::is_same_v<decltype(c[0][0]), const float&>);
  EXPECT_EQ(c[2][1], 6.0f);
  EXPECT_EQ(c.stride(0), 2);
  EXPECT_EQ(ErrorOf([&] { v.accessor<float, 3>(); }, "ValueError"),
            "accessor<T, N>().ndim: expected 3, got 2");
}

TEST(KernelKitAccessor, DebugChecksFollowNdebug) {
  float value = 1.0f;
  int64_t shape[1] = {1};
  DLTensor t{&value, {kDLCPU, 0}, 1, kffi::dtypes::float32, shape, nullptr, 0};
  kffi::ConstTensorView v(&t);
#if defined(NDEBUG)
  // Release builds check neither the element type nor the indices.
  EXPECT_NO_THROW((void)v.data<int32_t>());
  EXPECT_NO_THROW(((void)v.accessor<float, 1>()[0]));
#else
  EXPECT_EQ(ErrorOf([&] { (void)v.data<int32_t>(); }, "TypeError"),
            "data<int32>(): expected a tensor of int32, got a tensor of float32");
  EXPECT_EQ(ErrorOf([&] { (void)v.accessor<float, 1>()[1]; }, "IndexError"),
            "Tensor accessor: index 1 is out of bounds for a dimension of size 1");
#endif
  EXPECT_NO_THROW((void)v.data<void>());
  EXPECT_NO_THROW((void)v.data<char>());
}

}  // namespace
