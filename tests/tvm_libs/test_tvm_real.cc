// tests/tvm_libs/test_tvm_real.cc: TVM-FFI libraries through kffi with apache-tvm-ffi loaded.
//
// This program links libtvm_ffi, so it is in the process (and global) from the start: a TVM-FFI
// library that kffi loads binds to it, not to kffi's shim. kffi's callers must still see kffi's
// conventions: errors in kffi's slot, kffi's environment stream and allocator in the library.
// SPDX-License-Identifier: Apache-2.0
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <kffi/container/array.h>
#include <kffi/module.h>
#include <kffi/tensor.h>

#include <cstdint>
#include <string>
#include <vector>

#include "test_util.h"
#include "tvm_bridge/structural_maps_checks.h"

// The few apache-tvm-ffi C functions the tests call directly (same layouts as kffi's).
extern "C" {
void* TVMFFIEnvGetStream(int32_t device_type, int32_t device_id);
int TVMFFIEnvSetStream(int32_t device_type, int32_t device_id, void* stream, void** prev);
int TVMFFIFunctionGetGlobal(const KFFIByteArray* name, KFFIObjectHandle* out);
int TVMFFIEnvSetDLPackManagedTensorAllocator(DLPackManagedTensorAllocator allocator,
                                             int write_to_global_context,
                                             DLPackManagedTensorAllocator* opt_out_original);
DLPackManagedTensorAllocator TVMFFIEnvGetDLPackManagedTensorAllocator(void);
void TVMFFIErrorMoveFromRaised(KFFIObjectHandle* out);
int TVMFFIFunctionCall(KFFIObjectHandle func, KFFIAny* args, int32_t num_args, KFFIAny* result);
}

