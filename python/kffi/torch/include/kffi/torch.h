// python/kffi/torch/include/kffi/torch.h: registers kffi ops in torch's dispatcher from C++,
// without Python, for AOTInductor packages (.pt2) and TorchScript served by a C++ program.
//
//   kffi::torch::RegisterOps(kffi::Module::Load("kernels.so"), "my_ops");
//   kffi::torch::CheckPackage("model.pt2");        // optional: a kffi error naming missing ops
//   torch::inductor::AOTIModelPackageLoader loader("model.pt2");
//
// Build it with CMake (find_package(kffi), target kffi::torch; docs/deploy.md) or with the flags
// of `python -m kffi.torch --cxxflags --ldflags` (kffi.torch.cpp_flags()).
// SPDX-License-Identifier: Apache-2.0
#ifndef KFFI_TORCH_H_
#define KFFI_TORCH_H_

#include <kffi/module.h>

#include <string>

#define KFFI_TORCH_API __attribute__((visibility("default")))

namespace kffi {
namespace torch {

/// Registers every op listed in the manifest file at `manifest_path` (made by
/// kffi.torch.save_ops): loads each op's kffi library (a relative path is relative to the
/// manifest's folder) after checking that its SHA-256 is the one recorded, defines the op's
/// schema and registers the same CPU, CUDA and Autograd kernels kffi.torch registers in Python,
/// and, for a function with a contract, a Meta kernel computed from it.
/// Call it before loading a package that calls the ops. Returns the number of ops registered.
/// Throws kffi::Error (a std::exception): ValueError for a malformed manifest, a library whose
/// content differs from the recorded one, or an op name torch already has; RuntimeError when a
/// library cannot be loaded or lacks the function. Ops registered before the error stay.
KFFI_TORCH_API int RegisterOps(const std::string& manifest_path);

/// Registers every contract function of `module` as the op `ns::<function name>`, as
/// kffi.load_module(path).torch_ops(ns) does in Python: the same schema (from the function's
/// metadata), the same CPU, CUDA and Autograd kernels and stream handling, and a Meta kernel
/// computed from the contract, so fake tensors (torch.export, AOTInductor) need no Python.
/// Functions without a contract are skipped. Returns the number of ops registered. Throws
/// kffi::Error: ValueError for a namespace that is not an identifier or an op name torch already
/// has, TypeError for a contract function a torch op cannot take (kffi.torch's message). Ops
/// registered before the error stay.
KFFI_TORCH_API int RegisterOps(const kffi::Module& module, const char* ns);

/// Checks that every op the AOTInductor package at `package_path` calls outside its compiled
/// code (kffi ops, other custom ops) is registered in this process; call it before
/// AOTIModelPackageLoader to get a kffi-worded error instead of torch's "Could not find schema".
/// Returns the number of such ops; throws kffi::Error (ValueError) listing the missing ones, or
/// when the file is not a package.
KFFI_TORCH_API int CheckPackage(const std::string& package_path);

}  // namespace torch
}  // namespace kffi

#endif  // KFFI_TORCH_H_
