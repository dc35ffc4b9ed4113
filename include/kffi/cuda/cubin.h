// include/kffi/cuda/cubin.h: cubin / fatbin / PTX images loaded through the CUDA driver API and
// their kernels launched (kffi::cuda::CubinModule), and KFFI_EMBED_CUBIN for images in a library.
// SPDX-License-Identifier: Apache-2.0
#ifndef KFFI_CUDA_CUBIN_H_
#define KFFI_CUDA_CUBIN_H_

#include <dlfcn.h>
#include <kffi/error.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

// Header-only and free of the CUDA headers: the driver (libcuda.so.1) is opened with dlopen on
// first use, so a library that includes this header links no CUDA library and loads on a machine
// without a GPU (the first load of an image is then a RuntimeError saying so). Images are loaded
// with the context-independent library API (cuLibraryLoadData, CUDA 12.0 drivers and newer); a
// kernel launches in the context current on the calling thread (the device's primary context,
// which CUDA's runtime, PyTorch, JAX and CuPy use, is made current when none is).

namespace kffi {
namespace cuda {

/// Grid or block dimensions of a launch.
struct Dim3 {
  uint32_t x = 1, y = 1, z = 1;
};

namespace details {

// The driver API's types and constants, as cuda.h declares them (its ABI is stable).
using CUresult = int;
using CUdevice = int;
using CUcontext = void*;
using CUlibrary = void*;
using CUkernel = void*;
using CUfunction = void*;
using CUstream = void*;
constexpr int kCuAttrComputeCapabilityMajor = 75;
constexpr int kCuAttrComputeCapabilityMinor = 76;
constexpr int kCuFuncAttrMaxDynamicSharedSizeBytes = 8;

/// The driver functions this header uses, bound once per process.
struct DriverApi {
  CUresult (*init)(unsigned);
  CUresult (*get_error_name)(CUresult, const char**);
  CUresult (*get_error_string)(CUresult, const char**);
  CUresult (*device_get)(CUdevice*, int);
  CUresult (*device_get_count)(int*);
  CUresult (*device_get_attribute)(int*, int, CUdevice);
  CUresult (*primary_ctx_retain)(CUcontext*, CUdevice);
  CUresult (*ctx_get_current)(CUcontext*);
  CUresult (*ctx_set_current)(CUcontext);
  CUresult (*library_load_data)(CUlibrary*, const void*, void*, void**, unsigned, void*, void**,
                                unsigned);
  CUresult (*library_unload)(CUlibrary);
  CUresult (*library_get_kernel)(CUkernel*, CUlibrary, const char*);
  CUresult (*kernel_set_attribute)(int, int, CUkernel, CUdevice);
  CUresult (*launch_kernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                            unsigned, CUstream, void**, void**);
  // Drivers for CUDA 12.4 and newer; nullptr on older ones (parameter checks are then skipped).
  CUresult (*kernel_get_param_info)(CUkernel, size_t, size_t*, size_t*) = nullptr;
  int device_count = 0;
};

template <typename T>
inline bool BindDriverSymbol(void* lib, const char* name, T* out) {
  *out = reinterpret_cast<T>(dlsym(lib, name));
  return *out != nullptr;
}

/// Opens the driver once (thread-safe); throws RuntimeError when there is none or it is too old.
/// Never closed: kernels may launch until the process ends.
inline const DriverApi& Driver() {
  static const DriverApi* api = []() -> const DriverApi* {
    void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) return nullptr;
    auto* d = new DriverApi();
    const bool bound = BindDriverSymbol(lib, "cuInit", &d->init) &&
                       BindDriverSymbol(lib, "cuGetErrorName", &d->get_error_name) &&
                       BindDriverSymbol(lib, "cuGetErrorString", &d->get_error_string) &&
                       BindDriverSymbol(lib, "cuDeviceGet", &d->device_get) &&
                       BindDriverSymbol(lib, "cuDeviceGetCount", &d->device_get_count) &&
                       BindDriverSymbol(lib, "cuDeviceGetAttribute", &d->device_get_attribute) &&
                       BindDriverSymbol(lib, "cuDevicePrimaryCtxRetain", &d->primary_ctx_retain) &&
                       BindDriverSymbol(lib, "cuCtxGetCurrent", &d->ctx_get_current) &&
                       BindDriverSymbol(lib, "cuCtxSetCurrent", &d->ctx_set_current) &&
                       BindDriverSymbol(lib, "cuLibraryLoadData", &d->library_load_data) &&
                       BindDriverSymbol(lib, "cuLibraryUnload", &d->library_unload) &&
                       BindDriverSymbol(lib, "cuLibraryGetKernel", &d->library_get_kernel) &&
                       BindDriverSymbol(lib, "cuKernelSetAttribute", &d->kernel_set_attribute) &&
                       BindDriverSymbol(lib, "cuLaunchKernel", &d->launch_kernel);
    (void)BindDriverSymbol(lib, "cuKernelGetParamInfo", &d->kernel_get_param_info);
    if (!bound || d->init(0) != 0 || d->device_get_count(&d->device_count) != 0) {
      delete d;
      return reinterpret_cast<const DriverApi*>(uintptr_t{1});  // present but unusable
    }
    return d;
  }();
  if (api == nullptr) {
    KFFI_THROW(RuntimeError) << "kffi::cuda: cannot open the CUDA driver (libcuda.so.1): this "
                                "machine has no NVIDIA driver, so no CUDA kernel can be loaded";
  }
  if (api == reinterpret_cast<const DriverApi*>(uintptr_t{1})) {
    KFFI_THROW(RuntimeError) << "kffi::cuda: the CUDA driver failed to initialise, or is older "
                                "than CUDA 12.0 (it lacks cuLibraryLoadData)";
  }
  return *api;
}

/// Throws RuntimeError "<what> failed: CUDA_ERROR_...: <description>" when rc is not success.
inline void CheckCu(CUresult rc, const char* what, std::string_view detail = {}) {
  if (KFFI_LIKELY(rc == 0)) return;
  const DriverApi& d = Driver();
  const char* name = nullptr;
  const char* text = nullptr;
  if (d.get_error_name(rc, &name) != 0 || name == nullptr) name = "an unknown CUDA error";
  if (d.get_error_string(rc, &text) != 0 || text == nullptr) text = "";
  KFFI_THROW(RuntimeError) << "kffi::cuda: " << what << detail << " failed: " << name << ": "
                           << text;
}

/// The compute capability of a device as major * 10 + minor (90 for sm_90, 100 for sm_100).
inline int ComputeCapability(int device_id) {
  const DriverApi& d = Driver();
  CUdevice dev = 0;
  CheckCu(d.device_get(&dev, device_id), "cuDeviceGet");
  int major = 0, minor = 0;
  CheckCu(d.device_get_attribute(&major, kCuAttrComputeCapabilityMajor, dev),
          "cuDeviceGetAttribute");
  CheckCu(d.device_get_attribute(&minor, kCuAttrComputeCapabilityMinor, dev),
          "cuDeviceGetAttribute");
  return major * 10 + minor;
}

/// Makes the device's primary context current when no context is (a thread that never used
/// CUDA); a context already current stays.
inline void EnsureContext(int device_id) {
  const DriverApi& d = Driver();
  CUcontext cur = nullptr;
  CheckCu(d.ctx_get_current(&cur), "cuCtxGetCurrent");
  if (KFFI_LIKELY(cur != nullptr)) return;
  CUdevice dev = 0;
  CheckCu(d.device_get(&dev, device_id), "cuDeviceGet");
  CUcontext primary = nullptr;
  CheckCu(d.primary_ctx_retain(&primary, dev), "cuDevicePrimaryCtxRetain");
  CheckCu(d.ctx_set_current(primary), "cuCtxSetCurrent");
}

/// An image's target as its arch tag names it: "sm_90" (cubin), "sm_90a" / "sm_100f" (arch- or
/// family-specific cubin), "compute_90" (PTX); "" is an image the driver picks from itself (a
/// fatbin, or one cubin given without a tag).
struct ArchTag {
  bool ptx = false;
  int cc = 0;       // major * 10 + minor; 0 for ""
  char suffix = 0;  // 'a', 'f' or 0
  bool ok = false;  // the tag reads as above
};

inline ArchTag ParseArchTag(std::string_view tag) {
  ArchTag t;
  if (tag.empty()) {
    t.ok = true;
    return t;
  }
  if (tag.substr(0, 3) == std::string_view("sm_")) {
    tag.remove_prefix(3);
  } else if (tag.substr(0, 8) == std::string_view("compute_")) {
    tag.remove_prefix(8);
    t.ptx = true;
  } else {
    return t;
  }
  if (!tag.empty() && (tag.back() == 'a' || tag.back() == 'f')) {
    t.suffix = tag.back();
    tag.remove_suffix(1);
  }
  if (tag.size() < 2 || tag.size() > 3) return t;
  for (char c : tag) {
    if (c < '0' || c > '9') return t;
    t.cc = t.cc * 10 + (c - '0');
  }
  t.ok = true;
  return t;
}

/// The index of the image to load on a device of compute capability cc, -1 when none runs there.
/// A cubin runs on its own major version at an equal or higher minor ('a': only its exact
/// capability); PTX is compiled by the driver for any equal or higher capability ('a': exact).
/// Preferred: an untagged image (a fatbin: the driver picks), the cubin of the highest
/// capability that runs (an exact 'a' first), then the PTX of the highest.
inline int PickImage(const std::vector<std::string>& tags, int cc) {
  int best = -1;
  int best_rank = -1;
  for (size_t i = 0; i < tags.size(); ++i) {
    const ArchTag t = ParseArchTag(tags[i]);
    if (!t.ok) continue;
    int rank = -1;
    if (t.cc == 0) {
      rank = 1 << 20;
    } else if (t.suffix == 'a') {
      if (t.cc == cc) rank = (t.ptx ? 0 : 1 << 19) + 1000 + t.cc;
    } else if (!t.ptx) {
      if (t.cc / 10 == cc / 10 && t.cc <= cc) rank = (1 << 19) + t.cc;
    } else if (t.cc <= cc) {
      rank = t.cc;
    }
    if (rank > best_rank) {
      best_rank = rank;
      best = static_cast<int>(i);
    }
  }
  return best;
}

/// One image and its arch tag.
struct Image {
  std::string arch;
  std::string data;  // NUL-terminated by std::string: PTX loads as text
};

/// The images of a module and the libraries loaded from them (one per image, on first use).
struct ModuleState {
  std::vector<Image> images;
  std::vector<std::string> tags;
  std::mutex mutex;
  std::vector<CUlibrary> libraries;
  std::string label;  // names the module in messages

