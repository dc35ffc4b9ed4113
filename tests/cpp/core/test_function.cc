// tests/cpp/core/test_function.cc: Function (typed, packed, extern C), TypedFunction, argument
// checks and their messages, the global registry, static registration and the testing.* library.
// SPDX-License-Identifier: Apache-2.0
#include <gtest/gtest.h>
#include <kffi/kffi.h>

#include <algorithm>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "test_util.h"

namespace {

using kffi::Any;
using kffi::AnyView;
using kffi::Function;
using kffi::PackedArgs;
using kffi::String;
using kffi::TypedFunction;

KFFI_STATIC_INIT_BLOCK() {
  kffi::GlobalDef()
      .def("test.function.static_triple", [](int64_t x) { return 3 * x; })
      .def("test.function.static_count", [](PackedArgs args, Any* rv) { *rv = args.size(); });
}

int64_t FreeSubtract(int64_t a, int64_t b) { return a - b; }

TEST(Function, TypedLambdaConvertsArgumentsAndResult) {
  Function add = [](int64_t a, int64_t b) { return a + b; };
  Any r = add(2, 3);
  EXPECT_EQ(r.type_index(), kKFFIInt);
  EXPECT_EQ(r.cast<int64_t>(), 5);
  EXPECT_EQ(add->type_index(), kKFFIFunction);
  Function describe = [](const String& s, double x, bool flag, DLDataType t) {
    return std::string(s) + ":" + std::to_string(static_cast<int>(x)) + (flag ? ":y:" : ":n:") +
           kffi::details::DataTypeToString(t);
  };
  EXPECT_EQ(describe("name", 2.0, true, DLDataType{kDLInt, 8, 1}).cast<String>(), "name:2:y:int8");
  // Allowed conversions: int -> float, int -> bool, str -> dtype, RawStr -> String.
  EXPECT_EQ(describe(std::string("s"), 7, 0, "float16").cast<std::string>(), "s:7:n:float16");
}

TEST(Function, PackedLambdaSeesTheRawArguments) {
  Function f = [](PackedArgs args, Any* rv) {
    std::string kinds;
    for (int32_t i = 0; i < args.size(); ++i) kinds += args[i].GetTypeKey() + ",";
    *rv = kinds;
  };
  EXPECT_EQ(f(1, 2.5, "s", true, nullptr, DLDevice{kDLCPU, 0}).cast<std::string>(),
            "int,float,str,bool,None,Device,");
  EXPECT_EQ(f().cast<std::string>(), "");
}

TEST(Function, FunctionPointersAndMutableLambdasAreTyped) {
  Function sub = Function::FromTyped(&FreeSubtract, "sub");
  EXPECT_EQ(sub(10, 4).cast<int>(), 6);
  Function counter = [n = 0]() mutable { return ++n; };
  counter();
  counter();
  EXPECT_EQ(counter().cast<int>(), 3);
}

TEST(Function, VoidResultIsNoneAndObjectsRoundTrip) {
  int calls = 0;
  Function touch = [&calls](int64_t) { ++calls; };
  EXPECT_TRUE(touch(1).is_none());
  EXPECT_EQ(calls, 1);
  Function identity = [](Function g) { return g; };
  Any back = identity(touch);
  EXPECT_TRUE(back.cast<Function>().same_as(touch));
  Function echo_any = [](Any a) { return a; };
  EXPECT_EQ(echo_any("a string long enough").cast<String>(), "a string long enough");
  Function view_kind = [](AnyView v) { return v.type_index(); };
  EXPECT_EQ(view_kind("raw").cast<int32_t>(), kKFFIRawStr);
}

TEST(Function, RejectsWrongArgumentType) {
  const int line = __LINE__ + 1;  // the next statement must stay on one line
  Function scale = Function::FromTyped([](int64_t, double) {}, "scale");
  kffi::Error e = CatchError([&] { scale(1, "x"); });
  EXPECT_EQ(e.kind(), "TypeError");
  EXPECT_EQ(
      e.message(),
      "arg1: expected float, got str (argument #1 of `scale(arg0: int, arg1: float) -> None`)");
  EXPECT_EQ(e.backtrace(),
            "  File \"" __FILE__ "\", line " + std::to_string(line) + ", in scale [ffi boundary]");
  EXPECT_EQ(
      CatchError([&] { scale(1.5, 2.0); }).message(),
      "arg0: expected int, got float (argument #0 of `scale(arg0: int, arg1: float) -> None`)");
}

// Arguments are unpacked left to right on every compiler (GCC evaluates a call's arguments right
// to left), so with several bad arguments the first one is reported.
TEST(Function, ReportsTheFirstBadArgument) {
  // axpy: y = a * x + y reads x and writes y.
  Function axpy =
      Function::FromTyped([](kffi::ConstTensorView, kffi::TensorView, double, int64_t) {}, "axpy");
  const std::string sig = "`axpy(arg0: Tensor, arg1: Tensor(mut), arg2: float, arg3: int) -> None`";
  EXPECT_EQ(CatchError([&] { axpy("a", "b", "c", 1.0); }).message(),
            "arg0: expected Tensor, got str (argument #0 of " + sig + ")");
  // The fast path fails on argument 2; the slow path still starts from the left.
  std::vector<int64_t> shape{2};
  DLTensor raw{nullptr, DLDevice{kDLCPU, 0}, 1, kffi::dtypes::float32, shape.data(), nullptr, 0};
  EXPECT_EQ(CatchError([&] { axpy(&raw, &raw, "c", 2.5); }).message(),
            "arg2: expected float, got str (argument #2 of " + sig + ")");
  // A conversion (int -> float) before a bad argument is applied, not reported.
  EXPECT_EQ(CatchError([&] { axpy(&raw, &raw, 3, "d"); }).message(),
            "arg3: expected int, got str (argument #3 of " + sig + ")");
  // The slow path calls the function with the converted values.
  Function mix = Function::FromTyped(
      [](double a, String s, int64_t b) { return a + static_cast<double>(s.size() + b); }, "mix");
  EXPECT_EQ(mix(1, "a string longer than seven", true).cast<double>(), 1.0 + 26 + 1);
  EXPECT_EQ(CatchError([&] { mix("x", 2, 3.5); }).message(),
            "arg0: expected float, got str (argument #0 of `mix(arg0: float, arg1: str, arg2: int) "
            "-> float`)");
}

TEST(Function, RejectsWrongArgumentCount) {
  Function scale = Function::FromTyped([](int64_t, double) {}, "scale");
  kffi::Error e = CatchError([&] { scale(1, 2.0, 3); });
  EXPECT_EQ(e.kind(), "TypeError");
  EXPECT_EQ(e.message(),
            "scale: expected 2 arguments, got 3 (`scale(arg0: int, arg1: float) -> None`)");
  EXPECT_EQ(CatchError([&] { scale(); }).message(),
            "scale: expected 2 arguments, got 0 (`scale(arg0: int, arg1: float) -> None`)");
}

TEST(Function, RejectsOutOfRangeAndUnparsableArguments) {
  Function narrow = Function::FromTyped([](int8_t x) { return x; }, "narrow");
  EXPECT_EQ(narrow(127).cast<int>(), 127);
  EXPECT_EQ(CatchError([&] { narrow(300); }).message(),
            "arg0: expected int8, got int (300 is out of range for int8) (argument #0 of "
            "`narrow(arg0: int8) -> int8`)");
  Function dtype = Function::FromTyped([](DLDataType t) { return t; }, "dt");
  EXPECT_EQ(dtype("bfloat16").cast<DLDataType>(), (DLDataType{kDLBfloat, 16, 1}));
  kffi::Error e = CatchError([&] { dtype("float32z"); });
  EXPECT_EQ(e.kind(), "ValueError");
  EXPECT_EQ(e.message(),
            "arg0: Cannot parse data type from string `float32z` (argument #0 of `dt(arg0: dtype) "
            "-> dtype`)");
  Function mixed = Function::FromTyped([](const String&, bool, float, Function) {}, "mixed");
  EXPECT_EQ(CatchError([&] { mixed("s", 1.0, 1.0, nullptr); }).message(),
            "arg1: expected bool, got float (argument #1 of `mixed(arg0: str, arg1: bool, arg2: "
            "float32, arg3: Function) -> None`)");
  EXPECT_EQ(CatchError([&] { mixed("s", true, 1.0, 5); }).message(),
            "arg3: expected Function, got int (argument #3 of `mixed(arg0: str, arg1: bool, arg2: "
            "float32, arg3: Function) -> None`)");
}

TEST(Function, NullFunctionCallIsValueError) {
  Function null_fn;
  EXPECT_FALSE(null_fn.defined());
  kffi::Error e = CatchError([&] { null_fn(1); });
  EXPECT_EQ(e.kind(), "ValueError");
  EXPECT_EQ(e.message(), "Cannot call a null Function");
  TypedFunction<int(int)> null_typed;
  EXPECT_EQ(CatchError([&] { null_typed(1); }).message(), "Cannot call a null Function");
}

// A C safe-call that adds self (an integer in disguise) to its one int argument.
int AddSelf(void* self, const KFFIAny* args, int32_t num_args, KFFIAny* result) {
  if (num_args != 1 || args[0].type_index != kKFFIInt) {
    KFFIErrorSetRaisedFromCStr("TypeError", "AddSelf takes one int");
    return -1;
  }
  result->type_index = kKFFIInt;
  result->v_int64 = args[0].v_int64 + reinterpret_cast<intptr_t>(self);
  return 0;
}
int g_extern_deleted = 0;
void* g_extern_deleted_self = nullptr;
void CountExternDelete(void* self) {
  ++g_extern_deleted;
  g_extern_deleted_self = self;
}

TEST(Function, FromExternCCallsTheSafeCallAndItsDeleterOnce) {
  g_extern_deleted = 0;
  void* self = reinterpret_cast<void*>(intptr_t{100});
  {
    Function f = Function::FromExternC(self, &AddSelf, &CountExternDelete);
    Function copy = f;
    EXPECT_EQ(f(5).cast<int64_t>(), 105);
    kffi::Error e = CatchError([&] { f("no"); });
    EXPECT_EQ(e.kind(), "TypeError");
    EXPECT_EQ(e.message(), "AddSelf takes one int");
    EXPECT_EQ(g_extern_deleted, 0);
  }
  EXPECT_EQ(g_extern_deleted, 1);
  EXPECT_EQ(g_extern_deleted_self, self);
  kffi::Error e = CatchError([] { Function::FromExternC(nullptr, nullptr); });
  EXPECT_EQ(e.kind(), "ValueError");
  EXPECT_EQ(e.message(), "KFFIFunctionCreate: safe_call is NULL");
}

TEST(Function, CallableStateDiesWithTheLastReference) {
  auto state = std::make_shared<int>(7);
  std::weak_ptr<int> watch = state;
  {
    Function f = [state = std::move(state)](int64_t x) { return *state + x; };
    Any held = f;
    EXPECT_EQ(f(1).cast<int>(), 8);
    EXPECT_EQ(f.use_count(), 2u);
  }
  EXPECT_TRUE(watch.expired());
}

// A user subclass of FunctionObj with its own type key: a Function all the same.
class CountArgsFunctionObj : public kffi::FunctionObj {
 public:
  KFFI_DECLARE_OBJECT_INFO("test.function.CountArgs", CountArgsFunctionObj, kffi::FunctionObj)
  CountArgsFunctionObj() { safe_call = &Call; }
  static int Call(void*, const KFFIAny*, int32_t num_args, KFFIAny* result) {
    result->type_index = kKFFIInt;
    result->v_int64 = num_args;
    return 0;
  }
};

TEST(Function, SubclassesOfFunctionObjConvertAsFunctions) {
  Function f(kffi::make_object<CountArgsFunctionObj>());
  EXPECT_NE(f->type_index(), kKFFIFunction);
  EXPECT_EQ(f(1, 2, 3).cast<int>(), 3);
  EXPECT_TRUE(Any(f).cast<Function>().same_as(f));
  Function apply = Function::GetGlobalRequired("testing.apply");
  EXPECT_EQ(apply(f, "a", "b").cast<int>(), 2);
  Function identity = [](Function g) { return g; };
  EXPECT_TRUE(identity(f).cast<Function>().same_as(f));
  TypedFunction<int(int)> typed = Any(f).cast<TypedFunction<int(int)>>();
  EXPECT_EQ(typed(7), 1);
}

TEST(Function, CallsThroughTheCApi) {
  Function add = [](int64_t a, int64_t b) { return a + b; };
  KFFIObjectHandle h = kffi::details::ObjectUnsafe::GetHandle(kffi::details::ObjectRefData(add));
  KFFIAny args[2] = {};
  args[0].type_index = args[1].type_index = kKFFIInt;
  args[0].v_int64 = 40;
  args[1].v_int64 = 2;
  KFFIAny result{};
  ASSERT_EQ(KFFIFunctionCall(h, args, 2, &result), 0);
  EXPECT_EQ(result.type_index, kKFFIInt);
  EXPECT_EQ(result.v_int64, 42);
  String s("not a function at all");
  EXPECT_EQ(KFFIFunctionCall(s.raw().v_obj, args, 2, &result), -1);
  KFFIObjectHandle err = nullptr;
  KFFIErrorMoveFromRaised(&err);
  kffi::Error e(kffi::details::ObjectUnsafe::FromOwnedHandle<kffi::Object>(err));
  EXPECT_EQ(e.kind(), "TypeError");
  EXPECT_EQ(e.message(), "KFFIFunctionCall: expected a `ffi.Function`, got `ffi.Str`");
}

TEST(Function, ThreeIntCallReturnsCorrectlyAMillionTimes) {
  Function sum3 = [](int64_t a, int64_t b, int64_t c) { return a + b + c; };
  int64_t wrong = 0;
  for (int64_t i = 0; i < 1000000; ++i) {
    if (sum3(i, 1, -2).cast<int64_t>() != i - 1) ++wrong;
  }
  EXPECT_EQ(wrong, 0);
}

TEST(TypedFunction, WrapsALambdaAndConvertsTheResult) {
  TypedFunction<int64_t(int64_t, int64_t)> mul = [](int64_t a, int64_t b) { return a * b; };
  EXPECT_EQ(mul(6, 7), 42);
  TypedFunction<String(const String&)> shout = [](const String& s) { return s + "!"; };
  EXPECT_EQ(shout("hey"), "hey!");
  int seen = 0;
  TypedFunction<void(int)> record = [&seen](int x) { seen = x; };
  record(9);
  EXPECT_EQ(seen, 9);
  EXPECT_TRUE(mul.defined());
}

TEST(TypedFunction, WrapsAMutableLambdaAndRecordsWhereItWasMade) {
  TypedFunction<int()> counter = [n = 0]() mutable { return ++n; };
  counter();
  EXPECT_EQ(counter(), 2);
  const int line = __LINE__ + 1;  // the next statement must stay on one line
  TypedFunction<int(int)> check = [](int x) -> int { KFFI_THROW(ValueError) << x; };
  kffi::Error e = CatchError([&] { check(3); });
  EXPECT_EQ(e.message(), "3");
  const std::string frame =
      "  File \"" __FILE__ "\", line " + std::to_string(line) + ", in <lambda>";
  EXPECT_NE(e.backtrace().find(frame), std::string::npos) << e.backtrace();
}

TEST(TypedFunction, WrapsAnExistingFunction) {
  TypedFunction<int64_t(int64_t)> add_one = Function::GetGlobalRequired("testing.add_one");
  EXPECT_EQ(add_one(41), 42);
  TypedFunction<String(int64_t)> wrong = Function::GetGlobalRequired("testing.add_one");
  kffi::Error e = CatchError([&] { wrong(1); });
  EXPECT_EQ(e.kind(), "TypeError");
  EXPECT_EQ(e.message(), "Cannot convert from type `int` to `str`");
}

TEST(TypedFunction, ConvertsToFunctionAndThroughAny) {
  TypedFunction<int64_t(int64_t)> twice = [](int64_t x) { return 2 * x; };
  Function plain = twice;
  EXPECT_EQ(plain(4).cast<int>(), 8);
  Any a = twice;
  EXPECT_EQ(a.type_index(), kKFFIFunction);
  EXPECT_EQ(a.cast<TypedFunction<int64_t(int64_t)>>()(5), 10);
  EXPECT_EQ(CatchError([] { Any(1).cast<TypedFunction<int64_t(int64_t)>>(); }).message(),
            "Cannot convert from type `int` to `Callable(arg0: int) -> int`");
}

TEST(GlobalFunction, GetGlobalOfAnUnknownNameIsEmpty) {
  EXPECT_FALSE(Function::GetGlobal("test.function.no_such").has_value());
  kffi::Error e = CatchError([] { Function::GetGlobalRequired("test.function.no_such"); });
  EXPECT_EQ(e.kind(), "KeyError");
  EXPECT_EQ(e.message(), "Global function `test.function.no_such` is not registered");
}

TEST(GlobalFunction, SetGlobalRefusesATakenNameUnlessOverriding) {
  const char* name = "test.function.override_me";
  Function one = [] { return 1; };
  Function two = [] { return 2; };
  Function::SetGlobal(name, one);
  kffi::Error e = CatchError([&] { Function::SetGlobal(name, two); });
  EXPECT_EQ(e.kind(), "KeyError");
  EXPECT_EQ(e.message(), "Global function `test.function.override_me` is already registered");
  EXPECT_EQ(Function::GetGlobalRequired(name)().cast<int>(), 1);
  Function::SetGlobal(name, two, /*allow_override=*/true);
  EXPECT_EQ(Function::GetGlobalRequired(name)().cast<int>(), 2);
  EXPECT_EQ(one.use_count(), 1u);  // the registry released the replaced function
  EXPECT_TRUE(Function::RemoveGlobal(name));
  EXPECT_FALSE(Function::RemoveGlobal(name));
  EXPECT_FALSE(Function::GetGlobal(name).has_value());
  EXPECT_EQ(two.use_count(), 1u);
}

TEST(GlobalFunction, SetGlobalRejectsANullFunction) {
  kffi::Error e = CatchError([] { Function::SetGlobal("test.function.null", Function()); });
  EXPECT_EQ(e.kind(), "ValueError");
  EXPECT_EQ(e.message(), "KFFIFunctionSetGlobal: func is NULL");
  EXPECT_FALSE(Function::GetGlobal("test.function.null").has_value());
}

TEST(GlobalFunction, RegistryKeepsTheFunctionAlive) {
  auto state = std::make_shared<int>(11);
  std::weak_ptr<int> watch = state;
  Function::SetGlobal("test.function.kept", Function([s = std::move(state)] { return *s; }));
  EXPECT_FALSE(watch.expired());
  EXPECT_EQ(Function::GetGlobalRequired("test.function.kept")().cast<int>(), 11);
  EXPECT_TRUE(Function::RemoveGlobal("test.function.kept"));
  EXPECT_TRUE(watch.expired());
}

TEST(GlobalFunction, ListGlobalNamesIsSortedAndComplete) {
  std::vector<std::string> names = Function::ListGlobalNames<std::vector<std::string>>();
  EXPECT_TRUE(std::is_sorted(names.begin(), names.end()));
  for (const char* expected :
       {"testing.echo", "testing.nop", "testing.add_one", "testing.raise_error", "testing.apply",
        "testing.count_args", "test.function.static_triple", "test.function.static_count"}) {
    EXPECT_NE(std::find(names.begin(), names.end(), expected), names.end()) << expected;
  }
}

TEST(GlobalFunction, StaticInitBlockRegisteredAtLoad) {
  EXPECT_EQ(Function::GetGlobalRequired("test.function.static_triple")(14).cast<int>(), 42);
  EXPECT_EQ(Function::GetGlobalRequired("test.function.static_count")(1, 2).cast<int>(), 2);
}

TEST(FunctionTestingLib, EchoNopAddOneAndCountArgs) {
  Function echo = Function::GetGlobalRequired("testing.echo");
  EXPECT_EQ(echo(5).cast<int>(), 5);
  EXPECT_EQ(echo("tiny").cast<String>(), "tiny");
  EXPECT_EQ(echo(std::string("a borrowed std::string")).cast<String>(), "a borrowed std::string");
  EXPECT_EQ(echo(DLDevice{kDLCUDA, 2}).cast<DLDevice>(), (DLDevice{kDLCUDA, 2}));
  EXPECT_TRUE(echo(nullptr).is_none());
  EXPECT_TRUE(echo(echo).cast<Function>().same_as(echo));
  EXPECT_TRUE(Function::GetGlobalRequired("testing.nop")(1, "two", 3.0).is_none());
  Function add_one = Function::GetGlobalRequired("testing.add_one");
  EXPECT_EQ(add_one(41).cast<int64_t>(), 42);
  EXPECT_EQ(CatchError([&] { add_one("x"); }).message(),
            "arg0: expected int, got str (argument #0 of `testing.add_one(arg0: int) -> int`)");
  Function count = Function::GetGlobalRequired("testing.count_args");
  EXPECT_EQ(count().cast<int>(), 0);
  EXPECT_EQ(count(1, "a", 2.0).cast<int>(), 3);
}

TEST(FunctionTestingLib, ApplyCallsBackIntoACppLambda) {
  Function apply = Function::GetGlobalRequired("testing.apply");
  int calls = 0;
  Function mul = [&calls](int64_t a, int64_t b) {
    ++calls;
    return a * b;
  };
  EXPECT_EQ(apply(mul, 6, 7).cast<int64_t>(), 42);
  EXPECT_EQ(apply(apply, mul, 3, 5).cast<int64_t>(), 15);  // apply nested in apply
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(CatchError([&] { apply(); }).message(),
            "testing.apply expects a function and its arguments");
  EXPECT_EQ(CatchError([&] { apply(1); }).message(),
            "Cannot convert from type `int` to `Function`");
  EXPECT_EQ(CatchError([&] { apply(nullptr); }).message(), "Cannot call a null Function");
}

int64_t ThrowOutOfRange(int64_t) { throw std::out_of_range("cb"); }

TEST(FunctionTestingLib, ErrorsFromTheCallbackCrossApply) {
  Function apply = Function::GetGlobalRequired("testing.apply");
  const int line = __LINE__ + 1;  // the next statement must stay on one line
  Function fail = Function::FromTyped(&ThrowOutOfRange, "cb");
  kffi::Error e = CatchError([&] { apply(fail, 1); });
  EXPECT_EQ(e.kind(), "IndexError");  // std::out_of_range
  EXPECT_EQ(e.message(), "cb");
  const std::string bt = e.backtrace();
  const std::string first =
      "  File \"" __FILE__ "\", line " + std::to_string(line) + ", in cb [ffi boundary]\n";
  EXPECT_EQ(bt.substr(0, first.size()), first);
  EXPECT_NE(bt.find("in testing.apply [ffi boundary]", first.size()), std::string::npos) << bt;
  EXPECT_EQ(CatchError([&] { apply(fail, "x"); }).message(),
            "arg0: expected int, got str (argument #0 of `cb(arg0: int) -> int`)");
}

}  // namespace

namespace {
TEST(FunctionCApi, CallRejectsANegativeCountOrMissingArguments) {
  kffi::Function f = kffi::Function::FromPacked([](kffi::PackedArgs, kffi::Any*) {}, "noop");
  KFFIObjectHandle h = kffi::details::ObjectUnsafe::GetHandle(kffi::details::ObjectRefData(f));
  KFFIAny result;
  for (int32_t n : {-1, 2}) {
    EXPECT_EQ(KFFIFunctionCall(h, nullptr, n, &result), -1);
    KFFIObjectHandle err = nullptr;
    KFFIErrorMoveFromRaised(&err);
    ASSERT_NE(err, nullptr);
    kffi::Error e(kffi::details::ObjectUnsafe::FromOwnedHandle<kffi::Object>(err));
    EXPECT_EQ(e.kind(), "ValueError");
    EXPECT_NE(e.message().find("KFFIFunctionCall: " + std::to_string(n) + " arguments at NULL"),
              std::string::npos)
        << e.message();
  }
  EXPECT_EQ(KFFIFunctionCall(h, nullptr, 0, &result), 0);  // no arguments need no array
}
}  // namespace
