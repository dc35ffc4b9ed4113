// tests/cpp/tvm_bridge/test_tvm_bridge.cc: TVM-FFI libraries through kffi's own shim (no libtvm_ffi
// loaded).
//
// The libraries come from tests/tvm_libs (apache-tvm-ffi's headers); without apache-tvm-ffi
// installed they are not built and these tests skip. tests/tvm_libs/test_tvm_real.cc runs the
// same library with apache-tvm-ffi loaded.
// SPDX-License-Identifier: Apache-2.0
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <kffi/container/array.h>
#include <kffi/container/map.h>
#include <kffi/module.h>
#include <kffi/tensor.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "test_util.h"

namespace {

using kffi::Any;
using kffi::Error;
using kffi::Function;
using kffi::Module;

#ifdef KFFI_TEST_TVM_TESTLIB
#define SKIP_WITHOUT_TVM_LIBS() (void)0
#else
#define SKIP_WITHOUT_TVM_LIBS() GTEST_SKIP() << "apache-tvm-ffi not installed at build time"
#define KFFI_TEST_TVM_TESTLIB ""
#define KFFI_TEST_TVM_UNCOVERED ""
#define KFFI_TEST_TVM_COLLIDE ""
#define KFFI_TEST_TVM_TESTLIB_NORPATH ""
#endif

bool LibTvmFfiMapped() { return dlopen("libtvm_ffi.so", RTLD_LAZY | RTLD_NOLOAD) != nullptr; }

Module TestLib() {
  EXPECT_FALSE(LibTvmFfiMapped());
  return Module::Load(KFFI_TEST_TVM_TESTLIB);
}

// A 1-d float32 view of data for passing as a DLTensor* argument.
DLTensor View(float* data, int64_t* shape, DLDeviceType device = kDLCPU) {
  DLTensor t{};
  t.data = data;
  t.device = DLDevice{device, 0};
  t.ndim = 1;
  t.dtype = DLDataType{kDLFloat, 32, 1};
  t.shape = shape;
  return t;
}

TEST(TvmBridge, ScalarsStringsAndContainers) {
  SKIP_WITHOUT_TVM_LIBS();
  Module mod = TestLib();
  EXPECT_EQ(mod.GetFunctionRequired("add_int")(40, 2).cast<int64_t>(), 42);
  EXPECT_EQ(mod.GetFunctionRequired("scale_float")(1.5, 4.0).cast<double>(), 6.0);
  EXPECT_EQ(mod.GetFunctionRequired("negate")(true).cast<bool>(), false);
  EXPECT_EQ(
      mod.GetFunctionRequired("concat")("a string that is ", "long enough").cast<std::string>(),
      "a string that is long enough");
  auto range = mod.GetFunctionRequired("make_range")(4).cast<kffi::Array<int64_t>>();
  EXPECT_EQ(std::vector<int64_t>(range.begin(), range.end()), (std::vector<int64_t>{0, 1, 2, 3}));
  EXPECT_EQ(mod.GetFunctionRequired("sum_array")(range).cast<int64_t>(), 6);
  EXPECT_FALSE(LibTvmFfiMapped());
}

TEST(TvmBridge, TensorsPassAsTheSameMemory) {
  SKIP_WITHOUT_TVM_LIBS();
  Module mod = TestLib();
  float x[3] = {1, 2, 3}, y[3] = {0, 0, 0};
  int64_t shape[1] = {3};
  DLTensor tx = View(x, shape), ty = View(y, shape);
  mod.GetFunctionRequired("add_one")(&tx, &ty);
  EXPECT_EQ(std::vector<float>(y, y + 3), (std::vector<float>{2, 3, 4}));
  kffi::Tensor t = mod.GetFunctionRequired("iota")(5).cast<kffi::Tensor>();
  const float* p = static_cast<const float*>(t.data_ptr());
  EXPECT_EQ(std::vector<float>(p, p + 5), (std::vector<float>{0, 1, 2, 3, 4}));
}

// An `ffi::Tensor` parameter (FlashInfer's style) takes a C++ caller's borrowed DLTensor* as a
// Tensor viewing it for the call (kffi's rule for its own Tensor parameters), and a kffi::Tensor
// as itself: the library may keep that one.
TEST(TvmBridge, TensorByValueParameters) {
  SKIP_WITHOUT_TVM_LIBS();
  Module mod = TestLib();
  float x[3] = {1, 2, 3};
  int64_t shape[1] = {3};
  DLTensor view = View(x, shape, kDLCPU);
  EXPECT_EQ(mod.GetFunctionRequired("owned_sum")(&view).cast<double>(), 6.0);
  EXPECT_EQ(mod.GetFunctionRequired("mixed_sum")(&view, &view).cast<double>(), 12.0);
  EXPECT_EQ(mod.GetFunctionRequired("kept_use_count")().cast<int64_t>(), 0);
  {
    kffi::Tensor t = kffi::Tensor::FromEnvAlloc(kffi::IntArrayView(shape, 1),
                                                DLDataType{kDLFloat, 32, 1}, DLDevice{kDLCPU, 0});
    float* p = static_cast<float*>(t.data_ptr());
    p[0] = 4;
    p[1] = 5;
    p[2] = 6;
    mod.GetFunctionRequired("keep_tensor")(t);
    EXPECT_EQ(t.use_count(), 2u);
  }
  EXPECT_EQ(mod.GetFunctionRequired("kept_use_count")().cast<int64_t>(), 1);
  EXPECT_EQ(mod.GetFunctionRequired("kept_sum")().cast<double>(), 15.0);
  mod.GetFunctionRequired("release_kept")();
  EXPECT_EQ(mod.GetFunctionRequired("kept_use_count")().cast<int64_t>(), 0);
}

TEST(TvmBridge, ErrorsKeepKindMessageAndBacktrace) {
  SKIP_WITHOUT_TVM_LIBS();
  Module mod = TestLib();
  for (const char* kind : {"ValueError", "TypeError", "IndexError", "RuntimeError"}) {
    Error e = CatchError([&] { mod.GetFunctionRequired("raise_error")(kind, "from the library"); });
    EXPECT_EQ(e.kind(), kind);
    EXPECT_EQ(e.message(), "from the library");
    EXPECT_NE(e.backtrace().find("tvm_testlib.cc"), std::string::npos) << e.backtrace();
  }
  float x[2] = {0, 0};
  int64_t two[1] = {2}, three[1] = {3};
  DLTensor a = View(x, two), b = View(x, three);
  Error shape = CatchError([&] { mod.GetFunctionRequired("add_one")(&a, &b); });
  EXPECT_EQ(shape.kind(), "ValueError");
  EXPECT_NE(shape.message().find("add_one: x has 2 elements, y has 3"), std::string::npos)
      << shape.message();
}

TEST(TvmBridge, CallbacksBothWays) {
  SKIP_WITHOUT_TVM_LIBS();
  Module mod = TestLib();
  Function twice = mod.GetFunctionRequired("call_twice");
  EXPECT_EQ(twice(Function::FromTyped([](int64_t v) { return v * 3; }), 2).cast<int64_t>(), 18);
  Function adder = mod.GetFunctionRequired("make_adder")(10).cast<Function>();
  EXPECT_EQ(adder(5).cast<int64_t>(), 15);
  EXPECT_EQ(twice(adder, 1).cast<int64_t>(), 21);
  Function failing =
      Function::FromTyped([](int64_t) -> int64_t { KFFI_THROW(KeyError) << "callback failed"; });
  Error e = CatchError([&] { twice(failing, 1); });
  EXPECT_EQ(e.kind(), "KeyError");
  EXPECT_EQ(e.message(), "callback failed");
  // A kffi function handed to the library and back is the same function object.
  Function echoed = mod.GetFunctionRequired("echo")(failing).cast<Function>();
  EXPECT_TRUE(echoed.same_as(failing));
}

TEST(TvmBridge, MapsDoNotCross) {
  SKIP_WITHOUT_TVM_LIBS();
  Module mod = TestLib();
  Error ret = CatchError([&] { mod.GetFunctionRequired("make_map")("k", 1); });
  EXPECT_EQ(ret.kind(), "TypeError");
  EXPECT_EQ(ret.message(),
            "The TVM-FFI function `make_map` returned a Map (kffi and TVM-FFI lay out hash maps "
            "differently, so maps do not cross between them; pass a list of (key, value) pairs "
            "instead)");
  kffi::Map<kffi::String, int64_t> m;
  m.Set("a", 1);
  Error arg = CatchError([&] { mod.GetFunctionRequired("map_size")(m); });
  EXPECT_EQ(arg.kind(), "TypeError");
  EXPECT_EQ(arg.message().rfind("Argument #0 of the TVM-FFI function `map_size` is a Map", 0), 0u)
      << arg.message();
}

TEST(TvmBridge, MetadataInKffiFormat) {
  SKIP_WITHOUT_TVM_LIBS();
  Module mod = TestLib();
  EXPECT_EQ(
      mod.GetFunctionMetadata("add_int").value(),
      R"({"name":"add_int","params":[{"name":"arg0","type":"int","kind":"int","optional":false},)"
      R"({"name":"arg1","type":"int","kind":"int","optional":false}],"return":"int",)"
      R"("doc":"Adds two integers.","abi":"tvm-ffi"})");
  EXPECT_EQ(
      mod.GetFunctionMetadata("add_one").value(),
      R"({"name":"add_one","params":[{"name":"arg0","type":"Tensor","kind":"tensor",)"
      R"("optional":false},{"name":"arg1","type":"Tensor","kind":"tensor","optional":false}],)"
      R"("return":"None","doc":"y = x + 1 for 1-d float32 tensors.","abi":"tvm-ffi"})");
  EXPECT_FALSE(mod.GetFunctionMetadata("no_such").has_value());
  // Malformed metadata is a ValueError naming the function; the function itself still runs.
  Error bad = CatchError([&] { mod.GetFunctionMetadata("bad_meta"); });
  EXPECT_EQ(bad.kind(), "ValueError");
  EXPECT_EQ(bad.message(),
            "The TVM-FFI metadata of function `bad_meta` (`__tvm_ffi__metadata_bad_meta`) is "
            "malformed: unexpected text after the document at offset 22");
  EXPECT_EQ(mod.GetFunctionRequired("bad_meta")().cast<int64_t>(), 7);
}

TEST(TvmBridge, EnvironmentIsKffis) {
  SKIP_WITHOUT_TVM_LIBS();
  Module mod = TestLib();
  KFFIStreamHandle prev = nullptr;
  ASSERT_EQ(KFFIEnvSetStream(kDLCUDA, 1, reinterpret_cast<KFFIStreamHandle>(0x5678), &prev), 0);
  EXPECT_EQ(mod.GetFunctionRequired("env_stream")(int(kDLCUDA), 1).cast<int64_t>(), 0x5678);
  KFFIEnvSetStream(kDLCUDA, 1, prev, nullptr);
  EXPECT_EQ(mod.GetFunctionRequired("env_stream")(int(kDLCUDA), 1).cast<int64_t>(), 0);
  // The library allocates through kffi's environment allocator.
  static int calls = 0;
  DLPackManagedTensorAllocator counting =
      [](DLTensor* proto, DLManagedTensorVersioned** out, void* ctx,
         void (*set_error)(void*, const char*, const char*)) -> int {
    ++calls;
    (void)proto;
    (void)out;
    set_error(ctx, "MemoryError", "the counting allocator refuses");
    return -1;
  };
  DLPackManagedTensorAllocator prev_alloc = nullptr;
  KFFIEnvSetTensorAllocator(counting, 0, &prev_alloc);
  Error e = CatchError([&] { mod.GetFunctionRequired("iota")(3); });
  KFFIEnvSetTensorAllocator(prev_alloc, 0, nullptr);
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(e.kind(), "MemoryError");
  EXPECT_EQ(e.message(), "the counting allocator refuses");
}

TEST(TvmBridge, GlobalsGoToKffisRegistry) {
  SKIP_WITHOUT_TVM_LIBS();
  Module mod = TestLib();
  std::optional<Function> square = Function::GetGlobal("tvm_testlib.square");
  ASSERT_TRUE(square.has_value());
  EXPECT_EQ((*square)(9).cast<int64_t>(), 81);
  // A second library registering the same name fails to load, cleanly, every time.
  for (int i = 0; i < 2; ++i) {
    Error e = CatchError([] { Module::Load(KFFI_TEST_TVM_COLLIDE); });
    EXPECT_EQ(e.kind(), "KeyError");
    EXPECT_NE(e.message().find("The library registers a global function kffi cannot accept"),
              std::string::npos)
        << e.message();
  }
  EXPECT_EQ((*Function::GetGlobal("tvm_testlib.square"))(3).cast<int64_t>(), 9);
}

TEST(TvmBridge, UncoveredImportIsNamedBeforeTheLibraryRuns) {
  SKIP_WITHOUT_TVM_LIBS();
  Error e = CatchError([] { Module::Load(KFFI_TEST_TVM_UNCOVERED); });
  EXPECT_EQ(e.kind(), "RuntimeError");
  // libtvm_ffi's extra C++ API, named as source spells it, and the remedy.
  EXPECT_NE(e.message().find("it imports apache-tvm-ffi's extra C++ API (`tvm::ffi::json::Parse("),
            std::string::npos)
      << e.message();
  EXPECT_NE(e.message().find("Load apache-tvm-ffi first"), std::string::npos) << e.message();
  EXPECT_EQ(std::getenv("KFFI_TEST_TVM_UNCOVERED_INITIALISED"), nullptr);
  EXPECT_FALSE(LibTvmFfiMapped());
}

TEST(TvmBridge, LinkedLibraryWithoutAReachableRuntimeIsExplained) {
  SKIP_WITHOUT_TVM_LIBS();
  Error e = CatchError([] { Module::Load(KFFI_TEST_TVM_TESTLIB_NORPATH); });
  EXPECT_EQ(e.kind(), "RuntimeError");
  EXPECT_NE(e.message().find("it was linked against libtvm_ffi.so (-ltvm_ffi), which is neither "
                             "loaded nor found by the dynamic loader"),
            std::string::npos)
      << e.message();
  EXPECT_NE(e.message().find("Import tvm_ffi first, set KFFI_TVM_RUNTIME to its libtvm_ffi.so, "
                             "or link the library without libtvm_ffi"),
            std::string::npos)
      << e.message();
  EXPECT_FALSE(LibTvmFfiMapped());
}

TEST(TvmBridge, RuntimeNamedByTheEnvironmentThatDoesNotLoadIsExplained) {
  SKIP_WITHOUT_TVM_LIBS();
  // KFFI_TVM_RUNTIME names the libtvm_ffi to load when a library needs one and none is loaded.
  ASSERT_EQ(setenv("KFFI_TVM_RUNTIME", "/nonexistent/libtvm_ffi.so", 1), 0);
  Error e = CatchError([] { Module::Load(KFFI_TEST_TVM_TESTLIB_NORPATH); });
  unsetenv("KFFI_TVM_RUNTIME");
  EXPECT_EQ(e.kind(), "RuntimeError");
  EXPECT_NE(e.message().find("needs apache-tvm-ffi's runtime, and `/nonexistent/libtvm_ffi.so` "
                             "(KFFI_TVM_RUNTIME) does not load"),
            std::string::npos)
      << e.message();
  EXPECT_NE(e.message().find("KFFI_TVM_RUNTIME=shim"), std::string::npos) << e.message();
  EXPECT_FALSE(LibTvmFfiMapped());
  // The process goes on: the library is refused the same way again, and others still load.
  EXPECT_EQ(CatchError([] { Module::Load(KFFI_TEST_TVM_TESTLIB_NORPATH); }).kind(), "RuntimeError");
  EXPECT_EQ(TestLib().GetFunctionRequired("add_int")(2, 3).cast<int64_t>(), 5);
}

TEST(TvmBridge, ForeignModuleObjectsAreRefusedByTheModuleApi) {
  SKIP_WITHOUT_TVM_LIBS();
  // An object with the Module type index that kffi did not make (as apache-tvm-ffi's would be).
  struct Fake {
    KFFIObject header;
    void* vtable;
  } fake{};
  fake.header.combined_ref_count = 1;
  fake.header.type_index = kKFFIModule;
  KFFIAny out;
  out.type_index = kKFFINone;
  ASSERT_EQ(KFFIModuleGetName(&fake, &out), -1);
  Error e = CatchError([] { kffi::details::ThrowRaisedError(-1); });
  EXPECT_EQ(e.kind(), "TypeError");
  EXPECT_EQ(
      e.message(),
      "KFFIModuleGetName: the `ffi.Module` was made by another runtime (e.g. apache-tvm-ffi), "
      "not by kffi");
}

}  // namespace
