// include/kffi/tensor_checks.h: argument checks for kernels (device, dtype, ndim, layout).
#ifndef KFFI_TENSOR_CHECKS_H_
#define KFFI_TENSOR_CHECKS_H_

#include <kffi/tensor.h>

#include <cstdint>
#include <initializer_list>
#include <string>

// Each check throws ValueError with a message that names the argument, what was expected and
// what was received, so a caller in Python sees which input to fix:
//   Argument `x`: expected a contiguous tensor, got strides [1, 4] for shape [4, 4]
// They take TensorView, so Tensor and TensorView arguments both work, and are cheap when the
// check passes (the message is built only on failure).

namespace kffi {
namespace details {

[[noreturn]] KFFI_NOINLINE inline void ThrowArgumentError(const char* name,
                                                          const std::string& what) {
  KFFI_THROW(ValueError) << "Argument `" << name << "`: " << what;
}

}  // namespace details

/// The kernel may write the tensor's memory: refuses a read-only view (a read-only NumPy array,
/// a JAX array, a DLPack tensor marked read-only; see TensorView::is_read_only). Call it for
/// every tensor a kernel writes.
inline void CheckWritable(TensorView x, const char* name) {
  if (KFFI_LIKELY(x.is_writable())) return;
  details::ThrowArgumentError(name, "expected writable memory, got a read-only tensor");
}

/// The tensor lives on a device of the given type (e.g. kDLCUDA), any index.
inline void CheckDevice(TensorView x, DLDeviceType device_type, const char* name) {
  if (KFFI_LIKELY(x.device().device_type == device_type)) return;
  details::ThrowArgumentError(name, "expected a tensor on " +
                                        std::string(details::DeviceTypeName(device_type)) +
                                        ", got " + details::DeviceToString(x.device()));
}

/// The tensor lives on exactly this device (type and index).
inline void CheckDevice(TensorView x, DLDevice device, const char* name) {
  if (KFFI_LIKELY(x.device() == device)) return;
  details::ThrowArgumentError(name, "expected a tensor on " + details::DeviceToString(device) +
                                        ", got " + details::DeviceToString(x.device()));
}

/// The tensor is compact row-major (see TensorView::is_contiguous).
inline void CheckContiguous(TensorView x, const char* name) {
  if (KFFI_LIKELY(x.is_contiguous())) return;
  details::ThrowArgumentError(name, "expected a contiguous tensor, got strides " +
                                        KFFIToErrorString(x.strides()) + " for shape " +
                                        KFFIToErrorString(x.shape()));
}

/// The tensor has exactly ndim dimensions.
inline void CheckNdim(TensorView x, int32_t ndim, const char* name) {
  if (KFFI_LIKELY(x.ndim() == ndim)) return;
  details::ThrowArgumentError(name, "expected a " + std::to_string(ndim) + "-d tensor, got " +
                                        std::to_string(x.ndim()) + "-d with shape " +
                                        KFFIToErrorString(x.shape()));
}

/// The tensor has this shape; -1 in shape matches any size of that dimension.
inline void CheckShape(TensorView x, IntArrayView shape, const char* name) {
  bool ok = x.shape().size() == shape.size();
  for (size_t i = 0; ok && i < shape.size(); ++i) ok = shape[i] == -1 || shape[i] == x.shape()[i];
  if (KFFI_LIKELY(ok)) return;
  details::ThrowArgumentError(
      name, "expected shape " + KFFIToErrorString(shape) + ", got " + KFFIToErrorString(x.shape()));
}

/// The tensor's dtype is one of allowed.
inline void CheckDtype(TensorView x, std::initializer_list<DLDataType> allowed, const char* name) {
  for (const DLDataType& t : allowed) {
    if (x.dtype() == t) return;
  }
  std::string expected;
  size_t i = 0;
  for (const DLDataType& t : allowed) {
    if (i != 0) expected += (i + 1 == allowed.size()) ? " or " : ", ";
    expected += DataTypeToString(t);
    ++i;
  }
  details::ThrowArgumentError(
      name, "expected dtype " + expected + ", got " + DataTypeToString(x.dtype()));
}

/// The first element's address is a multiple of alignment bytes (for vectorised loads).
inline void CheckAlignment(TensorView x, int64_t alignment, const char* name) {
  uintptr_t first = reinterpret_cast<uintptr_t>(x.data_ptr()) + x.byte_offset();
  if (KFFI_LIKELY(alignment <= 0 || first % static_cast<uintptr_t>(alignment) == 0)) return;
  details::ThrowArgumentError(name, "expected data aligned to " + std::to_string(alignment) +
                                        " bytes, got an address " +
                                        std::to_string(first % static_cast<uintptr_t>(alignment)) +
                                        " bytes past a multiple of it (byte_offset " +
                                        std::to_string(x.byte_offset()) + ")");
}

/// Both tensors live on the same device (type and index).
inline void CheckSameDevice(TensorView a, TensorView b, const char* name_a, const char* name_b) {
  if (KFFI_LIKELY(a.device() == b.device())) return;
  KFFI_THROW(ValueError) << "Arguments `" << name_a << "` and `" << name_b
                         << "`: expected tensors on the same device, got " << a.device() << " and "
                         << b.device();
}

/// Both tensors have the same dtype.
inline void CheckSameDtype(TensorView a, TensorView b, const char* name_a, const char* name_b) {
  if (KFFI_LIKELY(a.dtype() == b.dtype())) return;
  KFFI_THROW(ValueError) << "Arguments `" << name_a << "` and `" << name_b
                         << "`: expected the same dtype, got " << a.dtype() << " and " << b.dtype();
}

/// Both tensors have the same shape.
inline void CheckSameShape(TensorView a, TensorView b, const char* name_a, const char* name_b) {
  if (KFFI_LIKELY(a.shape() == b.shape())) return;
  KFFI_THROW(ValueError) << "Arguments `" << name_a << "` and `" << name_b
                         << "`: expected the same shape, got " << a.shape() << " and " << b.shape();
}

}  // namespace kffi

#endif  // KFFI_TENSOR_CHECKS_H_