  ~ModuleState() {
    // Unloading needs the driver; at process exit it may be gone already (errors are ignored).
    for (CUlibrary lib : libraries) {
      if (lib != nullptr) (void)Driver().library_unload(lib);
    }
  }

  /// The library of image i, loaded on first use (call with mutex held).
  CUlibrary LibraryLocked(size_t i) {
    if (libraries.size() != images.size()) libraries.assign(images.size(), nullptr);
    if (libraries[i] == nullptr) {
      CUlibrary lib = nullptr;
      CheckCu(Driver().library_load_data(&lib, images[i].data.c_str(), nullptr, nullptr, 0, nullptr,
                                         nullptr, 0),
              "cuLibraryLoadData", " of " + label + DescribeImage(i));
      libraries[i] = lib;
    }
    return libraries[i];
  }

  std::string DescribeImage(size_t i) const {
    return images[i].arch.empty() ? std::string() : " (" + images[i].arch + ")";
  }

  std::string ArchList() const {
    std::string out;
    for (const std::string& t : tags) out += (out.empty() ? "" : ", ") + (t.empty() ? "?" : t);
    return out;
  }
};

}  // namespace details

/// A kernel of a CubinModule. Cheap to copy (shared); the module's images stay alive with it.
class CubinKernel {
 public:
  /// Most devices a kernel keeps a handle for (device indices above are a ValueError).
  static constexpr int kMaxDevices = 64;

