// python/kffi/torch/_dispatch.h: the dispatcher glue's one registration function, shared by
// kffi.torch (Python, through _dispatch.cc's export) and kffi::torch::RegisterOps (_register.cc).
// SPDX-License-Identifier: Apache-2.0
#ifndef KFFI_TORCH_DISPATCH_H_
#define KFFI_TORCH_DISPATCH_H_

#include <kffi/container/array.h>
#include <kffi/function.h>
#include <kffi/string.h>

#include <cstdint>
#include <string>

namespace kffi {
namespace torchglue {

/// Where a kffi parameter's value comes from in the call plan.
enum Source : int64_t { kArg = 0, kStream = 1, kAlloc = 2, kNone = 3, kRecord = 4 };
/// What the op returns.
enum RetKind : int64_t {
  kRetNone = 0,
  kRetTensor = 1,
  kRetTensors = 2,
  kRetTensorList = 3,
  kRetInt = 4,
  kRetFloat = 5,
  kRetBool = 6
};

/// Registers fn as the CPU, CUDA and (no-rule) Autograd kernels of the op `qualname`, defined
/// beforehand with num_schema_args arguments. plan_items is the call plan (OpSignature::Plan,
/// _signature.h) and record_names what its records are (OpSignature::RecordNames): each type is
/// found by its key in the live registry and each field by its name in that type, and each
/// record's key must be the type the function declares for that parameter (param_types: the
/// type text of every parameter, from its metadata). `mutated` names the arguments the op
/// writes (comma-separated), `written` their indices. Returns [unregister the backend kernels,
/// unregister the Autograd kernel, register it again]; the registrations live until
/// unregistered (dropping the functions keeps them). ValueError for a plan that does not hold.
Array<Function> RegisterOp(const std::string& qualname, Function fn, int64_t num_schema_args,
                           Array<int64_t> plan_items, Array<String> record_names,
                           Array<String> param_types, std::string mutated, Array<int64_t> written);

/// The packed dtype (code | bits << 8 | lanes << 16) of a dtype name ("float32"), as plans hold.
int64_t PackedDType(const std::string& name);

}  // namespace torchglue
}  // namespace kffi

#endif  // KFFI_TORCH_DISPATCH_H_
