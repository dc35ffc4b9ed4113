// tests/cpp/core/tensor_producer.h: a DLPack producer for the tensor tests (counts its deleter
// runs).
// SPDX-License-Identifier: Apache-2.0
#ifndef KFFI_TESTS_CPP_TENSOR_PRODUCER_H_
#define KFFI_TESTS_CPP_TENSOR_PRODUCER_H_

#include <kffi/tensor.h>

#include <type_traits>
#include <utility>
#include <vector>

namespace kffi_test {

constexpr DLDevice kCPU{kDLCPU, 0};

// A producer-side tensor: owns its data and layout, counts how often its deleter runs.
template <typename Managed>
struct Produced {
  Managed managed{};
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;
  std::vector<float> data;
  int* deletes;

  static void Delete(Managed* self) {
    auto* p = static_cast<Produced*>(self->manager_ctx);
    ++*p->deletes;
    delete p;
  }
  // A float32 CPU tensor; empty strides means DLTensor.strides = NULL.
  static Managed* Make(std::vector<int64_t> shape, std::vector<int64_t> strides, int* deletes) {
    auto* p = new Produced();
    p->shape = std::move(shape);
    p->strides = std::move(strides);
    // Real memory for small shapes; a hostile (huge or invalid) shape gets 16 elements, which an
    // import that validates first never reads.
    int64_t n = 1;
    for (int64_t d : p->shape) {
      if (d < 0 || kffi::details::MulOverflow(n, d, &n) || n > (int64_t{1} << 20)) {
        n = 16;
        break;
      }
    }
    p->data.assign(static_cast<size_t>(n < 16 ? 16 : n), 1.0f);
    p->deletes = deletes;
    DLTensor& t = p->managed.dl_tensor;
    t.data = p->data.data();
    t.device = kCPU;
    t.ndim = static_cast<int32_t>(p->shape.size());
    t.dtype = kffi::dtypes::float32;
    t.shape = p->shape.data();
    t.strides = p->strides.empty() ? nullptr : p->strides.data();
    t.byte_offset = 0;
    p->managed.manager_ctx = p;
    p->managed.deleter = &Produced::Delete;
    if constexpr (std::is_same_v<Managed, DLManagedTensorVersioned>) {
      p->managed.version = DLPackVersion{1, 0};
    }
    return &p->managed;
  }
};
using ProducedV0 = Produced<DLManagedTensor>;
using ProducedV1 = Produced<DLManagedTensorVersioned>;

}  // namespace kffi_test

#endif  // KFFI_TESTS_CPP_TENSOR_PRODUCER_H_