namespace {

using kffi::Error;
using kffi::Function;
using kffi::Module;

DLTensor View(float* data, int64_t* shape, DLDeviceType device) {
  DLTensor t{};
  t.data = data;
  t.device = DLDevice{device, 0};
  t.ndim = 1;
  t.dtype = DLDataType{kDLFloat, 32, 1};
  t.shape = shape;
  return t;
}

TEST(TvmReal, LibraryBindsToTheLoadedRuntime) {
  Module mod = Module::Load(KFFI_TEST_TVM_TESTLIB);
  EXPECT_EQ(mod.GetFunctionRequired("add_int")(1, 2).cast<int64_t>(), 3);
  // Its global went to apache-tvm-ffi's registry, not kffi's.
  EXPECT_FALSE(Function::GetGlobal("tvm_testlib.square").has_value());
  static const char kName[] = "tvm_testlib.square";
  KFFIByteArray name{kName, sizeof(kName) - 1};
  KFFIObjectHandle square = nullptr;
  ASSERT_EQ(TVMFFIFunctionGetGlobal(&name, &square), 0);
  ASSERT_NE(square, nullptr);
  KFFIObjectDecRef(square);
}

// apache-tvm-ffi's own hooks give what kffi's shim must give (tests/cpp/tvm_bridge/
// test_tvm_structural_maps.cc holds the shim to the same checks).
TEST(TvmReal, StructuralMapsOnApacheTvmFfi) {
  kffi_test::CheckStructuralMaps(Module::Load(KFFI_TEST_TVM_STRUCTURAL_MAPS));
}

TEST(TvmReal, ErrorsAreMovedIntoKffisSlot) {
  Module mod = Module::Load(KFFI_TEST_TVM_TESTLIB);
  Error e = CatchError([&] { mod.GetFunctionRequired("raise_error")("IndexError", "boom"); });
  EXPECT_EQ(e.kind(), "IndexError");
  EXPECT_EQ(e.message(), "boom");
  EXPECT_NE(e.backtrace().find("tvm_testlib.cc"), std::string::npos) << e.backtrace();
  // Nothing is left behind in apache-tvm-ffi's slot.
  KFFIObjectHandle left = nullptr;
  TVMFFIErrorMoveFromRaised(&left);
  EXPECT_EQ(left, nullptr);
}

TEST(TvmReal, KffiStreamOfTheTensorsDeviceIsTheLibrarysDuringTheCall) {
  Module mod = Module::Load(KFFI_TEST_TVM_TESTLIB);
  float data[2] = {0, 0};
  int64_t shape[1] = {2};
  // A tensor said to live on CUDA device 0; stream_of only reads its device.
  DLTensor t = View(data, shape, kDLCUDA);
  void* kffi_stream = reinterpret_cast<void*>(0xabc0);
  void* tvm_stream = reinterpret_cast<void*>(0x1230);
  KFFIStreamHandle prev = nullptr;
  ASSERT_EQ(KFFIEnvSetStream(kDLCUDA, 0, kffi_stream, &prev), 0);
  ASSERT_EQ(TVMFFIEnvSetStream(kDLCUDA, 0, tvm_stream, nullptr), 0);
  EXPECT_EQ(mod.GetFunctionRequired("stream_of")(&t).cast<int64_t>(), 0xabc0);
  // Restored after the call.
  EXPECT_EQ(TVMFFIEnvGetStream(kDLCUDA, 0), tvm_stream);
  KFFIEnvSetStream(kDLCUDA, 0, prev, nullptr);
  TVMFFIEnvSetStream(kDLCUDA, 0, nullptr, nullptr);
}

// An `ffi::Tensor` parameter (FlashInfer's style) takes a C++ caller's borrowed DLTensor* as a
// Tensor viewing it for the call (kffi's rule for its own Tensor parameters), and a kffi::Tensor
// as itself: the library may keep that one.
TEST(TvmReal, TensorByValueParameters) {
  Module mod = Module::Load(KFFI_TEST_TVM_TESTLIB);
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

TEST(TvmReal, AllocationFollowsKffisRules) {
  Module mod = Module::Load(KFFI_TEST_TVM_TESTLIB);
  // No allocator anywhere: kffi's rule (aligned host memory on CPU) holds on either runtime.
  kffi::Tensor t = mod.GetFunctionRequired("iota")(4).cast<kffi::Tensor>();
  const float* p = static_cast<const float*>(t.data_ptr());
  EXPECT_EQ(std::vector<float>(p, p + 4), (std::vector<float>{0, 1, 2, 3}));
  DLPackManagedTensorAllocator refusing =
      [](DLTensor*, DLManagedTensorVersioned**, void* ctx,
         void (*set_error)(void*, const char*, const char*)) -> int {
    set_error(ctx, "MemoryError", "refused by kffi's allocator");
    return -1;
  };
  KFFIEnvSetTensorAllocator(refusing, 0, nullptr);
  Error e = CatchError([&] { mod.GetFunctionRequired("iota")(4); });
  KFFIEnvSetTensorAllocator(nullptr, 0, nullptr);
  EXPECT_EQ(e.kind(), "MemoryError");
  EXPECT_NE(e.message().find("refused by kffi's allocator"), std::string::npos) << e.message();
}

int RefusingAllocator(DLTensor*, DLManagedTensorVersioned**, void* ctx,
                      void (*set_error)(void*, const char*, const char*)) {
  set_error(ctx, "MemoryError", "refused");
  return -1;
}
int OtherRefusingAllocator(DLTensor*, DLManagedTensorVersioned**, void* ctx,
                           void (*set_error)(void*, const char*, const char*)) {
  set_error(ctx, "MemoryError", "refused too");
  return -1;
}

std::string ObjectFileOf(int64_t address) {
  Dl_info info;
  if (dladdr(reinterpret_cast<void*>(static_cast<intptr_t>(address)), &info) == 0 ||
      info.dli_fname == nullptr) {
    return "?";
  }
  return info.dli_fname;
}

int ThirdAllocator(DLTensor*, DLManagedTensorVersioned**, void* ctx,
                   void (*set_error)(void*, const char*, const char*)) {
  set_error(ctx, "MemoryError", "third");
  return -1;
}

// Calls the export `__tvm_ffi_<name>` of the loaded library at path as tvm_ffi does (no kffi in
// between) with no arguments; the int result.
int64_t CallDirectly(const std::string& path, const char* name) {
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_NOLOAD);
  EXPECT_NE(handle, nullptr);
  if (handle == nullptr) return -1;
  auto fn =
      reinterpret_cast<KFFISafeCallType>(dlsym(handle, (std::string("__tvm_ffi_") + name).c_str()));
  KFFIAny result{};
  const int rc = fn != nullptr ? fn(nullptr, nullptr, 0, &result) : -1;
  dlclose(handle);
  EXPECT_EQ(rc, 0) << name;
  return result.v_int64;
}

int64_t AsInt(DLPackManagedTensorAllocator a) { return reinterpret_cast<intptr_t>(a); }

// kffi's allocator is what the library reads in kffi's calls (and callbacks see it), and
// apache-tvm-ffi's is what it reads in any other call. redirected: the library's allocator
// imports go through kffi's forwarders, so apache-tvm-ffi's environment is left alone during
// kffi's plain calls; otherwise kffi's allocator is copied into it for each call.
void CheckAllocatorRouting(const std::string& path, bool redirected) {
  Module mod = Module::Load(path);
  // Where the library's own slot for TVMFFIEnvTensorAlloc points.
  const int64_t seen_alloc = mod.GetFunctionRequired("env_tensor_alloc_address")().cast<int64_t>();
  EXPECT_EQ(ObjectFileOf(seen_alloc).find("kffi_tvm") != std::string::npos, redirected)
      << ObjectFileOf(seen_alloc);

  DLPackManagedTensorAllocator tvm_prev = nullptr;
  ASSERT_EQ(TVMFFIEnvSetDLPackManagedTensorAllocator(&OtherRefusingAllocator, 0, &tvm_prev), 0);
  KFFIEnvSetTensorAllocator(&RefusingAllocator, 0, nullptr);
  // A kffi call reads kffi's allocator (a direct call of the import: the PLT slot) ...
  EXPECT_EQ(mod.GetFunctionRequired("env_allocator")().cast<int64_t>(), AsInt(&RefusingAllocator));
  Error e = CatchError([&] { mod.GetFunctionRequired("iota")(4); });
  EXPECT_EQ(e.message(), "refused");
  // ... and apache-tvm-ffi's environment holds its own allocator during the call when redirected.
  EXPECT_EQ(mod.GetFunctionRequired("runtime_env_allocator")().cast<int64_t>(),
            redirected ? AsInt(&OtherRefusingAllocator) : AsInt(&RefusingAllocator));

  // A kffi callback made by the library keeps kffi's allocator, and its own calls follow the
  // rules above: through kffi, kffi's; as a TVM-FFI caller, what that runtime holds.
  int64_t callback_kffi = 0, callback_nested = 0, callback_direct = 0;
  std::string nested_error;
  Function probe = Function::FromTyped([&](int64_t x) {
    callback_kffi = AsInt(KFFIEnvGetTensorAllocator());
    callback_nested = mod.GetFunctionRequired("env_allocator")().cast<int64_t>();
    nested_error = CatchError([&] { mod.GetFunctionRequired("iota")(2); }).message();
    DLPackManagedTensorAllocator saved = nullptr;
    TVMFFIEnvSetDLPackManagedTensorAllocator(&ThirdAllocator, 0, &saved);
    callback_direct = CallDirectly(path, "env_allocator");
    TVMFFIEnvSetDLPackManagedTensorAllocator(saved, 0, nullptr);
    return x;
  });
  EXPECT_EQ(mod.GetFunctionRequired("call_twice")(probe, 1).cast<int64_t>(), 1);
  EXPECT_EQ(callback_kffi, AsInt(&RefusingAllocator));
  EXPECT_EQ(callback_nested, AsInt(&RefusingAllocator));
  EXPECT_EQ(nested_error, "refused");
  EXPECT_EQ(callback_direct, AsInt(&ThirdAllocator));

  // The same exports called as tvm_ffi calls them read apache-tvm-ffi's allocator.
  EXPECT_EQ(CallDirectly(path, "env_allocator"), AsInt(&OtherRefusingAllocator));
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_NOLOAD);
  ASSERT_NE(handle, nullptr);
  auto iota = reinterpret_cast<KFFISafeCallType>(dlsym(handle, "__tvm_ffi_iota"));
  ASSERT_NE(iota, nullptr);
  KFFIAny n{}, result{};
  n.type_index = kKFFIInt;
  n.v_int64 = 4;
  EXPECT_EQ(iota(nullptr, &n, 1, &result), -1);
  KFFIObjectHandle err = nullptr;
  TVMFFIErrorMoveFromRaised(&err);
  ASSERT_NE(err, nullptr);
  const auto* cell = static_cast<const KFFIErrorCell*>(KFFIObjectGetCellPtr(err));
  EXPECT_EQ(std::string(cell->message.data, cell->message.size), "refused too");
  KFFIObjectDecRef(err);
  dlclose(handle);

