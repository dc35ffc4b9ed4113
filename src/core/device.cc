// src/core/device.cc: the device a call runs on (KFFIEnvEnterDevice), through CUDA's driver.
//
// A CUDA device is current for a thread when its context is: the device's primary context is the
// one CUDA's runtime API (cudaSetDevice), PyTorch, JAX and CuPy make current, so switching it is
// what cudaSetDevice does, and a kernel library's own CUDA runtime sees the switch. kffi links no
// CUDA library: it uses the driver that the process has already loaded (a CUDA tensor cannot exist
// without it) and never loads one itself.
// SPDX-License-Identifier: Apache-2.0
#include <dlfcn.h>
#include <kffi/c_api.h>
#include <link.h>

#include <atomic>
#include <mutex>
#include <string>

#include "core/code_symbol.h"
#include "core/runtime_internal.h"

namespace {

// The driver API's types, as cuda.h declares them (its ABI is stable).
using CUresult = int;
using CUcontext = void*;
using CUdevice = int;

struct Driver {
  CUresult (*init)(unsigned);
  CUresult (*device_get_count)(int*);
  CUresult (*device_get)(CUdevice*, int);
  CUresult (*primary_ctx_retain)(CUcontext*, CUdevice);
  CUresult (*ctx_get_current)(CUcontext*);
  CUresult (*ctx_set_current)(CUcontext);
  CUresult (*ctx_get_device)(CUdevice*);
  CUresult (*get_error_name)(CUresult, const char**);
  int device_count = 0;
};

// Primary contexts by device index, retained once and kept (as CUDA's runtime keeps them).
constexpr int kMaxDevices = 256;
std::atomic<CUcontext> g_primary[kMaxDevices];
std::atomic<const Driver*> g_driver{nullptr};
std::mutex g_driver_mutex;
// What KFFIEnvRestoreDevice restores when no context was current before the call.
char g_no_context;

template <typename T>
bool Bind(void* lib, const char* name, T* out) {
  std::string not_code;  // a driver whose symbol is not code lacks that function
  *out = reinterpret_cast<T>(kffi::details::FindCodeSymbol(lib, name, &not_code));
  return *out != nullptr;
}

// The loader's count of objects ever added when the driver was last found missing: the driver can
// only have arrived since when the count moved (a dlopen probe costs far more than reading it).
std::atomic<unsigned long long> g_adds_when_missing{~0ULL};

int ReadAdds(dl_phdr_info* info, size_t, void* out) {
  *static_cast<unsigned long long*>(out) = info->dlpi_adds;
  return 1;  // the first object carries the process-wide counters
}

unsigned long long LoadedObjectAdds() {
  unsigned long long adds = 0;
  dl_iterate_phdr(&ReadAdds, &adds);
  return adds;
}

/// The driver when the process has loaded it, else NULL (asked again once the process has loaded
/// more objects: a framework may load it later). Made once, never freed: calls on any thread use
/// it until the process ends.
const Driver* LoadedDriver() {
  const Driver* d = g_driver.load(std::memory_order_acquire);
  if (d != nullptr) return d;
  const unsigned long long adds = LoadedObjectAdds();
  if (adds == g_adds_when_missing.load(std::memory_order_relaxed)) return nullptr;
  std::lock_guard<std::mutex> lock(g_driver_mutex);
  d = g_driver.load(std::memory_order_acquire);
  if (d != nullptr) return d;
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
  if (lib == nullptr) {
    g_adds_when_missing.store(adds, std::memory_order_relaxed);
    return nullptr;
  }
  auto* nd = new Driver();
  const bool bound = Bind(lib, "cuInit", &nd->init) &&
                     Bind(lib, "cuDeviceGetCount", &nd->device_get_count) &&
                     Bind(lib, "cuDeviceGet", &nd->device_get) &&
                     Bind(lib, "cuDevicePrimaryCtxRetain", &nd->primary_ctx_retain) &&
                     Bind(lib, "cuCtxGetCurrent", &nd->ctx_get_current) &&
                     Bind(lib, "cuCtxSetCurrent", &nd->ctx_set_current) &&
                     Bind(lib, "cuCtxGetDevice", &nd->ctx_get_device) &&
                     Bind(lib, "cuGetErrorName", &nd->get_error_name);
  if (!bound || nd->init(0) != 0 || nd->device_get_count(&nd->device_count) != 0) {
    delete nd;
    dlclose(lib);
    kffi::details::ThrowCApiError(
        "RuntimeError",
        "Cannot make a CUDA tensor's device current: the CUDA driver loaded in this process "
        "lacks the context functions kffi uses, or failed to initialise");
  }
  g_driver.store(nd, std::memory_order_release);
  return nd;
}

[[noreturn]] void ThrowCuda(const Driver* d, CUresult rc, const char* what, int32_t device_id) {
  const char* name = nullptr;
  if (d->get_error_name(rc, &name) != 0 || name == nullptr) name = "an unknown CUDA error";
  kffi::details::ThrowCApiError("RuntimeError", std::string("Cannot make cuda:") +
                                                    std::to_string(device_id) +
                                                    " current: " + what + " failed with " + name);
}

/// The primary context of a device, retained on first use.
CUcontext PrimaryContext(const Driver* d, int32_t device_id) {
  CUcontext ctx = g_primary[device_id].load(std::memory_order_acquire);
  if (ctx != nullptr) return ctx;
  CUdevice dev = 0;
  CUresult rc = d->device_get(&dev, device_id);
  if (rc != 0) ThrowCuda(d, rc, "cuDeviceGet", device_id);
  rc = d->primary_ctx_retain(&ctx, dev);
  if (rc != 0) ThrowCuda(d, rc, "cuDevicePrimaryCtxRetain", device_id);
  CUcontext expected = nullptr;
  // Two threads may both retain it: the context is the same, and the extra reference is kept.
  g_primary[device_id].compare_exchange_strong(expected, ctx, std::memory_order_acq_rel);
  return ctx;
}

}  // namespace

