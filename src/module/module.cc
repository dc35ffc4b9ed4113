// src/module/module.cc: modules: loading kernel libraries, the system library, lookups and imports.
// SPDX-License-Identifier: Apache-2.0
#include <dlfcn.h>
#include <errno.h>
#include <kffi/c_api.h>
#include <limits.h>
#include <stdlib.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/code_symbol.h"
#include "core/runtime_internal.h"
#include "module/load_object.h"
#include "module/module_elf.h"
#include "tvm_bridge/tvm_bridge_api.h"

namespace {

using kffi::details::ByteArrayArg;
using kffi::details::CheckOutArg;
using kffi::details::HeaderDecRef;
using kffi::details::HeaderDecWeakRef;
using kffi::details::HeaderIncRef;
using kffi::details::HeaderIncWeakRef;
using kffi::details::kAbiVersionSymbol;
using kffi::details::kExportPrefix;
using kffi::details::kMetaPrefix;
using kffi::details::kTvmExportPrefix;
using kffi::details::NewRuntimeObject;
using kffi::details::RuntimePayload;
using kffi::details::SetNone;
using kffi::details::TakeRaisedKindMessage;
using kffi::details::ThrowCApiError;
using kffi::details::TvmBridgeApi;

constexpr const char kSystemLibName[] = "system_lib";

// One per library file for the life of the process. Libraries are never unloaded: a tensor or a
// function made inside one may outlive every module reference, and its deleter is code there.
struct Library {
  std::string path;                    // canonical; kSystemLibName for the system library
  void* dl_handle = nullptr;           // null for the system library
  bool names_known = false;            // whether `functions` came from the symbol table
  std::vector<std::string> functions;  // sorted
  // The metadata symbols the file defines and how each may be read (ElfSymbolUse): a symbol
  // that is not code is never called.
  std::map<std::string, kffi::details::ElfSymbolUse> metadata;
  // A library built for the TVM-FFI ABI: its functions are `__tvm_ffi_<name>`, called through
  // libkffi_tvm (tvm_bridge_api.h), which keeps tvm_state for it.
  bool tvm = false;
  void* tvm_state = nullptr;
  // A weak reference to the live module object, so that loading the file again while the module
  // lives returns it, and a module nobody holds can still die. Guarded by LibraryTable::mutex.
  KFFIObject* module_weak = nullptr;
};

// The loads in progress on this thread, innermost first (a library's static initialisers may
// load other modules): what KFFIModuleReportLoadError charges a report to, and what tells a
// load of a library from inside its own initialisers.
struct LoadInProgress {
  const std::string* canonical;
  const LoadInProgress* outer;
};
thread_local const LoadInProgress* t_loads = nullptr;

// Marks a load in progress on this thread while dlopen runs the library's static initialisers.
class LoadScope {
 public:
  explicit LoadScope(const std::string& canonical) : load_{&canonical, t_loads} {
    t_loads = &load_;
  }
  ~LoadScope() { t_loads = load_.outer; }
  LoadScope(const LoadScope&) = delete;
  LoadScope& operator=(const LoadScope&) = delete;

 private:
  LoadInProgress load_;
};

bool LoadingOnThisThread(const std::string& canonical) {
  for (const LoadInProgress* l = t_loads; l != nullptr; l = l->outer) {
    if (*l->canonical == canonical) return true;
  }
  return false;
}

// What a library's static initialisers reported (KFFIModuleReportLoadError): every load of the
// library fails with it, however the loads interleave.
struct LoadFailure {
  std::string kind;     // of the first report
  std::string message;  // every report, one per line
};

// canonical path -> library. Heap-allocated and never freed, like the libraries themselves.
struct LibraryTable {
  std::mutex mutex;
  std::map<std::string, Library*> by_path;
  // The failures, by canonical path (written when the report comes, before the load that
  // opened the library returns: a thread whose dlopen returned the library without running its
  // initialisers (another thread, or an outer load on this one, ran them) finds it here) and by
  // dlopen handle (another path to the same file, e.g. a hard link, opens the same handle and
  // runs no initialiser). Entries are never removed: the library stays open.
  std::map<std::string, LoadFailure> failed_paths;
  std::map<void*, LoadFailure> failed_handles;

