// tests/cpp/contract/test_contract.cc: contracts: the check catalogue and its messages (every
// message names the parameter, what was expected and what was received), `mut`, Stream parameters
// and 0-d tensors. Parsing and outputs: test_contract_parse.cc; libraries: test_contract_module.cc;
// the fast-vs-explaining differential: test_contract_fuzz.cc.
// SPDX-License-Identifier: Apache-2.0
#include <gtest/gtest.h>
#include <kffi/container/tuple.h>
#include <kffi/contract.h>
#include <kffi/env.h>
#include <kffi/optional.h>

#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include "contract_test_util.h"

namespace {

using kffi::Any;
using kffi::ConstTensorView;
using kffi::Contract;
using kffi::Function;
using kffi::TensorView;
using kffi_test::ErrorOf;
using kffi_test::FakeTensor;
using kffi_test::kCPU;
using kffi_test::kCuda0;
using kffi_test::kCuda1;
using kffi_test::kF16;
using kffi_test::kF32;

void Nop2(ConstTensorView, ConstTensorView) {}
// The same for contracts whose first (MutNop2) or second (NopMut2) tensor is `mut`: a `mut`
// tensor needs a C++ type that may write it.
void MutNop2(TensorView, ConstTensorView) {}
void NopMut2(ConstTensorView, TensorView) {}

const char kAddText[] =
    "a: Tensor([n], float32, align=16), b: Tensor([n], float32, align=16); n: int32 % 16";
const char kAddSig[] =
    "`add_one(a: Tensor([n], float32, align=16), b: Tensor([n], float32, align=16))`";

std::string Arg(int k, const std::string& sig) {
  return " (argument #" + std::to_string(k) + " of " + sig + ")";
}

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
  EXPECT_EQ(ErrorOf([&] { f(TensorView(a)); }),
            std::string("TypeError: add_one: expected 2 arguments, got 1 (") + kAddSig + ")");
  EXPECT_EQ(ErrorOf([&] { f(TensorView(a), 1); }),
            "TypeError: b: expected Tensor, got int" + Arg(1, kAddSig));
  Function g = kffi::FunctionWithContract([](int64_t) {}, "g", "x: int");
  EXPECT_EQ(ErrorOf([&] { g(); }), "TypeError: g: expected 1 argument, got 0 (`g(x: int)`)");
}

TEST(Contract, MisalignedDataOffByOneElement) {
  Function f = kffi::FunctionWithContract(Nop2, "add_one", kAddText);
  FakeTensor a({128}), b({128}), a1({128}, kF32, kCPU, {}, 4);
  EXPECT_EQ(ErrorOf([&] { f(TensorView(a), TensorView(b)); }), "no error");
  EXPECT_EQ(ErrorOf([&] { f(TensorView(a1), TensorView(b)); }),
            "ValueError: a: expected data aligned to 16 bytes, got data aligned to 4 bytes" +
                Arg(0, kAddSig));
  // The alignment is of the first element: data + byte_offset.
  a.t.byte_offset = 8;
  EXPECT_EQ(ErrorOf([&] { f(TensorView(a), TensorView(b)); }),
            "ValueError: a: expected data aligned to 16 bytes, got data aligned to 8 bytes" +
                Arg(0, kAddSig));
  a.t.byte_offset = 64;
  EXPECT_EQ(ErrorOf([&] { f(TensorView(a), TensorView(b)); }), "no error");
}

TEST(Contract, SymbolsBindFirstThenMustMatch) {
  Function f = kffi::FunctionWithContract(Nop2, "add_one", kAddText);
  FakeTensor a({128}), b({128}), b126({126}), a126({126});
  EXPECT_EQ(ErrorOf([&] { f(TensorView(a), TensorView(b126)); }),
            "ValueError: b.shape[0]: expected n = 128 (as a.shape[0]), got 126" + Arg(1, kAddSig));
  EXPECT_EQ(ErrorOf([&] { f(TensorView(a126), TensorView(b126)); }),
            "ValueError: a.shape[0]: expected n divisible by 16, got 126" + Arg(0, kAddSig));
  FakeTensor huge({int64_t{1} << 32});
  EXPECT_EQ(ErrorOf([&] { f(TensorView(huge), TensorView(huge)); }),
            "ValueError: a.shape[0]: expected n in int32 range [-2147483648, 2147483647], got "
            "4294967296" +
                Arg(0, kAddSig));
  // Undeclared symbols are int64 with divisibility 1; a divisibility that is no power of two.
  Function g =
      kffi::FunctionWithContract(Nop2, "g", "x: Tensor([m, k], *), y: Tensor([k], *); k % 3");
  FakeTensor x({int64_t{1} << 40, 6}), y6({6}), y7({7}), x7({2, 7});
  EXPECT_EQ(ErrorOf([&] { g(TensorView(x), TensorView(y6)); }), "no error");
  EXPECT_EQ(ErrorOf([&] { g(TensorView(x7), TensorView(y7)); }),
            "ValueError: x.shape[1]: expected k divisible by 3, got 7" +
                Arg(0, "`g(x: Tensor([m, k], *), y: Tensor([k], *))`"));
  EXPECT_EQ(Contract::Parse("g", "x: Tensor([m, k], *), y: Tensor([k], *); k % 3")
                .CheckArgs(TensorView(x), TensorView(y6))
                .Get("m"),
            int64_t{1} << 40);
}

