// src/module_elf.cc: a small, self-contained ELF64 reader for the dynamic symbol table.
#include "module_elf.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string_view>

namespace kffi {
namespace details {
namespace {

// The few ELF64 structures needed, written from the System V gABI so that no platform header is
// required (and the layout is pinned here, not by whatever <elf.h> a system ships).
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
static_assert(sizeof(Elf64Header) == 64 && sizeof(Elf64Section) == 64 && sizeof(Elf64Symbol) == 24,
              "ELF64 structures must match the gABI layout");

constexpr unsigned char kElfClass64 = 2;
constexpr unsigned char kElfData2Lsb = 1;
constexpr unsigned char kElfData2Msb = 2;
constexpr uint16_t kElfTypeDyn = 3;
constexpr uint32_t kSectionNoBits = 8;
constexpr uint32_t kSectionDynSym = 11;
constexpr uint16_t kSectionIndexUndef = 0;
constexpr uint16_t kSectionIndexLoReserve = 0xff00;
constexpr unsigned char kBindGlobal = 1;
constexpr unsigned char kBindWeak = 2;
constexpr unsigned char kBindGnuUnique = 10;
constexpr unsigned char kVisibilityDefault = 0;
constexpr unsigned char kVisibilityProtected = 3;
// Sanity bound on symbol tables: a library with more than this many dynamic symbols is not one
// this reader should spend memory on (real kernel libraries have thousands at most).
constexpr uint64_t kMaxDynSymBytes = uint64_t{256} << 20;

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};

class ElfFile {
 public:
  explicit ElfFile(const std::string& path) : file_(std::fopen(path.c_str(), "rb")) {
    if (file_ && std::fseek(file_.get(), 0, SEEK_END) == 0) {
      long end = std::ftell(file_.get());  // NOLINT(runtime/int): ftell's type
      if (end > 0) size_ = static_cast<uint64_t>(end);
    }
  }
  bool is_open() const { return file_ != nullptr; }
  uint64_t size() const { return size_; }

  /// Reads exactly n bytes at offset; false when the range lies outside the file.
  bool Read(uint64_t offset, void* out, uint64_t n) {
    if (offset > size_ || n > size_ - offset) return false;
    if (std::fseek(file_.get(), static_cast<long>(offset), SEEK_SET) != 0) return false;
    return n == 0 || std::fread(out, 1, n, file_.get()) == n;
  }

