// src/module/module_elf.h: reads what a shared library exports and imports from its ELF file.
// SPDX-License-Identifier: Apache-2.0
#ifndef KFFI_SRC_MODULE_MODULE_ELF_H_
#define KFFI_SRC_MODULE_MODULE_ELF_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace kffi {
namespace details {

/// Symbol name prefixes of the module ABI (docs in kffi/export.h).
constexpr const char kExportPrefix[] = "__kffi_";
constexpr const char kMetaPrefix[] = "__kffi__meta_";
constexpr const char kAbiVersionSymbol[] = "__kffi__abi_version";
/// Symbol names of libraries built for the TVM-FFI ABI (docs/tvm_ffi.md).
constexpr const char kTvmExportPrefix[] = "__tvm_ffi_";
constexpr const char kTvmMetadataPrefix[] = "__tvm_ffi__metadata_";
constexpr const char kTvmDocPrefix[] = "__tvm_ffi__doc_";
constexpr const char kTvmLibraryCtxSymbol[] = "__tvm_ffi__library_ctx";
constexpr const char kTvmLibraryBinSymbol[] = "__tvm_ffi__library_bin";
/// Functions of the TVM-FFI C runtime that such libraries import.
constexpr const char kTvmRuntimePrefix[] = "TVMFFI";

/// A dynamic relocation that stores the address of an imported function in the loaded image.
struct ElfImportSlot {
  std::string symbol;
  /// r_offset: where the relocation writes, relative to the load address.
  uint64_t offset = 0;
  /// Whether it stores exactly the symbol's address in a pointer-sized slot (GLOB_DAT, JUMP_SLOT,
  /// or a 64-bit absolute relocation with addend 0, on x86-64 and AArch64): only such a slot can
  /// be redirected by storing another address.
  bool plain = false;
};

/// How kffi may use a metadata symbol (`__kffi__meta_<f>`, `__tvm_ffi__metadata_<f>`,
/// `__tvm_ffi__doc_<f>`), which it reads for a str: by calling it, by taking the text it holds,
/// or not at all. Decided from the file, so that nothing that is not code is ever called.
struct ElfSymbolUse {
  enum Kind : uint8_t {
    kCall,    // code in an executable section: called like a function for its str
    kText,    // a data object holding a NUL-terminated string (a `const char[]`): text
    kRefuse,  // anything else: reading it is an error, text says what the symbol is
  };
  Kind kind = kRefuse;
  std::string text;
};

/// What the dynamic symbol table (and the dynamic section) of a library file says. Read from the
/// file rather than from a loaded image because dlopen cannot enumerate symbols, and because
/// reading first lets the loader refuse a library before any of its code runs.
struct ElfExports {
  /// True when the file is an ELF64 shared object for this host whose tables could be read; the
  /// fields below are meaningful only then.
  bool readable = false;
  /// Why it was not readable, worded to follow "not a loadable shared library: ".
  std::string problem;
  /// Names of the exported functions (`__kffi_<name>` minus the prefix), sorted and unique. Only
  /// code symbols count (IsCodeSymbol in module_elf.cc: a function, an indirect function or an
  /// untyped label, in an executable section): a data object named `__kffi_x` is not a function.
  std::vector<std::string> functions;
  /// Whether `__kffi__abi_version` is defined and exported.
  bool has_abi_version = false;
  /// Its size in bytes as the symbol table says (4 for a well-formed record).
  uint64_t abi_version_size = 0;
  /// Whether its value could be read from the file (a 4-byte initialised datum).
  bool abi_version_known = false;
  uint32_t abi_version = 0;

