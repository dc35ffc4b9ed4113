// tests/cpp/module/test_module.cc: Module: loading kernel libraries, lookups, imports, lifetime,
// errors.
// SPDX-License-Identifier: Apache-2.0
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <kffi/module.h>
#include <limits.h>
#include <stdlib.h>

#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "test_util.h"

namespace {

using kffi::Error;
using kffi::Function;
using kffi::Module;

std::string Canonical(const char* path) {
  char buf[PATH_MAX];
  if (realpath(path, buf) == nullptr) return std::string("<cannot resolve ") + path + ">";
  return buf;
}

std::string LoadErrorPrefix(const std::string& path) {
  return "Cannot load module `" + path + "`: ";
}

TEST(Module, LoadsLibraryAndCallsFunction) {
  Module mod = Module::Load(KFFI_TEST_MODLIB);
  ASSERT_TRUE(mod.defined());
  Function add = mod.GetFunctionRequired("add");
  EXPECT_EQ(add(2, 40).cast<int64_t>(), 42);
  EXPECT_EQ(mod.GetFunctionRequired("echo")("a string longer than seven").cast<std::string>(),
            "a string longer than seven");
}

TEST(Module, NameIsTheCanonicalPath) {
  // A path with a `.` component still names (and is) the same file.
  std::string dotted =
      std::string(KFFI_TEST_MODULE_LIBS_DIR) + "/./" +
      Canonical(KFFI_TEST_MODLIB).substr(Canonical(KFFI_TEST_MODULE_LIBS_DIR).size() + 1);
  Module mod = Module::Load(dotted);
  EXPECT_EQ(mod.name(), Canonical(KFFI_TEST_MODLIB));
}

TEST(Module, ListsExportedFunctionsSorted) {
  Module mod = Module::Load(KFFI_TEST_MODLIB);
  EXPECT_EQ(mod.ListFunctions(), (std::vector<std::string>{"add", "echo", "fail", "make_counter"}));
}

TEST(Module, GetFunctionIsEmptyWhenAbsent) {
  Module mod = Module::Load(KFFI_TEST_MODLIB);
  EXPECT_FALSE(mod.GetFunction("no_such_function").has_value());
  EXPECT_FALSE(mod.GetFunction("").has_value());
  // `__kffi__meta_add` exists, but names under `__kffi__` are the ABI's, never functions.
  EXPECT_FALSE(mod.GetFunction("_meta_add").has_value());
  EXPECT_FALSE(mod.GetFunction("_abi_version").has_value());
}

TEST(Module, GetFunctionRequiredListsAvailableNames) {
  Module mod = Module::Load(KFFI_TEST_MODLIB);
  Error e = CatchError([&] { mod.GetFunctionRequired("scale"); });
  EXPECT_EQ(e.kind(), "AttributeError");
  EXPECT_EQ(e.message(), "Module `" + Canonical(KFFI_TEST_MODLIB) +
                             "` has no function `scale`. Available functions: add, echo, fail, "
                             "make_counter");
}

TEST(Module, MetadataDescribesParametersAndDoc) {
  Module mod = Module::Load(KFFI_TEST_MODLIB);
  EXPECT_EQ(mod.GetFunctionMetadata("add").value(),
            R"({"name":"add","params":[{"name":"a","type":"int"},{"name":"b","type":"int"}],)"
            R"("return":"int","doc":"Adds two integers.\nReturns \"a + b\"."})");
  EXPECT_EQ(mod.GetFunctionMetadata("make_counter").value(),
            R"({"name":"make_counter","params":[{"name":"start","type":"int"}],)"
            R"("return":"Function","doc":""})");
}

TEST(Module, MetadataFallsBackToPositionalNames) {
  Module mod = Module::Load(KFFI_TEST_MODLIB);
  EXPECT_EQ(mod.GetFunctionMetadata("echo").value(),
            R"({"name":"echo","params":[{"name":"arg0","type":"str"}],"return":"str","doc":""})");
}