  CubinKernel() = default;

  /// The kernel's name as the image exports it.
  const std::string& name() const { return state_->name; }

  /// The driver's kernel handle (CUkernel) for a device: the image for the device's compute
  /// capability is loaded on first use. A device with no image that runs there is a RuntimeError
  /// naming the archs the module has.
  void* Handle(int device_id) const {
    if (KFFI_UNLIKELY(device_id < 0 || device_id >= kMaxDevices)) {
      KFFI_THROW(ValueError) << "kffi::cuda: device index " << device_id << " is out of range";
    }
    void* h = state_->handles[device_id].load(std::memory_order_acquire);
    if (KFFI_LIKELY(h != nullptr)) return h;
    return LoadHandle(device_id);
  }

  /// Sets the dynamic shared memory a launch may ask for on a device (needed above 48 KiB).
  void SetMaxDynamicSharedMemory(int device_id, int bytes) const {
    details::CheckCu(
        details::Driver().kernel_set_attribute(details::kCuFuncAttrMaxDynamicSharedSizeBytes, bytes,
                                               Handle(device_id), device_id),
        "cuKernelSetAttribute", " of " + name());
  }

  /// The kernel's parameters as the driver reports them for a device: (offset, size) in bytes,
  /// in order (cuKernelGetParamInfo). False when the driver is older than CUDA 12.4 and cannot
  /// tell.
  bool ParamInfo(int device_id, std::vector<std::pair<size_t, size_t>>* out) const {
    void* h = Handle(device_id);
    const details::DriverApi& d = details::Driver();
    out->clear();
    if (d.kernel_get_param_info == nullptr) return false;
    constexpr int kCudaErrorInvalidValue = 1;
    for (size_t i = 0;; ++i) {
      size_t offset = 0, size = 0;
      const details::CUresult rc = d.kernel_get_param_info(h, i, &offset, &size);
      if (rc == kCudaErrorInvalidValue) break;  // past the last parameter
      details::CheckCu(rc, "cuKernelGetParamInfo", " of " + name());
      out->emplace_back(offset, size);
      if (i > 4096) break;  // a kernel has fewer parameters than bytes of them
    }
    return true;
  }

