// src/core/argument_message.cc: kffi's one format of argument errors, and the caller's names of
// types.
//
// Every argument error kffi raises reads "<subject>: expected <expected>, got <got> (argument #k
// of `<signature>`)": the typed calls' conversions (KFFIErrorSetRaisedArgument from
// kffi/details/function.h), the checks kernels call (kffi/tensor_checks.h), the contract
// checks (contract_explain.cc) and the Python binding's own argument errors all build it here
// (ArgumentMessage; error.cc raises it). The contract tests link this file with the contract
// compiler's: it defines no C ABI function, so their copy hides none of libkffi's.
// SPDX-License-Identifier: Apache-2.0
#include <kffi/c_api.h>
#include <kffi/type_traits.h>

#include <string>
#include <string_view>

#include "core/runtime_internal.h"

namespace kffi {
namespace details {

std::string ArgumentMessage(std::string_view subject, std::string_view expected,
                            std::string_view got, std::string_view context,
                            std::string_view signature, size_t* got_offset) {
  std::string out(subject);
  out += ": ";
  if (!expected.empty()) {
    out.append("expected ").append(expected).append(", got ");
  }
  if (got_offset != nullptr) *got_offset = out.size();
  out += got;
  if (!signature.empty()) {
    out += " (";
    if (!context.empty()) out.append(context).append(" of ");
    out.append("`").append(signature).append("`)");
  }
  return out;
}

}  // namespace details
}  // namespace kffi