int KFFIEnvEnterDevice(int32_t device_type, int32_t device_id, void** out_restore) {
  KFFI_CAPI_BEGIN();
  kffi::details::CheckOutArg(out_restore, "KFFIEnvEnterDevice: out_restore");
  *out_restore = nullptr;
  if (device_type != kDLCUDA) return 0;
  const Driver* d = LoadedDriver();
  if (d == nullptr) return 0;  // no driver: no CUDA memory, nothing to run on
  if (device_id < 0 || device_id >= d->device_count || device_id >= kMaxDevices) {
    kffi::details::ThrowCApiError("ValueError",
                                  "A tensor on cuda:" + std::to_string(device_id) +
                                      ", a CUDA device this process does not have (it sees " +
                                      std::to_string(d->device_count) + ")");
  }
  // One device: whatever is current (or made current on first use) is on it. No driver call.
  if (d->device_count == 1) return 0;
  const CUcontext want = PrimaryContext(d, device_id);
  CUcontext current = nullptr;
  CUresult rc = d->ctx_get_current(&current);
  if (rc != 0) ThrowCuda(d, rc, "cuCtxGetCurrent", device_id);
  if (current == want) return 0;  // the common case: one query, one compare
  if (current != nullptr) {
    // A context of the caller's own on the right device (not the primary one) stays current.
    CUdevice dev = -1;
    if (d->ctx_get_device(&dev) == 0 && dev == device_id) return 0;
  }
  rc = d->ctx_set_current(want);
  if (rc != 0) ThrowCuda(d, rc, "cuCtxSetCurrent", device_id);
  *out_restore = current != nullptr ? current : static_cast<void*>(&g_no_context);
  KFFI_CAPI_END();
}

void KFFIEnvRestoreDevice(int32_t device_type, void* restore) {
  if (restore == nullptr || device_type != kDLCUDA) return;
  const Driver* d = g_driver.load(std::memory_order_acquire);
  if (d == nullptr) return;
  (void)d->ctx_set_current(restore == &g_no_context ? nullptr : restore);
}
