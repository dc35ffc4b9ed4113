// python/src/py_context.cc: the scratch state of one call (tensor slots and temporaries).
#include "py_common.h"

namespace kffi {
namespace py {

CallContext::~CallContext() {
  for (KFFIAny& v : keep_alive_) {
    if (v.type_index >= kKFFIStaticObjectBegin) KFFIObjectDecRef(v.v_obj);
  }
  for (PyObject* o : keep_alive_py_) Py_DECREF(o);
  for (DLTensor* t : extra_tensors_) delete t;
  for (int64_t* b : buffers_) delete[] b;
}

DLTensor* CallContext::NewTensorSlot() {
  if (num_inline_tensors_ < kInlineTensors) return &inline_tensors_[num_inline_tensors_++];
  extra_tensors_.push_back(new DLTensor());
  return extra_tensors_.back();
}

int64_t* CallContext::NewInt64Buffer(size_t n) {
  if (num_inline_ints_ + n <= sizeof(inline_ints_) / sizeof(int64_t)) {
    int64_t* out = inline_ints_ + num_inline_ints_;
    num_inline_ints_ += n;
    return out;
  }
  buffers_.push_back(new int64_t[n == 0 ? 1 : n]);
  return buffers_.back();
}

void CallContext::KeepAlive(const KFFIAny& owned) { keep_alive_.push_back(owned); }

void CallContext::KeepAlivePy(PyObject* obj) { keep_alive_py_.push_back(obj); }

void CallContext::NoteDevice(DLDevice dev, const DLPackExchangeAPI* api) {
  if (has_device || dev.device_type == kDLCPU) return;
  has_device = true;
  device = dev;
  device_api = api;
}

void CallContext::NoteExchangeAPI(const DLPackExchangeAPI* a) {
  if (api == nullptr) api = a;
}

PyObject* CallContext::FindTensorSource(const DLTensor* t) const {
  for (const auto& [src, obj] : sources_) {
    if (src->data != t->data || src->ndim != t->ndim || src->byte_offset != t->byte_offset ||
        src->device.device_type != t->device.device_type ||
        src->device.device_id != t->device.device_id || src->dtype.code != t->dtype.code ||
        src->dtype.bits != t->dtype.bits || src->dtype.lanes != t->dtype.lanes) {
      continue;
    }
    bool same = true;
    int64_t expected = 1;
    for (int i = t->ndim - 1; i >= 0 && same; --i) {
      int64_t s1 = src->strides ? src->strides[i] : expected;
      int64_t s2 = t->strides ? t->strides[i] : expected;
      same = src->shape[i] == t->shape[i] && (s1 == s2 || t->shape[i] == 1);
      expected *= t->shape[i];
    }
    if (same) return obj;
  }
  return nullptr;
}

PyObject* CallContext::TensorSourcesTuple() const {
  PyObject* tuple = PyTuple_New(static_cast<Py_ssize_t>(sources_.size()));
  if (tuple == nullptr) return nullptr;
  for (size_t i = 0; i < sources_.size(); ++i) {
    Py_INCREF(sources_[i].second);
    PyTuple_SET_ITEM(tuple, static_cast<Py_ssize_t>(i), sources_[i].second);
  }
  return tuple;
}

}  // namespace py
}  // namespace kffi