  // The failure of canonical, or of handle (when not NULL), or NULL. Caller holds mutex. A
  // failure found through one key is recorded under the other too.
  const LoadFailure* FailureLocked(const std::string& canonical, void* handle) {
    auto p = failed_paths.find(canonical);
    if (handle == nullptr) return p != failed_paths.end() ? &p->second : nullptr;
    auto h = failed_handles.find(handle);
    if (p != failed_paths.end()) {
      if (h == failed_handles.end()) h = failed_handles.emplace(handle, p->second).first;
      return &p->second;
    }
    if (h == failed_handles.end()) return nullptr;
    return &failed_paths.emplace(canonical, h->second).first->second;
  }

  static LibraryTable* Get() {
    static LibraryTable* table = new LibraryTable();
    return table;
  }
};

// Symbols registered by statically linked code, and the one module that serves them.
struct SystemLibTable {
  std::mutex mutex;
  std::map<std::string, void*> symbols;  // full symbol names, e.g. "__kffi_scale"
  Library library;
  KFFIObject* module = nullptr;  // one strong reference, never released

  static SystemLibTable* Get() {
    static SystemLibTable* table = new SystemLibTable();
    return table;
  }
};

// Module objects have no ABI cell: other libraries reach them only through the functions here.
struct ModulePayload {
  Library* library;
  std::vector<KFFIObject*> imports;  // owned; only ever appended to, under GraphMutex()

  explicit ModulePayload(Library* lib) : library(lib) {}
  ModulePayload(const ModulePayload&) = delete;
  ModulePayload& operator=(const ModulePayload&) = delete;
  ~ModulePayload() {
    for (KFFIObject* m : imports) HeaderDecRef(m);
  }
  bool is_system() const { return library->dl_handle == nullptr; }
};

// Guards every module's import list. One lock for the whole graph keeps the cycle check and the
// append atomic (two threads importing A into B and B into A must not both succeed).
std::mutex& GraphMutex() {
  static std::mutex* mutex = new std::mutex();
  return *mutex;
}

// A Function object over an exported symbol: calls it with a NULL handle (the export
// convention) and keeps the module that owns the code alive.
struct ModuleFunctionPayload {
  KFFIFunctionCell cell;
  KFFISafeCallType symbol;
  KFFIObject* module;

