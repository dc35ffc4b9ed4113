// src/core/code_symbol.cc: checks that what kffi calls is code in an executable segment.
// SPDX-License-Identifier: Apache-2.0
#include "core/code_symbol.h"

#include <dlfcn.h>
#include <link.h>

#include <cstdint>
#include <cstdio>

namespace kffi {
namespace details {
namespace {

constexpr uint32_t kFlagExec = PF_X;

struct Lookup {
  uintptr_t address;
  bool found = false;
  bool executable = false;
  std::string object;
};

int FindSegment(struct dl_phdr_info* info, size_t, void* data) {
  auto* look = static_cast<Lookup*>(data);
  for (ElfW(Half) i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type != PT_LOAD) continue;
    const uintptr_t begin = info->dlpi_addr + ph.p_vaddr;
    if (look->address < begin || look->address - begin >= ph.p_memsz) continue;
    look->found = true;
    look->executable = (ph.p_flags & kFlagExec) != 0;
    look->object = info->dlpi_name != nullptr && info->dlpi_name[0] != '\0' ? info->dlpi_name
                                                                            : "the main program";
    return 1;
  }
  return 0;
}

}  // namespace

bool IsLoadedCode(const void* address, std::string* where) {
  Lookup look;
  look.address = reinterpret_cast<uintptr_t>(address);
  dl_iterate_phdr(&FindSegment, &look);
  if (look.found && look.executable) return true;
  char hex[2 + 2 * sizeof(void*) + 1];
  std::snprintf(hex, sizeof(hex), "%p", address);
  *where = look.found
               ? std::string(hex) + ", in a segment of `" + look.object + "` that is not executable"
               : std::string(hex) + ", outside every loaded object";
  return false;
}

void* FindCodeSymbol(void* handle, const std::string& name, std::string* problem) {
  problem->clear();
  dlerror();
  void* address = dlsym(handle, name.c_str());
  if (address == nullptr) return nullptr;
  std::string where;
  if (IsLoadedCode(address, &where)) return address;
  *problem = "the symbol `" + name + "` resolves to " + where +
             ": it is not code, and kffi calls only code";
  return nullptr;
}

}  // namespace details
}  // namespace kffi
