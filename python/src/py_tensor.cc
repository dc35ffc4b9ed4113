// python/src/py_tensor.cc: tensor arguments and results: the DLPack C exchange API (PyTorch),
// NumPy's array fields (py_numpy.h) and the __dlpack__ protocol. Every size read from a
// producer is checked before a kernel sees it.
// SPDX-License-Identifier: Apache-2.0
#include <kffi/tensor.h>

#include <array>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <new>

#include "py_common.h"
#include "py_numpy.h"

namespace kffi {
namespace pyglue {

// ---- size checks (shared with py_tensor_object.cc) -------------------------------------------

/// The exact check behind LayoutFits: every product and sum overflow-checked.
KFFI_NOINLINE bool LayoutFitsExact(const DLTensor* t) {
  if (!details::IsElementDType(t->dtype)) return false;
  if (t->ndim < 0 || (t->ndim > 0 && t->shape == nullptr)) return false;
  int64_t numel = 1;
  int64_t span = 0;  // farthest element from the first, in elements
  for (int32_t i = 0; i < t->ndim; ++i) {
    const int64_t d = t->shape[i];
    if (d < 0 || __builtin_mul_overflow(numel, d, &numel)) return false;
    if (t->strides != nullptr && d > 1) {
      int64_t s = t->strides[i];
      int64_t ext;
      if (s == INT64_MIN) return false;
      if (__builtin_mul_overflow(d - 1, s < 0 ? -s : s, &ext) ||
          __builtin_add_overflow(span, ext, &span)) {
        return false;
      }
    }
  }
  const int64_t elem_bits = static_cast<int64_t>(t->dtype.bits) * t->dtype.lanes;
  int64_t bits, reach;
  if (t->strides == nullptr) span = numel;
  if (__builtin_mul_overflow(numel, elem_bits, &bits) ||
      __builtin_mul_overflow(span + 1, elem_bits, &reach)) {
    return false;
  }
  return t->byte_offset <= static_cast<uint64_t>(INT64_MAX) &&
         !__builtin_add_overflow(reach / 8, static_cast<int64_t>(t->byte_offset), &reach);
}

/// True when a tensor's sizes are representable: every dimension >= 0, and the element count,
/// its size in bits, and the farthest byte its strides reach (plus byte_offset) fit in int64.
/// The common case is decided from magnitudes alone, with no multiply chain: with rank <= 2 and
/// every dimension and |stride| below 2**27 (rank <= 4: 2**13), numel < 2**54 and the reach
/// < 2**55 elements, which stay below 2**63 bits for any single-lane dtype. Otherwise the exact
/// check decides.
KFFI_INLINE bool LayoutFits(const DLTensor* t) {
  const int32_t nd = t->ndim;
  if (KFFI_UNLIKELY(nd <= 0 || nd > 4 || t->shape == nullptr || t->dtype.lanes != 1 ||
                    t->dtype.bits == 0)) {
    return LayoutFitsExact(t);
  }
  uint64_t m = 0;  // every dimension and |stride| (less one for negatives), OR-ed
  for (int32_t i = 0; i < nd; ++i) m |= static_cast<uint64_t>(t->shape[i]);
  if (t->strides != nullptr) {
    for (int32_t i = 0; i < nd; ++i) {
      const int64_t s = t->strides[i];
      m |= static_cast<uint64_t>(s ^ (s >> 63));
    }
  }
  const uint64_t limit = nd <= 2 ? uint64_t{1} << 27 : uint64_t{1} << 13;
  if (KFFI_LIKELY(m < limit && t->byte_offset < (uint64_t{1} << 40))) return true;
  return LayoutFitsExact(t);
}

std::string ShapeText(const DLTensor* t) {
  std::string s = "(";
  for (int32_t i = 0; i < t->ndim && t->shape != nullptr; ++i) {
    if (i == 64) {
      s += ", ...";
      break;
    }
    if (i != 0) s += ", ";
    s += std::to_string(t->shape[i]);
  }
  if (t->ndim == 1) s += ",";
  return s + ")";
}

std::string DTypeText(DLDataType d) {
  KFFIAny out;
  if (KFFIDataTypeToString(&d, &out) != 0) {
    KFFIObjectHandle err = nullptr;
    KFFIErrorMoveFromRaised(&err);
    if (err != nullptr) KFFIObjectDecRef(err);
    return "?";
  }
  std::string s;
  if (out.type_index == kKFFISmallStr) {
    s.assign(out.v_bytes, out.small_str_len);
  } else if (out.type_index == kKFFIStr) {
    auto* cell = static_cast<KFFIByteArray*>(KFFIObjectGetCellPtr(out.v_obj));
    s.assign(cell->data, cell->size);
    KFFIObjectDecRef(out.v_obj);
  }
  return s;
}

/// Raises the ValueError for a tensor whose sizes do not fit; returns -1.
int RaiseLayoutTooLarge(const DLTensor* t, const ArgPlace& place) {
  if (!details::IsElementDType(t->dtype)) {
    const std::string msg = place.Say(
        "a tensor of dtype (code=" + std::to_string(t->dtype.code) +
        ", bits=" + std::to_string(t->dtype.bits) + ", lanes=" + std::to_string(t->dtype.lanes) +
        ") has elements of no size (" + (t->dtype.bits == 0 ? "0 bits per lane" : "0 lanes") +
        "): a tensor's elements need at least 1 bit and 1 lane");
    PyErr_SetString(PyExc_ValueError, msg.c_str());
    return -1;
  }
  const std::string msg =
      place.Say("a tensor of shape " + ShapeText(t) + " and dtype " + DTypeText(t->dtype) +
                " has an impossible size (a negative dimension, or a size in "
                "bytes that overflows int64)");
  PyErr_SetString(PyExc_ValueError, msg.c_str());
  return -1;
}

/// Checks an owned tensor just imported; on failure drops it and raises. 0 or -1.
int CheckOwnedLayout(KFFIObjectHandle* h, const ArgPlace& place) {
  const DLTensor* t = KFFITensorGetDLTensorPtr(*h);
  if (LayoutFits(t)) return 0;
  RaiseLayoutTooLarge(t, place);
  ReleaseObject(*h);  // the producer's deleter runs with the ValueError kept aside
  *h = nullptr;
  return -1;
}

bool TensorSizesFit(const DLTensor* t) { return LayoutFits(t); }

namespace {

// ---- lazy views ------------------------------------------------------------------------------
//
// A lazy conjugate view (torch's x.conj()) or negative view (x.conj().imag, x._neg_view()) of any
// dtype shares its memory with the tensor it views, and the framework resolves the bit when it
// reads that memory. DLPack has no such bits (torch's own export hands the memory over as it
// is), so kffi refuses them. Which framework has them, and the methods that read them, its
// adapter says (runtime/_frameworks.py, _set_lazy_views). kffi.torch's reader (_import.cc,
// installed with the fast import) reads the bits from the TensorImpl in a few loads; without it
// the methods are asked, which can run Python code: the __torch_function__ of a subclass, or of a
// torch function mode.

/// The ValueError for a tensor with lazy-view bits (kLazyConj | kLazyNeg); -1.
int RaiseLazyView(int bits, const ArgPlace& place) {
  const char* what =
      (bits & kLazyConj) != 0
          ? "a lazy conjugate view (its memory holds the unconjugated values); pass "
            "x.resolve_conj()"
          : "a lazy negative view, e.g. x.conj().imag (its memory holds the values with the "
            "opposite sign); pass x.resolve_neg()";
  const LazyViewMethods* lazy = LazyViewMethodsOf();
  const char* framework = lazy != nullptr ? PyUnicode_AsUTF8(lazy->framework) : nullptr;
  if (framework == nullptr) {
    PyErr_Clear();
    framework = "framework's";
  }
  PyErr_SetString(PyExc_ValueError,
                  place.Say(std::string("the ") + framework + " tensor is " + what).c_str());
  return -1;
}

/// Whether method(obj) is true: 1, 0, or -1 with an error set.
int AskMethod(PyObject* method, PyObject* obj) {
  PyRef r(PyObject_Vectorcall(method, &obj, 1, nullptr));
  return r ? PyObject_IsTrue(r.get()) : -1;
}

/// Asks the framework: its base class's is_neg, and is_conj where the bit can be set (a complex
/// dtype), called as functions (a subclass that overrides them is not consulted: with torch, the
/// TensorImpl's bits decide what its memory holds). Each costs a few hundred ns (torch's
/// argument parser, a GIL release). The bits, or -1 with an error set.
KFFI_NOINLINE int AskLazyBits(PyObject* obj) {
  const LazyViewMethods* lazy = LazyViewMethodsOf();
  if (lazy == nullptr) {  // kTypeLazyViews is set only once these are given
    PyErr_SetString(PyExc_RuntimeError, "kffi: no lazy-view methods were given");
    return -1;
  }
  const int neg = AskMethod(lazy->is_neg, obj);
  if (neg < 0) return -1;
  PyRef dtype(Py_TYPE(lazy->dtype)
                  ->tp_descr_get(lazy->dtype, obj, reinterpret_cast<PyObject*>(Py_TYPE(obj))));
  PyRef is_complex(dtype ? PyObject_GetAttr(dtype.get(), lazy->is_complex) : nullptr);
  const int complex = is_complex ? PyObject_IsTrue(is_complex.get()) : -1;
  const int conj = complex > 0 ? AskMethod(lazy->is_conj, obj) : complex;
  if (conj < 0) return -1;
  return (conj != 0 ? kLazyConj : 0) | (neg != 0 ? kLazyNeg : 0);
}

/// The lazy-view bits of a kTypeLazyViews tensor: the override's reader when installed (no
/// Python code), else the framework's methods. The bits, or -1 with an error set.
KFFI_INLINE int LazyBits(PyObject* obj) {
  if (LazyViewBitsFn read = g_state->lazy_bits.load(std::memory_order_acquire)) {
    const int bits = read(obj);
    if (KFFI_LIKELY(bits >= 0)) return bits;
  }
  return AskLazyBits(obj);
}

/// An error raised by the framework's methods, labelled with the argument; -1.
int LazyCheckFailed(const ArgPlace& place) {
  if (!place.subject.empty()) {
    ChainError(PyExc_TypeError, place.subject + ": ", /*keep_type=*/true, true, place.context);
  }
  return -1;
}

/// Refuses a tensor with lazy-view bits (a value alone: a container element, from_dlpack, a
/// tensor through __dlpack__). 0, or -1 with an error set.
int CheckLazyView(PyObject* obj, const ArgPlace& place) {
  const int bits = LazyBits(obj);
  if (bits < 0) return LazyCheckFailed(place);
  return bits != 0 ? RaiseLazyView(bits, place) : 0;
}

/// CheckLazyViewArg when the framework's methods must be asked. The Python code they may run can
/// change any argument (torch's set_, resize_), so they are asked before any view is taken of
/// this argument or of a later kTypeLazyViews argument (all of ConvertArgs' arguments are checked
/// at once), and the views already taken are taken again (NotePythonRuns).
KFFI_NOINLINE int CheckLazyViewArgsSlow(PyObject* obj, CallContext* ctx, Py_ssize_t index) {
  const bool in_args =
      ctx->args != nullptr && index >= 0 && index < ctx->nargs && ctx->args[index] == obj;
  if (in_args && index < ctx->lazy_checked_end) return 0;
  ctx->NotePythonRuns();
  if (!in_args) return CheckLazyView(obj, ArgPlaceOf(ctx, index));
  for (Py_ssize_t j = index; j < ctx->nargs; ++j) {
    PyObject* a = ctx->args[j];
    if (j != index) {
      const TypeInfo* info = TypeInfoOf(Py_TYPE(a));
      if (info->kind != Kind::kExchangeTensor || (info->flags & kTypeLazyViews) == 0) continue;
    }
    if (CheckLazyView(a, ArgPlaceOf(ctx, j)) != 0) return -1;
  }
  ctx->lazy_checked_end = ctx->nargs;
  return 0;
}

/// Refuses a tensor argument with lazy-view bits, before its view is taken. With the override's
/// reader (kffi.torch's): a few loads, no Python code. 0, or -1 with an error set.
KFFI_INLINE int CheckLazyViewArg(PyObject* obj, CallContext* ctx, Py_ssize_t index) {
  if (LazyViewBitsFn read = g_state->lazy_bits.load(std::memory_order_acquire)) {
    const int bits = read(obj);
    if (KFFI_LIKELY(bits == 0)) return 0;
    if (bits > 0) return RaiseLazyView(bits, ArgPlaceOf(ctx, index));
  }
  return CheckLazyViewArgsSlow(obj, ctx, index);
}

// ---- the __dlpack__ protocol -------------------------------------------------------------------

}  // namespace

void DLPackCapsuleDeleter(PyObject* cap) {
  if (PyCapsule_IsValid(cap, "dltensor")) {
    auto* mt = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(cap, "dltensor"));
    // CPython may free an unused capsule while an exception is pending.
    PendingErrorScope keep;
    if (mt != nullptr && mt->deleter != nullptr) mt->deleter(mt);
  }
}

void DLPackVersionedCapsuleDeleter(PyObject* cap) {
  if (PyCapsule_IsValid(cap, "dltensor_versioned")) {
    auto* mt =
        static_cast<DLManagedTensorVersioned*>(PyCapsule_GetPointer(cap, "dltensor_versioned"));
    PendingErrorScope keep;
    if (mt != nullptr && mt->deleter != nullptr) mt->deleter(mt);
  }
}

namespace {

/// A producer's DLPack tensor (from __dlpack__) behind kffi's own deleter. The producer's deleter
/// may be Python code (ctypes, cffi) and runs whenever the last reference goes, often while an
/// exception is pending (a failed call releasing its arguments, a frame unwinding): it then runs
/// with that exception kept aside (RunForeignCleanup). A pre-1.0 tensor also gains a flags word
/// this way, so that read-only travels with it.
struct GuardedDLPack {
  DLManagedTensorVersioned mt;
  DLManagedTensor* legacy = nullptr;
  DLManagedTensorVersioned* versioned = nullptr;