  ModuleFunctionPayload(KFFISafeCallType entry, KFFISafeCallType sym, KFFIObject* mod)
      : cell{entry, nullptr}, symbol(sym), module(mod) {
    HeaderIncRef(module);
  }
  ModuleFunctionPayload(const ModuleFunctionPayload&) = delete;
  ModuleFunctionPayload& operator=(const ModuleFunctionPayload&) = delete;
  ~ModuleFunctionPayload() { HeaderDecRef(module); }
};

int CallModuleFunction(void* handle, const KFFIAny* args, int32_t num_args, KFFIAny* result) {
  return RuntimePayload<ModuleFunctionPayload>(handle)->symbol(nullptr, args, num_args, result);
}

ModulePayload* CheckModule(KFFIObjectHandle mod, const char* where) {
  if (mod == nullptr) ThrowCApiError("ValueError", std::string(where) + ": mod is NULL");
  int32_t type_index = static_cast<KFFIObject*>(mod)->type_index;
  if (type_index != kKFFIModule) {
    ThrowCApiError("TypeError", std::string(where) + ": expected a `ffi.Module`, got `" +
                                    kffi::details::TypeKeyForMessage(type_index) + "`");
  }
  // Another runtime's module (e.g. one made by apache-tvm-ffi, which shares the type index) has
  // its own payload; only modules made here can be read as ModulePayload.
  if (static_cast<KFFIObject*>(mod)->deleter !=
      &kffi::details::RuntimePayloadDeleter<ModulePayload>) {
    ThrowCApiError("TypeError", std::string(where) +
                                    ": the `ffi.Module` was made by another runtime (e.g. "
                                    "apache-tvm-ffi), not by kffi");
  }
  return RuntimePayload<ModulePayload>(mod);
}

// ---- symbols ---------------------------------------------------------------------------------

// The code at m's symbol, through the one check of what is called (code_symbol.h); NULL when
// it has none. A symbol that resolves to something that is not code is an error naming it.
KFFISafeCallType FindCode(const ModulePayload* m, const std::string& symbol) {
  std::string problem;
  void* address = nullptr;
  if (m->is_system()) {
    SystemLibTable* sys = SystemLibTable::Get();
    {
      std::lock_guard<std::mutex> lock(sys->mutex);
      auto it = sys->symbols.find(symbol);
      if (it != sys->symbols.end()) address = it->second;
    }
    std::string where;
    if (address != nullptr && !kffi::details::IsLoadedCode(address, &where)) {
      problem = "the symbol `" + symbol + "` was registered with " + where +
                ": it is not code, and kffi calls only code";
      address = nullptr;
    }
  } else {
    address = kffi::details::FindCodeSymbol(m->library->dl_handle, symbol, &problem);
  }
  if (!problem.empty()) {
    ThrowCApiError("RuntimeError", "Cannot use module `" + m->library->path + "`: " + problem);
  }
  return reinterpret_cast<KFFISafeCallType>(address);
}

// Whether m has the symbol (for a library, as its file says: a metadata symbol; for the system
// library, as registered).
bool HasMetadataCode(const ModulePayload* m, const std::string& symbol) {
  if (m->is_system()) {
    SystemLibTable* sys = SystemLibTable::Get();
    std::lock_guard<std::mutex> lock(sys->mutex);
    return sys->symbols.count(symbol) != 0;
  }
  auto it = m->library->metadata.find(symbol);
  return it != m->library->metadata.end() && it->second.kind == kffi::details::ElfSymbolUse::kCall;
}

// The exported function `name` of m itself, or NULL. When the symbol table was read, only the
// names it lists count, so that lookup and listing agree (dlsym would also search the library's
// dependencies), and so that a data symbol of that name is never called.
KFFISafeCallType FindOwnFunction(const ModulePayload* m, const std::string& name) {
  if (name.empty() || name.front() == '_') return nullptr;  // `__kffi__*` is not a function
  const Library* lib = m->library;
  if (!m->is_system() && lib->names_known &&
      !std::binary_search(lib->functions.begin(), lib->functions.end(), name)) {
    return nullptr;
  }
  const char* prefix = lib->tvm ? kTvmExportPrefix : kExportPrefix;
  return FindCode(m, prefix + name);
}

std::vector<std::string> OwnFunctionNames(const ModulePayload* m) {
  if (!m->is_system()) return m->library->functions;
  std::vector<std::string> out;
  SystemLibTable* sys = SystemLibTable::Get();
  std::lock_guard<std::mutex> lock(sys->mutex);
  const std::string_view prefix(kExportPrefix);
  for (const auto& kv : sys->symbols) {
    std::string_view s(kv.first);
    if (s.size() > prefix.size() && s.compare(0, prefix.size(), prefix) == 0 &&
        s[prefix.size()] != '_') {
      out.emplace_back(s.substr(prefix.size()));
    }
  }
  return out;  // sorted: the map is
}

// ---- the import graph ------------------------------------------------------------------------

void CollectDepthFirstLocked(KFFIObject* mod, bool query_imports, std::set<KFFIObject*>* seen,
                             std::vector<KFFIObject*>* order) {
  if (!seen->insert(mod).second) return;
  order->push_back(mod);
  if (!query_imports) return;
  for (KFFIObject* imp : RuntimePayload<ModulePayload>(mod)->imports) {
    CollectDepthFirstLocked(imp, true, seen, order);
  }
}

// Modules searched for a name: mod first, then its imports depth first, each once. The pointers
// stay valid while the caller holds mod: imports are never removed and each one is held by the
// module that imported it.
std::vector<KFFIObject*> SearchOrder(KFFIObject* mod, bool query_imports) {
  std::set<KFFIObject*> seen;
  std::vector<KFFIObject*> order;
  std::lock_guard<std::mutex> lock(GraphMutex());
  CollectDepthFirstLocked(mod, query_imports, &seen, &order);
  return order;
}

// The module (in search order) whose library exports name, and the symbol; {NULL, NULL} if none.
std::pair<KFFIObject*, KFFISafeCallType> FindFunction(KFFIObject* mod, const std::string& name,
                                                      bool query_imports) {
  for (KFFIObject* m : SearchOrder(mod, query_imports)) {
    if (KFFISafeCallType sym = FindOwnFunction(RuntimePayload<ModulePayload>(m), name)) {
      return {m, sym};
    }
  }
  return {nullptr, nullptr};
}

// ---- loading ---------------------------------------------------------------------------------

std::string LoadError(std::string_view path, std::string_view why) {
  return "Cannot load module `" + std::string(path) + "`: " + std::string(why);
}

std::string DlErrorText() {
  const char* e = dlerror();
  return e != nullptr ? std::string(e) : std::string("unknown dlopen error");
}

std::string CanonicalPath(const std::string& path) {
  char buf[PATH_MAX];
  if (realpath(path.c_str(), buf) == nullptr) {
    int err = errno;
    if (err == ENOENT || err == ENOTDIR) {
      ThrowCApiError("RuntimeError", LoadError(path, "no such file"));
    }
    ThrowCApiError("RuntimeError", LoadError(path, std::strerror(err)));
  }
  return std::string(buf);
}

[[noreturn]] void ThrowAbiMismatch(const std::string& path, uint32_t library_abi) {
  ThrowCApiError(
      "RuntimeError",
      LoadError(path, "it was built for kffi ABI version " + std::to_string(library_abi) +
                          ", but this runtime (kffi " + std::to_string(KFFI_VERSION_MAJOR) + "." +
                          std::to_string(KFFI_VERSION_MINOR) + "." +
                          std::to_string(KFFI_VERSION_PATCH) + ") serves ABI version " +
                          std::to_string(KFFI_ABI_VERSION) +
                          "; rebuild the library against this kffi"));
}

// Rethrows the error a bridge function left in this thread's slot (kind and message kept).
[[noreturn]] void ThrowRaised(const std::string& fallback) {
  std::string kind, message;
  if (!TakeRaisedKindMessage(&kind, &message)) ThrowCApiError("RuntimeError", fallback);
  ThrowCApiError(kind, message);
}

// libkffi_tvm, opened once, the first time a TVM-FFI library is loaded. It lives next to the
// shared libkffi; a program linked with the static runtime cannot use it (it would bring a second
// runtime into the process).
const TvmBridgeApi* GetTvmBridge() {
  static std::mutex mutex;
  static const TvmBridgeApi* api = nullptr;
  static std::string failure;
  std::lock_guard<std::mutex> lock(mutex);
  if (api != nullptr) return api;
  if (!failure.empty()) ThrowCApiError("RuntimeError", failure);
  Dl_info self;
  std::string why;
  if (dladdr(reinterpret_cast<void*>(&KFFIModuleLoadFromFile), &self) == 0 ||
      self.dli_fname == nullptr) {
    why = "cannot locate libkffi itself";
  } else {
    std::string me(self.dli_fname);
    size_t slash = me.rfind('/');
    std::string dir = slash == std::string::npos ? "." : me.substr(0, slash);
    std::string base = slash == std::string::npos ? me : me.substr(slash + 1);
    if (base.compare(0, 10, "libkffi.so") != 0) {
      why = "the kffi runtime is linked statically into `" + me +
            "`; TVM-FFI libraries need the shared runtime (libkffi.so)";
    } else {
      std::string path = dir + "/" + kffi::details::kTvmBridgeLibraryName;
      dlerror();
      void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (handle == nullptr) {
        why = "cannot open kffi's TVM-FFI bridge `" + path + "`: " + DlErrorText();
      } else {
        std::string not_code;
        auto get = reinterpret_cast<kffi::details::TvmBridgeGetApiFn>(
            kffi::details::FindCodeSymbol(handle, kffi::details::kTvmBridgeEntrySymbol, &not_code));
        const TvmBridgeApi* got = get != nullptr ? get() : nullptr;
        if (got == nullptr || got->api_version != kffi::details::kTvmBridgeApiVersion ||
            got->abi_version != KFFI_ABI_VERSION) {
          why = "kffi's TVM-FFI bridge `" + path + "` belongs to another kffi build" +
                (not_code.empty() ? "" : " (" + not_code + ")");
        } else {
          api = got;
          return api;
        }
      }
    }
  }
  failure = "Cannot load TVM-FFI libraries: " + why;
  ThrowCApiError("RuntimeError", failure);
}

// Refuses what the file says cannot be loaded, before dlopen runs any of its code.
void CheckBeforeOpen(const std::string& given, const kffi::details::ElfExports& elf) {
  if (!elf.readable) {
    ThrowCApiError("RuntimeError",
                   LoadError(given, "not a loadable shared library: " + elf.problem));
  }
  if (!elf.misplaced_code.empty()) {
    std::string which;
    for (const std::string& m : elf.misplaced_code) which += (which.empty() ? "" : "; ") + m;
    ThrowCApiError("RuntimeError",
                   LoadError(given, which + ". kffi calls only code in executable sections, and "
                                            "this library says otherwise"));
  }
  if (elf.has_abi_version) {
    if (elf.abi_version_size != sizeof(uint32_t)) {
      ThrowCApiError("RuntimeError",
                     LoadError(given, "its `" + std::string(kAbiVersionSymbol) + "` record is " +
                                          std::to_string(elf.abi_version_size) +
                                          " bytes, expected 4 (a uint32_t); it was not built "
                                          "with <kffi/export.h>"));
    }
    if (!elf.abi_version_known) {
      ThrowCApiError("RuntimeError", LoadError(given, "its `" + std::string(kAbiVersionSymbol) +
                                                          "` record cannot be read from the file"));
    }
    if (elf.abi_version != KFFI_ABI_VERSION) ThrowAbiMismatch(given, elf.abi_version);
  }
  if (!elf.has_abi_version && elf.functions.empty() && elf.tvm_functions.empty()) {
    ThrowCApiError(
        "RuntimeError",
        LoadError(given, "it is not a kffi library: it exports neither `" +
                             std::string(kAbiVersionSymbol) + "` nor any `" + kExportPrefix +
                             "<name>` function (export functions with KFFI_EXPORT from "
                             "<kffi/export.h>), nor any TVM-FFI `" +
                             kTvmExportPrefix + "<name>` function"));
  }
}

// Opens a library that is not in the table yet. Everything the file can tell is checked before
// dlopen, so that a refused library's static initialisers never run here.
Library* OpenLibrary(const std::string& given, const std::string& canonical) {
  kffi::details::ElfExports elf = kffi::details::ReadElfExports(canonical);
  CheckBeforeOpen(given, elf);
  // A library with kffi exports is a kffi library, whatever else it exports.
  const bool tvm = !elf.has_abi_version && elf.functions.empty();
  LoadScope loading(canonical);
  void* handle = nullptr;
  void* tvm_state = nullptr;
  if (tvm) {
    const TvmBridgeApi* bridge = GetTvmBridge();
    if (bridge->open_library(canonical.c_str(), &elf, &handle, &tvm_state) != 0) {
      ThrowRaised(LoadError(given, "the TVM-FFI bridge failed without an error"));
    }
  } else {
    // RTLD_LOCAL: a kernel library's symbols must not satisfy another library's references (two
    // libraries may both define __kffi_scale). RTLD_LAZY: unresolved code is only bound if
    // called.
    dlerror();
    handle = dlopen(canonical.c_str(), RTLD_LAZY | RTLD_LOCAL);
    if (handle == nullptr) {
      ThrowCApiError("RuntimeError",
                     LoadError(given, "not a loadable shared library: " + DlErrorText()));
    }
  }
  auto* lib = new Library();
  lib->path = canonical;
  lib->dl_handle = handle;
  lib->names_known = true;
  lib->functions = tvm ? std::move(elf.tvm_functions) : std::move(elf.functions);
  lib->metadata = std::move(elf.metadata);
  lib->tvm = tvm;
  lib->tvm_state = tvm_state;
  return lib;
}

[[noreturn]] void ThrowLoadFailure(const LoadFailure& failure, const std::string& given) {
  ThrowCApiError(failure.kind, LoadError(given, failure.message));
}

// A strong reference to the library's live module, or a new module. Caller holds the table lock.
KFFIObject* AcquireModuleLocked(Library* lib) {
  if (lib->module_weak != nullptr) {
    KFFIObjectHandle live = nullptr;
    KFFIObjectWeakLock(lib->module_weak, &live);
    if (live != nullptr) return static_cast<KFFIObject*>(live);
    HeaderDecWeakRef(lib->module_weak);
    lib->module_weak = nullptr;
  }
  KFFIObject* mod = NewRuntimeObject<ModulePayload>(kKFFIModule, lib);
  HeaderIncWeakRef(mod);
  lib->module_weak = mod;
  return mod;
}

KFFIObject* LoadModule(const std::string& given) {
  if (given.empty()) ThrowCApiError("ValueError", "Cannot load module: the path is empty");
  const std::string canonical = CanonicalPath(given);
  LibraryTable* table = LibraryTable::Get();
  {
    std::lock_guard<std::mutex> lock(table->mutex);
    if (const LoadFailure* failure = table->FailureLocked(canonical, nullptr)) {
      ThrowLoadFailure(*failure, given);
    }
    auto it = table->by_path.find(canonical);
    if (it != table->by_path.end()) return AcquireModuleLocked(it->second);
  }
  // A static initialiser of the library (or of one it loads) loading it again: its load has not
  // returned, so whether it fails is not known yet, and its initialisers have not all run.
  if (LoadingOnThisThread(canonical)) {
    ThrowCApiError("RuntimeError",
                   LoadError(given,
                             "it is being loaded on this thread: a static initialiser (its own, "
                             "or one of a library it loads) loads it again; load it once its "
                             "own load has returned"));
  }
  // Opened without the lock: dlopen runs the library's static initialisers, which may load
  // other modules themselves. Threads that open it at once get one handle; the dynamic loader
  // runs the initialisers once, and their reports go to the table as they come.
  Library* opened = OpenLibrary(given, canonical);
  void* const handle = opened->dl_handle;
  std::lock_guard<std::mutex> lock(table->mutex);
  // Kept when the load failed too: the library stays open, and so does what the TVM-FFI bridge
  // keeps for it.
  auto inserted = table->by_path.emplace(canonical, opened);
  if (!inserted.second) delete opened;  // another thread won; dlopen handles are counted, fine
  if (const LoadFailure* failure = table->FailureLocked(canonical, handle)) {
    ThrowLoadFailure(*failure, given);
  }
  return AcquireModuleLocked(inserted.first->second);
}

int VisitNames(const std::vector<std::string>& names,
               int (*visit)(void* ctx, const KFFIByteArray* name), void* ctx) {
  for (const std::string& n : names) {
    KFFIByteArray arr{n.data(), n.size()};
    if (visit(ctx, &arr) != 0) break;
  }
  return 0;
}

}  // namespace

