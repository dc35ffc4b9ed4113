// src/tvm_bridge/bridge.cc: binding TVM-FFI libraries to a runtime, and the bridge's entry points.
//
// Which runtime a library's TVMFFI* imports resolve to:
//   1. a libtvm_ffi already in the process (loaded by `import tvm_ffi`, or as another library's
//      dependency): it is promoted to RTLD_GLOBAL if needed and the library binds to it, so one
//      runtime serves everyone and nothing is shadowed;
//   2. a libtvm_ffi the library itself names (DT_NEEDED), which dlopen pulls in, else the
//      installed one (below);
//   3. the installed apache-tvm-ffi's libtvm_ffi, loaded global, for a library that defines
//      tvm::ffi GNU unique statics (type indices the dynamic loader shares process-wide: bound to
//      the shim it would fill them with kffi's numbers, which a libtvm_ffi loaded later adopts);
//      "installed" is KFFI_TVM_RUNTIME=<path>, else the path kffi's Python package registered,
//      read before it is opened (RuntimeFileProblem: a FIFO, another library or kffi's own shim
//      is refused without being opened);
//   4. otherwise this library's shim, on kffi's runtime. The shim is never made global (that
//      would interpose every TVM-FFI library loaded later, libtvm_ffi itself included): the
//      library is opened as the dependency of a small generated "stub" object that also depends
//      on the shim, which puts the shim in the library's own lookup scope only.
// Before any of that, a library that needs a TVM-FFI function the shim lacks is refused by name.
// SPDX-License-Identifier: Apache-2.0
#include <cxxabi.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <kffi/error.h>
#include <link.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/code_symbol.h"
#include "module/module_elf.h"
#include "tvm_bridge/bridge_internal.h"
#include "tvm_bridge/tvm_bridge_api.h"

