// tests/cpp/test_hostile_runtime.cc: issue 29 through the C++ API (the Python tests are
// test_hostile_*.py): a thread's forced unwind passes every kind of kffi call (class 5), nested
// Contract::Wrap costs no C stack per level (class 9), a dtype of 0 bits or 0 lanes is refused
// wherever a tensor is made from one (class 10), and data registered in the system library is
// never called (class 1; libraries: test_hostile_symbols.py).
// SPDX-License-Identifier: Apache-2.0
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <kffi/contract.h>
#include <kffi/kffi.h>
#include <pthread.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

namespace {

using kffi::Any;
using kffi::Contract;
using kffi::Function;

// Runs body on a new thread with a stack of stack_bytes; returns once the thread has ended.
void RunOnThread(size_t stack_bytes, const std::function<void()>& body) {
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, stack_bytes);
  pthread_t thread;
  auto* copy = new std::function<void()>(body);
  ASSERT_EQ(pthread_create(
                &thread, &attr,
                [](void* p) -> void* {
                  auto* f = static_cast<std::function<void()>*>(p);
                  (*f)();
                  return nullptr;
                },
                copy),
            0);
  pthread_join(thread, nullptr);
  pthread_attr_destroy(&attr);
  delete copy;
}

// ---- class 5: a forced unwind passes every kind of call ------------------------------------

// The thread ends inside the innermost call (as CPython ends a daemon thread that wants the GIL
// during finalization). Each wrapper's catch-all must let the unwind through; a swallowed one
// aborts the process, so each case runs in a death-test child that must exit 0.
Function Exiting() {
  return Function::FromPacked([](kffi::PackedArgs, Any*) { pthread_exit(nullptr); }, "exits");
}

// Under UndefinedBehaviorSanitizer the forced unwind cannot be tested: catching it (as
// `abi::__forced_unwind&`, the one way to tell it apart) binds a null reference, which UBSan
// reports, fatally with -fno-sanitize-recover. The runtime is found by one of its symbols.
bool UndefinedBehaviorSanitizerIsOn() {
  return dlsym(RTLD_DEFAULT, "__ubsan_handle_type_mismatch_v1") != nullptr;
}

void ExpectThreadEndsInside(const std::function<void()>& call) {
  if (UndefinedBehaviorSanitizerIsOn()) GTEST_SKIP() << "UBSan reports the forced unwind's catch";
  // The child re-executes the test binary (no threads of the parent in it). Under qemu-user with
  // no binfmt_misc entry that exec fails, so the cross build's ctest (tests/CMakeLists.txt) asks
  // for the forking style: each test is a process of its own there, with no other thread yet.
  const char* style = std::getenv("KFFI_TEST_DEATH_TEST_STYLE");
  GTEST_FLAG_SET(death_test_style, style != nullptr ? style : "threadsafe");
  EXPECT_EXIT(
      {
        RunOnThread(1 << 20, call);
        std::exit(0);
      },
      testing::ExitedWithCode(0), "");
}

TEST(HostileShutdown, ForcedUnwindPassesAPackedFunction) {
  ExpectThreadEndsInside([] { Exiting()(1); });
}

TEST(HostileShutdown, ForcedUnwindPassesATypedFunction) {
  ExpectThreadEndsInside([] {
    Function f = Exiting();
    Function typed = Function::FromTyped([f](int64_t x) { return f(x).cast<int64_t>(); }, "t");
    typed(1);
  });
}

TEST(HostileShutdown, ForcedUnwindPassesAContractWrapper) {
  ExpectThreadEndsInside([] {
    Function checked = Contract::Parse("w", "x: int64").Wrap(Exiting());
    checked = Contract::Parse("w", "x: int64[0, 10]").Wrap(checked);
    checked(int64_t{1});
  });
}

TEST(HostileShutdown, ForcedUnwindPassesTheCApi) {
  ExpectThreadEndsInside([] {
    Function f = Exiting();
    KFFIAny arg;
    kffi::details::SetNone(&arg);
    KFFIAny result;
    kffi::details::SetNone(&result);
    KFFIFunctionCall(kffi::details::ObjectUnsafe::GetHandle(kffi::details::ObjectRefData(f)), &arg,
                     1, &result);
  });
}

// ---- class 9: nested wrappers -----------------------------------------------------------------

TEST(HostileDepth, NestedWrappersCostNoStackPerLevel) {
  int64_t calls = 0;
  Function inner = Function::FromTyped([&calls](int64_t x) { return ++calls, x + 1; }, "inner");
  Function w = Contract::Parse("f", "x: int64[0, 10]").Wrap(inner);
  Contract outer = Contract::Parse("f", "x: int64");
  Contract ranged = Contract::Parse("f", "x: int64[-5, 100]");
  for (int i = 0; i < 100000; ++i) w = (i % 2 ? outer : ranged).Wrap(w);
  inner = Function();
  // A 256 KB stack: each level taking a frame would overflow it many times over.
  RunOnThread(256 << 10, [&] {
    EXPECT_EQ(w(int64_t{3}).cast<int64_t>(), 4);
    EXPECT_THROW(w(int64_t{11}), kffi::Error);   // the innermost range
    EXPECT_THROW(w(int64_t{101}), kffi::Error);  // an outer range
    EXPECT_THROW(w(std::string("a")), kffi::Error);
    w = Function();  // the last reference: the chain is released on this thread
  });
  EXPECT_EQ(calls, 1);
}

