// src/module/module_elf.cc: a small, self-contained ELF64 reader for the dynamic symbol table.
// SPDX-License-Identifier: Apache-2.0
#include "module/module_elf.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string_view>

#include "tvm_bridge/tvm_bridge_api.h"

namespace kffi {
namespace details {
namespace {

constexpr unsigned char kElfClass64 = 2;
constexpr unsigned char kElfData2Lsb = 1;
constexpr unsigned char kElfData2Msb = 2;
constexpr uint32_t kSectionProgBits = 1;
constexpr uint32_t kSectionStrTab = 3;
constexpr uint32_t kSectionDynamic = 6;
constexpr uint32_t kSectionNoBits = 8;
constexpr uint32_t kSectionDynSym = 11;
constexpr uint64_t kSectionFlagWrite = 0x1;
constexpr uint64_t kSectionFlagAlloc = 0x2;
constexpr uint64_t kSectionFlagExec = 0x4;
constexpr uint16_t kSectionIndexUndef = 0;
constexpr uint16_t kSectionIndexLoReserve = 0xff00;
constexpr unsigned char kBindGlobal = 1;
constexpr unsigned char kBindWeak = 2;
constexpr unsigned char kBindGnuUnique = 10;
constexpr uint16_t kSectionIndexAbs = 0xfff1;
constexpr unsigned char kTypeNoType = 0;
constexpr unsigned char kTypeObject = 1;
constexpr unsigned char kTypeFunc = 2;
constexpr unsigned char kTypeCommon = 5;
constexpr unsigned char kTypeTls = 6;
constexpr unsigned char kTypeGnuIFunc = 10;
constexpr unsigned char kVisibilityDefault = 0;
constexpr unsigned char kVisibilityProtected = 3;
// A real library has thousands of dynamic symbols at most; past this the file is not one this
// reader spends memory on, whatever its size (the tables are also bounded by the file's size).
constexpr uint64_t kMaxTableBytes = uint64_t{64} << 20;

/// Where the bytes come from: a file read with pread, or a buffer (fuzzing).
class ByteSource {
 public:
  ByteSource(int fd, uint64_t size) : fd_(fd), size_(size) {}
  ByteSource(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  uint64_t size() const { return size_; }

  /// Whether [offset, offset + n) lies inside the file (overflow-safe).
  bool Contains(uint64_t offset, uint64_t n) const {
    return offset <= size_ && n <= size_ - offset;
  }

  /// Reads exactly n bytes at offset; false when the range lies outside the file.
  bool Read(uint64_t offset, void* out, uint64_t n) const {
    if (!Contains(offset, n)) return false;
    if (n == 0) return true;
    if (data_ != nullptr) {
      std::memcpy(out, data_ + offset, n);
      return true;
    }
    auto* dst = static_cast<char*>(out);
    while (n > 0) {
      ssize_t got = pread(fd_, dst, n, static_cast<off_t>(offset));
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) return false;
      dst += got;
      offset += static_cast<uint64_t>(got);
      n -= static_cast<uint64_t>(got);
    }
    return true;
  }

