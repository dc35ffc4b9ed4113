// tests/cpp/test_contract.cc: contracts: the check catalogue and its messages, parsing, outputs,
// metadata and exports through a loaded module.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <kffi/container/tuple.h>
#include <kffi/contract.h>
#include <kffi/env.h>
#include <kffi/module.h>
#include <kffi/optional.h>

#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

namespace {

using kffi::Any;
using kffi::Contract;
using kffi::Function;
using kffi::TensorView;

const DLDevice kCPU{kDLCPU, 0};
const DLDevice kCuda0{kDLCUDA, 0};
const DLDevice kCuda1{kDLCUDA, 1};
constexpr DLDataType kF32 = kffi::dtypes::float32;
constexpr DLDataType kF16 = kffi::dtypes::float16;

alignas(64) char g_data[1 << 12];

// A DLTensor over owned shape/strides; data points into a 64-byte aligned buffer (never read).
struct FakeTensor {
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;
  DLTensor t;
  FakeTensor(std::vector<int64_t> s, DLDataType dtype = kF32, DLDevice dev = kCPU,
             std::vector<int64_t> st = {}, size_t data_offset = 0)
      : shape(std::move(s)), strides(std::move(st)) {
    t = DLTensor{g_data + data_offset,
                 dev,
                 static_cast<int32_t>(shape.size()),
                 dtype,
                 shape.data(),
                 strides.empty() ? nullptr : strides.data(),
                 0};
  }
  operator TensorView() const { return TensorView(&t); }  // NOLINT
};

// "Kind: message" of the kffi::Error that f throws, or "no error".
template <typename F>
std::string ErrorOf(F&& f) {
  try {
    f();
  } catch (const kffi::Error& e) {
    return e.kind() + ": " + e.message();
  }
  return "no error";
}

void Nop2(TensorView, TensorView) {}

const char kAddText[] =
    "a: Tensor([n], float32, align=16), b: Tensor([n], float32, align=16); n: int32 % 16";
const char kAddSig[] =
    "`add_one(a: Tensor([n], float32, align=16), b: Tensor([n], float32, align=16))`";

TEST(Contract, RendersTheSignatureAsWritten) {
  Contract c = Contract::Parse("f",
                               "a: Tensor([n0], float32), b: Tensor([n0], float32),"
                               " s: int32, stream: EnvStream -> Tensor([n0], float32)");
  EXPECT_EQ(c.signature(), "f(a: Tensor([n0], float32), b: Tensor([n0], float32), s: int32)");
  EXPECT_EQ(c.num_args(), 3);
  ASSERT_EQ(c.params().size(), 3u);
  EXPECT_EQ(c.params()[2].first, "s");
  EXPECT_EQ(c.params()[0].second, "Tensor([n0], float32)");
  EXPECT_EQ(Contract::Parse("g", "").signature(), "g()");
}

TEST(Contract, CountAndTypeMismatchesAreTypeErrors) {
  Function f = kffi::FunctionWithContract(Nop2, "add_one", kAddText);
  FakeTensor a({128});
  EXPECT_EQ(
      ErrorOf([&] { f(TensorView(a)); }),
      std::string("TypeError: Expects 2 parameters when calling: ") + kAddSig + ", but got 1");
  EXPECT_EQ(ErrorOf([&] { f(TensorView(a), 1); }),
            std::string("TypeError: Mismatched type on argument #1 when calling: ") + kAddSig +
                ", expected Tensor, but got int");
  Function g = kffi::FunctionWithContract([](int64_t) {}, "g", "x: int");
  EXPECT_EQ(ErrorOf([&] { g(); }),
            "TypeError: Expects 1 parameter when calling: `g(x: int)`, but got 0");
}

TEST(Contract, MisalignedDataOffByOneElement) {
  Function f = kffi::FunctionWithContract(Nop2, "add_one", kAddText);
  FakeTensor a({128}), b({128}), a1({128}, kF32, kCPU, {}, 4);
  EXPECT_EQ(ErrorOf([&] { f(TensorView(a), TensorView(b)); }), "no error");
  EXPECT_EQ(ErrorOf([&] { f(TensorView(a1), TensorView(b)); }),
            std::string("ValueError: Misaligned Tensor data on argument #0 when calling: ") +
                kAddSig + ", expected data alignment=16 bytes, but got data alignment=4 bytes");
  // The alignment is of the first element: data + byte_offset.
  a.t.byte_offset = 8;
  EXPECT_EQ(ErrorOf([&] { f(TensorView(a), TensorView(b)); }).substr(0, 44),
            "ValueError: Misaligned Tensor data on argume");
  a.t.byte_offset = 64;
  EXPECT_EQ(ErrorOf([&] { f(TensorView(a), TensorView(b)); }), "no error");
}

TEST(Contract, SymbolsBindFirstThenMustMatch) {
  Function f = kffi::FunctionWithContract(Nop2, "add_one", kAddText);
  FakeTensor a({128}), b({128}), b126({126}), a126({126});
  EXPECT_EQ(ErrorOf([&] { f(TensorView(a), TensorView(b126)); }),
            std::string("ValueError: Mismatched b.shape[0] on argument #1 when calling: ") +
                kAddSig + ", expected to match a.shape[0], but got 126 (a.shape[0] is 128)");
  EXPECT_EQ(ErrorOf([&] { f(TensorView(a126), TensorView(b126)); }),
            std::string("ValueError: Invalid a.shape[0] on argument #0 when calling: ") + kAddSig +
                ", expected to be divisible by 16, but got 126");
  FakeTensor huge({int64_t{1} << 32});
  EXPECT_EQ(ErrorOf([&] { f(TensorView(huge), TensorView(huge)); }),
            std::string("ValueError: Out of bound a.shape[0] on argument #0 when calling: ") +
                kAddSig +
                ", expected to be in int32 range [-2147483648, 2147483647], but got 4294967296");
  // Undeclared symbols are int64 with divisibility 1; a divisibility that is no power of two.
  Function g =
      kffi::FunctionWithContract(Nop2, "g", "x: Tensor([m, k], *), y: Tensor([k], *); k % 3");
  FakeTensor x({int64_t{1} << 40, 6}), y6({6}), y7({7}), x7({2, 7});
  EXPECT_EQ(ErrorOf([&] { g(TensorView(x), TensorView(y6)); }), "no error");
  EXPECT_EQ(ErrorOf([&] { g(TensorView(x7), TensorView(y7)); }),
            "ValueError: Invalid x.shape[1] on argument #0 when calling: `g(x: Tensor([m, k], *), "
            "y: Tensor([k], *))`, expected to be divisible by 3, but got 7");
  EXPECT_EQ(Contract::Parse("g", "x: Tensor([m, k], *), y: Tensor([k], *); k % 3")
                .CheckArgs(TensorView(x), TensorView(y6))
                .Get("m"),
            int64_t{1} << 40);
}

TEST(Contract, TensorFieldsInCatalogueOrder) {
  const std::string sig = "`h(x: Tensor([2, n], float16|bfloat16, device=cuda, offset0))`";
  Function h = kffi::FunctionWithContract([](TensorView) {}, "h",
                                          "x: Tensor([2, n], float16|bfloat16, device=cuda, "
                                          "offset0)");
  const std::string head = "ValueError: Mismatched Tensor on argument #0 when calling: " + sig;
  FakeTensor ok({2, 5}, kF16, kCuda0);
  EXPECT_EQ(ErrorOf([&] { h(TensorView(ok)); }), "no error");
  FakeTensor bad({2, 5, 1}, kF32, kCPU);  // ndim, device type and dtype are all wrong
  EXPECT_EQ(ErrorOf([&] { h(TensorView(bad)); }), head + ", expected ndim=2, but got ndim=3");
  bad.shape.pop_back();
  bad.t.ndim = 2;
  EXPECT_EQ(ErrorOf([&] { h(TensorView(bad)); }),
            head + ", expected device_type=cuda, but got device_type=cpu");
  bad.t.device = kCuda0;
  EXPECT_EQ(ErrorOf([&] { h(TensorView(bad)); }),
            head + ", expected dtype=float16|bfloat16, but got dtype=float32");
  bad.t.dtype = kffi::dtypes::bfloat16;
  bad.t.byte_offset = 64;
  EXPECT_EQ(ErrorOf([&] { h(TensorView(bad)); }),
            head + ", expected byte_offset=0, but got byte_offset=64");
  bad.t.byte_offset = 0;
  bad.shape[0] = 3;
  EXPECT_EQ(ErrorOf([&] { h(TensorView(bad)); }),
            "ValueError: Mismatched x.shape[0] on argument #0 when calling: " + sig +
                ", expected to be 2, but got 3");
}

TEST(Contract, DeviceIndexIsSharedByAllTensors) {
  Function f = kffi::FunctionWithContract(Nop2, "f", "a: Tensor([n], *), b: Tensor([n], *)");
  FakeTensor a({4}, kF32, kCuda0), b({4}, kF32, kCuda1), c({4}, kF32, kCuda0);
  EXPECT_EQ(ErrorOf([&] { f(TensorView(a), TensorView(c)); }), "no error");
  EXPECT_EQ(ErrorOf([&] { f(TensorView(a), TensorView(b)); }),
            "ValueError: Mismatched device index on argument #1 when calling: `f(a: Tensor([n], "
            "*), b: Tensor([n], *))`, expected to match a.device.index, but got 1 "
            "(a.device.index is 0)");
  // The device index is checked before the shape.
  FakeTensor b5({5}, kF32, kCuda1);
  EXPECT_NE(ErrorOf([&] { f(TensorView(a), TensorView(b5)); }).find("device index"),
            std::string::npos);
}

TEST(Contract, LayoutOptions) {
  auto make = [](const char* layout) {
    return kffi::FunctionWithContract([](TensorView) {}, "f",
                                      std::string("x: Tensor([n, m], float32, ") + layout + ")");
  };
  Function row = make("contiguous"), col = make("col_major"), order = make("stride_order=(1,0)");
  FakeTensor compact({4, 3}), rowt({4, 3}, kF32, kCPU, {3, 1}), colt({4, 3}, kF32, kCPU, {1, 4});
  FakeTensor padded({4, 3}, kF32, kCPU, {8, 1}), ones({1, 3}, kF32, kCPU, {99, 1});
  FakeTensor empty({0, 3}, kF32, kCPU, {7, 7});
  for (const FakeTensor* t : {&compact, &rowt, &ones, &empty}) {
    EXPECT_EQ(ErrorOf([&] { row(TensorView(*t)); }), "no error");
  }
  EXPECT_EQ(
      ErrorOf([&] { row(TensorView(padded)); }),
      "ValueError: Mismatched Tensor on argument #0 when calling: `f(x: Tensor([n, m], "
      "float32, contiguous))`, expected contiguous, but got shape=[4, 3] with strides=[8, 1]");
  EXPECT_EQ(ErrorOf([&] { col(TensorView(colt)); }), "no error");
  EXPECT_EQ(ErrorOf([&] { order(TensorView(colt)); }), "no error");
  EXPECT_EQ(ErrorOf([&] { col(TensorView(empty)); }), "no error");
  // NULL strides are compact row-major.
  EXPECT_EQ(ErrorOf([&] { col(TensorView(compact)); }),
            "ValueError: Mismatched Tensor on argument #0 when calling: `f(x: Tensor([n, m], "
            "float32, col_major))`, expected col_major, but got shape=[4, 3] with strides=[3, 1]");
  EXPECT_NE(ErrorOf([&] { order(TensorView(rowt)); }).find("expected stride_order=(1,0), but got"),
            std::string::npos);
}

TEST(Contract, SymbolicStridesBindLikeDims) {
  Function f = kffi::FunctionWithContract(
      Nop2, "f",
      "x: Tensor([n, m], *, strides=[s, 1]), y: Tensor([n, m], *, strides=[s, 1]); s % 8");
  FakeTensor x({4, 3}, kF32, kCPU, {8, 1}), y({4, 3}, kF32, kCPU, {8, 1});
  FakeTensor y16({4, 3}, kF32, kCPU, {16, 1}), x3({4, 3}), y2({4, 3}, kF32, kCPU, {8, 2});
  EXPECT_EQ(ErrorOf([&] { f(TensorView(x), TensorView(y)); }), "no error");
  const std::string sig =
      "`f(x: Tensor([n, m], *, strides=[s, 1]), y: Tensor([n, m], *, strides=[s, 1]))`";
  EXPECT_EQ(ErrorOf([&] { f(TensorView(x), TensorView(y16)); }),
            "ValueError: Mismatched y.strides[0] on argument #1 when calling: " + sig +
                ", expected to match x.strides[0], but got 16 (x.strides[0] is 8)");
  EXPECT_EQ(ErrorOf([&] { f(TensorView(x3), TensorView(y)); }),  // NULL strides: [3, 1]
            "ValueError: Invalid x.strides[0] on argument #0 when calling: " + sig +
                ", expected to be divisible by 8, but got 3");
  EXPECT_EQ(ErrorOf([&] { f(TensorView(x), TensorView(y2)); }),
            "ValueError: Mismatched y.strides[1] on argument #1 when calling: " + sig +
                ", expected to be 1, but got 2");
}

TEST(Contract, TupleElementsAreNamed) {
  using T3 = kffi::Tuple<kffi::Tensor, kffi::Tensor, double>;
  Function f =
      kffi::FunctionWithContract([](T3 x) { return std::get<2>(x); }, "tup",
                                 "x: Tuple[Tensor([n], float32), Tensor([n], float32), float]");
  const std::string sig = "`tup(x: Tuple[Tensor([n], float32), Tensor([n], float32), float])`";
  kffi::Tensor a = kffi::Tensor::FromEnvAlloc({8}, kF32, kCPU);
  kffi::Tensor b = kffi::Tensor::FromEnvAlloc({8}, kF32, kCPU);
  kffi::Tensor c = kffi::Tensor::FromEnvAlloc({7}, kF32, kCPU);
  EXPECT_EQ(f(Any(std::make_tuple(a, b, 5.0))).cast<double>(), 5.0);
  EXPECT_EQ(ErrorOf([&] { f(Any(std::make_tuple(a, c, 5.0))); }),
            "ValueError: Mismatched x[1].shape[0] on x[1] in argument #0 when calling: " + sig +
                ", expected to match x[0].shape[0], but got 7 (x[0].shape[0] is 8)");
  EXPECT_EQ(ErrorOf([&] { f(Any(std::make_tuple(a, 2, 5.0))); }),
            "TypeError: Mismatched type on x[1] in argument #0 when calling: " + sig +
                ", expected Tensor, but got int");
  EXPECT_EQ(ErrorOf([&] { f(Any(std::make_tuple(a, b))); }),
            "TypeError: Mismatched type on argument #0 when calling: " + sig +
                ", expected Tuple of 3 elements, but got Array of 2 elements");
  Function nested = kffi::FunctionWithContract([](kffi::Array<Any>) {}, "nest",
                                               "x: Tuple[int, Tuple[Tensor([2], float32)]]");
  EXPECT_EQ(ErrorOf([&] { nested(Any(std::make_tuple(1, std::make_tuple(a)))); }),
            "ValueError: Mismatched x[1][0].shape[0] on x[1][0] in argument #0 when calling: "
            "`nest(x: Tuple[int, Tuple[Tensor([2], float32)]])`, expected to be 2, but got 8");
}

TEST(Contract, OptionalArgumentsAcceptNone) {
  using OptT = kffi::Optional<TensorView>;
  Function f = kffi::FunctionWithContract(
      [](OptT bias, TensorView) { return bias.has_value(); }, "f",
      "bias: Optional[Tensor([n], float32)], x: Tensor([m, n], float32)");
  FakeTensor bias4({4}), bias5({5}), x({3, 4});
  EXPECT_FALSE(f(nullptr, TensorView(x)).cast<bool>());
  EXPECT_TRUE(f(TensorView(bias4), TensorView(x)).cast<bool>());
  // n binds at bias when given, else at x.
  EXPECT_EQ(ErrorOf([&] { f(TensorView(bias5), TensorView(x)); }),
            "ValueError: Mismatched x.shape[1] on argument #1 when calling: `f(bias: "
            "Optional[Tensor([n], float32)], x: Tensor([m, n], float32))`, expected to match "
            "bias.shape[0], but got 4 (bias.shape[0] is 5)");
  EXPECT_NE(ErrorOf([&] { f(1, TensorView(x)); }).find("expected Tensor or None, but got int"),
            std::string::npos);
  EXPECT_EQ(Contract::Parse("f", "bias: Optional[Tensor([n], float32)], x: Tensor([m, n], float32)")
                .CheckArgs(nullptr, TensorView(x))
                .Get("n"),
            4);
}

TEST(Contract, ScalarsWithRanges) {
  Function f = kffi::FunctionWithContract([](int32_t, int64_t, double, bool) {}, "s",
                                          "a: int32, b: int[0, 1024], c: float[0.0, 1.0], d: bool");
  const std::string sig = "`s(a: int32, b: int[0, 1024], c: float[0.0, 1.0], d: bool)`";
  EXPECT_EQ(ErrorOf([&] { f(-5, 1024, 1, true); }), "no error");
  EXPECT_EQ(ErrorOf([&] { f(int64_t{1} << 31, 0, 0.5, false); }),
            "ValueError: Out of bound a on argument #0 when calling: " + sig +
                ", expected to be in int32 range [-2147483648, 2147483647], but got 2147483648");
  EXPECT_EQ(ErrorOf([&] { f(0, 2000, 0.5, false); }),
            "ValueError: Out of bound b on argument #1 when calling: " + sig +
                ", expected to be in range [0, 1024], but got 2000");
  EXPECT_EQ(ErrorOf([&] { f(0, 0, 1.5, false); }),
            "ValueError: Out of bound c on argument #2 when calling: " + sig +
                ", expected to be in range [0.0, 1.0], but got 1.5");
  EXPECT_EQ(ErrorOf([&] { f(0, 0, 0.5, "yes"); }),
            "TypeError: Mismatched type on argument #3 when calling: " + sig +
                ", expected bool, but got str");
  Function g = kffi::FunctionWithContract([](float) {}, "g", "x: float32");
  EXPECT_NE(ErrorOf([&] { g(1e39); }).find("expected to be in float32 range"), std::string::npos);
}

TEST(Contract, EnvStreamIsTheCurrentStreamOfTheFirstNonCpuTensor) {
  Function f = kffi::FunctionWithContract(
      [](TensorView, void* stream, TensorView) { return reinterpret_cast<int64_t>(stream); }, "f",
      "a: Tensor([n], *), stream: EnvStream, b: Tensor([n], *)");
  EXPECT_EQ(
      Contract::Parse("f", "a: Tensor([n], *), stream: EnvStream, b: Tensor([n], *)").signature(),
      "f(a: Tensor([n], *), b: Tensor([n], *))");
  kffi::env::StreamScope scope(kCuda1, reinterpret_cast<void*>(0x1234));
  FakeTensor cpu({4}, kF32, {kDLCPU, 1}), cuda({4}, kF32, kCuda1);
  EXPECT_EQ(f(TensorView(cuda), TensorView(cuda)).cast<int64_t>(), 0x1234);
  EXPECT_EQ(f(TensorView(cpu), TensorView(cuda)).cast<int64_t>(), 0x1234);
  EXPECT_EQ(f(TensorView(cpu), TensorView(cpu)).cast<int64_t>(), 0);
  EXPECT_NE(ErrorOf([&] { f(TensorView(cuda)); }).find("Expects 2 parameters"), std::string::npos);
}

TEST(Contract, OutputShapesFromBoundSymbols) {
  Contract c =
      Contract::Parse("f",
                      "x: Tensor([n, m], float32) -> out: Tensor([n * 2, (m + 1) // 2], float32), "
                      "Tensor([-n // 3, m - n, 7], int8)");
  FakeTensor x({4, 5});
  kffi::ContractBindings b = c.CheckArgs(TensorView(x));
  EXPECT_EQ(c.OutputShapes(b), (std::vector<std::vector<int64_t>>{{8, 3}, {-2, 1, 7}}));
  EXPECT_EQ(c.OutputDtype(1), "int8");
  EXPECT_EQ(c.OutputShape(0, c.Bind({{"n", 10}, {"m", 0}})), (std::vector<int64_t>{20, 0}));
  EXPECT_EQ(ErrorOf([&] {
              c.OutputShape(0, c.Bind({{"n", 1}}));
            }),
            "ValueError: Cannot evaluate the shape of output #0 of `f`: symbol `m` is not bound");
  EXPECT_EQ(ErrorOf([&] {
              c.Bind({{"k", 1}});
            }),
            "KeyError: The contract of `f` has no symbol `k`");
  Contract d = Contract::Parse("d", "x: Tensor([n], *) -> Tensor([10 // (n - n)], *)");
  EXPECT_NE(ErrorOf([&] {
              d.OutputShape(0, d.Bind({{"n", 3}}));
            }).find("division by zero"),
            std::string::npos);
}

TEST(Contract, MalformedContractsNameTheColumn) {
  struct Case {
    const char* text;
    const char* message;
  } cases[] = {
      {"x: Tensor([n, m, float32)", "at column 25: expected `]`"},
      {"x: Tensor([n], floaty32)", "at column 16: unknown dtype `floaty32`"},
      {"x: Tensr([n], float32)", "at column 4: unknown type `Tensr` (expected Tensor, int"},
      {"x: Tensor([n], float32, align=12)", "at column 31: align must be a power of two"},
      {"x: Tensor([n], float32, device=tpu)", "at column 32: unknown device type `tpu`"},
      {"x: Tensor([n], float32, stride_order=(0, 0))", "at column 42: stride_order must list"},
      {"x: Tensor([n, m], float32, strides=[1])", "at column 36: strides has 1 entries but"},
      {"x: Tensor([n], float32, contiguous, col_major)", "at column 37: more than one layout"},
      {"x: int, x: float", "at column 9: duplicate parameter `x`"},
      {"x: Optional[EnvStream]", "at column 13: EnvStream cannot be Optional"},
      {"x: int[5, 1]", "at column 7: the range is empty"},
      {"x: Tensor([n], *) -> Tensor([k], *)", "at column 30: symbol `k` is not bound"},
      {"x: Tensor([n], *); n: int16", "at column 23: expected `int32` or `int64`"},
      {"x: Tensor([n], *); n % 0", "at column 24: the divisibility must be positive"},
      {"x: Tensor([n], *) y: int", "at column 19: expected `,`"},
      {"x: Tensor([n], *, sorted)", "at column 19: unknown tensor option `sorted`"},
      {"x: int $", "at column 8: unexpected character `$`"},
  };
  for (const Case& c : cases) {
    std::string msg = ErrorOf([&] { Contract::Parse("scale", c.text); });
    EXPECT_EQ(msg.rfind(std::string("ValueError: Invalid contract for `scale` ") + c.message, 0),
              0u)
        << c.text << " -> " << msg;
  }
  EXPECT_EQ(ErrorOf([] { Contract::Parse("scale", "x: Tensor([n, m, float32)"); }),
            "ValueError: Invalid contract for `scale` at column 25: expected `]`\n"
            "  x: Tensor([n, m, float32)\n"
            "                          ^");
}

TEST(Contract, MustFitTheCppParameters) {
  EXPECT_EQ(ErrorOf([] { kffi::FunctionWithContract(Nop2, "f", "a: Tensor([n], *)"); }),
            "ValueError: Invalid contract for `f`: it declares 1 parameters (EnvStream included) "
            "but the C++ function takes 2");
  EXPECT_EQ(ErrorOf([] { kffi::FunctionWithContract(Nop2, "f", "a: Tensor([n], *), b: int"); }),
            "ValueError: Invalid contract for `f`: parameter #1 `b: int` cannot be passed to the "
            "C++ parameter of type `Tensor`");
  EXPECT_EQ(ErrorOf([] { kffi::FunctionWithContract([](Any, int) {}, "f", "a: bool, b: int32"); }),
            "no error");
}

TEST(Contract, WrapsAPackedFunction) {
  Function inner = Function::FromPacked([](kffi::PackedArgs args, Any* rv) {
    *rv = static_cast<int64_t>(args.size()) * 10 + (args[1].is_none() ? 1 : 0);
  });
  Function f = kffi::FunctionWithContract(inner, "w", "a: Tensor([n], *), s: EnvStream");
  FakeTensor a({3});
  EXPECT_EQ(f(TensorView(a)).cast<int64_t>(), 21);  // the stream (NULL: None) was added
  EXPECT_NE(ErrorOf([&] { f(1); }).find("TypeError: Mismatched type on argument #0"),
            std::string::npos);
}

TEST(Contract, MetadataJsonCarriesTheContract) {
  Contract c = Contract::Parse("f",
                               "x: Tensor([n], float32), s: EnvStream -> Tensor([n * 2], "
                               "float32); n: int32 % 16");
  EXPECT_EQ(c.MetadataJson("None", "doubles \"x\""),
            "{\"name\":\"f\",\"params\":[{\"name\":\"x\",\"type\":\"Tensor([n], float32)\"}],"
            "\"return\":\"None\",\"doc\":\"doubles \\\"x\\\"\",\"contract\":\"x: Tensor([n], "
            "float32), s: EnvStream -> Tensor([n * 2], float32); n: int32 % 16\",\"outputs\":[{"
            "\"name\":\"\",\"type\":\"Tensor([n * 2], float32)\",\"shape\":[\"n * 2\"],\"dtype\":"
            "\"float32\"}],\"symbols\":[{\"name\":\"n\",\"width\":\"int32\",\"divisibility\":16}],"
            "\"env_stream\":true}");
}

// The fast check and the explaining one must accept exactly the same arguments: a call that the
// fast one rejects is explained by the other, and one it accepts must raise nothing there.
struct Rng {
  uint64_t state = 88172645463325252ull;
  uint64_t operator()(uint64_t n) {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return state % n;
  }
};

struct NoopAlloc {
  void AllocData(DLTensor* t) { t->data = g_data; }
  void FreeData(DLTensor*) {}
};

TEST(Contract, FastAndExplainingChecksAgree) {
  // Each contract with arguments that pass; every case changes a few fields of them at random.
  struct Case {
    const char* text;
    std::vector<FakeTensor> valid;
  } cases[] = {
      {"a: Tensor([n, m], float32, align=16), b: Tensor([n, m], float32|float16, device=cuda, "
       "offset0, contiguous), c: Tensor([m], *, col_major); n: int32 % 4",
       {FakeTensor({8, 4}, kF32, kCuda0, {4, 1}), FakeTensor({8, 4}, kF16, kCuda0, {4, 1}),
        FakeTensor({4}, kF32, kCuda0, {1})}},
      {"x: Optional[Tensor([n], float32)], y: Tensor([n, 2], *, stride_order=(1,0)), "
       "z: Tensor([k, n], bfloat16|float16|int8, device=cpu|cuda, strides=[s, 1]); s % 3",
       {FakeTensor({2}, kF32, kCuda1), FakeTensor({2, 2}, kF16, kCuda1, {1, 2}),
        FakeTensor({5, 2}, kffi::dtypes::bfloat16, kCuda1, {6, 1})}},
      {"t: Tuple[Tensor([n], *), Optional[Tensor([n, n], float32, contiguous)]], u: int32[0, 10]",
       {FakeTensor({3}), FakeTensor({3, 3}, kF32, kCPU, {3, 1}), FakeTensor({1})}},
  };
  const DLDataType dtypes[] = {kF32, kF16, kffi::dtypes::bfloat16, kffi::dtypes::int8};
  const DLDevice devices[] = {kCPU, kCuda0, kCuda1};
  Rng rng;
  auto mutate = [&](FakeTensor* f) {
    const size_t j = rng(f->shape.size());
    switch (rng(8)) {
      case 0:
        f->t.dtype = dtypes[rng(4)];
        break;
      case 1:
        f->t.device = devices[rng(3)];
        break;
      case 2:
        f->t.data = g_data + 4 * rng(5);
        break;
      case 3:
        f->t.byte_offset = 4 * rng(5);
        break;
      case 4:
        f->shape[j] = static_cast<int64_t>(rng(7));
        break;
      case 5:
        f->strides[j] = static_cast<int64_t>(rng(9));
        break;
      case 6:
        f->t.strides = nullptr;
        break;
      default:
        f->shape.push_back(2), f->strides.push_back(1), f->t.ndim += 1;
    }
    f->t.shape = f->shape.data();
    if (f->t.strides != nullptr) f->t.strides = f->strides.data();
  };
  for (Case& c : cases) {
    Contract contract = Contract::Parse("f", c.text);
    int passed = 0, failed = 0;
    for (int iter = 0; iter < 3000; ++iter) {
      std::vector<FakeTensor> f = c.valid;
      for (FakeTensor& ft : f) {
        const bool null_strides = ft.strides.empty();
        if (null_strides) ft.strides = kffi::StrideArray::Compact(ft.shape).ToVector();
        ft.t.shape = ft.shape.data();
        ft.t.strides = null_strides ? nullptr : ft.strides.data();
      }
      for (uint64_t k = rng(4); k-- > 0;) mutate(&f[rng(f.size())]);
      std::vector<Any> owned;
      std::vector<kffi::AnyView> args;
      if (&c == &cases[2]) {
        auto obj = [&](FakeTensor& ft) -> Any {
          if (rng(8) == 0) return Any(nullptr);
          std::vector<int64_t> strides = ft.t.strides ? ft.strides : std::vector<int64_t>();
          if (strides.empty()) strides = kffi::StrideArray::Compact(ft.shape).ToVector();
          return kffi::Tensor::FromNDAllocStrided(NoopAlloc(), ft.shape, strides, ft.t.dtype,
                                                  ft.t.device);
        };
        owned.push_back(Any(kffi::Array<Any>({obj(f[0]), obj(f[1])})));
        args.push_back(owned.back());
        args.push_back(static_cast<int64_t>(rng(14)) - 2);
      } else {
        for (FakeTensor& ft : f) {
          args.push_back(rng(16) == 0 ? kffi::AnyView(nullptr) : kffi::AnyView(TensorView(ft)));
        }
      }
      const auto* raw = reinterpret_cast<const KFFIAny*>(args.data());
      kffi::details::contract::RunState st;
      const bool fast =
          kffi::details::contract::FastRun(*contract.plan(), raw, contract.num_args(), &st);
      std::string explained = ErrorOf(
          [&] { kffi::details::contract::ExplainRun(*contract.plan(), raw, contract.num_args()); });
      ASSERT_EQ(fast, explained.rfind("InternalError", 0) == 0) << c.text << " -> " << explained;
      (fast ? passed : failed)++;
    }
    EXPECT_GT(passed, 300) << c.text;
    EXPECT_GT(failed, 300) << c.text;
  }
}

TEST(ContractModule, LoadedLibraryChecksCalls) {
  kffi::Module mod = kffi::Module::Load(KFFI_TEST_CONTRACTLIB);
  Function add = mod.GetFunctionRequired("add_one");
  FakeTensor a({128}), b({128}), b126({126}), a1({128}, kF32, kCPU, {}, 4);
  EXPECT_EQ(add(TensorView(a), TensorView(b)).cast<int64_t>(), 128);
  EXPECT_EQ(ErrorOf([&] { add(TensorView(a), TensorView(b126)); }),
            std::string("ValueError: Mismatched b.shape[0] on argument #1 when calling: ") +
                kAddSig + ", expected to match a.shape[0], but got 126 (a.shape[0] is 128)");
  EXPECT_NE(ErrorOf([&] { add(TensorView(a1), TensorView(b)); }).find("Misaligned Tensor data"),
            std::string::npos);
  std::optional<std::string> meta = mod.GetFunctionMetadata("add_one");
  ASSERT_TRUE(meta.has_value());
  EXPECT_NE(meta->find(std::string("\"contract\":\"") + kAddText + "\""), std::string::npos);
  EXPECT_NE(meta->find("{\"name\":\"a\",\"type\":\"Tensor([n], float32, align=16)\"}"),
            std::string::npos);
  kffi::env::StreamScope scope(kCuda0, reinterpret_cast<void*>(0x42));
  FakeTensor c({4}, kF32, kCuda0);
  EXPECT_EQ(mod.GetFunctionRequired("stream_of")(TensorView(c)).cast<int64_t>(), 0x42);
}

TEST(ContractModule, MalformedContractFailsTheLoadNamingEveryBadExport) {
  const std::string path = KFFI_TEST_CONTRACTLIB_BAD;
  const std::string expected =
      "ValueError: Cannot load module `" + path +
      "`: Invalid contract for `broken` at column 47: expected `]`\n"
      "  a: Tensor([n], float32), b: Tensor([n, float32)\n"
      "                                                ^\n"
      "Invalid contract for `misfit`: parameter #0 `a: int` cannot be passed to the C++ parameter "
      "of type `Tensor`";
  EXPECT_EQ(ErrorOf([&] { kffi::Module::Load(path); }).substr(0, expected.size()), expected);
  // The library stays open (libraries are never unloaded): loading it again fails the same way.
  EXPECT_EQ(ErrorOf([&] { kffi::Module::Load(path); }).substr(0, expected.size()), expected);
}

TEST(ContractModule, MalformedContractOpenedWithoutTheLoaderRaisesOnCall) {
  // Opened some other way (no module load in progress): the report is not taken, and the export
  // raises the error on every call and metadata query instead.
  void* handle = dlopen(KFFI_TEST_CONTRACTLIB_BAD, RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(handle, nullptr) << dlerror();
  auto call = reinterpret_cast<KFFISafeCallType>(dlsym(handle, "__kffi_broken"));
  auto meta = reinterpret_cast<KFFISafeCallType>(dlsym(handle, "__kffi__meta_broken"));
  ASSERT_NE(call, nullptr);
  ASSERT_NE(meta, nullptr);
  const std::string expected = "ValueError: Invalid contract for `broken` at column 47";
  for (KFFISafeCallType fn : {call, meta}) {
    KFFIAny result{};
    ASSERT_EQ(fn(nullptr, nullptr, 0, &result), -1);
    KFFIObjectHandle err = nullptr;
    KFFIErrorMoveFromRaised(&err);
    ASSERT_NE(err, nullptr);
    const KFFIErrorCell* cell = KFFIErrorGetCellPtr(err);
    std::string got = std::string(cell->kind.data, cell->kind.size) + ": " +
                      std::string(cell->message.data, cell->message.size);
    KFFIObjectDecRef(err);
    EXPECT_EQ(got.substr(0, expected.size()), expected);
  }
}

TEST(ContractModule, ReportLoadErrorOutsideALoadIsNotTaken) {
  KFFIByteArray kind{"ValueError", 10}, msg{"x", 1};
  int32_t taken = -1;
  ASSERT_EQ(KFFIModuleReportLoadError(&kind, &msg, &taken), 0);
  EXPECT_EQ(taken, 0);
  EXPECT_EQ(KFFIModuleReportLoadError(&kind, &msg, nullptr), -1);
  EXPECT_NE(ErrorOf([] { kffi::details::ThrowRaisedError(-1); }).find("taken"), std::string::npos);
}

}  // namespace
