// python/kffi/torch/_torch_dlpack.h: torch tensors as borrowed DLTensors, for the glue libraries
// of kffi.torch (_dispatch.cc: dispatcher kernels; _import.cc: Python call arguments): the one
// dtype table, and the view of a TensorImpl as a DLTensor.
// SPDX-License-Identifier: Apache-2.0
#ifndef KFFI_PYTHON_TORCH_TORCH_DLPACK_H_
#define KFFI_PYTHON_TORCH_TORCH_DLPACK_H_

#include <ATen/core/Tensor.h>
#include <kffi/dlpack.h>

#include <cstddef>
#include <cstdint>

namespace kffi {
namespace torchglue {

struct DTypePair {
  c10::ScalarType scalar;
  DLDataType dl;
};

inline constexpr DTypePair kDTypes[] = {
    {c10::ScalarType::Float, {kDLFloat, 32, 1}},
    {c10::ScalarType::Double, {kDLFloat, 64, 1}},
    {c10::ScalarType::Half, {kDLFloat, 16, 1}},
    {c10::ScalarType::BFloat16, {kDLBfloat, 16, 1}},
    {c10::ScalarType::Long, {kDLInt, 64, 1}},
    {c10::ScalarType::Int, {kDLInt, 32, 1}},
    {c10::ScalarType::Short, {kDLInt, 16, 1}},
    {c10::ScalarType::Char, {kDLInt, 8, 1}},
    {c10::ScalarType::Byte, {kDLUInt, 8, 1}},
    {c10::ScalarType::UInt16, {kDLUInt, 16, 1}},
    {c10::ScalarType::UInt32, {kDLUInt, 32, 1}},
    {c10::ScalarType::UInt64, {kDLUInt, 64, 1}},
    {c10::ScalarType::Bool, {kDLBool, 8, 1}},
    {c10::ScalarType::ComplexHalf, {kDLComplex, 32, 1}},
    {c10::ScalarType::ComplexFloat, {kDLComplex, 64, 1}},
    {c10::ScalarType::ComplexDouble, {kDLComplex, 128, 1}},
    {c10::ScalarType::Float8_e4m3fn, {kDLFloat8_e4m3fn, 8, 1}},
    {c10::ScalarType::Float8_e5m2, {kDLFloat8_e5m2, 8, 1}},
    {c10::ScalarType::Float8_e4m3fnuz, {kDLFloat8_e4m3fnuz, 8, 1}},
    {c10::ScalarType::Float8_e5m2fnuz, {kDLFloat8_e5m2fnuz, 8, 1}},
    {c10::ScalarType::Float8_e8m0fnu, {kDLFloat8_e8m0fnu, 8, 1}},
};

constexpr size_t kNumScalarTypes = static_cast<size_t>(c10::ScalarType::NumOptions);

/// kDTypes indexed by ScalarType (the per-call direction; code 0xff: none): one look-up per
/// tensor instead of a scan.
struct DLByScalar {
  DLDataType dl[kNumScalarTypes];
  DLByScalar() {
    for (DLDataType& t : dl) t = DLDataType{0xff, 0, 0};
    for (const DTypePair& p : kDTypes) dl[static_cast<size_t>(p.scalar)] = p.dl;
  }
};
inline const DLByScalar kDLByScalar;

/// The DLPack dtype of s; false when it has none.
inline bool DLDTypeOf(c10::ScalarType s, DLDataType* out) {
  const size_t i = static_cast<size_t>(s);
  if (C10_UNLIKELY(i >= kNumScalarTypes) || C10_UNLIKELY(kDLByScalar.dl[i].code == 0xff)) {
    return false;
  }
  *out = kDLByScalar.dl[i];
  return true;
}

/// The DLPack device of d; false for devices other than CPU and CUDA.
inline bool DLDeviceOf(const c10::Device& d, DLDevice* out) {
  switch (d.type()) {
    case c10::DeviceType::CPU:
      *out = DLDevice{kDLCPU, 0};
      return true;
    case c10::DeviceType::CUDA:
      *out = DLDevice{kDLCUDA, static_cast<int32_t>(d.index() < 0 ? 0 : d.index())};
      return true;
    default:
      return false;
  }
}

/// LazyViewBits: a lazy conjugate view (complex: its memory holds the unconjugated values).
constexpr int kLazyConj = 1;
/// LazyViewBits: a lazy negative view (e.g. x.conj().imag: its memory holds the values with the
/// opposite sign).
constexpr int kLazyNeg = 2;

/// The lazy-view bits of a tensor (kLazyConj | kLazyNeg): two bit tests of its dispatch key set
/// (TensorImpl's inline is_conj() and is_neg()). DLPack has no such bits, so such a tensor's
/// memory cannot be handed over as it is.
inline int LazyViewBits(const c10::TensorImpl* impl) {
  return (impl->is_conj() ? kLazyConj : 0) | (impl->is_neg() ? kLazyNeg : 0);
}

/// What the glue says of a tensor with lazy-view bits (kffi's argument conversion says the same
/// in python/src/py_tensor.cc, naming the argument).
inline const char* LazyViewRefusal(int bits) {
  return (bits & kLazyConj) != 0
             ? "the torch tensor is a lazy conjugate view (its memory holds the unconjugated "
               "values); pass x.resolve_conj()"
             : "the torch tensor is a lazy negative view, e.g. x.conj().imag (its memory holds "
               "the values with the opposite sign); pass x.resolve_neg()";
}

/// A borrowed DLTensor viewing t (shape and strides point into the TensorImpl's own arrays, the
/// data pointer includes the storage offset); false, with out partly written, for a lazy
/// conjugate or negative view (LazyViewBits), a layout other than strided, a device other than
/// CPU and CUDA, or a dtype DLPack lacks. data_ptr() is the mutable pointer (copy-on-write
/// storage is materialised) and throws for a tensor without storage.
inline bool ViewAsDLTensor(const at::Tensor& t, DLTensor* out) {
  const c10::TensorImpl* impl = t.unsafeGetTensorImpl();
  if (C10_UNLIKELY(LazyViewBits(impl) != 0)) return false;
  if (C10_UNLIKELY(impl->layout() != c10::kStrided)) return false;
  if (C10_UNLIKELY(!DLDeviceOf(impl->device(), &out->device))) return false;
  if (C10_UNLIKELY(!DLDTypeOf(impl->dtype().toScalarType(), &out->dtype))) return false;
  out->data = t.data_ptr();
  out->ndim = static_cast<int32_t>(impl->dim());
  out->shape = const_cast<int64_t*>(impl->sizes().data());
  out->strides = const_cast<int64_t*>(impl->strides().data());
  out->byte_offset = 0;
  return true;
}

}  // namespace torchglue
}  // namespace kffi

#endif  // KFFI_PYTHON_TORCH_TORCH_DLPACK_H_
