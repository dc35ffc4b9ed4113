// python/kffi/torch/_dispatch.h: the dispatcher glue's one registration function, shared by
// kffi.torch (Python, through _dispatch.cc's export) and kffi::torch::RegisterOps (_register.cc).
#ifndef KFFI_TORCH_DISPATCH_H_
#define KFFI_TORCH_DISPATCH_H_

#include <kffi/container/array.h>
#include <kffi/function.h>

#include <cstdint>
#include <string>

namespace kffi {
namespace torchglue {

/// Registers fn as the CPU, CUDA and (no-rule) Autograd kernels of the op `qualname`, defined
/// beforehand with num_schema_args arguments. plan_items is the call plan of _schema.py's
/// `native_plan`; `mutated` names the arguments the op writes (comma-separated), `written` their
/// indices. Returns [unregister the backend kernels, unregister the Autograd kernel, register it
/// again]; the registrations live until unregistered (dropping the functions keeps them).
Array<Function> RegisterOp(const std::string& qualname, Function fn, int64_t num_schema_args,
                           Array<int64_t> plan_items, std::string mutated, Array<int64_t> written);

}  // namespace torchglue
}  // namespace kffi

#endif  // KFFI_TORCH_DISPATCH_H_
