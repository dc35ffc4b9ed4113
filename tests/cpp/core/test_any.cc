// tests/cpp/core/test_any.cc: Any and AnyView for every built-in kind: storage, strict and
// converting reads, cast errors, equality and hashing, and the references they hold.
// SPDX-License-Identifier: Apache-2.0
#include <gtest/gtest.h>
#include <kffi/kffi.h>

#include <atomic>
#include <cstdint>
#include <limits>
#include <string>
#include <unordered_map>

#include "test_util.h"

namespace {

using kffi::Any;
using kffi::AnyView;
using kffi::Bytes;
using kffi::String;

std::atomic<int> g_live_boxes{0};

class BoxObj : public kffi::Object {
 public:
  KFFI_DECLARE_OBJECT_INFO("test.any.Box", BoxObj, kffi::Object)
  explicit BoxObj(int v) : value(v) { g_live_boxes.fetch_add(1); }
  ~BoxObj() { g_live_boxes.fetch_sub(1); }
  int value;
};

class Box : public kffi::ObjectRef {
 public:
  KFFI_DEFINE_OBJECT_REF_METHODS(Box, kffi::ObjectRef, BoxObj)
};

const KFFIAny& RawOf(const Any& a) { return *kffi::details::AnyUnsafe::Raw(a); }

TEST(AnyNone, DefaultAndNullptrAreNone) {
  Any a;
  Any n(nullptr);
  AnyView v;
  EXPECT_TRUE(a.is_none());
  EXPECT_TRUE(a == nullptr);
  EXPECT_EQ(n.type_index(), kKFFINone);
  EXPECT_EQ(v.type_index(), kKFFINone);
  EXPECT_EQ(a.GetTypeKey(), "None");
  EXPECT_EQ(RawOf(a).zero_padding, 0u);
  EXPECT_EQ(RawOf(a).v_int64, 0);
  EXPECT_TRUE(a.as<std::nullptr_t>().has_value());
  EXPECT_FALSE(Any(0).as<std::nullptr_t>().has_value());
  kffi::Error e = CatchError([&] { a.cast<int>(); });
  EXPECT_EQ(e.kind(), "TypeError");
  EXPECT_EQ(e.message(), "Cannot convert from type `None` to `int32`");
}

TEST(AnyBool, StoresBoolAndConvertsWithInt) {
  Any t(true);
  EXPECT_EQ(t.type_index(), kKFFIBool);
  EXPECT_EQ(t.GetTypeKey(), "bool");
  EXPECT_EQ(t.as<bool>(), true);
  EXPECT_EQ(Any(false).cast<bool>(), false);
  EXPECT_FALSE(t.as<int64_t>().has_value());  // strict: a bool is not stored as an int
  EXPECT_EQ(t.try_cast<int64_t>(), 1);
  EXPECT_EQ(t.cast<int8_t>(), 1);
  EXPECT_EQ(t.cast<double>(), 1.0);
  EXPECT_FALSE(Any(5).as<bool>().has_value());
  EXPECT_EQ(Any(5).try_cast<bool>(), true);
  EXPECT_EQ(Any(0).cast<bool>(), false);
  EXPECT_FALSE(Any(1.0).try_cast<bool>().has_value());
  EXPECT_EQ(CatchError([] { Any("yes").cast<bool>(); }).message(),
            "Cannot convert from type `str` to `bool`");
}

template <typename T>
void ExpectIntRoundTrip(T value) {
  SCOPED_TRACE(std::to_string(value));
  Any a(value);
  EXPECT_EQ(a.type_index(), kKFFIInt);
  EXPECT_EQ(RawOf(a).v_int64, static_cast<int64_t>(value));
  EXPECT_EQ(a.as<T>(), value);
  EXPECT_EQ(a.cast<T>(), value);
  AnyView v(value);
  EXPECT_EQ(v.type_index(), kKFFIInt);
  EXPECT_EQ(v.as<T>(), value);
}

TEST(AnyInt, EveryWidthRoundTripsItsLimits) {
  ExpectIntRoundTrip<int8_t>(std::numeric_limits<int8_t>::min());
  ExpectIntRoundTrip<int8_t>(std::numeric_limits<int8_t>::max());
  ExpectIntRoundTrip<int16_t>(std::numeric_limits<int16_t>::min());
  ExpectIntRoundTrip<int16_t>(std::numeric_limits<int16_t>::max());
  ExpectIntRoundTrip<int32_t>(std::numeric_limits<int32_t>::min());
  ExpectIntRoundTrip<int32_t>(std::numeric_limits<int32_t>::max());
  ExpectIntRoundTrip<int64_t>(std::numeric_limits<int64_t>::min());
  ExpectIntRoundTrip<int64_t>(std::numeric_limits<int64_t>::max());
  ExpectIntRoundTrip<uint8_t>(std::numeric_limits<uint8_t>::max());
  ExpectIntRoundTrip<uint16_t>(std::numeric_limits<uint16_t>::max());
  ExpectIntRoundTrip<uint32_t>(std::numeric_limits<uint32_t>::max());
  ExpectIntRoundTrip<uint64_t>(0);
  ExpectIntRoundTrip<uint64_t>(static_cast<uint64_t>(std::numeric_limits<int64_t>::max()));
  ExpectIntRoundTrip<long long>(-3);          // NOLINT(google-runtime-int)
  ExpectIntRoundTrip<unsigned long long>(3);  // NOLINT(google-runtime-int)
}

template <typename T>
void ExpectOutOfRange(int64_t value, const std::string& type_name) {
  SCOPED_TRACE(type_name + " <- " + std::to_string(value));
  Any a(value);
  EXPECT_FALSE(a.as<T>().has_value());
  EXPECT_FALSE(a.try_cast<T>().has_value());
  kffi::Error e = CatchError([&] { a.cast<T>(); });
  EXPECT_EQ(e.kind(), "TypeError");
  EXPECT_EQ(e.message(), "Cannot convert from type `int (" + std::to_string(value) +
                             " is out of range for " + type_name + ")` to `" + type_name + "`");
}

TEST(AnyInt, OutOfRangeCastsNameTheValueAndTheTarget) {
  EXPECT_EQ(CatchError([] { Any(300).cast<int8_t>(); }).message(),
            "Cannot convert from type `int (300 is out of range for int8)` to `int8`");
  ExpectOutOfRange<int8_t>(128, "int8");
  ExpectOutOfRange<int8_t>(-129, "int8");
  ExpectOutOfRange<int16_t>(40000, "int16");
  ExpectOutOfRange<int32_t>(int64_t{1} << 40, "int32");
  ExpectOutOfRange<int32_t>(-(int64_t{1} << 31) - 1, "int32");
  ExpectOutOfRange<uint8_t>(-1, "uint8");
  ExpectOutOfRange<uint8_t>(256, "uint8");
  ExpectOutOfRange<uint16_t>(70000, "uint16");
  ExpectOutOfRange<uint32_t>(-5, "uint32");
  ExpectOutOfRange<uint32_t>(int64_t{1} << 32, "uint32");
  ExpectOutOfRange<uint64_t>(-1, "uint64");
}

TEST(AnyInt, ConvertsToFloatButFloatDoesNotConvertToInt) {
  Any i(3);
  EXPECT_FALSE(i.as<double>().has_value());
  EXPECT_EQ(i.try_cast<double>(), 3.0);
  EXPECT_EQ(i.cast<float>(), 3.0f);
  Any f(1.5);
  EXPECT_FALSE(f.try_cast<int64_t>().has_value());
  EXPECT_EQ(CatchError([&] { f.cast<int64_t>(); }).message(),
            "Cannot convert from type `float` to `int`");
  EXPECT_EQ(CatchError([&] { Any("7").cast<uint16_t>(); }).message(),
            "Cannot convert from type `str` to `uint16`");
}

TEST(AnyFloat, StoresDoublesAndFloats) {
  Any d(2.5);
  EXPECT_EQ(d.type_index(), kKFFIFloat);
  EXPECT_EQ(d.GetTypeKey(), "float");
  EXPECT_EQ(d.as<double>(), 2.5);
  Any f(0.25f);
  EXPECT_EQ(f.type_index(), kKFFIFloat);
  EXPECT_EQ(f.as<float>(), 0.25f);
  EXPECT_EQ(f.cast<double>(), 0.25);
  EXPECT_EQ(RawOf(f).zero_padding, 0u);
  EXPECT_EQ(CatchError([] { Any("x").cast<float>(); }).message(),
            "Cannot convert from type `str` to `float32`");
  EXPECT_EQ(CatchError([] { Any(nullptr).cast<double>(); }).message(),
            "Cannot convert from type `None` to `float`");
}

TEST(AnyOpaquePtr, StoresPointersAndNullIsNone) {
  int target = 0;
  void* p = &target;
  Any a(p);
  EXPECT_EQ(a.type_index(), kKFFIOpaquePtr);
  EXPECT_EQ(a.GetTypeKey(), "void*");
  EXPECT_EQ(a.as<void*>(), p);
  Any null_ptr(static_cast<void*>(nullptr));
  EXPECT_TRUE(null_ptr.is_none());
  EXPECT_FALSE(null_ptr.as<void*>().has_value());
  EXPECT_EQ(null_ptr.try_cast<void*>(), static_cast<void*>(nullptr));
  EXPECT_FALSE(Any(1).try_cast<void*>().has_value());
  EXPECT_EQ(CatchError([] { Any(1).cast<void*>(); }).message(),
            "Cannot convert from type `int` to `void*`");
}

TEST(AnyDataType, StoresDataTypesAndParsesStrings) {
  DLDataType f32{kDLFloat, 32, 1};
  Any a(f32);
  EXPECT_EQ(a.type_index(), kKFFIDataType);
  EXPECT_EQ(a.GetTypeKey(), "DataType");
  EXPECT_EQ(a.as<DLDataType>(), f32);
  EXPECT_EQ(RawOf(a).v_uint64 >> 32, 0u);  // the unused half stays zero
  Any small("float32");
  ASSERT_EQ(small.type_index(), kKFFISmallStr);
  EXPECT_FALSE(small.as<DLDataType>().has_value());  // strict: a str is not a dtype
  EXPECT_EQ(small.cast<DLDataType>(), f32);
  Any long_str("bfloat16");
  ASSERT_EQ(long_str.type_index(), kKFFIStr);
  EXPECT_EQ(long_str.cast<DLDataType>(), (DLDataType{kDLBfloat, 16, 1}));
  AnyView raw("int8x4");
  ASSERT_EQ(raw.type_index(), kKFFIRawStr);
  EXPECT_EQ(raw.try_cast<DLDataType>(), (DLDataType{kDLInt, 8, 4}));
  EXPECT_FALSE(Any(1).try_cast<DLDataType>().has_value());
  EXPECT_EQ(CatchError([] { Any(1).cast<DLDataType>(); }).message(),
            "Cannot convert from type `int` to `dtype`");
}

TEST(AnyDataType, BadStringIsValueErrorNamingIt) {
  kffi::Error e = CatchError([] { Any("float32y").cast<DLDataType>(); });
  EXPECT_EQ(e.kind(), "ValueError");
  EXPECT_EQ(e.message(), "Cannot parse data type from string `float32y`");
  EXPECT_THROW(Any("not a dtype").try_cast<DLDataType>(), kffi::Error);
}

TEST(AnyDevice, StoresDevices) {
  DLDevice cuda1{kDLCUDA, 1};
  Any a(cuda1);
  EXPECT_EQ(a.type_index(), kKFFIDevice);
  EXPECT_EQ(a.GetTypeKey(), "Device");
  EXPECT_EQ(a.as<DLDevice>(), cuda1);
  EXPECT_EQ(a, Any(DLDevice{kDLCUDA, 1}));
  EXPECT_NE(a, Any(DLDevice{kDLCUDA, 0}));
  EXPECT_FALSE(Any("cuda:1").try_cast<DLDevice>().has_value());
  EXPECT_EQ(CatchError([] { Any(2).cast<DLDevice>(); }).message(),
            "Cannot convert from type `int` to `Device`");
}

TEST(AnyString, SevenBytesAreSmallStrAndEightAreAStrObject) {
  Any small("1234567");
  Any big("12345678");
  EXPECT_EQ(small.type_index(), kKFFISmallStr);
  EXPECT_EQ(RawOf(small).small_str_len, 7u);
  EXPECT_EQ(big.type_index(), kKFFIStr);
  EXPECT_EQ(RawOf(big).zero_padding, 0u);
  EXPECT_EQ(small.GetTypeKey(), "str");
  EXPECT_EQ(big.GetTypeKey(), "str");
  EXPECT_EQ(small.as<String>(), "1234567");
  EXPECT_EQ(big.as<String>(), "12345678");
  EXPECT_EQ(big.cast<std::string>(), "12345678");
  EXPECT_EQ(Any(std::string("abc")).type_index(), kKFFISmallStr);
  EXPECT_EQ(Any(String("a longer string")).type_index(), kKFFIStr);
}

TEST(AnyString, EveryShortLengthKeepsItsBytesAndZeroPadding) {
  // Each length 0..7 is stored inline: its bytes, each distinct, and zeros after them (values
  // compare bytewise).
  const char source[] = "\x01\x02\x03\x04\x05\x06\x07\xff";
  for (size_t n = 0; n <= 7; ++n) {
    const Any a(String(source, n));
    ASSERT_EQ(a.type_index(), kKFFISmallStr) << n;
    const KFFIAny& raw = RawOf(a);
    EXPECT_EQ(raw.small_str_len, n);
    EXPECT_EQ(std::string(raw.v_bytes, n), std::string(source, n)) << n;
    for (size_t k = n; k < 8; ++k) EXPECT_EQ(raw.v_bytes[k], '\0') << n << " " << k;
    EXPECT_EQ(a.cast<String>().size(), n);
  }
}

TEST(AnyString, BorrowedViewsAreRawStrAndOwnedCopiesAreIndependent) {
  std::string text = "hello from a std::string";
  AnyView view(text);
  EXPECT_EQ(view.type_index(), kKFFIRawStr);
  EXPECT_EQ(view.GetTypeKey(), "str");
  EXPECT_EQ(view.as<std::string>(), text);
  EXPECT_FALSE(view.as<String>().has_value());  // strict String means an owned str
  EXPECT_EQ(view.try_cast<String>(), text);
  Any owned(view);
  EXPECT_EQ(owned.type_index(), kKFFIStr);
  text[0] = 'J';
  EXPECT_EQ(owned.cast<std::string>(), "hello from a std::string");
  const char* c_str = "tiny";
  AnyView c_view(c_str);
  EXPECT_EQ(c_view.type_index(), kKFFIRawStr);
  Any c_owned(c_view);
  EXPECT_EQ(c_owned.type_index(), kKFFISmallStr);
  EXPECT_EQ(c_owned.cast<String>(), "tiny");
}

TEST(AnyString, WrongKindsAreNamedInCastErrors) {
  EXPECT_EQ(CatchError([] { Any(1).cast<String>(); }).message(),
            "Cannot convert from type `int` to `str`");
  EXPECT_EQ(CatchError([] { Any(Bytes("abc")).cast<std::string>(); }).message(),
            "Cannot convert from type `bytes` to `str`");
  EXPECT_FALSE(Any(Bytes("long bytes value")).try_cast<String>().has_value());
}

TEST(AnyBytes, StoresBytesInlineOrAsObjects) {
  Any small(Bytes("ab\0cd", 5));
  EXPECT_EQ(small.type_index(), kKFFISmallBytes);
  EXPECT_EQ(small.GetTypeKey(), "bytes");
  Bytes b = small.cast<Bytes>();
  EXPECT_EQ(b.size(), 5u);
  EXPECT_EQ(std::string(b), std::string("ab\0cd", 5));
  Any big(Bytes(std::string("\0\1\2\3\4\5\6\7\x08", 9)));
  EXPECT_EQ(big.type_index(), kKFFIBytes);
  EXPECT_EQ(big.cast<Bytes>().size(), 9u);
  EXPECT_FALSE(Any("str").try_cast<Bytes>().has_value());
  EXPECT_EQ(CatchError([] { Any(1.0).cast<Bytes>(); }).message(),
            "Cannot convert from type `float` to `bytes`");
}

TEST(AnyBytes, BorrowedByteArraysAreReadAndCopiedIntoBytes) {
  KFFIByteArray bytes{"a\0b", 3};
  KFFIAny raw{};
  raw.type_index = kKFFIByteArrayPtr;
  raw.v_ptr = &bytes;
  const AnyView& view = reinterpret_cast<const AnyView&>(raw);
  EXPECT_EQ(view.GetTypeKey(), "bytes");
  EXPECT_FALSE(view.as<Bytes>().has_value());  // strict Bytes means an owned value
  EXPECT_EQ(view.cast<Bytes>(), std::string("a\0b", 3));
  Any owned(view);
  EXPECT_EQ(owned.type_index(), kKFFISmallBytes);
  EXPECT_EQ(owned.cast<Bytes>().size(), 3u);
  EXPECT_FALSE(view.try_cast<std::string>().has_value());
}

TEST(AnyObject, HoldsUserObjectsAndChecksTheirType) {
  auto box = kffi::make_object<BoxObj>(4);
  Any a(box);
  EXPECT_EQ(a.type_index(), BoxObj::RuntimeTypeIndex());
  EXPECT_EQ(a.GetTypeKey(), "test.any.Box");
  EXPECT_EQ(a.as<kffi::ObjectPtr<BoxObj>>(), box);
  EXPECT_EQ(a.cast<kffi::ObjectPtr<kffi::Object>>().get(), box.get());
  EXPECT_EQ(a.cast<Box>()->value, 4);
  EXPECT_TRUE(a.cast<kffi::ObjectRef>().defined());
  EXPECT_FALSE(a.try_cast<kffi::ObjectPtr<kffi::StrObj>>().has_value());
  EXPECT_EQ(CatchError([&] { a.cast<kffi::ObjectPtr<kffi::StrObj>>(); }).message(),
            "Cannot convert from type `test.any.Box` to `Str`");
  EXPECT_EQ(CatchError([&] { a.cast<kffi::Function>(); }).message(),
            "Cannot convert from type `test.any.Box` to `Function`");
  EXPECT_EQ(CatchError([] { Any(3).cast<Box>(); }).message(),
            "Cannot convert from type `int` to `test.any.Box`");
}

TEST(AnyObject, NullReferencesAreNone) {
  Any null_ptr(kffi::ObjectPtr<BoxObj>{});
  EXPECT_TRUE(null_ptr.is_none());
  EXPECT_FALSE(null_ptr.as<kffi::ObjectPtr<BoxObj>>().has_value());
  auto read = null_ptr.try_cast<kffi::ObjectPtr<BoxObj>>();
  ASSERT_TRUE(read.has_value());
  EXPECT_FALSE(*read);
  Any null_ref(Box{kffi::details::UnsafeInit{}});
  EXPECT_TRUE(null_ref.is_none());
  EXPECT_FALSE(null_ref.cast<Box>().defined());  // nullable reference types accept None
}

TEST(AnyObject, BuiltinObjectsReportTheirKinds) {
  kffi::Function f = [](int64_t x) { return x; };
  Any a(f);
  EXPECT_EQ(a.type_index(), kKFFIFunction);
  EXPECT_EQ(a.GetTypeKey(), "Function");
  EXPECT_TRUE(a.cast<kffi::Function>().same_as(f));
  Any e(kffi::Error("ValueError", "bad"));
  EXPECT_EQ(e.type_index(), kKFFIError);
  EXPECT_EQ(e.GetTypeKey(), "Error");
  EXPECT_EQ(e.cast<kffi::Error>().message(), "bad");
}

TEST(AnyObject, ErrorIsNeverNull) {
  // An Error has no null state (its accessors read the object), so None does not convert to it.
  EXPECT_FALSE(Any().try_cast<kffi::Error>().has_value());
  EXPECT_EQ(CatchError([] { Any().cast<kffi::Error>(); }).message(),
            "Cannot convert from type `None` to `Error`");
}

TEST(AnyRefCount, CopyRetainsMoveTransfersAndResetReleases) {
  {
    auto box = kffi::make_object<BoxObj>(1);
    Any a(box);
    EXPECT_EQ(box.use_count(), 2u);
    Any copy = a;
    EXPECT_EQ(box.use_count(), 3u);
    Any moved = std::move(copy);
    EXPECT_TRUE(copy.is_none());  // NOLINT(bugprone-use-after-move): moved-from Any is None
    EXPECT_EQ(box.use_count(), 3u);
    moved.reset();
    EXPECT_EQ(box.use_count(), 2u);
    a = Any(5);
    EXPECT_EQ(box.use_count(), 1u);
    a = Any(box);
    Any other(7);
    a.swap(other);
    EXPECT_EQ(a.cast<int>(), 7);
    EXPECT_EQ(box.use_count(), 2u);
    Any& alias = other;
    other = alias;
    EXPECT_EQ(box.use_count(), 2u);
  }
  EXPECT_EQ(g_live_boxes.load(), 0);
}

TEST(AnyRefCount, ViewsBorrowWithoutReferences) {
  auto box = kffi::make_object<BoxObj>(2);
  Any a(box);
  AnyView from_any(a);
  AnyView from_ptr(box);
  EXPECT_EQ(box.use_count(), 2u);
  EXPECT_EQ(from_any.type_index(), BoxObj::RuntimeTypeIndex());
  Any owned(from_ptr);  // an owned copy of a view retains
  EXPECT_EQ(box.use_count(), 3u);
  auto read = from_any.cast<kffi::ObjectPtr<BoxObj>>();
  EXPECT_EQ(box.use_count(), 4u);
}

TEST(AnyRefCount, LastAnyRunsTheDestructor) {
  Any a(kffi::make_object<BoxObj>(3));
  EXPECT_EQ(g_live_boxes.load(), 1);
  Any b = a;
  a.reset();
  EXPECT_EQ(g_live_boxes.load(), 1);
  b = nullptr;
  EXPECT_EQ(g_live_boxes.load(), 0);
}

TEST(AnyRefCount, OwnedCopyOfAnRValueRefMovesTheObject) {
  KFFIObjectHandle slot = kffi::details::ObjectUnsafe::MoveToHandle(kffi::make_object<BoxObj>(8));
  KFFIAny rref{};
  rref.type_index = kKFFIObjectRValueRef;
  rref.v_ptr = &slot;
  {
    Any owned(reinterpret_cast<const AnyView&>(rref));
    EXPECT_EQ(slot, nullptr);  // moved from: the caller no longer releases it
    EXPECT_EQ(owned.cast<Box>()->value, 8);
    EXPECT_EQ(owned.cast<Box>().use_count(), 2u);
  }
  EXPECT_EQ(g_live_boxes.load(), 0);
}

TEST(AnyEquality, PlainValuesCompareByKindAndBits) {
  EXPECT_EQ(Any(1), Any(1));
  EXPECT_NE(Any(1), Any(2));
  EXPECT_NE(Any(1), Any(true));
  EXPECT_NE(Any(1), Any(1.0));
  EXPECT_EQ(Any(), Any(nullptr));
  EXPECT_EQ(Any(DLDataType{kDLFloat, 16, 1}), Any(DLDataType{kDLFloat, 16, 1}));
  EXPECT_NE(Any(DLDataType{kDLFloat, 16, 1}), Any(DLDataType{kDLFloat, 16, 2}));
}

TEST(AnyEquality, StringsCompareByContentAndObjectsByIdentity) {
  Any a(String("the same long content"));
  Any b(String("the same long content"));
  ASSERT_NE(RawOf(a).v_obj, RawOf(b).v_obj);
  EXPECT_EQ(a, b);
  EXPECT_EQ(Any("short"), Any(String("short")));
  EXPECT_NE(Any("short"), Any(Bytes("short")));  // str and bytes never compare equal
  EXPECT_NE(Any("short"), Any("shorT"));
  auto box = kffi::make_object<BoxObj>(1);
  EXPECT_EQ(Any(box), Any(box));
  EXPECT_NE(Any(box), Any(kffi::make_object<BoxObj>(1)));
}

TEST(AnyEquality, HashAgreesWithEquality) {
  kffi::AnyHash hash;
  EXPECT_EQ(hash(Any(String("a long string key"))), hash(Any(String("a long string key"))));
  EXPECT_EQ(hash(Any(42)), hash(Any(42)));
  std::unordered_map<Any, int, kffi::AnyHash, kffi::AnyEqual> table;
  table[Any("a long string key")] = 1;
  table[Any(42)] = 2;
  table[Any("k")] = 3;
  table[Any(true)] = 4;
  EXPECT_EQ(table.size(), 4u);
  EXPECT_EQ(table.at(Any(std::string("a long string key"))), 1);
  EXPECT_EQ(table.at(Any(int64_t{42})), 2);
  EXPECT_EQ(table.at(Any(String("k"))), 3);
  EXPECT_EQ(table.count(Any(Bytes("k"))), 0u);
  EXPECT_EQ(table.at(Any(true)), 4);
}

}  // namespace