int KFFIModuleLoadFromFile(const KFFIByteArray* path, KFFIObjectHandle* out) {
  KFFI_CAPI_BEGIN();
  CheckOutArg(out, "KFFIModuleLoadFromFile: out");
  *out = nullptr;
  std::string given(ByteArrayArg(path, "KFFIModuleLoadFromFile: path"));
  // The path reaches the system as a C string: an embedded NUL would cut it short and name
  // another file.
  if (given.find('\0') != std::string::npos) {
    ThrowCApiError("ValueError", "Cannot load module: the path contains a NUL byte at offset " +
                                     std::to_string(given.find('\0')));
  }
  *out = LoadModule(given);
  KFFI_CAPI_END();
}

int KFFIModuleGetSystemLib(KFFIObjectHandle* out) {
  KFFI_CAPI_BEGIN();
  CheckOutArg(out, "KFFIModuleGetSystemLib: out");
  SystemLibTable* sys = SystemLibTable::Get();
  std::lock_guard<std::mutex> lock(sys->mutex);
  if (sys->module == nullptr) {
    sys->library.path = kSystemLibName;
    sys->library.names_known = true;
    sys->module = NewRuntimeObject<ModulePayload>(kKFFIModule, &sys->library);
  }
  HeaderIncRef(sys->module);
  *out = sys->module;
  KFFI_CAPI_END();
}