  /// TVM-FFI exports: `__tvm_ffi_<name>` code symbols (minus the prefix), sorted and unique.
  std::vector<std::string> tvm_functions;
  /// Whether `__tvm_ffi__library_ctx` / `__tvm_ffi__library_bin` are defined.
  bool tvm_library_ctx = false;
  bool tvm_library_bin = false;
  /// TVM-FFI runtime functions the library needs (undefined, non-weak `TVMFFI*`), sorted.
  std::vector<std::string> tvm_imports;
  /// apache-tvm-ffi C++ entities the library needs (undefined, non-weak, mangled names in
  /// namespace tvm::ffi: functions, vtables, type infos), sorted. The headers define everything
  /// else inline, so these are libtvm_ffi's extra C++ API (JSON, serialization, structural
  /// equality, repr, ...), which kffi's shim does not provide (docs/tvm_ffi.md).
  std::vector<std::string> tvm_cxx_imports;
  /// Whether it was built with apache-tvm-ffi 0.1.8.post2 or older without a sign of 0.1.8: the
  /// releases before 0.1.8 laid an error record out in 56 bytes where later ones (and kffi's
  /// runtime) use 72, so errors the library makes would be misread (docs/tvm_ffi.md, "Version
  /// skew").
  bool tvm_pre_0_1_8_errors = false;
  /// Whether it defines GNU unique symbols in namespace tvm::ffi: the type-index statics of
  /// apache-tvm-ffi's C++ headers, which the dynamic loader shares with every library of the
  /// process, libtvm_ffi included (docs/tvm_ffi.md, "Which runtime a library runs on").
  bool tvm_shared_statics = false;
  /// The symbols kffi would call (`__kffi_<f>`, `__tvm_ffi_<f>` and the metadata symbols) that
  /// claim to be code (STT_FUNC, STT_GNU_IFUNC) but lie outside every executable section, each
  /// described for a message ("`__kffi_f` is a function (STT_FUNC) in section `.data`, which is
  /// not executable"). The loader refuses such a library before dlopen.
  std::vector<std::string> misplaced_code;
  /// The metadata symbols the library exports, by full name, and how each may be read.
  std::map<std::string, ElfSymbolUse> metadata;
  /// Whether `__tvm_ffi__library_ctx` is a pointer-sized, aligned variable that stays writable
  /// once loaded (a writable section, outside PT_GNU_RELRO): what the loader stores the library's
  /// context in. When it is not, tvm_library_ctx_problem says what it is.
  bool tvm_library_ctx_writable = false;
  std::string tvm_library_ctx_problem;
  /// DT_SONAME, empty when there is none.
  std::string soname;
  /// The TVM-FFI runtime functions the file defines and exports as code (`TVMFFI*`), sorted:
  /// what tells apache-tvm-ffi's libtvm_ffi (or kffi's shim) from another library.
  std::vector<std::string> tvm_runtime_functions;
  /// Whether it defines `KFFITvmBridgeGetApi` (kTvmBridgeEntrySymbol): it is a kffi TVM-FFI bridge
  /// (libkffi_tvm), of any build, which must never be made global.
  bool kffi_bridge = false;
  /// DT_NEEDED entries, in file order.
  std::vector<std::string> needed;
  /// The dynamic relocations against those imports, in file order (what the TVM-FFI bridge
  /// redirects, src/tvm_bridge/rebind.cc). Complete only when tvm_import_slots_complete.
  std::vector<ElfImportSlot> tvm_import_slots;
  /// Whether every relocation the dynamic loader applies was read: the dynamic section's
  /// DT_RELA and DT_JMPREL tables (RELA form, indexing the dynamic symbol table) lie in the file,
  /// and there is no DT_REL table.
  bool tvm_import_slots_complete = false;
};

/// Reads the library at path. A path that is not a regular file (a FIFO, a directory, a device)
/// is never opened for reading beyond a non-blocking open, so it cannot block. Never throws for a
/// malformed file (readable is false then); throws std::bad_alloc only. Every size and offset
/// read from the file is checked against the file's size before anything is allocated.
ElfExports ReadElfExports(const std::string& path);

/// Opens path for reading if it is a regular file, without blocking: stat first (opening a FIFO
/// for reading waits for a writer), then a non-blocking open checked again by fstat (the path may
/// have been swapped meanwhile). Returns the descriptor (O_CLOEXEC; the caller closes it) and
/// sets *size; or -1 with *problem saying why: "no such file", "it is a FIFO (named pipe), not a
/// regular file" (a directory, a device, a socket likewise), "cannot read it: <strerror>".
int OpenRegularFile(const std::string& path, uint64_t* size, std::string* problem);

/// The same from bytes in memory (the fuzz target's entry point).
ElfExports ReadElfExportsFromMemory(const uint8_t* data, size_t size);

/// The ELF machine number of this host (e_machine), or 0 when the reader does not know it.
inline uint16_t HostElfMachine() {
#if defined(__x86_64__)
  return 62;
#elif defined(__aarch64__)
  return 183;
#elif defined(__powerpc64__)
  return 21;
#elif defined(__riscv) && __riscv_xlen == 64
  return 243;
#else
  return 0;
#endif
}

// ---- ELF64 structures, written from the System V gABI so that no platform header is needed ----

struct Elf64Header {
  unsigned char ident[16];
  uint16_t type;
  uint16_t machine;
  uint32_t version;
  uint64_t entry;
  uint64_t phoff;
  uint64_t shoff;
  uint32_t flags;
  uint16_t ehsize;
  uint16_t phentsize;
  uint16_t phnum;
  uint16_t shentsize;
  uint16_t shnum;
  uint16_t shstrndx;
};
struct Elf64ProgramHeader {
  uint32_t type;
  uint32_t flags;
  uint64_t offset;
  uint64_t vaddr;
  uint64_t paddr;
  uint64_t filesz;
  uint64_t memsz;
  uint64_t align;
};
struct Elf64Section {
  uint32_t name;
  uint32_t type;
  uint64_t flags;
  uint64_t addr;
  uint64_t offset;
  uint64_t size;
  uint32_t link;
  uint32_t info;
  uint64_t addralign;
  uint64_t entsize;
};
struct Elf64Symbol {
  uint32_t name;
  unsigned char info;
  unsigned char other;
  uint16_t shndx;
  uint64_t value;
  uint64_t size;
};
struct Elf64Dyn {
  int64_t tag;
  uint64_t val;
};
static_assert(sizeof(Elf64Header) == 64 && sizeof(Elf64ProgramHeader) == 56 &&
                  sizeof(Elf64Section) == 64 && sizeof(Elf64Symbol) == 24 && sizeof(Elf64Dyn) == 16,
              "ELF64 structures must match the gABI layout");

constexpr uint16_t kElfTypeDyn = 3;
constexpr uint32_t kProgramLoad = 1;
constexpr uint32_t kProgramDynamic = 2;
constexpr uint32_t kProgramGnuStack = 0x6474e551;
constexpr uint32_t kProgramGnuRelro = 0x6474e552;
constexpr uint32_t kProgramFlagExec = 0x1;
constexpr int64_t kDynNull = 0;
constexpr int64_t kDynNeeded = 1;
constexpr int64_t kDynHash = 4;
constexpr int64_t kDynStrTab = 5;
constexpr int64_t kDynSymTab = 6;
constexpr int64_t kDynStrSz = 10;
constexpr int64_t kDynSoname = 14;
constexpr int64_t kDynSymEnt = 11;
constexpr int64_t kDynPltRelSz = 2;
constexpr int64_t kDynRela = 7;
constexpr int64_t kDynRelaSz = 8;
constexpr int64_t kDynRelaEnt = 9;
constexpr int64_t kDynRel = 17;
constexpr int64_t kDynRelSz = 18;
constexpr int64_t kDynPltRel = 20;
constexpr int64_t kDynJmpRel = 23;
struct Elf64Rela {
  uint64_t offset;
  uint64_t info;  // symbol index << 32 | type
  int64_t addend;
};

}  // namespace details
}  // namespace kffi

#endif  // KFFI_SRC_MODULE_MODULE_ELF_H_
