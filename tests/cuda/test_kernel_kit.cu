// tests/cuda/test_kernel_kit.cu: kffi/half.h and kffi/dispatch.h in CUDA device code: the types
// convert on the device exactly as on the host (every half/bfloat16/fp8 pattern to float, and
// floats between every pair of neighbours back), interoperate with __half/__nv_bfloat16 and fp8,
// and DispatchDtype picks the kernel instantiation. Exits 77 (skipped) without a GPU; building
// it is the test that the kit compiles under nvcc.
// SPDX-License-Identifier: Apache-2.0
#include <kffi/cuda.h>
#include <kffi/dispatch.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

namespace {

#define CHECK(cond)                                                                 \
  do {                                                                              \
    if (!(cond)) {                                                                  \
      std::fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
      std::exit(1);                                                                 \
    }                                                                               \
  } while (0)
#define CUDA_OK(expr) CHECK((expr) == cudaSuccess)

// Layout: a kffi pointer may be read as the CUDA type (the static_asserts of half.h hold here).
static_assert(sizeof(kffi::half) == sizeof(__half) && alignof(kffi::half) == alignof(__half));

template <typename T>
__global__ void BitsToFloatKernel(const decltype(T{}.x) * bits, float* out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = T::from_bits(bits[i]);
}

template <typename T>
__global__ void FloatToBitsKernel(const float* in, decltype(T{}.x) * bits, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) bits[i] = T(in[i]).x;
}

// y = x * factor through CUDA's own half arithmetic: kffi::half <-> __half on the device.
__global__ void HalfTimesTwoCuda(const kffi::half* x, kffi::half* y, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = kffi::half(__hmul(static_cast<__half>(x[i]), __float2half(2.0f)));
}

template <typename T>
__global__ void ScaleKernel(const T* x, T* y, float factor, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = T(static_cast<float>(x[i]) * factor);
}

