// tests/cpp/module/test_json_reader.cc: the one JSON reader (kffi/details/json.h) keeps to RFC
// 8259.
// SPDX-License-Identifier: Apache-2.0
#include <gtest/gtest.h>
#include <kffi/details/json.h>

#include <string>

namespace {

bool Reads(const std::string& text, kffi::details::Json* out = nullptr) {
  kffi::details::Json v;
  const bool ok = kffi::details::JsonReader(text).Parse(&v);
  if (out != nullptr) *out = v;
  return ok;
}

TEST(JsonReader, NumbersFollowTheGrammar) {
  kffi::details::Json v;
  ASSERT_TRUE(Reads("[0, -1, 12, 1.5, -0.25e3, 2E+2, 9223372036854775807]", &v));
  ASSERT_EQ(v.items.size(), 7u);
  EXPECT_TRUE(v.items[2].integral);
  EXPECT_EQ(v.items[2].integer, 12);
  EXPECT_DOUBLE_EQ(v.items[4].number, -250.0);
  EXPECT_FALSE(v.items[4].integral);
  EXPECT_EQ(v.items[6].integer, INT64_MAX);
  // strtod alone takes each of these; JSON does not.
  for (const char* bad : {"-inf", "-infinity", "0x10", "01", "1.", ".5", "-", "1e", "+1", "-nan"}) {
    EXPECT_FALSE(Reads(bad)) << bad;
    EXPECT_FALSE(Reads(std::string("[") + bad + "]")) << bad;
  }
}

TEST(JsonReader, StringsRefuseRawControlCharacters) {
  kffi::details::Json v;
  ASSERT_TRUE(Reads("\"a\\n\\u0001\\u00e9\"", &v));
  EXPECT_EQ(v.str, "a\n\x01\xc3\xa9");
  EXPECT_FALSE(Reads("\"a\nb\""));
  EXPECT_FALSE(Reads(std::string("\"a\x01b\"")));
  EXPECT_FALSE(Reads("\"\\x41\""));
  EXPECT_FALSE(Reads("\"open"));
  EXPECT_FALSE(Reads("{} x"));
}

}  // namespace