  static void Delete(DLManagedTensorVersioned* self) {
    auto* g = static_cast<GuardedDLPack*>(self->manager_ctx);
    RunForeignCleanup([g] {
      if (g->legacy != nullptr && g->legacy->deleter != nullptr) g->legacy->deleter(g->legacy);
      if (g->versioned != nullptr && g->versioned->deleter != nullptr) {
        g->versioned->deleter(g->versioned);
      }
    });
    delete g;
  }
  /// Imports legacy or versioned (one of them; moved in: its deleter runs exactly once, on
  /// failure too). 0, or -1 with a Python error set.
  static int Import(DLManagedTensor* legacy, DLManagedTensorVersioned* versioned, uint64_t flags,
                    KFFIObjectHandle* out) {
    auto* g = new (std::nothrow) GuardedDLPack();
    if (g == nullptr) {
      if (legacy != nullptr && legacy->deleter != nullptr) legacy->deleter(legacy);
      if (versioned != nullptr && versioned->deleter != nullptr) versioned->deleter(versioned);
      PyErr_NoMemory();
      return -1;
    }
    g->legacy = legacy;
    g->versioned = versioned;
    g->mt.version = DLPackVersion{DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION};
    g->mt.manager_ctx = g;
    g->mt.deleter = Delete;
    g->mt.flags = flags | (versioned != nullptr ? versioned->flags : 0);
    g->mt.dl_tensor = legacy != nullptr ? legacy->dl_tensor : versioned->dl_tensor;
    if (KFFITensorFromDLPackVersioned(&g->mt, 0, 0, out) != 0) return (RaiseFromKFFIError(-1), -1);
    return 0;
  }
};

/// Calls obj.__dlpack__() (asking for a versioned capsule first) and takes the tensor. Types
/// flagged read-only (JAX) get the read-only flag whatever the producer said.
int ImportViaDLPackProtocol(PyObject* obj, const TypeInfo* info, bool read_only, PyObject* stream,
                            KFFIObjectHandle* out) {
  PyRef method(PyObject_GetAttrString(obj, "__dlpack__"));
  if (!method) return -1;
  PyRef kwargs(
      Py_BuildValue("{s:(ii)}", "max_version", DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION));
  if (!kwargs) return -1;
  if (stream != nullptr && PyDict_SetItemString(kwargs.get(), "stream", stream) != 0) return -1;
  PyRef empty(PyTuple_New(0));
  if (!empty) return -1;
  PyRef cap(PyObject_Call(method.get(), empty.get(), kwargs.get()));
  if (!cap && PyErr_ExceptionMatches(PyExc_TypeError)) {
    // A producer from before DLPack 1.0 does not know max_version.
    PyErr_Clear();
    if (PyDict_DelItemString(kwargs.get(), "max_version") != 0) return -1;
    cap = PyRef(PyObject_Call(method.get(), empty.get(), kwargs.get()));
  }
  if (!cap) return -1;
  read_only = read_only || (info->flags & kTypeReadOnly) != 0;
  const uint64_t flags = read_only ? DLPACK_FLAG_BITMASK_READ_ONLY : 0;
  if (PyCapsule_IsValid(cap.get(), "dltensor_versioned")) {
    auto* mt = static_cast<DLManagedTensorVersioned*>(
        PyCapsule_GetPointer(cap.get(), "dltensor_versioned"));
    // Ownership moves to kffi even on failure (the runtime calls the deleter then).
    PyCapsule_SetName(cap.get(), "used_dltensor_versioned");
    if (mt->version.major != DLPACK_MAJOR_VERSION) {
      // A layout this consumer cannot read past version and deleter: the runtime refuses it
      // (and runs its deleter now, with no exception pending).
      if (KFFITensorFromDLPackVersioned(mt, 0, 0, out) != 0) return (RaiseFromKFFIError(-1), -1);
      return 0;
    }
    return GuardedDLPack::Import(nullptr, mt, flags, out);
  }
  if (PyCapsule_IsValid(cap.get(), "dltensor")) {
    auto* mt = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(cap.get(), "dltensor"));
    PyCapsule_SetName(cap.get(), "used_dltensor");
    return GuardedDLPack::Import(mt, nullptr, flags, out);
  }
  PyErr_Format(PyExc_TypeError, "%s.__dlpack__() did not return a DLPack capsule",
               Py_TYPE(obj)->tp_name);
  return -1;
}

/// Asks the framework's adapter what to say of a tensor its export refused (torch: a meta,
/// sparse, nested or quantized tensor), in kffi's words (torch's own carry their C++ frames).
/// True when it answered: its error is set, naming the argument, with the framework's as its
/// cause. False: the framework's error is pending as it was (an error of the adapter itself is
/// dropped: the framework's says more).
bool ExplainExportError(PyObject* obj, PyObject* explain, const ArgPlace& place) {
  PyObject *type, *value, *tb;
  PyErr_Fetch(&type, &value, &tb);
  PyRef answer(PyObject_CallOneArg(explain, obj));
  PyObject* kind = nullptr;
  const char* text = nullptr;
  if (answer && PyTuple_Check(answer.get()) && PyTuple_GET_SIZE(answer.get()) == 2 &&
      PyExceptionClass_Check(PyTuple_GET_ITEM(answer.get(), 0)) &&
      PyUnicode_Check(PyTuple_GET_ITEM(answer.get(), 1))) {
    kind = PyTuple_GET_ITEM(answer.get(), 0);
    text = PyUnicode_AsUTF8(PyTuple_GET_ITEM(answer.get(), 1));
  }
  const std::string why = text != nullptr ? text : "";
  PyErr_Clear();
  PyErr_Restore(type, value, tb);
  if (text == nullptr) return false;
  ChainError(kind, place.Say(why), false, /*append_text=*/false);
  return true;
}

/// Turns the failure to import a tensor argument into an error that names the argument and
/// chains the producer's own exception (never rebuilt from its text, which may not exist).
int TensorImportError(PyObject* obj, const TypeInfo* info, const CallContext* ctx,
                      Py_ssize_t index) {
  const ArgPlace place = ArgPlaceOf(ctx, index);
  if (info->kind == Kind::kJaxTracer) {
    ChainError(PyExc_TypeError,
               place.Say(std::string("a JAX tracer (") + Py_TYPE(obj)->tp_name +
                         ") cannot be passed to a kffi function called eagerly inside jax.jit, "
                         "jax.grad or jax.vmap; call the function through kffi.jax.call(...) "
                         "instead"),
               false, /*append_text=*/false);
    return -1;
  }
  if ((info->flags & kTypeImportRefusesLazyViews) != 0) {
    // The override's import refused a lazy view: say so naming the argument, as CheckLazyViewArg
    // does.
    if (LazyViewBitsFn read = g_state->lazy_bits.load(std::memory_order_acquire)) {
      const int bits = read(obj);
      if (bits > 0) {
        PyErr_Clear();
        return RaiseLazyView(bits, place);
      }
    }
  }
  if (info->explain_export != nullptr && ExplainExportError(obj, info->explain_export, place)) {
    return -1;
  }
  if (!PyErr_Occurred()) {
    PyErr_Format(PyExc_TypeError, "the DLPack exchange API of %s failed without an error",
                 Py_TYPE(obj)->tp_name);
  }
  if (index >= 0) {
    ChainError(PyExc_TypeError,
               place.subject + ": cannot import the " + Py_TYPE(obj)->tp_name + " as a tensor: ",
               true, true, place.context);
  }
  return -1;
}

// Tensor arguments: the header through kffi/base.h's SetPOD/SetObject, then the argument flags
// (the one field a stored value keeps zero).
void SetTensorView(KFFIAny* out, DLTensor* t, uint32_t flags) {
  details::SetPOD(out, kKFFIDLTensorPtr);
  out->tensor_flags = flags;
  out->v_ptr = t;
}

void SetOwnedTensor(KFFIAny* out, KFFIObjectHandle h) {
  details::SetObject(out, static_cast<KFFIObject*>(h));
  out->tensor_flags = OwnedTensorFlags(h);
}

/// Reads a framework's current stream through its Python hook (CuPy); the stream object passed
/// to __dlpack__ (NULL for none), or -1 with an error set.
int ReadHookStream(const TypeInfo* info, CallContext* ctx, PyRef* dlpack_stream) {
  PyRef r(PyObject_CallNoArgs(info->stream_hook));
  if (!r) return -1;
  if (r.get() == Py_None) return 0;
  void* s = PyLong_AsVoidPtr(r.get());
  if (s == nullptr && PyErr_Occurred()) return -1;
  if (!ctx->has_hook_stream) {
    ctx->has_hook_stream = true;
    ctx->hook_stream = s;
  }
  // DLPack: the consumer names the stream it uses; 1 is CUDA's legacy default stream.
  *dlpack_stream = PyRef(s == nullptr ? PyLong_FromLong(1) : PyLong_FromVoidPtr(s));
  return *dlpack_stream ? 0 : -1;
}

}  // namespace

