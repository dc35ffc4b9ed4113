// src/tvm_bridge/calls.cc: calls between kffi and code bound to a TVM-FFI runtime, both ways.
//
// Values, objects and the call convention are shared, so a call passes its arguments as they
// are. What differs is per runtime state and one layout:
//   - the raised error lives in each runtime's own thread-local slot: after a failed call it is
//     moved to the slot the caller reads (the error object itself crosses, kind, message and
//     backtrace intact);
//   - the environment stream and tensor allocator are per runtime: the caller's are copied into
//     the callee's runtime for the call and restored after it, except where the library's
//     imports of them were redirected at load (rebind.cc): then a thread mark selects kffi's;
//   - Map and Dict objects have different layouts in the two ABIs, so neither crosses (a clear
//     TypeError instead of a misread); Arrays and Lists are checked for them inside;
//   - Function arguments and results are wrapped so that the rules above hold for calls made
//     through them as well, and a wrapper that comes back is unwrapped (identity kept);
//   - a TVM-FFI parameter of type `ffi::Tensor` (or Any, Optional, ...) takes only Tensor
//     objects, where kffi's callers pass tensors as borrowed DLTensor* values: such an argument
//     becomes a Tensor object viewing it for the call (kffi's rule for its own Tensor parameters).
//     kffi's Python binding passes owning Tensors there instead (it holds the framework tensor),
//     so that a callee may keep them (ForeignTensorParams tells it where).
// When a library is bound to the shim, kffi's state is the TVM-FFI state: only the last two
// points apply, and the error and environment steps are skipped.
// SPDX-License-Identifier: Apache-2.0
#include <kffi/c_api.h>
#include <kffi/tensor.h>

#include <algorithm>
#include <atomic>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "core/runtime_internal.h"
#include "tvm_bridge/bridge_internal.h"

namespace kffi {
namespace tvmglue {
namespace {

using details::NewRuntimeObject;
using details::RuntimePayload;

// kffi calls foreign code: the function a library exports, or a Function object it made.
struct ForeignCallable {
  KFFIFunctionCell cell;
  KFFISafeCallType call;
  void* handle;           // passed to call: NULL for an exported symbol, else the function
  KFFIObjectHandle keep;  // owned; the module or the foreign function object
  const RealRuntime* real;
  std::string name;
  unsigned env_use;       // EnvUse bits
  OwnedTensorMask owned;  // parameters that take owning Tensors (OwnedTensorParams)

  ForeignCallable(KFFISafeCallType entry, KFFISafeCallType c, void* h, KFFIObjectHandle k,
                  const RealRuntime* r, std::string n, unsigned env, OwnedTensorMask o)
      : cell{entry, nullptr},
        call(c),
        handle(h),
        keep(k),
        real(r),
        name(std::move(n)),
        env_use(env),
        owned(o) {}
  ForeignCallable(const ForeignCallable&) = delete;
  ForeignCallable& operator=(const ForeignCallable&) = delete;
  ~ForeignCallable() {
    if (keep != nullptr) KFFIObjectDecRef(keep);
  }
};

// Foreign code calls a kffi Function.
struct KffiCallable {
  KFFIFunctionCell cell;
  KFFIObjectHandle func;  // owned
  const RealRuntime* real;

