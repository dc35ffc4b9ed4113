// tests/module_libs/contractlib.cc: exports with contracts, read by test_contract.cc (the
// malformed ones are in contractlib_bad.cc: a library holding one does not load).
#include <kffi/contract.h>

#include <cstdint>

namespace {

int64_t AddOne(kffi::TensorView a, kffi::TensorView b) { return a.size(0) + b.size(0) - a.size(0); }

int64_t StreamOf(kffi::TensorView, void* stream) { return reinterpret_cast<int64_t>(stream); }

}  // namespace

KFFI_EXPORT_CONTRACT_DOC(add_one, AddOne,
                         "a: Tensor([n], float32, align=16), b: Tensor([n], float32, align=16); "
                         "n: int32 % 16",
                         "Returns n.");
KFFI_EXPORT_CONTRACT(stream_of, StreamOf, "x: Tensor([n], *), stream: EnvStream");
