// tests/cpp/contract/test_contract_parse.cc: contract text: syntax errors naming the column, the
// limits on hostile text (length, nesting depth, dimensions), strict dtypes, output shapes
// evaluated from reverse Polish notation, and the metadata JSON.
// SPDX-License-Identifier: Apache-2.0
#include <gtest/gtest.h>
#include <kffi/contract.h>

#include <cstdint>
#include <string>
#include <vector>

#include "contract_test_util.h"
#include "core/json_writer.h"  // src/: the one JSON writer

namespace {

using kffi::Contract;
using kffi::TensorView;
using kffi_test::ErrorOf;
using kffi_test::FakeTensor;

std::string ParseError(const std::string& text) {
  return ErrorOf([&] { Contract::Parse("scale", text); });
}

TEST(ContractParse, MalformedContractsNameTheColumn) {
  struct Case {
    const char* text;
    const char* message;
  } cases[] = {
      {"x: Tensor([n, m, float32)", "at column 25: expected `]`"},
      {"x: Tensor([n], floaty32)", "at column 16: unknown dtype `floaty32`"},
      {"x: Tensor([n], flaot32)", "at column 16: unknown dtype `flaot32`"},
      // Names the runtime's generic parser would read, but no tensor has.
      {"x: Tensor([n], float23)", "at column 16: unknown dtype `float23`"},
      {"x: Tensor([n], int3)", "at column 16: unknown dtype `int3`"},
      {"x: Tensor([n], float16|uint7)", "at column 24: unknown dtype `uint7`"},
      {"x: Tensor([n], bfloat32)", "at column 16: unknown dtype `bfloat32`"},
      {"x: Tensor([n], handle)", "at column 16: unknown dtype `handle`"},
      {"x: Tensor([n], int8x0)", "at column 16: unknown dtype `int8x0`"},
      {"x: Tensr([n], float32)", "at column 4: unknown type `Tensr` (expected Tensor, int"},
      {"x: Tensor([n], float32, align=12)", "at column 31: align must be a power of two"},
      {"x: Tensor([n], float32, device=tpu)", "at column 32: unknown device type `tpu`"},
      {"x: Tensor([n], float32, stride_order=(0, 0))", "at column 42: stride_order must list"},
      {"x: Tensor([n, m], float32, strides=[1])", "at column 36: strides has 1 entry but"},
      {"x: Tensor([n], float32, contiguous, col_major)", "at column 37: more than one layout"},
      {"x: int, x: float", "at column 9: duplicate parameter `x`"},
      {"x: Optional[EnvStream]", "at column 13: EnvStream cannot be Optional"},
      {"x: int[5, 1]", "at column 7: the range is empty"},
      {"x: float[0.0, 1e999]", "at column 15: a range bound must be finite"},
      {"x: Tensor([n], *) -> Tensor([k], *)", "at column 30: symbol `k` is not bound"},
      {"x: Tensor([n], *); n: int16", "at column 23: expected `int32` or `int64`"},
      {"x: Tensor([n], *); n % 0", "at column 24: the divisibility must be positive"},
      {"x: Tensor([n], *) y: int", "at column 19: expected `,`"},
      {"x: Tensor([n], *); n: parallel", "at column 23: expected `int32` or `int64`"},
      {"x: Tensor([n], *); n parallel % 4", "at column 31: expected `,`"},
      {"x: Tensor([n], *); n parallel parallel", "at column 31: expected `,`"},
      {"x: Tensor([n], *, sorted)", "at column 19: unknown tensor option `sorted`"},
      {"x: int $", "at column 8: unexpected character `$`"},
      {"x: Tensor([99999999999999999999], *)", "at column 12: integer literal out of range"},
  };
  for (const Case& c : cases) {
    std::string msg = ParseError(c.text);
    EXPECT_EQ(msg.rfind(std::string("ValueError: Invalid contract for `scale` ") + c.message, 0),
              0u)
        << c.text << " -> " << msg;
  }
  EXPECT_EQ(ParseError("x: Tensor([n, m, float32)"),
            "ValueError: Invalid contract for `scale` at column 25: expected `]`\n"
            "  x: Tensor([n, m, float32)\n"
            "                          ^");
}

TEST(ContractParse, StandardDtypesBeyondTheTableParse) {
  Contract c = Contract::Parse(
      "f", "x: Tensor([n], int8x4|float8_e3m4|complex64|int4|float6_e2m3fn|uint64|bool)");
  FakeTensor x({3}, DLDataType{kDLInt, 8, 4});
  EXPECT_EQ(ErrorOf([&] { c.CheckArgs(TensorView(x)); }), "no error");
  x.t.dtype = DLDataType{kDLInt, 8, 1};
  EXPECT_NE(ErrorOf([&] { c.CheckArgs(TensorView(x)); }).find("x.dtype: expected int8x4|"),
            std::string::npos);
}

// Hostile text: each limit is a clear ValueError, never a stack overflow.
TEST(ContractParse, NestingDepthIsLimited) {
  auto nested = [](int depth, const char* open, const char* inner, const char* close) {
    std::string s = "x: ";
    for (int i = 0; i < depth; ++i) s += open;
    s += inner;
    for (int i = 0; i < depth; ++i) s += close;
    return s;
  };
  // Optional[Optional[...]] and Tuple[Tuple[...]]: at most 16 types deep (15 wrappers + int).
  EXPECT_EQ(ParseError(nested(15, "Tuple[", "int", "]")), "no error");
  EXPECT_NE(ParseError(nested(16, "Tuple[", "int", "]"))
                .find("Optional and Tuple types nest more than 16 deep"),
            std::string::npos);
  EXPECT_NE(ParseError(nested(6000, "Optional[", "int", "]"))
                .find("Optional and Tuple types nest more than 16 deep"),
            std::string::npos);
  // Parentheses and unary minus in output shapes: at most 32.
  auto out = [](int depth, const char* open, const char* close) {
    std::string s = "x: Tensor([n], *) -> Tensor([";
    for (int i = 0; i < depth; ++i) s += open;
    s += "n";
    for (int i = 0; i < depth; ++i) s += close;
    return s + "], *)";
  };
  EXPECT_EQ(ParseError(out(32, "(", ")")), "no error");
  EXPECT_NE(ParseError(out(33, "(", ")")).find("parentheses and unary minus nest more than 32"),
            std::string::npos);
  EXPECT_NE(ParseError(out(20000, "(", ")")).find("nest more than 32 deep"), std::string::npos);
  EXPECT_NE(ParseError(out(20000, "-", "")).find("nest more than 32 deep"), std::string::npos);
}

TEST(ContractParse, LengthAndDimensionsAreLimited) {
  std::string huge = "x: Tensor([n], *)";
  while (huge.size() <= kffi::details::contract::kMaxContractBytes) {
    huge += ", y" + std::to_string(huge.size()) + ": int";
  }
  EXPECT_NE(ParseError(huge).find("at column 1: the contract is " + std::to_string(huge.size()) +
                                  " bytes long (at most 65536)"),
            std::string::npos);
  std::string dims = "x: Tensor([";
  for (int i = 0; i < 33; ++i) dims += (i ? ", " : "") + std::string("1");
  EXPECT_NE(ParseError(dims + "], *)").find("too many dimensions (at most 32)"), std::string::npos);
  EXPECT_NE(ParseError("x: Tensor([n], *) -> Tensor([" + dims.substr(11) + "], *)")
                .find("too many dimensions (at most 32)"),
            std::string::npos);
  // A long chain is no recursion: it parses and evaluates (here it overflows int64, cleanly).
  std::string chain = "x: Tensor([n], *) -> Tensor([n";
  for (int i = 0; i < 5000; ++i) chain += " * n";
  Contract c = Contract::Parse("c", chain + "], *)");
  EXPECT_EQ(ErrorOf([&] {
              c.OutputShape(0, c.Bind({{"n", 3}}));
            }),
            "ValueError: Cannot evaluate the shape of output #0 of `c`: int64 overflow");
  EXPECT_EQ(c.OutputShape(0, c.Bind({{"n", 1}})), std::vector<int64_t>{1});
}

TEST(ContractParse, OutputShapesFromBoundSymbols) {
  Contract c =
      Contract::Parse("f",
                      "x: Tensor([n, m], float32) -> out: Tensor([n * 2, (m + 1) // 2], float32), "
                      "Tensor([-n // 3, m - n, 7, -n % 3, m % -3, -(-n)], int8)");
  FakeTensor x({4, 5});
  kffi::ContractBindings b = c.CheckArgs(TensorView(x));
  // Python's semantics: -4 // 3 == -2, -4 % 3 == 2, 5 % -3 == -1.
  EXPECT_EQ(c.OutputShapes(b), (std::vector<std::vector<int64_t>>{{8, 3}, {-2, 1, 7, 2, -1, 4}}));
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
  EXPECT_EQ(ErrorOf([&] { c.OutputShape(2, b); }),
            "IndexError: Output #2 out of range: `f` declares 2 outputs");
  Contract d = Contract::Parse("d", "x: Tensor([n], *) -> Tensor([10 // (n - n), n % (n - n)], *)");
  EXPECT_EQ(ErrorOf([&] {
              d.OutputShape(0, d.Bind({{"n", 3}}));
            }),
            "ValueError: Cannot evaluate the shape of output #0 of `d`: division by zero");
  Contract e = Contract::Parse("e", "x: Tensor([n], *) -> Tensor([-n, n // -1, n % -1], *)");
  EXPECT_EQ(ErrorOf([&] {
              e.OutputShape(0, e.Bind({{"n", INT64_MIN}}));
            }),
            "ValueError: Cannot evaluate the shape of output #0 of `e`: int64 overflow");
  EXPECT_EQ(e.OutputShape(0, e.Bind({{"n", 5}})), (std::vector<int64_t>{-5, -5, 0}));
}

TEST(ContractParse, MetadataJsonCarriesTheStructuredContract) {
  Contract c = Contract::Parse(
      "f",
      "x: Tensor([n, 4], float32|float16, device=cuda, mut), b: Optional[Tensor([n], *)], "
      "k: int32[0, 8], a: float[-0.5, 1.0], t: Tuple[int, Tensor([n], bool)], s: Stream, "
      "e: EnvStream -> y: Tensor([n * 2, (n + 1) % 3], float32); n: int32 % 16");
  EXPECT_EQ(
      c.MetadataJson("None", "doubles \"x\""),
      R"J({"name":"f","params":[)J"
      R"J({"name":"x","type":"Tensor([n, 4], float32|float16, device=cuda, mut)","kind":"tensor",)J"
      R"J("optional":false,"shape":["n",4],"dtypes":["float32","float16"],"device":"cuda",)J"
      R"J("mutable":true},)J"
      R"J({"name":"b","type":"Optional[Tensor([n], *)]","kind":"tensor","optional":true,)J"
      R"J("default":null,"shape":["n"],"dtypes":[],"device":null,"mutable":false},)J"
      R"J({"name":"k","type":"int32[0, 8]","kind":"int","optional":false,"range":[0,8]},)J"
      R"J({"name":"a","type":"float[-0.5, 1.0]","kind":"float","optional":false,"range":[-0.5,1.0]},)J"
      R"J({"name":"t","type":"Tuple[int, Tensor([n], bool)]","kind":"tuple","optional":false,)J"
      R"J("elems":[{"type":"int","kind":"int","optional":false},{"type":"Tensor([n], bool)",)J"
      R"J("kind":"tensor","optional":false,"shape":["n"],"dtypes":["bool"],"device":null,)J"
      R"J("mutable":false}]},)J"
      R"J({"name":"s","type":"Stream","kind":"stream","optional":false,"default":null}],)J"
      R"J("return":"None","doc":"doubles \"x\"","contract":"x: Tensor([n, 4], float32|float16, )J"
      R"J(device=cuda, mut), b: Optional[Tensor([n], *)], k: int32[0, 8], a: float[-0.5, 1.0], )J"
      R"J(t: Tuple[int, Tensor([n], bool)], s: Stream, e: EnvStream -> y: Tensor([n * 2, )J"
      R"J((n + 1) % 3], float32); n: int32 % 16","outputs":[{"name":"y","type":"Tensor([n * 2, )J"
      R"J((n + 1) % 3], float32)","shape":["n * 2","(n + 1) % 3"],"shape_rpn":[["n",2,"*"],)J"
      R"J(["n",1,"+",3,"%"]],"dtype":"float32"}],"symbols":[{"name":"n","width":"int32",)J"
      R"J("divisibility":16}],"env_stream":true,"mutates":["x"]})J");
  EXPECT_EQ(Contract::Parse("g", "x: Tensor([n], *) -> Tensor([-n, -(n - 1)], *)")
                .MetadataJson("None", ""),
            R"J({"name":"g","params":[{"name":"x","type":"Tensor([n], *)","kind":"tensor",)J"
            R"J("optional":false,"shape":["n"],"dtypes":[],"device":null,"mutable":false}],)J"
            R"J("return":"None","doc":"","contract":"x: Tensor([n], *) -> Tensor([-n, )J"
            R"J(-(n - 1)], *)","outputs":[{"name":"","type":"Tensor([-n, -(n - 1)], *)",)J"
            R"J("shape":["-n","-(n - 1)"],"shape_rpn":[["n","neg"],["n",1,"-","neg"]],)J"
            R"J("dtype":"*"}],"symbols":[{"name":"n","width":"int64","divisibility":1}],)J"
            R"J("env_stream":false,"mutates":[]})J");
}

TEST(ContractParse, ParallelSymbolsReachTheMetadataOnly) {
  // `parallel` is a fact for frameworks: the metadata says it (only where declared), the checks
  // are those of the same contract without it.
  Contract c = Contract::Parse("g",
                               "x: Tensor([n, m], *), y: Tensor([n], *)"
                               "; n: int32 % 4 parallel, m parallel, k: int64");
  const std::string meta = c.MetadataJson("None", "");
  EXPECT_NE(meta.find(R"J("symbols":[{"name":"n","width":"int32","divisibility":4,"parallel":)J"
                      R"J(true},{"name":"m","width":"int64","divisibility":1,"parallel":true}])J"),
            std::string::npos)
      << meta;
  Contract plain = Contract::Parse("g", "x: Tensor([n, m], *); n: int64");
  EXPECT_EQ(plain.MetadataJson("None", "").find("parallel"), std::string::npos);
  EXPECT_NE(Contract::Parse("g", "x: Tensor([n], *); n parallel")
                .MetadataJson("None", "")
                .find(R"J({"name":"n","width":"int64","divisibility":1,"parallel":true})J"),
            std::string::npos);
}

TEST(ContractParse, JsonWriterEscapesAndSeparates) {
  kffi::details::JsonWriter w;
  w.BeginObject().Field("a\x01", "b\\c\"\n\t\r").Key("l").BeginArray();
  w.Int(-3).Double(0.1).Double(1e300).Bool(true).Null().BeginObject().EndObject();
  w.BeginArray().EndArray().EndArray().Field("u", "\xf0\x9f\x98\x80").EndObject();
  EXPECT_EQ(w.Take(), R"J({"a\u0001":"b\\c\"\n\t\r","l":[-3,0.1,1e+300,true,null,{},[]],"u":")J"
                      "\xf0\x9f\x98\x80\"}");
}

}  // namespace