TEST(Module, MetadataIsEmptyForAbsentFunctionOrMetadata) {
  EXPECT_FALSE(Module::Load(KFFI_TEST_MODLIB).GetFunctionMetadata("nope").has_value());
  Module c_lib = Module::Load(KFFI_TEST_MODLIB_C);
  EXPECT_TRUE(c_lib.GetFunction("raw_add").has_value());
  EXPECT_FALSE(c_lib.GetFunctionMetadata("raw_add").has_value());
}

TEST(Module, HandWrittenCExportWithoutVersionLoads) {
  Module mod = Module::Load(KFFI_TEST_MODLIB_C);
  EXPECT_EQ(mod.ListFunctions(), std::vector<std::string>{"raw_add"});
  Function raw_add = mod.GetFunctionRequired("raw_add");
  EXPECT_EQ(raw_add(20, 22).cast<int64_t>(), 42);
  Error e = CatchError([&] { raw_add("x", 1); });
  EXPECT_EQ(e.kind(), "TypeError");
  EXPECT_EQ(e.message(), "raw_add expects two ints");
}

TEST(Module, LoadingTwiceReturnsTheSameModule) {
  Module a = Module::Load(KFFI_TEST_MODLIB);
  Module b = Module::Load(KFFI_TEST_MODLIB);
  EXPECT_TRUE(a.same_as(b));
}

TEST(Module, ConcurrentLoadsReturnTheSameModule) {
  Module first = Module::Load(KFFI_TEST_MODLIB_OTHER);
  std::vector<Module> loaded(8);
  std::vector<std::thread> threads;
  for (Module& slot : loaded) {
    threads.emplace_back([&slot] { slot = Module::Load(KFFI_TEST_MODLIB_OTHER); });
  }
  for (std::thread& t : threads) t.join();
  for (const Module& m : loaded) EXPECT_TRUE(m.same_as(first));
}

TEST(Module, FunctionKeepsItsModuleAlive) {
  Module mod = Module::Load(KFFI_TEST_MODLIB);
  const kffi::ModuleObj* raw = mod.get();
  Function add = mod.GetFunctionRequired("add");
  mod = Module();
  // The function still holds the module, so loading again finds the same object.
  Module again = Module::Load(KFFI_TEST_MODLIB);
  EXPECT_EQ(again.get(), raw);
}

TEST(Module, FunctionsAndObjectsOutliveTheModuleReference) {
  Function add;
  Function counter;
  {
    Module mod = Module::Load(KFFI_TEST_MODLIB);
    add = mod.GetFunctionRequired("add");
    // Made inside the library: its code and deleter live there.
    counter = mod.GetFunctionRequired("make_counter")(100).cast<Function>();
  }
  EXPECT_EQ(add(1, 2).cast<int64_t>(), 3);
  add = Function();
  EXPECT_EQ(counter(5).cast<int64_t>(), 105);
  counter = Function();  // runs the library's deleter: the library is still mapped
  // A module whose references are all gone is made anew on the next load and still works.
  EXPECT_EQ(Module::Load(KFFI_TEST_MODLIB).GetFunctionRequired("add")(3, 4).cast<int64_t>(), 7);
}

