// include/kffi/tensor_checks.h: argument checks for kernels (device, dtype, ndim, layout).
// SPDX-License-Identifier: Apache-2.0
#ifndef KFFI_TENSOR_CHECKS_H_
#define KFFI_TENSOR_CHECKS_H_

#include <kffi/details/function.h>
#include <kffi/tensor.h>

#include <cstdint>
#include <initializer_list>
#include <string>

// Each check throws ValueError in kffi's one format of argument errors (the format of contract
// checks and of argument conversions), naming the parameter and the part of it that is wrong,
// what was expected and what was received, so a caller in Python sees which input to fix:
//   x.strides: expected contiguous, got [1, 4] for shape [4, 4]
// They take ConstTensorView, so TensorView, ConstTensorView and Tensor arguments all work, and
// are cheap when the check passes (the message is built only on failure).

namespace kffi {
namespace details {

/// An error of kind "<name><part>: expected <expected>, got <got>" (cold).
[[noreturn]] KFFI_NOINLINE inline void ThrowCheckError(const char* kind, const char* name,
                                                       const char* part,
                                                       const std::string& expected,
                                                       const std::string& got) {
  const std::string subject = std::string(name) + part;
  RaiseArgumentError(kind, subject.c_str(), expected.c_str(), got.c_str(), nullptr, -1, nullptr);
  ThrowRaisedError(-1);
}

/// ValueError "<name><part>: expected <expected>, got <got>" (cold).
[[noreturn]] KFFI_NOINLINE inline void ThrowCheckError(const char* name, const char* part,
                                                       const std::string& expected,
                                                       const std::string& got) {
  ThrowCheckError("ValueError", name, part, expected, got);
}

/// "float16|bfloat16": a list of dtypes as messages and contracts write it.
inline std::string JoinDataTypes(const DLDataType* dtypes, size_t n) {
  std::string out;
  for (size_t i = 0; i < n; ++i) {
    if (i != 0) out += "|";
    out += DataTypeToString(dtypes[i]);
  }
  return out;
}

}  // namespace details

/// The kernel may write the tensor's memory: refuses a read-only one (a read-only NumPy array,
/// a JAX array, a DLPack tensor marked read-only). A TensorView parameter is writable already
/// (the call refuses read-only memory for it); this is for Tensor parameters and views made by
/// hand.
inline void CheckWritable(ConstTensorView x, const char* name) {
  if (KFFI_LIKELY(x.is_writable())) return;
  details::ThrowCheckError(name, "", "a writable tensor", "a read-only tensor");
}

/// The tensor lives on a device of the given type (e.g. kDLCUDA), any index.
inline void CheckDevice(ConstTensorView x, DLDeviceType device_type, const char* name) {
  if (KFFI_LIKELY(x.device().device_type == device_type)) return;
  details::ThrowCheckError(name, ".device", details::DeviceTypeName(device_type),
                           details::DeviceToString(x.device()));
}

/// The tensor lives on exactly this device (type and index).
inline void CheckDevice(ConstTensorView x, DLDevice device, const char* name) {
  if (KFFI_LIKELY(x.device() == device)) return;
  details::ThrowCheckError(name, ".device", details::DeviceToString(device),
                           details::DeviceToString(x.device()));
}

/// The tensor is compact row-major (see TensorView::is_contiguous).
inline void CheckContiguous(ConstTensorView x, const char* name) {
  if (KFFI_LIKELY(x.is_contiguous())) return;
  details::ThrowCheckError(
      name, ".strides", "contiguous",
      KFFIToErrorString(x.strides()) + " for shape " + KFFIToErrorString(x.shape()));
}

/// The tensor has exactly ndim dimensions.
inline void CheckNdim(ConstTensorView x, int32_t ndim, const char* name) {
  if (KFFI_LIKELY(x.ndim() == ndim)) return;
  details::ThrowCheckError(
      name, ".ndim", std::to_string(ndim),
      std::to_string(x.ndim()) + " (shape " + KFFIToErrorString(x.shape()) + ")");
}

/// The tensor has this shape; -1 in shape matches any size of that dimension (shown as *).
inline void CheckShape(ConstTensorView x, IntArrayView shape, const char* name) {
  bool ok = x.shape().size() == shape.size();
  for (size_t i = 0; ok && i < shape.size(); ++i) ok = shape[i] == -1 || shape[i] == x.shape()[i];
  if (KFFI_LIKELY(ok)) return;
  std::string expected = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    expected +=
        (i != 0 ? ", " : "") + (shape[i] == -1 ? std::string("*") : std::to_string(shape[i]));
  }
  details::ThrowCheckError(name, ".shape", expected + "]", KFFIToErrorString(x.shape()));
}

/// The tensor's dtype is one of allowed.
inline void CheckDtype(ConstTensorView x, std::initializer_list<DLDataType> allowed,
                       const char* name) {
  for (const DLDataType& t : allowed) {
    if (x.dtype() == t) return;
  }
  details::ThrowCheckError("TypeError", name, ".dtype",
                           details::JoinDataTypes(allowed.begin(), allowed.size()),
                           DataTypeToString(x.dtype()));
}

/// The first element's address (data + byte_offset) is a multiple of alignment bytes (for
/// vectorised loads).
inline void CheckAlignment(ConstTensorView x, int64_t alignment, const char* name) {
  const uintptr_t first = reinterpret_cast<uintptr_t>(x.const_data());
  if (KFFI_LIKELY(alignment <= 0 || first % static_cast<uintptr_t>(alignment) == 0)) return;
  // The largest power of two the address is a multiple of (as the contract's message says it).
  const uintptr_t actual = first == 0 ? 0 : (first & (~first + 1));
  details::ThrowCheckError(name, "", "data aligned to " + std::to_string(alignment) + " bytes",
                           "data aligned to " + std::to_string(actual) + " bytes");
}

/// Both tensors live on the same device (type and index); a mismatch blames a.
inline void CheckSameDevice(ConstTensorView a, ConstTensorView b, const char* name_a,
                            const char* name_b) {
  if (KFFI_LIKELY(a.device() == b.device())) return;
  details::ThrowCheckError(
      name_a, ".device",
      details::DeviceToString(b.device()) + " (as " + std::string(name_b) + ".device)",
      details::DeviceToString(a.device()));
}

/// Both tensors have the same dtype; a mismatch blames a.
inline void CheckSameDtype(ConstTensorView a, ConstTensorView b, const char* name_a,
                           const char* name_b) {
  if (KFFI_LIKELY(a.dtype() == b.dtype())) return;
  details::ThrowCheckError("TypeError", name_a, ".dtype",
                           DataTypeToString(b.dtype()) + " (as " + std::string(name_b) + ".dtype)",
                           DataTypeToString(a.dtype()));
}

/// Both tensors have the same shape; a mismatch blames a.
inline void CheckSameShape(ConstTensorView a, ConstTensorView b, const char* name_a,
                           const char* name_b) {
  if (KFFI_LIKELY(a.shape() == b.shape())) return;
  details::ThrowCheckError(name_a, ".shape",
                           KFFIToErrorString(b.shape()) + " (as " + std::string(name_b) + ".shape)",
                           KFFIToErrorString(a.shape()));
}

}  // namespace kffi

#endif  // KFFI_TENSOR_CHECKS_H_