uint32_t OwnedTensorFlags(KFFIObjectHandle h) {
  const auto* obj = static_cast<const TensorObj*>(static_cast<Object*>(h));
  return (obj->dlpack_flags() & DLPACK_FLAG_BITMASK_READ_ONLY) != 0 ? kKFFITensorFlagReadOnly : 0;
}

KFFI_INLINE int ConvertExchangeTensorInline(PyObject* obj, const TypeInfo* info, KFFIAny* out,
                                            CallContext* ctx, Py_ssize_t index) {
  // Checked before any view is taken unless kffi.torch's import refuses lazy views itself (with
  // no Python code run): a second read of the bits would cost ~35 instructions per tensor.
  if ((info->flags & (kTypeLazyViews | kTypeImportRefusesLazyViews)) == kTypeLazyViews &&
      CheckLazyViewArg(obj, ctx, index) != 0) {
    return -1;
  }
  const DLPackExchangeAPI* api = info->api;
  ctx->NoteExchangeAPI(api);
  const uint32_t flags = (info->flags & kTypeReadOnly) != 0 ? kKFFITensorFlagReadOnly : 0;
  if (KFFI_LIKELY(api->dltensor_from_py_object_no_sync != nullptr)) {
    DLTensor* t = ctx->NewTensorSlot();
    if (api->dltensor_from_py_object_no_sync(obj, t) != 0) {
      return TensorImportError(obj, info, ctx, index);
    }
    if (KFFI_UNLIKELY(!LayoutFits(t))) return RaiseLayoutTooLarge(t, ArgPlaceOf(ctx, index));
    ctx->NoteDevice(t->device, api);
    ctx->NoteTensorSource(t, obj);
    SetTensorView(out, t, flags);
    return 0;
  }
  DLManagedTensorVersioned* mt = nullptr;
  if (api->managed_tensor_from_py_object_no_sync(obj, &mt) != 0) {
    return TensorImportError(obj, info, ctx, index);
  }
  if (flags != 0) mt->flags |= DLPACK_FLAG_BITMASK_READ_ONLY;
  KFFIObjectHandle h = nullptr;
  if (KFFITensorFromDLPackVersioned(mt, 0, 0, &h) != 0) return (RaiseFromKFFIError(-1), -1);
  if (CheckOwnedLayout(&h, ArgPlaceOf(ctx, index)) != 0) return -1;
  SetOwnedTensor(out, h);
  ctx->KeepAlive(*out);
  ctx->NoteDevice(KFFITensorGetDLTensorPtr(h)->device, api);
  ctx->NoteTensorSource(KFFITensorGetDLTensorPtr(h), obj);
  return 0;
}