TEST(Contract, AConflictWithAMutParameterBlamesTheMutSide) {
  // out comes first and binds m; x disagrees. The function writes out, so out is named first,
  // with both values; the failing check is still x's (the fast run stops there too).
  const std::string text = "out: Tensor([n, m], float32, mut), x: Tensor([n, m], float32)";
  const std::string sig = "`f(" + text + ")`";
  Function f = kffi::FunctionWithContract(MutNop2, "f", text);
  FakeTensor out({4, 6}), x({4, 5}), x6({4, 6});
  EXPECT_EQ(ErrorOf([&] { f(TensorView(out), TensorView(x)); }),
            "ValueError: out.shape[1]: expected m = 5 (as x.shape[1]), got 6" + Arg(0, sig));
  EXPECT_EQ(ErrorOf([&] { f(TensorView(out), TensorView(x6)); }), "no error");
  // The runtime's explaining check: the failing op is x's (#1), the check a shape entry.
  Contract contract = Contract::Parse("f", text);
  const std::vector<kffi::AnyView> args{TensorView(out), TensorView(x)};
  int32_t check = -1, op = -1;
  EXPECT_EQ(KFFIContractExplain(contract.Handle(), reinterpret_cast<const KFFIAny*>(args.data()), 2,
                                &check, &op),
            -1);
  EXPECT_EQ(ErrorOf([] { kffi::details::ThrowRaisedError(-1); }),
            "ValueError: out.shape[1]: expected m = 5 (as x.shape[1]), got 6" + Arg(0, sig));
  EXPECT_EQ(check, static_cast<int32_t>(kffi::details::contract::Check::kShape));
  EXPECT_EQ(op, 1);
  // Without `mut`, the later side is named (the first one set the value), with both values.
  const std::string plain = "out: Tensor([n, m], float32), x: Tensor([n, m], float32)";
  Function g = kffi::FunctionWithContract(Nop2, "g", plain);
  EXPECT_EQ(ErrorOf([&] { g(TensorView(out), TensorView(x)); }),
            "ValueError: x.shape[1]: expected m = 6 (as out.shape[1]), got 5" +
                Arg(1, "`g(" + plain + ")`"));
  // The mut side second: it is the later side anyway.
  const std::string second = "x: Tensor([n, m], float32), out: Tensor([n, m], float32, mut)";
  Function h = kffi::FunctionWithContract(NopMut2, "h", second);
  EXPECT_EQ(ErrorOf([&] { h(TensorView(x), TensorView(out)); }),
            "ValueError: out.shape[1]: expected m = 5 (as x.shape[1]), got 6" +
                Arg(1, "`h(" + second + ")`"));
}

TEST(Contract, TensorFieldsInCatalogueOrder) {
  const std::string sig = "`h(x: Tensor([2, n], float16|bfloat16, device=cuda, offset0))`";
  Function h = kffi::FunctionWithContract([](ConstTensorView) {}, "h",
                                          "x: Tensor([2, n], float16|bfloat16, device=cuda, "
                                          "offset0)");
  FakeTensor ok({2, 5}, kF16, kCuda0);
  EXPECT_EQ(ErrorOf([&] { h(TensorView(ok)); }), "no error");
  FakeTensor bad({2, 5, 1}, kF32, kCPU);  // ndim, device type and dtype are all wrong
  EXPECT_EQ(ErrorOf([&] { h(TensorView(bad)); }),
            "ValueError: x.ndim: expected 2, got 3" + Arg(0, sig));
  bad.shape.pop_back();
  bad.t.ndim = 2;
  EXPECT_EQ(ErrorOf([&] { h(TensorView(bad)); }),
            "ValueError: x.device: expected cuda, got cpu" + Arg(0, sig));
  bad.t.device = kCuda0;
  EXPECT_EQ(ErrorOf([&] { h(TensorView(bad)); }),
            "TypeError: x.dtype: expected float16|bfloat16, got float32" + Arg(0, sig));
  bad.t.dtype = kffi::dtypes::bfloat16;
  bad.t.byte_offset = 64;
  EXPECT_EQ(ErrorOf([&] { h(TensorView(bad)); }),
            "ValueError: x.byte_offset: expected 0, got 64" + Arg(0, sig));
  bad.t.byte_offset = 0;
  bad.shape[0] = 3;
  EXPECT_EQ(ErrorOf([&] { h(TensorView(bad)); }),
            "ValueError: x.shape[0]: expected 2, got 3" + Arg(0, sig));
}

