// src/module_elf.h: reads the kffi symbols a shared library exports from its ELF file.
#ifndef KFFI_SRC_MODULE_ELF_H_
#define KFFI_SRC_MODULE_ELF_H_

#include <cstdint>
#include <string>
#include <vector>

namespace kffi {
namespace details {

/// Symbol name prefixes of the module ABI (docs in kffi/export.h).
constexpr const char kExportPrefix[] = "__kffi_";
constexpr const char kMetaPrefix[] = "__kffi__meta_";
constexpr const char kAbiVersionSymbol[] = "__kffi__abi_version";

/// What the dynamic symbol table of a library file says about its kffi exports. Read from the
/// file rather than from the loaded image because dlopen has no way to enumerate symbols, and
/// because reading it first lets the loader refuse a library before running any of its code.
struct ElfExports {
  /// True when the file is an ELF64 shared object of this host's byte order whose dynamic symbol
  /// table could be read; the fields below are meaningful only then.
  bool readable = false;
  /// Why it was not readable (for diagnostics; the loader prefers dlerror's wording).
  std::string problem;
  /// Names of the exported functions (`__kffi_<name>` minus the prefix), sorted and unique.
  std::vector<std::string> functions;
  /// Whether `__kffi__abi_version` is defined and exported.
  bool has_abi_version = false;
  /// Whether its value could be read from the file (a 4-byte initialised datum).
  bool abi_version_known = false;
  uint32_t abi_version = 0;
};

/// Reads the exports of the library at path. Never throws for a malformed file (readable is false
/// then); throws std::bad_alloc only.
ElfExports ReadElfExports(const std::string& path);

}  // namespace details
}  // namespace kffi

#endif  // KFFI_SRC_MODULE_ELF_H_
