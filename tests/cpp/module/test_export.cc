// tests/cpp/module/test_export.cc: KFFI_EXPORT symbols, their metadata and the system library.
// SPDX-License-Identifier: Apache-2.0
#include <gtest/gtest.h>
#include <kffi/export.h>
#include <kffi/module.h>
#include <kffi/optional.h>

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/json_writer.h"  // src/: the one JSON writer (libkffi and libkffi_tvm)
#include "test_util.h"

namespace {

double Scale(double x, double factor) { return x * factor; }

void Raise(const std::string& kind) {
  if (kind == "value") KFFI_THROW(ValueError) << "asked for a ValueError";
  throw std::runtime_error("a plain C++ exception");
}

// A stateful functor: the export keeps one copy of it, made on the first call.
struct Accumulate {
  std::vector<int64_t> seen;
  int64_t operator()(int64_t x) {
    seen.push_back(x);
    int64_t sum = 0;
    for (int64_t v : seen) sum += v;
    return sum;
  }
};
Accumulate g_accumulate;

}  // namespace

// Exported from the test binary itself, then called through the raw symbols.
KFFI_EXPORT_DOC(test_export_scale, Scale, "Multiplies \"x\" by factor.\n\tTabbed.", "x, factor");
KFFI_EXPORT(test_export_raise, Raise);
KFFI_EXPORT(test_export_concat, [](std::string a, kffi::String b) { return a + std::string(b); });
KFFI_EXPORT(test_export_nothing, []() {});
KFFI_EXPORT(test_export_accumulate, g_accumulate);
KFFI_EXPORT_DOC(
    test_export_optional,
    [](int64_t x, kffi::Optional<double> y) { return static_cast<double>(x) + y.value_or(0.5); },
    "y defaults to None", "x, y");

// Registered in the system library, as statically linked kernel code is.
KFFI_EXPORT_SYSTEM_LIB_DOC(
    test_sys_mul, [](int64_t a, int64_t b) { return a * b; }, "Multiplies.", "a, b");
KFFI_EXPORT_SYSTEM_LIB(test_sys_neg, [](int64_t a) { return -a; });

namespace {

using kffi::Error;
using kffi::Module;

void* Symbol(int (*fn)(void*, const KFFIAny*, int32_t, KFFIAny*)) {
  return reinterpret_cast<void*>(fn);
}

std::string CallMeta(int (*meta)(void*, const KFFIAny*, int32_t, KFFIAny*)) {
  return Module::InvokeExternC(Symbol(meta)).cast<std::string>();
}

// The parameter-name checks run at compile time.
static_assert(kffi::details::CountParamNames("") == 0);
static_assert(kffi::details::CountParamNames("  ") == 0);
static_assert(kffi::details::CountParamNames("x") == 1);
static_assert(kffi::details::CountParamNames("x, y ,z") == 3);

TEST(Export, StatefulFunctorKeepsItsStateAcrossCalls) {
  auto call = [](int64_t x) {
    return Module::InvokeExternC(Symbol(&__kffi_test_export_accumulate), x).cast<int64_t>();
  };
  EXPECT_EQ(call(2), 2);
  EXPECT_EQ(call(3), 5);
  EXPECT_EQ(call(10), 15);
  EXPECT_TRUE(g_accumulate.seen.empty());  // the export works on its own copy
  ExpectError("TypeError",
              "test_export_accumulate: expected 1 argument, got 0 (`test_export_accumulate(arg0: "
              "int) -> int`)",
              [] { Module::InvokeExternC(Symbol(&__kffi_test_export_accumulate)); });
}

TEST(Export, SymbolCallsTheTypedFunction) {
  EXPECT_EQ(Module::InvokeExternC(Symbol(&__kffi_test_export_scale), 1.5, 4.0).cast<double>(), 6.0);
  // The usual conversions apply: an int argument is accepted for a float parameter.
  EXPECT_EQ(Module::InvokeExternC(Symbol(&__kffi_test_export_scale), 2, 3).cast<double>(), 6.0);
  EXPECT_EQ(
      Module::InvokeExternC(Symbol(&__kffi_test_export_concat), "ab", "cd").cast<std::string>(),
      "abcd");
  EXPECT_TRUE(Module::InvokeExternC(Symbol(&__kffi_test_export_nothing)).is_none());
}

TEST(Export, ArgumentTypeErrorNamesArgumentAndSignature) {
  Error e =
      CatchError([] { Module::InvokeExternC(Symbol(&__kffi_test_export_scale), 1.0, "two"); });
  EXPECT_EQ(e.kind(), "TypeError");
  EXPECT_EQ(e.message(),
            "factor: expected float, got str (argument #1 of `test_export_scale(x: float, factor: "
            "float) -> float`)");
}

TEST(Export, ArgumentCountErrorNamesSignature) {
  Error e = CatchError([] { Module::InvokeExternC(Symbol(&__kffi_test_export_scale), 1.0); });
  EXPECT_EQ(e.kind(), "TypeError");
  EXPECT_EQ(e.message(),
            "test_export_scale: expected 2 arguments, got 1 (`test_export_scale(x: float, factor: "
            "float) -> float`)");
}

TEST(Export, ExceptionsBecomeRaisedErrorsWithAFrame) {
  Error value =
      CatchError([] { Module::InvokeExternC(Symbol(&__kffi_test_export_raise), "value"); });
  EXPECT_EQ(value.kind(), "ValueError");
  EXPECT_EQ(value.message(), "asked for a ValueError");
  EXPECT_NE(value.backtrace().find("in test_export_raise"), std::string::npos) << value.backtrace();
  Error plain = CatchError([] { Module::InvokeExternC(Symbol(&__kffi_test_export_raise), "x"); });
  EXPECT_EQ(plain.kind(), "RuntimeError");
  EXPECT_EQ(plain.message(), "a plain C++ exception");
}

TEST(Export, MetadataIsJsonWithNamesTypesAndEscapedDoc) {
  EXPECT_EQ(CallMeta(&__kffi__meta_test_export_scale),
            R"({"name":"test_export_scale","params":[{"name":"x","type":"float"},)"
            R"({"name":"factor","type":"float"}],"return":"float",)"
            R"("doc":"Multiplies \"x\" by factor.\n\tTabbed."})");
  EXPECT_EQ(CallMeta(&__kffi__meta_test_export_concat),
            R"({"name":"test_export_concat","params":[{"name":"arg0","type":"str"},)"
            R"({"name":"arg1","type":"str"}],"return":"str","doc":""})");
  EXPECT_EQ(CallMeta(&__kffi__meta_test_export_optional),
            R"({"name":"test_export_optional","params":[{"name":"x","type":"int"},)"
            R"({"name":"y","type":"Optional<float>","default":null}],"return":"float",)"
            R"("doc":"y defaults to None"})");
  EXPECT_EQ(CallMeta(&__kffi__meta_test_export_nothing),
            R"({"name":"test_export_nothing","params":[],"return":"None","doc":""})");
}

