// src/argument_message.cc: kffi's one format of argument errors, and the caller's names of types.
//
// Every argument error kffi raises reads "<subject>: expected <expected>, got <got> (argument #k
// of `<signature>`)": the typed calls' conversions (KFFIErrorSetRaisedArgument from
// kffi/function_details.h), the checks kernels call (kffi/tensor_checks.h), the contract
// checks (contract_explain.cc) and the Python binding's own argument errors all build it here
// (ArgumentMessage; error.cc raises it and installs the namer). The contract tests link this file
// with the contract compiler's: it defines no C ABI function, so their copy hides none of
// libkffi's.
#include <kffi/c_api.h>
#include <kffi/type_traits.h>

#include <atomic>
#include <string>
#include <string_view>

#include "runtime_internal.h"

namespace {

std::atomic<const char* (*)(const KFFIAny*)> g_type_namer{nullptr};

}  // namespace

namespace kffi {
namespace details {

std::string ArgumentMessage(std::string_view subject, std::string_view expected,
                            std::string_view got, std::string_view context,
                            std::string_view signature) {
  std::string out(subject);
  out += ": ";
  if (!expected.empty()) {
    out.append("expected ").append(expected).append(", got ");
  }
  out += got;
  if (!signature.empty()) {
    out += " (";
    if (!context.empty()) out.append(context).append(" of ");
    out.append("`").append(signature).append("`)");
  }
  return out;
}

const char* (*ExchangeTypeNamer(const char* (*namer)(const KFFIAny*)))(const KFFIAny*) {
  return g_type_namer.exchange(namer, std::memory_order_acq_rel);
}

std::string ArgumentTypeName(const KFFIAny* arg) {
  if (arg == nullptr) return "nothing";
  const char* (*namer)(const KFFIAny*) = g_type_namer.load(std::memory_order_acquire);
  if (namer != nullptr) {
    const char* name = namer(arg);
    if (name != nullptr) return name;
  }
  return AnyTypeStr(arg);
}

}  // namespace details
}  // namespace kffi