namespace kffi {
namespace tvmglue {
namespace {

using details::ElfExports;

constexpr const char kTvmSoname[] = "libtvm_ffi.so";

std::string DlErrorText() {
  const char* e = dlerror();
  return e != nullptr ? std::string(e) : std::string("unknown dlopen error");
}

// The load address of the object holding address (0 when unknown).
const void* BaseOf(const void* address) {
  Dl_info info;
  if (address == nullptr || dladdr(address, &info) == 0) return nullptr;
  return info.dli_fbase;
}

const void* OwnBase() {
  static const void* base = BaseOf(reinterpret_cast<const void*>(&OwnBase));
  return base;
}

std::string OwnPath() {
  Dl_info info;
  if (dladdr(reinterpret_cast<const void*>(&OwnBase), &info) == 0 || info.dli_fname == nullptr) {
    return std::string();
  }
  return info.dli_fname;
}

// ---- apache-tvm-ffi runtimes in the process ----------------------------------------------------

struct RealRuntimes {
  std::mutex mutex;
  std::map<const void*, std::unique_ptr<RealRuntime>> by_base;
  static RealRuntimes* Get() {
    static RealRuntimes* r = new RealRuntimes();
    return r;
  }
};

template <typename F>
bool Resolve(void* handle, const char* name, F* out) {
  std::string not_code;  // a runtime whose symbol is not code lacks that function
  *out = reinterpret_cast<F>(details::FindCodeSymbol(handle, name, &not_code));
  return *out != nullptr;
}

// The functions RuntimeForHandle requires of a runtime, sorted: what a file named as
// apache-tvm-ffi's runtime must define before it is opened (RuntimeFileProblem).
constexpr const char* kRequiredRuntimeFunctions[] = {
    "TVMFFIEnvGetDLPackManagedTensorAllocator",
    "TVMFFIEnvGetStream",
    "TVMFFIEnvSetDLPackManagedTensorAllocator",
    "TVMFFIEnvSetStream",
    "TVMFFIErrorMoveFromRaised",
    "TVMFFIErrorSetRaised",
    "TVMFFIFunctionSetGlobal",
};

// Whether the object loaded at base (reached through handle) is a kffi TVM-FFI bridge, this one
// or a copy of any build: it defines the TVM-FFI functions, but it is no runtime of its own.
bool IsKffiBridge(void* handle, const void* base) {
  void* marker = dlsym(handle, details::kTvmBridgeEntrySymbol);
  return base == OwnBase() || (marker != nullptr && BaseOf(marker) == base);
}

// The record of the runtime loaded at handle (made once per object).
const RealRuntime* RuntimeForHandle(void* handle) {
  void* probe = dlsym(handle, "TVMFFIErrorMoveFromRaised");
  const void* base = BaseOf(probe);
  if (base == nullptr || IsKffiBridge(handle, base)) return nullptr;
  RealRuntimes* all = RealRuntimes::Get();
  std::lock_guard<std::mutex> lock(all->mutex);
  auto it = all->by_base.find(base);
  if (it != all->by_base.end()) return it->second.get();
  auto r = std::make_unique<RealRuntime>();
  Dl_info info;
  if (dladdr(probe, &info) != 0 && info.dli_fname != nullptr) r->path = info.dli_fname;
  r->handle = handle;
  r->base = base;
  // Each of kRequiredRuntimeFunctions.
  bool ok = Resolve(handle, "TVMFFIEnvSetStream", &r->env_set_stream) &&
            Resolve(handle, "TVMFFIEnvGetStream", &r->env_get_stream) &&
            Resolve(handle, "TVMFFIEnvSetDLPackManagedTensorAllocator", &r->env_set_allocator) &&
            Resolve(handle, "TVMFFIEnvGetDLPackManagedTensorAllocator", &r->env_get_allocator) &&
            Resolve(handle, "TVMFFIErrorMoveFromRaised", &r->error_move_from_raised) &&
            Resolve(handle, "TVMFFIErrorSetRaised", &r->error_set_raised) &&
            Resolve(handle, "TVMFFIFunctionSetGlobal", &r->function_set_global);
  if (!ok) return nullptr;
  Resolve(handle, "TVMFFIEnvTensorAlloc", &r->env_tensor_alloc);
  Resolve(handle, "TVMFFIGetTypeInfo", &r->get_type_info);
  Resolve(handle, "TVMFFITypeKeyToIndex", &r->type_key_to_index);
  const RealRuntime* out = r.get();
  all->by_base.emplace(base, std::move(r));
  return out;
}

int FindByFileName(struct dl_phdr_info* info, size_t, void* data) {
  const char* name = info->dlpi_name;
  if (name == nullptr || name[0] == '\0') return 0;
  const char* base = std::strrchr(name, '/');
  base = base != nullptr ? base + 1 : name;
  if (std::strncmp(base, kTvmSoname, sizeof(kTvmSoname) - 1) == 0) {
    *static_cast<std::string*>(data) = name;
    return 1;
  }
  return 0;
}

// ---- the stub that scopes the shim to one library
// ------------------------------------------------

template <typename T>
void Put(std::string* image, size_t offset, const T& value) {
  std::memcpy(&(*image)[offset], &value, sizeof(T));
}

size_t AlignUp(size_t v, size_t a) { return (v + a - 1) / a * a; }

// A minimal ELF64 shared object with no code and no symbols whose only content is DT_NEEDED
// entries (absolute paths, taken literally by the dynamic loader), in that order.
std::string MakeStubImage(const std::vector<std::string>& needed, uint16_t machine) {
  using namespace details;  // NOLINT: the ELF structures
  const size_t num_ph = 3;
  const size_t dyn_off = AlignUp(sizeof(Elf64Header) + num_ph * sizeof(Elf64ProgramHeader), 16);
  const size_t num_dyn = needed.size() + 6;
  const size_t hash_off = dyn_off + num_dyn * sizeof(Elf64Dyn);
  const size_t sym_off = AlignUp(hash_off + 4 * sizeof(uint32_t), 8);
  const size_t str_off = sym_off + sizeof(Elf64Symbol);
  std::string strtab(1, '\0');
  std::vector<size_t> name_offsets;
  for (const std::string& n : needed) {
    name_offsets.push_back(strtab.size());
    strtab += n;
    strtab += '\0';
  }
  const size_t total = str_off + strtab.size();
  std::string image(total, '\0');

  Elf64Header eh{};
  const unsigned char ident[16] = {0x7f, 'E', 'L', 'F', 2, 1, 1, 0};
  std::memcpy(eh.ident, ident, sizeof(ident));
  eh.type = kElfTypeDyn;
  eh.machine = machine;
  eh.version = 1;
  eh.phoff = sizeof(Elf64Header);
  eh.ehsize = sizeof(Elf64Header);
  eh.phentsize = sizeof(Elf64ProgramHeader);
  eh.phnum = num_ph;
  eh.shentsize = sizeof(Elf64Section);
  Put(&image, 0, eh);

  // One read-write segment (the loader adjusts pointers in .dynamic in place), the dynamic
  // segment inside it, and a non-executable stack.
  Elf64ProgramHeader load{kProgramLoad, 6, 0, 0, 0, total, total, 0x1000};
  Elf64ProgramHeader dyn{kProgramDynamic,
                         6,
                         dyn_off,
                         dyn_off,
                         dyn_off,
                         num_dyn * sizeof(Elf64Dyn),
                         num_dyn * sizeof(Elf64Dyn),
                         8};
  Elf64ProgramHeader stack{kProgramGnuStack, 6, 0, 0, 0, 0, 0, 16};
  Put(&image, sizeof(Elf64Header), load);
  Put(&image, sizeof(Elf64Header) + sizeof(Elf64ProgramHeader), dyn);
  Put(&image, sizeof(Elf64Header) + 2 * sizeof(Elf64ProgramHeader), stack);

  size_t at = dyn_off;
  auto put_dyn = [&](int64_t tag, uint64_t val) {
    Put(&image, at, Elf64Dyn{tag, val});
    at += sizeof(Elf64Dyn);
  };
  for (size_t off : name_offsets) put_dyn(kDynNeeded, off);
  put_dyn(kDynHash, hash_off);
  put_dyn(kDynStrTab, str_off);
  put_dyn(kDynSymTab, sym_off);
  put_dyn(kDynStrSz, strtab.size());
  put_dyn(kDynSymEnt, sizeof(Elf64Symbol));
  put_dyn(kDynNull, 0);
  const uint32_t hash[4] = {1, 1, 0, 0};  // one empty bucket, one (null) symbol
  std::memcpy(&image[hash_off], hash, sizeof(hash));
  std::memcpy(&image[str_off], strtab.data(), strtab.size());
  return image;
}

// Opens the stub for image. The memfd stays open for the life of the process: dlopen knows the
// stub by its path, and a reused /proc/self/fd/N would name an old stub.
void* OpenStub(const std::string& image, std::string* why) {
  int fd = memfd_create("kffi_tvm_stub", MFD_CLOEXEC);
  if (fd < 0) {
    *why = std::string("memfd_create failed: ") + std::strerror(errno);
    return nullptr;
  }
  size_t done = 0;
  while (done < image.size()) {
    ssize_t n = write(fd, image.data() + done, image.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      *why = std::string("cannot write the stub: ") + std::strerror(errno);
      close(fd);
      return nullptr;
    }
    done += static_cast<size_t>(n);
  }
  std::string path = "/proc/self/fd/" + std::to_string(fd);
  dlerror();
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    *why = DlErrorText();
    close(fd);
  }
  return handle;
}

// ---- per library ---------------------------------------------------------------------------

struct LibraryState {
  std::string path;
  void* handle = nullptr;
  const RealRuntime* real = nullptr;  // NULL: bound to the shim (or imports nothing)
  unsigned env_use = 0;               // EnvUse: what of the environment its code can read
  // The metadata symbols of the file and how each may be read: only code is ever called.
  std::map<std::string, details::ElfSymbolUse> metadata;
};

// Dependencies known not to read the TVM-FFI environment on a library's behalf.
bool IsKnownDependency(const std::string& needed) {
  static const char* const kPrefixes[] = {"libc.so", "libm.so", "libdl.so", "libpthread.so",
                                          "librt.so", "ld-linux", "libgcc_s", "libstdc++", "libc++",
                                          "libtvm_ffi.so", "libcute_dsl_runtime", "libcuda.so",
                                          "libcudart", "libkffi",
                                          // sanitizer runtimes of an instrumented build
                                          "libasan", "libubsan", "libtsan", "liblsan", "libhwasan"};
  const std::string base =
      needed.substr(needed.rfind('/') == std::string::npos ? 0 : needed.rfind('/') + 1);
  for (const char* p : kPrefixes) {
    if (base.compare(0, std::strlen(p), p) == 0) return true;
  }
  return false;
}

// Whether the library's own code is all that can read the environment on its behalf.
bool OnlyKnownDependencies(const ElfExports& elf) {
  return std::all_of(elf.needed.begin(), elf.needed.end(), IsKnownDependency);
}

// What of the environment a library's code can read: its own TVMFFIEnv* imports, or everything
// when it depends on a library of its own (which may read it for it).
unsigned EnvUseOf(const ElfExports& elf) {
  if (!OnlyKnownDependencies(elf)) return kEnvAll;
  unsigned use = 0;
  for (const std::string& name : elf.tvm_imports) {
    if (name == "TVMFFIEnvGetStream") use |= kEnvStream;
    if (name == "TVMFFIEnvTensorAlloc" || name == "TVMFFIEnvGetDLPackManagedTensorAllocator") {
      use |= kEnvAllocator;
    }
  }
  return use;
}

bool NeedsTvmRuntime(const ElfExports& elf) {
  return std::any_of(elf.needed.begin(), elf.needed.end(), [](const std::string& n) {
    return n.compare(0, sizeof(kTvmSoname) - 1, kTvmSoname) == 0;
  });
}

[[noreturn]] void Refuse(const std::string& path, const std::string& why) {
  KFFI_THROW(RuntimeError) << "Cannot load module `" << path << "`: " << why;
  __builtin_unreachable();
}

// A mangled C++ name as source spells it (the mangled name itself when it does not demangle).
std::string Demangled(const std::string& mangled) {
  int status = 0;
  char* text = abi::__cxa_demangle(mangled.c_str(), nullptr, nullptr, &status);
  std::string out = status == 0 && text != nullptr ? std::string(text) : mangled;
  std::free(text);
  return out;
}

void CheckShimCoverage(const std::string& path, const ElfExports& elf) {
  if (!elf.tvm_cxx_imports.empty()) {
    // libtvm_ffi's extra C++ API: bound at load (RTLD_NOW) it would be an undefined-symbol error
    // without a remedy, bound lazily a crash at the first call.
    std::string names;
    const size_t shown = std::min<size_t>(elf.tvm_cxx_imports.size(), 8);
    for (size_t i = 0; i < shown; ++i) {
      names += (i == 0 ? "`" : ", `") + Demangled(elf.tvm_cxx_imports[i]) + "`";
    }
    if (shown < elf.tvm_cxx_imports.size()) {
      names += " and " + std::to_string(elf.tvm_cxx_imports.size() - shown) + " more";
    }
    Refuse(path, "it imports apache-tvm-ffi's extra C++ API (" + names +
                     "), which kffi's TVM-FFI runtime does not provide. Load apache-tvm-ffi "
                     "first (`import tvm_ffi`, or KFFI_TVM_RUNTIME=<its libtvm_ffi.so>) to run it "
                     "on that runtime; docs/tvm_ffi.md lists what kffi provides");
  }
  const std::vector<std::string_view>& covered = ShimCoveredFunctions();
  std::string missing;
  for (const std::string& name : elf.tvm_imports) {
    if (!std::binary_search(covered.begin(), covered.end(), std::string_view(name))) {
      missing += (missing.empty() ? "" : ", ") + name;
    }
  }
  if (missing.empty()) return;
  Refuse(path, "it imports TVM-FFI runtime functions that kffi does not provide: " + missing +
                   ". Load apache-tvm-ffi first (`import tvm_ffi`) to run it on that runtime, or "
                   "see docs/tvm_ffi.md for the functions kffi provides");
}

// Which runtime the library's TVMFFI* references went to, found the way the dynamic loader
// searched: the global scope, then the library's own dependencies, then (through the stub) the
// shim.
const RealRuntime* BoundRuntime(void* handle, const ElfExports& elf) {
  if (elf.tvm_imports.empty()) return nullptr;
  const char* probe = elf.tvm_imports.front().c_str();
  void* global = dlsym(RTLD_DEFAULT, probe);
  if (global != nullptr && BaseOf(global) != OwnBase()) return RealRuntimeAt(global);
  void* local = dlsym(handle, probe);
  if (local != nullptr && BaseOf(local) != OwnBase()) return RealRuntimeAt(local);
  return nullptr;
}

// The path of an installed apache-tvm-ffi's libtvm_ffi (kffi/_tvm.py registers it, a C++ program
// may name it in KFFI_TVM_RUNTIME); "shim" there means never load one.
struct InstalledRuntime {
  std::mutex mutex;
  std::string path;
  static InstalledRuntime* Get() {
    static InstalledRuntime* r = new InstalledRuntime();
    return r;
  }
};

constexpr const char kRuntimeEnv[] = "KFFI_TVM_RUNTIME";

// Whether two paths name one file (the same device and inode: a symbolic or hard link too).
bool SameFile(const std::string& a, const std::string& b) {
  struct stat sa, sb;
  return stat(a.c_str(), &sa) == 0 && stat(b.c_str(), &sb) == 0 && sa.st_dev == sb.st_dev &&
         sa.st_ino == sb.st_ino;
}

// Why the file named as apache-tvm-ffi's runtime cannot be one (empty when it may be), from the
// file alone: nothing is opened before this says yes. dlopen of a FIFO blocks for a writer, and
// opening kffi's own shim RTLD_GLOBAL would make it global (it would interpose every TVM-FFI
// library loaded later, libtvm_ffi included).
std::string RuntimeFileProblem(const std::string& runtime) {
  const ElfExports elf = details::ReadElfExports(runtime);
  if (!elf.readable) return elf.problem;
  if (elf.kffi_bridge || elf.soname == details::kTvmBridgeLibraryName ||
      SameFile(runtime, OwnPath())) {
    return std::string("it is kffi's own TVM-FFI shim (") + details::kTvmBridgeLibraryName +
           "), not apache-tvm-ffi's runtime";
  }
  std::string missing;
  for (const char* name : kRequiredRuntimeFunctions) {
    if (!std::binary_search(elf.tvm_runtime_functions.begin(), elf.tvm_runtime_functions.end(),
                            std::string(name))) {
      missing += (missing.empty() ? "" : ", ") + std::string(name);
    }
  }
  if (!missing.empty()) {
    return "it does not define the TVM-FFI runtime functions " + missing +
           " (it is not apache-tvm-ffi's libtvm_ffi.so)";
  }
  return std::string();
}

// The installed runtime, loaded RTLD_GLOBAL (as `import tvm_ffi` loads it), so that the library
// about to be opened binds to it; NULL when none is known or KFFI_TVM_RUNTIME=shim.
const RealRuntime* LoadInstalledRuntime(const std::string& library_path) {
  std::string runtime;
  const char* env = std::getenv(kRuntimeEnv);
  if (env != nullptr && env[0] != '\0') {
    runtime = env;
  } else {
    InstalledRuntime* installed = InstalledRuntime::Get();
    std::lock_guard<std::mutex> lock(installed->mutex);
    runtime = installed->path;
  }
  if (runtime.empty() || runtime == "shim") return nullptr;
  std::string problem = RuntimeFileProblem(runtime);
  if (problem.empty()) {
    dlerror();
    if (dlopen(runtime.c_str(), RTLD_NOW | RTLD_GLOBAL) == nullptr) problem = DlErrorText();
  }
  if (!problem.empty()) {
    Refuse(library_path,
           std::string("it needs apache-tvm-ffi's runtime, and `") + runtime + "` (" +
               (env != nullptr && env[0] != '\0' ? kRuntimeEnv : "installed") +
               ") does not load: " + problem + ". Set " + kRuntimeEnv +
               "=shim to run the libraries that do not link libtvm_ffi on kffi's runtime "
               "instead");
  }
  const RealRuntime* real = FindLoadedRealRuntime(true);
  if (real == nullptr) {
    Refuse(library_path, std::string("`") + runtime + "` loaded but is not a TVM-FFI runtime (" +
                             kRuntimeEnv +
                             " must name apache-tvm-ffi's libtvm_ffi.so, or be shim)");
  }
  return real;
}

void* OpenLibraryOrThrow(const std::string& path, const ElfExports& elf) {
  if (elf.tvm_pre_0_1_8_errors) {
    // Whichever runtime it binds to, kffi reads the errors it raises: refused before any of its
    // code runs (a misread error record was a crash at its first error).
    Refuse(path, std::string("it was built with apache-tvm-ffi 0.1.8.post2 or older (it holds "
                             "`tvm::ffi::EnvErrorAlreadySet`, which 0.1.9 removed) and shows no "
                             "sign of 0.1.8. Before 0.1.8 a TVM-FFI error record was 56 bytes; "
                             "kffi's runtime follows apache-tvm-ffi ") +
                     kTvmRuntimeVersionText +
                     ", whose records are 72 bytes, so the library's errors would be misread. "
                     "Rebuild it against apache-tvm-ffi 0.1.9 or newer");
  }
  if (elf.tvm_library_ctx && !elf.tvm_library_ctx_writable) {
    Refuse(path, std::string("its `") + details::kTvmLibraryCtxSymbol + "` is " +
                     elf.tvm_library_ctx_problem +
                     "; the loader stores the library's context there, so it must be a "
                     "writable pointer variable");
  }
  if (elf.tvm_library_bin) {
    Refuse(path,
           "it embeds binary modules (`__tvm_ffi__library_bin`, e.g. a model compiled by "
           "TVM); kffi loads kernel libraries only: load it with tvm_ffi.load_module");
  }
  // Already in the process (e.g. opened by tvm_ffi.load_module): its bindings are made.
  if (void* existing = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD)) return existing;
  const bool needs_tvm = NeedsTvmRuntime(elf);
  const bool imports_tvm = !elf.tvm_imports.empty() || !elf.tvm_cxx_imports.empty();
  const RealRuntime* real = imports_tvm || needs_tvm ? FindLoadedRealRuntime(true) : nullptr;
  // Type-index statics shared with libtvm_ffi, or its extra C++ API: runs on that runtime when
  // one is installed (the shim refuses the C++ API below).
  if (real == nullptr && imports_tvm && !needs_tvm &&
      (elf.tvm_shared_statics || !elf.tvm_cxx_imports.empty())) {
    real = LoadInstalledRuntime(path);
  }
  dlerror();
  if (real != nullptr || needs_tvm || !imports_tvm) {
    // RTLD_NOW: every TVMFFI* reference binds now, to one runtime, and a missing symbol is a
    // load error rather than a crash at the first call.
    void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle != nullptr) return handle;
    std::string why = DlErrorText();
    if (needs_tvm && real == nullptr && why.find(kTvmSoname) != std::string::npos) {
      // The dynamic loader cannot find the libtvm_ffi the library names: the installed one, once
      // loaded, matches its DT_NEEDED by soname.
      if (LoadInstalledRuntime(path) != nullptr) {
        if (void* handle2 = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL)) return handle2;
        Refuse(path, "not a loadable shared library: " + DlErrorText());
      }
      Refuse(path,
             "it was linked against libtvm_ffi.so (-ltvm_ffi), which is neither loaded nor "
             "found by the dynamic loader (" +
                 why +
                 "). Import tvm_ffi first, set KFFI_TVM_RUNTIME to its libtvm_ffi.so, or link "
                 "the library without libtvm_ffi so that kffi provides the TVM-FFI runtime itself");
    }
    Refuse(path, "not a loadable shared library: " + why);
  }
  CheckShimCoverage(path, elf);
  std::string shim = OwnPath();
  if (shim.empty()) Refuse(path, "cannot locate kffi's TVM-FFI shim library");
  std::string image = MakeStubImage({shim, path}, details::HostElfMachine());
  std::string why;
  void* stub = OpenStub(image, &why);
  if (stub == nullptr) Refuse(path, "not a loadable shared library: " + why);
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
  if (handle == nullptr) Refuse(path, "the library did not load with its stub: " + DlErrorText());
  return handle;
}