int ConvertExchangeTensor(PyObject* obj, const TypeInfo* info, KFFIAny* out, CallContext* ctx,
                          Py_ssize_t index) {
  return ConvertExchangeTensorInline(obj, info, out, ctx, index);
}

KFFI_INLINE int ConvertNumpyTensorInline(PyObject* obj, const TypeInfo* info, KFFIAny* out,
                                         CallContext* ctx, Py_ssize_t index) {
  DLTensor* t = ctx->NewTensorSlot();
  bool read_only = false, fits = true;
  if (KFFI_LIKELY(FillFromNumpy(obj, t, ctx, &read_only, &fits) && !read_only)) {
    if (KFFI_UNLIKELY(!fits)) return RaiseLayoutTooLarge(t, ArgPlaceOf(ctx, index));
    ctx->NoteTensorSource(t, obj);
    SetTensorView(out, t, 0);
    return 0;
  }
  return ConvertTensorArg(obj, info, out, ctx, index);
}

int ConvertNumpyTensor(PyObject* obj, const TypeInfo* info, KFFIAny* out, CallContext* ctx,
                       Py_ssize_t index) {
  return ConvertNumpyTensorInline(obj, info, out, ctx, index);
}

/// TypeInfoOf for an argument's type. Classifying a type seen for the first time runs Python code
/// (kffi's hook, and what it reads of the type: a metaclass's __getattr__, say), after which the
/// views taken so far are taken again.
KFFI_NOINLINE const TypeInfo* ArgTypeInfo(PyTypeObject* tp, CallContext* ctx) {
  if (const TypeInfo* found = g_state->types.Find(tp)) return found;
  ctx->NotePythonRuns();
  return TypeInfoOf(tp);
}

