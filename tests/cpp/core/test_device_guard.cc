// tests/cpp/core/test_device_guard.cc: the device a call runs on: KFFIEnvEnterDevice and
// KFFIEnvRestoreDevice on a machine without CUDA, the guard of typed calls, plain and contract
// exports and Contract::Wrap (the first CUDA tensor argument's device), and kffi::NoDeviceGuard.
//
// The guard's effect (a CUDA context switch) needs a GPU; what it asks for does not. This binary
// defines KFFIEnvEnterDevice and KFFIEnvRestoreDevice itself, in front of libkffi's: they forward
// to the runtime unless a test installs a GuardLog, which records each request and answers it
// itself (nothing switched, a restore token, or a failure), as the runtime would with a CUDA
// driver. Without a log every call behaves exactly as libkffi's: the rest of the suite sees the
// runtime's functions.
// SPDX-License-Identifier: Apache-2.0
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <kffi/kffi.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "test_util.h"

namespace {

/// What the calls of one test asked for, and how to answer them.
struct GuardLog {
  std::vector<std::pair<int32_t, int32_t>> entered;  // (device_type, device_id)
  std::vector<void*> restored;
  void* token = nullptr;  // handed out as *out_restore (not NULL: as if a context was switched)
  bool fail = false;      // raise a ValueError instead
};
GuardLog* g_log = nullptr;

/// Installs a GuardLog for a scope.
class LogScope {
 public:
  explicit LogScope(GuardLog* log) { g_log = log; }
  ~LogScope() { g_log = nullptr; }
  LogScope(const LogScope&) = delete;
  LogScope& operator=(const LogScope&) = delete;
};

template <typename Fn>
Fn Runtimes(const char* name) {
  static_assert(sizeof(Fn) == sizeof(void*), "a function pointer");
  void* sym = dlsym(RTLD_NEXT, name);
  if (sym == nullptr) std::abort();  // libkffi is linked: it defines both
  return reinterpret_cast<Fn>(sym);
}

}  // namespace

extern "C" int KFFIEnvEnterDevice(int32_t device_type, int32_t device_id, void** out_restore) {
  static const auto real = Runtimes<int (*)(int32_t, int32_t, void**)>("KFFIEnvEnterDevice");
  if (g_log == nullptr) return real(device_type, device_id, out_restore);
  g_log->entered.emplace_back(device_type, device_id);
  if (g_log->fail) {
    KFFIErrorSetRaisedFromCStr("ValueError", "a CUDA device this process does not have");
    return -1;
  }
  *out_restore = g_log->token;
  return 0;
}

extern "C" void KFFIEnvRestoreDevice(int32_t device_type, void* restore) {
  static const auto real = Runtimes<void (*)(int32_t, void*)>("KFFIEnvRestoreDevice");
  if (g_log == nullptr) return real(device_type, restore);
  EXPECT_EQ(device_type, kDLCUDA);
  g_log->restored.push_back(restore);
}

namespace {

using kffi::ConstTensorView;
using kffi::Function;
using kffi::TensorView;

const DLDevice kCPU{kDLCPU, 0};

/// A float tensor in host memory that claims to live on `device` (the kernels here run on the
/// CPU: only the guard reads the device).
struct Fake {
  std::vector<float> data;
  std::vector<int64_t> shape;
  DLTensor t;
  Fake(DLDevice device, std::vector<float> values)
      : data(std::move(values)), shape{static_cast<int64_t>(data.size())} {
    t = DLTensor{data.data(), device, 1, kffi::dtypes::float32, shape.data(), nullptr, 0};
  }
};

DLDevice Cuda(int32_t id) { return DLDevice{kDLCUDA, id}; }

using Entered = std::vector<std::pair<int32_t, int32_t>>;

// y = x * factor.
void Scale(TensorView y, ConstTensorView x, double factor) {
  for (int64_t i = 0; i < x.numel(); ++i) {
    y.data<float>()[i] = static_cast<float>(x.data<float>()[i] * factor);
  }
}

int g_throwing_calls = 0;
void Throwing(ConstTensorView) {
  ++g_throwing_calls;
  KFFI_THROW(RuntimeError) << "the kernel failed";
}

constexpr char kScaleContract[] =
    "y: Tensor([n], float32, mut), x: Tensor([n], float32), factor: float";

}  // namespace