TEST(Contract, DeviceIndexIsSharedByAllTensors) {
  const std::string sig = "`f(a: Tensor([n], *), b: Tensor([n], *))`";
  Function f = kffi::FunctionWithContract(Nop2, "f", "a: Tensor([n], *), b: Tensor([n], *)");
  FakeTensor a({4}, kF32, kCuda0), b({4}, kF32, kCuda1), c({4}, kF32, kCuda0);
  EXPECT_EQ(ErrorOf([&] { f(TensorView(a), TensorView(c)); }), "no error");
  EXPECT_EQ(ErrorOf([&] { f(TensorView(a), TensorView(b)); }),
            "ValueError: b.device.index: expected 0 (as a.device.index), got 1" + Arg(1, sig));
  // The device index is checked before the shape.
  FakeTensor b5({5}, kF32, kCuda1);
  EXPECT_EQ(ErrorOf([&] { f(TensorView(a), TensorView(b5)); }),
            "ValueError: b.device.index: expected 0 (as a.device.index), got 1" + Arg(1, sig));
  // A mut tensor on the other device is named first.
  const std::string mut_text = "y: Tensor([n], *, mut), x: Tensor([n], *)";
  Function g = kffi::FunctionWithContract(MutNop2, "g", mut_text);
  EXPECT_EQ(ErrorOf([&] { g(TensorView(b), TensorView(a)); }),
            "ValueError: y.device.index: expected 0 (as x.device.index), got 1" +
                Arg(0, "`g(" + mut_text + ")`"));
}

TEST(Contract, LayoutOptions) {
  auto make = [](const char* layout) {
    return kffi::FunctionWithContract([](ConstTensorView) {}, "f",
                                      std::string("x: Tensor([n, m], float32, ") + layout + ")");
  };
  Function row = make("contiguous"), col = make("col_major"), order = make("stride_order=(1,0)");
  FakeTensor compact({4, 3}), rowt({4, 3}, kF32, kCPU, {3, 1}), colt({4, 3}, kF32, kCPU, {1, 4});
  FakeTensor padded({4, 3}, kF32, kCPU, {8, 1}), ones({1, 3}, kF32, kCPU, {99, 1});
  FakeTensor empty({0, 3}, kF32, kCPU, {7, 7});
  for (const FakeTensor* t : {&compact, &rowt, &ones, &empty}) {
    EXPECT_EQ(ErrorOf([&] { row(TensorView(*t)); }), "no error");
  }
  EXPECT_EQ(ErrorOf([&] { row(TensorView(padded)); }),
            "ValueError: x.strides: expected contiguous, got [8, 1] for shape [4, 3]" +
                Arg(0, "`f(x: Tensor([n, m], float32, contiguous))`"));
  EXPECT_EQ(ErrorOf([&] { col(TensorView(colt)); }), "no error");
  EXPECT_EQ(ErrorOf([&] { order(TensorView(colt)); }), "no error");
  EXPECT_EQ(ErrorOf([&] { col(TensorView(empty)); }), "no error");
  // NULL strides are compact row-major.
  EXPECT_EQ(ErrorOf([&] { col(TensorView(compact)); }),
            "ValueError: x.strides: expected col_major, got [3, 1] for shape [4, 3]" +
                Arg(0, "`f(x: Tensor([n, m], float32, col_major))`"));
  EXPECT_EQ(ErrorOf([&] { order(TensorView(rowt)); }),
            "ValueError: x.strides: expected stride_order=(1,0), got [3, 1] for shape [4, 3]" +
                Arg(0, "`f(x: Tensor([n, m], float32, stride_order=(1,0)))`"));
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
            "ValueError: y.strides[0]: expected s = 8 (as x.strides[0]), got 16" + Arg(1, sig));
  EXPECT_EQ(ErrorOf([&] { f(TensorView(x3), TensorView(y)); }),  // NULL strides: [3, 1]
            "ValueError: x.strides[0]: expected s divisible by 8, got 3" + Arg(0, sig));
  EXPECT_EQ(ErrorOf([&] { f(TensorView(x), TensorView(y2)); }),
            "ValueError: y.strides[1]: expected 1, got 2" + Arg(1, sig));
}

TEST(Contract, TupleElementsAreNamed) {
  using T3 = kffi::Tuple<kffi::Tensor, kffi::Tensor, double>;
  Function f =
      kffi::FunctionWithContract([](T3 x) { return std::get<2>(x); }, "tup",
                                 "x: Tuple[Tensor([n], float32), Tensor([n], float32), float]");
  const std::string sig = "`tup(x: Tuple[Tensor([n], float32), Tensor([n], float32), float])`";
  const std::string in0 = " (in argument #0 of " + sig + ")";
  kffi::Tensor a = kffi::Tensor::FromEnvAlloc({8}, kF32, kCPU);
  kffi::Tensor b = kffi::Tensor::FromEnvAlloc({8}, kF32, kCPU);
  kffi::Tensor c = kffi::Tensor::FromEnvAlloc({7}, kF32, kCPU);
  EXPECT_EQ(f(Any(std::make_tuple(a, b, 5.0))).cast<double>(), 5.0);
  EXPECT_EQ(ErrorOf([&] { f(Any(std::make_tuple(a, c, 5.0))); }),
            "ValueError: x[1].shape[0]: expected n = 8 (as x[0].shape[0]), got 7" + in0);
  EXPECT_EQ(ErrorOf([&] { f(Any(std::make_tuple(a, 2, 5.0))); }),
            "TypeError: x[1]: expected Tensor, got int" + in0);
  EXPECT_EQ(ErrorOf([&] { f(Any(std::make_tuple(a, b))); }),
            "TypeError: x: expected Tuple of 3 elements, got Array of 2 elements" + Arg(0, sig));
  Function nested = kffi::FunctionWithContract([](kffi::Array<Any>) {}, "nest",
                                               "x: Tuple[int, Tuple[Tensor([2], float32)]]");
  EXPECT_EQ(ErrorOf([&] { nested(Any(std::make_tuple(1, std::make_tuple(a)))); }),
            "ValueError: x[1][0].shape[0]: expected 2, got 8 (in argument #0 of "
            "`nest(x: Tuple[int, Tuple[Tensor([2], float32)]])`)");
}