  /// Launches on a stream (NULL: the default stream) of device_id with the kernel's parameters
  /// (params[i] points at parameter i's value, as cuLaunchKernel takes them).
  void Launch(int device_id, Dim3 grid, Dim3 block, void** params, void* stream = nullptr,
              uint32_t shared_mem = 0) const {
    void* h = Handle(device_id);
    details::EnsureContext(device_id);
    details::CheckCu(details::Driver().launch_kernel(h, grid.x, grid.y, grid.z, block.x, block.y,
                                                     block.z, shared_mem, stream, params, nullptr),
                     "cuLaunchKernel", " of " + name());
  }

 private:
  friend class CubinModule;
  struct State {
    std::shared_ptr<details::ModuleState> module;
    std::string name;
    std::atomic<void*> handles[kMaxDevices] = {};
  };

  void* LoadHandle(int device_id) const {
    details::ModuleState& m = *state_->module;
    int index = 0;
    if (m.images.size() != 1 || !m.tags[0].empty()) {
      const int cc = details::ComputeCapability(device_id);
      index = details::PickImage(m.tags, cc);
      if (index < 0) {
        KFFI_THROW(RuntimeError) << "kffi::cuda: " << m.label
                                 << " has no image for cuda:" << device_id << " (sm_" << cc
                                 << ", compute capability " << cc / 10 << "." << cc % 10
                                 << "); it has: " << m.ArchList();
      }
    }
    std::lock_guard<std::mutex> lock(m.mutex);
    void* h = state_->handles[device_id].load(std::memory_order_acquire);
    if (h != nullptr) return h;
    details::CUlibrary lib = m.LibraryLocked(static_cast<size_t>(index));
    details::CUkernel k = nullptr;
    details::CheckCu(
        details::Driver().library_get_kernel(&k, lib, state_->name.c_str()), "cuLibraryGetKernel",
        " of `" + state_->name + "` in " + m.label + m.DescribeImage(static_cast<size_t>(index)));
    state_->handles[device_id].store(k, std::memory_order_release);
    return k;
  }