 private:
  std::unique_ptr<std::FILE, FileCloser> file_;
  uint64_t size_ = 0;
};

bool HostIsLittleEndian() {
  const uint16_t probe = 1;
  unsigned char first;
  std::memcpy(&first, &probe, 1);
  return first == 1;
}

bool StartsWith(std::string_view s, std::string_view prefix) {
  return s.size() >= prefix.size() && s.compare(0, prefix.size(), prefix) == 0;
}

// Reads the value of a 4-byte initialised datum from the section that holds it.
bool ReadUint32Symbol(ElfFile* file, const std::vector<Elf64Section>& sections,
                      const Elf64Symbol& sym, uint32_t* out) {
  if (sym.shndx >= sections.size() || sym.size != sizeof(uint32_t)) return false;
  const Elf64Section& sec = sections[sym.shndx];
  if (sec.type == kSectionNoBits) {  // zero-initialised storage (.bss)
    *out = 0;
    return true;
  }
  if (sym.value < sec.addr || sym.value - sec.addr > sec.size ||
      sec.size - (sym.value - sec.addr) < sizeof(uint32_t)) {
    return false;
  }
  return file->Read(sec.offset + (sym.value - sec.addr), out, sizeof(uint32_t));
}

}  // namespace

ElfExports ReadElfExports(const std::string& path) {
  ElfExports out;
  ElfFile file(path);
  if (!file.is_open()) {
    out.problem = "cannot open the file";
    return out;
  }
  Elf64Header eh;
  static const unsigned char kMagic[4] = {0x7f, 'E', 'L', 'F'};
  if (!file.Read(0, &eh, sizeof(eh)) || std::memcmp(eh.ident, kMagic, sizeof(kMagic)) != 0) {
    out.problem = "not an ELF file";
    return out;
  }
  const unsigned char host_data = HostIsLittleEndian() ? kElfData2Lsb : kElfData2Msb;
  if (eh.ident[4] != kElfClass64 || eh.ident[5] != host_data) {
    out.problem = "not an ELF64 file of this host's byte order";
    return out;
  }
  if (eh.type != kElfTypeDyn) {
    out.problem = "not a shared object (ELF type " + std::to_string(eh.type) + ")";
    return out;
  }
  if (eh.shoff == 0 || eh.shentsize != sizeof(Elf64Section)) {
    out.problem = "no section headers";
    return out;
  }
  // With 0xff00 or more sections the count lives in the first section header (gABI).
  uint64_t num_sections = eh.shnum;
  if (num_sections == 0) {
    Elf64Section first;
    if (!file.Read(eh.shoff, &first, sizeof(first))) {
      out.problem = "truncated section headers";
      return out;
    }
    num_sections = first.size;
  }
  if (num_sections == 0 || num_sections > file.size() / sizeof(Elf64Section)) {
    out.problem = "bad section header count";
    return out;
  }
  std::vector<Elf64Section> sections(num_sections);
  if (!file.Read(eh.shoff, sections.data(), num_sections * sizeof(Elf64Section))) {
    out.problem = "truncated section headers";
    return out;
  }
  auto dynsym = std::find_if(sections.begin(), sections.end(),
                             [](const Elf64Section& s) { return s.type == kSectionDynSym; });
  if (dynsym == sections.end() || dynsym->link >= num_sections ||
      dynsym->entsize != sizeof(Elf64Symbol) || dynsym->size > kMaxDynSymBytes) {
    out.problem = "no readable dynamic symbol table";
    return out;
  }
  const Elf64Section& strtab = sections[dynsym->link];
  if (strtab.size > kMaxDynSymBytes) {
    out.problem = "dynamic string table too large";
    return out;
  }
  std::vector<Elf64Symbol> symbols(dynsym->size / sizeof(Elf64Symbol));
  std::string names(strtab.size, '\0');
  if (!file.Read(dynsym->offset, symbols.data(), symbols.size() * sizeof(Elf64Symbol)) ||
      !file.Read(strtab.offset, names.data(), names.size())) {
    out.problem = "truncated dynamic symbol table";
    return out;
  }
  out.readable = true;
  const std::string_view export_prefix(kExportPrefix);
  for (const Elf64Symbol& sym : symbols) {
    const unsigned char bind = sym.info >> 4;
    const unsigned char visibility = sym.other & 0x3;
    // Only definitions that dlsym can see: defined here, global-ish, default or protected.
    if (sym.shndx == kSectionIndexUndef || sym.name >= names.size()) continue;
    if (bind != kBindGlobal && bind != kBindWeak && bind != kBindGnuUnique) continue;
    if (visibility != kVisibilityDefault && visibility != kVisibilityProtected) continue;
    const char* raw = names.data() + sym.name;
    std::string_view name(raw, strnlen(raw, names.size() - sym.name));
    if (!StartsWith(name, export_prefix)) continue;
    if (name == kAbiVersionSymbol) {
      out.has_abi_version = true;
      out.abi_version_known = sym.shndx < kSectionIndexLoReserve &&
                              ReadUint32Symbol(&file, sections, sym, &out.abi_version);
      continue;
    }
    std::string_view rest = name.substr(export_prefix.size());
    // `__kffi__*` names are the module ABI's own (metadata, version), never functions.
    if (rest.empty() || rest.front() == '_') continue;
    out.functions.emplace_back(rest);
  }
  std::sort(out.functions.begin(), out.functions.end());
  out.functions.erase(std::unique(out.functions.begin(), out.functions.end()), out.functions.end());
  return out;
}

}  // namespace details
}  // namespace kffi
