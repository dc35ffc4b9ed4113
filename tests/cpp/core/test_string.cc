// tests/cpp/core/test_string.cc: String and Bytes (inline up to 7 bytes, objects beyond), their
// comparisons, hashing and bounds checks, and the dtype <-> string conversions of the C API.
// SPDX-License-Identifier: Apache-2.0
#include <gtest/gtest.h>
#include <kffi/kffi.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <string_view>
#include <unordered_set>
#include <utility>
#include <vector>

namespace {

using kffi::Bytes;
using kffi::String;

kffi::Error TakeRaisedError() {
  KFFIObjectHandle h = nullptr;
  KFFIErrorMoveFromRaised(&h);
  if (h == nullptr) return kffi::Error("NoError", "no error was raised");
  return kffi::Error(kffi::details::ObjectUnsafe::FromOwnedHandle<kffi::Object>(h));
}

TEST(StringStorage, SevenBytesStayInlineAndEightMakeAnObject) {
  String seven("1234567");
  String eight("12345678");
  EXPECT_EQ(seven.raw().type_index, kKFFISmallStr);
  EXPECT_EQ(seven.raw().small_str_len, 7u);
  EXPECT_EQ(seven.size(), 7u);
  EXPECT_EQ(eight.raw().type_index, kKFFIStr);
  EXPECT_EQ(eight.raw().zero_padding, 0u);
  EXPECT_EQ(eight.size(), 8u);
  EXPECT_EQ(seven.view(), "1234567");
  EXPECT_EQ(eight.view(), "12345678");
  const auto* cell = static_cast<const KFFIStrCell*>(KFFIObjectGetCellPtr(eight.raw().v_obj));
  EXPECT_EQ(cell->data, eight.data());
  EXPECT_EQ(cell->size, 8u);
}

TEST(StringStorage, EveryLengthIsNulTerminated) {
  std::string text;
  for (size_t n = 0; n <= 20; ++n) {
    SCOPED_TRACE(n);
    String s(text);
    EXPECT_EQ(s.size(), n);
    EXPECT_EQ(s.length(), n);
    EXPECT_EQ(s.empty(), n == 0);
    EXPECT_EQ(s.raw().type_index, n <= 7 ? kKFFISmallStr : kKFFIStr);
    EXPECT_EQ(s.c_str()[n], '\0');
    EXPECT_EQ(std::string(s.c_str()), text);
    EXPECT_EQ(std::string(s), text);
    text.push_back(static_cast<char>('a' + n));
  }
}

TEST(StringStorage, InlineBytesAreTheSourceThenZeros) {
  // SetSmallBytes copies with overlapping loads: every length, bytes with the high bit set (no
  // sign extension) and no byte of the source's neighbours.
  const unsigned char buffer[] = {0xEE, 0x81, 0xFF, 0x00, 0x7F, 0x80, 0x01, 0xC3, 0xEE};
  for (size_t n = 0; n <= 7; ++n) {
    SCOPED_TRACE(n);
    KFFIAny v;
    std::memset(&v, 0xAB, sizeof(v));
    kffi::details::SetSmallBytes(&v, kKFFISmallBytes, reinterpret_cast<const char*>(buffer + 1), n);
    EXPECT_EQ(v.type_index, kKFFISmallBytes);
    EXPECT_EQ(v.small_str_len, n);
    for (size_t i = 0; i < 8; ++i) {
      EXPECT_EQ(static_cast<unsigned char>(v.v_bytes[i]), i < n ? buffer[1 + i] : 0) << i;
    }
  }
}

TEST(StringStorage, EmptyStringIsInline) {
  String empty;
  String from_literal("");
  EXPECT_TRUE(empty.empty());
  EXPECT_EQ(empty.raw().type_index, kKFFISmallStr);
  EXPECT_EQ(empty.c_str()[0], '\0');
  EXPECT_EQ(empty, from_literal);
  EXPECT_EQ(empty, "");
}

TEST(StringStorage, EmbeddedNulBytesAreKept) {
  String s(std::string("ab\0cd", 5));
  EXPECT_EQ(s.size(), 5u);
  EXPECT_EQ(s.view(), std::string_view("ab\0cd", 5));
  String long_s(
      std::string("0123\0"
                  "456789",
                  11));
  EXPECT_EQ(long_s.size(), 11u);
  EXPECT_EQ(long_s.raw().type_index, kKFFIStr);
  EXPECT_NE(long_s, "0123");
}

TEST(StringStorage, CopiesShareTheObjectAndMovesEmptyTheSource) {
  String a("a string that needs an object");
  String b = a;
  EXPECT_EQ(b.raw().v_obj, a.raw().v_obj);
  EXPECT_EQ(kffi::Any(a).cast<kffi::ObjectPtr<kffi::Object>>().use_count(), 4u);
  String c = std::move(b);
  EXPECT_TRUE(b.empty());  // NOLINT(bugprone-use-after-move): a moved-from String is empty
  EXPECT_EQ(c.raw().v_obj, a.raw().v_obj);
  String d("short");
  d = c;
  EXPECT_EQ(d, a);
  d = String("x");
  EXPECT_EQ(d, "x");
}

TEST(StringStorage, CApiMakesSmallOrObjectValues) {
  KFFIAny out{};
  KFFIByteArray small{"abc", 3};
  ASSERT_EQ(KFFIStringFromByteArray(&small, &out), 0);
  EXPECT_EQ(out.type_index, kKFFISmallStr);
  EXPECT_EQ(String(String::FromOwnedAny(out)), "abc");
  KFFIByteArray big{"abcdefghijk", 11};
  ASSERT_EQ(KFFIStringFromByteArray(&big, &out), 0);
  EXPECT_EQ(out.type_index, kKFFIStr);
  EXPECT_EQ(String(String::FromOwnedAny(out)), "abcdefghijk");
  ASSERT_EQ(KFFIBytesFromByteArray(&big, &out), 0);
  EXPECT_EQ(out.type_index, kKFFIBytes);
  EXPECT_EQ(Bytes(Bytes::FromOwnedAny(out)), "abcdefghijk");
  EXPECT_EQ(KFFIStringFromByteArray(nullptr, &out), -1);
  EXPECT_EQ(TakeRaisedError().message(), "KFFIStringFromByteArray: input must not be NULL");
}

TEST(StringCompare, EqualityWorksAgainstEveryStringForm) {
  String s("compare me please");
  std::string std_s = "compare me please";
  std::string_view view = std_s;
  EXPECT_TRUE(s == String("compare me please"));
  EXPECT_TRUE(s == "compare me please");
  EXPECT_TRUE("compare me please" == s);
  EXPECT_TRUE(s == view);
  EXPECT_TRUE(view == s);
  EXPECT_TRUE(s == std_s);
  EXPECT_TRUE(std_s == s);
  EXPECT_FALSE(s != std_s);
  EXPECT_FALSE(std_s != s);
  EXPECT_FALSE(view != s);
  EXPECT_TRUE(s != "compare me");
  EXPECT_TRUE("compare me" != s);
  EXPECT_TRUE(s != String("Compare me please"));
}

TEST(StringCompare, OrderingIsBytewiseAcrossStorage) {
  EXPECT_LT(String("abc"), String("abd"));
  EXPECT_LT(String("ab"), String("abc"));
  EXPECT_LT(String("abcdefg"), String("abcdefgh"));  // inline vs object
  EXPECT_FALSE(String("b") < String("abcdefghij"));
  EXPECT_LT(String(std::string("a\0", 2)), String("a\x01"));
  EXPECT_LT(String("a").compare("b"), 0);
  EXPECT_EQ(String("same").compare("same"), 0);
  EXPECT_GT(String("zzzzzzzzzz").compare("a"), 0);
  std::vector<String> v = {"pear", "apple", "a much longer fig", "apple pie!"};
  std::sort(v.begin(), v.end());
  EXPECT_EQ(v[0], "a much longer fig");
  EXPECT_EQ(v[1], "apple");
  EXPECT_EQ(v[2], "apple pie!");
  EXPECT_EQ(v[3], "pear");
}

TEST(StringHash, MatchesStringViewAndWorksInSets) {
  String small("key");
  String big("a key long enough for an object");
  EXPECT_EQ(std::hash<String>()(small), std::hash<std::string_view>()("key"));
  EXPECT_EQ(std::hash<String>()(big), std::hash<String>()(String(std::string(big))));
  std::unordered_set<String> set = {small, big};
  EXPECT_EQ(set.count(String("key")), 1u);
  EXPECT_EQ(set.count(String("a key long enough for an object")), 1u);
  EXPECT_EQ(set.count(String("other")), 0u);
}

TEST(StringAt, ReadsCharactersAndRejectsOutOfRangeWithIndexError) {
  String s("xyz");
  EXPECT_EQ(s.at(0), 'x');
  EXPECT_EQ(s.at(2), 'z');
  try {
    s.at(3);
    FAIL() << "at(3) did not throw";
  } catch (const kffi::Error& e) {
    EXPECT_EQ(e.kind(), "IndexError");
    EXPECT_EQ(e.message(), "String index 3 out of range for length 3");
  }
  EXPECT_THROW(String().at(0), kffi::Error);
  EXPECT_EQ(String("0123456789").at(9), '9');
}

TEST(StringConvert, ConcatenatesAndConvertsToStandardStrings) {
  String a = String("abc") + "defg";  // crosses from inline to an object
  EXPECT_EQ(a, "abcdefg");
  EXPECT_EQ(a.raw().type_index, kKFFISmallStr);
  String b = a + "h";
  EXPECT_EQ(b.raw().type_index, kKFFIStr);
  EXPECT_EQ(b, "abcdefgh");
  std::string as_std = b;
  std::string_view as_view = b;
  EXPECT_EQ(as_std, "abcdefgh");
  EXPECT_EQ(as_view, "abcdefgh");
  EXPECT_EQ(kffi::KFFIToErrorString(b), "abcdefgh");
}

TEST(BytesStorage, SevenBytesStayInlineAndEightMakeAnObject) {
  Bytes seven("\x01\x02\x03\x04\x05\x06\x07", 7);
  Bytes eight(std::string(8, '\0'));
  EXPECT_EQ(seven.raw().type_index, kKFFISmallBytes);
  EXPECT_EQ(eight.raw().type_index, kKFFIBytes);
  EXPECT_EQ(eight.size(), 8u);
  EXPECT_EQ(eight.data()[8], '\0');
  EXPECT_EQ(std::string(eight), std::string(8, '\0'));
  EXPECT_EQ(Bytes().size(), 0u);
}

TEST(BytesCompare, ComparesByContent) {
  Bytes a(std::string("\0\1\2", 3));
  EXPECT_EQ(a, Bytes(std::string("\0\1\2", 3)));
  EXPECT_NE(a, Bytes(std::string("\0\1", 2)));
  EXPECT_TRUE(a == std::string("\0\1\2", 3));
  EXPECT_LT(Bytes(std::string("\0", 1)), a);
  EXPECT_EQ(Bytes("some bytes here"), "some bytes here");
}

struct DTypeCase {
  const char* name;
  uint8_t code;
  uint8_t bits;
  uint16_t lanes;
};

constexpr DTypeCase kNamedDTypes[] = {
    {"bool", kDLBool, 8, 1},
    {"int4", kDLInt, 4, 1},
    {"int8", kDLInt, 8, 1},
    {"int16", kDLInt, 16, 1},
    {"int32", kDLInt, 32, 1},
    {"int64", kDLInt, 64, 1},
    {"uint1", kDLUInt, 1, 1},
    {"uint8", kDLUInt, 8, 1},
    {"uint16", kDLUInt, 16, 1},
    {"uint32", kDLUInt, 32, 1},
    {"uint64", kDLUInt, 64, 1},
    {"float16", kDLFloat, 16, 1},
    {"float32", kDLFloat, 32, 1},
    {"float64", kDLFloat, 64, 1},
    {"bfloat16", kDLBfloat, 16, 1},
    {"complex64", kDLComplex, 64, 1},
    {"complex128", kDLComplex, 128, 1},
    {"handle", kDLOpaqueHandle, 64, 1},
    {"handle32", kDLOpaqueHandle, 32, 1},
    {"void", kDLOpaqueHandle, 0, 0},
    {"float8_e3m4", kDLFloat8_e3m4, 8, 1},
    {"float8_e4m3", kDLFloat8_e4m3, 8, 1},
    {"float8_e4m3b11fnuz", kDLFloat8_e4m3b11fnuz, 8, 1},
    {"float8_e4m3fn", kDLFloat8_e4m3fn, 8, 1},
    {"float8_e4m3fnuz", kDLFloat8_e4m3fnuz, 8, 1},
    {"float8_e5m2", kDLFloat8_e5m2, 8, 1},
    {"float8_e5m2fnuz", kDLFloat8_e5m2fnuz, 8, 1},
    {"float8_e8m0fnu", kDLFloat8_e8m0fnu, 8, 1},
    {"float6_e2m3fn", kDLFloat6_e2m3fn, 6, 1},
    {"float6_e3m2fn", kDLFloat6_e3m2fn, 6, 1},
    {"float4_e2m1fn", kDLFloat4_e2m1fn, 4, 1},
    {"float32x4", kDLFloat, 32, 4},
    {"int8x16", kDLInt, 8, 16},
    {"boolx4", kDLBool, 8, 4},
    {"bfloat16x8", kDLBfloat, 16, 8},
    {"complex64x2", kDLComplex, 64, 2},
    {"float8_e4m3fnx4", kDLFloat8_e4m3fn, 8, 4},
    {"float4_e2m1fnx2", kDLFloat4_e2m1fn, 4, 2},
    {"uint8x32767", kDLUInt, 8, 32767},
    {"uint8xvscalex1", kDLUInt, 8, 65535},
};

bool ParseDType(std::string_view s, DLDataType* out) {
  KFFIByteArray in{s.data(), s.size()};
  return KFFIDataTypeFromString(&in, out) == 0;
}

String FormatDType(DLDataType t) {
  KFFIAny out{};
  EXPECT_EQ(KFFIDataTypeToString(&t, &out), 0);
  return String(String::FromOwnedAny(out));
}

TEST(DataTypeString, ParsesEveryNamedTypeAndLanes) {
  for (const DTypeCase& c : kNamedDTypes) {
    SCOPED_TRACE(c.name);
    DLDataType t{};
    ASSERT_TRUE(ParseDType(c.name, &t));
    EXPECT_EQ(t.code, c.code);
    EXPECT_EQ(t.bits, c.bits);
    EXPECT_EQ(t.lanes, c.lanes);
  }
}

TEST(DataTypeString, EveryNamedTypeRoundTrips) {
  for (const DTypeCase& c : kNamedDTypes) {
    SCOPED_TRACE(c.name);
    DLDataType t{c.code, c.bits, c.lanes};
    String s = FormatDType(t);
    EXPECT_EQ(s, c.name);
    DLDataType back{};
    ASSERT_TRUE(ParseDType(s.view(), &back));
    EXPECT_EQ(back, t);
  }
}

TEST(DataTypeString, UnnamedTypesUseTheGenericSpellingThatParsesBack) {
  const DLDataType unnamed[] = {
      {99, 8, 1}, {kDLFloat, 32, 0}, {kDLFloat8_e5m2, 16, 1}, {kDLBool, 1, 1}, {255, 255, 65535}};
  for (const DLDataType& t : unnamed) {
    String s = FormatDType(t);
    SCOPED_TRACE(std::string(s));
    EXPECT_EQ(s.view().substr(0, 11), "dtype(code=");
    DLDataType back{};
    ASSERT_TRUE(ParseDType(s.view(), &back));
    EXPECT_EQ(back, t);
  }
  EXPECT_EQ(FormatDType(DLDataType{99, 8, 1}), "dtype(code=99, bits=8, lanes=1)");
  EXPECT_EQ(FormatDType(DLDataType{kDLFloat, 32, 4}).raw().type_index, kKFFIStr);
  EXPECT_EQ(FormatDType(DLDataType{kDLInt, 8, 1}).raw().type_index, kKFFISmallStr);
}

TEST(DataTypeString, ShortAliasesParseToTheirCanonicalType) {
  // Spellings that TVM-FFI producers write; each prints back in its canonical form.
  const std::pair<const char*, const char*> aliases[] = {
      {"i32", "int32"},
      {"u16", "uint16"},
      {"f32", "float32"},
      {"bf16", "bfloat16"},
      {"bf16x2", "bfloat16x2"},
      {"f8_e4m3fn", "float8_e4m3fn"},
      {"f8_e4m3fnuzx2", "float8_e4m3fnuzx2"},
      {"fp8_e5m2x4", "float8_e5m2x4"},
      {"f6_e2m3fn", "float6_e2m3fn"},
      {"fp6_e3m2fn", "float6_e3m2fn"},
      {"f4_e2m1fn", "float4_e2m1fn"},
      {"fp4_e2m1fn_x2", "float4_e2m1fnx2"},
      {"float4_e2m1fn_x2", "float4_e2m1fnx2"},
  };
  for (const auto& [alias, canonical] : aliases) {
    SCOPED_TRACE(alias);
    DLDataType t{}, want{};
    ASSERT_TRUE(ParseDType(alias, &t));
    ASSERT_TRUE(ParseDType(canonical, &want));
    EXPECT_EQ(t, want);
    EXPECT_EQ(FormatDType(t), canonical);
  }
  // An alias prefix does not make a bad name good.
  for (const char* bad : {"i", "f", "bf", "fp8_", "f8_e4m3fn_", "i32_", "ix2", "q32"}) {
    SCOPED_TRACE(bad);
    DLDataType t{};
    EXPECT_FALSE(ParseDType(bad, &t));
    EXPECT_EQ(TakeRaisedError().kind(), "ValueError");
  }
}

TEST(DataTypeString, ScalableVectorsHoldMinusTheVscaleMultipleInLanes) {
  DLDataType t{};
  ASSERT_TRUE(ParseDType("int32xvscalex4", &t));
  EXPECT_EQ(t, (DLDataType{kDLInt, 32, static_cast<uint16_t>(-4)}));
  EXPECT_EQ(FormatDType(t), "int32xvscalex4");
  ASSERT_TRUE(ParseDType("bf16xvscalex32768", &t));
  EXPECT_EQ(t, (DLDataType{kDLBfloat, 16, 32768}));
  EXPECT_EQ(FormatDType(t), "bfloat16xvscalex32768");
  // 32767 fixed lanes is the most; beyond that the lanes are a scalable vector's.
  ASSERT_TRUE(ParseDType("int8x32767", &t));
  EXPECT_EQ(FormatDType(t), "int8x32767");
  for (const char* bad : {"int8x32768", "int32xvscalex0", "int32xvscalex32769", "xvscalex4",
                          "int32xvscalex", "int32xvscale4"}) {
    SCOPED_TRACE(bad);
    EXPECT_FALSE(ParseDType(bad, &t));
    EXPECT_EQ(TakeRaisedError().kind(), "ValueError");
  }
}

TEST(DataTypeString, ParsesOnlyTheLengthGivenNotTheBytesAfterIt) {
  // A byte array need not end in NUL: what follows its length is someone else's memory.
  const char buf1[] = "float16999888777";
  const char buf2[] = "int32x4extradata";
  DLDataType t{};
  ASSERT_TRUE(ParseDType(std::string_view(buf1, 7), &t));
  EXPECT_EQ(t, (DLDataType{kDLFloat, 16, 1}));
  ASSERT_TRUE(ParseDType(std::string_view(buf2, 5), &t));
  EXPECT_EQ(t, (DLDataType{kDLInt, 32, 1}));
  const char buf3[] = "float16xvscalex8999";
  ASSERT_TRUE(ParseDType(std::string_view(buf3, 16), &t));
  EXPECT_EQ(t, (DLDataType{kDLFloat, 16, static_cast<uint16_t>(-8)}));
}

TEST(DataTypeString, BadStringsAreValueErrorsNamingThem) {
  const char* bad[] = {"",
                       "float",
                       "float0",
                       "float256",
                       "int-8",
                       "int08",
                       "float32x",
                       "float32x0",
                       "x4",
                       " float32",
                       "float32 ",
                       "Float32",
                       "float32x65536",
                       "int8x4x2",
                       "floatx4",
                       "float8_e4m3fn8",
                       "dtype(code=1, bits=2)",
                       "dtype(code=1,bits=2,lanes=1)",
                       "bool8"};
  for (const char* s : bad) {
    SCOPED_TRACE(s);
    DLDataType t{};
    EXPECT_FALSE(ParseDType(s, &t));
    kffi::Error e = TakeRaisedError();
    EXPECT_EQ(e.kind(), "ValueError");
    EXPECT_EQ(e.message(), std::string("Cannot parse data type from string `") + s + "`");
  }
  DLDataType t{};
  EXPECT_EQ(KFFIDataTypeFromString(nullptr, &t), -1);
  EXPECT_EQ(TakeRaisedError().message(), "KFFIDataTypeFromString: str must not be NULL");
}

TEST(DataTypeString, PrintsInErrorMessages) {
  EXPECT_EQ(KFFIToErrorString(DLDataType{kDLBfloat, 16, 2}), "bfloat16x2");
  EXPECT_EQ(KFFIToErrorString(DLDevice{kDLCPU, 0}), "cpu");
  EXPECT_EQ(KFFIToErrorString(DLDevice{kDLCUDA, 3}), "cuda:3");
}

}  // namespace