int OpenLibrary(const char* path, const ElfExports* elf, void** out_handle, void** out_state) {
  try {
    auto state = std::make_unique<LibraryState>();
    state->path = path;
    state->metadata = elf->metadata;
    state->handle = OpenLibraryOrThrow(state->path, *elf);
    state->real = BoundRuntime(state->handle, *elf);
    state->env_use = EnvUseOf(*elf);
    // Where the library's own imports are all that reads the allocator, they read it through
    // forwarders, so that calls need not copy it (rebind.cc).
    if (state->real != nullptr && (state->env_use & kEnvAllocator) != 0 &&
        OnlyKnownDependencies(*elf) && RebindEnvAllocator(state->handle, *elf, state->real)) {
      state->env_use = (state->env_use & ~kEnvAllocator) | kEnvAllocatorRebound;
    }
    // The same for the stream: a call on a device then only marks the thread.
    if (state->real != nullptr && (state->env_use & kEnvStream) != 0 &&
        OnlyKnownDependencies(*elf) && RebindEnvStream(state->handle, *elf, state->real)) {
      state->env_use = (state->env_use & ~kEnvStream) | kEnvStreamRebound;
    }
    if (elf->tvm_library_ctx && state->real == nullptr) {
      // The context slot identifies the library to TVMFFIEnvModLookupFromImports; the shim's
      // lookup does not read it, but a non-null value is what the library expects.
      if (void** ctx = static_cast<void**>(dlsym(state->handle, details::kTvmLibraryCtxSymbol))) {
        *ctx = state.get();
      }
    }
    NoteBoundLibrary(state->handle, state->real);
    *out_handle = state->handle;
    *out_state = state.release();  // lives as long as the library (the process)
    return 0;
  }
  KFFI_CATCH_ALL { return RaiseCurrentException(); }
}