  // With no kffi allocator, kffi's rule holds in kffi's calls whatever apache-tvm-ffi has.
  KFFIEnvSetTensorAllocator(nullptr, 0, nullptr);
  kffi::Tensor t = mod.GetFunctionRequired("iota")(3).cast<kffi::Tensor>();
  const float* p = static_cast<const float*>(t.data_ptr());
  EXPECT_EQ(std::vector<float>(p, p + 3), (std::vector<float>{0, 1, 2}));
  EXPECT_NE(
      ObjectFileOf(mod.GetFunctionRequired("env_allocator")().cast<int64_t>()).find("kffi_tvm"),
      std::string::npos);
  TVMFFIEnvSetDLPackManagedTensorAllocator(tvm_prev, 0, nullptr);
}

// The same for the stream. redirected: the library's TVMFFIEnvGetStream import reads kffi's stream
// in every kffi call, with or without a device tensor, and apache-tvm-ffi's stream is never
// touched; otherwise kffi's stream is copied in for calls with a device tensor only.
void CheckStreamRouting(const std::string& path, bool redirected) {
  Module mod = Module::Load(path);
  KFFIStreamHandle kffi_prev = nullptr;
  void* tvm_prev = nullptr;
  ASSERT_EQ(KFFIEnvSetStream(kDLCUDA, 0, reinterpret_cast<void*>(0xabc0), &kffi_prev), 0);
  ASSERT_EQ(TVMFFIEnvSetStream(kDLCUDA, 0, reinterpret_cast<void*>(0x1230), &tvm_prev), 0);
  EXPECT_EQ(mod.GetFunctionRequired("env_stream")(int32_t{kDLCUDA}, 0).cast<int64_t>(),
            redirected ? 0xabc0 : 0x1230);
  float data[2] = {0, 0};
  int64_t shape[1] = {2};
  DLTensor t = View(data, shape, kDLCUDA);
  EXPECT_EQ(mod.GetFunctionRequired("stream_of")(&t).cast<int64_t>(), 0xabc0);
  EXPECT_EQ(TVMFFIEnvGetStream(kDLCUDA, 0), reinterpret_cast<void*>(0x1230));
  // Called as apache-tvm-ffi calls it (no kffi in between), the library reads that runtime's.
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_NOLOAD);
  ASSERT_NE(handle, nullptr);
  auto env_stream = reinterpret_cast<KFFISafeCallType>(dlsym(handle, "__tvm_ffi_env_stream"));
  ASSERT_NE(env_stream, nullptr);
  KFFIAny args[2] = {}, result{};
  args[0].type_index = args[1].type_index = kKFFIInt;
  args[0].v_int64 = kDLCUDA;
  ASSERT_EQ(env_stream(nullptr, args, 2, &result), 0);
  EXPECT_EQ(result.v_int64, 0x1230);
  dlclose(handle);
  KFFIEnvSetStream(kDLCUDA, 0, kffi_prev, nullptr);
  TVMFFIEnvSetStream(kDLCUDA, 0, tvm_prev, nullptr);
}