TEST(Module, ImportsAreSearchedAfterOwnFunctions) {
  Module mod = Module::Load(KFFI_TEST_MODLIB);
  Module other = Module::Load(KFFI_TEST_MODLIB_OTHER);
  mod.Import(other);
  mod.Import(other);  // a second import of the same module changes nothing
  // Own `add` wins over the import's; `mul` comes from the import.
  EXPECT_EQ(mod.GetFunctionRequired("add")(1, 2).cast<int64_t>(), 3);
  EXPECT_EQ(mod.GetFunctionRequired("mul")(6, 7).cast<int64_t>(), 42);
  EXPECT_FALSE(mod.GetFunction("mul", /*query_imports=*/false).has_value());
  EXPECT_EQ(mod.GetFunctionMetadata("mul").value(),
            R"({"name":"mul","params":[{"name":"arg0","type":"int"},{"name":"arg1","type":"int"}],)"
            R"("return":"int","doc":""})");
  EXPECT_EQ(mod.ListFunctions(), (std::vector<std::string>{"add", "echo", "fail", "make_counter"}));
  EXPECT_EQ(mod.ListFunctions(/*query_imports=*/true),
            (std::vector<std::string>{"add", "echo", "fail", "make_counter", "mul"}));
  Error e = CatchError([&] { mod.GetFunctionRequired("div"); });
  EXPECT_EQ(e.message(), "Module `" + Canonical(KFFI_TEST_MODLIB) +
                             "` has no function `div`. Available functions: add, echo, fail, "
                             "make_counter, mul");
}

TEST(Module, ImportCycleIsRejected) {
  Module c_lib = Module::Load(KFFI_TEST_MODLIB_C);
  Module other = Module::Load(KFFI_TEST_MODLIB_OTHER);
  c_lib.Import(other);
  Error e = CatchError([&] { other.Import(c_lib); });
  EXPECT_EQ(e.kind(), "ValueError");
  EXPECT_EQ(e.message(), "Cannot import module `" + Canonical(KFFI_TEST_MODLIB_C) + "` into `" +
                             Canonical(KFFI_TEST_MODLIB_OTHER) +
                             "`: it would make an import cycle");
  Error self = CatchError([&] { other.Import(other); });
  EXPECT_EQ(self.kind(), "ValueError");
}

TEST(Module, ErrorsFromLibraryFunctionsKeepKindMessageAndFrames) {
  Function fail = Module::Load(KFFI_TEST_MODLIB).GetFunctionRequired("fail");
  Error e = CatchError([&] { fail("on purpose"); });
  EXPECT_EQ(e.kind(), "ValueError");
  EXPECT_EQ(e.message(), "modlib failed: on purpose");
  EXPECT_NE(e.backtrace().find("modlib.cc"), std::string::npos) << e.backtrace();
  EXPECT_NE(e.backtrace().find("in fail"), std::string::npos) << e.backtrace();
}

TEST(Module, ArgumentErrorsUseTheStandardMessages) {
  Function add = Module::Load(KFFI_TEST_MODLIB).GetFunctionRequired("add");
  Error type = CatchError([&] { add(1, "two"); });
  EXPECT_EQ(type.kind(), "TypeError");
  EXPECT_EQ(type.message(),
            "b: expected int, got str (argument #1 of `add(a: int, b: int) -> int`)");
  Error count = CatchError([&] { add(1); });
  EXPECT_EQ(count.kind(), "TypeError");
  EXPECT_EQ(count.message(), "add: expected 2 arguments, got 1 (`add(a: int, b: int) -> int`)");
}

TEST(Module, InvokeExternCCallsARawSymbol) {
  Module mod = Module::Load(KFFI_TEST_MODLIB);
  void* handle = dlopen(KFFI_TEST_MODLIB, RTLD_LAZY | RTLD_NOLOAD);
  ASSERT_NE(handle, nullptr);
  void* symbol = dlsym(handle, "__kffi_add");
  ASSERT_NE(symbol, nullptr);
  EXPECT_EQ(Module::InvokeExternC(symbol, 5, 6).cast<int64_t>(), 11);
  Error e = CatchError([&] { Module::InvokeExternC(symbol, 5, 6.5); });
  EXPECT_EQ(e.message(),
            "b: expected int, got float (argument #1 of `add(a: int, b: int) -> int`)");
  dlclose(handle);  // drops the NOLOAD reference only; the loader's own stays
  Error null_symbol = CatchError([] { Module::InvokeExternC(nullptr); });
  EXPECT_EQ(null_symbol.kind(), "ValueError");
}

