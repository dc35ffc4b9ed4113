// tests/cpp/contract/test_contract_fuzz.cc: a randomized differential test of the contract checks.
// Three judges rule on the same random calls: the kernel's inline check (FastRun: pass, or the op
// it stopped at), the runtime's explaining check (Explain: the first failed check and its op), and
// a reference model written from the catalogue's definition, over the syntax tree
// (tests/fuzz/contract_model.h, shared with the libFuzzer target). They must agree on whether a
// call passes, on the argument (op) that fails and on the check, for valid and invalid borrowed
// DLTensors alike: negative sizes, NULL strides, wrong, negative and huge ndim, device types
// beyond the mask, read-only flags, wrong types, None, and odd scalars. Then the public path (a
// contract compiled by libkffi, its error raised through KFFIContractExplain) must raise exactly
// the explained failure.
// SPDX-License-Identifier: Apache-2.0
#include <gtest/gtest.h>
#include <kffi/contract.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "../../fuzz/contract_model.h"
#include "contract_test_util.h"

namespace {

using kffi::Contract;
using kffi_contract_model::Generator;
using kffi_contract_model::Judge;
using kffi_contract_model::Judgement;
namespace c = kffi::details::contract;

struct Rng {
  uint64_t state;
  explicit Rng(uint64_t seed) : state(seed * 2654435761u + 88172645463325252ull) {}
  uint64_t operator()(uint64_t n) {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return state % n;
  }
  int64_t Range(int64_t lo, int64_t hi) {  // no overflow, whatever the range
    const uint64_t span = static_cast<uint64_t>(hi) - static_cast<uint64_t>(lo) + 1;
    return static_cast<int64_t>(static_cast<uint64_t>(lo) +
                                (span == 0 ? (*this)(UINT64_MAX) : (*this)(span)));
  }
};

TEST(ContractFuzz, FastExplainingAndReferenceAgree) {
  const char* contracts[] = {
      // The uniform leading run of simple tensors (ranks 1 and 2), with `mut`.
      "a: Tensor([n], float32, mut), b: Tensor([n], float32), c: Tensor([n], float32, align=4)",
      "a: Tensor([n, m], float32, align=16, contiguous), b: Tensor([n, m], float32|float16, "
      "device=cuda, offset0, contiguous, mut), c: Tensor([m], *, col_major); n: int32 % 4",
      // Ranks 3 and 5 (the generic simple path), 0-d tensors, literal dimensions.
      "a: Tensor([2, n, 3], *), b: Tensor([], float32, contiguous), "
      "c: Tensor([n, 1, 2, k, 4], *, row_major); k % 3",
      // Dynamic bindings under Optional, stride orders, symbolic strides, device alternatives.
      "x: Optional[Tensor([n], float32)], y: Tensor([n, 2], *, stride_order=(1,0)), "
      "z: Tensor([k, n], bfloat16|float16|int8, device=cpu|cuda, strides=[s, 1]); s % 3",
      // Tuples (stored elements: Tensor objects), optional tuples, scalars and streams.
      "t: Tuple[Tensor([n], *), Optional[Tensor([n, n], float32, contiguous)]], u: int32[0, 10], "
      "o: Optional[Tuple[int, Tensor([n], *)]], s: Stream",
      "f: float32, g: float[-0.5, 1.0], i: int32, b: bool, e: EnvStream, x: Tensor([n], *, mut)",
      // Records: a registered type without fields (ffi.Shape), and an unregistered one.
      "x: Tensor([n], float32, align=4), s: ffi.Shape, t: Tuple[int, Optional[ffi.Shape{}]], "
      "k: int32[0, 8], r: Optional[no.Such{n: int32[0, 4]}]",
  };
  Rng rng(1);
  for (const char* text : contracts) {
    std::unique_ptr<c::Plan> owned = c::MakePlan("f", text);  // the runtime's compiler, compiled in
    const c::Plan& plan = *owned;
    Contract contract = Contract::Parse("f", text);  // the same contract, compiled by libkffi
    int passed = 0, failed = 0;
    std::map<c::Check, int> seen;
    for (int iter = 0; iter < 20000; ++iter) {
      Generator<Rng> gen(&rng, plan.ast);
      std::vector<KFFIAny> args = gen.Args();
      int32_t num_args = static_cast<int32_t>(args.size());
      if (rng(100) == 0) num_args -= 1;
      const Judgement j = Judge(plan, args.data(), num_args);
      ASSERT_EQ(kffi_contract_model::Disagreement(j), "") << text << " (iteration " << iter << ")";
      if (!j.fast) {
        ++seen[j.explained.check];
        ++failed;
      } else {
        ++passed;
      }
      // Whatever the fast run says, the public entry raises exactly the explained failure.
      const std::string raised = kffi_test::ErrorOf([&] { contract.Check(args.data(), num_args); });
      ASSERT_EQ(raised,
                j.fast ? "no error" : std::string(j.explained.kind) + ": " + j.explained.message);
    }
    EXPECT_GT(passed, 2000) << text;
    EXPECT_GT(failed, 2000) << text;
    EXPECT_GE(seen.size(), 5u) << text;
  }
}

}  // namespace
