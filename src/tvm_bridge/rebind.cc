// src/tvm_bridge/rebind.cc: redirects a loaded library's imports of a few TVM-FFI functions.
//
// A library bound to apache-tvm-ffi's runtime reads the tensor allocator and the stream from that
// runtime's environment. Copying kffi's into it around every call costs several thread-local
// lookups per call, a cost every call of a library that merely can allocate, or launch, pays.
// Instead, the library's own slots for those imports (the GOT entries the dynamic loader filled)
// are pointed at kffi forwarders once, at load, and the forwarders decide per call, from a
// thread-local mark, whose allocator or stream applies (calls.cc). Only the library's slots change:
// apache-tvm-ffi, and every other library, keeps calling its own functions.
//
// The redirection is all or nothing, and refuses (the caller keeps the copying path) unless
//   - the file's dynamic relocations were all read and every one against the symbol is a plain
//     pointer slot (module_elf.h), on a machine whose slot kinds are known;
//   - every slot lies inside a writable segment of the loaded library, aligned;
//   - every slot holds the runtime's function or the forwarder (loaded before). A lazy PLT slot
//     not yet resolved (a library someone else opened with RTLD_LAZY) is refused: the lazy
//     resolver of a thread already inside the library could overwrite the forwarder later.
// Slots in the RELRO range, read-only after loading, are made writable for the store and read-only
// again, the page exactly as the dynamic loader protects it. Everything is checked before the
// first store; should a store still fail (mprotect refused), the slots already written stay
// redirected, which is harmless: an unmarked thread's forwarders call the runtime's functions,
// and the library keeps the per-call copy.
// SPDX-License-Identifier: Apache-2.0
#include <dlfcn.h>
#include <link.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <mutex>
#include <vector>

#include "tvm_bridge/bridge_internal.h"

namespace kffi {
namespace tvmglue {
namespace {

struct Range {
  uintptr_t begin = 0, end = 0;
  bool Contains(uintptr_t a, size_t n) const { return a >= begin && a <= end && n <= end - a; }
};

// The loaded object's segments, from the program headers the dynamic loader reports.
struct Image {
  uintptr_t base = 0;
  const char* name = nullptr;
  bool found = false;
  std::vector<Range> writable;  // PT_LOAD with PF_W
  Range relro;                  // PT_GNU_RELRO (empty when absent)
};

int CollectImage(struct dl_phdr_info* info, size_t, void* data) {
  auto* image = static_cast<Image*>(data);
  if (info->dlpi_addr != image->base || info->dlpi_name == nullptr ||
      std::strcmp(info->dlpi_name, image->name) != 0) {
    return 0;
  }
  for (ElfW(Half) i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    const uintptr_t begin = image->base + ph.p_vaddr;
    if (begin < image->base || ph.p_memsz > UINTPTR_MAX - begin) return 1;  // malformed: found
    const Range r{begin, begin + ph.p_memsz};
    if (ph.p_type == PT_LOAD) {
      if ((ph.p_flags & PF_W) != 0) image->writable.push_back(r);
    } else if (ph.p_type == PT_GNU_RELRO) {
      image->relro = r;
    }
  }
  image->found = true;
  return 1;
}

bool InAny(const std::vector<Range>& ranges, uintptr_t a, size_t n) {
  for (const Range& r : ranges) {
    if (r.Contains(a, n)) return true;
  }
  return false;
}

// Stores value into the slot, lifting the RELRO protection of its page for the store.
bool Store(const Image& image, uintptr_t slot, const void* value) {
  const uintptr_t page_size = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t page = slot & ~(page_size - 1);
  // The dynamic loader protects [page_down(relro begin), page_down(relro end)).
  const bool protected_page = image.relro.end > image.relro.begin &&
                              page >= (image.relro.begin & ~(page_size - 1)) &&
                              page < (image.relro.end & ~(page_size - 1));
  auto* p = reinterpret_cast<void*>(page);
  if (protected_page && mprotect(p, page_size, PROT_READ | PROT_WRITE) != 0) return false;
  __atomic_store_n(reinterpret_cast<const void**>(slot), value, __ATOMIC_RELEASE);
  // Should this fail, the page merely stays writable, as it was before the loader protected it.
  if (protected_page) mprotect(p, page_size, PROT_READ);
  return true;
}

}  // namespace

bool RedirectImports(void* handle, const details::ElfExports& elf,
                     const std::vector<Redirect>& redirects) {
  if (!elf.tvm_import_slots_complete) return false;
  struct link_map* map = nullptr;
  if (dlinfo(handle, RTLD_DI_LINKMAP, &map) != 0 || map == nullptr || map->l_name == nullptr) {
    return false;
  }
  Image image;
  image.base = map->l_addr;
  image.name = map->l_name;
  dl_iterate_phdr(&CollectImage, &image);
  if (!image.found || image.writable.empty()) return false;

  // First check every slot, then write: nothing changes unless everything can.
  struct Write {
    uintptr_t slot;
    const void* value;
  };
  std::vector<Write> writes;
  for (const Redirect& r : redirects) {
    for (const details::ElfImportSlot& s : elf.tvm_import_slots) {
      if (s.symbol != r.symbol) continue;
      if (!s.plain || s.offset > UINTPTR_MAX - image.base) return false;
      const uintptr_t slot = image.base + s.offset;
      if (slot % alignof(void*) != 0 || !InAny(image.writable, slot, sizeof(void*))) {
        return false;
      }
      const void* now =
          __atomic_load_n(reinterpret_cast<const void* const*>(slot), __ATOMIC_ACQUIRE);
      if (now != r.original && now != r.replacement) return false;
      if (now != r.replacement) writes.push_back(Write{slot, r.replacement});
    }
  }
  // One redirection at a time, so that two threads never race on a page's protection.
  static std::mutex* mutex = new std::mutex();
  std::lock_guard<std::mutex> lock(*mutex);
  for (const Write& w : writes) {
    if (!Store(image, w.slot, w.value)) return false;
  }
  return true;
}

}  // namespace tvmglue
}  // namespace kffi