TEST(TvmReal, AllocatorImportsReadKffisAllocatorOnlyInKffisCalls) {
  // Linked with -z now: every slot is bound at load and read-only (RELRO) afterwards.
  CheckAllocatorRouting(KFFI_TEST_TVM_TESTLIB_LINKED, /*redirected=*/true);
  CheckStreamRouting(KFFI_TEST_TVM_TESTLIB_LINKED, /*redirected=*/true);
}

TEST(TvmReal, LibraryWithUnboundSlotsKeepsThePerCallCopy) {
  // Opened lazily first (as a framework may): its PLT slots are not yet bound when kffi loads it,
  // and a lazy resolver could undo a redirection, so kffi copies the allocator per call instead.
  void* early = dlopen(KFFI_TEST_TVM_TESTLIB, RTLD_LAZY | RTLD_LOCAL);
  ASSERT_NE(early, nullptr) << dlerror();
  CheckAllocatorRouting(KFFI_TEST_TVM_TESTLIB, /*redirected=*/false);
  CheckStreamRouting(KFFI_TEST_TVM_TESTLIB, /*redirected=*/false);
  dlclose(early);
}

TEST(TvmReal, LibraryLoadedByKffiFirstIsRedirected) {
  // Opened by kffi (RTLD_NOW) first: every slot is bound, partial RELRO.
  CheckAllocatorRouting(KFFI_TEST_TVM_TESTLIB, /*redirected=*/true);
  CheckStreamRouting(KFFI_TEST_TVM_TESTLIB, /*redirected=*/true);
}

