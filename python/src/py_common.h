// python/src/py_common.h: shared declarations of the kffi CPython extension (kffi._core).
// SPDX-License-Identifier: Apache-2.0
#ifndef KFFI_PYTHON_PY_COMMON_H_
#define KFFI_PYTHON_PY_COMMON_H_

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <kffi/any.h>
#include <kffi/c_api.h>
#include <kffi/error.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace kffi {
namespace pyglue {

/// A Python object that holds one strong reference to a kffi object (kffi.Object and every
/// subclass: Function, Tensor, Array, Map, Module, ...).
struct PyObjectHandle {
  PyObject_HEAD KFFIObjectHandle handle;
  PyObject* weakrefs;
  PyObject* dict;
};

/// kffi.Function: an object handle plus the vectorcall slot and call options.
struct PyFunction {
  PyObjectHandle base;
  vectorcallfunc vectorcall;
  /// Parameter names (tuple of str) for keyword arguments, or NULL.
  PyObject* param_names;
  /// Default values of the trailing parameters (tuple, aligned to the end of param_names), or
  /// NULL: a call may leave those out.
  PyObject* defaults;
  /// Release the GIL during the native call: 1 yes, 0 no, -1 follow the global default. Read and
  /// written with relaxed atomics (ReleasesGil, SetReleaseGil): on a free-threaded CPython another
  /// thread may set it during a call.
  int release_gil;
  /// The function cell's safe_call, read once (a cell never changes): one load fewer per call.
  KFFISafeCallType safe_call;
  /// Parameters that take owning Tensor objects (bit i for parameter i, bit 63 for the rest): a
  /// TVM-FFI export's `ffi::Tensor` parameters, which may keep what they get. Borrowed tensor
  /// arguments there are passed as Tensors holding the framework tensor (0: none, the common
  /// case; py_object.cc).
  uint64_t owned_tensor_args;
  /// Parameters of a kffi object type with fields (a record type): where a dataclass or
  /// NamedTuple argument converts to that type by field names (py_records.cc). NULL when the
  /// function has none (tp_alloc zeroes it); else process-lifetime, shared by equal ones.
  const struct RecordParams* record_params;
};

/// The record parameters of a function (PyFunction::record_params): types[i] is the type index
/// parameter i takes, or -1.
struct RecordParams {
  std::vector<int32_t> types;
};

/// The function's own release_gil setting (1, 0, or -1: follow the global default).
inline int ReleaseGilSetting(const PyFunction* f) {
  return __atomic_load_n(&f->release_gil, __ATOMIC_RELAXED);
}
inline void SetReleaseGilSetting(PyFunction* f, int v) {
  __atomic_store_n(&f->release_gil, v, __ATOMIC_RELAXED);
}

/// A reference that Py_XDECREFs on scope exit.
class PyRef {
 public:
  PyRef() = default;
  explicit PyRef(PyObject* o) : o_(o) {}
  PyRef(const PyRef&) = delete;
  PyRef& operator=(const PyRef&) = delete;
  PyRef(PyRef&& other) noexcept : o_(other.o_) { other.o_ = nullptr; }
  PyRef& operator=(PyRef&& other) noexcept {
    std::swap(o_, other.o_);
    return *this;
  }
  ~PyRef() { Py_XDECREF(o_); }
  PyObject* get() const { return o_; }
  PyObject* release() {
    PyObject* o = o_;
    o_ = nullptr;
    return o;
  }
  explicit operator bool() const { return o_ != nullptr; }

 private:
  PyObject* o_ = nullptr;
};

/// Keeps the calling thread's pending Python exception aside while cleanup code runs (a deleter
/// that calls into Python: a ctypes or cffi DLPack deleter, a finalizer reached through a kffi
/// release), then puts it back, as CPython does around __del__. Python code run with an
/// exception pending fails with SystemError, or clears the exception and leaves the caller
/// returning NULL without one. An exception the cleanup itself leaves behind is reported as
/// unraisable. Costs one load when nothing is pending; the caller must hold the GIL.
class PendingErrorScope {
 public:
  PendingErrorScope() {
    if (KFFI_UNLIKELY(PyErr_Occurred() != nullptr)) PyErr_Fetch(&type_, &value_, &tb_);
  }
  ~PendingErrorScope() {
    if (type_ == nullptr) return;
    if (PyErr_Occurred() != nullptr) PyErr_WriteUnraisable(nullptr);
    PyErr_Restore(type_, value_, tb_);
  }
  PendingErrorScope(const PendingErrorScope&) = delete;
  PendingErrorScope& operator=(const PendingErrorScope&) = delete;

