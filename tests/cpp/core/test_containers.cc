// tests/cpp/core/test_containers.cc: Array, List, Map, Dict and Shape: API, casts, errors,
// refcounts.
// SPDX-License-Identifier: Apache-2.0
#include <gtest/gtest.h>
#include <kffi/container/containers.h>
#include <kffi/function.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include "test_util.h"

namespace {

using kffi::Any;
using kffi::Array;
using kffi::Dict;
using kffi::List;
using kffi::Map;
using kffi::Shape;
using kffi::String;

// An element type that counts its live instances, to prove containers release what they hold.
class CountedObj : public kffi::Object {
 public:
  KFFI_DECLARE_FINAL_OBJECT_INFO("test.Counted", CountedObj, kffi::Object)
  explicit CountedObj(int v) : value(v) { ++live; }
  ~CountedObj() { --live; }
  int value;
  inline static std::atomic<int> live{0};
};

class Counted : public kffi::ObjectRef {
 public:
  explicit Counted(int v) : Counted(kffi::make_object<CountedObj>(v)) {}
  KFFI_DEFINE_OBJECT_REF_METHODS(Counted, kffi::ObjectRef, CountedObj)
};

// The cell that follows an object's header, as the C ABI reads it.
template <typename Cell>
const Cell* CellOf(const kffi::ObjectRef& ref) {
  return static_cast<const Cell*>(KFFIObjectGetCellPtr(const_cast<kffi::Object*>(ref.get())));
}

// ---- Array --------------------------------------------------------------------------------

TEST(Array, DefaultIsEmptyNotNull) {
  Array<int> a;
  EXPECT_TRUE(a.defined());
  EXPECT_TRUE(a.empty());
  EXPECT_EQ(a.size(), 0);
  EXPECT_EQ(a.begin(), a.end());
  EXPECT_EQ(Any(a).type_index(), kKFFIArray);
  EXPECT_FALSE(Any(nullptr).as<Array<int>>().has_value());
}

TEST(Array, ConstructsFromListVectorRangeAndFill) {
  Array<int> a{1, 2, 3};
  std::vector<int> v{4, 5};
  Array<int> b(v);
  Array<double> c(v.begin(), v.end());
  Array<String> d(2, String("long string of text"));
  EXPECT_EQ(a.ToVector(), (std::vector<int>{1, 2, 3}));
  EXPECT_EQ(b.ToVector(), v);
  EXPECT_EQ(c.ToVector(), (std::vector<double>{4.0, 5.0}));
  EXPECT_EQ(Any(c[0]).type_index(), kKFFIFloat);
  EXPECT_EQ(d.size(), 2);
  EXPECT_EQ(d[1], "long string of text");
  Array<Any> mixed{1, "x", 2.5, nullptr};
  EXPECT_EQ(mixed[1].cast<std::string>(), "x");
  EXPECT_TRUE(mixed.back().is_none());
}

TEST(Array, ElementsAreStoredInlineAfterTheCell) {
  Array<int> a{1, 2};
  const KFFISeqCell* cell = CellOf<KFFISeqCell>(a);
  EXPECT_EQ(cell->size, 2);
  EXPECT_EQ(cell->data_deleter, nullptr);
  EXPECT_EQ(cell->data, reinterpret_cast<const char*>(cell) + sizeof(KFFISeqCell));
  EXPECT_EQ(static_cast<const KFFIAny*>(cell->data)[1].v_int64, 2);
}

TEST(Array, IndexingAndIteration) {
  Array<int> a{10, 20, 30};
  EXPECT_EQ(a[0], 10);
  EXPECT_EQ(a.at(2), 30);
  EXPECT_EQ(a.front(), 10);
  EXPECT_EQ(a.back(), 30);
  int sum = 0;
  for (int x : a) sum += x;
  EXPECT_EQ(sum, 60);
  EXPECT_EQ(std::vector<int>(a.rbegin(), a.rend()), (std::vector<int>{30, 20, 10}));
  EXPECT_EQ(a.end() - a.begin(), 3);
  EXPECT_EQ(*(a.begin() + 1), 20);
  EXPECT_EQ(a.begin()[2], 30);
}

TEST(Array, OutOfRangeRaisesIndexErrorWithIndexAndSize) {
  Array<int> a{1, 2, 3};
  ExpectError("IndexError", "Array index 3 out of range for size 3", [&] { a.at(3); });
  ExpectError("IndexError", "Array index -1 out of range for size 3", [&] { a[-1]; });
  ExpectError("IndexError", "Array index 7 out of range for size 3", [&] { a.Set(7, 0); });
  Array<int> e;
  ExpectError("IndexError", "front() on an empty Array", [&] { e.front(); });
  ExpectError("IndexError", "back() on an empty Array", [&] { e.back(); });
  ExpectError("IndexError", "pop_back() on an empty Array", [&] { e.pop_back(); });
}

TEST(Array, CopyOnWriteLeavesOriginalUntouched) {
  Array<int> a{1, 2, 3};
  const kffi::Object* storage = a.get();
  Array<int> b = a;
  EXPECT_TRUE(b.same_as(a));
  b.push_back(4);
  EXPECT_FALSE(b.same_as(a));
  EXPECT_EQ(a.get(), storage);
  EXPECT_EQ(a.ToVector(), (std::vector<int>{1, 2, 3}));
  EXPECT_EQ(b.ToVector(), (std::vector<int>{1, 2, 3, 4}));
  // Every mutator copies shared storage first.
  auto check = [&](auto mutate, std::vector<int> expect) {
    Array<int> c = a;
    mutate(c);
    EXPECT_EQ(c.ToVector(), expect);
    EXPECT_EQ(a.ToVector(), (std::vector<int>{1, 2, 3}));
  };
  check([](Array<int>& c) { c.Set(0, 9); }, {9, 2, 3});
  check([](Array<int>& c) { c.insert(c.begin() + 1, 7); }, {1, 7, 2, 3});
  check([](Array<int>& c) { c.erase(c.begin()); }, {2, 3});
  check([](Array<int>& c) { c.pop_back(); }, {1, 2});
  check([](Array<int>& c) { c.clear(); }, {});
  check([](Array<int>& c) { c.resize(1); }, {1});
  check([](Array<int>& c) { c.resize(4); }, {1, 2, 3, 0});
}

TEST(Array, UniqueStorageIsChangedInPlace) {
  Array<int> a;
  a.reserve(8);
  const kffi::Object* storage = a.get();
  for (int i = 0; i < 8; ++i) a.push_back(i);
  a.Set(0, 100);
  a.erase(a.begin() + 1);
  EXPECT_EQ(a.get(), storage);
  EXPECT_EQ(a.size(), 7);
  EXPECT_EQ(a[0], 100);
  a.push_back(8);
  a.push_back(9);  // past the capacity: grows into a new object
  EXPECT_EQ(a.size(), 9);
  EXPECT_EQ(a.back(), 9);
}

TEST(Array, InsertEraseResizeAndClear) {
  Array<int> a{1, 5};
  auto it = a.insert(a.begin() + 1, 3);
  EXPECT_EQ(*it, 3);
  std::vector<int> more{6, 7};
  it = a.insert(a.end(), more.begin(), more.end());
  EXPECT_EQ(*it, 6);
  a.insert(a.begin(), 0);
  EXPECT_EQ(a.ToVector(), (std::vector<int>{0, 1, 3, 5, 6, 7}));
  it = a.erase(a.begin() + 1, a.begin() + 3);
  EXPECT_EQ(*it, 5);
  EXPECT_EQ(a.ToVector(), (std::vector<int>{0, 5, 6, 7}));
  a.pop_back();
  a.resize(5);
  EXPECT_EQ(a.ToVector(), (std::vector<int>{0, 5, 6, 0, 0}));
  ExpectError("IndexError", "Array index 5 out of range for size 5", [&] { a.erase(a.end()); });
  a.clear();
  EXPECT_TRUE(a.empty());
  Array<Any> n;
  n.resize(2);
  EXPECT_TRUE(n[1].is_none());
}

TEST(Array, RoundTripsThroughAny) {
  Array<int> a{1, 2};
  Any x = a;
  EXPECT_EQ(x.GetTypeKey(), "Array");
  EXPECT_TRUE(x.cast<Array<int>>().same_as(a));
  EXPECT_TRUE(x.as<Array<int>>()->same_as(a));
  EXPECT_TRUE(x.cast<Array<Any>>().same_as(a));
  Array<Any> any_view = a;  // a typed array is an Array<Any> without a copy
  EXPECT_TRUE(any_view.same_as(a));
  // C++ int is int32 in signatures; int64_t is plain int.
  EXPECT_EQ(kffi::TypeTraits<Array<int>>::TypeStr(), "Array<int32>");
  EXPECT_EQ(kffi::TypeTraits<Array<int64_t>>::TypeStr(), "Array<int>");
  EXPECT_EQ(kffi::TypeTraits<Array<Any>>::TypeStr(), "Array<Any>");
  EXPECT_EQ(kffi::TypeTraits<Array<Array<String>>>::TypeStr(), "Array<Array<str>>");
}

TEST(Array, StrictCheckScansEveryElement) {
  Any x = Array<Any>{1, "x"};
  EXPECT_FALSE(x.as<Array<int64_t>>().has_value());
  EXPECT_FALSE(x.try_cast<Array<int64_t>>().has_value());
  ExpectError("TypeError", "Cannot convert from type `Array[index 1: str]` to `Array<int>`",
              [&] { x.cast<Array<int64_t>>(); });
  Any nested = Array<Any>{Array<int>{1}, Array<Any>{2, 3.5}};
  ExpectError("TypeError",
              "Cannot convert from type `Array[index 1: Array[index 1: float]]` to "
              "`Array<Array<int>>`",
              [&] { nested.cast<Array<Array<int64_t>>>(); });
  ExpectError("TypeError", "Cannot convert from type `int` to `Array<int>`",
              [&] { Any(1).cast<Array<int64_t>>(); });
}

TEST(Array, TryCastConvertsElementsIntoANewArray) {
  Array<Any> a{1, true};
  Any x = a;
  Array<double> d = x.cast<Array<double>>();
  EXPECT_FALSE(d.same_as(a));
  EXPECT_EQ(d.ToVector(), (std::vector<double>{1.0, 1.0}));
  EXPECT_EQ(a[1].type_index(), kKFFIBool);  // the source is untouched
  EXPECT_EQ(x.cast<Array<int>>().ToVector(), (std::vector<int>{1, 1}));
}

TEST(Array, AcceptsAListByCopying) {
  List<int> l{1, 2};
  Array<int> a = Any(l).cast<Array<int>>();
  EXPECT_FALSE(a.same_as(l));
  l.push_back(3);
  EXPECT_EQ(a.size(), 2);
}

TEST(Array, TypedFunctionChecksElementTypes) {
  kffi::Function f = kffi::Function::FromTyped(
      [](int64_t base, Array<int64_t> a) {
        for (int64_t x : a) base += x;
        return base;
      },
      "f");
  EXPECT_EQ(f(1, Array<int>{2, 3}).cast<int>(), 6);
  EXPECT_EQ(f(0, List<Any>{4, true}).cast<int>(), 5);  // a List converts
  const std::string sig = " (argument #1 of `f(arg0: int, arg1: Array<int>) -> int`)";
  ExpectError("TypeError", "arg1: expected Array<int>, got str" + sig, [&] { f(0, "str"); });
  ExpectError("TypeError", "arg1: expected Array<int>, got Array[index 1: str]" + sig, [&] {
    f(0, Array<Any>{1, "x"});
  });
  kffi::Function g = kffi::Function::FromTyped([](int64_t, Array<int64_t>) {}, "f");
  ExpectError("TypeError",
              "arg1: expected Array<int>, got str (argument #1 of `f(arg0: int, arg1: Array<int>) "
              "-> None`)",
              [&] { g(0, "str"); });
}

TEST(Array, ReleasesElementsWhenItDies) {
  ASSERT_EQ(CountedObj::live, 0);
  {
    Array<Counted> a{Counted(1), Counted(2)};
    Array<Counted> b = a;
    b.push_back(Counted(3));
    b.erase(b.begin());
    EXPECT_EQ(CountedObj::live, 3);
    b.Set(0, Counted(4));
    EXPECT_EQ(b[0]->value, 4);
    Any x = b;
    Array<Any> c = x.cast<Array<Any>>();
    c.clear();
    EXPECT_EQ(a[0].use_count(), 2);  // a's own reference and the temporary's
  }
  EXPECT_EQ(CountedObj::live, 0);
}

// ---- List ---------------------------------------------------------------------------------

TEST(List, CopiesAliasTheSameList) {
  List<int> a{1, 2};
  List<int> b = a;
  b.push_back(3);
  b.Set(0, 10);
  EXPECT_TRUE(a.same_as(b));
  EXPECT_EQ(a.ToVector(), (std::vector<int>{10, 2, 3}));
  List<int> fresh;
  EXPECT_TRUE(fresh.defined());
  EXPECT_FALSE(fresh.same_as(List<int>()));
}

TEST(List, GrowsByDoublingInASeparateBuffer) {
  List<int> l;
  const kffi::Object* obj = l.get();
  std::vector<int64_t> caps;
  for (int i = 0; i < 17; ++i) {
    l.push_back(i);
    if (caps.empty() || caps.back() != l.capacity()) caps.push_back(l.capacity());
  }
  EXPECT_EQ(caps, (std::vector<int64_t>{4, 8, 16, 32}));
  EXPECT_EQ(l.get(), obj);  // the object stays put; only the buffer moves
  EXPECT_NE(CellOf<KFFISeqCell>(l)->data_deleter, nullptr);
  EXPECT_EQ(l[16], 16);
}

TEST(List, ElementApi) {
  List<String> l{"a", "b", "c"};
  l.insert(l.begin() + 1, "a much longer string");
  l.erase(l.begin());
  l.pop_back();
  EXPECT_EQ(l.size(), 2);
  EXPECT_EQ(l.front(), "a much longer string");
  EXPECT_EQ(l.back(), "b");
  ExpectError("IndexError", "List index 2 out of range for size 2", [&] { l.at(2); });
  l.resize(3);
  EXPECT_EQ(l[2], "");
  l.clear();
  EXPECT_TRUE(l.empty());
  ExpectError("IndexError", "pop_back() on an empty List", [&] { l.pop_back(); });
  List<int> filled(3, 7);
  filled.reserve(10);
  EXPECT_EQ(filled.capacity(), 10);
  std::vector<int> more{1, 2};
  filled.insert(filled.begin() + 1, more.begin(), more.end());
  EXPECT_EQ(filled.ToVector(), (std::vector<int>{7, 1, 2, 7, 7}));
  EXPECT_EQ(*filled.rbegin(), 7);
}

TEST(List, CastsKeepIdentityOrCopy) {
  List<int> l{1, 2};
  Any x = l;
  EXPECT_EQ(x.type_index(), kKFFIList);
  EXPECT_TRUE(x.cast<List<int>>().same_as(l));
  List<double> d = x.cast<List<double>>();  // needs conversion: a new list
  EXPECT_FALSE(d.same_as(l));
  List<int> from_array = Any(Array<int>{5}).cast<List<int>>();
  EXPECT_EQ(from_array[0], 5);
  EXPECT_EQ(kffi::TypeTraits<List<int64_t>>::TypeStr(), "List<int>");
  ExpectError("TypeError", "Cannot convert from type `List[index 1: str]` to `List<int>`", [&] {
    Any(List<Any>{1, "x"}).cast<List<int64_t>>();
  });
}

TEST(List, ReadingThroughAMismatchedAliasRaises) {
  List<Any> untyped;
  List<int64_t> ints = Any(untyped).cast<List<int64_t>>();  // empty: strict, so an alias
  untyped.push_back("x");
  ExpectError("TypeError", "Cannot convert from type `str` to `int`", [&] { ints[0]; });
}

TEST(List, ReleasesElementsWhenItDies) {
  ASSERT_EQ(CountedObj::live, 0);
  {
    List<Counted> l;
    for (int i = 0; i < 10; ++i) l.push_back(Counted(i));
    l.erase(l.begin(), l.begin() + 5);
    EXPECT_EQ(CountedObj::live, 5);
    List<Counted> alias = l;
    l.pop_back();
    EXPECT_EQ(CountedObj::live, 4);
  }
  EXPECT_EQ(CountedObj::live, 0);
}

// ---- Map ----------------------------------------------------------------------------------

TEST(Map, DefaultIsEmptyNotNull) {
  Map<String, int> m;
  EXPECT_TRUE(m.defined());
  EXPECT_TRUE(m.empty());
  EXPECT_EQ(m.begin(), m.end());
  EXPECT_EQ(m.count("a"), 0);
  EXPECT_EQ(Any(m).type_index(), kKFFIMap);
}

TEST(Map, ShortAndLongStringKeysCompareByContent) {
  const std::string long_key(40, 'k');
  Map<String, int> m{{"a", 1}, {"abcdefg", 7}, {"abcdefgh", 8}, {String(long_key), 40}};
  EXPECT_EQ(m.size(), 4);
  EXPECT_EQ(m.at("a"), 1);
  EXPECT_EQ(m.at("abcdefg"), 7);            // 7 bytes: stored inline
  EXPECT_EQ(m.at(String("abcdefgh")), 8);   // 8 bytes: a Str object
  EXPECT_EQ(m[std::string(long_key)], 40);  // a different object with the same bytes
  Map<Any, int> untyped{{"abcdefgh", 8}, {Any(String(long_key)), 40}};
  EXPECT_EQ(untyped.at("abcdefgh"), 8);  // looked up through a borrowed const char*
  EXPECT_EQ(untyped.count(long_key), 1);
  EXPECT_EQ(untyped.count("abcdefg"), 0);
}

TEST(Map, MissingKeyRaisesKeyErrorNamingIt) {
  Map<Any, int> m{{1, 1}};
  ExpectError("KeyError", "Key 'zz' not found in Map", [&] { m.at("zz"); });
  ExpectError("KeyError", "Key 42 not found in Map", [&] { m[42]; });
  ExpectError("KeyError", "Key None not found in Map", [&] { m.at(nullptr); });
  EXPECT_FALSE(m.Get(2).has_value());
  EXPECT_EQ(m.Get(1), 1);
  EXPECT_EQ(m.find(2), m.end());
  EXPECT_EQ(m.find(1)->second, 1);
}

TEST(Map, SetKeepsInsertionOrderAndOverwritesInPlace) {
  Map<String, int> m;
  m.Set("b", 1);
  m.Set("a", 2);
  m.Set("c", 3);
  m.Set("a", 20);
  std::vector<std::string> keys;
  std::vector<int> values;
  for (auto [k, v] : m) {
    keys.push_back(k);
    values.push_back(v);
  }
  EXPECT_EQ(keys, (std::vector<std::string>{"b", "a", "c"}));
  EXPECT_EQ(values, (std::vector<int>{1, 20, 3}));
  EXPECT_EQ(m.keys().ToVector(), (std::vector<String>{"b", "a", "c"}));
  EXPECT_EQ(m.values().ToVector(), (std::vector<int>{1, 20, 3}));
  auto it = m.begin();
  EXPECT_EQ(it.key(), "b");
  EXPECT_EQ((it++)->first, "b");
  EXPECT_EQ(it->second, 20);
  Map<> untyped = m;  // a typed map is a Map<Any, Any> without a copy
  EXPECT_TRUE(untyped.same_as(m));
}

TEST(Map, CopyOnWriteLeavesOriginalUntouched) {
  Map<String, int> a{{"x", 1}, {"y", 2}};
  Map<String, int> b = a;
  b.Set("z", 3);
  EXPECT_FALSE(a.same_as(b));
  EXPECT_EQ(a.size(), 2);
  Map<String, int> c = a;
  EXPECT_EQ(c.erase("missing"), 0);
  EXPECT_TRUE(c.same_as(a));  // nothing removed: nothing copied
  EXPECT_EQ(c.erase("x"), 1);
  Map<String, int> d = a;
  d.clear();
  EXPECT_EQ(a.at("x"), 1);
  EXPECT_TRUE(d.empty());
  const kffi::Object* storage = b.get();
  b.Set("w", 4);  // unique: changed in place
  EXPECT_EQ(b.get(), storage);
}

TEST(Map, MatchesStdUnorderedMapUnderRandomChanges) {
  std::mt19937 rng(7);
  Map<int64_t, int64_t> m;
  std::unordered_map<int64_t, int64_t> ref;
  std::vector<int64_t> order;
  for (int step = 0; step < 5000; ++step) {
    int64_t k = rng() % 300;
    if (rng() % 3 == 0) {
      EXPECT_EQ(m.erase(k), static_cast<int64_t>(ref.erase(k)));
      order.erase(std::remove(order.begin(), order.end(), k), order.end());
    } else {
      if (!ref.count(k)) order.push_back(k);
      m.Set(k, step);
      ref[k] = step;
    }
  }
  ASSERT_EQ(m.size(), static_cast<int64_t>(ref.size()));
  for (auto& kv : ref) EXPECT_EQ(m.at(kv.first), kv.second);
  EXPECT_EQ(m.keys().ToVector(), order);
}

TEST(Map, AnyKeysOfMixedKinds) {
  Counted obj(1);
  Map<Any, Any> m{{1, "int"}, {true, "bool"}, {1.5, "float"}, {nullptr, "none"}, {obj, "obj"}};
  EXPECT_EQ(m.size(), 5);  // 1 and true are different keys
  EXPECT_EQ(m.at(true).cast<std::string>(), "bool");
  EXPECT_EQ(m.at(1).cast<std::string>(), "int");
  EXPECT_EQ(m.at(obj).cast<std::string>(), "obj");
  EXPECT_EQ(m.count(Counted(1)), 0);  // other objects compare by identity
  EXPECT_EQ(m.at(nullptr).cast<std::string>(), "none");
}

TEST(Map, CastsCheckKeysAndValues) {
  using StrIntMap = Map<String, int64_t>;
  StrIntMap m{{"a", 1}};
  Any x = m;
  EXPECT_TRUE(x.cast<StrIntMap>().same_as(m));
  EXPECT_TRUE(x.cast<Map<>>().same_as(m));
  Map<String, double> d = x.cast<Map<String, double>>();
  EXPECT_FALSE(d.same_as(m));
  EXPECT_EQ(d.at("a"), 1.0);
  EXPECT_EQ(kffi::TypeTraits<StrIntMap>::TypeStr(), "Map<str, int>");
  Any bad_value = Map<Any, Any>{{"a", 1}, {"b", "x"}};
  ExpectError("TypeError", "Cannot convert from type `Map['b': str]` to `Map<str, int>`",
              [&] { bad_value.cast<StrIntMap>(); });
  Any bad_key = Map<Any, Any>{{2, 1}};
  ExpectError("TypeError", "Cannot convert from type `Map[key 2: int]` to `Map<str, int>`",
              [&] { bad_key.cast<StrIntMap>(); });
  StrIntMap from_dict = Any(Dict<String, int>{{"q", 5}}).cast<StrIntMap>();
  EXPECT_EQ(from_dict.at("q"), 5);
  kffi::Function f = kffi::Function::FromTyped([](StrIntMap m) { return m.size(); }, "f");
  EXPECT_EQ(f(Dict<Any, Any>{{"k", 1}}).cast<int>(), 1);
  ExpectError("TypeError",
              "arg0: expected Map<str, int>, got Map['b': str] (argument #0 of `f(arg0: Map<str, "
              "int>) -> int`)",
              [&] { f(bad_value); });
}

TEST(Map, ReleasesKeysAndValues) {
  ASSERT_EQ(CountedObj::live, 0);
  {
    Map<Counted, Counted> m;
    Counted k1(1), k2(2);
    m.Set(k1, Counted(10));
    m.Set(k2, Counted(20));
    m.Set(k1, Counted(11));  // the old value goes at once
    EXPECT_EQ(CountedObj::live, 4);
    Map<Counted, Counted> copy = m;
    copy.erase(k2);
    EXPECT_EQ(CountedObj::live, 4);  // m still holds k2's pair
    m.erase(k2);
    EXPECT_EQ(m.at(k1)->value, 11);
    EXPECT_EQ(CountedObj::live, 3);
    for (int i = 0; i < 50; ++i) m.Set(Counted(100 + i), Counted(i));  // forces rebuilds
    EXPECT_EQ(CountedObj::live, 103);
  }
  EXPECT_EQ(CountedObj::live, 0);
}

// ---- Dict ---------------------------------------------------------------------------------

TEST(Dict, CopiesAliasTheSameDict) {
  Dict<String, int> a{{"x", 1}};
  Dict<String, int> b = a;
  b.Set("y", 2);
  b.Set("x", 10);
  EXPECT_TRUE(a.same_as(b));
  EXPECT_EQ(a.at("x"), 10);
  EXPECT_EQ(a.size(), 2);
  EXPECT_EQ(a.erase("x"), 1);
  EXPECT_EQ(b.count("x"), 0);
  b.clear();
  EXPECT_TRUE(a.empty());
  ExpectError("KeyError", "Key 'x' not found in Dict", [&] { a.at("x"); });
  EXPECT_FALSE(Dict<>().same_as(Dict<>()));
}

TEST(Dict, CastsKeepIdentityOrCopy) {
  Dict<String, int> d{{"a", 1}, {"long key of a dict", 2}};
  Any x = d;
  EXPECT_EQ(x.type_index(), kKFFIDict);
  using StrIntDict = Dict<String, int64_t>;
  EXPECT_TRUE(x.cast<StrIntDict>().same_as(d));
  Dict<String, int> from_map = Any(Map<String, int>{{"m", 3}}).cast<Dict<String, int>>();
  EXPECT_EQ(from_map.at("m"), 3);
  EXPECT_EQ(kffi::TypeTraits<StrIntDict>::TypeStr(), "Dict<str, int>");
  EXPECT_EQ(d.Get("long key of a dict"), 2);
  std::map<std::string, int> sorted{{"b", 2}, {"a", 1}};
  Dict<String, int> from_std(sorted.begin(), sorted.end());
  EXPECT_EQ(from_std.keys().ToVector(), (std::vector<String>{"a", "b"}));
}

TEST(Dict, ReleasesEntriesWhenItDies) {
  ASSERT_EQ(CountedObj::live, 0);
  {
    Dict<int, Counted> d;
    for (int i = 0; i < 20; ++i) d.Set(i, Counted(i));
    for (int i = 0; i < 20; i += 2) d.erase(i);
    EXPECT_EQ(CountedObj::live, 10);
    Dict<int, Counted> alias = d;
    alias.clear();
    EXPECT_EQ(CountedObj::live, 0);
    d.Set(1, Counted(1));
  }
  EXPECT_EQ(CountedObj::live, 0);
}

// ---- Shape --------------------------------------------------------------------------------

TEST(Shape, ConstructionAndAccess) {
  const int64_t dims[] = {2, 3, 4};
  Shape a{2, 3, 4};
  Shape b(std::vector<int64_t>{2, 3, 4});
  Shape c(dims, 3);
  std::vector<int> ints{2, 3, 4};
  Shape d(ints.begin(), ints.end());
  EXPECT_TRUE(a == b && b == c && c == d);
  EXPECT_NE(a, Shape({2, 3}));
  EXPECT_EQ(a.size(), 3);
  EXPECT_EQ(a.ndim(), 3);
  EXPECT_EQ(a[1], 3);
  EXPECT_EQ(a.at(2), 4);
  EXPECT_EQ(a.front(), 2);
  EXPECT_EQ(a.back(), 4);
  EXPECT_EQ(a.Product(), 24);
  std::vector<int64_t> v = a;
  EXPECT_EQ(v, (std::vector<int64_t>{2, 3, 4}));
  EXPECT_EQ(std::vector<int64_t>(a.begin(), a.end()), v);
  ExpectError("IndexError", "Shape index 3 out of range for size 3", [&] { a.at(3); });
  Shape scalar;
  EXPECT_TRUE(scalar.empty());
  EXPECT_EQ(scalar.Product(), 1);
  EXPECT_EQ(KFFIToErrorString(a), "(2, 3, 4)");
  // One allocation: the values follow the cell.
  const KFFIShapeCell* cell = CellOf<KFFIShapeCell>(a);
  EXPECT_EQ(reinterpret_cast<const char*>(cell->data),
            reinterpret_cast<const char*>(cell) + sizeof(KFFIShapeCell));
}

TEST(Shape, CastsFromShapeOrArrayOfInts) {
  Shape s{2, 3};
  Any x = s;
  EXPECT_EQ(x.GetTypeKey(), "Shape");
  EXPECT_TRUE(x.cast<Shape>().same_as(s));
  EXPECT_EQ(Any(Array<int>{7, 8}).cast<Shape>(), Shape({7, 8}));
  EXPECT_EQ(Any(List<Any>{1, true}).cast<Shape>(), Shape({1, 1}));
  ExpectError("TypeError", "Cannot convert from type `Array[index 1: str]` to `Shape`", [&] {
    Any(Array<Any>{2, "x"}).cast<Shape>();
  });
  kffi::Function numel = kffi::Function::FromTyped([](Shape s) { return s.Product(); }, "numel");
  EXPECT_EQ(numel(Array<int>{2, 5}).cast<int64_t>(), 10);
  ExpectError("TypeError",
              "arg0: expected Shape, got float (argument #0 of `numel(arg0: Shape) -> int`)",
              [&] { numel(1.5); });
}

}  // namespace