TEST(Contract, OptionalArgumentsAcceptNone) {
  using OptT = kffi::Optional<ConstTensorView>;
  const std::string text = "bias: Optional[Tensor([n], float32)], x: Tensor([m, n], float32)";
  Function f = kffi::FunctionWithContract(
      [](OptT bias, ConstTensorView) { return bias.has_value(); }, "f", text);
  FakeTensor bias4({4}), bias5({5}), x({3, 4});
  EXPECT_FALSE(f(nullptr, TensorView(x)).cast<bool>());
  EXPECT_TRUE(f(TensorView(bias4), TensorView(x)).cast<bool>());
  // n binds at bias when given, else at x.
  EXPECT_EQ(ErrorOf([&] { f(TensorView(bias5), TensorView(x)); }),
            "ValueError: x.shape[1]: expected n = 5 (as bias.shape[0]), got 4" +
                Arg(1, "`f(" + text + ")`"));
  EXPECT_EQ(ErrorOf([&] { f(1, TensorView(x)); }),
            "TypeError: bias: expected Tensor or None, got int" + Arg(0, "`f(" + text + ")`"));
  EXPECT_EQ(Contract::Parse("f", text).CheckArgs(nullptr, TensorView(x)).Get("n"), 4);
}

TEST(Contract, ScalarsWithRanges) {
  Function f = kffi::FunctionWithContract([](int32_t, int64_t, double, bool) {}, "s",
                                          "a: int32, b: int[0, 1024], c: float[0.0, 1.0], d: bool");
  const std::string sig = "`s(a: int32, b: int[0, 1024], c: float[0.0, 1.0], d: bool)`";
  EXPECT_EQ(ErrorOf([&] { f(-5, 1024, 1, true); }), "no error");
  EXPECT_EQ(ErrorOf([&] { f(int64_t{1} << 31, 0, 0.5, false); }),
            "ValueError: a: expected a value in int32 range [-2147483648, 2147483647], got "
            "2147483648" +
                Arg(0, sig));
  EXPECT_EQ(ErrorOf([&] { f(0, 2000, 0.5, false); }),
            "ValueError: b: expected a value in range [0, 1024], got 2000" + Arg(1, sig));
  EXPECT_EQ(ErrorOf([&] { f(0, 0, 1.5, false); }),
            "ValueError: c: expected a value in range [0.0, 1.0], got 1.5" + Arg(2, sig));
  EXPECT_EQ(ErrorOf([&] { f(0, 0, 0.5, "yes"); }),
            "TypeError: d: expected bool, got str" + Arg(3, sig));
  Function g = kffi::FunctionWithContract([](float) {}, "g", "x: float32");
  EXPECT_EQ(ErrorOf([&] { g(1e39); }),
            "ValueError: x: expected a value in float32 range [-3.4028234663852886e+38, "
            "3.4028234663852886e+38], got 1e+39" +
                Arg(0, "`g(x: float32)`"));
}

// ---- mut ----------------------------------------------------------------------------------------

// Calls f with tensor arguments, the ones listed in read_only flagged kKFFITensorFlagReadOnly.
std::string CallFlagged(const Function& f, std::vector<kffi::AnyView> args,
                        std::vector<size_t> read_only) {
  std::vector<KFFIAny> raw(args.size());
  for (size_t i = 0; i < args.size(); ++i) raw[i] = *reinterpret_cast<const KFFIAny*>(&args[i]);
  for (size_t i : read_only) raw[i].tensor_flags |= kKFFITensorFlagReadOnly;
  return ErrorOf([&] { f.CallPacked(raw.data(), static_cast<int32_t>(raw.size())); });
}

TEST(ContractMut, AReadOnlyTensorForAMutParameterIsAValueError) {
  const std::string text = "y: Tensor([n], float32, mut), x: Tensor([n], float32)";
  const std::string sig = "`scale(" + text + ")`";
  Function f = kffi::FunctionWithContract([](TensorView, ConstTensorView) {}, "scale", text);
  FakeTensor y({4}), x({4});
  const std::string expected =
      "ValueError: y: expected a writable tensor (the parameter is declared `mut`), got a "
      "read-only tensor" +
      Arg(0, sig);
  EXPECT_EQ(CallFlagged(f, {TensorView(y), TensorView(x)}, {}), "no error");
  EXPECT_EQ(CallFlagged(f, {TensorView(y), TensorView(x)}, {1}), "no error");  // not mut
  EXPECT_EQ(CallFlagged(f, {TensorView(y), TensorView(x)}, {0}), expected);
  EXPECT_EQ(CallFlagged(f, {TensorView(y), TensorView(x)}, {0, 1}), expected);
  // A Tensor object argument carries the flag as well.
  kffi::Tensor owned = kffi::Tensor::FromEnvAlloc({4}, kF32, kCPU);
  EXPECT_EQ(CallFlagged(f, {owned, TensorView(x)}, {0}), expected);
  EXPECT_EQ(CallFlagged(f, {owned, TensorView(x)}, {}), "no error");
  // Writability is checked right after the type, before anything else about the tensor.
  FakeTensor bad({5}, kF16, kCuda0);
  EXPECT_EQ(CallFlagged(f, {TensorView(bad), TensorView(x)}, {0}), expected);
}

