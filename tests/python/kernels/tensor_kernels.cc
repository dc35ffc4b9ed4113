// tests/python/kernels/tensor_kernels.cc: small CPU kernels that the Python tensor tests call.
// SPDX-License-Identifier: Apache-2.0
#include <kffi/container/array.h>
#include <kffi/container/shape.h>
#include <kffi/export.h>
#include <kffi/tensor.h>

#include <cstdint>
#include <type_traits>
#include <vector>

namespace {

/// Calls f(element offset) for every element of x, honouring its strides.
template <typename F>
void ForEachOffset(kffi::ConstTensorView x, F f) {
  const int32_t ndim = x.ndim();
  if (x.numel() == 0) return;
  kffi::StrideArray strides = x.strides();
  std::vector<int64_t> index(static_cast<size_t>(ndim), 0);
  while (true) {
    int64_t offset = 0;
    for (int32_t d = 0; d < ndim; ++d) offset += index[d] * strides[d];
    f(offset);
    int32_t d = ndim - 1;
    for (; d >= 0; --d) {
      if (++index[d] < x.shape()[d]) break;
      index[d] = 0;
    }
    if (d < 0) return;
  }
}

/// Calls f(element&) for every element: writable through a TensorView, const through a
/// ConstTensorView (data<T>() includes byte_offset).
template <typename View, typename F>
void ForEachFloat(View x, const char* what, F f) {
  KFFI_CHECK(x.device().device_type == kDLCPU, ValueError)
      << what << " is a CPU kernel, got a tensor on " << x.device();
  if (x.dtype() == DLDataType{kDLFloat, 32, 1}) {
    auto* base = x.template data<float>();
    ForEachOffset(x, [&](int64_t o) { f(base[o]); });
  } else if (x.dtype() == DLDataType{kDLFloat, 64, 1}) {
    auto* base = x.template data<double>();
    ForEachOffset(x, [&](int64_t o) { f(base[o]); });
  } else {
    KFFI_THROW(TypeError) << what << " expects a float32 or float64 tensor, got " << x.dtype();
  }
}

void Fill(kffi::TensorView x, double value) {
  ForEachFloat(x, "fill",
               [&](auto& v) { v = static_cast<std::remove_reference_t<decltype(v)>>(value); });
}

void AddOneInplace(kffi::TensorView x) {
  ForEachFloat(x, "add_one_inplace", [](auto& v) { v += 1; });
}

double Sum(kffi::ConstTensorView x) {
  double s = 0;
  ForEachFloat(x, "sum", [&](const auto& v) { s += static_cast<double>(v); });
  return s;
}

/// sum(x) + sum(y): what two tensor arguments of one call hold when the kernel runs.
double SumTwo(kffi::TensorView x, kffi::TensorView y) { return Sum(x) + Sum(y); }

/// sum(x), with a second argument of any type converted and ignored (its conversion may run
/// Python code after x's view was taken).
double SumFirst(kffi::TensorView x, kffi::AnyView other) {
  (void)other;
  return Sum(x);
}

/// [shape, strides, dtype, data_ptr, device, byte_offset] as the kernel sees them.
kffi::Array<kffi::Any> Describe(kffi::ConstTensorView x) {
  kffi::StrideArray strides = x.strides();
  std::vector<int64_t> shape(x.shape().begin(), x.shape().end());
  std::vector<int64_t> st(strides.begin(), strides.end());
  return kffi::Array<kffi::Any>{
      kffi::Any(kffi::Shape(shape)),
      kffi::Any(kffi::Shape(st)),
      kffi::Any(x.dtype()),
      kffi::Any(static_cast<int64_t>(reinterpret_cast<intptr_t>(x.data_ptr()))),
      kffi::Any(x.device()),
      kffi::Any(static_cast<int64_t>(x.byte_offset())),
  };
}

/// A new tensor like x (same shape and dtype, on x's device) filled with value, from the
/// environment allocator: the caller framework's when it provides one.
kffi::Tensor FullLike(kffi::ConstTensorView x, double value) {
  kffi::Tensor out = kffi::Tensor::FromEnvAlloc(x.shape(), x.dtype(), x.device());
  Fill(out, value);
  return out;
}

/// A new tensor like x from the environment allocator, its data untouched (works for any device).
kffi::Tensor EmptyLike(kffi::ConstTensorView x) {
  return kffi::Tensor::FromEnvAlloc(x.shape(), x.dtype(), x.device());
}

/// The stream the callee sees for x's device (KFFIEnvGetStream), as an int.
int64_t StreamOf(kffi::ConstTensorView x) {
  return static_cast<int64_t>(
      reinterpret_cast<intptr_t>(KFFIEnvGetStream(x.device().device_type, x.device().device_id)));
}

/// A new CPU tensor of the given shape and dtype filled with value (environment allocator).
kffi::Tensor Full(kffi::Shape shape, DLDataType dtype, double value) {
  kffi::Tensor out = kffi::Tensor::FromEnvAlloc(kffi::IntArrayView(shape.data(), shape.size()),
                                                dtype, DLDevice{kDLCPU, 0});
  Fill(out, value);
  return out;
}

/// Returns its argument as an owned Tensor (a borrowed argument is refused by the type check).
kffi::Tensor Identity(kffi::Tensor x) { return x; }

/// Whether the tensor argument was marked read-only by its producer (only owned tensors carry
/// DLPack flags).
bool IsReadOnly(kffi::Tensor x) { return x.is_read_only(); }

}  // namespace

KFFI_EXPORT_DOC(fill, Fill, "Sets every element of x to value.", "x, value");
KFFI_EXPORT_DOC(add_one_inplace, AddOneInplace, "x += 1, in place.", "x");
KFFI_EXPORT_DOC(sum, Sum, "The sum of the elements of x.", "x");
KFFI_EXPORT_DOC(sum_two, SumTwo, "sum(x) + sum(y).", "x, y");
KFFI_EXPORT_DOC(sum_first, SumFirst, "sum(x); other is converted and ignored.", "x, other");
KFFI_EXPORT_DOC(describe, Describe, "[shape, strides, dtype, data_ptr, device, byte_offset]", "x");
KFFI_EXPORT_DOC(full_like, FullLike, "A new tensor like x filled with value.", "x, value");
KFFI_EXPORT_DOC(empty_like, EmptyLike, "A new uninitialised tensor like x.", "x");
KFFI_EXPORT_DOC(stream_of, StreamOf, "The stream the kernel sees for x's device.", "x");
KFFI_EXPORT_DOC(full, Full, "A new CPU tensor filled with value.", "shape, dtype, value");
KFFI_EXPORT_DOC(identity, Identity, "Returns x.", "x");
KFFI_EXPORT_DOC(is_read_only, IsReadOnly, "The read-only flag of an owned tensor.", "x");