// Calls a metadata symbol (`__tvm_ffi__metadata_<name>` / `__tvm_ffi__doc_<name>`) for its str.
// The file said what the symbol is (ElfSymbolUse): only code is called, a `const char[]` is its
// text, anything else is an error naming it.
std::string CallStringSymbol(const LibraryState* lib, const std::string& symbol_name) {
  auto it = lib->metadata.find(symbol_name);
  if (it == lib->metadata.end()) return std::string();
  if (it->second.kind == details::ElfSymbolUse::kText) return it->second.text;
  if (it->second.kind == details::ElfSymbolUse::kRefuse) {
    KFFI_THROW(RuntimeError) << "The metadata symbol `" << symbol_name << "` of `" << lib->path
                             << "` cannot be read: it is " << it->second.text;
  }
  std::string problem;
  auto sym = reinterpret_cast<KFFISafeCallType>(
      details::FindCodeSymbol(lib->handle, symbol_name, &problem));
  if (!problem.empty()) {
    KFFI_THROW(RuntimeError) << "Cannot use module `" << lib->path << "`: " << problem;
  }
  if (sym == nullptr) return std::string();
  KFFIAny result;
  details::SetNone(&result);
  if (sym(nullptr, nullptr, 0, &result) != 0) {
    MoveErrorToKffi(lib->real);
    // A failed call owns nothing it may have left in the result.
    if (result.type_index >= kKFFIStaticObjectBegin) KFFIObjectDecRef(result.v_obj);
    details::ThrowRaisedError(-1);
  }
  if (result.type_index == kKFFISmallStr) {
    return std::string(result.v_bytes, result.small_str_len);
  }
  if (result.type_index == kKFFIStr) {
    const auto* cell = static_cast<const KFFIStrCell*>(KFFIObjectGetCellPtr(result.v_obj));
    std::string out(cell->data, cell->size);
    KFFIObjectDecRef(result.v_obj);
    return out;
  }
  if (result.type_index >= kKFFIStaticObjectBegin) KFFIObjectDecRef(result.v_obj);
  KFFI_THROW(TypeError) << "The metadata symbol `" << symbol_name << "` of `" << lib->path
                        << "` returned a value of type index " << result.type_index
                        << ", expected a str";
  __builtin_unreachable();
}

