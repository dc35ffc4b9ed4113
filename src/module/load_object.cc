// src/module/load_object.cc: KFFIModuleLoadObject: a relocatable object linked once (cached) and
// loaded.
//
// Why the system linker and not an in-process JIT linker (LLVM ORC): the objects are ordinary
// C++ (and CUDA host) code compiled by GCC or nvcc, with exceptions, thread-locals, COMDAT
// groups, static initialisers and the CUDA runtime's registration constructors. The platform
// linker and dynamic loader handle all of it exactly as for a library built ahead of time, and
// the result is an ordinary kffi module (dladdr, debuggers and profilers see a real file). The
// cost is a C++ driver on the machine at the first load of each object; later loads find the
// linked file in the cache by the hash of the object's bytes and cost a hash and a dlopen.
// docs/aot.md has the evaluation and the limits.
// SPDX-License-Identifier: Apache-2.0
#include "module/load_object.h"

#include <cxxabi.h>
#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <kffi/c_api.h>
#include <kffi/details/sha256.h>
#include <spawn.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/runtime_internal.h"
#include "module/module_elf.h"

extern char** environ;

namespace kffi {
namespace details {
namespace {

thread_local int t_suspend_registrations = 0;

// ---- reading the object ----------------------------------------------------------------------

std::string LoadError(std::string_view path, std::string_view why) {
  return "Cannot load object `" + std::string(path) + "`: " + std::string(why);
}

// The object's bytes. Anything but a regular file (a FIFO, a folder, a device) is refused before
// a byte is read: reading a FIFO would wait for a writer.
std::string ReadFile(const std::string& path) {
  uint64_t size = 0;
  std::string problem;
  int fd = OpenRegularFile(path, &size, &problem);
  if (fd < 0) ThrowCApiError("RuntimeError", LoadError(path, problem));
  std::string data;
  try {
    data.reserve(static_cast<size_t>(size));
  } catch (...) {
    close(fd);
    throw;
  }
  char buf[1 << 16];
  for (;;) {
    ssize_t n = read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int err = errno;
      close(fd);
      ThrowCApiError("RuntimeError", LoadError(path, std::strerror(err)));
    }
    if (n == 0) break;
    data.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  return data;
}

// What the symbol table of a relocatable ELF object says.
struct ObjectSymbols {
  std::vector<std::string> functions;  // defined `__kffi_<name>` exports
  bool needs_cudart = false;           // it refers to the CUDA runtime (nvcc host code)
};

// [offset, offset + size) lies inside a file of file_size bytes (without overflowing).
bool InFile(uint64_t offset, uint64_t size, size_t file_size) {
  return offset <= file_size && size <= file_size - offset;
}

// Reads the symbol table of an x86-64/AArch64 ELF64 little-endian relocatable object. Every
// offset, size and index is checked against the file before it is used.
ObjectSymbols ReadObjectSymbols(const std::string& path, const std::string& data) {
  auto refuse = [&](const std::string& why) {
    ThrowCApiError("RuntimeError", LoadError(path, why));
  };
  if (data.size() < sizeof(Elf64_Ehdr) || std::memcmp(data.data(), ELFMAG, SELFMAG) != 0) {
    refuse("not an ELF object file");
  }
  Elf64_Ehdr eh;
  std::memcpy(&eh, data.data(), sizeof(eh));
  if (eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_ident[EI_DATA] != ELFDATA2LSB) {
    refuse("not a 64-bit little-endian ELF object");
  }
  if (eh.e_type == ET_DYN) {
    refuse("it is a shared library, not a relocatable object; load it with load_module");
  }
  if (eh.e_type != ET_REL)
    refuse("not a relocatable object (ELF type " + std::to_string(eh.e_type) + ")");
  if (eh.e_shentsize != sizeof(Elf64_Shdr) ||
      !InFile(eh.e_shoff, uint64_t{eh.e_shnum} * sizeof(Elf64_Shdr), data.size())) {
    refuse("its section headers are malformed");
  }
  std::vector<Elf64_Shdr> sections(eh.e_shnum);
  if (eh.e_shnum > 0) {
    std::memcpy(sections.data(), data.data() + eh.e_shoff, eh.e_shnum * sizeof(Elf64_Shdr));
  }
  ObjectSymbols out;
  const std::string_view prefix = "__kffi_";
  for (const Elf64_Shdr& sh : sections) {
    if (sh.sh_type != SHT_SYMTAB) continue;
    if (sh.sh_entsize != sizeof(Elf64_Sym) || !InFile(sh.sh_offset, sh.sh_size, data.size()) ||
        sh.sh_link >= sections.size()) {
      refuse("its symbol table is malformed");
    }
    const Elf64_Shdr& strtab = sections[sh.sh_link];
    if (!InFile(strtab.sh_offset, strtab.sh_size, data.size())) {
      refuse("its string table is malformed");
    }
    const char* names = data.data() + strtab.sh_offset;
    for (uint64_t i = 0; i < sh.sh_size / sizeof(Elf64_Sym); ++i) {
      Elf64_Sym sym;
      std::memcpy(&sym, data.data() + sh.sh_offset + i * sizeof(Elf64_Sym), sizeof(sym));
      if (sym.st_name >= strtab.sh_size) refuse("a symbol name lies outside its string table");
      const char* start = names + sym.st_name;
      const void* end = std::memchr(start, '\0', strtab.sh_size - sym.st_name);
      if (end == nullptr) refuse("a symbol name is not terminated");
      std::string_view name(start, static_cast<const char*>(end) - start);
      const int bind = ELF64_ST_BIND(sym.st_info);
      if (bind != STB_GLOBAL && bind != STB_WEAK) continue;
      if (sym.st_shndx == SHN_UNDEF) {
        if (name.compare(0, 6, "__cuda") == 0 || name.compare(0, 4, "cuda") == 0) {
          out.needs_cudart = true;
        }
      } else if (ELF64_ST_TYPE(sym.st_info) == STT_FUNC && name.size() > prefix.size() &&
                 name.compare(0, prefix.size(), prefix) == 0 && name[prefix.size()] != '_') {
        out.functions.emplace_back(name.substr(prefix.size()));
      }
    }
  }
  if (out.functions.empty()) {
    refuse(
        "it is not a kffi object: it defines no `__kffi_<name>` function (export functions with "
        "KFFI_EXPORT from <kffi/export.h>, or with kffi.compile(...).export(\"x.o\"))");
  }
  return out;
}

// ---- where the linked objects go -------------------------------------------------------------

std::string CacheRoot() {
  auto env = [](const char* name) -> std::string {
    const char* v = std::getenv(name);
    return v != nullptr ? std::string(v) : std::string();
  };
  std::string root = env("KFFI_CACHE_DIR");
  if (root.empty()) {
    std::string xdg = env("XDG_CACHE_HOME");
    if (xdg.empty()) {
      std::string home = env("HOME");
      if (home.empty()) {
        ThrowCApiError("RuntimeError",
                       "Cannot load object files: no cache folder (set KFFI_CACHE_DIR)");
      }
      xdg = home + "/.cache";
    }
    root = xdg + "/kffi";
  }
  return root + "/objects";
}

void MakeDirs(const std::string& dir) {
  for (size_t pos = 1; pos <= dir.size(); ++pos) {
    if (pos != dir.size() && dir[pos] != '/') continue;
    std::string part = dir.substr(0, pos);
    if (mkdir(part.c_str(), 0755) != 0 && errno != EEXIST) {
      ThrowCApiError("RuntimeError", "Cannot create the object cache folder `" + part +
                                         "`: " + std::strerror(errno) + " (set KFFI_CACHE_DIR)");
    }
  }
}

// The folder of this libkffi (the linked object links against it, so it shares this runtime).
std::string RuntimeLibraryDir() {
  Dl_info self;
  if (dladdr(reinterpret_cast<void*>(&KFFIModuleLoadObject), &self) == 0 ||
      self.dli_fname == nullptr) {
    ThrowCApiError("RuntimeError", "Cannot load object files: cannot locate libkffi itself");
  }
  std::string me(self.dli_fname);
  size_t slash = me.rfind('/');
  std::string base = slash == std::string::npos ? me : me.substr(slash + 1);
  if (base.compare(0, 10, "libkffi.so") != 0) {
    ThrowCApiError("RuntimeError",
                   "Cannot load object files: the kffi runtime is linked statically into `" + me +
                       "`; a linked object would bring a second runtime (use the shared "
                       "libkffi.so, or link the object into the program)");
  }
  char buf[PATH_MAX];
  if (realpath(me.c_str(), buf) == nullptr) {
    ThrowCApiError("RuntimeError", "Cannot load object files: cannot resolve `" + me + "`");
  }
  std::string real(buf);
  return real.substr(0, real.rfind('/'));
}

// The folder of libcudart.so: $CUDA_HOME, $CUDA_PATH, /usr/local/cuda; empty: the linker's own
// search path.
std::string CudaLibraryDir() {
  std::vector<std::string> homes;
  for (const char* var : {"CUDA_HOME", "CUDA_PATH"}) {
    if (const char* v = std::getenv(var); v != nullptr && *v != '\0') homes.emplace_back(v);
  }
  homes.emplace_back("/usr/local/cuda");
  for (const std::string& home : homes) {
    for (const char* sub : {"/lib64", "/targets/x86_64-linux/lib", "/lib"}) {
      std::string dir = home + sub;
      if (access((dir + "/libcudart.so").c_str(), R_OK) == 0) return dir;
    }
  }
  return "";
}

std::vector<std::string> SplitWords(const std::string& text) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : text) {
    if (c == ' ' || c == '\t') {
      if (!cur.empty()) out.push_back(std::move(cur));
      cur.clear();
    } else {
      cur += c;
    }
  }
  if (!cur.empty()) out.push_back(std::move(cur));
  return out;
}

std::string ShellJoin(const std::vector<std::string>& argv) {
  std::string out;
  for (const std::string& a : argv) out += (out.empty() ? "" : " ") + a;
  return out;
}

// Runs argv (no shell), returns its exit status and fills *output with its stdout and stderr.
int RunCommand(const std::vector<std::string>& argv, std::string* output) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    ThrowCApiError("RuntimeError",
                   std::string("Cannot start the linker: pipe: ") + std::strerror(errno));
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 1);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 2);
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  int rc = posix_spawnp(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(fds[1]);
  if (rc != 0) {
    close(fds[0]);
    ThrowCApiError("RuntimeError", "Cannot start the linker `" + argv[0] + "`: " +
                                       std::strerror(rc) + " (set CXX to a C++ compiler driver)");
  }
  char buf[4096];
  for (;;) {
    ssize_t n = read(fds[0], buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    if (output->size() < (1u << 20)) output->append(buf, static_cast<size_t>(n));
  }
  close(fds[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return -1;
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// The file name stem of path: letters, digits, '_', '.', '-' kept, others '_'.
std::string Stem(const std::string& path) {
  std::string base = path.substr(path.rfind('/') == std::string::npos ? 0 : path.rfind('/') + 1);
  if (base.size() > 2 && base.compare(base.size() - 2, 2, ".o") == 0) base.resize(base.size() - 2);
  for (char& c : base) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-')) c = '_';
  }
  if (base.empty() || base[0] == '.') base = "object" + base;
  return base.substr(0, 64);
}

// Holds an exclusive flock on a file for its lifetime.
class FileLock {
 public:
  explicit FileLock(const std::string& path) {
    fd_ = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0) {
      ThrowCApiError("RuntimeError", "Cannot lock `" + path + "`: " + std::strerror(errno) +
                                         " (set KFFI_CACHE_DIR)");
    }
    while (flock(fd_, LOCK_EX) != 0 && errno == EINTR) {
    }
  }
  ~FileLock() {
    flock(fd_, LOCK_UN);
    close(fd_);
  }
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

 private:
  int fd_;
};

void WriteFile(const std::string& path, const std::string& data) {
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    ThrowCApiError("RuntimeError", "Cannot write `" + path + "`: " + std::strerror(errno));
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int err = errno;
      close(fd);
      ThrowCApiError("RuntimeError", "Cannot write `" + path + "`: " + std::strerror(err));
    }
    done += static_cast<size_t>(n);
  }
  close(fd);
}

