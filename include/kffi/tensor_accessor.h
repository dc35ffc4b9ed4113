// include/kffi/tensor_accessor.h: TensorAccessor: strided element access for CPU kernels.
// SPDX-License-Identifier: Apache-2.0
#ifndef KFFI_TENSOR_ACCESSOR_H_
#define KFFI_TENSOR_ACCESSOR_H_

#include <kffi/details/core.h>

#include <cstddef>
#include <cstdint>

namespace kffi {
namespace details {

/// ValueError: accessor<T, N>() of a tensor whose ndim is not N (cold).
[[noreturn]] KFFI_NOINLINE inline void ThrowAccessorNdim(size_t want, int32_t got) {
  RaiseArgumentError("ValueError", "accessor<T, N>().ndim",
                     FormatInt64(static_cast<int64_t>(want)).text, FormatInt64(got).text, nullptr,
                     -1, nullptr);
  ThrowRaisedErrorOutOfLine();
}

/// IndexError: an accessor index out of bounds (cold; debug builds check it).
[[noreturn]] KFFI_NOINLINE inline void ThrowAccessorIndex(int64_t index, int64_t size) {
  const Int64Text i = FormatInt64(index);
  const Int64Text n = FormatInt64(size);
  const char* parts[] = {"Tensor accessor: index ", i.text,
                         " is out of bounds for a dimension of size ", n.text};
  KFFIErrorSetRaisedFromCStrParts("IndexError", parts, 4);
  ThrowRaisedErrorOutOfLine();
}

}  // namespace details

/// Element access to a strided tensor of N dimensions for CPU kernels: acc[i][j] or acc(i, j)
/// is the element at data + i * stride(0) + j * stride(1) (strides in elements). It holds the
/// data pointer, sizes and strides by value: valid while the tensor's memory is. Debug builds
/// check each index against its size (IndexError).
template <typename T, size_t N>
class TensorAccessor;

namespace details {
/// A sub-accessor (acc[i] of a TensorAccessor<T, N + 1>): views the parent's sizes and strides.
template <typename T, size_t N>
class TensorAccessorRef {
 public:
  TensorAccessorRef(T* data, const int64_t* sizes, const int64_t* strides) noexcept
      : data_(data), sizes_(sizes), strides_(strides) {}
  /// Element i of the outermost dimension: a sub-accessor, or the element when N is 1.
  decltype(auto) operator[](int64_t i) const { return Index<T, N>(data_, sizes_, strides_, i); }
  int64_t size(size_t d) const { return sizes_[d]; }
  int64_t stride(size_t d) const { return strides_[d]; }

  template <typename U, size_t M>
  static decltype(auto) Index(U* data, const int64_t* sizes, const int64_t* strides, int64_t i) {
#ifndef NDEBUG
    if (KFFI_UNLIKELY(i < 0 || i >= sizes[0])) ThrowAccessorIndex(i, sizes[0]);
#endif
    if constexpr (M == 1) {
      return static_cast<U&>(data[i * strides[0]]);
    } else {
      return TensorAccessorRef<U, M - 1>(data + i * strides[0], sizes + 1, strides + 1);
    }
  }

 private:
  T* data_;
  const int64_t* sizes_;
  const int64_t* strides_;
};
}  // namespace details

template <typename T, size_t N>
class TensorAccessor {
  static_assert(N >= 1, "an accessor has at least one dimension");

 public:
  /// data: the first element (data + byte_offset); sizes and strides: N values each (copied).
  TensorAccessor(T* data, const int64_t* sizes, const int64_t* strides) noexcept : data_(data) {
    for (size_t d = 0; d < N; ++d) {
      sizes_[d] = sizes[d];
      strides_[d] = strides[d];
    }
  }
  /// Element i of the outermost dimension: a sub-accessor (valid while this accessor lives), or
  /// the element when N is 1.
  decltype(auto) operator[](int64_t i) const {
    return details::TensorAccessorRef<T, N>::template Index<T, N>(data_, sizes_, strides_, i);
  }
  /// The element at (i0, ..., iN-1).
  template <typename... I>
  T& operator()(I... index) const {
    static_assert(sizeof...(I) == N, "give one index per dimension");
    const int64_t at[N] = {static_cast<int64_t>(index)...};
    int64_t offset = 0;
    for (size_t d = 0; d < N; ++d) {
#ifndef NDEBUG
      if (KFFI_UNLIKELY(at[d] < 0 || at[d] >= sizes_[d])) {
        details::ThrowAccessorIndex(at[d], sizes_[d]);
      }
#endif
      offset += at[d] * strides_[d];
    }
    return data_[offset];
  }
  int64_t size(size_t d) const { return sizes_[d]; }
  int64_t stride(size_t d) const { return strides_[d]; }
  T* data() const { return data_; }

 private:
  T* data_;
  int64_t sizes_[N];
  int64_t strides_[N];
};

}  // namespace kffi

#endif  // KFFI_TENSOR_ACCESSOR_H_
