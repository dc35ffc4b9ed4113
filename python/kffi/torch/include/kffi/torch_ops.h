// python/kffi/torch/include/kffi/torch_ops.h: registers kffi ops in torch's dispatcher from C++,
// without Python, for AOTInductor packages (.pt2) and TorchScript served by a C++ program.
//
//   kffi::torch::RegisterOps("model.kffi_ops");   // written by kffi.torch.save_ops in Python
//   torch::inductor::AOTIModelPackageLoader loader("model.pt2");
//
// The flags to build such a program: `python -m kffi.torch --cxxflags --ldflags`
// (kffi.torch.cpp_flags()).
#ifndef KFFI_TORCH_OPS_H_
#define KFFI_TORCH_OPS_H_

#include <string>

#define KFFI_TORCH_API __attribute__((visibility("default")))

namespace kffi {
namespace torch {

/// Registers every op listed in the manifest file at `manifest_path` (made by
/// kffi.torch.save_ops): loads each op's kffi library (a relative path is relative to the
/// manifest's folder) after checking that its SHA-256 is the one recorded, defines the op's
/// schema and registers the same CPU, CUDA and Autograd kernels kffi.torch registers in Python.
/// Call it before loading a package that calls the ops. Returns the number of ops registered.
/// Throws kffi::Error (a std::exception): ValueError for a malformed manifest, a library whose
/// content differs from the recorded one, or an op name torch already has; RuntimeError when a
/// library cannot be loaded or lacks the function. Ops registered before the error stay.
KFFI_TORCH_API int RegisterOps(const std::string& manifest_path);

}  // namespace torch
}  // namespace kffi

#endif  // KFFI_TORCH_OPS_H_
