// examples/torch_aoti/runner.cc: a C++ program with no Python that serves a .pt2 calling kffi ops
// (docs/deploy.md; tests/python/kffi_torch/test_torch_aoti_cpp.py builds and runs it).
//
//   cmake -S examples/torch_aoti -B build -DCMAKE_PREFIX_PATH="$(python -m kffi --cmake-dir);..."
//   (CMakeLists.txt beside it), or: c++ runner.cc -o runner $(python -m kffi.torch --cxxflags
//   --ldflags)
//   runner OPS MODEL.pt2 INPUT DEVICE
//
// Registers the kffi ops OPS names: "module:NS:LIBRARY" registers the contract functions of the
// kffi library LIBRARY as NS::<function> (kffi::torch::RegisterOps(module, ns)); a path registers
// those of a manifest (kffi.torch.save_ops); "-" none. Then it checks that the package's ops are
// registered (kffi::torch::CheckPackage), loads MODEL.pt2 with AOTIModelPackageLoader, runs it
// on the float32 values of INPUT (raw, native byte order) on DEVICE ("cpu" or "cuda") and prints
// the first output's values, one a line. An error is printed as "error: <message>" on stderr,
// with exit status 1.
// SPDX-License-Identifier: Apache-2.0
#include <kffi/module.h>
#include <kffi/torch.h>
#include <torch/csrc/inductor/aoti_package/model_package_loader.h>
#include <torch/torch.h>

#include <cstdio>
#include <exception>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: %s module:NS:LIBRARY|MANIFEST|- MODEL.pt2 INPUT cpu|cuda\n",
                 argv[0]);
    return 2;
  }
  try {
    const std::string ops = argv[1], model = argv[2], input = argv[3], device = argv[4];
    const std::string prefix = "module:";
    if (ops.compare(0, prefix.size(), prefix) == 0) {
      const size_t colon = ops.find(':', prefix.size());
      const std::string ns = ops.substr(prefix.size(), colon - prefix.size());
      const std::string library = colon == std::string::npos ? "" : ops.substr(colon + 1);
      int n = kffi::torch::RegisterOps(kffi::Module::Load(library), ns.c_str());
      std::fprintf(stderr, "registered %d kffi ops\n", n);
    } else if (ops != "-") {
      int n = kffi::torch::RegisterOps(ops);
      std::fprintf(stderr, "registered %d kffi ops\n", n);
    }
    kffi::torch::CheckPackage(model);  // a kffi error naming the ops not registered
    std::ifstream in(input, std::ios::binary);
    std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const int64_t n = static_cast<int64_t>(bytes.size() / sizeof(float));
    at::Tensor x = torch::from_blob(bytes.data(), {n}, torch::kFloat32).clone().to(device);
    torch::inductor::AOTIModelPackageLoader loader(model);
    std::vector<at::Tensor> outputs = loader.run({x});
    at::Tensor out = outputs.at(0).to(torch::kCPU).contiguous();
    const float* values = out.data_ptr<float>();
    for (int64_t i = 0; i < out.numel(); ++i) std::printf("%.9g\n", values[i]);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