TEST(HostileDepth, ASharedWrapperStaysAliveInsideAChain) {
  Function inner = Function::FromTyped([](int64_t x) { return x * 2; }, "inner");
  Function middle = Contract::Parse("f", "x: int64").Wrap(inner);
  Function outer = Contract::Parse("f", "x: int64[0, 10]").Wrap(middle);
  outer = Function();  // middle is still held: released no further than outer
  EXPECT_EQ(middle(int64_t{21}).cast<int64_t>(), 42);
}

// ---- class 10: dtypes without a size ---------------------------------------------------------

TEST(HostileDType, ZeroBitsOrLanesAreRefusedWhereverATensorIsMade) {
  const int64_t shape[1] = {4};
  for (DLDataType dtype : {DLDataType{kDLFloat, 0, 1}, DLDataType{kDLInt, 8, 0},
                           DLDataType{kDLUInt, 0, 0}, DLDataType{kDLBool, 0, 4}}) {
    SCOPED_TRACE(std::to_string(dtype.code) + "/" + std::to_string(dtype.bits) + "/" +
                 std::to_string(dtype.lanes));
    EXPECT_THROW(kffi::Tensor::FromEnvAlloc(kffi::IntArrayView(shape, 1), dtype, {kDLCPU, 0}),
                 kffi::Error);
    EXPECT_THROW(kffi::Tensor::FromNDAlloc(kffi::details::HostAlignedAlloc(),
                                           kffi::IntArrayView(shape, 1), dtype, {kDLCPU, 0}),
                 kffi::Error);
    // DLPack import: the deleter runs once, on refusal too.
    static int deleted;
    deleted = 0;
    DLManagedTensorVersioned managed{};
    managed.version = {DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION};
    managed.dl_tensor.ndim = 1;
    managed.dl_tensor.shape = const_cast<int64_t*>(shape);
    managed.dl_tensor.dtype = dtype;
    managed.dl_tensor.device = {kDLCPU, 0};
    managed.deleter = [](DLManagedTensorVersioned*) { ++deleted; };
    KFFIObjectHandle h = nullptr;
    EXPECT_EQ(KFFITensorFromDLPackVersioned(&managed, 0, 0, &h), -1);
    EXPECT_EQ(h, nullptr);
    EXPECT_EQ(deleted, 1);
    KFFIObjectHandle err = nullptr;
    KFFIErrorMoveFromRaised(&err);
    ASSERT_NE(err, nullptr);
    const KFFIByteArray& m = KFFIErrorGetCellPtr(err)->message;
    EXPECT_NE(std::string(m.data, m.size).find(dtype.bits == 0 ? "0 bits per lane" : "0 lanes"),
              std::string::npos);
    KFFIObjectDecRef(err);
    // A borrowed DLTensor* argument made owned.
    DLTensor t = managed.dl_tensor;
    KFFIAny view;
    view.type_index = kKFFIDLTensorPtr;
    view.zero_padding = 0;
    view.v_ptr = &t;
    KFFIAny owned;
    EXPECT_EQ(KFFIAnyViewToOwnedAny(&view, &owned), -1);
    KFFIErrorMoveFromRaised(&err);
    ASSERT_NE(err, nullptr);
    KFFIObjectDecRef(err);
  }
}

// ---- class 1: data is never called ----------------------------------------------------------

// Statically linked code registers addresses by hand: one that is data (here a plain array) is
// refused, naming the symbol, where the function or its metadata would be called. Before the
// guard the call jumped into the array (SIGSEGV), so each case runs in a death-test child.
char g_not_code[16];

int GoodExport(void*, const KFFIAny*, int32_t, KFFIAny* result) {
  result->type_index = kKFFIInt;
  result->zero_padding = 0;
  result->v_int64 = 5;
  return 0;
}

// The death-test child: registers (in the child only, so the system library of the other tests
// stays as it was), looks up, and returns 0 when each lookup was refused as expected.
int LookUpRegisteredData() {
  const bool registered =
      KFFIModuleRegisterSystemLibSymbol("__kffi_hostile_data_fn", g_not_code) == 0 &&
      KFFIModuleRegisterSystemLibSymbol("__kffi_hostile_data_meta",
                                        reinterpret_cast<void*>(&GoodExport)) == 0 &&
      KFFIModuleRegisterSystemLibSymbol("__kffi__meta_hostile_data_meta", g_not_code) == 0;
  if (!registered) return 2;
  kffi::Module sys = kffi::Module::SystemLib();
  std::string fn;
  std::string meta;
  try {
    sys.GetFunction("hostile_data_fn");
  } catch (const kffi::Error& e) {
    fn = e.kind() + ": " + e.message();
  }
  try {
    sys.GetFunctionMetadata("hostile_data_meta");
  } catch (const kffi::Error& e) {
    meta = e.kind() + ": " + e.message();
  }
  const int64_t good = sys.GetFunctionRequired("hostile_data_meta")().cast<int64_t>();
  const std::string expected = "RuntimeError: Cannot use module `system_lib`: the symbol `__kffi_";
  const bool ok =
      fn.rfind(expected + "hostile_data_fn` was registered with 0x", 0) == 0 &&
      meta.rfind(expected + "_meta_hostile_data_meta` was registered with 0x", 0) == 0 &&
      fn.find("that is not executable: it is not code, and kffi calls only code") !=
          std::string::npos &&
      good == 5;
  if (!ok) std::fprintf(stderr, "fn: %s\nmeta: %s\n", fn.c_str(), meta.c_str());
  return ok ? 0 : 1;
}

TEST(HostileSymbols, DataRegisteredInTheSystemLibraryIsNeverCalled) {
  EXPECT_EXIT(std::exit(LookUpRegisteredData()), testing::ExitedWithCode(0), "");
}

}  // namespace
