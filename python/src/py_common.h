// python/src/py_common.h: shared declarations of the kffi CPython extension (kffi._core).
#ifndef KFFI_PYTHON_PY_COMMON_H_
#define KFFI_PYTHON_PY_COMMON_H_

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <kffi/any.h>
#include <kffi/c_api.h>
#include <kffi/error.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace kffi {
namespace py {

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
  /// Release the GIL during the native call: 1 yes, 0 no, -1 follow the global default.
  int release_gil;
  /// The function cell's safe_call, read once (a cell never changes): one load fewer per call.
  KFFISafeCallType safe_call;
};

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
  /// Keeps an owned value alive until the call ends (then releases it).
  void KeepAlive(const KFFIAny& owned);
  /// Keeps a Python object alive until the call ends (steals the reference).
  void KeepAlivePy(PyObject* obj);
  /// Records a non-CPU device seen in a tensor argument (the first one wins).
  void NoteDevice(DLDevice dev, const DLPackExchangeAPI* api) {
    if (has_device || dev.device_type == kDLCPU) return;
    has_device = true;
    device = dev;
    device_api = api;
  }
  /// Records that a torch-like framework (with an exchange API) passed tensors.
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
  bool has_tensor_sources() const { return num_inline_sources_ != 0; }

  bool has_device = false;
  DLDevice device{kDLCPU, 0};
  /// The exchange API of the framework of the first tensor argument that has one.
  const DLPackExchangeAPI* api = nullptr;
  /// The exchange API of the first non-CPU tensor (for its current stream).
  const DLPackExchangeAPI* device_api = nullptr;

 private:
  struct TensorSource {
    const DLTensor* tensor;
    PyObject* obj;
  };
  /// What does not fit inline (and everything to release): made on first use.
  struct Extra;
  static constexpr size_t kInlineInts = 64;
  Extra* GetExtra();
  void ReleaseExtra();
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
};

// ---- conversion (py_convert.cc) -------------------------------------------------------------
/// Converts argument #index into a borrowed KFFIAny; 0 on success, -1 with a Python error set.
/// index < 0 marks a value with no argument position (a container element, a callback result).
int ConvertArg(PyObject* obj, KFFIAny* out, CallContext* ctx, Py_ssize_t index);
/// Converts an owned value into a new Python object (steals the value); NULL on error.
PyObject* AnyToPy(KFFIAny* owned, const CallContext* ctx);
/// Converts a borrowed value (a callback argument) into a new Python object.
PyObject* AnyViewToPy(const KFFIAny* view);
/// Converts a Python object into an owned KFFIAny (for results of callbacks, containers).
int PyToOwnedAny(PyObject* obj, KFFIAny* out);
/// Drops the per-type converter cache (module teardown).
void ClearConverterCache();
/// _core._set_converter_hooks(classify, to_dtype, to_device, make_dtype, make_device, make_voidp)
PyObject* SetConverterHooks(PyObject* self, PyObject* args);

// ---- objects (py_object.cc) -----------------------------------------------------------------
extern PyTypeObject* g_object_type;
extern PyTypeObject* g_function_type;
/// Wraps an owned object handle in the Python class registered for its type (steals).
PyObject* WrapObject(KFFIObjectHandle owned);
/// The handle of a kffi.Object instance (borrowed), or NULL if obj is not one.
KFFIObjectHandle GetHandle(PyObject* obj);
/// True, with a ValueError set, when obj is a kffi.Object whose native object was released
/// (obj._release()); helpers check it before reporting obj as being of the wrong type.
bool RaiseIfReleased(PyObject* obj);
/// Creates the kffi.Object and kffi.Function types; 0 or -1.
int InitObjectTypes(PyObject* module);
/// Makes a kffi.Function around a Python callable (a new Python object).
PyObject* FunctionFromCallable(PyObject* callable);
/// Makes an owned Function handle that calls a Python callable.
int CallableToFunctionHandle(PyObject* callable, KFFIObjectHandle* out);

// ---- errors (py_error.cc) -------------------------------------------------------------------
/// Raises the thread's kffi error as a Python exception; returns NULL.
PyObject* RaiseFromKFFIError(int code);
/// Moves the current Python exception into the thread's kffi error slot.
void SetKFFIErrorFromPython();
/// The kffi error kind for a Python exception class ("TypeError", ...).
std::string KindOfPythonException(PyObject* exc_type);
int InitErrors(PyObject* module);

// ---- tensors (py_tensor.cc) -----------------------------------------------------------------
/// True for types whose instances are tensors (exchange API, NumPy arrays, __dlpack__).
bool IsTensorType(PyTypeObject* tp);
/// Tries the tensor paths (exchange API, NumPy, __dlpack__) for obj. Returns 1 when obj was a
/// tensor and *out was filled, 0 when obj is not a tensor, -1 with a Python error set.
int ConvertTensorArg(PyObject* obj, PyTypeObject* tp, KFFIAny* out, CallContext* ctx,
                     Py_ssize_t index);
/// Imports a tensor-like Python object as an owned Tensor handle (through DLPack); -1 on error.
int TensorToOwnedHandle(PyObject* obj, KFFIObjectHandle* out);
/// Wraps an owned Tensor handle: a torch.Tensor when ctx saw torch inputs, else kffi.Tensor.
PyObject* WrapTensor(KFFIObjectHandle owned, const CallContext* ctx);
int InitTensorSupport(PyObject* module);

// ---- environment (py_env.cc) ----------------------------------------------------------------
/// Sets the environment (stream, allocator) for a call and restores it on scope exit.
class CallEnvScope {
 public:
  // Calls without a device tensor or a framework's exchange API change nothing: inline test.
  explicit CallEnvScope(const CallContext& ctx) {
    if (ctx.has_device || ctx.api != nullptr) Enter(ctx);
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

/// The global default for releasing the GIL in native calls.
extern int g_default_release_gil;

}  // namespace py
}  // namespace kffi

#endif  // KFFI_PYTHON_PY_COMMON_H_