// Which parameters of export name take owning Tensors (OwnedTensorParams), from its metadata; all
// of them when the metadata cannot be read (a broken metadata symbol fails the metadata query,
// not the function).
OwnedTensorMask OwnedParamsOf(const LibraryState* lib, const std::string& name) {
  try {
    return OwnedTensorParams(CallStringSymbol(lib, details::kTvmMetadataPrefix + name));
  }
  KFFI_CATCH_ALL {
    KFFIObjectHandle err = nullptr;
    KFFIErrorMoveFromRaised(&err);
    KFFIObjectDecRef(err);
    return kAllOwned;
  }
}

int MakeFunction(void* state, KFFISafeCallType symbol, const char* name, KFFIObjectHandle module,
                 KFFIObjectHandle* out) {
  try {
    auto* lib = static_cast<LibraryState*>(state);
    OwnedTensorMask owned = OwnedParamsOf(lib, name);
    KFFIObjectIncRef(module);
    *out = WrapForeignCallable(symbol, nullptr, module, lib->real, name, lib->env_use, owned);
    return 0;
  }
  KFFI_CATCH_ALL { return RaiseCurrentException(); }
}

int GetMetadata(void* state, const char* name, KFFIAny* out) {
  try {
    auto* lib = static_cast<LibraryState*>(state);
    details::SetNone(out);
    std::string n(name);
    std::string meta = CallStringSymbol(lib, details::kTvmMetadataPrefix + n);
    std::string doc = CallStringSymbol(lib, details::kTvmDocPrefix + n);
    std::string json = ConvertMetadata(n, meta, doc);
    if (json.empty()) return 0;
    KFFIByteArray bytes{json.data(), json.size()};
    return KFFIStringFromByteArray(&bytes, out);
  }
  KFFI_CATCH_ALL { return RaiseCurrentException(); }
}

