// tests/cpp/module/test_loader_hostile.cc: the loader opens only what it should (issue 15, item 6).
// SPDX-License-Identifier: Apache-2.0
#include <fcntl.h>
#include <gtest/gtest.h>
#include <kffi/module.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <future>
#include <iterator>
#include <optional>
#include <string>
#include <vector>

#include "test_util.h"

namespace {

using kffi::Error;
using kffi::Module;

std::string Prefix(const std::string& path) { return "Cannot load module `" + path + "`: "; }

std::string TempPath(const std::string& name) {
  std::string dir = ::testing::TempDir();
  if (!dir.empty() && dir.back() != '/') dir += '/';
  return dir + "kffi_loader_" + std::to_string(getpid()) + "_" + name;
}

std::vector<char> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<char>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void WriteFile(const std::string& path, const std::vector<char>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

template <typename T>
void Put(std::vector<char>* bytes, size_t offset, T value) {
  if (bytes->size() < offset + sizeof(T)) bytes->resize(offset + sizeof(T));
  std::memcpy(bytes->data() + offset, &value, sizeof(T));
}

#if defined(__aarch64__)
constexpr uint16_t kHostMachine = 183;
constexpr uint16_t kOtherMachine = 62;
#else
constexpr uint16_t kHostMachine = 62;
constexpr uint16_t kOtherMachine = 183;
#endif

// Peak resident memory of this process in KiB.
long PeakRssKiB() {
  struct rusage usage;
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_maxrss;
}

// A 15 KB ELF64 shared object whose section headers describe a dynamic symbol table of
// `dynsym_size` bytes and a string table of `strtab_size` bytes, both far past the file's end.
std::vector<char> ElfWithHugeTables(uint64_t dynsym_size, uint64_t strtab_size) {
  std::vector<char> f(15 * 1024, '\0');
  const unsigned char ident[16] = {0x7f, 'E', 'L', 'F', 2, 1, 1, 0};
  std::memcpy(f.data(), ident, sizeof(ident));
  Put<uint16_t>(&f, 16, 3);  // ET_DYN
  Put<uint16_t>(&f, 18, kHostMachine);
  Put<uint32_t>(&f, 20, 1);
  const uint64_t shoff = 1024;
  Put<uint64_t>(&f, 40, shoff);
  Put<uint16_t>(&f, 52, 64);  // ehsize
  Put<uint16_t>(&f, 58, 64);  // shentsize
  Put<uint16_t>(&f, 60, 3);   // shnum: null, .dynsym, .dynstr
  // Section 1: .dynsym (type 11), link 2, entsize 24.
  size_t s1 = shoff + 64;
  Put<uint32_t>(&f, s1 + 4, 11);
  Put<uint64_t>(&f, s1 + 24, 4096);  // offset
  Put<uint64_t>(&f, s1 + 32, dynsym_size);
  Put<uint32_t>(&f, s1 + 40, 2);
  Put<uint64_t>(&f, s1 + 56, 24);
  // Section 2: .dynstr (type 3).
  size_t s2 = shoff + 128;
  Put<uint32_t>(&f, s2 + 4, 3);
  Put<uint64_t>(&f, s2 + 24, 8192);
  Put<uint64_t>(&f, s2 + 32, strtab_size);
  return f;
}

TEST(LoaderHostile, FifoIsRefusedWithoutBlocking) {
  const std::string fifo = TempPath("fifo.so");
  unlink(fifo.c_str());
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  auto attempt =
      std::async(std::launch::async, [&] { return CatchError([&] { Module::Load(fifo); }); });
  if (attempt.wait_for(std::chrono::seconds(20)) != std::future_status::ready) {
    // Unblock the loader (a writer lets a blocked open for reading return) before failing.
    int fd = open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
    if (fd >= 0) close(fd);
    attempt.wait();
    unlink(fifo.c_str());
    FAIL() << "Module::Load blocked on a FIFO";
  }
  Error e = attempt.get();
  unlink(fifo.c_str());
  EXPECT_EQ(e.kind(), "RuntimeError");
  EXPECT_EQ(e.message(), Prefix(fifo) +
                             "not a loadable shared library: it is a FIFO (named pipe), not a "
                             "regular file");
}

TEST(LoaderHostile, DirectoryAndDeviceAreNotLibraries) {
  std::string dir = TempPath("dir.so");
  ASSERT_EQ(mkdir(dir.c_str(), 0700), 0);
  Error e = CatchError([&] { Module::Load(dir); });
  rmdir(dir.c_str());
  EXPECT_EQ(e.kind(), "RuntimeError");
  EXPECT_EQ(e.message(),
            Prefix(dir) + "not a loadable shared library: it is a directory, not a regular file");
  Error dev = CatchError([] { Module::Load("/dev/null"); });
  EXPECT_EQ(dev.message(), Prefix("/dev/null") +
                               "not a loadable shared library: it is a device, not a regular file");
}

TEST(LoaderHostile, DataSymbolsAreNotFunctions) {
  Module mod = Module::Load(KFFI_TEST_LOADER_DATASYM);
  EXPECT_EQ(mod.ListFunctions(), std::vector<std::string>{"real"});
  EXPECT_FALSE(mod.GetFunction("x").has_value());
  EXPECT_FALSE(mod.GetFunction("table").has_value());
  EXPECT_EQ(mod.GetFunctionRequired("real")(21).cast<int64_t>(), 42);
  Error e = CatchError([&] { mod.GetFunctionRequired("x"); });
  EXPECT_EQ(e.kind(), "AttributeError");
  EXPECT_NE(e.message().find("has no function `x`. Available functions: real"), std::string::npos)
      << e.message();
}

// Issue 29, class 1 (the sweep over every form is test_hostile_symbols.py): metadata that is data
// is read as its text or refused naming it, never called; a function in .data is never loaded.
// Before the guard both calls jumped into data (SIGSEGV), so they run in a death-test child.
int ReadMetadataThatIsData() {
  Module mod = Module::Load(KFFI_TEST_LOADER_METADATA_DATA);
  const std::optional<std::string> text = mod.GetFunctionMetadata("text");
  std::string pointer;
  try {
    mod.GetFunctionMetadata("pointer");
  } catch (const Error& e) {
    pointer = e.kind() + ": " + e.message();
  }
  const std::string expected =
      "RuntimeError: The metadata symbol `__kffi__meta_pointer` of `" +
      std::string(KFFI_TEST_LOADER_METADATA_DATA) +
      "` cannot be read: it is a data object (STT_OBJECT) in section `.data.rel.ro`: its 8 bytes "
      "are not a NUL-terminated string (a `const char[]`)";
  const bool ok = text.has_value() &&
                  text->find("\"doc\": \"read from a const char[]\"") != std::string::npos &&
                  pointer == expected &&
                  mod.GetFunctionRequired("pointer")(1).cast<int64_t>() == 2 &&
                  mod.GetFunctionRequired("text")(2).cast<int64_t>() == 3;
  if (!ok)
    std::fprintf(stderr, "text: %s\npointer: %s\n", text.value_or("").c_str(), pointer.c_str());
  return ok ? 0 : 1;
}

TEST(LoaderHostile, MetadataThatIsDataIsReadNotCalled) {
  EXPECT_EXIT(std::exit(ReadMetadataThatIsData()), testing::ExitedWithCode(0), "");
}

TEST(LoaderHostile, FunctionInADataSectionIsRefusedBeforeItLoads) {
  Error e = CatchError([] { Module::Load(KFFI_TEST_LOADER_MISPLACED_CODE); });
  EXPECT_EQ(e.kind(), "RuntimeError");
  EXPECT_EQ(e.message(),
            Prefix(KFFI_TEST_LOADER_MISPLACED_CODE) +
                "`__kffi_misplaced` is a function (STT_FUNC) in section `.data`, which "
                "is not executable. kffi calls only code in executable sections, and "
                "this library says otherwise");
}

TEST(LoaderHostile, AbiRecordOfUnexpectedSizeIsRefusedBeforeItRuns) {
  Error e = CatchError([] { Module::Load(KFFI_TEST_LOADER_ABI_SIZE); });
  EXPECT_EQ(e.kind(), "RuntimeError");
  EXPECT_EQ(e.message(), Prefix(KFFI_TEST_LOADER_ABI_SIZE) +
                             "its `__kffi__abi_version` record is 8 bytes, expected 4 (a "
                             "uint32_t); it was not built with <kffi/export.h>");
  EXPECT_EQ(std::getenv("KFFI_TEST_ABI_SIZE_INITIALISED"), nullptr);
  // Every later attempt is refused the same way, and the library never ran.
  EXPECT_EQ(CatchError([] { Module::Load(KFFI_TEST_LOADER_ABI_SIZE); }).message(), e.message());
  EXPECT_EQ(std::getenv("KFFI_TEST_ABI_SIZE_INITIALISED"), nullptr);
}

TEST(LoaderHostile, EmbeddedNulInThePathIsAValueError) {
  // "<real library>\0junk": cut at the NUL, it would name a loadable file.
  std::string path = std::string(KFFI_TEST_LOADER_DATASYM) + std::string("\0.other", 7);
  KFFIByteArray p{path.data(), path.size()};
  KFFIObjectHandle out = reinterpret_cast<KFFIObjectHandle>(0x1);
  ASSERT_EQ(KFFIModuleLoadFromFile(&p, &out), -1);
  EXPECT_EQ(out, nullptr);
  Error e = CatchError([] { kffi::details::ThrowRaisedError(-1); });
  EXPECT_EQ(e.kind(), "ValueError");
  EXPECT_EQ(e.message(), "Cannot load module: the path contains a NUL byte at offset " +
                             std::to_string(std::strlen(KFFI_TEST_LOADER_DATASYM)));
  // The C++ API takes a string_view, so it reaches the same check.
  Error cpp = CatchError([&] { Module::Load(path); });
  EXPECT_EQ(cpp.kind(), "ValueError");
}

TEST(LoaderHostile, HugeTablesInASmallFileAreRefusedWithoutAllocating) {
  struct Case {
    uint64_t dynsym;
    uint64_t strtab;
  };
  // Symbol table sizes are whole symbols (24 bytes each), as a well-formed header says.
  const Case cases[] = {{(uint64_t{500} << 20) / 24 * 24, 64},
                        {240, uint64_t{500} << 20},
                        {~uint64_t{0} / 24 * 24, 64},
                        {(uint64_t{1} << 62) / 24 * 24, uint64_t{1} << 62}};
  long before = PeakRssKiB();
  for (const Case& c : cases) {
    const std::string path = TempPath("huge.so");
    WriteFile(path, ElfWithHugeTables(c.dynsym, c.strtab));
    Error e = CatchError([&] { Module::Load(path); });
    unlink(path.c_str());
    EXPECT_EQ(e.kind(), "RuntimeError");
    EXPECT_EQ(e.message(), Prefix(path) +
                               "not a loadable shared library: malformed ELF file: the dynamic "
                               "symbol table lies outside the file")
        << c.dynsym << " " << c.strtab;
  }
  // Nothing near the claimed sizes was allocated (the peak grows by far less than 64 MiB).
  EXPECT_LT(PeakRssKiB() - before, 64 * 1024);
}

TEST(LoaderHostile, SymbolTableOfPartialEntriesIsRefused) {
  const std::string path = TempPath("partial.so");
  WriteFile(path, ElfWithHugeTables(uint64_t{500} << 20, 64));  // not a multiple of 24
  Error e = CatchError([&] { Module::Load(path); });
  unlink(path.c_str());
  EXPECT_EQ(e.message(), Prefix(path) +
                             "not a loadable shared library: malformed ELF file: bad dynamic "
                             "symbol table header");
}

TEST(LoaderHostile, SectionHeadersOutsideTheFileAreRefused) {
  std::vector<char> f = ElfWithHugeTables(240, 64);
  Put<uint16_t>(&f, 60, 0xfff0);  // far more section headers than the file holds
  const std::string path = TempPath("shnum.so");
  WriteFile(path, f);
  Error e = CatchError([&] { Module::Load(path); });
  EXPECT_EQ(e.message(), Prefix(path) +
                             "not a loadable shared library: malformed ELF file: section headers "
                             "lie outside the file");
  Put<uint16_t>(&f, 60, 3);
  Put<uint64_t>(&f, 40, uint64_t{1} << 63);  // e_shoff past the end
  WriteFile(path, f);
  e = CatchError([&] { Module::Load(path); });
  unlink(path.c_str());
  EXPECT_EQ(e.message(), Prefix(path) +
                             "not a loadable shared library: malformed ELF file: section headers "
                             "lie outside the file");
}

TEST(LoaderHostile, TruncatedAndForeignLibrariesAreRefused) {
  std::vector<char> lib = ReadFile(KFFI_TEST_LOADER_DATASYM);
  ASSERT_GT(lib.size(), 4096u);
  const std::string path = TempPath("cut.so");
  WriteFile(path, std::vector<char>(lib.begin(), lib.begin() + 2048));
  Error cut = CatchError([&] { Module::Load(path); });
  EXPECT_EQ(cut.message(), Prefix(path) +
                               "not a loadable shared library: malformed ELF file: section headers "
                               "lie outside the file");
  std::vector<char> other = lib;
  Put<uint16_t>(&other, 18, kOtherMachine);
  WriteFile(path, other);
  Error foreign = CatchError([&] { Module::Load(path); });
  EXPECT_EQ(foreign.message(), Prefix(path) +
                                   "not a loadable shared library: built for another machine (ELF "
                                   "machine " +
                                   std::to_string(kOtherMachine) + ", this host is " +
                                   std::to_string(kHostMachine) + ")");
  std::vector<char> elf32 = lib;
  elf32[4] = 1;  // ELFCLASS32
  WriteFile(path, elf32);
  Error narrow = CatchError([&] { Module::Load(path); });
  unlink(path.c_str());
  EXPECT_EQ(narrow.message(), Prefix(path) +
                                  "not a loadable shared library: an ELF file for another kind of "
                                  "machine (not 64-bit of this byte order)");
}

}  // namespace
