// tests/cpp/contract/contract_test_util.h: fake DLTensors and error capture shared by the contract
// tests.
// SPDX-License-Identifier: Apache-2.0
#ifndef KFFI_TESTS_CPP_CONTRACT_TEST_UTIL_H_
#define KFFI_TESTS_CPP_CONTRACT_TEST_UTIL_H_

#include <kffi/contract.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace kffi_test {

inline const DLDevice kCPU{kDLCPU, 0};
inline const DLDevice kCuda0{kDLCUDA, 0};
inline const DLDevice kCuda1{kDLCUDA, 1};
constexpr DLDataType kF32 = kffi::dtypes::float32;
constexpr DLDataType kF16 = kffi::dtypes::float16;

/// A 64-byte aligned buffer that fake tensors point into (never read).
inline char* FakeData() {
  alignas(64) static char data[1 << 12];
  return data;
}

/// A DLTensor over owned shape/strides; data points into FakeData() (never read). Copies keep
/// their own arrays (call Rebind after changing shape or strides).
struct FakeTensor {
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;
  DLTensor t;
  FakeTensor(std::vector<int64_t> s, DLDataType dtype = kF32, DLDevice dev = kCPU,
             std::vector<int64_t> st = {}, size_t data_offset = 0)
      : shape(std::move(s)), strides(std::move(st)) {
    t = DLTensor{FakeData() + data_offset,
                 dev,
                 static_cast<int32_t>(shape.size()),
                 dtype,
                 shape.data(),
                 strides.empty() ? nullptr : strides.data(),
                 0};
  }
  FakeTensor(const FakeTensor& o) : shape(o.shape), strides(o.strides), t(o.t) { Rebind(o); }
  FakeTensor& operator=(const FakeTensor& o) {
    shape = o.shape;
    strides = o.strides;
    t = o.t;
    Rebind(o);
    return *this;
  }
  operator kffi::TensorView() const { return kffi::TensorView(&t); }            // NOLINT
  operator kffi::ConstTensorView() const { return kffi::ConstTensorView(&t); }  // NOLINT

 private:
  void Rebind(const FakeTensor& o) {
    if (o.t.shape == o.shape.data()) t.shape = shape.data();
    if (o.t.strides != nullptr && o.t.strides == o.strides.data()) t.strides = strides.data();
  }
};

/// "Kind: message" of the kffi::Error that f throws, or "no error".
template <typename F>
std::string ErrorOf(F&& f) {
  try {
    f();
  } catch (const kffi::Error& e) {
    return e.kind() + ": " + e.message();
  }
  return "no error";
}

}  // namespace kffi_test

#endif  // KFFI_TESTS_CPP_CONTRACT_TEST_UTIL_H_