/// Arguments that are not small ints, floats or ASCII str, by the conversion table: the tensor
/// paths of torch and NumPy inline here (this file), everything else in ConvertArgGeneral.
int ConvertArgByTable(PyObject* obj, KFFIAny* out, CallContext* ctx, Py_ssize_t index) {
  PyTypeObject* tp = Py_TYPE(obj);
  const TypeInfo* info = TypeTable::FindLast(tp);  // no state pointer read on a hit
  if (KFFI_UNLIKELY(info == nullptr)) info = ArgTypeInfo(tp, ctx);
  if (info->kind == Kind::kExchangeTensor) {
    return ConvertExchangeTensorInline(obj, info, out, ctx, index);
  }
  if (info->kind == Kind::kNumpyTensor) return ConvertNumpyTensorInline(obj, info, out, ctx, index);
  return ConvertArgGeneral(obj, out, ctx, index, info);
}

int ConvertTensorArg(PyObject* obj, const TypeInfo* info, KFFIAny* out, CallContext* ctx,
                     Py_ssize_t index) {
  if (info->kind == Kind::kExchangeTensor) return ConvertExchangeTensor(obj, info, out, ctx, index);
  bool read_only = (info->flags & kTypeReadOnly) != 0;
  DLTensor* view = nullptr;
  if (info->kind == Kind::kNumpyTensor) {
    DLTensor* t = ctx->NewTensorSlot();
    bool fits = true;
    if (FillFromNumpy(obj, t, ctx, &read_only, &fits)) {
      if (KFFI_UNLIKELY(!fits)) return RaiseLayoutTooLarge(t, ArgPlaceOf(ctx, index));
      if (KFFI_LIKELY(!read_only)) {
        ctx->NoteTensorSource(t, obj);
        SetTensorView(out, t, 0);
        return 0;
      }
      // Read-only: an owned tensor through __dlpack__ carries the flag itself (for kernels that
      // keep a kffi::Tensor); the view stays as the fallback for a NumPy that cannot export it.
      view = t;
    }
    // An unusual dtype or byte order: NumPy's own __dlpack__ decides.
  }
  ctx->NotePythonRuns();
  // A torch tensor type without the exchange API (an older torch, or a subclass that hides it):
  // torch's __dlpack__ refuses conjugate views but exports negative ones as they are.
  if ((info->flags & kTypeLazyViews) != 0 && CheckLazyView(obj, ArgPlaceOf(ctx, index)) != 0) {
    return -1;
  }
  PyRef stream;
  if (info->stream_hook != nullptr && ReadHookStream(info, ctx, &stream) != 0) {
    return TensorImportError(obj, info, ctx, index);
  }
  KFFIObjectHandle h = nullptr;
  if (ImportViaDLPackProtocol(obj, info, read_only, stream.get(), &h) != 0) {
    if (view != nullptr && PyErr_ExceptionMatches(PyExc_BufferError)) {
      PyErr_Clear();
      ctx->NoteTensorSource(view, obj);
      ctx->NotePythonRuns();  // __dlpack__ ran after the view was read: take it again
      SetTensorView(out, view, kKFFITensorFlagReadOnly);
      return 0;
    }
    return TensorImportError(obj, info, ctx, index);
  }
  if (CheckOwnedLayout(&h, ArgPlaceOf(ctx, index)) != 0) return -1;
  SetOwnedTensor(out, h);
  ctx->KeepAlive(*out);
  const DLTensor* t = KFFITensorGetDLTensorPtr(h);
  ctx->NoteDevice(t->device, nullptr);
  if (ctx->has_hook_stream && t->device.device_type == kDLCPU) ctx->has_hook_stream = false;
  ctx->NoteTensorSource(t, obj);
  return 0;
}