int KFFIModuleReportLoadError(const KFFIByteArray* kind, const KFFIByteArray* message,
                              int32_t* taken) {
  KFFI_CAPI_BEGIN();
  CheckOutArg(taken, "KFFIModuleReportLoadError: taken");
  *taken = 0;
  std::string_view k = ByteArrayArg(kind, "KFFIModuleReportLoadError: kind");
  std::string_view m = ByteArrayArg(message, "KFFIModuleReportLoadError: message");
  if (k.empty()) ThrowCApiError("ValueError", "KFFIModuleReportLoadError: kind is empty");
  const LoadInProgress* load = t_loads;
  if (load == nullptr) return 0;
  LibraryTable* table = LibraryTable::Get();
  std::lock_guard<std::mutex> lock(table->mutex);
  LoadFailure& failure = table->failed_paths[*load->canonical];
  if (failure.kind.empty()) {
    failure.kind = std::string(k);
  } else {
    failure.message += '\n';
  }
  failure.message.append(m.data(), m.size());
  *taken = 1;
  KFFI_CAPI_END();
}

int KFFIModuleRegisterSystemLibSymbol(const char* name, void* symbol) {
  KFFI_CAPI_BEGIN();
  if (name == nullptr || name[0] == '\0') {
    ThrowCApiError("ValueError", "KFFIModuleRegisterSystemLibSymbol: name is NULL or empty");
  }
  if (symbol == nullptr) {
    ThrowCApiError("ValueError",
                   std::string("KFFIModuleRegisterSystemLibSymbol: symbol `") + name + "` is NULL");
  }
  // An object that KFFIModuleLoadObject links and opens is served by its own module.
  if (kffi::details::SystemLibRegistrationsSuspended()) return 0;
  if (std::strcmp(name, kAbiVersionSymbol) == 0) {
    // Statically linked code may have been compiled against another kffi than the one loaded.
    uint32_t v;
    std::memcpy(&v, symbol, sizeof(v));
    if (v != KFFI_ABI_VERSION) {
      ThrowCApiError("RuntimeError",
                     "Cannot register statically linked kffi code in the system library: it was "
                     "built for kffi ABI version " +
                         std::to_string(v) + ", but this runtime serves ABI version " +
                         std::to_string(KFFI_ABI_VERSION));
    }
    return 0;
  }
  SystemLibTable* sys = SystemLibTable::Get();
  std::lock_guard<std::mutex> lock(sys->mutex);
  auto inserted = sys->symbols.emplace(name, symbol);
  if (!inserted.second && inserted.first->second != symbol) {
    ThrowCApiError("KeyError", std::string("System library symbol `") + name +
                                   "` is already registered with another address");
  }
  KFFI_CAPI_END();
}

