// src/core/env.cc: per-thread streams, the tensor allocator and the signal-check hook.
// SPDX-License-Identifier: Apache-2.0
#include <kffi/c_api.h>

#include <atomic>
#include <vector>

#include "core/runtime_internal.h"

namespace {

// A thread touches few devices, so a linear scan of a small vector beats a map.
struct StreamEntry {
  int32_t device_type;
  int32_t device_id;
  KFFIStreamHandle stream;
};
thread_local std::vector<StreamEntry> tls_streams;

thread_local DLPackManagedTensorAllocator tls_allocator = nullptr;
std::atomic<DLPackManagedTensorAllocator> g_allocator{nullptr};

// Installed by a language binding (Python checks its pending signals); raises the error itself.
std::atomic<int (*)(void)> g_check_signals_hook{nullptr};

}  // namespace

int KFFIEnvSetStream(int32_t device_type, int32_t device_id, KFFIStreamHandle stream,
                     KFFIStreamHandle* opt_out_prev) {
  KFFI_CAPI_BEGIN();
  for (StreamEntry& e : tls_streams) {
    if (e.device_type == device_type && e.device_id == device_id) {
      if (opt_out_prev != nullptr) *opt_out_prev = e.stream;
      e.stream = stream;
      return 0;
    }
  }
  // Grow first so that a failure leaves *opt_out_prev and the table as they were.
  tls_streams.push_back(StreamEntry{device_type, device_id, stream});
  if (opt_out_prev != nullptr) *opt_out_prev = nullptr;
  KFFI_CAPI_END();
}

KFFIStreamHandle KFFIEnvGetStream(int32_t device_type, int32_t device_id) {
  for (const StreamEntry& e : tls_streams) {
    if (e.device_type == device_type && e.device_id == device_id) return e.stream;
  }
  return nullptr;
}

int KFFIEnvSetTensorAllocator(DLPackManagedTensorAllocator allocator, int write_to_global,
                              DLPackManagedTensorAllocator* opt_out_prev) {
  DLPackManagedTensorAllocator prev;
  if (write_to_global != 0) {
    prev = g_allocator.exchange(allocator, std::memory_order_acq_rel);
  } else {
    prev = tls_allocator;
    tls_allocator = allocator;
  }
  if (opt_out_prev != nullptr) *opt_out_prev = prev;
  return 0;
}

DLPackManagedTensorAllocator KFFIEnvGetTensorAllocator(void) {
  if (tls_allocator != nullptr) return tls_allocator;
  return g_allocator.load(std::memory_order_acquire);
}

int KFFIEnvCheckSignals(void) {
  int (*hook)(void) = g_check_signals_hook.load(std::memory_order_acquire);
  return hook != nullptr ? hook() : 0;
}

void KFFIEnvSetCheckSignalsHook(int (*hook)(void), int (**opt_out_prev)(void)) {
  int (*prev)(void) = g_check_signals_hook.exchange(hook, std::memory_order_acq_rel);
  if (opt_out_prev != nullptr) *opt_out_prev = prev;
}