 private:
  PyObject* type_ = nullptr;
  PyObject* value_ = nullptr;
  PyObject* tb_ = nullptr;
};

/// Drops one kffi reference with the GIL held. The last reference runs the object's deleter,
/// which may be foreign code that calls into Python: see PendingErrorScope. A C++ exception a
/// deleter threw (the runtime turns it into an error) is reported as unraisable, not left in the
/// thread's kffi error slot for a later call to pick up.
void ReleaseObject(KFFIObjectHandle h);

/// True when this thread must not take the GIL to release a Python object: the interpreter is
/// gone, or finalizing and the GIL is another thread's. A thread that takes the GIL during
/// finalization is ended by a forced unwind (CPython's daemon threads), which a deleter, reached
/// from destructors (noexcept), cannot let through: the process would abort. The object leaks
/// instead; the process is ending.
inline bool CannotReleaseInPython() {
  if (!Py_IsInitialized()) return true;
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsFinalizing() && !PyGILState_Check();
#else
  return _Py_IsFinalizing() && !PyGILState_Check();
#endif
}

/// Runs a foreign deleter (e.g. a DLPack producer's) with the pending Python exception kept
/// aside when the calling thread holds the GIL (deleters run on any thread).
template <typename F>
void RunForeignCleanup(F&& cleanup) {
  if (Py_IsInitialized() && PyGILState_Check()) {
    PendingErrorScope keep;
    cleanup();
  } else {
    cleanup();
  }
}

// ---- the argument-conversion table (py_types.cc) ---------------------------------------------

/// How values of one Python type convert. Decided the first time the type is seen.
enum class Kind : uint8_t {
  kOpaque,  // anything else: held by reference as an OpaquePyObject
  kInt,
  kFloat,
  kBool,
  kNone,
  kStr,
  kBytes,
  kObject,          // kffi.Object and subclasses
  kExchangeTensor,  // a type with the DLPack C exchange API (torch.Tensor)
  kNumpyTensor,     // numpy.ndarray: fields read directly
  kDLPackTensor,    // anything else with __dlpack__
  kSequence,
  kMapping,
  kIndex,      // int-like (__index__): numpy integers, IntEnum
  kFloatLike,  // float-like (__float__): numpy floats
  kDType,      // kffi.dtype, torch.dtype, numpy.dtype, ...
  kDevice,     // kffi.Device, torch.device
  kVoidPtr,    // ctypes.c_void_p
  kStream,     // torch.cuda.Stream, CuPy streams, objects with __cuda_stream__
  kJaxTracer,  // a JAX tracer: cannot be passed to an eager call
  kCallable,
  kRecord,  // a dataclass or NamedTuple declared to a kffi object type (__kffi_type__)
};

/// TypeInfo::flags.
enum TypeFlag : uint8_t {
  /// Arrays of this type must not be written (JAX arrays are immutable).
  kTypeReadOnly = 1,
  /// Tensors of a framework with lazy views (torch: subclasses of torch._C.TensorBase, whatever
  /// their module), whose conjugate and negative views are refused. Its adapter
  /// (runtime/_frameworks.py) says so and gives the methods (_set_lazy_views).
  kTypeLazyViews = 2,
  /// kTypeLazyViews types whose exchange API is the override's (_override_exchange_api with a
  /// lazy-view reader): that import refuses lazy views itself, so the conversion reads the bits
  /// again only to name the argument when an import fails.
  kTypeImportRefusesLazyViews = 4,
};

/// Everything the converter knows about one Python type.
struct TypeInfo {
  Kind kind = Kind::kOpaque;
  uint8_t flags = 0;
  /// kExchangeTensor: the type's DLPack C exchange API.
  const DLPackExchangeAPI* api = nullptr;
  /// Tensor types: converts a kffi.Tensor result into this framework's array (numpy.from_dlpack,
  /// jax.dlpack.from_dlpack, cupy.from_dlpack), or NULL. Strong reference.
  PyObject* from_dlpack = nullptr;
  /// Tensor types on a device: stream_hook(device_id) -> the framework's current stream (int),
  /// or NULL (CuPy's stream is picked up through it). Strong reference.
  PyObject* stream_hook = nullptr;
  /// Tensor types: explain(obj) -> (exception type, text) or None, called when the framework's
  /// export of obj failed (with its error pending): what kffi says instead, the framework's error
  /// as the cause. NULL: the framework's error stands. Strong reference.
  PyObject* explain_export = nullptr;
};

/// The table of TypeInfo by Python type. Lookups take no lock (entries are never removed until
/// module teardown, and each is published with a release store), so they are safe on a
/// free-threaded CPython; inserts take a mutex and run no Python code under it. The slot found
/// last answers the next lookup with two loads (the arguments of one call are often of one type).
class TypeTable {
 public:
  struct Slot {
    std::atomic<PyTypeObject*> type;
    const TypeInfo* info;
  };
  TypeTable();
  ~TypeTable();
  TypeTable(const TypeTable&) = delete;
  TypeTable& operator=(const TypeTable&) = delete;
  /// The entry of tp, or NULL when tp was never classified.
  KFFI_INLINE static const TypeInfo* FindLast(PyTypeObject* tp) {
    const Slot* last = last_.load(std::memory_order_acquire);
    return last->type.load(std::memory_order_relaxed) == tp ? last->info : nullptr;
  }
  KFFI_INLINE const TypeInfo* Find(PyTypeObject* tp) const {
    const Slot* last = last_.load(std::memory_order_acquire);
    if (KFFI_LIKELY(last->type.load(std::memory_order_relaxed) == tp)) return last->info;
    return Probe(tp);
  }
  /// Stores info for tp (keeping a reference to tp and info's objects) unless another thread
  /// stored one first; returns the stored entry.
  const TypeInfo* Insert(PyTypeObject* tp, const TypeInfo& info);
  /// Starts an empty table (new hooks: every type is classified again).
  void Reset();
  /// Drops every entry and its references (module teardown).
  void Clear();
  /// Visits the Python objects held (GC traversal).
  int Traverse(visitproc visit, void* arg) const;