int KFFIModuleGetFunction(KFFIObjectHandle mod, const KFFIByteArray* name, int query_imports,
                          KFFIObjectHandle* out) {
  KFFI_CAPI_BEGIN();
  CheckOutArg(out, "KFFIModuleGetFunction: out");
  *out = nullptr;
  CheckModule(mod, "KFFIModuleGetFunction");
  std::string n(ByteArrayArg(name, "KFFIModuleGetFunction: name"));
  auto found = FindFunction(static_cast<KFFIObject*>(mod), n, query_imports != 0);
  const Library* owner_lib =
      found.first != nullptr ? RuntimePayload<ModulePayload>(found.first)->library : nullptr;
  if (found.second != nullptr && owner_lib->tvm) {
    // Called through the bridge: the TVM-FFI runtime it is bound to decides the error slot and
    // the environment the call sees.
    if (GetTvmBridge()->make_function(owner_lib->tvm_state, found.second, n.c_str(), found.first,
                                      out) != 0) {
      return -1;
    }
  } else if (found.second != nullptr) {
    // Symbols made by KFFI_EXPORT (they come with `__kffi__meta_<name>`) ignore their handle, so
    // the function object can enter them directly, one indirect call fewer per call. Other
    // symbols keep the NULL-handle convention through CallModuleFunction.
    bool from_export = HasMetadataCode(RuntimePayload<ModulePayload>(found.first), kMetaPrefix + n);
    KFFISafeCallType entry = from_export ? found.second : &CallModuleFunction;
    *out = NewRuntimeObject<ModuleFunctionPayload>(kKFFIFunction, entry, found.second, found.first);
  }
  KFFI_CAPI_END();
}