TEST(ContractMut, EveryPathChecksTheFlag) {
  // The uniform leading run (rank 1, 2), the general loop (after an int), an Optional, a Tensor
  // object, and a packed function behind Contract::Wrap.
  struct Case {
    const char* text;
    std::vector<FakeTensor> tensors;
  } cases[] = {
      {"a: Tensor([n], float32, mut), b: Tensor([n], float32, mut)",
       {FakeTensor({3}), FakeTensor({3})}},
      {"a: Tensor([n, 2], *, mut), b: Tensor([n, 2], *, mut, contiguous)",
       {FakeTensor({3, 2}), FakeTensor({3, 2})}},
      {"a: Tensor([n, 2, 1, 1, 1], *, mut), b: Tensor([n], *, mut, device=cpu|cuda)",
       {FakeTensor({3, 2, 1, 1, 1}), FakeTensor({3})}},
      {"a: Optional[Tensor([n], *, mut)], b: Tensor([n], *, mut)",
       {FakeTensor({3}), FakeTensor({3})}},
  };
  for (Case& c : cases) {
    Contract contract = Contract::Parse("f", c.text);
    Function typed = kffi::FunctionWithContract([](Any, Any) {}, "f", c.text);
    Function packed = contract.Wrap(Function::FromTyped(Nop2));
    for (const Function& f : {typed, packed}) {
      std::vector<kffi::AnyView> args{TensorView(c.tensors[0]), TensorView(c.tensors[1])};
      EXPECT_EQ(CallFlagged(f, args, {}), "no error") << c.text;
      EXPECT_EQ(CallFlagged(f, args, {0}).rfind("ValueError: a: expected a writable tensor", 0), 0u)
          << c.text;
      EXPECT_EQ(CallFlagged(f, args, {1}).rfind("ValueError: b: expected a writable tensor", 0), 0u)
          << c.text;
    }
  }
  // Bool, int and other values never read tensor_flags as a flag (the union holds other fields).
  Function g =
      kffi::FunctionWithContract([](TensorView, int64_t) {}, "g", "a: Tensor([n], *, mut), k: int");
  FakeTensor a({3});
  EXPECT_EQ(CallFlagged(g, {TensorView(a), 7}, {}), "no error");
}

// The C++ parameter types say whether the function may write a tensor (kffi::TensorView and
// DLTensor* may; kffi::ConstTensorView, const DLTensor* and an owned Tensor only read): the
// contract must agree, or read-only memory that the contract lets through would be written.
std::string WritableNotMut(int k, const std::string& param) {
  return "ValueError: Invalid contract for `f`: parameter #" + std::to_string(k) + " `" + param +
         "` is read-only (not `mut`), but its C++ type (kffi::TensorView or DLTensor*) may write "
         "it: declare it kffi::ConstTensorView (or const DLTensor*) if the function only reads "
         "it, or mark it `mut`";
}

