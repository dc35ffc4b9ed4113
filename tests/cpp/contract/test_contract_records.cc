// tests/cpp/contract/test_contract_records.cc: record parameters in contracts
// (`b: t.Blend{alpha: float[0.0, 1.0], n: int32[1, 8]}`): the grammar and its errors, the plan
// (a kOpRecord op kernels hand to the runtime, then one scalar op per field), validation against
// the type's reflection, the checks on a KFFI_RECORD struct and on an object with fields, and the
// metadata.
// SPDX-License-Identifier: Apache-2.0
#include <gtest/gtest.h>
#include <kffi/contract.h>
#include <kffi/reflection.h>

#include <cstdint>
#include <string>

#include "contract_test_util.h"

namespace {

using kffi::Contract;
using kffi_test::ErrorOf;

struct Blend {
  double alpha = 0.5;
  int32_t n = 1;
  bool flag = false;
};
KFFI_RECORD(Blend, "crt.Blend", alpha, n, flag);

class KnobObj : public kffi::Object {
 public:
  KFFI_DECLARE_OBJECT_INFO("crt.Knob", KnobObj, kffi::Object)
  int64_t level = 0;
  std::string label;
};
KFFI_OBJECT_DEF(KnobObj).field_rw("level", &KnobObj::level).field_ro("label", &KnobObj::label);

double Mix(Blend b, double y) { return b.alpha * y * b.n; }
int64_t Level(kffi::ObjectPtr<KnobObj> k) { return k->level; }

kffi::ObjectPtr<KnobObj> Knob(int64_t level) {
  auto k = kffi::make_object<KnobObj>();
  k->level = level;
  return k;
}

const char* kMix = "b: crt.Blend{alpha: float[0.0, 1.0], n: int32[1, 8]}, y: float";

TEST(ContractRecords, GrammarErrorsNameTheColumn) {
  struct Case {
    const char* text;
    const char* message;
  } cases[] = {
      {"b: crt.Blend{n: int, n: int}", "at column 22: field `n` is constrained twice"},
      {"b: crt.Blend{n: Tensor([n], *)}", "at column 17: expected a field type (int, int32"},
      {"b: crt.Blend{n: crt.Blend{n: int}}", "at column 17: expected a field type"},
      {"b: crt.Blend{n: int", "at column 20: expected `}`"},
      {"b: crt.{n: int}", "at column 8: expected a type key part"},
      {"b: crt.Blend{: int}", "at column 14: expected a field name"},
      {"b: crt.Blend{n: int[3, 1]}", "at column 20: the range is empty"},
      {"b: crt.Blend{n\x01: int}", "at column 15: unexpected character `\\x01`"},
      {"b: crt.Blend{n\xff: int}", "at column 15: unexpected character `\\xff`"},
      {"b: Blend", "at column 4: unknown type `Blend`"},  // a type key has a dot or braces
  };
  for (const Case& c : cases) {
    const std::string got = ErrorOf([&] { Contract::Parse("f", c.text); });
    EXPECT_NE(got.find(c.message), std::string::npos) << c.text << "\n" << got;
  }
  std::string many = "b: crt.Blend{";
  for (int i = 0; i < 65; ++i) many += (i ? ", f" : "f") + std::to_string(i) + ": int";
  EXPECT_NE(ErrorOf([&] { Contract::Parse("f", many + "}"); }).find("too many fields (at most 64)"),
            std::string::npos);
}

TEST(ContractRecords, PlanHandsTheRecordToTheRuntime) {
  Contract c = Contract::Parse("mix", kMix);
  const auto& p = *c.plan();
  EXPECT_EQ(p.version, 1u);  // additive: kernels built with older headers read it as before
  ASSERT_EQ(p.num_ops, 4);   // the record, its two fields, y
  EXPECT_EQ(p.ops[0].kind, kffi::details::contract::kOpRecord);
  EXPECT_EQ(p.ops[0].simple, 0);
  EXPECT_EQ(p.ops[0].skip, 2);
  EXPECT_EQ(p.ops[1].kind, kffi::details::contract::kOpFloat);
  EXPECT_EQ(p.ops[2].kind, kffi::details::contract::kOpInt);
  EXPECT_EQ(p.ops[1].frame, p.ops[0].out_frame);
  EXPECT_NE(p.runtime_plan, nullptr);
  EXPECT_EQ(c.signature(), std::string("mix(") + kMix + ")");
}

TEST(ContractRecords, KffiRecordStructFieldsAreChecked) {
  kffi::Function f = kffi::FunctionWithContract(Mix, "mix", kMix);
  EXPECT_EQ(f(Blend{0.5, 2, false}, 4.0).cast<double>(), 4.0);
  const std::string sig = std::string("`mix(") + kMix + ")`";
  EXPECT_EQ(ErrorOf([&] {
              f(Blend{1.5, 2, false}, 4.0);
            }),
            "ValueError: b.alpha: expected a value in range [0.0, 1.0], got 1.5 (argument #0 of " +
                sig + ")");
  EXPECT_EQ(
      ErrorOf([&] {
        f(Blend{0.5, 9, false}, 4.0);
      }),
      "ValueError: b.n: expected a value in range [1, 8], got 9 (argument #0 of " + sig + ")");
  EXPECT_EQ(ErrorOf([&] { f(int64_t{3}, 4.0); }),
            "TypeError: b: expected crt.Blend, got int (argument #0 of " + sig + ")");
  EXPECT_EQ(ErrorOf([&] { f(Knob(1), 4.0); }),
            "TypeError: b: expected crt.Blend, got crt.Knob (argument #0 of " + sig + ")");
  // The same checks without a function behind them.
  Contract c = Contract::Parse("mix", kMix);
  EXPECT_NO_THROW(c.CheckArgs(kffi::Any(Blend{1.0, 8, true}), 1.0));
  EXPECT_NE(ErrorOf([&] {
              c.CheckArgs(kffi::Any(Blend{-0.1, 1, true}), 1.0);
            }).find("b.alpha"),
            std::string::npos);
}

TEST(ContractRecords, ObjectFieldsAreReadThroughTheGetters) {
  kffi::Function f = kffi::FunctionWithContract(Level, "level", "k: crt.Knob{level: int64[0, 3]}");
  EXPECT_EQ(f(Knob(3)).cast<int64_t>(), 3);
  EXPECT_EQ(ErrorOf([&] { f(Knob(4)); }),
            "ValueError: k.level: expected a value in range [0, 3], got 4 (argument #0 of "
            "`level(k: crt.Knob{level: int64[0, 3]})`)");
  // Only the type: every field unchecked.
  kffi::Function any = kffi::FunctionWithContract(Level, "level", "k: crt.Knob{}");
  EXPECT_EQ(any(Knob(-7)).cast<int64_t>(), -7);
}

TEST(ContractRecords, ContractsAreValidatedAgainstTheReflection) {
  struct Case {
    const char* text;
    const char* message;
  } cases[] = {
      {"k: crt.Knob{volume: int}",
       "ValueError: Invalid contract for `level`: parameter `k: crt.Knob`: the type has no field "
       "`volume`"},
      {"k: crt.Knob{level: float}",
       "ValueError: Invalid contract for `level`: parameter `k: crt.Knob`: field `level` is "
       "declared float, but its C++ type is `int` (expected a floating-point type)"},
      {"k: crt.Knob{label: bool}",
       "ValueError: Invalid contract for `level`: parameter `k: crt.Knob`: field `label` is "
       "declared bool, but its C++ type is `str` (expected bool)"},
      {"k: crt.Blend{n: int}",
       "ValueError: Invalid contract for `level`: parameter #0 `k: crt.Blend{n: int}` cannot be "
       "passed to the C++ parameter of type `crt.Knob`"},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(ErrorOf([&] { kffi::FunctionWithContract(Level, "level", c.text); }), c.message)
        << c.text;
  }
}

TEST(ContractRecords, MetadataDescribesTheFields) {
  const std::string json = Contract::Parse("mix", kMix).MetadataJson("float", "");
  EXPECT_NE(json.find("{\"name\":\"b\",\"type\":\"crt.Blend\",\"kind\":\"record\",\"optional\":"
                      "false,\"type_key\":\"crt.Blend\",\"fields\":[{\"name\":\"alpha\",\"type\":"
                      "\"float[0.0, 1.0]\",\"kind\":\"float\",\"optional\":false,\"range\":[0.0,"
                      "1.0]},{\"name\":\"n\""),
            std::string::npos)
      << json;
}

}  // namespace