  KffiCallable(KFFISafeCallType entry, KFFIObjectHandle f, const RealRuntime* r)
      : cell{entry, nullptr}, func(f), real(r) {
    KFFIObjectIncRef(func);
  }
  KffiCallable(const KffiCallable&) = delete;
  KffiCallable& operator=(const KffiCallable&) = delete;
  ~KffiCallable() { KFFIObjectDecRef(func); }
};

int ForeignShimEntry(void* self, const KFFIAny* args, int32_t num_args, KFFIAny* result);
int ForeignRealEntry(void* self, const KFFIAny* args, int32_t num_args, KFFIAny* result);
int KffiEntry(void* self, const KFFIAny* args, int32_t num_args, KFFIAny* result);

bool IsForeignCallable(KFFIObject* obj) {
  KFFISafeCallType entry = static_cast<KFFIFunctionCell*>(KFFIObjectGetCellPtr(obj))->safe_call;
  return obj->deleter == &details::RuntimePayloadDeleter<ForeignCallable> &&
         (entry == &ForeignShimEntry || entry == &ForeignRealEntry);
}

bool IsKffiCallable(KFFIObject* obj) {
  return obj->deleter == &details::RuntimePayloadDeleter<KffiCallable>;
}

using details::SetNone;

bool IsSeq(int32_t t) { return t == kKFFIArray || t == kKFFIList; }
bool IsMap(int32_t t) { return t == kKFFIMap || t == kKFFIDict; }
// Values that take the slow path (checked or wrapped) when they cross.
bool NeedsCare(int32_t t) { return IsMap(t) || IsSeq(t) || t == kKFFIFunction; }

bool AnyNeedsCare(const KFFIAny* args, int32_t n) {
  for (int32_t i = 0; i < n; ++i) {
    if (NeedsCare(args[i].type_index)) return true;
  }
  return false;
}

// AnyNeedsCare for arguments going to f, which also needs care for a borrowed tensor passed to a
// parameter that takes owning Tensors.
inline bool ArgsNeedCare(const ForeignCallable* f, const KFFIAny* args, int32_t n) {
  if (KFFI_LIKELY(f->owned == 0)) return AnyNeedsCare(args, n);
  for (int32_t i = 0; i < n; ++i) {
    const int32_t t = args[i].type_index;
    if (NeedsCare(t) || (t == kKFFIDLTensorPtr && TakesOwnedTensor(f->owned, i))) return true;
  }
  return false;
}

// Whether an Array or List holds a Map or Dict at any depth. Walked with an explicit stack and a
// visited set: Lists are mutable and may contain themselves.
bool SeqContainsMap(KFFIObject* root) {
  std::vector<KFFIObject*> stack{root};
  std::unordered_set<KFFIObject*> seen{root};
  while (!stack.empty()) {
    KFFIObject* seq = stack.back();
    stack.pop_back();
    const auto* cell = static_cast<const KFFISeqCell*>(KFFIObjectGetCellPtr(seq));
    const auto* items = static_cast<const KFFIAny*>(cell->data);
    for (int64_t i = 0; i < cell->size; ++i) {
      int32_t t = items[i].type_index;
      if (IsMap(t)) return true;
      if (IsSeq(t) && seen.insert(items[i].v_obj).second) stack.push_back(items[i].v_obj);
    }
  }
  return false;
}

const char* MapName(int32_t t) { return t == kKFFIDict ? "Dict" : "Map"; }

// The reason a value cannot cross, or empty when it can (after wrapping, for functions).
std::string Refusal(const KFFIAny& v) {
  if (IsMap(v.type_index)) {
    return std::string("a ") + MapName(v.type_index) +
           " (kffi and TVM-FFI lay out hash maps differently, so maps do not cross between "
           "them; pass a list of (key, value) pairs instead)";
  }
  if (IsSeq(v.type_index) && SeqContainsMap(v.v_obj)) {
    return "a sequence holding a Map or Dict (kffi and TVM-FFI lay out hash maps differently, so "
           "maps do not cross between them; pass lists of (key, value) pairs instead)";
  }
  return std::string();
}

bool FirstDevice(const KFFIAny* args, int32_t n, DLDevice* out) {
  for (int32_t i = 0; i < n; ++i) {
    const DLTensor* t = nullptr;
    if (args[i].type_index == kKFFIDLTensorPtr) {
      t = static_cast<const DLTensor*>(args[i].v_ptr);
    } else if (args[i].type_index == kKFFITensor) {
      t = KFFITensorGetDLTensorPtr(args[i].v_obj);
    }
    if (t != nullptr && t->device.device_type != kDLCPU) {
      *out = t->device;
      return true;
    }
  }
  return false;
}

// Moves kffi's raised error into real's slot (no-op when real is NULL: the slots are one).
void MoveKffiErrorTo(const RealRuntime* real) {
  if (real == nullptr) return;
  KFFIObjectHandle err = nullptr;
  KFFIErrorMoveFromRaised(&err);
  if (err == nullptr) return;
  real->error_set_raised(err);
  KFFIObjectDecRef(err);
}

// What a library bound to the shim gets from TVMFFIEnvTensorAlloc when no allocator is set (kffi's
// rule: aligned host memory for CPU, an error elsewhere), offered to a TVM-FFI runtime as an
// allocator so that a library behaves the same on either runtime.
int KffiDefaultAllocator(DLTensor* prototype, DLManagedTensorVersioned** out, void* error_ctx,
                         void (*set_error)(void* error_ctx, const char* kind,
                                           const char* message)) {
  try {
    kffi::Tensor t = kffi::Tensor::FromEnvAlloc(
        kffi::IntArrayView(prototype->shape, static_cast<size_t>(prototype->ndim)),
        prototype->dtype, prototype->device);
    KFFIObjectHandle h = details::ObjectUnsafe::GetHandle(details::ObjectUnsafe::RefData(t));
    if (KFFITensorToDLPackVersioned(h, out) == 0) return 0;
    details::ThrowRaisedError(-1);
  } catch (const kffi::Error& e) {
    if (set_error != nullptr) set_error(error_ctx, e.kind().c_str(), e.message().c_str());
  } catch (const std::exception& e) {
    if (set_error != nullptr) set_error(error_ctx, "RuntimeError", e.what());
  }
  return -1;
}

// kffi's allocator as a TVM-FFI runtime should see it: kffi's rule when none is set.
DLPackManagedTensorAllocator KffiAllocatorForForeign() {
  DLPackManagedTensorAllocator alloc = KFFIEnvGetTensorAllocator();
  return alloc != nullptr ? alloc : &KffiDefaultAllocator;
}

// How many calls kffi makes into libraries with redirected allocator imports are running on this
// thread (the forwarders below give kffi's allocator while it is not 0), and the runtime those
// imports were bound to (one per process: RebindEnvAllocator refuses a second).
thread_local unsigned t_rebound_calls = 0;
std::atomic<const RealRuntime*> g_rebound_real{nullptr};

// The redirected TVMFFIEnvGetDLPackManagedTensorAllocator.
DLPackManagedTensorAllocator ForwardGetAllocator() {
  if (t_rebound_calls != 0) return KffiAllocatorForForeign();
  return g_rebound_real.load(std::memory_order_acquire)->env_get_allocator();
}

// The redirected TVMFFIEnvTensorAlloc: the runtime makes the tensor (its object, its rules), from
// kffi's allocator inside kffi's calls. Only an allocation pays for the copy.
int ForwardTensorAlloc(DLTensor* prototype, KFFIObjectHandle* out) {
  const RealRuntime* real = g_rebound_real.load(std::memory_order_acquire);
  if (t_rebound_calls == 0) return real->env_tensor_alloc(prototype, out);
  DLPackManagedTensorAllocator prev = nullptr;
  if (real->env_set_allocator(KffiAllocatorForForeign(), 0, &prev) != 0) return -1;
  int rc = real->env_tensor_alloc(prototype, out);
  real->env_set_allocator(prev, 0, nullptr);
  return rc;
}

// The redirected TVMFFIEnvGetStream: kffi's stream inside kffi's calls (what a copy into the
// runtime's environment would have given), the runtime's own elsewhere.
void* ForwardGetStream(int32_t device_type, int32_t device_id) {
  if (t_rebound_calls != 0) return KFFIEnvGetStream(device_type, device_id);
  return g_rebound_real.load(std::memory_order_acquire)->env_get_stream(device_type, device_id);
}

// Marks the thread for the forwarders while it lives (when on): one thread-local lookup.
class ThreadMark {
 public:
  explicit ThreadMark(bool on) : mark_(on ? &t_rebound_calls : nullptr) {
    if (mark_ != nullptr) ++*mark_;
  }
  ~ThreadMark() {
    if (mark_ != nullptr) --*mark_;
  }
  ThreadMark(const ThreadMark&) = delete;
  ThreadMark& operator=(const ThreadMark&) = delete;