 private:
  struct Table {
    size_t mask;
    size_t used;
    Slot* slots() { return reinterpret_cast<Slot*>(this + 1); }  // in the same block
  };
  static size_t Hash(PyTypeObject* tp) {
    return static_cast<size_t>((reinterpret_cast<uintptr_t>(tp) >> 4) * 0x9E3779B97F4A7C15ull >>
                               32);
  }
  static Table* NewTable(size_t capacity);
  static void FreeTable(Table* t);
  const TypeInfo* Probe(PyTypeObject* tp) const;
  std::atomic<Table*> table_;
  /// The slot of the last hit (never NULL: an empty slot when there is none). Static (there is
  /// one table per process) so that a hit reads no state pointer first.
  static inline Slot none_{};
  static inline std::atomic<const Slot*> last_{&none_};
  std::mutex mutex_;
  /// Tables replaced by a larger one: readers may still be in them, so they live until Clear.
  std::vector<Table*> retired_;
  std::vector<TypeInfo*> infos_;
  /// The references entries hold (types, hooks' callables), released by Clear.
  std::vector<PyObject*> held_;
};

/// The entry for tp, classifying it on first sight. Never NULL: an error while classifying
/// yields the kOpaque entry (the type is then carried by reference).
const TypeInfo* TypeInfoOf(PyTypeObject* tp);

/// The converter hooks installed by kffi/_types.py (see _set_converter_hooks), by slot.
enum Hook : int {
  kHookClassify,       // classify(type) -> (kind, flags, from_dlpack, stream_hook, explain_export)
  kHookToDType,        // to_dtype(obj) -> (code, bits, lanes)
  kHookToDevice,       // to_device(obj) -> (device_type, device_id)
  kHookMakeDType,      // make_dtype(code, bits, lanes) -> kffi.dtype
  kHookMakeDevice,     // make_device(device_type, device_id) -> kffi.Device
  kHookMakeVoidp,      // make_voidp(address) -> ctypes.c_void_p
  kHookToStream,       // to_stream(obj) -> int handle
  kHookMakeError,      // make_exception(kind, message, backtrace, original) -> exception
  kHookDescribeError,  // describe_exception(exc) -> (kind, message, backtrace)
  kNumHooks,
};

/// A reader of a tensor's lazy-view bits (kLazyConj | kLazyNeg) that runs no Python code
/// (kffi.torch's reads torch's TensorImpl), or -1 for an object that is not its framework's
/// tensor.
using LazyViewBitsFn = int (*)(PyObject* obj);
constexpr int kLazyConj = 1;
constexpr int kLazyNeg = 2;

/// What asks a tensor of the framework with lazy views (runtime/_frameworks.py: torch) for its
/// bits: its tensor base class, that class's is_conj / is_neg methods and dtype attribute (a
/// descriptor), the name "is_complex", and the framework's name for messages (strong
/// references). is_conj is asked only of a complex dtype (the bit is set on no other).
struct LazyViewMethods {
  PyObject* framework;
  PyObject* tensor_base;
  PyObject* is_conj;
  PyObject* is_neg;
  PyObject* dtype;
  PyObject* is_complex;
};

/// Everything the module keeps (the module's state, made in its exec slot). The extension can be
/// initialised once per process (libkffi's registries are process-wide), so hot paths reach the
/// state through g_state rather than through the module object.
struct State {
  PyTypeObject* object_type = nullptr;
  PyTypeObject* function_type = nullptr;
  PyObject* hooks[kNumHooks] = {};
  /// Hooks that were replaced: another thread may still be calling them.
  std::vector<PyObject*> retired;
  std::atomic<int> default_release_gil{1};
  TypeTable types;
  /// type index -> Python class for kffi objects (strong references; see RegisterObjectClass).
  static constexpr int32_t kStaticClasses = kKFFIDynObjectBegin;
  std::atomic<PyObject*> static_classes[kStaticClasses] = {};
  std::mutex dyn_classes_mutex;
  std::vector<std::pair<int32_t, PyObject*>> dyn_classes;
  /// _override_exchange_api: types publishing exchange_from convert through exchange_to (whose
  /// capsule is kept in retired: the table's entries point into it for the module's life).
  std::atomic<const DLPackExchangeAPI*> exchange_from{nullptr};
  std::atomic<const DLPackExchangeAPI*> exchange_to{nullptr};
  /// Set by _set_lazy_views when the adapter first classifies its tensor type (the first set
  /// stays); freed with the module.
  std::atomic<LazyViewMethods*> lazy_views{nullptr};
  /// The override's lazy-view reader (_override_exchange_api), or NULL: the methods are asked.
  std::atomic<LazyViewBitsFn> lazy_bits{nullptr};
  /// Sets a hook (new reference stolen), retiring the previous one.
  void SetHook(Hook h, PyObject* value);
};

extern State* g_state;

/// The methods given by _set_lazy_views, or NULL before any.
inline const LazyViewMethods* LazyViewMethodsOf() {
  return g_state->lazy_views.load(std::memory_order_acquire);
}
/// Releases a LazyViewMethods (module teardown; NULL is ignored).
void FreeLazyViewMethods(LazyViewMethods* methods);

/// Reads a one-digit int (|v| < 2**30) straight from the object, as CPython's own fast paths
/// do; false for anything else (then PyLong_AsLongLongAndOverflow decides).
inline bool ReadCompactInt(PyObject* obj, int64_t* v) {
#if PY_VERSION_HEX >= 0x030C0000
  auto* l = reinterpret_cast<PyLongObject*>(obj);
  if (!PyUnstable_Long_IsCompact(l)) return false;
  *v = static_cast<int64_t>(PyUnstable_Long_CompactValue(l));
  return true;
#elif PY_VERSION_HEX >= 0x030B0000
  Py_ssize_t size = Py_SIZE(obj);
  if (size < -1 || size > 1) return false;
  *v = static_cast<int64_t>(size) *
       static_cast<int64_t>(reinterpret_cast<PyLongObject*>(obj)->ob_digit[0]);
  return true;
#else
  (void)obj;
  (void)v;
  return false;
#endif
}

/// Stores the UTF-8 text s[0:n] of a str argument (held by the caller) without a copy of its
/// own: up to 7 bytes inline, else borrowed (the str caches the buffer). False for longer text
/// with a NUL byte, which needs an owned copy (a C string would end at the NUL). kQuick: false
/// for any longer text too, since the NUL scan is a call (memchr).
template <bool kQuick = false>
KFFI_INLINE bool StoreStrInPlace(const char* s, Py_ssize_t n, KFFIAny* out) {
  if (n <= 7) {
    details::SetSmallBytes(out, kKFFISmallStr, s, static_cast<size_t>(n));
    return true;
  }
  if constexpr (kQuick) return false;
  if (std::memchr(s, 0, static_cast<size_t>(n)) != nullptr) return false;
  details::SetPOD(out, kKFFIRawStr);
  out->v_c_str = s;
  return true;
}

/// Packs an argument that needs nothing of a call's context: an int that fits int64, a float, an
/// ASCII str (StoreStrInPlace). False for anything else. Every call packs these so: the argument
/// loop (ConvertArgFast) tries it first, and a call whose arguments all pack so runs without a
/// CallContext (CallFunctionPlain). kQuick: only what needs no call (an int of one digit, a str of
/// up to 7 bytes), so the caller's hot path calls nothing before the function itself and keeps no
/// registers across calls for these rare cases; false for the rest, which the caller then packs
/// with kQuick false.
template <bool kQuick = false>
KFFI_INLINE bool PackPlainArg(PyObject* obj, KFFIAny* out) {
  PyTypeObject* tp = Py_TYPE(obj);
  if (tp == &PyLong_Type) {
    int64_t v;
    if (KFFI_UNLIKELY(!ReadCompactInt(obj, &v))) {
      if constexpr (kQuick) return false;
      // Several digits (or Python 3.10, which has no compact read): asked of CPython. Past int64,
      // the call takes the full path, which raises the OverflowError naming the argument.
      int overflow = 0;
      const long long w = PyLong_AsLongLongAndOverflow(obj, &overflow);  // NOLINT
      if (overflow != 0) return false;
      if (w == -1 && PyErr_Occurred()) return (PyErr_Clear(), false);
      v = w;
    }
    details::SetPOD(out, kKFFIInt);
    out->v_int64 = v;
    return true;
  }
  if (tp == &PyFloat_Type) {
    details::SetPOD(out, kKFFIFloat);
    out->v_float64 = PyFloat_AS_DOUBLE(obj);
    return true;
  }
  if (tp == &PyUnicode_Type && PyUnicode_IS_COMPACT_ASCII(obj)) {
    // ASCII is its own UTF-8: the same buffer PyUnicode_AsUTF8AndSize returns for it. A compact
    // ASCII str keeps it right after its header (what PyUnicode_DATA computes after testing
    // again whether the str is ASCII).
    const auto* ascii = reinterpret_cast<const PyASCIIObject*>(obj);
    return StoreStrInPlace<kQuick>(reinterpret_cast<const char*>(ascii + 1), ascii->length, out);
  }
  return false;
}

inline PyObject* GetHook(Hook h) { return g_state != nullptr ? g_state->hooks[h] : nullptr; }

/// Scratch state of one call: storage for borrowed tensors and temporaries made while
/// converting arguments, and what the call learned about devices and frameworks.
class CallContext {
 public:
  static constexpr int kInlineTensors = 8;
  CallContext() = default;
  CallContext(const CallContext&) = delete;
  CallContext& operator=(const CallContext&) = delete;
  // Most calls need nothing released: one test, no loops over empty containers.
  ~CallContext() {
    if (num_inline_keep_ != 0) ReleaseInlineKeep();
    if (extra_ != nullptr) ReleaseExtra();
  }