KFFI_EXPORT_DOC(test_guard_scale, Scale, "", "y, x, factor");
KFFI_EXPORT_DOC(test_guard_scale_unguarded, kffi::NoDeviceGuard<Scale>, "", "y, x, factor");
KFFI_EXPORT_CONTRACT(test_guard_scale_contract, Scale, kScaleContract);
KFFI_EXPORT_CONTRACT(test_guard_scale_contract_unguarded, kffi::NoDeviceGuard<Scale>,
                     kScaleContract);

namespace {

using kffi::Module;

void* Symbol(int (*fn)(void*, const KFFIAny*, int32_t, KFFIAny*)) {
  return reinterpret_cast<void*>(fn);
}

/// The metadata of an `..._unguarded` export, named as its guarded twin.
std::string WithoutUnguarded(std::string meta) {
  const std::string suffix = "_unguarded";
  for (size_t at = meta.find(suffix); at != std::string::npos; at = meta.find(suffix, at)) {
    meta.erase(at, suffix.size());
  }
  return meta;
}

bool CudaDriverLoaded() {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
  if (lib == nullptr) return false;
  dlclose(lib);
  return true;
}

TEST(DeviceGuard, EnterDeviceWithoutACudaDriverChangesNothing) {
  if (CudaDriverLoaded()) GTEST_SKIP() << "libcuda.so.1 is loaded in this process";
  void* restore = &restore;
  EXPECT_EQ(KFFIEnvEnterDevice(kDLCUDA, 0, &restore), 0);
  EXPECT_EQ(restore, nullptr);
  // Without the driver no CUDA memory exists: any index is let through unchanged.
  restore = &restore;
  EXPECT_EQ(KFFIEnvEnterDevice(kDLCUDA, 7, &restore), 0);
  EXPECT_EQ(restore, nullptr);
  // The guard never loads the driver itself.
  EXPECT_FALSE(CudaDriverLoaded());
  KFFIEnvRestoreDevice(kDLCUDA, nullptr);  // nothing to restore: a no-op
}

TEST(DeviceGuard, EnterDeviceOnTheCpuChangesNothing) {
  void* restore = &restore;
  EXPECT_EQ(KFFIEnvEnterDevice(kDLCPU, 0, &restore), 0);
  EXPECT_EQ(restore, nullptr);
  restore = &restore;
  EXPECT_EQ(KFFIEnvEnterDevice(kDLCUDAHost, 3, &restore), 0);
  EXPECT_EQ(restore, nullptr);
  KFFIEnvRestoreDevice(kDLCPU, nullptr);
}

TEST(DeviceGuard, EnterDeviceNeedsAPlaceForTheRestoreToken) {
  EXPECT_EQ(KFFIEnvEnterDevice(kDLCUDA, 0, nullptr), -1);
  ExpectError("ValueError", "KFFIEnvEnterDevice: out_restore must not be NULL",
              [] { kffi::details::ThrowRaisedError(-1); });
  EXPECT_EQ(KFFIEnvEnterDevice(kDLCPU, 0, nullptr), -1);
  ExpectError("ValueError", "KFFIEnvEnterDevice: out_restore must not be NULL",
              [] { kffi::details::ThrowRaisedError(-1); });
}

TEST(DeviceGuard, FakeCudaTensorsStillRunWithoutADriver) {
  if (CudaDriverLoaded()) GTEST_SKIP() << "libcuda.so.1 is loaded in this process";
  // No log: the runtime's own functions answer, and do nothing.
  Fake y(Cuda(0), {0, 0}), x(Cuda(0), {1, 2});
  Module::InvokeExternC(Symbol(&__kffi_test_guard_scale), &y.t, &x.t, 3.0);
  EXPECT_EQ(y.data, (std::vector<float>{3, 6}));
  Module::InvokeExternC(Symbol(&__kffi_test_guard_scale_contract), &y.t, &x.t, 2.0);
  EXPECT_EQ(y.data, (std::vector<float>{2, 4}));
  Function typed = Function::FromTyped(&Scale, "scale");
  typed(&y.t, &x.t, 5.0);
  EXPECT_EQ(y.data, (std::vector<float>{5, 10}));
}

TEST(DeviceGuard, TypedCallsEnterTheFirstCudaTensorsDevice) {
  Function f = Function::FromTyped(
      [](ConstTensorView a, kffi::Optional<TensorView> b, const DLTensor* c, int64_t k) {
        return k + a.ndim() * 100 + (b.has_value() ? 1 : 0) + c->ndim;
      },
      "f");
  Fake cpu(kCPU, {1}), cuda1(Cuda(1), {1}), cuda2(Cuda(2), {1}), cuda3(Cuda(3), {1});
  GuardLog log;
  LogScope scope(&log);
  EXPECT_EQ(f(&cpu.t, &cuda1.t, &cuda2.t, 10).cast<int64_t>(), 112);
  EXPECT_EQ(log.entered, (Entered{{kDLCUDA, 1}}));
  log.entered.clear();
  EXPECT_EQ(f(&cuda3.t, nullptr, &cuda2.t, 10).cast<int64_t>(), 111);
  EXPECT_EQ(log.entered, (Entered{{kDLCUDA, 3}}));
  log.entered.clear();
  EXPECT_EQ(f(&cpu.t, nullptr, &cuda2.t, 10).cast<int64_t>(), 111);  // an Optional left None
  EXPECT_EQ(log.entered, (Entered{{kDLCUDA, 2}}));
  log.entered.clear();
  // Only CPU tensors, or no tensor parameter at all: no request.
  EXPECT_EQ(f(&cpu.t, &cpu.t, &cpu.t, 10).cast<int64_t>(), 112);
  Function ints = Function::FromTyped([](int64_t a, int64_t b) { return a + b; }, "ints");
  EXPECT_EQ(ints(1, 2).cast<int64_t>(), 3);
  EXPECT_TRUE(log.entered.empty());
  // Owned Tensor parameters count too.
  kffi::Tensor owned = kffi::Tensor::FromEnvAlloc({2}, kffi::dtypes::float32, kCPU);
  kffi::Tensor on_cuda = owned.as_strided({2}, {1});
  const_cast<DLTensor*>(on_cuda.GetDLTensorPtr())->device = Cuda(4);
  Function own = Function::FromTyped([](kffi::Tensor t) { return t.numel(); }, "own");
  EXPECT_EQ(own(on_cuda).cast<int64_t>(), 2);
  EXPECT_EQ(log.entered, (Entered{{kDLCUDA, 4}}));
  EXPECT_TRUE(log.restored.empty());  // nothing was switched: nothing to restore
}

TEST(DeviceGuard, TheCallersDeviceIsRestoredAfterTheCallAndOnErrors) {
  int token = 0;
  GuardLog log;
  log.token = &token;  // as if the call's device was not current
  LogScope scope(&log);
  Fake y(Cuda(1), {0}), x(Cuda(1), {2});
  Module::InvokeExternC(Symbol(&__kffi_test_guard_scale), &y.t, &x.t, 4.0);
  EXPECT_EQ(y.data[0], 8.0f);
  EXPECT_EQ(log.entered, (Entered{{kDLCUDA, 1}}));
  EXPECT_EQ(log.restored, (std::vector<void*>{&token}));
  // The function throws: restored all the same.
  Function throwing = Function::FromTyped(&Throwing, "throwing");
  EXPECT_EQ(CatchError([&] { throwing(&x.t); }).message(), "the kernel failed");
  EXPECT_EQ(g_throwing_calls, 1);
  EXPECT_EQ(log.restored.size(), 2u);
  // An argument that does not convert: refused, and restored.
  EXPECT_EQ(CatchError([&] {
              Module::InvokeExternC(Symbol(&__kffi_test_guard_scale), &y.t, &x.t, "two");
            }).kind(),
            "TypeError");
  EXPECT_EQ(log.restored.size(), 3u);
  // A contract export restores too.
  Module::InvokeExternC(Symbol(&__kffi_test_guard_scale_contract), &y.t, &x.t, 0.5);
  EXPECT_EQ(y.data[0], 1.0f);
  EXPECT_EQ(log.restored.size(), 4u);
}

TEST(DeviceGuard, AFailureToEnterTheDeviceFailsTheCallBeforeTheFunctionRuns) {
  GuardLog log;
  log.fail = true;
  LogScope scope(&log);
  Fake x(Cuda(9), {1});
  Function throwing = Function::FromTyped(&Throwing, "throwing");
  const int before = g_throwing_calls;
  ExpectError("ValueError", "a CUDA device this process does not have", [&] { throwing(&x.t); });
  EXPECT_EQ(g_throwing_calls, before);
  EXPECT_EQ(log.entered, (Entered{{kDLCUDA, 9}}));
  EXPECT_TRUE(log.restored.empty());
}

TEST(DeviceGuard, NoDeviceGuardOptsOut) {
  GuardLog log;
  LogScope scope(&log);
  Fake y(Cuda(1), {0, 0, 0}), x(Cuda(1), {1, 2, 3});
  // The plain export enters cuda:1; the opted-out one runs as is, with the same arguments.
  Module::InvokeExternC(Symbol(&__kffi_test_guard_scale), &y.t, &x.t, 2.0);
  EXPECT_EQ(log.entered, (Entered{{kDLCUDA, 1}}));
  log.entered.clear();
  Module::InvokeExternC(Symbol(&__kffi_test_guard_scale_unguarded), &y.t, &x.t, 3.0);
  EXPECT_EQ(y.data, (std::vector<float>{3, 6, 9}));
  Module::InvokeExternC(Symbol(&__kffi_test_guard_scale_contract_unguarded), &y.t, &x.t, -1.0);
  EXPECT_EQ(y.data, (std::vector<float>{-1, -2, -3}));
  Function typed = Function::FromTyped(kffi::NoDeviceGuard<Scale>, "scale");
  typed(&y.t, &x.t, 10.0);
  EXPECT_EQ(y.data, (std::vector<float>{10, 20, 30}));
  Function checked =
      kffi::FunctionWithContract(kffi::NoDeviceGuard<Scale>, "scale", kScaleContract);
  checked(&y.t, &x.t, 0.5);
  EXPECT_EQ(y.data, (std::vector<float>{0.5, 1, 1.5}));
  EXPECT_TRUE(log.entered.empty());
  // The guarded contract export enters.
  Module::InvokeExternC(Symbol(&__kffi_test_guard_scale_contract), &y.t, &x.t, 1.0);
  EXPECT_EQ(log.entered, (Entered{{kDLCUDA, 1}}));

  // Opting out changes neither the signature nor the metadata, nor the checks.
  auto meta = [](int (*fn)(void*, const KFFIAny*, int32_t, KFFIAny*)) {
    return Module::InvokeExternC(Symbol(fn)).cast<std::string>();
  };
  EXPECT_EQ(WithoutUnguarded(meta(&__kffi__meta_test_guard_scale_unguarded)),
            meta(&__kffi__meta_test_guard_scale));
  EXPECT_EQ(CatchError([&] {
              Module::InvokeExternC(Symbol(&__kffi_test_guard_scale_unguarded), &y.t, 1, 2.0);
            }).message(),
            "x: expected Tensor, got int (argument #1 of `test_guard_scale_unguarded(y: "
            "Tensor(mut), x: Tensor, factor: float) -> None`)");
  EXPECT_EQ(WithoutUnguarded(meta(&__kffi__meta_test_guard_scale_contract_unguarded)),
            meta(&__kffi__meta_test_guard_scale_contract));
}

TEST(DeviceGuard, AWrappedFunctionRunsOnTheFirstCudaTensorsDevice) {
  // A packed function behind a contract (Contract::Wrap, as with_contract wraps a TVM-FFI export):
  // its parameter types are unknown, so every argument is looked at.
  Function inner = Function::FromPacked(
      [](kffi::PackedArgs args, kffi::Any* rv) { *rv = static_cast<int64_t>(args.size()); });
  Function wrapped =
      kffi::FunctionWithContract(inner, "w", "k: int, a: Tensor([n], *), b: Tensor([n], *)");
  Fake cpu(kCPU, {1}), cuda2(Cuda(2), {1});
  GuardLog log;
  LogScope scope(&log);
  EXPECT_EQ(wrapped(1, &cpu.t, &cpu.t).cast<int64_t>(), 3);
  EXPECT_TRUE(log.entered.empty());
  EXPECT_EQ(wrapped(1, &cuda2.t, &cuda2.t).cast<int64_t>(), 3);
  EXPECT_EQ(log.entered, (Entered{{kDLCUDA, 2}}));
}

}  // namespace
