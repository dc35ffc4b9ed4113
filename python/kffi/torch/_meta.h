// python/kffi/torch/_meta.h: the meta (fake) kernel of a kffi op, from its contract (_meta.cc).
// SPDX-License-Identifier: Apache-2.0
#ifndef KFFI_TORCH_META_H_
#define KFFI_TORCH_META_H_

#include <torch/library.h>

#include <string>

#include "_signature.h"

namespace kffi {
namespace torchglue {

/// Registers, in lib (the op's namespace), the Meta kernel of the op `name` with signature sig:
/// outputs shaped from the contract (symbolic sizes stay symbolic), no Python involved.
void RegisterMetaKernel(::torch::Library* lib, const std::string& name, const OpSignature& sig);

}  // namespace torchglue
}  // namespace kffi

#endif  // KFFI_TORCH_META_H_