const details::TvmBridgeApi kApi = {
    details::kTvmBridgeApiVersion, KFFI_ABI_VERSION, &OpenLibrary, &MakeFunction, &GetMetadata,
};

// ---- helpers for kffi's Python extension (python_api.cc's table) -------------------------------

// The safe call behind TVM-FFI's global `kffi.object_from_address`: turns the owned reference
// that ExportObject handed out (an int address) into the returned object.
int ObjectFromAddress(void*, const KFFIAny* args, int32_t num_args, KFFIAny* result) {
  if (num_args != 1 || args[0].type_index != kKFFIInt || args[0].v_int64 == 0) {
    const RealRuntime* real = FindLoadedRealRuntime(false);
    RaiseFor(real, "TypeError", "kffi.object_from_address expects one address (int)");
    return -1;
  }
  auto* obj = reinterpret_cast<KFFIObject*>(static_cast<intptr_t>(args[0].v_int64));
  details::SetObject(result, obj);
  return 0;
}

}  // namespace

const RealRuntime* FindLoadedRealRuntime(bool promote) {
  const int mode = RTLD_LAZY | RTLD_NOLOAD;
  std::string name = kTvmSoname;
  void* handle = dlopen(name.c_str(), mode);  // matches a loaded object by its soname
  if (handle == nullptr) {
    name.clear();
    dl_iterate_phdr(&FindByFileName, &name);
    if (!name.empty()) handle = dlopen(name.c_str(), mode);
  }
  const RealRuntime* real = handle != nullptr ? RuntimeForHandle(handle) : nullptr;
  // Made global only once known to be a runtime that is not a kffi shim (RuntimeForHandle).
  if (real != nullptr && promote) dlopen(name.c_str(), mode | RTLD_GLOBAL);
  return real;
}