// ---- the cache's records ---------------------------------------------------------------------
// Beside each linked file lies `<file>.sha256`: its size and SHA-256. An entry whose file does not
// match (truncated by a full disk or a killed copy, overwritten, edited by hand) is linked again
// instead of failing every later load.

std::string RecordPath(const std::string& linked) { return linked + ".sha256"; }

// "<size> <sha256 hex>" of the regular file at path; empty when it cannot be read.
std::string DescribeFile(const std::string& path) {
  uint64_t size = 0;
  std::string problem;
  int fd = OpenRegularFile(path, &size, &problem);
  if (fd < 0) return std::string();
  Sha256 hash;
  uint64_t total = 0;
  char buf[1 << 16];
  for (;;) {
    ssize_t n = read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      close(fd);
      return std::string();
    }
    if (n == 0) break;
    hash.Update(buf, static_cast<size_t>(n));
    total += static_cast<uint64_t>(n);
  }
  close(fd);
  return std::to_string(total) + " " + hash.HexDigest();
}

// The first line of a small regular file (a record); empty when there is none.
std::string ReadRecord(const std::string& path) {
  uint64_t size = 0;
  std::string problem;
  int fd = OpenRegularFile(path, &size, &problem);
  if (fd < 0) return std::string();
  char buf[128];
  ssize_t n;
  do {
    n = read(fd, buf, sizeof(buf));
  } while (n < 0 && errno == EINTR);
  close(fd);
  if (n <= 0) return std::string();
  std::string text(buf, static_cast<size_t>(n));
  return text.substr(0, text.find('\n'));
}