 private:
  int fd_ = -1;
  const uint8_t* data_ = nullptr;
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

/// Reads a section's contents after checking that they lie in the file and are not too big.
// Whether the bytes of an allocated, non-executable section with contents (.rodata and the like,
// where type-info names and string literals live) hold needle. Read in chunks that overlap by the
// needle's length, so a file of any size costs a fixed buffer.
bool DataSectionsHold(const ByteSource& src, const std::vector<Elf64Section>& sections,
                      std::string_view needle) {
  constexpr uint64_t kChunk = uint64_t{1} << 20;
  std::string buf;
  for (const Elf64Section& sec : sections) {
    if (sec.type != kSectionProgBits || (sec.flags & kSectionFlagAlloc) == 0 ||
        (sec.flags & kSectionFlagExec) != 0) {
      continue;
    }
    if (!src.Contains(sec.offset, sec.size) || sec.size < needle.size()) continue;
    for (uint64_t at = 0; at < sec.size; at += kChunk) {
      const uint64_t n = std::min<uint64_t>(sec.size - at, kChunk + needle.size() - 1);
      buf.resize(n);
      if (!src.Read(sec.offset + at, buf.data(), n)) break;
      if (buf.find(needle) != std::string::npos) return true;
      if (n < kChunk) break;
    }
  }
  return false;
}

bool ReadSectionBytes(const ByteSource& src, const Elf64Section& sec, std::string* out) {
  if (sec.type == kSectionNoBits || sec.size > kMaxTableBytes ||
      !src.Contains(sec.offset, sec.size))
    return false;
  out->assign(sec.size, '\0');
  return src.Read(sec.offset, out->data(), sec.size);
}

/// A NUL-terminated name at offset in a string table (cut at the table's end when unterminated).
bool NameAt(const std::string& table, uint64_t offset, std::string_view* out) {
  if (offset >= table.size()) return false;
  const char* raw = table.data() + offset;
  *out = std::string_view(raw, strnlen(raw, table.size() - offset));
  return true;
}

// Reads the value of a 4-byte initialised datum from the section that holds it.
bool ReadUint32Symbol(const ByteSource& src, const std::vector<Elf64Section>& sections,
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
  // sec.offset + (value - addr) cannot wrap: Read checks the whole range against the file.
  uint64_t in_section = sym.value - sec.addr;
  if (sec.offset > UINT64_MAX - in_section) return false;
  return src.Read(sec.offset + in_section, out, sizeof(uint32_t));
}

// The sections and their names, for what a symbol is and where it lies.
struct SectionTable {
  const std::vector<Elf64Section>& sections;
  const std::string& names;  // .shstrtab (empty when it cannot be read)

