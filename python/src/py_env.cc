// python/src/py_env.cc: the per-call environment (framework stream and allocator), use_stream,
// and the signal hook that lets long native loops notice Ctrl-C.
// SPDX-License-Identifier: Apache-2.0
#include "py_common.h"

namespace kffi {
namespace pyglue {

thread_local int g_explicit_stream_depth = 0;

void CallEnvScope::Enter(const CallContext& ctx) {
  if (ctx.has_device && g_explicit_stream_depth == 0) {
    void* stream = nullptr;
    bool have = false;
    if (ctx.device_api != nullptr && ctx.device_api->current_work_stream != nullptr) {
      // torch: the framework's current stream on the tensor's device.
      if (ctx.device_api->current_work_stream(ctx.device.device_type, ctx.device.device_id,
                                              &stream) != 0) {
        status_ = -1;
        return;
      }
      have = true;
    } else if (ctx.has_hook_stream) {
      // CuPy: its current stream, read through its Python hook while converting.
      stream = ctx.hook_stream;
      have = true;
    }
    if (have) {
      device_ = ctx.device;
      KFFIEnvSetStream(device_.device_type, device_.device_id, stream, &prev_stream_);
      stream_set_ = true;
    }
  }
  if (ctx.api != nullptr && ctx.api->managed_tensor_allocator != nullptr) {
    // Device tensors the callee allocates come from the caller framework's allocator (its
    // memory pool and stream order); kffi has no device allocator of its own.
    KFFIEnvSetTensorAllocator(ctx.api->managed_tensor_allocator, 0, &prev_alloc_);
    alloc_set_ = true;
  }
}

void CallEnvScope::Exit() {
  if (stream_set_) KFFIEnvSetStream(device_.device_type, device_.device_id, prev_stream_, nullptr);
  if (alloc_set_) KFFIEnvSetTensorAllocator(prev_alloc_, 0, nullptr);
}

namespace {
int CheckSignalsHook() {
  if (!Py_IsInitialized()) return 0;
  PyGILState_STATE st = PyGILState_Ensure();
  int rc = 0;
  if (PyErr_CheckSignals() != 0) {
    SetKFFIErrorFromPython();
    rc = -1;
  }
  PyGILState_Release(st);
  return rc;
}
/// Reads (device_type, device_id, stream) where stream is an int handle or None.
bool ParseStreamArgs(PyObject* args, int* device_type, int* device_id, void** stream) {
  PyObject* stream_obj;
  if (!PyArg_ParseTuple(args, "iiO", device_type, device_id, &stream_obj)) return false;
  *stream = stream_obj == Py_None ? nullptr : PyLong_AsVoidPtr(stream_obj);
  return !PyErr_Occurred();
}
}  // namespace

/// _env_push_stream(device_type, device_id, stream) -> previous stream (int); the explicit
/// stream wins over the stream picked up from tensor arguments until _env_pop_stream.
PyObject* EnvPushStream(PyObject*, PyObject* args) {
  int device_type, device_id;
  void* stream;
  if (!ParseStreamArgs(args, &device_type, &device_id, &stream)) return nullptr;
  KFFIStreamHandle prev = nullptr;
  KFFIEnvSetStream(device_type, device_id, stream, &prev);
  ++g_explicit_stream_depth;
  return PyLong_FromVoidPtr(prev);
}

/// _env_pop_stream(device_type, device_id, previous)
PyObject* EnvPopStream(PyObject*, PyObject* args) {
  int device_type, device_id;
  void* stream;
  if (!ParseStreamArgs(args, &device_type, &device_id, &stream)) return nullptr;
  KFFIEnvSetStream(device_type, device_id, stream, nullptr);
  if (g_explicit_stream_depth > 0) --g_explicit_stream_depth;
  Py_RETURN_NONE;
}

/// _env_get_stream(device_type, device_id) -> int
PyObject* EnvGetStream(PyObject*, PyObject* args) {
  int device_type, device_id;
  if (!PyArg_ParseTuple(args, "ii", &device_type, &device_id)) return nullptr;
  return PyLong_FromVoidPtr(KFFIEnvGetStream(device_type, device_id));
}

int InitEnv(PyObject*) {
  KFFIEnvSetCheckSignalsHook(CheckSignalsHook, nullptr);
  return 0;
}

}  // namespace pyglue
}  // namespace kffi