TEST(Export, JsonEscapesControlCharacters) {
  kffi::details::JsonWriter w;
  w.String(
      std::string("a\x01"
                  "b\\c",
                  5));
  EXPECT_EQ(w.Take(), "\"a\\u0001b\\\\c\"");
}

TEST(Export, AbiVersionRecordHoldsTheHeaderVersion) {
  // The record the export macros emit, under its C name `__kffi__abi_version`.
  EXPECT_EQ(kffi::details::AbiVersionRecord::value, static_cast<uint32_t>(KFFI_ABI_VERSION));
}

TEST(Export, SystemLibServesRegisteredFunctions) {
  Module sys = Module::SystemLib();
  EXPECT_TRUE(sys.same_as(Module::SystemLib()));
  EXPECT_EQ(sys.name(), "system_lib");
  EXPECT_EQ(sys.GetFunctionRequired("test_sys_mul")(6, 7).cast<int64_t>(), 42);
  EXPECT_EQ(sys.GetFunctionRequired("test_sys_neg")(5).cast<int64_t>(), -5);
  EXPECT_FALSE(sys.GetFunction("test_export_scale").has_value());  // a plain export: not here
  std::vector<std::string> names = sys.ListFunctions();
  EXPECT_NE(std::find(names.begin(), names.end(), "test_sys_mul"), names.end());
  EXPECT_NE(std::find(names.begin(), names.end(), "test_sys_neg"), names.end());
  EXPECT_EQ(sys.GetFunctionMetadata("test_sys_mul").value(),
            R"({"name":"test_sys_mul","params":[{"name":"a","type":"int"},)"
            R"({"name":"b","type":"int"}],"return":"int","doc":"Multiplies."})");
}

TEST(Export, SystemLibMissingFunctionListsNames) {
  Error e = CatchError([] { Module::SystemLib().GetFunctionRequired("test_sys_nope"); });
  EXPECT_EQ(e.kind(), "AttributeError");
  EXPECT_EQ(e.message().rfind("Module `system_lib` has no function `test_sys_nope`. Available "
                              "functions: ",
                              0),
            0u)
      << e.message();
  EXPECT_NE(e.message().find("test_sys_mul"), std::string::npos);
}

TEST(Export, SystemLibRefusesConflictsAndForeignAbiVersions) {
  static int dummy = 0;
  // The same name with the same address again is accepted (idempotent registration).
  EXPECT_EQ(KFFIModuleRegisterSystemLibSymbol("__kffi_test_sys_mul", Symbol(&__kffi_test_sys_mul)),
            0);
  ASSERT_EQ(KFFIModuleRegisterSystemLibSymbol("__kffi_test_sys_mul", &dummy), -1);
  Error conflict = CatchError([] { kffi::details::ThrowRaisedError(-1); });
  EXPECT_EQ(conflict.kind(), "KeyError");
  EXPECT_EQ(conflict.message(),
            "System library symbol `__kffi_test_sys_mul` is already registered with another "
            "address");
  static const uint32_t kForeignVersion = 999;
  ASSERT_EQ(KFFIModuleRegisterSystemLibSymbol("__kffi__abi_version",
                                              const_cast<uint32_t*>(&kForeignVersion)),
            -1);
  Error version = CatchError([] { kffi::details::ThrowRaisedError(-1); });
  EXPECT_EQ(version.kind(), "RuntimeError");
  EXPECT_EQ(version.message(),
            "Cannot register statically linked kffi code in the system library: it was built for "
            "kffi ABI version 999, but this runtime serves ABI version " +
                std::to_string(KFFI_ABI_VERSION));
}

TEST(Export, SystemLibCanImportALoadedModule) {
  Module sys = Module::SystemLib();
  Module other = Module::Load(KFFI_TEST_MODLIB_OTHER);
  sys.Import(other);
  EXPECT_EQ(sys.GetFunctionRequired("mul")(3, 5).cast<int64_t>(), 15);
}

}  // namespace