// Whether the cache holds an intact linked file at `linked`: its record exists, and the file has
// the size (checked first: no read) and the digest the record says.
bool CacheEntryIntact(const std::string& linked) {
  const std::string record = ReadRecord(RecordPath(linked));
  const size_t space = record.find(' ');
  if (space == std::string::npos) return false;
  struct stat st;
  if (stat(linked.c_str(), &st) != 0 || !S_ISREG(st.st_mode) ||
      std::to_string(static_cast<uint64_t>(st.st_size)) != record.substr(0, space)) {
    return false;
  }
  return DescribeFile(linked) == record;
}

// Links the object's bytes into `out` (atomically: a temporary file renamed into place).
void LinkObject(const std::string& given, const std::string& data, const ObjectSymbols& syms,
                const std::vector<std::string>& link_prefix, const std::string& out) {
  const std::string tag = std::to_string(getpid());
  const std::string tmp_obj = out + ".tmp-" + tag + ".o";
  const std::string tmp_out = out + ".tmp-" + tag;
  // The hashed bytes are what gets linked: the file may change while this runs.
  WriteFile(tmp_obj, data);
  std::vector<std::string> argv = link_prefix;
  // -z now: the dynamic loader binds every symbol when the library opens, so a function that
  // nothing defines fails the load, naming it, instead of killing the process at its first call.
  argv.insert(argv.end(), {"-shared", "-Wl,-z,now", "-o", tmp_out, tmp_obj});
  std::string kffi_dir = RuntimeLibraryDir();
  argv.insert(argv.end(), {"-L" + kffi_dir, "-Wl,-rpath," + kffi_dir, "-lkffi"});
  if (syms.needs_cudart) {
    std::string cuda = CudaLibraryDir();
    if (!cuda.empty()) argv.insert(argv.end(), {"-L" + cuda, "-Wl,-rpath," + cuda});
    argv.emplace_back("-lcudart");
  }
  std::string output;
  int status = RunCommand(argv, &output);
  unlink(tmp_obj.c_str());
  if (status != 0) {
    unlink(tmp_out.c_str());
    ThrowCApiError("RuntimeError",
                   LoadError(given, "linking it into a shared object failed (exit status " +
                                        std::to_string(status) + ")\nCommand: " + ShellJoin(argv) +
                                        "\n" + output));
  }
  // The record goes in after the file: a reader that sees the new file with the old record (or
  // none) takes it as damaged and waits for this link's lock, then finds both.
  const std::string description = DescribeFile(tmp_out);
  const std::string tmp_record = tmp_out + ".sha256";
  if (description.empty()) {
    unlink(tmp_out.c_str());
    ThrowCApiError("RuntimeError", "Cannot read the linked object `" + tmp_out + "` back");
  }
  WriteFile(tmp_record, description + "\n");
  for (const auto& move :
       {std::make_pair(tmp_out, out), std::make_pair(tmp_record, RecordPath(out))}) {
    if (rename(move.first.c_str(), move.second.c_str()) != 0) {
      int err = errno;
      unlink(tmp_out.c_str());
      unlink(tmp_record.c_str());
      ThrowCApiError("RuntimeError", "Cannot move the linked object to `" + move.second +
                                         "`: " + std::strerror(err));
    }
  }
}