TEST(TvmReal, KffiCallbacksRaiseIntoTheLibrarysRuntime) {
  Module mod = Module::Load(KFFI_TEST_TVM_TESTLIB);
  Function failing = Function::FromTyped(
      [](int64_t) -> int64_t { KFFI_THROW(KeyError) << "from a kffi callback"; });
  Error e = CatchError([&] { mod.GetFunctionRequired("call_twice")(failing, 1); });
  EXPECT_EQ(e.kind(), "KeyError");
  EXPECT_EQ(e.message(), "from a kffi callback");
  // A function the library made, called from kffi: its errors arrive in kffi's slot.
  Function adder = mod.GetFunctionRequired("make_adder")(1).cast<Function>();
  Error bad = CatchError([&] { adder("not an int"); });
  EXPECT_EQ(bad.kind(), "TypeError");
  // kffi function called through apache-tvm-ffi's own C API.
  static const char kName[] = "tvm_testlib.square";
  KFFIByteArray name{kName, sizeof(kName) - 1};
  KFFIObjectHandle square = nullptr;
  ASSERT_EQ(TVMFFIFunctionGetGlobal(&name, &square), 0);
  EXPECT_EQ(
      mod.GetFunctionRequired("call_twice")(
             Function(kffi::details::ObjectUnsafe::FromOwnedHandle<kffi::FunctionObj>(square)), 3)
          .cast<int64_t>(),
      81);
}

TEST(TvmReal, LinkedLibraryToo) {
  Module mod = Module::Load(KFFI_TEST_TVM_TESTLIB_LINKED);
  EXPECT_EQ(mod.GetFunctionRequired("concat")("ab", "cd").cast<std::string>(), "abcd");
  Error e = CatchError([&] { mod.GetFunctionRequired("check_positive")(-2); });
  EXPECT_EQ(e.kind(), "ValueError");
}

TEST(TvmReal, UncoveredImportRunsOnTheLoadedRuntime) {
  Module mod = Module::Load(KFFI_TEST_TVM_UNCOVERED);
  EXPECT_EQ(mod.GetFunctionRequired("parsed_length")("[1, 2, 3]").cast<int64_t>(), 3);
}

}  // namespace