  /// A DLTensor slot that lives until the call ends.
  DLTensor* NewTensorSlot() {
    if (num_inline_tensors_ < kInlineTensors) return &inline_tensors_[num_inline_tensors_++];
    return NewExtraTensorSlot();
  }
  /// An int64 buffer of n entries that lives until the call ends.
  int64_t* NewInt64Buffer(size_t n) {
    if (n <= kInlineInts - num_inline_ints_) {
      int64_t* out = inline_ints_ + num_inline_ints_;
      num_inline_ints_ += n;
      return out;
    }
    return NewExtraInt64Buffer(n);
  }
  /// Keeps an owned value alive until the call ends (then releases it): the first few inline
  /// (a record or container argument costs no heap allocation here), the rest in Extra.
  void KeepAlive(const KFFIAny& owned) {
    if (owned.type_index < kKFFIStaticObjectBegin) return;  // owns nothing
    if (KFFI_LIKELY(num_inline_keep_ < kInlineKeep)) {
      inline_keep_[num_inline_keep_++] = owned.v_obj;
      return;
    }
    KeepAliveExtra(owned);
  }
  /// KeepAlive for a record box that may go back to *slot when the call ends (a plan's spare,
  /// under the GIL): it does when nothing else holds it then, strongly or weakly, and the slot is
  /// empty; otherwise it is released. One box per call is returned (the first): most calls have
  /// one record argument.
  void KeepRecordBox(const KFFIAny& owned, KFFIObject** slot) {
    KeepAlive(owned);
    if (record_slot_ == nullptr && num_inline_keep_ != 0 &&
        inline_keep_[num_inline_keep_ - 1] == owned.v_obj) {
      record_slot_ = slot;
      record_at_ = num_inline_keep_ - 1;
    }
  }
  /// Records a non-CPU device seen in a tensor argument (the first one wins).
  void NoteDevice(DLDevice dev, const DLPackExchangeAPI* api) {
    if (has_device || dev.device_type == kDLCPU) return;
    has_device = true;
    device = dev;
    device_api = api;
  }
  /// Records that a framework with an exchange API (torch) passed tensors.
  void NoteExchangeAPI(const DLPackExchangeAPI* a) {
    if (api == nullptr) api = a;
  }
  /// Records the Python object a borrowed tensor argument views (borrowed reference: the
  /// caller holds the arguments through the call).
  void NoteTensorSource(const DLTensor* t, PyObject* obj) {
    if (num_inline_sources_ < kInlineTensors) {
      inline_sources_[num_inline_sources_++] = TensorSource{t, obj};
      return;
    }
    NoteExtraTensorSource(t, obj);
  }
  /// The argument whose tensor is exactly t (same data, shape, strides, dtype, device), or NULL.
  PyObject* FindTensorSource(const DLTensor* t) const;
  /// All tensor arguments as a tuple (to keep them alive beside views of their memory).
  PyObject* TensorSourcesTuple() const;
  /// True when t's memory starts inside the memory of a tensor argument (a view of it).
  bool SharesArgumentData(const DLTensor* t) const;
  bool has_tensor_sources() const { return num_inline_sources_ != 0; }
  /// The conversion-table entry of the first tensor argument's type (its framework gets tensor
  /// results back), or NULL.
  const TypeInfo* FirstTensorType() const;

