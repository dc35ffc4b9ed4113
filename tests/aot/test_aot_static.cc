// tests/aot/test_aot_static.cc: statically linked exports in the system library, export
// prefixes, and Module::LoadObject (link an object into a cached shared object and load it).
// SPDX-License-Identifier: Apache-2.0
#include <gtest/gtest.h>
#include <kffi/kffi.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "../cpp/test_util.h"

// The safe-call symbols of the two statically linked builds (what a generated header declares).
extern "C" int __kffi_a_add_ints(void*, const KFFIAny*, int32_t, KFFIAny*);
extern "C" int __kffi_b_add_ints(void*, const KFFIAny*, int32_t, KFFIAny*);

namespace {

using kffi::Module;

struct Vec {
  std::vector<float> data;
  int64_t shape[1];
  DLTensor dl;
  explicit Vec(std::vector<float> values) : data(std::move(values)) {
    shape[0] = static_cast<int64_t>(data.size());
    dl = DLTensor{
        data.data(), DLDevice{kDLCPU, 0}, 1, DLDataType{kDLFloat, 32, 1}, shape, nullptr, 0};
  }
  kffi::TensorView view() const { return kffi::TensorView(&dl); }
};

bool Has(const std::vector<std::string>& names, const std::string& name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

TEST(AotStatic, BothPrefixedBuildsAreInTheSystemLibrary) {
  std::vector<std::string> names = Module::SystemLib().ListFunctions();
  for (const char* n : {"a_add_ints", "a_scale", "b_add_ints", "b_scale"}) {
    EXPECT_TRUE(Has(names, n)) << n;
  }
  EXPECT_FALSE(Has(names, "add_ints"));  // the prefix names the export everywhere
}

TEST(AotStatic, SystemLibCallsAndMetadata) {
  Module sys = Module::SystemLib();
  EXPECT_EQ(sys.GetFunctionRequired("a_add_ints")(2, 3).cast<int64_t>(), 5);
  EXPECT_EQ(sys.GetFunctionRequired("b_add_ints")(20, 3).cast<int64_t>(), 23);
  std::string meta = sys.GetFunctionMetadata("b_scale").value();
  EXPECT_NE(meta.find(R"("name":"b_scale")"), std::string::npos) << meta;
  EXPECT_NE(meta.find(R"("contract":"y: Tensor([n], float32, mut), x: Tensor([n], float32), )"
                      R"(factor: float")"),
            std::string::npos)
      << meta;
  EXPECT_NE(meta.find(R"("doc":"y = x * factor")"), std::string::npos) << meta;
  Vec x({1, 2, 3}), y({0, 0, 0});
  sys.GetFunctionRequired("a_scale")(y.view(), x.view(), 2.0);
  EXPECT_EQ(y.data, (std::vector<float>{2, 4, 6}));
}

TEST(AotStatic, ContractViolationRaisesThroughTheSystemLibrary) {
  Vec x({1, 2, 3}), y({0, 0});
  kffi::Function scale = Module::SystemLib().GetFunctionRequired("b_scale");
  kffi::Error e = CatchError([&] { scale(y.view(), x.view(), 2.0); });
  EXPECT_EQ(e.kind(), "ValueError");
  EXPECT_NE(e.message().find("y.shape[0]: expected n = 3 (as x.shape[0]), got 2"),
            std::string::npos)
      << e.message();
  EXPECT_NE(e.message().find("b_scale(y: Tensor([n], float32, mut)"), std::string::npos)
      << e.message();
}

TEST(AotStatic, SafeCallSymbolsLinkDirectly) {
  void* a = reinterpret_cast<void*>(&__kffi_a_add_ints);
  void* b = reinterpret_cast<void*>(&__kffi_b_add_ints);
  EXPECT_NE(a, b);
  EXPECT_EQ(Module::InvokeExternC(a, 40, 2).cast<int64_t>(), 42);
  kffi::Error e = CatchError([&] { Module::InvokeExternC(b, 1); });
  EXPECT_EQ(e.kind(), "TypeError");
  EXPECT_NE(e.message().find("b_add_ints(a: int, b: int)"), std::string::npos) << e.message();
}

TEST(AotStatic, TypedEntryPointsCallTheSafeCall) {
  // What a generated header's entry point is: a direct call of the named safe-call symbol.
  EXPECT_EQ(Module::InvokeSafeCall<&__kffi_a_add_ints>(40, 2).cast<int64_t>(), 42);
  EXPECT_EQ(Module::InvokeSafeCall<&__kffi_b_add_ints>(int64_t{-1}, 1).cast<int64_t>(), 0);
  kffi::Error count = CatchError([] { Module::InvokeSafeCall<&__kffi_a_add_ints>(1); });
  EXPECT_EQ(count.kind(), "TypeError");
  EXPECT_NE(count.message().find("a_add_ints(a: int, b: int)"), std::string::npos)
      << count.message();
  kffi::Error type = CatchError([] { Module::InvokeSafeCall<&__kffi_b_add_ints>(1, "two"); });
  EXPECT_EQ(type.kind(), "TypeError");
  EXPECT_NE(type.message().find("b: expected int, got str (argument #1 of `b_add_ints(a: int, b: "
                                "int) -> int`)"),
            std::string::npos)
      << type.message();
}

#ifndef KFFI_AOT_LTO  // Module::LoadObject needs objects with machine code
TEST(AotLoadObject, LinksCachesAndLoads) {
  Module mod = Module::LoadObject(KFFI_AOT_OBJECT);
  EXPECT_EQ(mod.GetFunctionRequired("a_add_ints")(7, 8).cast<int64_t>(), 15);
  std::string name = mod.name();
  const char* cache = std::getenv("KFFI_CACHE_DIR");
  ASSERT_NE(cache, nullptr);
  EXPECT_NE(name.find("/objects/"), std::string::npos) << name;
  EXPECT_EQ(name.substr(name.size() - 3), ".so") << name;
  // Its own code, not the statically linked copy: the loaded module is a separate library whose
  // registrations were left out of the system library (no conflict was reported).
  EXPECT_EQ(mod.ListFunctions(), (std::vector<std::string>{"a_add_ints", "a_scale"}));
  EXPECT_TRUE(Module::LoadObject(KFFI_AOT_OBJECT).same_as(mod));
  EXPECT_EQ(Module::SystemLib().GetFunctionRequired("a_add_ints")(1, 1).cast<int64_t>(), 2);
  Vec x({1, 2}), y({0, 0, 0});
  kffi::Function scale = mod.GetFunctionRequired("a_scale");
  EXPECT_EQ(CatchError([&] { scale(y.view(), x.view(), 1.0); }).kind(), "ValueError");
}

TEST(AotLoadObject, RefusesWhatIsNoKffiObject) {
  kffi::Error missing = CatchError([] { Module::LoadObject("/nonexistent/x.o"); });
  EXPECT_EQ(missing.kind(), "RuntimeError");
  EXPECT_EQ(missing.message(), "Cannot load object `/nonexistent/x.o`: no such file");

  kffi::Error source = CatchError([] { Module::LoadObject(KFFI_AOT_SOURCE); });
  EXPECT_EQ(source.kind(), "RuntimeError");
  EXPECT_EQ(source.message(),
            std::string("Cannot load object `") + KFFI_AOT_SOURCE + "`: not an ELF object file");

  kffi::Error shared = CatchError([] { Module::LoadObject(KFFI_AOT_SHARED_LIBRARY); });
  EXPECT_NE(shared.message().find("it is a shared library, not a relocatable object; load it "
                                  "with load_module"),
            std::string::npos)
      << shared.message();

  kffi::Error plain = CatchError([] { Module::LoadObject(KFFI_AOT_NO_EXPORTS_OBJECT); });
  EXPECT_NE(plain.message().find("it is not a kffi object: it defines no `__kffi_<name>` "
                                 "function"),
            std::string::npos)
      << plain.message();

  kffi::Error empty = CatchError([] { Module::LoadObject(""); });
  EXPECT_EQ(empty.kind(), "ValueError");
  EXPECT_EQ(empty.message(), "Cannot load object: the path is empty");
}

TEST(AotLoadObject, ALinkFailureNamesTheCommandAndOutput) {
  // A C++ driver that fails: the error carries its exit status, the command and its output.
  const char* old = std::getenv("CXX");
  std::string saved = old != nullptr ? old : "";
  setenv("CXX", "false", 1);
  // The cache key includes the driver: this is a miss, so the driver runs.
  kffi::Error e = CatchError([] { Module::LoadObject(KFFI_AOT_OBJECT); });
  if (old != nullptr) {
    setenv("CXX", saved.c_str(), 1);
  } else {
    unsetenv("CXX");
  }
  EXPECT_EQ(e.kind(), "RuntimeError");
  EXPECT_NE(e.message().find("linking it into a shared object failed (exit status 1)"),
            std::string::npos)
      << e.message();
  EXPECT_NE(e.message().find("Command: false -shared -Wl,-z,now -o "), std::string::npos)
      << e.message();
}

#endif  // KFFI_AOT_LTO

}  // namespace