// A name as C++ spells it ("scale(float*, long)" for "_Z5scalePfl"); the name itself when it is
// not a mangled C++ name.
std::string Demangled(const std::string& name) {
  int status = 0;
  char* text = abi::__cxa_demangle(name.c_str(), nullptr, nullptr, &status);
  std::string out = status == 0 && text != nullptr ? std::string(text) : name;
  std::free(text);
  return out;
}

// After the linked file failed to open: an unresolved symbol (the loader binds every one at
// open, see -z now) is raised as the object's error, naming the symbol; any other error is left
// raised as it came. Returns -1.
int RaiseLinkedLoadError(const std::string& given) {
  KFFIObjectHandle err = nullptr;
  KFFIErrorMoveFromRaised(&err);
  if (err == nullptr) return -1;
  const KFFIErrorCell* cell = KFFIErrorGetCellPtr(err);
  const std::string message(cell->message.data, cell->message.size);
  constexpr std::string_view kMarker = "undefined symbol: ";
  const size_t at = message.find(kMarker);
  if (at == std::string::npos) {
    KFFIErrorSetRaised(err);
    KFFIObjectDecRef(err);
    return -1;
  }
  KFFIObjectDecRef(err);
  const size_t start = at + kMarker.size();
  size_t end = start;
  while (end < message.size() && !std::isspace(static_cast<unsigned char>(message[end])) &&
         message[end] != ',' && message[end] != '(') {
    ++end;
  }
  const std::string symbol = message.substr(start, end - start);
  const std::string shown = Demangled(symbol);
  ThrowCApiError(
      "RuntimeError",
      LoadError(given, "it uses `" + shown + "`" + (shown != symbol ? " (" + symbol + ")" : "") +
                           ", which nothing defines: neither the object, nor what it is linked "
                           "with (libkffi, the C and C++ runtimes), nor the process "
                           "(undefined symbol)"));
}

