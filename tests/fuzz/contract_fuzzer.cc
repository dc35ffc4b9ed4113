// tests/fuzz/contract_fuzzer.cc: libFuzzer target for the contract compiler and the checks.
//
// An input is a contract text, a NUL byte, then bytes that drive the calls. The text must compile
// or fail cleanly (a ValueError or TypeError with a message), and the same way through libkffi's
// public entry (Contract::Parse, KFFIContractCreate) as through the compiler compiled in here. A
// contract that compiles is then called a few times with arguments made to pass or to fail in
// chosen ways (tests/fuzz/contract_model.h's generator, fed by the input's bytes): the kernel's
// inline check (FastRun), the runtime's explaining check and the reference model must agree on
// pass or fail, the failing op and the check, and the public Check must raise exactly the
// explained failure. tests/cpp/contract/test_contract_fuzz.cc runs the same judges on fixed
// contracts.
// SPDX-License-Identifier: Apache-2.0
#include <kffi/contract.h>
#include <kffi/error.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "../cpp/contract/contract_test_util.h"
#include "contract_model.h"

namespace {

namespace c = kffi::details::contract;
using kffi_test::ErrorOf;

/// The generator's randomness, read from the input; a xorshift seeded by what was read takes
/// over when the bytes run out (so a short input still makes whole calls).
class ByteRng {
 public:
  ByteRng(const uint8_t* p, size_t n) : p_(p), n_(n) {}
  uint64_t operator()(uint64_t n) {
    if (n <= 1) return 0;
    uint64_t v;
    if (n_ >= 2) {
      v = static_cast<uint64_t>(p_[0]) | static_cast<uint64_t>(p_[1]) << 8;
      p_ += 2;
      n_ -= 2;
      state_ = state_ * 6364136223846793005ull + v + 1;
    } else {
      state_ ^= state_ << 13;
      state_ ^= state_ >> 7;
      state_ ^= state_ << 17;
      v = state_;
    }
    return v % n;
  }
  /// Uniform in [lo, hi], computed without overflow (a contract's range may span all of int64).
  int64_t Range(int64_t lo, int64_t hi) {
    const uint64_t span = static_cast<uint64_t>(hi) - static_cast<uint64_t>(lo) + 1;
    const uint64_t r = span == 0 ? (*this)(UINT64_MAX) : (*this)(span);
    return static_cast<int64_t>(static_cast<uint64_t>(lo) + r);
  }

 private:
  const uint8_t* p_;
  size_t n_;
  uint64_t state_ = 88172645463325252ull;
};

[[noreturn]] void Fail(std::string_view text, const std::string& why) {
  std::fprintf(stderr, "contract_fuzzer: %.*s\n  contract: %.*s\n", static_cast<int>(why.size()),
               why.data(), static_cast<int>(text.size()), text.data());
  __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto* nul = static_cast<const uint8_t*>(std::memchr(data, 0, size));
  const size_t text_size = nul != nullptr ? static_cast<size_t>(nul - data) : size;
  const std::string_view text(reinterpret_cast<const char*>(data), text_size);

  // The compiler: the one compiled in here and libkffi's agree, and a refusal is clean.
  std::unique_ptr<c::Plan> plan;
  const std::string here = ErrorOf([&] { plan = c::MakePlan("f", text); });
  const std::string public_entry = ErrorOf([&] { kffi::Contract::Parse("f", text); });
  if (here != public_entry) {
    Fail(text,
         "the compiled-in compiler says \"" + here + "\", libkffi says \"" + public_entry + "\"");
  }
  if (plan == nullptr) {
    if (here.rfind("ValueError: ", 0) != 0 && here.rfind("TypeError: ", 0) != 0) {
      Fail(text, "a refusal that is not a ValueError or TypeError: " + here);
    }
    if (here.size() < 16) Fail(text, "a refusal without a message: " + here);
    return 0;
  }
  const kffi::Contract contract = kffi::Contract::Parse("f", text);

  // The checks: three judges, and the public entry, on a few calls.
  const size_t rest = nul != nullptr ? size - text_size - 1 : 0;
  ByteRng rng(nul != nullptr ? nul + 1 : data + size, rest);
  const int calls = 1 + static_cast<int>(rng(4));
  for (int i = 0; i < calls; ++i) {
    kffi_contract_model::Generator<ByteRng> gen(&rng, plan->ast);
    std::vector<KFFIAny> args = gen.Args();
    int32_t num_args = static_cast<int32_t>(args.size());
    if (rng(16) == 0 && num_args > 0) num_args -= 1;  // a missing argument
    const kffi_contract_model::Judgement j =
        kffi_contract_model::Judge(*plan, args.data(), num_args);
    const std::string disagreement = kffi_contract_model::Disagreement(j);
    if (!disagreement.empty()) Fail(text, disagreement);
    const std::string raised = ErrorOf([&] { contract.Check(args.data(), num_args); });
    const std::string expected =
        j.fast ? "no error" : std::string(j.explained.kind) + ": " + j.explained.message;
    if (raised != expected) Fail(text, "Check raised \"" + raised + "\", expected " + expected);
  }
  return 0;
}