  std::shared_ptr<State> state_;
};

/// Kernels in cubin, fatbin or PTX images, loaded through the CUDA driver on first launch:
///   kffi::cuda::CubinModule mod(KFFI_EMBEDDED_CUBIN(my_kernels));
///   mod["scale"].Launch(device_id, {blocks}, {256}, params, stream);
/// Several images tagged by arch ("sm_80", "sm_90a", "compute_90") make one module: each device
/// loads the one that runs best there (PickImage).
class CubinModule {
 public:
  /// One image (a cubin, a fatbin, or NUL-free PTX text); label names it in messages.
  explicit CubinModule(std::string_view image, std::string label = "a CUDA module")
      : CubinModule(std::vector<std::pair<std::string, std::string>>{{"", std::string(image)}},
                    std::move(label)) {}
  /// Images by arch tag; an unreadable tag is a ValueError.
  explicit CubinModule(std::vector<std::pair<std::string, std::string>> images,
                       std::string label = "a CUDA module")
      : state_(std::make_shared<details::ModuleState>()) {
    if (images.empty()) KFFI_THROW(ValueError) << "kffi::cuda::CubinModule: no image given";
    state_->label = std::move(label);
    for (auto& [arch, data] : images) {
      if (!details::ParseArchTag(arch).ok) {
        KFFI_THROW(ValueError) << "kffi::cuda::CubinModule: cannot read the arch tag `" << arch
                               << "` (expected e.g. sm_90, sm_90a, sm_100f or compute_90)";
      }
      if (data.empty()) {
        KFFI_THROW(ValueError) << "kffi::cuda::CubinModule: the image for `" << arch
                               << "` is empty";
      }
      state_->tags.push_back(arch);
      state_->images.push_back(details::Image{arch, std::move(data)});
    }
  }

  /// A kernel by its exported (for C++ kernels: mangled, unless extern "C") name. It is looked
  /// up at its first launch on a device (a missing name is a RuntimeError then).
  CubinKernel GetKernel(std::string_view name) const {
    CubinKernel k;
    k.state_ = std::make_shared<CubinKernel::State>();
    k.state_->module = state_;
    k.state_->name = std::string(name);
    return k;
  }
  CubinKernel operator[](std::string_view name) const { return GetKernel(name); }

  /// The arch tags of the images ("" for an untagged one).
  const std::vector<std::string>& archs() const { return state_->tags; }

 private:
  std::shared_ptr<details::ModuleState> state_;
};

}  // namespace cuda
}  // namespace kffi

/// Embeds the file at path (a cubin, fatbin or PTX, read by the assembler when this file is
/// compiled: an absolute path, or one relative to the compiler's working directory or an -Wa,-I
/// directory) in the object as read-only data named by id. KFFI_EMBEDDED_CUBIN(id) is then its
/// bytes as a std::string_view. Use at namespace scope, once per id in a program:
///   KFFI_EMBED_CUBIN(my_kernels, "/abs/path/kernels.cubin");
///   static kffi::cuda::CubinModule mod(KFFI_EMBEDDED_CUBIN(my_kernels));
#define KFFI_EMBED_CUBIN(id, path)                                           \
  extern "C" const char kffi_cubin_##id##_begin[];                           \
  extern "C" const char kffi_cubin_##id##_end[];                             \
  __asm__(".pushsection .rodata.kffi_cubin_" #id                             \
          ",\"a\",@progbits\n"                                               \
          ".balign 64\n"                                                     \
          ".globl kffi_cubin_" #id                                           \
          "_begin\n"                                                         \
          ".hidden kffi_cubin_" #id                                          \
          "_begin\n"                                                         \
          "kffi_cubin_" #id                                                  \
          "_begin:\n"                                                        \
          ".incbin \"" path                                                  \
          "\"\n"                                                             \
          ".globl kffi_cubin_" #id                                           \
          "_end\n"                                                           \
          ".hidden kffi_cubin_" #id                                          \
          "_end\n"                                                           \
          "kffi_cubin_" #id                                                  \
          "_end:\n"                                                          \
          ".byte 0\n" /* PTX text ends with a NUL, as the driver reads it */ \
          ".popsection\n")

/// The bytes KFFI_EMBED_CUBIN(id, ...) embedded (without the NUL appended after them).
#define KFFI_EMBEDDED_CUBIN(id)             \
  std::string_view(kffi_cubin_##id##_begin, \
                   static_cast<size_t>(kffi_cubin_##id##_end - kffi_cubin_##id##_begin))

#endif  // KFFI_CUDA_CUBIN_H_