const RealRuntime* RealRuntimeAt(const void* address) {
  Dl_info info;
  if (address == nullptr || dladdr(address, &info) == 0 || info.dli_fname == nullptr) {
    return nullptr;
  }
  if (info.dli_fbase == OwnBase()) return nullptr;
  void* handle = dlopen(info.dli_fname, RTLD_LAZY | RTLD_NOLOAD);
  return handle != nullptr ? RuntimeForHandle(handle) : nullptr;
}

int RaiseCurrentException() noexcept {
  details::SetRaisedFromCurrentException();
  return -1;
}

}  // namespace tvmglue
}  // namespace kffi

extern "C" {

__attribute__((visibility("default"))) const kffi::details::TvmBridgeApi* KFFITvmBridgeGetApi(
    void) {
  return &kffi::tvmglue::kApi;
}

}  // extern "C"

namespace kffi {
namespace tvmglue {

void SetInstalledRuntimePath(const char* path) {
  InstalledRuntime* installed = InstalledRuntime::Get();
  std::lock_guard<std::mutex> lock(installed->mutex);
  installed->path = path != nullptr ? path : "";
}

int RealRuntimeLoaded() { return FindLoadedRealRuntime(false) != nullptr ? 1 : 0; }

int InstallObjectFromAddress() {
  static std::mutex mutex;
  static bool done = false;
  std::lock_guard<std::mutex> lock(mutex);
  if (done) return 0;
  const RealRuntime* real = FindLoadedRealRuntime(false);
  if (real == nullptr) {
    KFFIErrorSetRaisedFromCStr("RuntimeError",
                               "apache-tvm-ffi is not loaded (import tvm_ffi first)");
    return -1;
  }
  std::string not_code;
  auto create =
      reinterpret_cast<int (*)(void*, KFFISafeCallType, void (*)(void*), KFFIObjectHandle*)>(
          details::FindCodeSymbol(real->handle, "TVMFFIFunctionCreate", &not_code));
  KFFIObjectHandle f = nullptr;
  if (create == nullptr || create(nullptr, &ObjectFromAddress, nullptr, &f) != 0) {
    MoveErrorToKffi(real);
    return -1;
  }
  static const char kName[] = "kffi.object_from_address";
  KFFIByteArray name{kName, sizeof(kName) - 1};
  int rc = real->function_set_global(&name, f, 1);
  KFFIObjectDecRef(f);
  if (rc != 0) {
    MoveErrorToKffi(real);
    return -1;
  }
  done = true;
  return 0;
}

int ExportObject(KFFIObjectHandle obj, KFFIObjectHandle* out) {
  try {
    auto* o = static_cast<KFFIObject*>(obj);
    const RealRuntime* real = FindLoadedRealRuntime(false);
    if (o == nullptr || out == nullptr) {
      KFFIErrorSetRaisedFromCStr("ValueError", "NULL object");
      return -1;
    }
    switch (o->type_index) {
      case kKFFIFunction:
        *out = WrapKffiFunctionForForeign(o, real);
        return 0;
      case kKFFITensor:
      case kKFFIShape:
      case kKFFIStr:
      case kKFFIBytes:
        KFFIObjectIncRef(o);
        *out = o;
        return 0;
      default: {
        std::string message = "a kffi object of type index " + std::to_string(o->type_index) +
                              " cannot be handed to TVM-FFI as an object";
        KFFIErrorSetRaisedFromCStr("TypeError", message.c_str());
        return -1;
      }
    }
  }
  KFFI_CATCH_ALL { return RaiseCurrentException(); }
}

}  // namespace tvmglue
}  // namespace kffi