TEST(ContractMut, AWritableCppParameterNeedsAMutTensor) {
  EXPECT_EQ(
      ErrorOf([] { kffi::FunctionWithContract([](TensorView) {}, "f", "a: Tensor([n], *)"); }),
      WritableNotMut(0, "a: Tensor([n], *)"));
  EXPECT_EQ(ErrorOf([] {
              kffi::FunctionWithContract([](const DLTensor*, DLTensor*) {}, "f",
                                         "a: Tensor([n], *), b: Tensor([n], float32)");
            }),
            WritableNotMut(1, "b: Tensor([n], float32)"));
  EXPECT_EQ(ErrorOf([] {
              kffi::FunctionWithContract([](kffi::Optional<TensorView>) {}, "f",
                                         "bias: Optional[Tensor([n], *)]");
            }),
            WritableNotMut(0, "bias: Optional[Tensor([n], *)]"));
  // The pairings that agree are accepted: `mut` with a writable type, no `mut` with a read-only
  // one, and an owned kffi::Tensor either way (it may write memory the contract made sure is
  // writable).
  const char* kMut = "a: Tensor([n], *, mut)";
  const char* kRead = "a: Tensor([n], *)";
  EXPECT_EQ(ErrorOf([&] { kffi::FunctionWithContract([](TensorView) {}, "f", kMut); }), "no error");
  EXPECT_EQ(ErrorOf([&] { kffi::FunctionWithContract([](DLTensor*) {}, "f", kMut); }), "no error");
  EXPECT_EQ(ErrorOf([&] { kffi::FunctionWithContract([](ConstTensorView) {}, "f", kRead); }),
            "no error");
  EXPECT_EQ(ErrorOf([&] { kffi::FunctionWithContract([](const DLTensor*) {}, "f", kRead); }),
            "no error");
  for (const char* text : {kMut, kRead}) {
    EXPECT_EQ(ErrorOf([&] { kffi::FunctionWithContract([](kffi::Tensor) {}, "f", text); }),
              "no error");
  }
  // The mirror of WritableNotMut: `mut` on a type that only reads is refused.
  const std::string read_only_mut =
      "ValueError: Invalid contract for `f`: parameter #0 `a: Tensor([n], *, mut)` is `mut`, but "
      "its C++ type (kffi::ConstTensorView or const DLTensor*) only reads it: declare it "
      "kffi::TensorView (or DLTensor*) if the function writes it, or drop `mut`";
  EXPECT_EQ(ErrorOf([&] { kffi::FunctionWithContract([](ConstTensorView) {}, "f", kMut); }),
            read_only_mut);
  EXPECT_EQ(ErrorOf([&] { kffi::FunctionWithContract([](const DLTensor*) {}, "f", kMut); }),
            read_only_mut);
  // Called: a `mut` tensor reaches an owned Tensor (writable memory), and the contract refuses
  // read-only memory for it before the function runs.
  int calls = 0;
  Function f = kffi::FunctionWithContract(
      [&calls](kffi::Tensor a) {
        ++calls;
        return a.ndim() == 1;
      },
      "f", kMut);
  FakeTensor a({3});
  EXPECT_TRUE(f(TensorView(a)).cast<bool>());
  EXPECT_EQ(CallFlagged(f, {TensorView(a)}, {0}),
            "ValueError: a: expected a writable tensor (the parameter is declared `mut`), got a "
            "read-only tensor" +
                Arg(0, "`f(a: Tensor([n], *, mut))`"));
  EXPECT_EQ(calls, 1);
  // The runtime's check (what KFFI_EXPORT_CONTRACT calls at load time) says the same.
  auto create = [](const char* text, KFFIByteArray type) {
    KFFIByteArray n{"f", 1};
    KFFIByteArray t{text, std::char_traits<char>::length(text)};
    KFFIObjectHandle c = nullptr;
    const int rc =
        KFFIContractExportCreate(&n, &t, &type, 1, kffi::details::contract::kPlanLayoutVersion, &c);
    if (c != nullptr) KFFIObjectDecRef(c);
    return rc == 0 ? std::string("no error") : ErrorOf([] { kffi::details::ThrowRaisedError(-1); });
  };
  const KFFIByteArray writable{"Tensor(mut)", 11};
  const KFFIByteArray owned{"Tensor", 6};  // also what libraries built before "Tensor(const)" say
  const KFFIByteArray read_only{"Tensor(const)", 13};
  EXPECT_EQ(create(kRead, writable), WritableNotMut(0, kRead));
  EXPECT_EQ(create(kMut, writable), "no error");
  EXPECT_EQ(create(kMut, owned), "no error");
  EXPECT_EQ(create(kRead, owned), "no error");
  EXPECT_EQ(create(kMut, read_only), read_only_mut);
  EXPECT_EQ(create(kRead, read_only), "no error");
}

TEST(ContractMut, TheMarkerIsRenderedAndOnlyForParameters) {
  EXPECT_EQ(Contract::Parse("f", "y: Tensor([n], float32, mut)").signature(),
            "f(y: Tensor([n], float32, mut))");
  EXPECT_NE(ErrorOf([] {
              Contract::Parse("f", "x: Tensor([n], *) -> Tensor([n], *, mut)");
            }).find("`mut` marks parameters; an output is written by definition"),
            std::string::npos);
  EXPECT_NE(ErrorOf([] {
              Contract::Parse("f", "x: Tuple[Tensor([n], *, mut)]");
            }).find("a `mut` tensor cannot be a Tuple element"),
            std::string::npos);
}

// ---- explicit streams ---------------------------------------------------------------------------

TEST(ContractStream, AStreamParameterTakesAPointerAnIntOrNone) {
  const std::string text = "x: Tensor([n], *), s: Stream";
  Function f = kffi::FunctionWithContract(
      [](ConstTensorView, void* s) { return reinterpret_cast<int64_t>(s); }, "f", text);
  FakeTensor x({3});
  EXPECT_EQ(f(TensorView(x), reinterpret_cast<void*>(0x1234)).cast<int64_t>(), 0x1234);
  EXPECT_EQ(f(TensorView(x), int64_t{0x5678}).cast<int64_t>(), 0x5678);
  EXPECT_EQ(f(TensorView(x), nullptr).cast<int64_t>(), 0);
  EXPECT_EQ(ErrorOf([&] { f(TensorView(x), "s"); }),
            "TypeError: s: expected Stream (an opaque pointer, an int handle or None), got str" +
                Arg(1, "`f(" + text + ")`"));
  EXPECT_EQ(ErrorOf([&] { f(TensorView(x), 1.5); }),
            "TypeError: s: expected Stream (an opaque pointer, an int handle or None), got float" +
                Arg(1, "`f(" + text + ")`"));
  // A packed function gets an opaque pointer, or None for NULL.
  Function inner = Function::FromPacked([](kffi::PackedArgs args, Any* rv) {
    *rv = args[1].is_none() ? int64_t{-1} : reinterpret_cast<int64_t>(args[1].cast<void*>());
  });
  Function w = kffi::FunctionWithContract(inner, "w", text);
  EXPECT_EQ(w(TensorView(x), int64_t{42}).cast<int64_t>(), 42);
  EXPECT_EQ(w(TensorView(x), nullptr).cast<int64_t>(), -1);
  // Both kinds of stream in one contract: the env stream is no argument.
  kffi::env::StreamScope scope(kCuda0, reinterpret_cast<void*>(0x99));
  Function both = kffi::FunctionWithContract(
      [](ConstTensorView, void* env, void* s) {
        return reinterpret_cast<int64_t>(env) * 1000 + reinterpret_cast<int64_t>(s);
      },
      "both", "x: Tensor([n], *), env: EnvStream, s: Stream");
  FakeTensor cuda({3}, kF32, kCuda0);
  EXPECT_EQ(both(TensorView(cuda), int64_t{7}).cast<int64_t>(), 0x99 * 1000 + 7);
  EXPECT_EQ(Contract::Parse("both", "x: Tensor([n], *), env: EnvStream, s: Stream").num_args(), 2);
}