int KFFIModuleListFunctions(KFFIObjectHandle mod, int query_imports,
                            int (*visit)(void* ctx, const KFFIByteArray* name), void* ctx) {
  KFFI_CAPI_BEGIN();
  CheckModule(mod, "KFFIModuleListFunctions");
  if (visit == nullptr) ThrowCApiError("ValueError", "KFFIModuleListFunctions: visit is NULL");
  std::set<std::string> names;
  for (KFFIObject* m : SearchOrder(static_cast<KFFIObject*>(mod), query_imports != 0)) {
    for (std::string& n : OwnFunctionNames(RuntimePayload<ModulePayload>(m))) {
      names.insert(std::move(n));
    }
  }
  // Visited from a copy, without any lock held, so a visitor may use the module API.
  return VisitNames(std::vector<std::string>(names.begin(), names.end()), visit, ctx);
  KFFI_CAPI_END();
}

int KFFIModuleGetFunctionMetadata(KFFIObjectHandle mod, const KFFIByteArray* name, KFFIAny* out) {
  KFFI_CAPI_BEGIN();
  CheckOutArg(out, "KFFIModuleGetFunctionMetadata: out");
  SetNone(out);
  CheckModule(mod, "KFFIModuleGetFunctionMetadata");
  std::string n(ByteArrayArg(name, "KFFIModuleGetFunctionMetadata: name"));
  KFFIObject* owner = FindFunction(static_cast<KFFIObject*>(mod), n, true).first;
  if (owner == nullptr) return 0;
  const Library* owner_lib = RuntimePayload<ModulePayload>(owner)->library;
  if (owner_lib->tvm) return GetTvmBridge()->get_metadata(owner_lib->tvm_state, n.c_str(), out);
  const std::string symbol = kMetaPrefix + n;
  const ModulePayload* owner_module = RuntimePayload<ModulePayload>(owner);
  if (!owner_module->is_system()) {
    // The file said what the symbol is: only code is called; a `const char[]` is its text.
    auto it = owner_lib->metadata.find(symbol);
    if (it == owner_lib->metadata.end()) return 0;
    if (it->second.kind == kffi::details::ElfSymbolUse::kText) {
      kffi::details::MakeStringAny(it->second.text.data(), it->second.text.size(),
                                   /*is_bytes=*/false, out);
      return 0;
    }
    if (it->second.kind == kffi::details::ElfSymbolUse::kRefuse) {
      ThrowCApiError("RuntimeError", "The metadata symbol `" + symbol + "` of `" + owner_lib->path +
                                         "` cannot be read: it is " + it->second.text);
    }
  }
  KFFISafeCallType meta = FindCode(owner_module, symbol);
  if (meta == nullptr) return 0;
  KFFIAny result;
  SetNone(&result);
  int rc = meta(nullptr, nullptr, 0, &result);
  if (rc != 0) {
    // Library code: a failed call may still have left a value, or no error, or a code outside
    // the protocol. The caller gets -1 with an error in the slot (or -2, a pending signal, as
    // it came), and nothing leaks.
    // The error is taken before the value is released: a deleter may call into kffi (e.g.
    // Python code run by a release) and replace the thread's error.
    KFFIObjectHandle err = nullptr;
    KFFIErrorMoveFromRaised(&err);
    if (result.type_index >= kKFFIStaticObjectBegin) HeaderDecRef(result.v_obj);
    if ((err != nullptr && rc == -1) || rc == -2) {
      if (err != nullptr) {
        KFFIErrorSetRaised(err);
        HeaderDecRef(static_cast<KFFIObject*>(err));
      }
      return rc;
    }
    if (err != nullptr) HeaderDecRef(static_cast<KFFIObject*>(err));
    ThrowCApiError("RuntimeError", "The metadata symbol `" + std::string(kMetaPrefix) + n +
                                       "` failed with code " + std::to_string(rc) +
                                       (err != nullptr ? "" : " without raising an error") +
                                       " (expected 0, or -1 with an error raised)");
  }
  if (result.type_index != kKFFISmallStr && result.type_index != kKFFIStr) {
    std::string got = kffi::details::TypeKeyForMessage(result.type_index);
    if (result.type_index >= kKFFIStaticObjectBegin) HeaderDecRef(result.v_obj);
    ThrowCApiError("TypeError", "The metadata symbol `" + std::string(kMetaPrefix) + n +
                                    "` returned `" + got + "`, expected a str");
  }
  *out = result;
  KFFI_CAPI_END();
}