 private:
  unsigned* mark_;
};

// Clears the thread's mark while it lives (a callback into kffi), restoring it after.
class MarkSuspension {
 public:
  MarkSuspension() : mark_(&t_rebound_calls), saved_(*mark_) { *mark_ = 0; }
  ~MarkSuspension() { *mark_ = saved_; }
  MarkSuspension(const MarkSuspension&) = delete;
  MarkSuspension& operator=(const MarkSuspension&) = delete;
  bool was_marked() const { return saved_ != 0; }

 private:
  unsigned* mark_;
  unsigned saved_;
};

// kffi's environment (stream of the first device tensor's device, allocator) copied into a
// TVM-FFI runtime's for one call; with kEnvAllocatorRebound or kEnvStreamRebound the thread is
// marked as well.
class ToRealEnv {
 public:
  ToRealEnv(const RealRuntime* real, unsigned env_use, const KFFIAny* args, int32_t n)
      : real_(real), mark_((env_use & kEnvRebound) != 0) {
    if ((env_use & kEnvStream) != 0 && FirstDevice(args, n, &dev_)) {
      has_dev_ = true;
      real_->env_set_stream(dev_.device_type, dev_.device_id,
                            KFFIEnvGetStream(dev_.device_type, dev_.device_id), &prev_stream_);
    }
    if ((env_use & kEnvAllocator) != 0) {
      has_alloc_ = real_->env_set_allocator(KffiAllocatorForForeign(), 0, &prev_alloc_) == 0;
    }
  }
  ~ToRealEnv() {
    if (has_alloc_) real_->env_set_allocator(prev_alloc_, 0, nullptr);
    if (has_dev_) real_->env_set_stream(dev_.device_type, dev_.device_id, prev_stream_, nullptr);
  }
  ToRealEnv(const ToRealEnv&) = delete;
  ToRealEnv& operator=(const ToRealEnv&) = delete;

