// tests/cuda/test_cuda_stream.cu: kernels launch on the environment stream; DeviceGuard; typed
// calls run on their first CUDA tensor's device (kffi::NoDeviceGuard opts out); errors.
// Exits 0 when all checks pass, 1 on a failure, 77 (CTest: skipped) on a machine without a GPU.
// SPDX-License-Identifier: Apache-2.0
#include <kffi/cuda.h>
#include <kffi/function.h>
#include <kffi/tensor.h>
#include <kffi/tensor_checks.h>

#include <cstdio>
#include <string>
#include <vector>

namespace {

int g_failures = 0;

#define EXPECT(cond)                                                                \
  do {                                                                              \
    if (!(cond)) {                                                                  \
      std::fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
      ++g_failures;                                                                 \
    }                                                                               \
  } while (0)

__global__ void ScaleKernel(float* out, const float* in, float factor, int64_t n) {
  int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = in[i] * factor;
}

// A kernel-library entry point written the usual way: validate, guard the device, take the
// caller's stream from the environment, launch.
void Scale(kffi::TensorView output, kffi::ConstTensorView input, double factor) {
  kffi::CheckDevice(input, kDLCUDA, "input");
  kffi::CheckContiguous(input, "input");
  kffi::CheckSameDevice(input, output, "input", "output");
  kffi::CheckSameShape(input, output, "input", "output");
  kffi::CheckDtype(input, {kffi::dtypes::float32}, "input");
  kffi::cuda::DeviceGuard guard(input.device());
  cudaStream_t stream = kffi::cuda::current_stream(input.device());
  int64_t n = input.numel();
  int threads = 256;
  int blocks = static_cast<int>((n + threads - 1) / threads);
  ScaleKernel<<<blocks, threads, 0, stream>>>(output.data<float>(), input.data<float>(),
                                              static_cast<float>(factor), n);
  KFFI_CUDA_CHECK(cudaGetLastError());
}

// Device memory for Tensor::FromNDAlloc.
struct CudaAlloc {
  void AllocData(DLTensor* t) { KFFI_CUDA_CHECK(cudaMalloc(&t->data, kffi::GetDataSize(*t))); }
  void FreeData(DLTensor* t) { (void)cudaFree(t->data); }
};

std::vector<float> ToHost(const kffi::Tensor& t) {
  std::vector<float> out(static_cast<size_t>(t.numel()));
  KFFI_CUDA_CHECK(
      cudaMemcpy(out.data(), t.data_ptr(), out.size() * sizeof(float), cudaMemcpyDeviceToHost));
  return out;
}

bool AllEqual(const std::vector<float>& v, const std::vector<float>& base, float factor) {
  for (size_t i = 0; i < v.size(); ++i) {
    if (v[i] != base[i] * factor) return false;
  }
  return true;
}

void TestKernelRunsOnEnvironmentStream() {
  int device = 0;
  KFFI_CUDA_CHECK(cudaGetDevice(&device));
  DLDevice dev{kDLCUDA, device};
  kffi::Function scale = kffi::Function::FromTyped(Scale, "scale");
  const int64_t n = 1000;
  kffi::Tensor x = kffi::Tensor::FromNDAlloc(CudaAlloc(), {n}, kffi::dtypes::float32, dev);
  kffi::Tensor y = kffi::Tensor::FromNDAlloc(CudaAlloc(), {n}, kffi::dtypes::float32, dev);
  std::vector<float> host(n);
  for (int64_t i = 0; i < n; ++i) host[i] = static_cast<float>(i);
  KFFI_CUDA_CHECK(cudaMemcpy(x.data_ptr(), host.data(), n * sizeof(float), cudaMemcpyHostToDevice));

  cudaStream_t stream = nullptr;
  KFFI_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  KFFIStreamHandle prev = reinterpret_cast<KFFIStreamHandle>(1);
  EXPECT(KFFIEnvSetStream(kDLCUDA, device, stream, &prev) == 0);
  EXPECT(prev == nullptr);
  EXPECT(kffi::cuda::current_stream(dev) == stream);
  EXPECT(kffi::cuda::current_stream(device) == stream);

  // Capture the stream: the launch lands in the graph only if it went to that stream.
  cudaGraph_t graph = nullptr;
  KFFI_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  scale(y, x, 2.0);
  KFFI_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  size_t num_nodes = 0;
  KFFI_CUDA_CHECK(cudaGraphGetNodes(graph, nullptr, &num_nodes));
  EXPECT(num_nodes == 1);
  cudaGraphExec_t exec = nullptr;
  KFFI_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  KFFI_CUDA_CHECK(cudaGraphLaunch(exec, stream));
  KFFI_CUDA_CHECK(cudaStreamSynchronize(stream));
  EXPECT(AllEqual(ToHost(y), host, 2.0f));

  // Uncaptured: an event recorded on the stream after the call completes only after the kernel.
  cudaEvent_t done = nullptr;
  KFFI_CUDA_CHECK(cudaEventCreate(&done));
  scale(y, x, 3.0);
  KFFI_CUDA_CHECK(cudaEventRecord(done, stream));
  KFFI_CUDA_CHECK(cudaEventSynchronize(done));
  EXPECT(cudaStreamQuery(stream) == cudaSuccess);
  EXPECT(AllEqual(ToHost(y), host, 3.0f));

  // A CPU tensor is refused before anything launches.
  kffi::Tensor cpu = kffi::Tensor::FromEnvAlloc({n}, kffi::dtypes::float32, DLDevice{kDLCPU, 0});
  try {
    scale(y, cpu, 1.0);
    EXPECT(false);
  } catch (const kffi::Error& e) {
    EXPECT(e.kind() == "ValueError");
    EXPECT(e.message() == "input.device: expected cuda, got cpu");
  }

  EXPECT(KFFIEnvSetStream(kDLCUDA, device, prev, nullptr) == 0);
  EXPECT(kffi::cuda::current_stream(dev) == nullptr);
  KFFI_CUDA_CHECK(cudaEventDestroy(done));
  KFFI_CUDA_CHECK(cudaGraphExecDestroy(exec));
  KFFI_CUDA_CHECK(cudaGraphDestroy(graph));
  KFFI_CUDA_CHECK(cudaStreamDestroy(stream));
}

void TestDeviceGuardRestores(int count) {
  int original = -1, current = -1;
  KFFI_CUDA_CHECK(cudaGetDevice(&original));
  {
    kffi::cuda::DeviceGuard guard(count - 1);
    KFFI_CUDA_CHECK(cudaGetDevice(&current));
    EXPECT(current == count - 1);
    EXPECT(guard.original_device() == original);
    guard.set_device(0);
    KFFI_CUDA_CHECK(cudaGetDevice(&current));
    EXPECT(current == 0);
  }
  KFFI_CUDA_CHECK(cudaGetDevice(&current));
  EXPECT(current == original);
  try {
    kffi::cuda::DeviceGuard bad(count + 3);
    EXPECT(false);
  } catch (const kffi::Error& e) {
    EXPECT(e.kind() == "RuntimeError");
    EXPECT(e.message().find("cudaErrorInvalidDevice") != std::string::npos);
  }
  KFFI_CUDA_CHECK(cudaGetDevice(&current));
  EXPECT(current == original);
}

int CurrentDevice() {
  int device = -1;
  KFFI_CUDA_CHECK(cudaGetDevice(&device));
  return device;
}

// The device current while a typed function runs.
int64_t DeviceInside(kffi::ConstTensorView) { return CurrentDevice(); }

// A typed call runs with its first CUDA tensor's device current and restores the caller's after;
// kffi::NoDeviceGuard leaves the caller's. Meaningful with two or more GPUs (the tensor on the
// last one, device 0 current); with one it checks that nothing changes.
void TestTypedCallsRunOnTheTensorsDevice(int count) {
  const int last = count - 1;
  kffi::Tensor x;
  {
    kffi::cuda::DeviceGuard guard(last);
    x = kffi::Tensor::FromNDAlloc(CudaAlloc(), {4}, kffi::dtypes::float32, DLDevice{kDLCUDA, last});
  }
  KFFI_CUDA_CHECK(cudaSetDevice(0));
  kffi::Function guarded = kffi::Function::FromTyped(&DeviceInside, "inside");
  kffi::Function unguarded = kffi::Function::FromTyped(kffi::NoDeviceGuard<DeviceInside>, "inside");
  EXPECT(guarded(x).cast<int64_t>() == last);
  EXPECT(CurrentDevice() == 0);
  EXPECT(unguarded(x).cast<int64_t>() == 0);
  EXPECT(CurrentDevice() == 0);
  // The runtime's functions directly: entering the current device changes nothing.
  void* restore = &restore;
  EXPECT(KFFIEnvEnterDevice(kDLCUDA, 0, &restore) == 0);
  EXPECT(restore == nullptr);
  EXPECT(KFFIEnvEnterDevice(kDLCUDA, last, &restore) == 0);
  EXPECT(CurrentDevice() == last);
  EXPECT((restore == nullptr) == (last == 0));
  KFFIEnvRestoreDevice(kDLCUDA, restore);
  EXPECT(CurrentDevice() == 0);
  EXPECT(KFFIEnvEnterDevice(kDLCUDA, count, &restore) == -1);  // no such device
  KFFIObjectHandle err = nullptr;
  KFFIErrorMoveFromRaised(&err);
  EXPECT(err != nullptr);
  if (err != nullptr) KFFIObjectDecRef(err);
}

void TestCudaCheckMessage() {
  std::string expected = std::string("CUDA error: ") + cudaGetErrorName(cudaErrorInvalidDevice) +
                         ": " + cudaGetErrorString(cudaErrorInvalidDevice) +
                         " (in cudaSetDevice(-1))";
  try {
    KFFI_CUDA_CHECK(cudaSetDevice(-1));
    EXPECT(false);
  } catch (const kffi::Error& e) {
    EXPECT(e.kind() == "RuntimeError");
    EXPECT(e.message() == expected);
    EXPECT(e.message().rfind("CUDA error: cudaErrorInvalidDevice: ", 0) == 0);
    EXPECT(e.backtrace().find("test_cuda_stream.cu") != std::string::npos);
    if (e.message() != expected) std::fprintf(stderr, "got: %s\n", e.message().c_str());
  }
  EXPECT(cudaGetLastError() == cudaSuccess);  // the check cleared the recorded error
}

}  // namespace

int main() {
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess || count == 0) {
    std::printf("SKIPPED: no CUDA device (%s)\n",
                err != cudaSuccess ? cudaGetErrorString(err) : "device count is 0");
    return 77;
  }
  try {
    TestKernelRunsOnEnvironmentStream();
    TestDeviceGuardRestores(count);
    TestTypedCallsRunOnTheTensorsDevice(count);
    TestCudaCheckMessage();
  } catch (const kffi::Error& e) {
    std::fprintf(stderr, "unexpected error:\n%s\n", e.FullMessage().c_str());
    return 1;
  }
  if (g_failures != 0) {
    std::fprintf(stderr, "%d check(s) failed\n", g_failures);
    return 1;
  }
  std::printf("all CUDA checks passed on %d device(s)\n", count);
  return 0;
}