  // The symbol's section, or NULL (undefined, absolute, reserved or past the table).
  const Elf64Section* Of(const Elf64Symbol& sym) const {
    if (sym.shndx == kSectionIndexUndef || sym.shndx >= kSectionIndexLoReserve ||
        sym.shndx >= sections.size()) {
      return nullptr;
    }
    return &sections[sym.shndx];
  }
  bool Executable(const Elf64Symbol& sym) const {
    const Elf64Section* sec = Of(sym);
    return sec != nullptr && (sec->flags & kSectionFlagExec) != 0;
  }
  // "section `.data`", "no section (an absolute address)", ...
  std::string Where(const Elf64Symbol& sym) const {
    if (sym.shndx == kSectionIndexAbs) return "no section (an absolute address)";
    const Elf64Section* sec = Of(sym);
    if (sec == nullptr) return "no section it can name (index " + std::to_string(sym.shndx) + ")";
    std::string_view name;
    return NameAt(names, sec->name, &name) && !name.empty()
               ? "section `" + std::string(name) + "`"
               : "section #" + std::to_string(sym.shndx);
  }
};

// What the symbol's type says it is, for messages.
std::string TypeLabel(const Elf64Symbol& sym) {
  switch (sym.info & 0xf) {
    case kTypeNoType:
      return "an untyped symbol (STT_NOTYPE)";
    case kTypeObject:
      return "a data object (STT_OBJECT)";
    case kTypeFunc:
      return "a function (STT_FUNC)";
    case kTypeCommon:
      return "a common block (STT_COMMON)";
    case kTypeTls:
      return "a thread-local variable (STT_TLS)";
    case kTypeGnuIFunc:
      return "an indirect function (STT_GNU_IFUNC)";
    default:
      return "a symbol of type " + std::to_string(sym.info & 0xf);
  }
}

// Whether the symbol's type says it is code: a function or an indirect function.
bool ClaimsCode(const Elf64Symbol& sym) {
  const unsigned char type = sym.info & 0xf;
  return type == kTypeFunc || type == kTypeGnuIFunc;
}

// Whether a defined symbol is code kffi may call: a function, an indirect function, or an untyped
// label (assembly without .type), in an executable section. Data objects, TLS and the rest are
// not, and neither is a function symbol placed in a data section (ClaimsCode without this).
bool IsCodeSymbol(const Elf64Symbol& sym, const SectionTable& table) {
  const unsigned char type = sym.info & 0xf;
  return (ClaimsCode(sym) || type == kTypeNoType) && table.Executable(sym);
}

// The text a data symbol holds when it is a NUL-terminated string (a `const char[]`): its bytes in
// the file, whose first NUL is the last. *budget (bytes of text still allowed) keeps symbols that
// share bytes from reading more than the file holds. False with *why otherwise.
bool ReadSymbolText(const ByteSource& src, const SectionTable& table, const Elf64Symbol& sym,
                    uint64_t* budget, std::string* out, std::string* why) {
  const Elf64Section* sec = table.Of(sym);
  if (sec == nullptr || sym.size == 0) {
    *why = "it holds no bytes";
    return false;
  }
  if (sym.value < sec->addr || sym.value - sec->addr > sec->size ||
      sym.size > sec->size - (sym.value - sec->addr)) {
    *why = "it lies outside its section";
    return false;
  }
  if (sym.size > *budget) {
    *why = "its text is larger than the file";
    return false;
  }
  *budget -= sym.size;
  const uint64_t in_section = sym.value - sec->addr;
  if (sec->type == kSectionNoBits) {
    out->assign(sym.size, '\0');  // zero-initialised storage (.bss)
  } else if (sec->offset > UINT64_MAX - in_section ||
             !src.Contains(sec->offset + in_section, sym.size)) {
    *why = "its bytes lie outside the file";
    return false;
  } else {
    out->assign(sym.size, '\0');
    if (!src.Read(sec->offset + in_section, out->data(), sym.size)) {
      *why = "its bytes cannot be read";
      return false;
    }
  }
  if (out->find('\0') != out->size() - 1) {
    *why = "its " + std::to_string(sym.size) +
           " bytes are not a NUL-terminated string (a `const char[]`)";
    return false;
  }
  out->pop_back();
  return true;
}

// How kffi may read a metadata symbol (ElfSymbolUse); misplaced code is the caller's to report.
ElfSymbolUse MetadataUse(const ByteSource& src, const SectionTable& table, const Elf64Symbol& sym,
                         uint64_t* budget) {
  ElfSymbolUse use;
  if (IsCodeSymbol(sym, table)) {
    use.kind = ElfSymbolUse::kCall;
    return use;
  }
  const unsigned char type = sym.info & 0xf;
  const std::string what = TypeLabel(sym) + " in " + table.Where(sym);
  if (type == kTypeObject || type == kTypeNoType) {
    std::string why;
    if (ReadSymbolText(src, table, sym, budget, &use.text, &why)) {
      use.kind = ElfSymbolUse::kText;
      return use;
    }
    use.text = what + ": " + why;
    return use;
  }
  use.text = what + ", neither code nor a string";
  return use;
}

// Whether [begin, begin + size) overlaps one of the ranges.
bool Overlaps(uint64_t begin, uint64_t size,
              const std::vector<std::pair<uint64_t, uint64_t>>& ranges) {
  for (const auto& r : ranges) {
    const uint64_t end = r.second > UINT64_MAX - r.first ? UINT64_MAX : r.first + r.second;
    if (begin < end && r.first < begin + size) return true;
  }
  return false;
}

// Whether the loader can store the library's context (a pointer) at `__tvm_ffi__library_ctx`:
// an aligned, pointer-sized data object in a writable section that PT_GNU_RELRO does not make
// read-only after relocation. *why says what it is otherwise.
bool IsWritablePointer(const Elf64Symbol& sym, const SectionTable& table,
                       const std::vector<std::pair<uint64_t, uint64_t>>& relro, std::string* why) {
  const Elf64Section* sec = table.Of(sym);
  const unsigned char type = sym.info & 0xf;
  const std::string what = TypeLabel(sym) + " in " + table.Where(sym);
  if ((type != kTypeObject && type != kTypeNoType) || sec == nullptr) {
    *why = what;
  } else if ((sec->flags & kSectionFlagWrite) == 0 || (sec->flags & kSectionFlagExec) != 0) {
    *why = what + ", which is not writable";
  } else if (sym.size < sizeof(void*) || sym.value % alignof(void*) != 0 ||
             sym.value > UINT64_MAX - sizeof(void*)) {
    *why =
        what + " of " + std::to_string(sym.size) + " bytes, not an aligned pointer-sized variable";
  } else if (Overlaps(sym.value, sizeof(void*), relro)) {
    *why = what + ", which is read-only once relocated (PT_GNU_RELRO)";
  } else {
    return true;
  }
  return false;
}

void SortUnique(std::vector<std::string>* v) {
  std::sort(v->begin(), v->end());
  v->erase(std::unique(v->begin(), v->end()), v->end());
}

// What the dynamic section says: DT_NEEDED, and where the relocation tables lie.
struct DynamicInfo {
  bool present = false;
  bool has_rel = false;  // a DT_REL table (not used on the machines whose slots are read)
  uint64_t symtab = 0, rela = 0, rela_size = 0, rela_ent = 0, jmprel = 0, pltrel_size = 0;
  int64_t pltrel = 0;
};

// Reads the dynamic section (its sh_link names its string table).
bool ReadDynamic(const ByteSource& src, const std::vector<Elf64Section>& sections,
                 std::vector<std::string>* needed, std::string* soname, DynamicInfo* info) {
  for (const Elf64Section& sec : sections) {
    if (sec.type != kSectionDynamic) continue;
    if (sec.link >= sections.size() || sec.size % sizeof(Elf64Dyn) != 0) return false;
    std::string raw, names;
    if (!ReadSectionBytes(src, sec, &raw) || !ReadSectionBytes(src, sections[sec.link], &names)) {
      return false;
    }
    info->present = true;
    for (size_t off = 0; off + sizeof(Elf64Dyn) <= raw.size(); off += sizeof(Elf64Dyn)) {
      Elf64Dyn d;
      std::memcpy(&d, raw.data() + off, sizeof(d));
      switch (d.tag) {
        case kDynNull:
          return true;
        case kDynNeeded: {
          std::string_view name;
          if (!NameAt(names, d.val, &name)) return false;
          needed->emplace_back(name);
          break;
        }
        case kDynSoname: {
          std::string_view name;
          if (!NameAt(names, d.val, &name)) return false;
          soname->assign(name);
          break;
        }
        case kDynSymTab:
          info->symtab = d.val;
          break;
        case kDynRela:
          info->rela = d.val;
          break;
        case kDynRelaSz:
          info->rela_size = d.val;
          break;
        case kDynRelaEnt:
          info->rela_ent = d.val;
          break;
        case kDynJmpRel:
          info->jmprel = d.val;
          break;
        case kDynPltRelSz:
          info->pltrel_size = d.val;
          break;
        case kDynPltRel:
          info->pltrel = static_cast<int64_t>(d.val);
          break;
        case kDynRel:
        case kDynRelSz:
          info->has_rel = info->has_rel || d.val != 0;
          break;
        default:
          break;
      }
    }
    return true;
  }
  return true;  // no dynamic section: nothing needed
}

// Whether a relocation of this type and addend stores exactly a symbol's address in a slot.
bool IsPlainSlot(uint16_t machine, uint32_t type, int64_t addend) {
  if (addend != 0) return false;
  switch (machine) {
    case 62:  // x86-64: R_X86_64_64, R_X86_64_GLOB_DAT, R_X86_64_JUMP_SLOT
      return type == 1 || type == 6 || type == 7;
    case 183:  // AArch64: R_AARCH64_ABS64, R_AARCH64_GLOB_DAT, R_AARCH64_JUMP_SLOT
      return type == 257 || type == 1025 || type == 1026;
    default:
      return false;
  }
}

// Appends the relocations of the RELA table at image address [vaddr, vaddr + size) that refer to
// undefined TVMFFI* symbols. False when the table is not wholly inside one section's bytes in
// the file, or refers to a symbol past the table.
bool ReadRelaTable(const ByteSource& src, const std::vector<Elf64Section>& sections, uint64_t vaddr,
                   uint64_t size, uint16_t machine, const std::string& symbols,
                   const std::string& names, std::vector<ElfImportSlot>* out) {
  if (size == 0) return true;
  if (size % sizeof(Elf64Rela) != 0 || size > kMaxTableBytes) return false;
  const Elf64Section* home = nullptr;
  for (const Elf64Section& sec : sections) {
    if (sec.type == kSectionNoBits || sec.size == 0 || vaddr < sec.addr) continue;
    if (vaddr - sec.addr <= sec.size && size <= sec.size - (vaddr - sec.addr)) {
      home = &sec;
      break;
    }
  }
  if (home == nullptr || !src.Contains(home->offset, vaddr - home->addr)) return false;
  const uint64_t offset = home->offset + (vaddr - home->addr);  // inside the file: no overflow
  if (!src.Contains(offset, size)) return false;                // before allocating for it
  std::string raw(size, '\0');
  if (!src.Read(offset, raw.data(), size)) return false;
  const size_t num_symbols = symbols.size() / sizeof(Elf64Symbol);
  for (size_t off = 0; off < raw.size(); off += sizeof(Elf64Rela)) {
    Elf64Rela r;
    std::memcpy(&r, raw.data() + off, sizeof(r));
    const uint64_t index = r.info >> 32;
    if (index == 0) continue;  // relative relocations name no symbol
    if (index >= num_symbols) return false;
    Elf64Symbol sym;
    std::memcpy(&sym, symbols.data() + index * sizeof(Elf64Symbol), sizeof(sym));
    std::string_view name;
    if (sym.shndx != kSectionIndexUndef || !NameAt(names, sym.name, &name) ||
        !StartsWith(name, kTvmRuntimePrefix)) {
      continue;
    }
    const auto type = static_cast<uint32_t>(r.info & 0xffffffffu);
    out->push_back(
        ElfImportSlot{std::string(name), r.offset, IsPlainSlot(machine, type, r.addend)});
  }
  return true;
}

// Reads out->tvm_import_slots; sets tvm_import_slots_complete when nothing was left unread.
void ReadImportSlots(const ByteSource& src, const std::vector<Elf64Section>& sections,
                     const DynamicInfo& dyn, const Elf64Section& dynsym, uint16_t machine,
                     const std::string& symbols, const std::string& names, ElfExports* out) {
  if (!dyn.present || dyn.has_rel) return;
  const bool any = dyn.rela_size != 0 || dyn.pltrel_size != 0;
  if (any && dyn.symtab != dynsym.addr) return;
  if (dyn.rela_size != 0 && dyn.rela_ent != sizeof(Elf64Rela)) return;
  if (dyn.pltrel_size != 0 && dyn.pltrel != kDynRela) return;
  if (!ReadRelaTable(src, sections, dyn.rela, dyn.rela_size, machine, symbols, names,
                     &out->tvm_import_slots) ||
      !ReadRelaTable(src, sections, dyn.jmprel, dyn.pltrel_size, machine, symbols, names,
                     &out->tvm_import_slots)) {
    out->tvm_import_slots.clear();
    return;
  }
  out->tvm_import_slots_complete = true;
}

ElfExports ReadFrom(const ByteSource& src) {
  ElfExports out;
  Elf64Header eh;
  static const unsigned char kMagic[4] = {0x7f, 'E', 'L', 'F'};
  if (!src.Read(0, &eh, sizeof(eh)) || std::memcmp(eh.ident, kMagic, sizeof(kMagic)) != 0) {
    out.problem = "not an ELF file";
    return out;
  }
  const unsigned char host_data = HostIsLittleEndian() ? kElfData2Lsb : kElfData2Msb;
  if (eh.ident[4] != kElfClass64 || eh.ident[5] != host_data) {
    out.problem = "an ELF file for another kind of machine (not 64-bit of this byte order)";
    return out;
  }
  if (eh.type != kElfTypeDyn) {
    out.problem = "not a shared object (ELF type " + std::to_string(eh.type) + ")";
    return out;
  }
  const uint16_t host_machine = HostElfMachine();
  if (host_machine != 0 && eh.machine != host_machine) {
    out.problem = "built for another machine (ELF machine " + std::to_string(eh.machine) +
                  ", this host is " + std::to_string(host_machine) + ")";
    return out;
  }
  if (eh.shoff == 0 || eh.shentsize != sizeof(Elf64Section)) {
    out.problem = "malformed ELF file: no section headers";
    return out;
  }
  // With 0xff00 or more sections the count lives in the first section header (gABI).
  uint64_t num_sections = eh.shnum;
  if (num_sections == 0) {
    Elf64Section first;
    if (!src.Read(eh.shoff, &first, sizeof(first))) {
      out.problem = "malformed ELF file: truncated section headers";
      return out;
    }
    num_sections = first.size;
  }
  if (num_sections == 0 || num_sections > src.size() / sizeof(Elf64Section) ||
      !src.Contains(eh.shoff, num_sections * sizeof(Elf64Section))) {
    out.problem = "malformed ELF file: section headers lie outside the file";
    return out;
  }
  std::vector<Elf64Section> sections(num_sections);
  if (!src.Read(eh.shoff, sections.data(), num_sections * sizeof(Elf64Section))) {
    out.problem = "malformed ELF file: truncated section headers";
    return out;
  }
  auto dynsym = std::find_if(sections.begin(), sections.end(),
                             [](const Elf64Section& s) { return s.type == kSectionDynSym; });
  if (dynsym == sections.end()) {
    out.problem = "malformed ELF file: no dynamic symbol table";
    return out;
  }
  if (dynsym->link >= num_sections || sections[dynsym->link].type != kSectionStrTab ||
      dynsym->entsize != sizeof(Elf64Symbol) || dynsym->size % sizeof(Elf64Symbol) != 0) {
    out.problem = "malformed ELF file: bad dynamic symbol table header";
    return out;
  }
  std::string raw_symbols, names;
  if (!ReadSectionBytes(src, *dynsym, &raw_symbols) ||
      !ReadSectionBytes(src, sections[dynsym->link], &names)) {
    out.problem = "malformed ELF file: the dynamic symbol table lies outside the file";
    return out;
  }
  DynamicInfo dyn;
  if (!ReadDynamic(src, sections, &out.needed, &out.soname, &dyn)) {
    out.problem = "malformed ELF file: bad dynamic section";
    return out;
  }
  out.readable = true;
  // Section names and read-only-after-relocation ranges serve messages and the context check
  // only: a file without them is still read.
  std::string section_names;
  if (eh.shstrndx < num_sections && sections[eh.shstrndx].type == kSectionStrTab &&
      !ReadSectionBytes(src, sections[eh.shstrndx], &section_names)) {
    section_names.clear();
  }
  const SectionTable table{sections, section_names};
  std::vector<std::pair<uint64_t, uint64_t>> relro;
  if (eh.phentsize == sizeof(Elf64ProgramHeader) &&
      src.Contains(eh.phoff, uint64_t{eh.phnum} * sizeof(Elf64ProgramHeader))) {
    for (uint64_t i = 0; i < eh.phnum; ++i) {
      Elf64ProgramHeader ph;
      if (!src.Read(eh.phoff + i * sizeof(ph), &ph, sizeof(ph))) break;
      if (ph.type == kProgramGnuRelro) relro.emplace_back(ph.vaddr, ph.memsz);
    }
  }
  uint64_t text_budget = src.size();  // metadata text read from the file, in all
  const std::string_view export_prefix(kExportPrefix);
  const std::string_view tvm_prefix(kTvmExportPrefix);
  // A symbol kffi would call that says it is code but lies in no executable section.
  auto misplaced = [&](std::string_view name, const Elf64Symbol& sym) {
    if (!ClaimsCode(sym) || IsCodeSymbol(sym, table)) return false;
    out.misplaced_code.push_back("`" + std::string(name) + "` is " + TypeLabel(sym) + " in " +
                                 table.Where(sym) +
                                 (table.Of(sym) != nullptr ? ", which is not executable" : ""));
    return true;
  };
  const size_t num_symbols = raw_symbols.size() / sizeof(Elf64Symbol);
  for (size_t i = 1; i < num_symbols; ++i) {  // entry 0 is the reserved null symbol
    Elf64Symbol sym;
    std::memcpy(&sym, raw_symbols.data() + i * sizeof(Elf64Symbol), sizeof(sym));
    const unsigned char bind = sym.info >> 4;
    const unsigned char visibility = sym.other & 0x3;
    std::string_view name;
    if (!NameAt(names, sym.name, &name)) continue;
    if (sym.shndx == kSectionIndexUndef) {
      // An import. Weak ones may stay unresolved, so only strong ones are required.
      if (bind == kBindGlobal && StartsWith(name, kTvmRuntimePrefix)) {
        out.tvm_imports.emplace_back(name);
      } else if (bind == kBindGlobal && StartsWith(name, "_Z") &&
                 name.find("N3tvm3ffi") != std::string_view::npos) {
        out.tvm_cxx_imports.emplace_back(name);
      }
      continue;
    }
    // Mangled names of tvm::ffi entities contain "N3tvm3ffi" (nested-name), function-local
    // statics included ("_ZZN3tvm3ffi...", guards "_ZGVZN3tvm3ffi...").
    if (bind == kBindGnuUnique && name.find("N3tvm3ffi") != std::string_view::npos) {
      out.tvm_shared_statics = true;
    }
    // Only definitions that dlsym can see: global-ish, default or protected visibility.
    if (bind != kBindGlobal && bind != kBindWeak && bind != kBindGnuUnique) continue;
    if (visibility != kVisibilityDefault && visibility != kVisibilityProtected) continue;
    if (StartsWith(name, kMetaPrefix) || StartsWith(name, kTvmMetadataPrefix) ||
        StartsWith(name, kTvmDocPrefix)) {
      if (!misplaced(name, sym) && out.metadata.count(std::string(name)) == 0) {
        out.metadata.emplace(name, MetadataUse(src, table, sym, &text_budget));
      }
    } else if (StartsWith(name, export_prefix)) {
      if (name == kAbiVersionSymbol) {
        out.has_abi_version = true;
        out.abi_version_size = sym.size;
        out.abi_version_known = sym.shndx < kSectionIndexLoReserve &&
                                ReadUint32Symbol(src, sections, sym, &out.abi_version);
        continue;
      }
      std::string_view rest = name.substr(export_prefix.size());
      // `__kffi__*` names are the module ABI's own (metadata, version), never functions.
      if (rest.empty() || rest.front() == '_' || misplaced(name, sym)) continue;
      if (IsCodeSymbol(sym, table)) out.functions.emplace_back(rest);
    } else if (StartsWith(name, tvm_prefix)) {
      if (name == kTvmLibraryCtxSymbol) {
        out.tvm_library_ctx = true;
        out.tvm_library_ctx_writable =
            IsWritablePointer(sym, table, relro, &out.tvm_library_ctx_problem);
        continue;
      }
      if (name == kTvmLibraryBinSymbol) {
        out.tvm_library_bin = true;
        continue;
      }
      std::string_view rest = name.substr(tvm_prefix.size());
      if (rest.empty() || rest.front() == '_' || misplaced(name, sym)) continue;
      if (IsCodeSymbol(sym, table)) out.tvm_functions.emplace_back(rest);
    } else if (StartsWith(name, kTvmRuntimePrefix)) {
      if (IsCodeSymbol(sym, table)) out.tvm_runtime_functions.emplace_back(name);
    } else if (name == kTvmBridgeEntrySymbol) {
      out.kffi_bridge = true;
    }
  }
  SortUnique(&out.functions);
  SortUnique(&out.tvm_functions);
  SortUnique(&out.tvm_imports);
  SortUnique(&out.tvm_cxx_imports);
  SortUnique(&out.tvm_runtime_functions);
  SortUnique(&out.misplaced_code);
  if (!out.tvm_imports.empty() || !out.tvm_functions.empty()) {
    // apache-tvm-ffi up to 0.1.8.post2 compiled `tvm::ffi::EnvErrorAlreadySet` (its type-info
    // name stays in the file, stripped or not) into every library that exports a function;
    // 0.1.8 added TVMFFIErrorCreateWithCauseAndExtraContext, which only an 0.1.8 library imports.
    out.tvm_pre_0_1_8_errors =
        !std::binary_search(out.tvm_imports.begin(), out.tvm_imports.end(),
                            std::string("TVMFFIErrorCreateWithCauseAndExtraContext")) &&
        DataSectionsHold(src, sections, "N3tvm3ffi18EnvErrorAlreadySetE");
  }
  if (!out.tvm_imports.empty()) {
    ReadImportSlots(src, sections, dyn, *dynsym, eh.machine, raw_symbols, names, &out);
  }
  return out;
}

// What a path that is not a regular file is, for the message.
std::string DescribeNonRegular(mode_t mode) {
  if (S_ISDIR(mode)) return "it is a directory, not a regular file";
  if (S_ISFIFO(mode)) return "it is a FIFO (named pipe), not a regular file";
  if (S_ISCHR(mode) || S_ISBLK(mode)) return "it is a device, not a regular file";
  if (S_ISSOCK(mode)) return "it is a socket, not a regular file";
  return "it is not a regular file";
}

}  // namespace

int OpenRegularFile(const std::string& path, uint64_t* size, std::string* problem) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) {
    const int err = errno;
    *problem = err == ENOENT || err == ENOTDIR
                   ? std::string("no such file")
                   : std::string("cannot read it: ") + std::strerror(err);
    return -1;
  }
  if (!S_ISREG(st.st_mode)) {
    *problem = DescribeNonRegular(st.st_mode);
    return -1;
  }
  int fd = open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) {
    *problem = std::string("cannot open it: ") + std::strerror(errno);
    return -1;
  }
  struct stat fst;
  if (fstat(fd, &fst) != 0) {
    *problem = std::string("cannot read it: ") + std::strerror(errno);
    close(fd);
    return -1;
  }
  if (!S_ISREG(fst.st_mode)) {
    *problem = DescribeNonRegular(fst.st_mode);
    close(fd);
    return -1;
  }
  *size = static_cast<uint64_t>(fst.st_size);
  return fd;
}

ElfExports ReadElfExports(const std::string& path) {
  ElfExports out;
  uint64_t size = 0;
  int fd = OpenRegularFile(path, &size, &out.problem);
  if (fd < 0) return out;
  try {
    out = ReadFrom(ByteSource(fd, size));
  } catch (...) {
    close(fd);
    throw;
  }
  close(fd);
  return out;
}

ElfExports ReadElfExportsFromMemory(const uint8_t* data, size_t size) {
  return ReadFrom(ByteSource(data, size));
}

}  // namespace details
}  // namespace kffi