TEST(Module, MissingFileIsNamed) {
  std::string path = std::string(KFFI_TEST_MODULE_LIBS_DIR) + "/libno_such_library.so";
  Error e = CatchError([&] { Module::Load(path); });
  EXPECT_EQ(e.kind(), "RuntimeError");
  EXPECT_EQ(e.message(), LoadErrorPrefix(path) + "no such file");
}

TEST(Module, EmptyPathIsAValueError) {
  Error e = CatchError([] { Module::Load(""); });
  EXPECT_EQ(e.kind(), "ValueError");
  EXPECT_EQ(e.message(), "Cannot load module: the path is empty");
}

TEST(Module, NonLibraryFileIsRefusedBeforeDlopen) {
  const std::string path = KFFI_TEST_NOT_A_LIBRARY;
  Error e = CatchError([&] { Module::Load(path); });
  EXPECT_EQ(e.kind(), "RuntimeError");
  EXPECT_EQ(e.message(), LoadErrorPrefix(path) + "not a loadable shared library: not an ELF file");
}

TEST(Module, LibraryWithoutKffiSymbolsIsRefusedBeforeItRuns) {
  Error e = CatchError([] { Module::Load(KFFI_TEST_PLAINLIB); });
  EXPECT_EQ(e.kind(), "RuntimeError");
  EXPECT_EQ(e.message(), LoadErrorPrefix(KFFI_TEST_PLAINLIB) +
                             "it is not a kffi library: it exports neither `__kffi__abi_version` "
                             "nor any `__kffi_<name>` function (export functions with KFFI_EXPORT "
                             "from <kffi/export.h>), nor any TVM-FFI `__tvm_ffi_<name>` function");
  EXPECT_EQ(std::getenv("KFFI_TEST_PLAINLIB_INITIALISED"), nullptr);
}

TEST(Module, IncompatibleAbiVersionIsRefusedBeforeItRuns) {
  Error e = CatchError([] { Module::Load(KFFI_TEST_MODLIB_ABI999); });
  EXPECT_EQ(e.kind(), "RuntimeError");
  EXPECT_EQ(e.message(),
            LoadErrorPrefix(KFFI_TEST_MODLIB_ABI999) +
                "it was built for kffi ABI version 999, but this runtime (kffi " +
                std::to_string(KFFI_VERSION_MAJOR) + "." + std::to_string(KFFI_VERSION_MINOR) +
                "." + std::to_string(KFFI_VERSION_PATCH) + ") serves ABI version " +
                std::to_string(KFFI_ABI_VERSION) + "; rebuild the library against this kffi");
  EXPECT_EQ(std::getenv("KFFI_TEST_ABI999_INITIALISED"), nullptr);
  // Refused every time, not only on the first try.
  EXPECT_EQ(CatchError([] { Module::Load(KFFI_TEST_MODLIB_ABI999); }).message(), e.message());
}

TEST(Module, CApiChecksItsHandles) {
  Function f = Function::FromTyped([](int x) { return x; });
  KFFIByteArray name{"add", 3};
  KFFIObjectHandle out = nullptr;
  KFFIObjectHandle not_a_module =
      kffi::details::ObjectUnsafe::GetHandle(kffi::details::ObjectRefData(f));
  ASSERT_EQ(KFFIModuleGetFunction(not_a_module, &name, 1, &out), -1);
  Error wrong_type = CatchError([] { kffi::details::ThrowRaisedError(-1); });
  EXPECT_EQ(wrong_type.kind(), "TypeError");
  EXPECT_EQ(wrong_type.message(),
            "KFFIModuleGetFunction: expected a `ffi.Module`, got `ffi.Function`");
  ASSERT_EQ(KFFIModuleGetFunction(nullptr, &name, 1, &out), -1);
  Error null_mod = CatchError([] { kffi::details::ThrowRaisedError(-1); });
  EXPECT_EQ(null_mod.message(), "KFFIModuleGetFunction: mod is NULL");
}

}  // namespace
