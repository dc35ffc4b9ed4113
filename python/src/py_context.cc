// python/src/py_context.cc: the scratch state of one call (tensor slots and temporaries).
// SPDX-License-Identifier: Apache-2.0
#include "py_common.h"

namespace kffi {
namespace pyglue {

struct CallContext::Extra {
  std::vector<DLTensor*> tensors;
  std::vector<int64_t*> buffers;
  std::vector<KFFIAny> keep_alive;
  /// Tensor sources after the first kInlineTensors.
  std::vector<TensorSource> sources;
};

CallContext::Extra* CallContext::GetExtra() {
  if (extra_ == nullptr) extra_ = new Extra();
  return extra_;
}

void CallContext::ReleaseExtra() {
  Extra* e = extra_;
  extra_ = nullptr;
  // A failed call releases its temporaries with its error pending; their deleters may run
  // Python code (a ctypes DLPack deleter), which must neither see nor replace that error.
  for (KFFIAny& v : e->keep_alive) {
    if (v.type_index >= kKFFIStaticObjectBegin) ReleaseObject(v.v_obj);
  }
  for (DLTensor* t : e->tensors) delete t;
  for (int64_t* b : e->buffers) delete[] b;
  delete e;
}

DLTensor* CallContext::NewExtraTensorSlot() {
  Extra* e = GetExtra();
  e->tensors.push_back(new DLTensor());
  return e->tensors.back();
}

int64_t* CallContext::NewExtraInt64Buffer(size_t n) {
  Extra* e = GetExtra();
  e->buffers.push_back(new int64_t[n == 0 ? 1 : n]);
  return e->buffers.back();
}

void CallContext::NoteExtraTensorSource(const DLTensor* t, PyObject* obj) {
  GetExtra()->sources.push_back(TensorSource{t, obj});
}

void CallContext::KeepAliveExtra(const KFFIAny& owned) { GetExtra()->keep_alive.push_back(owned); }

namespace {
// Puts a record box back into its plan's spare slot (under the GIL) when the call left it as it
// came: the context's reference is the only one, strong or weak (so no other thread can reach
// it), and the slot is empty. Its fields are all written again before its next use.
bool ReturnRecordBox(KFFIObject* box, KFFIObject** slot) {
  if (*slot != nullptr) return false;
  if (__atomic_load_n(&box->combined_ref_count, __ATOMIC_ACQUIRE) !=
      ::kffi::details::kRefCountInit) {
    return false;
  }
  *slot = box;
  return true;
}
}  // namespace

void CallContext::ReleaseInlineKeep() {
  // As ReleaseExtra: with a call's error pending, deleters must not see it (ReleaseObject).
  const int n = num_inline_keep_;
  num_inline_keep_ = 0;
  KFFIObject** const slot = record_slot_;
  record_slot_ = nullptr;
  for (int i = 0; i < n; ++i) {
    if (slot != nullptr && i == record_at_ && ReturnRecordBox(inline_keep_[i], slot)) continue;
    ReleaseObject(inline_keep_[i]);
  }
}

const CallContext::TensorSource& CallContext::tensor_source(size_t i) const {
  if (i < static_cast<size_t>(num_inline_sources_)) return inline_sources_[i];
  return extra_->sources[i - static_cast<size_t>(num_inline_sources_)];
}

size_t CallContext::num_tensor_sources() const {
  return static_cast<size_t>(num_inline_sources_) +
         (extra_ != nullptr ? extra_->sources.size() : 0);
}

PyObject* CallContext::FindTensorSource(const DLTensor* t) const {
  const size_t n = num_tensor_sources();
  for (size_t k = 0; k < n; ++k) {
    const DLTensor* src = tensor_source(k).tensor;
    PyObject* obj = tensor_source(k).obj;
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

const TypeInfo* CallContext::FirstTensorType() const {
  if (num_tensor_sources() == 0) return nullptr;
  return TypeInfoOf(Py_TYPE(tensor_source(0).obj));
}

bool CallContext::SharesArgumentData(const DLTensor* t) const {
  const uintptr_t p = reinterpret_cast<uintptr_t>(t->data) + t->byte_offset;
  const size_t n = num_tensor_sources();
  for (size_t k = 0; k < n; ++k) {
    const DLTensor* src = tensor_source(k).tensor;
    // The bytes src reaches: its sizes were checked (LayoutFits) when it was converted.
    uint64_t span = 1;  // elements from the first to one past the farthest
    uint64_t numel = 1;
    for (int i = 0; i < src->ndim; ++i) {
      const int64_t d = src->shape[i];
      numel *= static_cast<uint64_t>(d);
      if (d > 1 && src->strides != nullptr) {
        const int64_t s = src->strides[i];
        span += static_cast<uint64_t>(d - 1) * static_cast<uint64_t>(s < 0 ? -s : s);
      }
    }
    if (src->strides == nullptr || numel == 0) span = numel;
    const uint64_t bytes = span * ((src->dtype.bits * src->dtype.lanes + 7u) / 8u);
    const uintptr_t lo = reinterpret_cast<uintptr_t>(src->data);
    if (p >= lo && p < lo + src->byte_offset + (bytes == 0 ? 1 : bytes)) return true;
  }
  return false;
}

PyObject* CallContext::TensorSourcesTuple() const {
  const size_t n = num_tensor_sources();
  PyObject* tuple = PyTuple_New(static_cast<Py_ssize_t>(n));
  if (tuple == nullptr) return nullptr;
  for (size_t i = 0; i < n; ++i) {
    PyObject* obj = tensor_source(i).obj;
    Py_INCREF(obj);
    PyTuple_SET_ITEM(tuple, static_cast<Py_ssize_t>(i), obj);
  }
  return tuple;
}

}  // namespace pyglue
}  // namespace kffi