 private:
  const RealRuntime* real_;
  DLDevice dev_{kDLCPU, 0};
  bool has_dev_ = false;
  void* prev_stream_ = nullptr;
  bool has_alloc_ = false;
  ThreadMark mark_;
  DLPackManagedTensorAllocator prev_alloc_ = nullptr;
};

// The other way: a TVM-FFI runtime's environment copied into kffi's.
class FromRealEnv {
 public:
  FromRealEnv(const RealRuntime* real, const KFFIAny* args, int32_t n, bool copy_allocator) {
    if (real == nullptr) return;
    if (FirstDevice(args, n, &dev_)) {
      has_dev_ = KFFIEnvSetStream(dev_.device_type, dev_.device_id,
                                  real->env_get_stream(dev_.device_type, dev_.device_id),
                                  &prev_stream_) == 0;
    }
    if (!copy_allocator) return;
    DLPackManagedTensorAllocator alloc = real->env_get_allocator();
    if (alloc != nullptr && alloc != &KffiDefaultAllocator) {
      has_alloc_ = KFFIEnvSetTensorAllocator(alloc, 0, &prev_alloc_) == 0;
    }
  }
  ~FromRealEnv() {
    if (has_alloc_) KFFIEnvSetTensorAllocator(prev_alloc_, 0, nullptr);
    if (has_dev_) KFFIEnvSetStream(dev_.device_type, dev_.device_id, prev_stream_, nullptr);
  }
  FromRealEnv(const FromRealEnv&) = delete;
  FromRealEnv& operator=(const FromRealEnv&) = delete;

 private:
  DLDevice dev_{kDLCPU, 0};
  bool has_dev_ = false;
  void* prev_stream_ = nullptr;
  bool has_alloc_ = false;
  DLPackManagedTensorAllocator prev_alloc_ = nullptr;
};

// Owned function wrappers made for one call's arguments, released after it.
class Temps {
 public:
  Temps() = default;
  Temps(const Temps&) = delete;
  Temps& operator=(const Temps&) = delete;
  ~Temps() {
    for (KFFIObjectHandle h : held_) KFFIObjectDecRef(h);
  }
  void Hold(KFFIObjectHandle h) { held_.push_back(h); }

