// tests/cpp/core/test_env.cc: per-thread streams, the tensor allocator levels and signal checks.
// SPDX-License-Identifier: Apache-2.0
#include <gtest/gtest.h>
#include <kffi/env.h>

#include <thread>

namespace {

constexpr DLDevice kCuda0{kDLCUDA, 0};
constexpr DLDevice kCuda1{kDLCUDA, 1};

KFFIStreamHandle FakeStream(uintptr_t id) { return reinterpret_cast<KFFIStreamHandle>(id); }

TEST(Env, StreamScopeRestoresThePreviousStream) {
  EXPECT_EQ(kffi::env::GetStream(kCuda0), nullptr);
  {
    kffi::env::StreamScope outer(kCuda0, FakeStream(0x10));
    EXPECT_EQ(outer.previous(), nullptr);
    EXPECT_EQ(kffi::env::GetStream(kCuda0), FakeStream(0x10));
    {
      kffi::env::StreamScope inner(kCuda0, FakeStream(0x20));
      EXPECT_EQ(inner.previous(), FakeStream(0x10));
      EXPECT_EQ(kffi::env::GetStream(kCuda0), FakeStream(0x20));
      EXPECT_EQ(kffi::env::GetStream(kCuda1), nullptr);  // per device
    }
    EXPECT_EQ(kffi::env::GetStream(kCuda0), FakeStream(0x10));
  }
  EXPECT_EQ(kffi::env::GetStream(kCuda0), nullptr);
}

TEST(Env, StreamsAreIsolatedBetweenThreads) {
  kffi::env::StreamScope mine(kCuda0, FakeStream(0x30));
  KFFIStreamHandle seen_before = FakeStream(1), seen_after = FakeStream(1);
  std::thread other([&] {
    seen_before = kffi::env::GetStream(kCuda0);
    kffi::env::StreamScope theirs(kCuda0, FakeStream(0x40));
    seen_after = kffi::env::GetStream(kCuda0);
  });
  other.join();
  EXPECT_EQ(seen_before, nullptr);
  EXPECT_EQ(seen_after, FakeStream(0x40));
  EXPECT_EQ(kffi::env::GetStream(kCuda0), FakeStream(0x30));
  EXPECT_EQ(KFFIEnvGetStream(kDLCUDA, 0), FakeStream(0x30));  // the C view agrees
}

int AllocA(DLTensor*, DLManagedTensorVersioned**, void*,
           void (*)(void*, const char*, const char*)) {
  return -1;
}
int AllocB(DLTensor*, DLManagedTensorVersioned**, void*,
           void (*)(void*, const char*, const char*)) {
  return -1;
}

TEST(Env, ThreadAllocatorTakesPrecedenceOverGlobal) {
  ASSERT_EQ(kffi::env::GetTensorAllocator(), nullptr);
  {
    kffi::env::TensorAllocatorScope global(&AllocA, /*global=*/true);
    EXPECT_EQ(kffi::env::GetTensorAllocator(), &AllocA);
    {
      kffi::env::TensorAllocatorScope local(&AllocB);
      EXPECT_EQ(kffi::env::GetTensorAllocator(), &AllocB);
      DLPackManagedTensorAllocator other_thread = nullptr;
      std::thread t([&] { other_thread = kffi::env::GetTensorAllocator(); });
      t.join();
      EXPECT_EQ(other_thread, &AllocA);  // sees the global one, not this thread's
    }
    EXPECT_EQ(kffi::env::GetTensorAllocator(), &AllocA);
  }
  EXPECT_EQ(kffi::env::GetTensorAllocator(), nullptr);
}

int g_hook_calls = 0;
int RaisingHook() {
  ++g_hook_calls;
  KFFIErrorSetRaisedFromCStr("KeyboardInterrupt", "interrupted by signal 2");
  return -1;
}
int QuietHook() {
  ++g_hook_calls;
  return 0;
}

TEST(Env, CheckSignalsThrowsWhatTheHookRaised) {
  int (*prev)(void) = nullptr;
  KFFIEnvSetCheckSignalsHook(&QuietHook, &prev);
  g_hook_calls = 0;
  EXPECT_NO_THROW(kffi::env::CheckSignals());
  KFFIEnvSetCheckSignalsHook(&RaisingHook, nullptr);
  try {
    kffi::env::CheckSignals();
    ADD_FAILURE() << "expected KeyboardInterrupt";
  } catch (const kffi::Error& e) {
    EXPECT_EQ(e.kind(), "KeyboardInterrupt");
    EXPECT_EQ(e.message(), "interrupted by signal 2");
  }
  EXPECT_EQ(g_hook_calls, 2);
  KFFIEnvSetCheckSignalsHook(prev, nullptr);
  // The slot was emptied by the throw: nothing stale is left for the next call.
  KFFIObjectHandle stale = nullptr;
  KFFIErrorMoveFromRaised(&stale);
  EXPECT_EQ(stale, nullptr);
}

TEST(Env, CheckSignalsWithoutHookIsANoOp) {
  int (*prev)(void) = nullptr;
  KFFIEnvSetCheckSignalsHook(nullptr, &prev);
  EXPECT_NO_THROW(kffi::env::CheckSignals());
  KFFIEnvSetCheckSignalsHook(prev, nullptr);
}

}  // namespace