  /// A conversion is about to run Python code (__index__, __dlpack__, hooks, ...): borrowed
  /// tensor views taken before it may have been invalidated by that code, so they are taken
  /// again once every argument is converted (any tensor argument so far counts: cheaper to
  /// test than a count of borrowed ones, and taking an owned one again is harmless).
  void NotePythonRuns() {
    if (num_inline_sources_ != 0) stale_views = true;
  }

  // Only what every call reads is initialised; the rest is valid under a flag (has_device,
  // has_hook_stream), so a call without tensors pays for few stores.
  bool has_device = false;
  /// Some borrowed tensor view must be taken again (see NotePythonRuns).
  bool stale_views = false;
  /// hook_stream holds a stream read from a framework's Python hook (CuPy) while converting.
  bool has_hook_stream = false;
  /// The exchange API of the framework of the first tensor argument that has one.
  const DLPackExchangeAPI* api = nullptr;
  /// The function called (its parameter names label argument errors), or NULL.
  const PyFunction* function = nullptr;
  /// ConvertArgs' arguments (NULL elsewhere). Valid with them: their count, and the end of
  /// those whose lazy-view check asked the framework's methods (done for all at once: see
  /// CheckLazyViewArgsSlow in py_tensor.cc).
  PyObject* const* args = nullptr;
  Py_ssize_t nargs;
  Py_ssize_t lazy_checked_end;
  /// Valid when has_device: the device of the first non-CPU tensor, and its exchange API (for
  /// its current stream; NULL for a framework without one).
  DLDevice device;
  const DLPackExchangeAPI* device_api;
  void* hook_stream;

 private:
  struct TensorSource {
    const DLTensor* tensor;
    PyObject* obj;
  };
  /// What does not fit inline (and everything to release): made on first use.
  struct Extra;
  static constexpr size_t kInlineInts = 64;
  static constexpr int kInlineKeep = 4;
  Extra* GetExtra();
  void ReleaseExtra();
  void ReleaseInlineKeep();
  void KeepAliveExtra(const KFFIAny& owned);
  DLTensor* NewExtraTensorSlot();
  int64_t* NewExtraInt64Buffer(size_t n);
  void NoteExtraTensorSource(const DLTensor* t, PyObject* obj);
  const TensorSource& tensor_source(size_t i) const;
  size_t num_tensor_sources() const;

