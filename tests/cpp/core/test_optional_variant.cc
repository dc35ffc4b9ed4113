// tests/cpp/core/test_optional_variant.cc: Optional, Variant and Tuple conversions, casts and
// errors.
// SPDX-License-Identifier: Apache-2.0
#include <gtest/gtest.h>
#include <kffi/container/containers.h>
#include <kffi/function.h>

#include <string>
#include <tuple>
#include <utility>

#include "test_util.h"

namespace {

using kffi::Any;
using kffi::AnyView;
using kffi::Array;
using kffi::List;
using kffi::Map;
using kffi::Optional;
using kffi::String;
using kffi::Tuple;
using kffi::Variant;

template <typename T>
std::string TypeStr() {
  return kffi::TypeTraits<T>::TypeStr();
}

// ---- Optional -----------------------------------------------------------------------------

TEST(Optional, NoneIsNulloptAndValuesRoundTrip) {
  Any none = Optional<int64_t>();
  EXPECT_TRUE(none.is_none());
  Any five = Optional<int64_t>(5);
  EXPECT_EQ(five.type_index(), kKFFIInt);
  EXPECT_EQ(none.cast<Optional<int64_t>>(), std::nullopt);
  EXPECT_EQ(five.cast<Optional<int64_t>>(), 5);
  Optional<int64_t> seven = 7;
  AnyView view = seven;  // a borrowed view of the held value
  EXPECT_EQ(view.cast<int64_t>(), 7);
  EXPECT_TRUE(AnyView(Optional<int64_t>()).is_none());
  EXPECT_EQ(TypeStr<Optional<int64_t>>(), "Optional<int>");
  EXPECT_EQ(TypeStr<Optional<Array<String>>>(), "Optional<Array<str>>");
}

TEST(Optional, AsIsStrictTryCastConverts) {
  Any flag = true;
  EXPECT_FALSE(flag.as<Optional<int64_t>>().has_value());  // bool is not stored as int
  std::optional<Optional<int64_t>> converted = flag.try_cast<Optional<int64_t>>();
  ASSERT_TRUE(converted.has_value());
  EXPECT_EQ(*converted, 1);
  std::optional<Optional<int64_t>> from_none = Any().try_cast<Optional<int64_t>>();
  ASSERT_TRUE(from_none.has_value());    // success...
  EXPECT_FALSE(from_none->has_value());  // ...holding nullopt
  EXPECT_FALSE(Any("x").try_cast<Optional<int64_t>>().has_value());
  ExpectError("TypeError", "Cannot convert from type `str` to `Optional<int>`",
              [] { Any("x").cast<Optional<int64_t>>(); });
}

TEST(Optional, NoneWinsOverANullableObjectReference) {
  // Function accepts None as a null Function; inside Optional, None must still mean nullopt.
  Optional<kffi::Function> f = Any().cast<Optional<kffi::Function>>();
  EXPECT_FALSE(f.has_value());
  Optional<Array<int64_t>> a = Any(Array<int64_t>{1}).cast<Optional<Array<int64_t>>>();
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(a->size(), 1);
  EXPECT_FALSE(Any().cast<Optional<Array<int64_t>>>().has_value());
}

TEST(Optional, TypedFunctionParameterAndResult) {
  kffi::Function f = kffi::Function::FromTyped(
      [](Optional<int64_t> x) -> Optional<String> {
        if (!x) return std::nullopt;
        return String(std::to_string(*x));
      },
      "f");
  EXPECT_TRUE(f(nullptr).is_none());
  EXPECT_EQ(f(12).cast<std::string>(), "12");
  EXPECT_EQ(f(Optional<int64_t>(3)).cast<std::string>(), "3");
  ExpectError("TypeError",
              "arg0: expected Optional<int>, got str (argument #0 of `f(arg0: Optional<int>) -> "
              "Optional<str>`)",
              [&] { f("x"); });
  ExpectError("TypeError",
              "Cannot convert from type `Array[index 0: str]` to `Optional<Array<int>>`",
              [&] { Any(Array<Any>{"x"}).cast<Optional<Array<int64_t>>>(); });
}

// ---- Variant ------------------------------------------------------------------------------

TEST(Variant, StrictPicksTheFirstExactAlternative) {
  using V = Variant<int64_t, String>;
  V a = Any(1).cast<V>();
  V b = Any("text").cast<V>();
  EXPECT_EQ(a.index(), 0u);
  EXPECT_EQ(std::get<0>(a), 1);
  EXPECT_EQ(b.index(), 1u);
  EXPECT_EQ(std::get<1>(b), "text");
  EXPECT_TRUE(Any(2).as<V>().has_value());
  EXPECT_FALSE(Any(1.5).as<V>().has_value());
  ExpectError("TypeError", "Cannot convert from type `float` to `Variant<int, str>`",
              [] { Any(1.5).cast<Variant<int64_t, String>>(); });
  EXPECT_EQ(TypeStr<V>(), "Variant<int, str>");
}

TEST(Variant, ExactMatchBeatsAnEarlierConvertingAlternative) {
  using V = Variant<double, int64_t>;
  EXPECT_EQ(Any(3).cast<V>().index(), 1u);  // int is stored exactly: not turned into a float
  std::optional<V> t = Any(3).try_cast<V>();
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->index(), 1u);  // try_cast agrees with cast
  using W = Variant<double, String>;
  W w = Any(3).cast<W>();  // no exact match: the first alternative that converts
  EXPECT_EQ(w.index(), 0u);
  EXPECT_EQ(std::get<0>(w), 3.0);
}