namespace {

/// The error of an argument that RetakeTensorView cannot read again; -1.
int RaiseArgumentChanged(const CallContext* ctx, Py_ssize_t index, const char* what) {
  PyErr_SetString(PyExc_RuntimeError,
                  ArgPlaceOf(ctx, index)
                      .Say(std::string(what) +
                           " while kffi converted the call's arguments (Python code run by the "
                           "conversion of another argument changed it)")
                      .c_str());
  return -1;
}

}  // namespace

int RetakeTensorView(PyObject* obj, KFFIAny* out, CallContext* ctx, Py_ssize_t index) {
  auto* t = static_cast<DLTensor*>(out->v_ptr);
  const DLDevice device = t->device;
  // Found, not classified: classifying runs the Python hook. A type the table does not hold is
  // one the argument was given (obj.__class__ = ...) by Python code since the first pass.
  const TypeInfo* info = g_state->types.Find(Py_TYPE(obj));
  if (info != nullptr && info->kind == Kind::kExchangeTensor &&
      info->api->dltensor_from_py_object_no_sync != nullptr) {
    if ((info->flags & kTypeLazyViews) != 0) {
      // The override's reader checks again; the methods answered in the first pass (Python code
      // cannot change a tensor's bits but through torch's private _set_conj/_set_neg).
      if (LazyViewBitsFn read = g_state->lazy_bits.load(std::memory_order_acquire)) {
        const int bits = read(obj);
        if (bits > 0) return RaiseLazyView(bits, ArgPlaceOf(ctx, index));
      }
    }
    if (info->api->dltensor_from_py_object_no_sync(obj, t) != 0) {
      return TensorImportError(obj, info, ctx, index);
    }
    if (KFFI_UNLIKELY(!LayoutFits(t))) return RaiseLayoutTooLarge(t, ArgPlaceOf(ctx, index));
  } else if (info != nullptr && info->kind == Kind::kNumpyTensor) {
    bool read_only = false, fits = true;
    if (!FillFromNumpy(obj, t, ctx, &read_only, &fits)) {
      return RaiseArgumentChanged(ctx, index, "its dtype or byte order changed");
    }
    if (KFFI_UNLIKELY(!fits)) return RaiseLayoutTooLarge(t, ArgPlaceOf(ctx, index));
    if (read_only) out->tensor_flags |= kKFFITensorFlagReadOnly;
  } else {
    return RaiseArgumentChanged(ctx, index, "its type changed");
  }
  if (t->device.device_type != device.device_type || t->device.device_id != device.device_id) {
    return RaiseArgumentChanged(ctx, index, "its device changed");
  }
  return 0;
}