template <typename T>
void CheckFormat(const char* name) {
  using Bits = decltype(T{}.x);
  const int n = 1 << (8 * sizeof(Bits));
  std::vector<Bits> bits(n);
  for (int i = 0; i < n; ++i) bits[i] = static_cast<Bits>(i);
  // Floats: each value and its midpoint with the next pattern (ties), and just beside it.
  std::vector<float> probes;
  for (int i = 0; i < n; ++i) {
    const float a = T::from_bits(bits[i]);
    const float b = T::from_bits(static_cast<Bits>(i + 1 < n ? i + 1 : i));
    const float mid = (a + b) / 2;
    probes.insert(probes.end(),
                  {a, mid, std::nextafter(mid, INFINITY), std::nextafter(mid, -INFINITY)});
  }
  const int m = static_cast<int>(probes.size());
  Bits* d_bits = nullptr;
  float* d_f = nullptr;
  float* d_probes = nullptr;
  Bits* d_out = nullptr;
  CUDA_OK(cudaMalloc(&d_bits, n * sizeof(Bits)));
  CUDA_OK(cudaMalloc(&d_f, n * sizeof(float)));
  CUDA_OK(cudaMalloc(&d_probes, m * sizeof(float)));
  CUDA_OK(cudaMalloc(&d_out, m * sizeof(Bits)));
  CUDA_OK(cudaMemcpy(d_bits, bits.data(), n * sizeof(Bits), cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(d_probes, probes.data(), m * sizeof(float), cudaMemcpyHostToDevice));
  BitsToFloatKernel<T><<<(n + 255) / 256, 256>>>(d_bits, d_f, n);
  FloatToBitsKernel<T><<<(m + 255) / 256, 256>>>(d_probes, d_out, m);
  CUDA_OK(cudaGetLastError());
  std::vector<float> f(n);
  std::vector<Bits> out(m);
  CUDA_OK(cudaMemcpy(f.data(), d_f, n * sizeof(float), cudaMemcpyDeviceToHost));
  CUDA_OK(cudaMemcpy(out.data(), d_out, m * sizeof(Bits), cudaMemcpyDeviceToHost));
  // Bit for bit, but a NaN only needs to stay a NaN: the device's half conversion is the
  // hardware's, whose NaNs are canonical.
  for (int i = 0; i < n; ++i) {
    const float host = T::from_bits(bits[i]);
    CHECK(std::memcmp(&host, &f[i], sizeof(float)) == 0 || (std::isnan(host) && std::isnan(f[i])));
  }
  for (int i = 0; i < m; ++i) {
    const T host(probes[i]);
    CHECK(host.x == out[i] || (std::isnan(static_cast<float>(host)) &&
                               std::isnan(static_cast<float>(T::from_bits(out[i])))));
  }
  cudaFree(d_bits);
  cudaFree(d_f);
  cudaFree(d_probes);
  cudaFree(d_out);
  std::printf("%s: %d patterns, %d floats: device == host\n", name, n, m);
}

// Dispatch on a dtype at run time and launch the matching instantiation.
void CheckDispatch(DLDataType dtype) {
  const int n = 1000;
  kffi::DispatchDtype<float, kffi::half, kffi::bfloat16>(dtype, "x", [&](auto tag) {
    using T = typename decltype(tag)::type;
    std::vector<T> x(n);
    for (int i = 0; i < n; ++i) x[i] = T(static_cast<float>(i % 17) - 8.0f);
    T* d_x = nullptr;
    T* d_y = nullptr;
    CUDA_OK(cudaMalloc(&d_x, n * sizeof(T)));
    CUDA_OK(cudaMalloc(&d_y, n * sizeof(T)));
    CUDA_OK(cudaMemcpy(d_x, x.data(), n * sizeof(T), cudaMemcpyHostToDevice));
    ScaleKernel<T><<<(n + 255) / 256, 256>>>(d_x, d_y, 0.5f, n);
    CUDA_OK(cudaGetLastError());
    std::vector<T> y(n);
    CUDA_OK(cudaMemcpy(y.data(), d_y, n * sizeof(T), cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; ++i) CHECK(static_cast<float>(y[i]) == static_cast<float>(x[i]) * 0.5f);
    cudaFree(d_x);
    cudaFree(d_y);
  });
}

}  // namespace

int main() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    std::printf("no CUDA device: skipped\n");
    return 77;
  }
  CheckFormat<kffi::half>("half");
  CheckFormat<kffi::bfloat16>("bfloat16");
  CheckFormat<kffi::float8_e4m3fn>("float8_e4m3fn");
  CheckFormat<kffi::float8_e5m2>("float8_e5m2");
  CheckDispatch(kffi::dtypes::float32);
  CheckDispatch(kffi::dtypes::float16);
  CheckDispatch(kffi::dtypes::bfloat16);
  bool refused = false;
  try {
    CheckDispatch(kffi::dtypes::int32);
  } catch (const kffi::Error& e) {
    refused = std::strstr(e.what(), "x.dtype: expected float32|float16|bfloat16, got int32");
  }
  CHECK(refused);
  // kffi::half <-> __half on the device: CUDA's own multiply.
  const int n = 1 << 16;
  std::vector<kffi::half> x(n);
  for (int i = 0; i < n; ++i) x[i] = kffi::half::from_bits(static_cast<uint16_t>(i));
  kffi::half* d_x = nullptr;
  kffi::half* d_y = nullptr;
  CUDA_OK(cudaMalloc(&d_x, n * sizeof(kffi::half)));
  CUDA_OK(cudaMalloc(&d_y, n * sizeof(kffi::half)));
  CUDA_OK(cudaMemcpy(d_x, x.data(), n * sizeof(kffi::half), cudaMemcpyHostToDevice));
  HalfTimesTwoCuda<<<n / 256, 256>>>(d_x, d_y, n);
  CUDA_OK(cudaGetLastError());
  std::vector<kffi::half> y(n);
  CUDA_OK(cudaMemcpy(y.data(), d_y, n * sizeof(kffi::half), cudaMemcpyDeviceToHost));
  for (int i = 0; i < n; ++i) {
    const float want = static_cast<float>(kffi::half(static_cast<float>(x[i]) * 2.0f));
    const float got = y[i];
    CHECK(got == want || (std::isnan(got) && std::isnan(want)));
  }
  cudaFree(d_x);
  cudaFree(d_y);
  std::printf("dispatch and __half interop: ok\n");
  return 0;
}
