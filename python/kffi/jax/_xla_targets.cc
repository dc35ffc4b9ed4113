// python/kffi/jax/_xla_targets.cc: one handler address per target (trampolines), the target
// registry, and the exports kffi/jax/_ffi.py calls to make targets.
// SPDX-License-Identifier: Apache-2.0
#include <kffi/export.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <deque>
#include <mutex>
#include <string>
#include <utility>

#include "_xla_handler.h"

namespace kffi {
namespace jaxglue {

// ---- Trampolines: one handler address per target --------------------------------------------
//
// A handler is a bare function pointer, so each target needs its own address. Stubs live in
// pages written once and then made read+execute; each stub loads its target record and the
// address of KFFIJaxDispatch from its slot in the writable page that follows, and jumps:
// handler(frame) becomes KFFIJaxDispatch(frame, target) with no extra frame. (XLA itself JITs
// host code, so wherever JAX runs, executable pages can be made.)

struct Slot {
  const Target* target;
  void* dispatch;
};

constexpr size_t kStubBytes = 32;

#if defined(__x86_64__)
void WriteStub(uint8_t* code, const Slot* slot) {
  const uint8_t endbr64[4] = {0xF3, 0x0F, 0x1E, 0xFA};
  std::memcpy(code, endbr64, 4);
  // mov rsi, [rip + disp32]: the target record, second argument of KFFIJaxDispatch.
  code[4] = 0x48;
  code[5] = 0x8B;
  code[6] = 0x35;
  int32_t d1 = static_cast<int32_t>(reinterpret_cast<const uint8_t*>(&slot->target) - (code + 11));
  std::memcpy(code + 7, &d1, 4);
  // jmp [rip + disp32]: KFFIJaxDispatch.
  code[11] = 0xFF;
  code[12] = 0x25;
  int32_t d2 =
      static_cast<int32_t>(reinterpret_cast<const uint8_t*>(&slot->dispatch) - (code + 17));
  std::memcpy(code + 13, &d2, 4);
  std::memset(code + 17, 0xCC, kStubBytes - 17);  // int3
}
constexpr bool kHaveTrampolines = true;
#elif defined(__aarch64__)
void WriteStub(uint8_t* code, const Slot* slot) {
  auto ldr_literal = [](uint32_t rt, const uint8_t* pc, const void* target) {
    int64_t off = (reinterpret_cast<const uint8_t*>(target) - pc) / 4;
    return 0x58000000u | ((static_cast<uint32_t>(off) & 0x7FFFFu) << 5) | rt;
  };
  uint32_t insns[4] = {
      0xD503245Fu,                                 // bti c
      ldr_literal(1, code + 4, &slot->target),     // ldr x1, target record
      ldr_literal(16, code + 8, &slot->dispatch),  // ldr x16, KFFIJaxDispatch
      0xD61F0200u,                                 // br x16
  };
  std::memcpy(code, insns, sizeof(insns));
  std::memset(code + sizeof(insns), 0, kStubBytes - sizeof(insns));
}
constexpr bool kHaveTrampolines = true;
#else
void WriteStub(uint8_t*, const Slot*) {}
constexpr bool kHaveTrampolines = false;
#endif

class TrampolinePool {
 public:
  /// A handler address that calls KFFIJaxDispatch(frame, t). Thread safe.
  XLA_FFI_Handler* Make(const Target* t) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!kHaveTrampolines) {
      KFFI_THROW(NotImplementedError) << "kffi.jax: handler trampolines are implemented for "
                                         "x86-64 and AArch64 only";
    }
    if (code_ == nullptr || used_ == per_page_) NewPage();
    size_t i = used_++;
    slots_[i].target = t;
    slots_[i].dispatch = reinterpret_cast<void*>(&KFFIJaxDispatch);
    ++count_;
    return reinterpret_cast<XLA_FFI_Handler*>(code_ + i * kStubBytes);
  }
  size_t count() {
    std::lock_guard<std::mutex> lock(mu_);
    return count_;
  }

