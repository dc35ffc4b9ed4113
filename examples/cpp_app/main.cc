// examples/cpp_app/main.cc: a C++ program that loads the scale kernel libraries and calls them.
//   cpp_app <libscale_cpu.so> [<libscale_cuda.so>]
// Exits non-zero when a result or an error message is not what it should be, so a test can run
// it. The CUDA library is called on a GPU when the program was built with the CUDA runtime and a
// GPU is present; otherwise only its argument checks are shown.
// SPDX-License-Identifier: Apache-2.0
#include <kffi/dispatch.h>
#include <kffi/dtype.h>
#include <kffi/env.h>
#include <kffi/module.h>
#include <kffi/tensor.h>

#include <cstdint>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#if defined(KFFI_EXAMPLE_WITH_CUDA)
#include <cuda_runtime.h>
#endif

namespace {

int failures = 0;

void Expect(bool ok, const std::string& what) {
  std::cout << (ok ? "  ok: " : "  FAILED: ") << what << "\n";
  if (!ok) ++failures;
}

// Calls fn, which must throw: prints the error a user would see and checks its start.
template <typename F>
void ExpectError(F&& fn, const std::string& expected_prefix) {
  try {
    fn();
  } catch (const kffi::Error& e) {
    std::cout << "  error as the caller sees it: " << e.what() << "\n";
    Expect(std::string(e.what()).rfind(expected_prefix, 0) == 0, "the expected error");
    return;
  }
  Expect(false, "a call that should fail raised nothing");
}

constexpr int64_t kN = 1000;
constexpr DLDevice kCpu{kDLCPU, 0};

// float16 and bfloat16 bit patterns of 1.5 and 3 (1.5 * 2 == 3 exactly in both), for the GPU
// buffers copied as raw bytes.
struct HalfCase {
  DLDataType dtype;
  uint16_t one_and_a_half;
  uint16_t three;
};
const HalfCase kHalfCases[] = {{kffi::dtypes::float16, 0x3e00, 0x4200},
                               {kffi::dtypes::bfloat16, 0x3fc0, 0x4040}};

void RunCpu(const std::string& path) {
  std::cout << "CPU library\n";
  kffi::Module mod = kffi::Module::Load(path);
  std::cout << "  loaded " << mod.name() << "\n";
  for (const std::string& name : mod.ListFunctions()) std::cout << "  exports " << name << "\n";
  std::cout << "  metadata of scale: " << mod.GetFunctionMetadata("scale").value_or("(none)")
            << "\n";
  kffi::Function scale = mod.GetFunctionRequired("scale");

  // FromEnvAlloc: the calling framework's allocator when one is set, else aligned host memory.
  kffi::Tensor x = kffi::Tensor::FromEnvAlloc({kN}, kffi::dtypes::float32, kCpu);
  kffi::Tensor y = kffi::Tensor::FromEnvAlloc({kN}, kffi::dtypes::float32, kCpu);
  for (int64_t i = 0; i < kN; ++i) x.data<float>()[i] = 0.5f * static_cast<float>(i);
  scale(y, x, 3.0);
  bool all = true;
  const float* out = y.const_data<float>();
  for (int64_t i = 0; i < kN; ++i) all = all && out[i] == 1.5f * static_cast<float>(i);
  Expect(all, "float32: y == x * 3");

  // kffi::half and kffi::bfloat16 (kffi/half.h) hold the 16-bit elements and convert to float.
  for (const HalfCase& c : kHalfCases) {
    kffi::DispatchDtype<kffi::half, kffi::bfloat16>(c.dtype, "dtype", [&](auto tag) {
      using T = typename decltype(tag)::type;
      kffi::Tensor hx = kffi::Tensor::FromEnvAlloc({kN}, c.dtype, kCpu);
      kffi::Tensor hy = kffi::Tensor::FromEnvAlloc({kN}, c.dtype, kCpu);
      for (int64_t i = 0; i < kN; ++i) hx.data<T>()[i] = T(1.5f);
      scale(hy, hx, 2.0);
      bool same = true;
      for (int64_t i = 0; i < kN; ++i) same = same && hy.const_data<T>()[i] == 3.0f;
      Expect(same && T(1.5f).x == c.one_and_a_half,
             kffi::DataTypeToString(c.dtype) + ": 1.5 * 2 == 3");
    });
  }

  // Bad calls: the messages name the argument, the expectation and what was passed.
  ExpectError([&] { scale(y, x, "two"); },
              "TypeError: factor: expected float, got str (argument #2 of "
              "`scale(y: Tensor(mut), x: Tensor, factor: float) -> None`)");
  kffi::Tensor wrong = kffi::Tensor::FromEnvAlloc({kN}, kffi::dtypes::float16, kCpu);
  ExpectError([&] { scale(wrong, x, 2.0); },
              "TypeError: y.dtype: expected float32 (as x.dtype), got float16");
  // y may be written (Tensor(mut)): read-only memory is refused for it, and taken for x.
  kffi::Tensor read_only = x.as_read_only();
  scale(y, read_only, 1.0);
  Expect(y.const_data<float>()[2] == 1.0f, "a read-only x is read");
  ExpectError([&] { scale(read_only, x, 2.0); },
              "ValueError: y: expected a writable tensor (the function may write it), got a "
              "read-only tensor");
  ExpectError([&] { mod.GetFunctionRequired("scal"); },
              "AttributeError: Module `" + mod.name() + "` has no function `scal`");
}

#if defined(KFFI_EXAMPLE_WITH_CUDA)
// Device memory for FromNDAlloc. The allocator's code is this program's, which outlives the
// tensors; in a kernel library prefer FromEnvAlloc, whose memory the caller's framework owns.
struct CudaAlloc {
  void AllocData(DLTensor* t) {
    cudaError_t err = cudaMalloc(&t->data, static_cast<size_t>(kffi::GetDataSize(*t)));
    KFFI_CHECK(err == cudaSuccess, MemoryError) << "cudaMalloc failed: " << cudaGetErrorString(err);
  }
  void FreeData(DLTensor* t) { cudaFree(t->data); }
};

void CheckCuda(cudaError_t err, const char* what) {
  if (err != cudaSuccess) KFFI_THROW(RuntimeError) << what << ": " << cudaGetErrorString(err);
}

void RunCudaOnGpu(const kffi::Function& scale) {
  const DLDevice gpu{kDLCUDA, 0};
  kffi::Tensor x = kffi::Tensor::FromNDAlloc(CudaAlloc(), {kN}, kffi::dtypes::float32, gpu);
  kffi::Tensor y = kffi::Tensor::FromNDAlloc(CudaAlloc(), {kN}, kffi::dtypes::float32, gpu);
  std::vector<float> host(kN);
  for (int64_t i = 0; i < kN; ++i) host[i] = 0.5f * static_cast<float>(i);
  CheckCuda(cudaMemcpy(x.data(), host.data(), kN * sizeof(float), cudaMemcpyHostToDevice),
            "cudaMemcpy");
  // The kernel launches on the stream the environment names, as with a framework's stream.
  cudaStream_t stream;
  CheckCuda(cudaStreamCreate(&stream), "cudaStreamCreate");
  {
    kffi::env::StreamScope scope(gpu, stream);
    scale(y, x, 3.0);
  }
  CheckCuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  CheckCuda(cudaStreamDestroy(stream), "cudaStreamDestroy");
  CheckCuda(cudaMemcpy(host.data(), y.const_data(), kN * sizeof(float), cudaMemcpyDeviceToHost),
            "cudaMemcpy");
  bool all = true;
  for (int64_t i = 0; i < kN; ++i) all = all && host[i] == 1.5f * static_cast<float>(i);
  Expect(all, "float32 on the GPU: y == x * 3");

  for (const HalfCase& c : kHalfCases) {
    kffi::Tensor hx = kffi::Tensor::FromNDAlloc(CudaAlloc(), {kN}, c.dtype, gpu);
    kffi::Tensor hy = kffi::Tensor::FromNDAlloc(CudaAlloc(), {kN}, c.dtype, gpu);
    std::vector<uint16_t> bits(kN, c.one_and_a_half);
    CheckCuda(cudaMemcpy(hx.data(), bits.data(), kN * 2, cudaMemcpyHostToDevice), "cudaMemcpy");
    scale(hy, hx, 2.0);
    CheckCuda(cudaMemcpy(bits.data(), hy.const_data(), kN * 2, cudaMemcpyDeviceToHost),
              "cudaMemcpy");
    bool same = true;
    for (uint16_t b : bits) same = same && b == c.three;
    Expect(same, kffi::DataTypeToString(c.dtype) + " on the GPU: 1.5 * 2 == 3");
  }
}
#endif

void RunCuda(const std::string& path) {
  std::cout << "CUDA library\n";
  kffi::Module mod = kffi::Module::Load(path);
  std::cout << "  loaded " << mod.name() << "\n";
  kffi::Function scale = mod.GetFunctionRequired("scale");
  // The argument checks run before any CUDA call, so they work without a GPU.
  kffi::Tensor cpu_tensor = kffi::Tensor::FromEnvAlloc({kN}, kffi::dtypes::float32, kCpu);
  ExpectError([&] { scale(cpu_tensor, cpu_tensor, 2.0); },
              "ValueError: x.device: expected cuda, got cpu");
#if defined(KFFI_EXAMPLE_WITH_CUDA)
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    std::cout << "  skipped the GPU run: no CUDA device\n";
    return;
  }
  RunCudaOnGpu(scale);
#else
  std::cout << "  skipped the GPU run: this program was built without the CUDA runtime\n";
#endif
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || argc > 3) {
    std::cerr << "usage: " << argv[0] << " <libscale_cpu.so> [<libscale_cuda.so>]\n";
    return 2;
  }
  try {
    RunCpu(argv[1]);
    if (argc == 3) RunCuda(argv[2]);
  } catch (const kffi::Error& e) {
    std::cerr << "unexpected error:\n" << e.FullMessage() << "\n";
    return 1;
  }
  std::cout << (failures == 0 ? "all checks passed" : "some checks FAILED") << "\n";
  return failures == 0 ? 0 : 1;
}
