// tests/python/hostile/hostile_libs/load_errors.cc: a kffi library whose static initialiser reports
// a load error (KFFIModuleReportLoadError), as $KFFI_TEST_LOAD_MODE says: "report"; "none" (loads
// fine); "self-before" / "self-after" (it loads its own file again before / after reporting);
// "self-only" (loads itself, reports nothing); "sleep" (reports after 300 ms, so that other threads
// open it meanwhile). What a load from inside the initialiser gave is printed on stderr ("inner
// load: ok" or "inner load: <kind>: <message>"). test_hostile_loader.py drives it.
// SPDX-License-Identifier: Apache-2.0
#include <dlfcn.h>
#include <kffi/export.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

namespace {

int64_t Twice(int64_t x) { return 2 * x; }

void LoadSelf() {
  Dl_info info;
  if (dladdr(reinterpret_cast<void*>(&Twice), &info) == 0 || info.dli_fname == nullptr) {
    std::fprintf(stderr, "inner load: cannot find my own path\n");
    return;
  }
  KFFIByteArray path{info.dli_fname, std::strlen(info.dli_fname)};
  KFFIObjectHandle mod = nullptr;
  if (KFFIModuleLoadFromFile(&path, &mod) == 0) {
    std::fprintf(stderr, "inner load: ok\n");
    KFFIObjectDecRef(mod);
    return;
  }
  KFFIObjectHandle err = nullptr;
  KFFIErrorMoveFromRaised(&err);
  if (err == nullptr) {
    std::fprintf(stderr, "inner load: failed without an error\n");
    return;
  }
  const KFFIErrorCell* cell = KFFIErrorGetCellPtr(err);
  std::fprintf(stderr, "inner load: %.*s: %.*s\n", static_cast<int>(cell->kind.size),
               cell->kind.data, static_cast<int>(cell->message.size), cell->message.data);
  KFFIObjectDecRef(err);
}

void Report() {
  const std::string kind = "ValueError";
  const std::string message = "load_errors: the export `twice` is malformed";
  KFFIByteArray k{kind.data(), kind.size()};
  KFFIByteArray m{message.data(), message.size()};
  int32_t taken = 0;
  KFFIModuleReportLoadError(&k, &m, &taken);
}

struct Init {
  Init() {
    const char* env = std::getenv("KFFI_TEST_LOAD_MODE");
    const std::string mode = env != nullptr ? env : "report";
    if (mode == "none") return;
    if (mode == "self-before" || mode == "self-only") LoadSelf();
    if (mode == "sleep") std::this_thread::sleep_for(std::chrono::milliseconds(300));
    if (mode != "self-only") Report();
    if (mode == "self-after") LoadSelf();
  }
};
const Init g_init;

}  // namespace

KFFI_EXPORT(twice, Twice);