TEST(Variant, RoundTripsTheHeldAlternative) {
  Variant<int64_t, String> v = String("a long string value");
  Any x = v;
  EXPECT_EQ(x.type_index(), kKFFIStr);
  EXPECT_EQ(AnyView(v).cast<std::string>(), "a long string value");
  Variant<Array<int64_t>, Map<String, int64_t>> c = Map<String, int64_t>{{"k", 1}};
  Any y = c;
  EXPECT_EQ(y.type_index(), kKFFIMap);
  auto back = y.cast<Variant<Array<int64_t>, Map<String, int64_t>>>();
  EXPECT_EQ(back.index(), 1u);
  EXPECT_TRUE(std::get<1>(back).same_as(std::get<1>(c)));
}

TEST(Variant, TypedFunctionParameter) {
  kffi::Function f = kffi::Function::FromTyped(
      [](Variant<int64_t, String> v) -> int64_t {
        return v.index() == 0 ? std::get<0>(v) : static_cast<int64_t>(std::get<1>(v).size());
      },
      "f");
  EXPECT_EQ(f(40).cast<int64_t>(), 40);
  EXPECT_EQ(f("four").cast<int64_t>(), 4);  // a borrowed const char* converts to String
  ExpectError("TypeError",
              "arg0: expected Variant<int, str>, got Array (argument #0 of `f(arg0: Variant<int, "
              "str>) -> int`)",
              [&] { f(Array<int64_t>{}); });
}

// ---- Tuple --------------------------------------------------------------------------------

TEST(Tuple, TravelsAsAnArray) {
  Any x = Tuple<int64_t, String>(1, "a string longer than 7");
  EXPECT_EQ(x.type_index(), kKFFIArray);
  Array<Any> arr = x.cast<Array<Any>>();
  EXPECT_EQ(arr.size(), 2);
  EXPECT_EQ(arr[0].cast<int64_t>(), 1);
  auto [n, s] = x.cast<Tuple<int64_t, String>>();
  EXPECT_EQ(n, 1);
  EXPECT_EQ(s, "a string longer than 7");
  EXPECT_EQ((TypeStr<Tuple<int64_t, String>>()), "Tuple<int, str>");
  EXPECT_EQ(TypeStr<Tuple<>>(), "Tuple<>");
  EXPECT_TRUE(Any(Tuple<>()).cast<Tuple<>>() == Tuple<>());
}

TEST(Tuple, ArityOrElementMismatchFailsTheCast) {
  using T = Tuple<int64_t, String>;
  EXPECT_FALSE(Any(Array<Any>{1}).try_cast<T>().has_value());
  ExpectError("TypeError", "Cannot convert from type `Array[size 3]` to `Tuple<int, str>`", [] {
    Any(Array<Any>{1, "a", 2}).cast<Tuple<int64_t, String>>();
  });
  ExpectError("TypeError", "Cannot convert from type `Array[index 1: int]` to `Tuple<int, str>`",
              [] {
                Any(Array<Any>{1, 2}).cast<Tuple<int64_t, String>>();
              });
  ExpectError("TypeError", "Cannot convert from type `int` to `Tuple<int, str>`",
              [] { Any(5).cast<Tuple<int64_t, String>>(); });
}

TEST(Tuple, AcceptsAListAndConvertsElements) {
  using T = Tuple<double, bool>;
  T t = Any(List<Any>{1, 0}).cast<T>();
  EXPECT_EQ(std::get<0>(t), 1.0);
  EXPECT_FALSE(std::get<1>(t));
  EXPECT_FALSE(Any(Array<Any>{1, 0}).as<T>().has_value());  // not stored exactly as T
}

TEST(Tuple, TypedFunctionTakesAndReturnsTuples) {
  kffi::Function swap = kffi::Function::FromTyped(
      [](Tuple<int64_t, String> t) {
        return Tuple<String, int64_t>(std::get<1>(t), std::get<0>(t));
      },
      "swap");
  // A Tuple argument is passed as an owned value (it has no object to borrow).
  Any r = swap(Any(Tuple<int64_t, String>(2, "b")));
  auto [s, n] = r.cast<Tuple<String, int64_t>>();
  EXPECT_EQ(s, "b");
  EXPECT_EQ(n, 2);
  EXPECT_EQ(swap(Array<Any>{3, "c"}).cast<Array<Any>>()[1].cast<int64_t>(), 3);
  ExpectError("TypeError",
              "arg0: expected Tuple<int, str>, got Array[size 1] (argument #0 of `swap(arg0: "
              "Tuple<int, str>) -> Tuple<str, int>`)",
              [&] { swap(Array<Any>{3}); });
}

// ---- all three ---------------------------------------------------------------------------

TEST(Optional, VariantAndTupleReleaseWhatTheyHold) {
  kffi::Function fn = kffi::Function::FromTyped([] {}, "noop");
  {
    Any t = Tuple<kffi::Function, int64_t>(fn, 1);
    Any o = Optional<kffi::Function>(fn);
    Any v = Variant<int64_t, kffi::Function>(fn);
    auto back = t.cast<Tuple<kffi::Function, int64_t>>();
    EXPECT_EQ(fn.use_count(), 5u);
  }
  EXPECT_EQ(fn.use_count(), 1u);
}

}  // namespace