  // The inline arrays are left uninitialised: only the first num_* entries are ever read.
  DLTensor inline_tensors_[kInlineTensors];
  int num_inline_tensors_ = 0;
  int num_inline_sources_ = 0;
  TensorSource inline_sources_[kInlineTensors];
  // Strides of NumPy arguments (in elements) for most calls without a heap allocation.
  int64_t inline_ints_[kInlineInts];
  size_t num_inline_ints_ = 0;
  Extra* extra_ = nullptr;
  // The first objects KeepAlive keeps (values below kKFFIStaticObjectBegin own nothing).
  int num_inline_keep_ = 0;
  KFFIObject* inline_keep_[kInlineKeep];
  // The record box at inline_keep_[record_at_] goes back to *record_slot_ if it can.
  KFFIObject** record_slot_ = nullptr;
  int record_at_;
};

/// Where an error about argument #index points, in kffi's one argument-error format
/// ("<subject>: <text> (argument #k of `<signature>`)", written by the runtime:
/// KFFIErrorSetRaisedArgument): the subject is the parameter's name (argN when the function names
/// none, "argument #k" when no function is known, empty for a value without a position), the
/// context " (argument #k of `<signature>`)" when the function is known.
struct ArgPlace {
  std::string subject;
  std::string context;
  /// "<subject>: <text><context>", or text alone for a value without a position.
  std::string Say(const std::string& text) const;
};
ArgPlace ArgPlaceOf(const CallContext* ctx, Py_ssize_t index);
/// The runtime's argument-error text (KFFIErrorSetRaisedArgument's message) without raising it.
std::string ArgumentText(const char* subject, const char* expected, const char* got,
                         Py_ssize_t index, const std::string& signature);

/// Replaces the current Python exception by one of type new_type whose message is prefix + the
/// original's message, with the original as __cause__. The original is kept unchanged when it is
/// a MemoryError, RecursionError or KeyboardInterrupt, or when making the new one fails (str()
/// of the original may raise: then its type name stands in for its message). keep_type: raise
/// the original's own type when it is a builtin exception class. append_text false: prefix is a
/// whole message, and the original's text is left to __cause__.
void ChainError(PyObject* new_type, const std::string& prefix, bool keep_type,
                bool append_text = true, const std::string& suffix = std::string());

// ---- conversion (py_convert.cc) -------------------------------------------------------------
/// Containers nest at most this deep when converted (either way); deeper is a RecursionError.
constexpr int kMaxContainerDepth = 512;
/// Converts argument #index into a borrowed KFFIAny; 0 on success, -1 with a Python error set.
/// index < 0 marks a value with no argument position (a container element, a callback result).
int ConvertArg(PyObject* obj, KFFIAny* out, CallContext* ctx, Py_ssize_t index);
/// ConvertArg for arguments that are not small ints, floats or ASCII str (py_tensor.cc: the
/// tensor paths inline there).
int ConvertArgByTable(PyObject* obj, KFFIAny* out, CallContext* ctx, Py_ssize_t index);
/// Every kind of argument but the tensor fast paths (py_convert.cc).
int ConvertArgGeneral(PyObject* obj, KFFIAny* out, CallContext* ctx, Py_ssize_t index,
                      const TypeInfo* info);
/// Converts args[0:nargs] into packed (borrowed values); 0 or -1 with a Python error set.
int ConvertArgs(PyObject* const* args, Py_ssize_t nargs, KFFIAny* packed, CallContext* ctx);
/// Converts an owned value into a new Python object (steals the value); NULL on error. Results
/// of calls (ctx != NULL) turn Arrays into tuples and tensors into the caller's array type.
PyObject* AnyToPy(KFFIAny* owned, const CallContext* ctx);
/// Converts a borrowed value (a callback argument) into a new Python object.
PyObject* AnyViewToPy(const KFFIAny* view);
/// Converts a Python object into an owned KFFIAny (for results of callbacks, containers).
int PyToOwnedAny(PyObject* obj, KFFIAny* out);
/// Enters one level of a nested container or record being converted on this thread; -1 with
/// RecursionError set past kMaxContainerDepth (or Python's recursion limit). LeaveContainer
/// after each 0.
int EnterContainer();
void LeaveContainer();
/// Relabels the RecursionError being raised (a nesting limit) with the place it was met,
/// `subject: <message><context>`, the original as its cause. Returns -1.
int LabelRecursionError(const std::string& subject, const std::string& context);
/// Names the place of the error being raised by a conversion that ran Python code: the one
/// argument-error format, `subject: <message><context>`. The original's type stays for builtin
/// exceptions (others become TypeError, the original as __cause__); a UnicodeError gets the
/// place in its reason (its message is built from its fields); a RecursionError is relabelled
/// (LabelRecursionError). Returns -1.
int LabelConversionError(const std::string& subject, const std::string& context);
/// _core._set_converter_hooks(classify, to_dtype, to_device, make_dtype, make_device,
/// make_voidp, to_stream)
PyObject* SetConverterHooks(PyObject* self, PyObject* args);
/// _core._override_exchange_api(original, replacement, lazy_view_bits=None): two
/// "dlpack_exchange_api" capsules and a "kffi.lazy_view_bits" one.
PyObject* OverrideExchangeAPI(PyObject* self, PyObject* args);
/// _core._set_lazy_views(framework, tensor_base, is_conj, is_neg, dtype): see LazyViewMethods.
PyObject* SetLazyViews(PyObject* self, PyObject* args);

// ---- objects (py_object.cc) -----------------------------------------------------------------
/// Wraps an owned object handle in the Python class registered for its type (steals).
PyObject* WrapObject(KFFIObjectHandle owned);
/// The handle of a kffi.Object instance (borrowed), or NULL if obj is not one.
KFFIObjectHandle GetHandle(PyObject* obj);
/// True, with a ValueError set, when obj is a kffi.Object whose native object was released
/// (obj._release()); helpers check it before reporting obj as being of the wrong type.
bool RaiseIfReleased(PyObject* obj);
/// Creates the kffi.Object and kffi.Function types; 0 or -1.
int InitObjectTypes(PyObject* module, State* state);
/// Makes a kffi.Function around a Python callable (a new Python object).
PyObject* FunctionFromCallable(PyObject* callable);
/// Makes an owned Function handle that calls a Python callable.
int CallableToFunctionHandle(PyObject* callable, KFFIObjectHandle* out);
/// Stores an attribute kffi itself keeps on one of its objects (kffi.Object refuses attributes
/// it does not have: see py_object.cc); 0 or -1 with a Python error.
int SetInternalAttr(PyObject* obj, const char* name, PyObject* value);

// ---- reflected objects (py_reflection.cc) ---------------------------------------------------
/// The class kffi/_reflection.py made and registered for a reflected type (index or an ancestor
/// has fields) that has none: *out borrowed, or NULL when the type is not reflected. 0, or -1
/// with a Python error set.
int ReflectedClass(int32_t index, PyObject** out);
/// Adds the reflection functions (_install_fields, _reflection, ...) to the module; 0 or -1.
int InitReflection(PyObject* module);
/// NULL, with the TypeError for reading field `qualname` from self, whose object h (NULL once
/// released: then the released-object error) is not of the field's type.
KFFIObject* RaiseNotFieldOwner(PyObject* self, const KFFIObject* h, const std::string& qualname);

// ---- records (py_records.cc) ------------------------------------------------------------------
/// Converts argument #index, a record (Kind::kRecord), into a new object of its kffi type: the
/// type's creator, then each of the record's fields through the C++ field's setter; ctx keeps
/// the object for the call. 0, or -1 with a Python error naming `param.field`.
int ConvertRecordArg(PyObject* obj, KFFIAny* out, CallContext* ctx, Py_ssize_t index);
/// Converts argument #index of a parameter of reflected type type_index (PyFunction::
/// record_params) when it is a dataclass or NamedTuple whose fields match the type's by name
/// (every writable field given, no other): 0, -1 with a Python error naming `param.field`, or 1
/// when obj is no such record (it converts as any argument does).
int ConvertRecordParamArg(PyObject* obj, int32_t type_index, KFFIAny* out, CallContext* ctx,
                          Py_ssize_t index);
/// Adds _set_record_params (a typed function's record parameters) to the module; 0 or -1.
int InitRecords(PyObject* module);

// ---- core_module.cc, py_shape_rpn.cc, py_containers.cc -----------------------------------------
/// The handle of obj when it wraps a kffi object of type_index, else NULL with a TypeError
/// ("expected a <what>, got <type>") or the released-object error set.
KFFIObjectHandle HandleOfType(PyObject* obj, int32_t type_index, const char* what);
/// Adds _eval_shape_rpn (py_shape_rpn.cc) to the module; 0 or -1.
int InitShapeRpn(PyObject* module);
/// Adds the container readers _seq_* and _map_* (py_containers.cc) to the module; 0 or -1.
int InitContainers(PyObject* module);

// ---- TVM-FFI libraries (tvm/py_tvm_bridge.cc) ---------------------------------------------------
/// Adds the bridge's functions (_tvm_bridge_open, _tvm_install, ...: kffi/tvm/_bridge.py calls
/// them) to the module; 0 or -1.
int InitTvmBridge(PyObject* module);
/// The class kffi/tvm/_bridge.py made for the type of obj, an object of a loaded
/// apache-tvm-ffi's registry (fields as descriptors, methods): *out borrowed, or NULL when kffi
/// makes none for it (no bridge, no fields or methods, records it cannot use). 0, or -1 with a
/// Python error set.
int ForeignClass(const KFFIObject* obj, PyObject** out);
/// Whether obj's type is not kffi's registry's to describe (a type of the loaded apache-tvm-ffi,
/// or a static TVM-FFI type kffi lacks): then *key is its type key and *static_ancestor the index
/// of its nearest ancestor below kKFFIDynObjectBegin. Asks the bridge only about indices kffi
/// cannot vouch for (dynamic ones, and static ones kffi lacks).
bool ForeignType(const KFFIObject* obj, KFFIByteArray* key, int32_t* static_ancestor);
/// A field of self's native object when its type is a loaded apache-tvm-ffi's (refl::ObjectDef):
/// value NULL reads it into *out (new reference), else assigns value. 1 when done, 0 when self
/// has no such foreign field (no error set), -1 with a Python error.
int ForeignField(PyObject* self, PyObject* name, PyObject* value, PyObject** out);
/// "type.key(x=1, y=2.0)" for an object of apache-tvm-ffi's registry with fields; NULL without
/// an error set for any other object.
PyObject* ForeignRepr(PyObject* self);
/// The type key of obj from the registry its type belongs to, else "<unknown type index N>":
/// never a crash, whichever runtime made the object.
std::string TypeKeyOf(const KFFIObject* obj);
/// PyFunction::owned_tensor_args of a Function object (borrowed): a TVM-FFI function's
/// parameters that take owning Tensors, 0 for any other.
uint64_t OwnedTensorArgsOf(KFFIObjectHandle func);

/// The owning Tensors OwnTensorArguments made for one call, released when the call is over: the
/// first 64 arguments' by position (no allocation), any later ones by the call context.
class OwnedArguments {
 public:
  OwnedArguments() = default;
  OwnedArguments(const OwnedArguments&) = delete;
  OwnedArguments& operator=(const OwnedArguments&) = delete;
  ~OwnedArguments() {
    if (KFFI_UNLIKELY(made_ != 0)) Release();
  }
  void Bind(KFFIAny* packed) { packed_ = packed; }
  /// Records the Tensor made for argument i (owned); false: the context must keep it.
  bool Note(Py_ssize_t i) {
    if (i >= 64) return false;
    made_ |= uint64_t{1} << i;
    return true;
  }
  /// Drops the Tensors (a callee that kept one holds its own reference).
  void Release();