 private:
  void NewPage() {
    size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    void* mem = mmap(nullptr, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    KFFI_CHECK(mem != MAP_FAILED, MemoryError)
        << "kffi.jax: cannot map memory for handler trampolines (" << std::strerror(errno) << ")";
    auto* code = static_cast<uint8_t*>(mem);
    auto* slots = reinterpret_cast<Slot*>(code + page);
    size_t n = std::min(page / kStubBytes, page / sizeof(Slot));
    for (size_t i = 0; i < n; ++i) WriteStub(code + i * kStubBytes, &slots[i]);
    __builtin___clear_cache(reinterpret_cast<char*>(code), reinterpret_cast<char*>(code + page));
    if (mprotect(code, page, PROT_READ | PROT_EXEC) != 0) {
      int err = errno;
      munmap(mem, 2 * page);
      KFFI_THROW(RuntimeError) << "kffi.jax: cannot make handler trampolines executable ("
                               << std::strerror(err) << ")";
    }
    code_ = code;  // earlier pages stay mapped: their handlers are registered for good
    slots_ = slots;
    per_page_ = n;
    used_ = 0;
  }

  std::mutex mu_;
  uint8_t* code_ = nullptr;
  Slot* slots_ = nullptr;
  size_t per_page_ = 0;
  size_t used_ = 0;
  size_t count_ = 0;
};

TrampolinePool& Pool() {
  static auto* pool = new TrampolinePool();  // never destroyed: handlers outlive static teardown
  return *pool;
}

std::mutex& TargetsMutex() {
  static auto* mu = new std::mutex();
  return *mu;
}

std::deque<Target>& Targets() {
  static auto* targets = new std::deque<Target>();  // stable addresses, never freed
  return *targets;
}

// ---- Exports (called by kffi/jax/_ffi.py) -------------------------------------------------------

/// The record of a kRecord arg_spec item, from its text "<param>:<type key>:<field>,<field>,...":
/// the type's creator and each field's setter, read from the reflection registry now. A field
/// `f` is read from the attribute `<param>_f`.
RecordTarget ParseRecord(const std::string& text) {
  const size_t a = text.find(':'), b = text.rfind(':');
  KFFI_CHECK(a != std::string::npos && b != a && a > 0, ValueError)
      << "kffi.jax: arg_spec record item '" << text << "' is not 'param:type.key:field,...'";
  const std::string param = text.substr(0, a), key = text.substr(a + 1, b - a - 1);
  KFFIByteArray k{key.data(), key.size()};
  int32_t index = -1;
  KFFI_CHECK(KFFITypeKeyToIndex(&k, &index) == 0, KeyError)
      << "kffi.jax: record type " << key << " is not registered";
  const KFFITypeInfo* info = KFFIGetTypeInfo(index);
  const KFFITypeReflection* own = KFFIGetTypeReflection(index);
  KFFI_CHECK(info != nullptr && own != nullptr && own->creator != nullptr, TypeError)
      << "kffi.jax: record type " << key << " has no fields or no default constructor";
  RecordTarget rec;
  rec.creator = own->creator;
  size_t start = b + 1;
  while (start < text.size()) {
    size_t end = text.find(',', start);
    if (end == std::string::npos) end = text.size();
    const std::string name = text.substr(start, end - start);
    start = end + 1;
    const KFFIFieldInfo* found = nullptr;  // the nearest declaration
    for (int32_t d = 0; d <= info->type_depth; ++d) {
      const KFFITypeReflection* r =
          KFFIGetTypeReflection(d == info->type_depth ? index : info->type_ancestors[d]);
      for (int32_t i = 0; r != nullptr && i < r->num_fields; ++i) {
        const KFFIByteArray& n = r->fields[i].name;
        if (n.size == name.size() && std::memcmp(n.data, name.data(), n.size) == 0) {
          found = &r->fields[i];
        }
      }
    }
    KFFI_CHECK(found != nullptr && found->setter != nullptr, TypeError)
        << "kffi.jax: " << param << "." << name << ": " << key << " has no writable field " << name;
    rec.fields.push_back(RecordField{param + "_" + name, found, param + "." + name});
  }
  return rec;
}

/// Makes a target for fn and returns its handler address. kinds/indices/names describe arg_spec
/// item by item (see SpecKind); traits is XLA_FFI_Handler_Traits.
int64_t MakeTarget(Function fn, Array<int64_t> kinds, Array<int64_t> indices, Array<String> names,
                   int64_t device_type, int64_t traits, String label) {
  KFFI_CHECK(fn.defined(), ValueError) << "kffi.jax: the function is None";
  KFFI_CHECK(kinds.size() == indices.size() && kinds.size() == names.size(), ValueError)
      << "kffi.jax: arg_spec arrays differ in length";
  Target t;
  KFFIObjectHandle h = details::ObjectUnsafe::Header(fn.get());
  t.safe_call = static_cast<const KFFIFunctionCell*>(KFFIObjectGetCellPtr(h))->safe_call;
  t.device_type = static_cast<int32_t>(device_type);
  t.traits = static_cast<uint32_t>(traits);
  t.label = std::string(label);
  for (int64_t i = 0; i < kinds.size(); ++i) {
    int64_t k = kinds[i];
    KFFI_CHECK(k >= kArgsAll && k <= kRecord, ValueError) << "kffi.jax: bad arg_spec kind " << k;
    KFFI_CHECK(indices[i] >= 0 && indices[i] <= INT32_MAX, ValueError)
        << "kffi.jax: arg_spec index out of range: " << indices[i];
    int32_t index = static_cast<int32_t>(indices[i]);
    if (k == kAttr) {
      index = static_cast<int32_t>(t.attr_names.size());
      t.attr_names.emplace_back(names[i]);
    } else if (k == kRecord) {
      index = static_cast<int32_t>(t.records.size());
      t.records.push_back(ParseRecord(std::string(names[i])));
    }
    t.spec.push_back(SpecItem{static_cast<int32_t>(k), index});
    if (k == kRetsAll) t.passes_all_rets = true;
    if (k == kArgsAll) {
      ++t.args_all_count;
    } else if (k == kRetsAll) {
      ++t.rets_all_count;
    } else {
      ++t.fixed_values;
    }
  }
  std::lock_guard<std::mutex> lock(TargetsMutex());
  std::deque<Target>& all = Targets();
  all.push_back(std::move(t));
  Target* stored = &all.back();
  XLA_FFI_Handler* handler;
  try {
    handler = Pool().Make(stored);
  } catch (...) {
    all.pop_back();
    throw;
  }
  KFFIObjectIncRef(h);  // the target keeps the function for good
  stored->fn = h;
  return static_cast<int64_t>(reinterpret_cast<intptr_t>(handler));
}

/// The traits a handler reports when XLA asks for its metadata (as at registration).
int64_t HandlerTraits(int64_t address) {
  XLA_FFI_Metadata md;
  std::memset(&md, 0, sizeof(md));
  md.struct_size = XLA_FFI_Metadata_STRUCT_SIZE;
  XLA_FFI_Metadata_Extension ext;
  std::memset(&ext, 0, sizeof(ext));
  ext.extension_base.struct_size = XLA_FFI_Metadata_Extension_STRUCT_SIZE;
  ext.extension_base.type = XLA_FFI_Extension_Metadata;
  ext.metadata = &md;
  XLA_FFI_CallFrame frame;
  std::memset(&frame, 0, sizeof(frame));
  frame.struct_size = XLA_FFI_CallFrame_STRUCT_SIZE;
  frame.extension_start = &ext.extension_base;
  auto* handler = reinterpret_cast<XLA_FFI_Handler*>(static_cast<intptr_t>(address));
  XLA_FFI_Error* err = handler(&frame);
  KFFI_CHECK(err == nullptr, RuntimeError) << "kffi.jax: the metadata query failed";
  KFFI_CHECK(md.api_version.major_version == KFFI_XLA_FFI_MAJOR, RuntimeError)
      << "kffi.jax: the handler reported API version " << md.api_version.major_version;
  return md.traits;
}

/// How many targets this process made.
int64_t TargetCount() { return static_cast<int64_t>(Pool().count()); }

}  // namespace jaxglue
}  // namespace kffi

KFFI_EXPORT_DOC(make_target, kffi::jaxglue::MakeTarget, "A handler address for a kffi function.",
                "fn, kinds, indices, names, device_type, traits, label");
KFFI_EXPORT_DOC(handler_traits, kffi::jaxglue::HandlerTraits, "The XLA traits a handler reports.",
                "address");
KFFI_EXPORT_DOC(target_count, kffi::jaxglue::TargetCount, "Targets made in this process.", "");