// Suspends system-library registrations on this thread while the linked object is opened.
class SuspendRegistrations {
 public:
  SuspendRegistrations() { ++t_suspend_registrations; }
  ~SuspendRegistrations() { --t_suspend_registrations; }
  SuspendRegistrations(const SuspendRegistrations&) = delete;
  SuspendRegistrations& operator=(const SuspendRegistrations&) = delete;
};

}  // namespace

bool SystemLibRegistrationsSuspended() noexcept { return t_suspend_registrations > 0; }

}  // namespace details
}  // namespace kffi

int KFFIModuleLoadObject(const KFFIByteArray* path, KFFIObjectHandle* out) {
  using namespace kffi::details;  // NOLINT(build/namespaces): the helpers of this file
  KFFI_CAPI_BEGIN();
  CheckOutArg(out, "KFFIModuleLoadObject: out");
  *out = nullptr;
  std::string given(ByteArrayArg(path, "KFFIModuleLoadObject: path"));
  if (given.empty()) ThrowCApiError("ValueError", "Cannot load object: the path is empty");
  if (given.find('\0') != std::string::npos) {
    ThrowCApiError("ValueError", "Cannot load object: the path contains a NUL byte at offset " +
                                     std::to_string(given.find('\0')));
  }
  const std::string data = ReadFile(given);
  const ObjectSymbols syms = ReadObjectSymbols(given, data);
  const char* cxx_env = std::getenv("CXX");
  std::vector<std::string> link_prefix = SplitWords(cxx_env != nullptr ? cxx_env : "");
  if (link_prefix.empty()) link_prefix = {"c++"};
  // The key: the object's bytes and everything else the linked file depends on.
  Sha256 key;
  key.Update("kffi.load_object/2");  // 2: linked with -z now
  key.Update(std::to_string(KFFI_ABI_VERSION) + "/" + std::to_string(KFFI_VERSION_MAJOR) + "." +
             std::to_string(KFFI_VERSION_MINOR) + "." + std::to_string(KFFI_VERSION_PATCH));
  key.Update(RuntimeLibraryDir() + "\n" + ShellJoin(link_prefix) + "\n");
  key.Update(data);
  const std::string dir = CacheRoot();
  const std::string stem = Stem(given);
  const std::string linked = dir + "/" + stem + "_" + key.HexDigest().substr(0, 32) + ".so";
  if (!CacheEntryIntact(linked)) {
    MakeDirs(dir);
    FileLock lock(dir + "/." + linked.substr(dir.size() + 1) + ".lock");
    if (!CacheEntryIntact(linked)) LinkObject(given, data, syms, link_prefix, linked);
  }
  SuspendRegistrations suspend;
  KFFIByteArray p{linked.data(), linked.size()};
  if (KFFIModuleLoadFromFile(&p, out) != 0) return RaiseLinkedLoadError(given);
  KFFI_CAPI_END();
}