TEST(ContractStream, StreamMustFitAVoidPointerAndStandAlone) {
  EXPECT_EQ(ErrorOf([] { kffi::FunctionWithContract([](int64_t) {}, "f", "s: Stream"); }),
            "ValueError: Invalid contract for `f`: parameter #0 `s: Stream` cannot be passed to "
            "the C++ parameter of type `int`");
  EXPECT_NE(ErrorOf([] {
              Contract::Parse("f", "s: Optional[Stream]");
            }).find("Stream cannot be Optional (it takes None: the default stream)"),
            std::string::npos);
  EXPECT_NE(ErrorOf([] {
              Contract::Parse("f", "s: Tuple[int, Stream]");
            }).find("Stream cannot be a Tuple element"),
            std::string::npos);
}

// ---- 0-d tensors --------------------------------------------------------------------------------

TEST(ContractZeroDim, ZeroDimTensorsWithAndWithoutContracts) {
  // Every tensor of the plan is 0-d: the plan has no shape entry at all.
  const std::string text = "a: Tensor([], float32, contiguous), b: Tensor([], *, col_major, mut)";
  Function f = kffi::FunctionWithContract(NopMut2, "f", text);
  FakeTensor a({}), b({}), b1({1});
  EXPECT_EQ(ErrorOf([&] { f(TensorView(a), TensorView(b)); }), "no error");
  EXPECT_EQ(ErrorOf([&] { f(TensorView(a), TensorView(b1)); }),
            "ValueError: b.ndim: expected 0, got 1" + Arg(1, "`f(" + text + ")`"));
  kffi::Tensor owned = kffi::Tensor::FromEnvAlloc({}, kF32, kCPU);
  EXPECT_EQ(ErrorOf([&] { f(owned, owned); }), "no error");
  EXPECT_EQ(Contract::Parse("f", text).CheckArgs(owned, TensorView(b)).Get("n"), std::nullopt);
  // Without a contract.
  Function plain =
      Function::FromTyped([](ConstTensorView x) { return x.ndim() * 100 + x.numel(); }, "plain");
  EXPECT_EQ(plain(TensorView(a)).cast<int64_t>(), 1);
  EXPECT_EQ(plain(owned).cast<int64_t>(), 1);
  // A 0-d output shape.
  Contract out = Contract::Parse("o", "x: Tensor([n], *) -> Tensor([], float32)");
  EXPECT_EQ(out.OutputShape(0, out.Bind({{"n", 3}})), std::vector<int64_t>{});
  // Mixed with other ranks: the explaining run over a 0-d tensor with strides options.
  Function g = kffi::FunctionWithContract(Nop2, "g", "a: Tensor([], *), b: Tensor([n], *)");
  FakeTensor b3({3});
  EXPECT_EQ(
      ErrorOf([&] { g(TensorView(b3), TensorView(b3)); }),
      "ValueError: a.ndim: expected 0, got 1" + Arg(0, "`g(a: Tensor([], *), b: Tensor([n], *))`"));
}

// ---- environment stream
// ---------------------------------------------------------------------------

TEST(Contract, EnvStreamIsTheCurrentStreamOfTheFirstNonCpuTensor) {
  Function f =
      kffi::FunctionWithContract([](ConstTensorView, void* stream,
                                    ConstTensorView) { return reinterpret_cast<int64_t>(stream); },
                                 "f", "a: Tensor([n], *), stream: EnvStream, b: Tensor([n], *)");
  EXPECT_EQ(
      Contract::Parse("f", "a: Tensor([n], *), stream: EnvStream, b: Tensor([n], *)").signature(),
      "f(a: Tensor([n], *), b: Tensor([n], *))");
  kffi::env::StreamScope scope(kCuda1, reinterpret_cast<void*>(0x1234));
  FakeTensor cpu({4}, kF32, {kDLCPU, 1}), cuda({4}, kF32, kCuda1);
  EXPECT_EQ(f(TensorView(cuda), TensorView(cuda)).cast<int64_t>(), 0x1234);
  EXPECT_EQ(f(TensorView(cpu), TensorView(cuda)).cast<int64_t>(), 0x1234);
  EXPECT_EQ(f(TensorView(cpu), TensorView(cpu)).cast<int64_t>(), 0);
  EXPECT_EQ(ErrorOf([&] { f(TensorView(cuda)); }),
            "TypeError: f: expected 2 arguments, got 1 (`f(a: Tensor([n], *), b: Tensor([n], "
            "*))`)");
}