namespace {

/// An owned tensor viewing a NumPy array whose dtype NumPy's own __dlpack__ refuses (ml_dtypes',
/// py_numpy.h), holding a reference to the array: its deleter drops it, with the GIL.
struct NumpyView {
  DLManagedTensorVersioned mt;
  PyObject* array;
  int64_t strides[1];  // ndim entries (at least one slot)

  static void Delete(DLManagedTensorVersioned* self) {
    auto* v = static_cast<NumpyView*>(self->manager_ctx);
    if (Py_IsInitialized()) {
      PyGILState_STATE st = PyGILState_Ensure();
      {
        PendingErrorScope keep;  // the array's release may run code while an error is pending
        Py_DECREF(v->array);
      }
      PyGILState_Release(st);
    }
    std::free(v);
  }
};

}  // namespace

int NumpyViewToOwned(PyObject* obj, KFFIObjectHandle* out) {
  CallContext ctx;
  DLTensor t;
  bool read_only = false, fits = true;
  if (!FillFromNumpy(obj, &t, &ctx, &read_only, &fits)) return 1;
  if (!fits) return RaiseLayoutTooLarge(&t, ArgPlace());
  const size_t slots = t.ndim > 0 ? static_cast<size_t>(t.ndim) : 1;  // ndim <= 64 (NumPy's)
  auto* v = static_cast<NumpyView*>(
      std::calloc(1, offsetof(NumpyView, strides) + slots * sizeof(int64_t)));
  if (v == nullptr) return (PyErr_NoMemory(), -1);
  for (int32_t i = 0; i < t.ndim; ++i) v->strides[i] = t.strides[i];
  t.strides = v->strides;  // the shape is the array's own, alive as long as it is
  Py_INCREF(obj);
  v->array = obj;
  v->mt.version = DLPackVersion{DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION};
  v->mt.manager_ctx = v;
  v->mt.deleter = &NumpyView::Delete;
  v->mt.flags = read_only ? DLPACK_FLAG_BITMASK_READ_ONLY : 0;
  v->mt.dl_tensor = t;
  // The runtime calls the deleter on failure too.
  if (KFFITensorFromDLPackVersioned(&v->mt, 0, 0, out) != 0) return (RaiseFromKFFIError(-1), -1);
  return 0;
}