 private:
  std::vector<KFFIObjectHandle> held_;
};

// A kffi result handed to foreign code: refused maps; functions wrapped (or unwrapped).
int ResultToForeign(const RealRuntime* real, KFFIAny* result) {
  std::string why = Refusal(*result);
  if (!why.empty()) {
    KFFIObjectDecRef(result->v_obj);
    SetNone(result);
    RaiseFor(real, "TypeError", "A kffi function called from TVM-FFI code returned " + why);
    return -1;
  }
  if (result->type_index == kKFFIFunction) {
    KFFIObject* f = result->v_obj;
    KFFIObjectHandle out;
    out = WrapKffiFunctionForForeign(f, real);  // unwraps a foreign function of that runtime
    KFFIObjectDecRef(f);
    result->v_obj = static_cast<KFFIObject*>(out);
  }
  return 0;
}

// A foreign result handed to kffi: refused maps; functions wrapped (or unwrapped).
int ResultToKffi(const ForeignCallable* from, KFFIAny* result) {
  std::string why = Refusal(*result);
  if (!why.empty()) {
    KFFIObjectDecRef(result->v_obj);
    SetNone(result);
    std::string message = "The TVM-FFI function `" + from->name + "` returned " + why;
    KFFIErrorSetRaisedFromCStr("TypeError", message.c_str());
    return -1;
  }
  if (result->type_index == kKFFIFunction) {
    KFFIObject* f = result->v_obj;
    KFFIObjectHandle out;
    if (IsKffiCallable(f)) {
      out = RuntimePayload<KffiCallable>(f)->func;  // a kffi function coming back
      KFFIObjectIncRef(out);
      KFFIObjectDecRef(f);
    } else {
      auto call = static_cast<KFFIFunctionCell*>(KFFIObjectGetCellPtr(f))->safe_call;
      out = WrapForeignCallable(call, f, f, from->real,
                                "the function `" + from->name + "` returned");  // takes f
    }
    result->v_obj = static_cast<KFFIObject*>(out);
  }
  return 0;
}

// Arguments from kffi, prepared for foreign code: maps refused, functions wrapped, borrowed
// tensors for parameters that take Tensor objects turned into Tensors viewing them.
int ArgsToForeign(const ForeignCallable* f, const KFFIAny* args, int32_t n,
                  std::vector<KFFIAny>* copy, Temps* temps) {
  copy->assign(args, args + n);
  for (int32_t i = 0; i < n; ++i) {
    KFFIAny& v = (*copy)[static_cast<size_t>(i)];
    if (v.type_index == kKFFIDLTensorPtr) {
      if (!TakesOwnedTensor(f->owned, i)) continue;
      // Valid while the caller's tensor is, as a kffi::Tensor parameter of kffi's own exports;
      // a caller that holds the tensor's owner passes a Tensor object instead.
      KFFIAny owned;
      if (KFFIAnyViewToOwnedAny(&v, &owned) != 0) return -1;
      temps->Hold(owned.v_obj);
      v = owned;
      continue;
    }
    std::string why = Refusal(v);
    if (!why.empty()) {
      std::string message =
          "Argument #" + std::to_string(i) + " of the TVM-FFI function `" + f->name + "` is " + why;
      KFFIErrorSetRaisedFromCStr("TypeError", message.c_str());
      return -1;
    }
    if (v.type_index == kKFFIFunction) {
      KFFIObjectHandle w = WrapKffiFunctionForForeign(v.v_obj, f->real);
      temps->Hold(w);
      v.v_obj = static_cast<KFFIObject*>(w);
    }
  }
  return 0;
}

// Arguments from foreign code, prepared for a kffi function: maps refused, functions wrapped.
int ArgsToKffi(const RealRuntime* real, const KFFIAny* args, int32_t n, std::vector<KFFIAny>* copy,
               Temps* temps) {
  copy->assign(args, args + n);
  for (int32_t i = 0; i < n; ++i) {
    KFFIAny& v = (*copy)[static_cast<size_t>(i)];
    std::string why = Refusal(v);
    if (!why.empty()) {
      RaiseFor(real, "TypeError",
               "Argument #" + std::to_string(i) +
                   " of a kffi function called from TVM-FFI code is " + why);
      return -1;
    }
    if (v.type_index == kKFFIFunction) {
      KFFIObject* fn = v.v_obj;
      if (IsKffiCallable(fn)) {
        v.v_obj = static_cast<KFFIObject*>(RuntimePayload<KffiCallable>(fn)->func);
      } else {
        KFFIObjectIncRef(fn);
        auto call = static_cast<KFFIFunctionCell*>(KFFIObjectGetCellPtr(fn))->safe_call;
        KFFIObjectHandle w = WrapForeignCallable(call, fn, fn, real, "a TVM-FFI callback");
        temps->Hold(w);
        v.v_obj = static_cast<KFFIObject*>(w);
      }
    }
  }
  return 0;
}

// The call with arguments that need care (ArgsToForeign), kept out of the entries' fast path.
__attribute__((noinline)) int CallForeignWithCare(ForeignCallable* f, const KFFIAny* args,
                                                  int32_t n, KFFIAny* result) {
  std::vector<KFFIAny> copy;
  Temps temps;
  if (ArgsToForeign(f, args, n, &copy, &temps) != 0) return -1;
  return f->call(f->handle, copy.data(), n, result);
}

// Inlined into both entries: one indirect call between kffi's caller and the export.
inline __attribute__((always_inline)) int CallForeign(ForeignCallable* f, const KFFIAny* args,
                                                      int32_t n, KFFIAny* result) {
  if (__builtin_expect(!ArgsNeedCare(f, args, n), 1)) return f->call(f->handle, args, n, result);
  return CallForeignWithCare(f, args, n, result);
}

// Bound to the shim: kffi's error slot and environment are the library's.
int ForeignShimEntry(void* self, const KFFIAny* args, int32_t num_args, KFFIAny* result) {
  try {
    auto* f = RuntimePayload<ForeignCallable>(self);
    int rc = CallForeign(f, args, num_args, result);
    if (rc == 0 && __builtin_expect(NeedsCare(result->type_index), 0)) {
      return ResultToKffi(f, result);
    }
    return rc;
  }
  KFFI_CATCH_ALL { return RaiseCurrentException(); }
}

// Bound to a loaded apache-tvm-ffi.
int ForeignRealEntry(void* self, const KFFIAny* args, int32_t num_args, KFFIAny* result) {
  try {
    auto* f = RuntimePayload<ForeignCallable>(self);
    const unsigned use = f->env_use;
    DLDevice dev;
    int rc;
    if (__builtin_expect((use & kEnvAllocator) == 0 && !ArgsNeedCare(f, args, num_args) &&
                             ((use & kEnvStream) == 0 || !FirstDevice(args, num_args, &dev)),
                         1)) {
      // Nothing to copy (the common case: no device tensor, or the stream and allocator imports
      // redirected).
      ThreadMark mark((use & kEnvRebound) != 0);
      rc = f->call(f->handle, args, num_args, result);
    } else {
      // Function arguments may be other libraries' code, which reads apache-tvm-ffi's
      // environment rather than forwarders: with them, what was redirected is copied as well.
      unsigned copy = use;
      if ((use & kEnvAllocatorRebound) != 0) copy |= kEnvAllocator;
      if ((use & kEnvStreamRebound) != 0) copy |= kEnvStream;
      ToRealEnv env(f->real, copy, args, num_args);
      rc = CallForeign(f, args, num_args, result);
    }
    if (rc != 0) {
      MoveErrorToKffi(f->real);
      return rc;
    }
    if (__builtin_expect(NeedsCare(result->type_index), 0)) return ResultToKffi(f, result);
    return 0;
  }
  KFFI_CATCH_ALL { return RaiseCurrentException(); }
}

int KffiCall(KffiCallable* a, const KFFIAny* args, int32_t num_args, KFFIAny* result) {
  int rc;
  {
    std::vector<KFFIAny> copy;
    Temps temps;
    const KFFIAny* call_args = args;
    if (AnyNeedsCare(args, num_args)) {
      if (ArgsToKffi(a->real, args, num_args, &copy, &temps) != 0) return -1;
      call_args = copy.data();
    }
    // Called back from inside kffi's call of a library with redirected allocator imports: kffi's
    // environment is already the caller's (apache-tvm-ffi's was never set to it), and code the
    // callback reaches calls as any TVM-FFI caller does, unmarked.
    MarkSuspension suspended;
    FromRealEnv env(a->real, args, num_args, /*copy_allocator=*/!suspended.was_marked());
    rc = KFFIFunctionCall(a->func, call_args, num_args, result);
  }
  if (rc != 0) {
    MoveKffiErrorTo(a->real);
    return rc;
  }
  if (NeedsCare(result->type_index)) return ResultToForeign(a->real, result);
  return 0;
}

int KffiEntry(void* self, const KFFIAny* args, int32_t num_args, KFFIAny* result) {
  auto* a = RuntimePayload<KffiCallable>(self);
  try {
    return KffiCall(a, args, num_args, result);
  }
  KFFI_CATCH_ALL {
    RaiseCurrentException();
    MoveKffiErrorTo(a->real);
    return -1;
  }
}

}  // namespace

namespace {

/// Redirects a library's imports to kffi's forwarders, unless the library imports `setter` (a
/// library that sets the value itself would read back kffi's through the forwarders, not what it
/// set: it keeps the per-call copy). The runtime the forwarders call is claimed before any slot is
/// written, so that a thread calling through a fresh slot finds it, and never given up, even when
/// refused: another library's forwarders may rely on it. One per process: a second is refused.
bool ClaimAndRedirect(void* handle, const details::ElfExports& elf, const RealRuntime* real,
                      const char* setter, std::initializer_list<Redirect> redirects) {
  if (std::binary_search(elf.tvm_imports.begin(), elf.tvm_imports.end(), setter)) return false;
  const RealRuntime* bound = nullptr;
  if (!g_rebound_real.compare_exchange_strong(bound, real) && bound != real) return false;
  return RedirectImports(handle, elf, redirects);
}

}  // namespace

bool RebindEnvAllocator(void* handle, const details::ElfExports& elf, const RealRuntime* real) {
  if (real->env_tensor_alloc == nullptr) return false;
  return ClaimAndRedirect(
      handle, elf, real, "TVMFFIEnvSetDLPackManagedTensorAllocator",
      {Redirect{"TVMFFIEnvTensorAlloc", reinterpret_cast<const void*>(real->env_tensor_alloc),
                reinterpret_cast<const void*>(&ForwardTensorAlloc)},
       Redirect{"TVMFFIEnvGetDLPackManagedTensorAllocator",
                reinterpret_cast<const void*>(real->env_get_allocator),
                reinterpret_cast<const void*>(&ForwardGetAllocator)}});
}

bool RebindEnvStream(void* handle, const details::ElfExports& elf, const RealRuntime* real) {
  return ClaimAndRedirect(
      handle, elf, real, "TVMFFIEnvSetStream",
      {Redirect{"TVMFFIEnvGetStream", reinterpret_cast<const void*>(real->env_get_stream),
                reinterpret_cast<const void*>(&ForwardGetStream)}});
}

void RaiseFor(const RealRuntime* real, const char* kind, const std::string& message) {
  KFFIErrorSetRaisedFromCStr(kind, message.c_str());
  MoveKffiErrorTo(real);
}

void MoveErrorToKffi(const RealRuntime* real) {
  if (real == nullptr) return;
  KFFIObjectHandle err = nullptr;
  real->error_move_from_raised(&err);
  if (err == nullptr) return;  // nothing there: whatever kffi's slot holds stands
  KFFIErrorSetRaised(err);
  KFFIObjectDecRef(err);
}

KFFIObjectHandle WrapForeignCallable(KFFISafeCallType call, void* handle, KFFIObjectHandle keep,
                                     const RealRuntime* real, std::string name, unsigned env_use,
                                     OwnedTensorMask owned) {
  try {
    return NewRuntimeObject<ForeignCallable>(
        kKFFIFunction, real != nullptr ? &ForeignRealEntry : &ForeignShimEntry, call, handle, keep,
        real, std::move(name), env_use, owned);
  }
  KFFI_CATCH_ALL {
    if (keep != nullptr) KFFIObjectDecRef(keep);
    throw;
  }
}

bool ForeignTensorParams(KFFIObjectHandle func, OwnedTensorMask* owned) {
  auto* obj = static_cast<KFFIObject*>(func);
  if (obj == nullptr || obj->type_index != kKFFIFunction || !IsForeignCallable(obj)) return false;
  *owned = RuntimePayload<ForeignCallable>(obj)->owned;
  return true;
}

KFFIObjectHandle WrapKffiFunctionForForeign(KFFIObjectHandle func, const RealRuntime* real) {
  auto* obj = static_cast<KFFIObject*>(func);
  if (IsForeignCallable(obj) && RuntimePayload<ForeignCallable>(obj)->handle != nullptr &&
      RuntimePayload<ForeignCallable>(obj)->real == real) {
    KFFIObjectHandle inner = RuntimePayload<ForeignCallable>(obj)->handle;
    KFFIObjectIncRef(inner);
    return inner;
  }
  return NewRuntimeObject<KffiCallable>(kKFFIFunction, &KffiEntry, func, real);
}

}  // namespace tvmglue
}  // namespace kffi