 private:
  KFFIAny* packed_ = nullptr;
  uint64_t made_ = 0;
};

/// Replaces each borrowed tensor argument (a view of args[i]) at a parameter mask marks (bit i,
/// bit 63 for the rest) by an owning Tensor that holds args[i], zero-copy; owned (or ctx)
/// releases it after the call. No Python code may run between the arguments' conversion and
/// this (the views must be current). 0, or -1 with a Python error set.
int OwnTensorArguments(uint64_t mask, PyObject* const* args, Py_ssize_t nargs, KFFIAny* packed,
                       CallContext* ctx, OwnedArguments* owned);

// ---- errors (py_error.cc) -------------------------------------------------------------------

/// Raises the thread's kffi error as a Python exception; returns NULL.
PyObject* RaiseFromKFFIError(int code);
/// RaiseFromKFFIError for a failed call of f: an error the callee raised without text (an empty
/// or NULL kind and message, as KFFIErrorSetRaisedFromCStr(NULL, NULL) leaves) is raised as a
/// RuntimeError that names f and says the library gave no text; an argument error about one of
/// the call's values (packed[i], made from args[i]) names its type as the caller passed it.
PyObject* RaiseFromCallError(const PyFunction* f, int code, const KFFIAny* packed = nullptr,
                             PyObject* const* args = nullptr, Py_ssize_t nargs = 0);
/// Moves the current Python exception into the thread's kffi error slot.
void SetKFFIErrorFromPython();
/// Raises the C++ exception being handled (call inside catch (...)) as a Python exception, with
/// the kind the one C++-exception table of kffi/error.h gives it (kffi::Error keeps its kind,
/// std::bad_alloc is MemoryError, ...); returns NULL.
PyObject* RaiseFromCppException();

// ---- tensors (py_tensor.cc) -----------------------------------------------------------------
/// Converts a tensor argument (info->kind is one of the tensor kinds, or kJaxTracer). Returns
/// 0, or -1 with a Python error set that names the argument.
int ConvertTensorArg(PyObject* obj, const TypeInfo* info, KFFIAny* out, CallContext* ctx,
                     Py_ssize_t index);
/// The exchange-API path of ConvertTensorArg (torch), inline in the argument loop.
int ConvertExchangeTensor(PyObject* obj, const TypeInfo* info, KFFIAny* out, CallContext* ctx,
                          Py_ssize_t index);
/// The NumPy path of ConvertTensorArg (a writable array of a common dtype read from its fields).
int ConvertNumpyTensor(PyObject* obj, const TypeInfo* info, KFFIAny* out, CallContext* ctx,
                       Py_ssize_t index);
/// Takes again the borrowed view (kKFFIDLTensorPtr) that out holds of argument #index, in the
/// same DLTensor slot, running no Python code (see RetakeStaleViews). 0, or -1 with an error
/// set when the argument cannot be read so any more (its type or device changed, ...).
int RetakeTensorView(PyObject* obj, KFFIAny* out, CallContext* ctx, Py_ssize_t index);
/// Imports a tensor-like Python object as an owned Tensor handle (through DLPack); -1 on error.
int TensorToOwnedHandle(PyObject* obj, KFFIObjectHandle* out);
/// Wraps an owned Tensor handle: the caller's array type (torch, NumPy, JAX, CuPy) when ctx saw
/// such tensor arguments, else kffi.Tensor.
PyObject* WrapTensor(KFFIObjectHandle owned, const CallContext* ctx);
/// The tensor_flags an owned Tensor argument carries (read-only when its producer said so).
uint32_t OwnedTensorFlags(KFFIObjectHandle h);
int InitTensorSupport(PyObject* module);
/// True when a tensor's sizes are representable (every dimension >= 0; element count, size in
/// bits and the farthest byte its strides reach fit in int64): every size check uses it.
bool TensorSizesFit(const DLTensor* t);
/// An owned tensor viewing a NumPy array of ml_dtypes' dtype (which NumPy's __dlpack__ refuses)
/// that keeps the array alive: 0, 1 when the array is not one kffi reads so, -1 with an error.
int NumpyViewToOwned(PyObject* obj, KFFIObjectHandle* out);
/// The exact check behind TensorSizesFit: every product and sum overflow-checked.
bool LayoutFitsExact(const DLTensor* t);
/// "(2, 3)" for a tensor's shape, "float32" for a dtype.
std::string ShapeText(const DLTensor* t);
std::string DTypeText(DLDataType d);
/// The ValueError for a tensor whose sizes do not fit (place: the argument, or none); -1.
int RaiseLayoutTooLarge(const DLTensor* t, const ArgPlace& place);
/// Checks an owned tensor just imported; on failure drops it (*h = NULL) and raises. 0 or -1.
int CheckOwnedLayout(KFFIObjectHandle* h, const ArgPlace& place);
/// PyCapsule destructors of "dltensor" / "dltensor_versioned" capsules not consumed.
void DLPackCapsuleDeleter(PyObject* cap);
void DLPackVersionedCapsuleDeleter(PyObject* cap);

// ---- environment (py_env.cc) ----------------------------------------------------------------
/// Sets the environment (stream, allocator) for a call and restores it on scope exit.
class CallEnvScope {
 public:
  // Calls without a device tensor change nothing: inline test. (CPU tensors a callee allocates
  // come from kffi's aligned host allocator and still return as the caller's tensor type.)
  explicit CallEnvScope(const CallContext& ctx) {
    if (ctx.has_device) Enter(ctx);
  }
  ~CallEnvScope() {
    if (stream_set_ || alloc_set_) Exit();
  }
  /// 0, or -1 with a Python error set (reading the framework stream failed).
  int status() const { return status_; }

 private:
  void Enter(const CallContext& ctx);
  void Exit();
  int status_ = 0;
  bool stream_set_ = false;
  bool alloc_set_ = false;
  DLDevice device_{kDLCPU, 0};
  KFFIStreamHandle prev_stream_ = nullptr;
  DLPackManagedTensorAllocator prev_alloc_ = nullptr;
};
/// Depth of explicit kffi.use_stream scopes on this thread (they win over stream pickup).
extern thread_local int g_explicit_stream_depth;
int InitEnv(PyObject* module);
/// Adds kffi.cuda's launcher functions (cuda/py_cuda.cc).
int InitCuda(PyObject* module);

}  // namespace pyglue
}  // namespace kffi

#endif  // KFFI_PYTHON_PY_COMMON_H_