int TensorToOwnedHandle(PyObject* obj, KFFIObjectHandle* out) {
  KFFIObjectHandle h = GetHandle(obj);
  if (h != nullptr && static_cast<KFFIObject*>(h)->type_index == kKFFITensor) {
    KFFIObjectIncRef(h);
    *out = h;
    return 0;
  }
  if (h == nullptr && RaiseIfReleased(obj)) return -1;
  const TypeInfo* info = TypeInfoOf(Py_TYPE(obj));
  switch (info->kind) {
    case Kind::kExchangeTensor:
      if (info->api->managed_tensor_from_py_object_no_sync != nullptr) {
        if ((info->flags & kTypeLazyViews) != 0 && CheckLazyView(obj, ArgPlace()) != 0) return -1;
        DLManagedTensorVersioned* mt = nullptr;
        if (info->api->managed_tensor_from_py_object_no_sync(obj, &mt) != 0) {
          return TensorImportError(obj, info, nullptr, -1);
        }
        if ((info->flags & kTypeReadOnly) != 0) mt->flags |= DLPACK_FLAG_BITMASK_READ_ONLY;
        if (KFFITensorFromDLPackVersioned(mt, 0, 0, out) != 0) return (RaiseFromKFFIError(-1), -1);
        return CheckOwnedLayout(out, ArgPlace());
      }
      break;
    case Kind::kNumpyTensor:
    case Kind::kDLPackTensor:
    case Kind::kJaxTracer:
      break;
    default:
      PyErr_Format(PyExc_TypeError, "Expected a tensor (an object with __dlpack__), got %s",
                   Py_TYPE(obj)->tp_name);
      return -1;
  }
  bool read_only = false;
  if (info->kind == Kind::kNumpyTensor) {
    auto* a = reinterpret_cast<PyArrayObject*>(obj);
    read_only = (PyArray_FLAGS(a) & NPY_ARRAY_WRITEABLE) == 0;
    // ml_dtypes' types, which NumPy's __dlpack__ refuses: kffi's own view of the array.
    if (PyArray_DESCR(a)->type_num >= NPY_USERDEF) {
      const int rc = NumpyViewToOwned(obj, out);
      if (rc <= 0) return rc;
    }
  }
  if ((info->flags & kTypeLazyViews) != 0 && CheckLazyView(obj, ArgPlace()) != 0) return -1;
  if (ImportViaDLPackProtocol(obj, info, read_only, nullptr, out) != 0) {
    return TensorImportError(obj, info, nullptr, -1);
  }
  return CheckOwnedLayout(out, ArgPlace());
}

PyObject* WrapTensor(KFFIObjectHandle owned, const CallContext* ctx) {
  const DLTensor* t = KFFITensorGetDLTensorPtr(owned);
  bool views_argument = false;
  if (ctx != nullptr && ctx->has_tensor_sources()) {
    // A tensor argument coming straight back (e.g. an echo): return the caller's own object.
    if (PyObject* src = ctx->FindTensorSource(t)) {
      KFFIObjectDecRef(owned);
      Py_INCREF(src);
      return src;
    }
    views_argument = ctx->SharesArgumentData(t);
  }
  if (ctx != nullptr && ctx->api != nullptr &&
      ctx->api->managed_tensor_to_py_object_no_sync != nullptr) {
    // The inputs were framework tensors: give back the framework's tensor type.
    DLManagedTensorVersioned* mt = nullptr;
    int rc = KFFITensorToDLPackVersioned(owned, &mt);
    KFFIObjectDecRef(owned);
    if (rc != 0) return RaiseFromKFFIError(-1);
    void* py = nullptr;
    if (ctx->api->managed_tensor_to_py_object_no_sync(mt, &py) != 0) return nullptr;
    return static_cast<PyObject*>(py);
  }
  PyRef wrapped(WrapObject(owned));
  if (!wrapped) return nullptr;
  if (views_argument) {
    // The result views an argument's memory without owning it: keep the arguments alive, and
    // stay a kffi.Tensor (a framework array made from it would not keep them).
    PyRef sources(ctx->TensorSourcesTuple());
    if (!sources || SetInternalAttr(wrapped.get(), "_kffi_keepalive", sources.get()) != 0) {
      return nullptr;
    }
    return wrapped.release();
  }
  const TypeInfo* first = ctx != nullptr ? ctx->FirstTensorType() : nullptr;
  if (first != nullptr && first->from_dlpack != nullptr) {
    // NumPy, JAX, CuPy inputs: the result in the caller's array type (zero-copy through DLPack).
    // A dtype the framework lacks (e.g. bfloat16 for NumPy) stays a kffi.Tensor.
    PyObject* r = PyObject_CallOneArg(first->from_dlpack, wrapped.get());
    if (r != nullptr) return r;
    PyErr_Clear();
  }
  return wrapped.release();
}

}  // namespace pyglue
}  // namespace kffi