TEST(Contract, MustFitTheCppParameters) {
  EXPECT_EQ(ErrorOf([] { kffi::FunctionWithContract(Nop2, "f", "a: Tensor([n], *)"); }),
            "ValueError: Invalid contract for `f`: it declares 1 parameter (EnvStream included) "
            "but the C++ function takes 2");
  EXPECT_EQ(ErrorOf([] { kffi::FunctionWithContract(Nop2, "f", "a: Tensor([n], *), b: int"); }),
            "ValueError: Invalid contract for `f`: parameter #1 `b: int` cannot be passed to the "
            "C++ parameter of type `Tensor`");
  EXPECT_EQ(ErrorOf([] { kffi::FunctionWithContract([](Any, int) {}, "f", "a: bool, b: int32"); }),
            "no error");
}

// What KFFI_EXPORT_CONTRACT calls when its library loads: the contract compiled and checked
// against the C++ parameter types in one call, its plan ready to run; failures raised.
TEST(Contract, ExportCreateCompilesAndChecksInOneCall) {
  auto create = [](const char* text, std::vector<KFFIByteArray> types, KFFIObjectHandle* out) {
    KFFIByteArray n{"f", 1};
    KFFIByteArray t{text, std::char_traits<char>::length(text)};
    return KFFIContractExportCreate(&n, &t, types.data(), static_cast<int32_t>(types.size()),
                                    kffi::details::contract::kPlanLayoutVersion, out);
  };
  auto raised = [] {
    KFFIObjectHandle err = nullptr;
    KFFIErrorMoveFromRaised(&err);
    if (err == nullptr) return std::string("no error");
    kffi::Error e(kffi::details::ObjectUnsafe::FromOwnedHandle<kffi::Object>(err));
    return std::string(e.what());
  };
  const KFFIByteArray tensor{"Tensor", 6};
  KFFIObjectHandle c = nullptr;
  ASSERT_EQ(create("a: Tensor([n], float32), b: Tensor([n], float32)", {tensor, tensor}, &c), 0);
  ASSERT_NE(c, nullptr);
  const auto* plan =
      static_cast<const kffi::details::contract::PlanLayout*>(KFFIContractGetPlan(c));
  ASSERT_NE(plan, nullptr);
  EXPECT_EQ(plan->num_args, 2);
  EXPECT_EQ(plan->contract, c);
  KFFIObjectDecRef(c);

  c = reinterpret_cast<KFFIObjectHandle>(&c);  // overwritten on failure too
  EXPECT_EQ(create("a: Tensor([n], float32), b: int", {tensor, tensor}, &c), -1);
  EXPECT_EQ(c, nullptr);
  EXPECT_EQ(raised(),
            "ValueError: Invalid contract for `f`: parameter #1 `b: int` cannot be passed to the "
            "C++ parameter of type `Tensor`");
  EXPECT_EQ(create("a: Tensor([n], float32", {tensor}, &c), -1);
  EXPECT_EQ(c, nullptr);
  EXPECT_NE(raised().find("ValueError: Invalid contract for `f` at column"), std::string::npos);
  EXPECT_EQ(create("a: Tensor([n], float32)", {tensor}, nullptr), -1);
  EXPECT_EQ(raised(), "ValueError: KFFIContractExportCreate: out is NULL");
}

TEST(Contract, WrapsAPackedFunction) {
  Function inner = Function::FromPacked([](kffi::PackedArgs args, Any* rv) {
    *rv = static_cast<int64_t>(args.size()) * 10 + (args[1].is_none() ? 1 : 0);
  });
  Function f = kffi::FunctionWithContract(inner, "w", "a: Tensor([n], *), s: EnvStream");
  FakeTensor a({3});
  EXPECT_EQ(f(TensorView(a)).cast<int64_t>(), 21);  // the stream (NULL: None) was added
  EXPECT_EQ(ErrorOf([&] { f(1); }),
            "TypeError: a: expected Tensor, got int" + Arg(0, "`w(a: Tensor([n], *))`"));
}

}  // namespace

// The ranks an export's inline check compiles come from its contract text: every bracketed list's
// entry count (a superset of the plan's uniform rank), and all ranks for text it cannot follow.
TEST(ContractRanks, FromTheText) {
  using kffi::details::contract::kAllRanks;
  using kffi::details::contract::RanksIn;
  static_assert(RanksIn("x: f32[n] cpu; y: f32[n] cpu mut") == (1u << 1));
  static_assert(RanksIn("a: Tensor([m, k], float32); b: f16[k, n, 3]") == ((1u << 2) | (1u << 3)));
  static_assert(RanksIn("x: f32[ a , b , c , d ]; y: f32[a,b,c,d,e]") == (1u << 4));
  static_assert(RanksIn("n: int32[0, 8]; x: f32[n]") == ((1u << 1) | (1u << 2)));
  static_assert(RanksIn("x: Optional[f32[n, m]]") == ((1u << 1) | (1u << 2)));
  static_assert(RanksIn("x: f32[]; n: int") == 0);
  static_assert(RanksIn("x: f32[n") == kAllRanks);
  static_assert(RanksIn("x: f32]n[") == kAllRanks);
  static_assert(RanksIn("[[[[[[[[[n]]]]]]]]]") == kAllRanks);
  EXPECT_EQ(RanksIn("x: f32[n, m]; y: f32[m]"), (1u << 1) | (1u << 2));
}