int KFFIModuleImport(KFFIObjectHandle mod, KFFIObjectHandle other) {
  KFFI_CAPI_BEGIN();
  ModulePayload* m = CheckModule(mod, "KFFIModuleImport");
  CheckModule(other, "KFFIModuleImport");
  auto* self = static_cast<KFFIObject*>(mod);
  auto* imported = static_cast<KFFIObject*>(other);
  std::lock_guard<std::mutex> lock(GraphMutex());
  if (std::find(m->imports.begin(), m->imports.end(), imported) != m->imports.end()) return 0;
  std::set<KFFIObject*> seen;
  std::vector<KFFIObject*> reachable;
  CollectDepthFirstLocked(imported, true, &seen, &reachable);
  if (seen.count(self) != 0) {
    ThrowCApiError("ValueError", "Cannot import module `" +
                                     RuntimePayload<ModulePayload>(imported)->library->path +
                                     "` into `" + m->library->path +
                                     "`: it would make an import cycle");
  }
  m->imports.reserve(m->imports.size() + 1);  // may throw; nothing changed yet
  HeaderIncRef(imported);
  m->imports.push_back(imported);
  KFFI_CAPI_END();
}

int KFFIModuleGetName(KFFIObjectHandle mod, KFFIAny* out) {
  KFFI_CAPI_BEGIN();
  CheckOutArg(out, "KFFIModuleGetName: out");
  SetNone(out);
  const std::string& path = CheckModule(mod, "KFFIModuleGetName")->library->path;
  kffi::details::MakeStringAny(path.data(), path.size(), /*is_bytes=*/false, out);
  KFFI_CAPI_END();
}
