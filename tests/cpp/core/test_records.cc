// tests/cpp/core/test_records.cc: plain structs declared with KFFI_RECORD: passed and returned by
// value through typed functions, boxed for C++ callers, fields visible through reflection.
// SPDX-License-Identifier: Apache-2.0
#include <gtest/gtest.h>
#include <kffi/kffi.h>
#include <kffi/reflection.h>

#include <cstdint>
#include <cstring>
#include <string>

namespace records_test {

struct Blend {
  double alpha = 1.0;
  int64_t n = 1;
  bool flag = false;
  std::string label;
};
KFFI_RECORD(Blend, "test.records.Blend", alpha, n, flag, label);

}  // namespace records_test

namespace {

using records_test::Blend;

TEST(Records, TypedFunctionsTakeAndReturnTheStruct) {
  kffi::Function mix = kffi::Function::FromTyped(
      [](Blend b, double x) { return b.alpha * x * static_cast<double>(b.n); }, "mix");
  EXPECT_EQ(mix(Blend{0.5, 4, false, ""}, 2.0).cast<double>(), 4.0);
  kffi::Function make = kffi::Function::FromTyped(
      [](int64_t n) {
        return Blend{0.25, n, true, "made"};
      },
      "make");
  Blend b = make(3).cast<Blend>();
  EXPECT_EQ(b.alpha, 0.25);
  EXPECT_EQ(b.n, 3);
  EXPECT_TRUE(b.flag);
  EXPECT_EQ(b.label, "made");
  // The boxed value passes on unchanged, as any object does.
  kffi::Any boxed = make(5);
  EXPECT_EQ(mix(boxed, 4.0).cast<double>(), 5.0);
}

TEST(Records, WrongArgumentNamesTheRecordType) {
  kffi::Function mix =
      kffi::Function::FromTyped([](Blend b) { return b.alpha; }, "mix", __FILE__, __LINE__);
  try {
    mix(1.0);
    FAIL() << "expected a TypeError";
  } catch (const kffi::Error& e) {
    EXPECT_EQ(e.kind(), "TypeError");
    EXPECT_NE(e.message().find("test.records.Blend"), std::string::npos) << e.message();
  }
}

TEST(Records, FieldsAreReflected) {
  int32_t index = -1;
  const char* key = "test.records.Blend";
  KFFIByteArray k{key, std::strlen(key)};
  ASSERT_EQ(KFFITypeKeyToIndex(&k, &index), 0);
  const KFFITypeReflection* r = KFFIGetTypeReflection(index);
  ASSERT_NE(r, nullptr);
  ASSERT_EQ(r->num_fields, 4);
  ASSERT_NE(r->creator, nullptr);
  // A KFFI_RECORD box is a plain record: functions take copies of the struct, never the box
  // (Python reuses a box nothing else holds). KFFI_OBJECT_DEF types are not: test_reflection.cc.
  EXPECT_EQ(r->flags, kKFFITypeFlagPlainRecord);
  const char* names[] = {"alpha", "n", "flag", "label"};
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(std::string(r->fields[i].name.data, r->fields[i].name.size), names[i]);
    EXPECT_NE(r->fields[i].setter, nullptr);  // all read-write
  }
  EXPECT_EQ(std::string(r->fields[0].type_str.data, r->fields[0].type_str.size), "float");
  // Set and read a field by name on an object the creator makes.
  KFFIObjectHandle h = nullptr;
  ASSERT_EQ(r->creator(&h), 0);
  KFFIAny v{};
  v.type_index = kKFFIInt;
  v.v_int64 = 9;
  KFFIByteArray n{"n", 1};
  ASSERT_EQ(KFFIObjectSetField(h, &n, &v), 0);
  KFFIAny raw{};
  raw.type_index = static_cast<KFFIObject*>(h)->type_index;
  raw.v_obj = static_cast<KFFIObject*>(h);
  kffi::Any any = kffi::details::AnyUnsafe::FromOwnedRaw(raw);
  EXPECT_EQ(any.cast<Blend>().n, 9);
}

}  // namespace
