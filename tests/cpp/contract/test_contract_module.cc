// tests/cpp/contract/test_contract_module.cc: contract exports in loaded libraries: checked calls,
// `mut` and Stream parameters, the metadata, and libraries whose contracts are malformed or hostile
// (they fail Module::Load with a ValueError).
// SPDX-License-Identifier: Apache-2.0
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <kffi/kffi.h>

#include <cstdint>
#include <string>
#include <vector>

#include "contract_test_util.h"

namespace {

using kffi::Function;
using kffi::TensorView;
using kffi_test::ErrorOf;
using kffi_test::FakeTensor;
using kffi_test::kCuda0;
using kffi_test::kF32;

const char kAddText[] =
    "a: Tensor([n], float32, align=16), b: Tensor([n], float32, align=16); n: int32 % 16";
const char kAddSig[] =
    "`add_one(a: Tensor([n], float32, align=16), b: Tensor([n], float32, align=16))`";

TEST(ContractModule, LoadedLibraryChecksCalls) {
  kffi::Module mod = kffi::Module::Load(KFFI_TEST_CONTRACTLIB);
  Function add = mod.GetFunctionRequired("add_one");
  FakeTensor a({128}), b({128}), b126({126}), a1({128}, kF32, kffi_test::kCPU, {}, 4);
  EXPECT_EQ(add(TensorView(a), TensorView(b)).cast<int64_t>(), 128);
  EXPECT_EQ(ErrorOf([&] { add(TensorView(a), TensorView(b126)); }),
            std::string("ValueError: b.shape[0]: expected n = 128 (as a.shape[0]), got 126 "
                        "(argument #1 of ") +
                kAddSig + ")");
  EXPECT_EQ(ErrorOf([&] { add(TensorView(a1), TensorView(b)); }),
            std::string("ValueError: a: expected data aligned to 16 bytes, got data aligned to 4 "
                        "bytes (argument #0 of ") +
                kAddSig + ")");
  std::optional<std::string> meta = mod.GetFunctionMetadata("add_one");
  ASSERT_TRUE(meta.has_value());
  EXPECT_NE(meta->find(std::string("\"contract\":\"") + kAddText + "\""), std::string::npos);
  EXPECT_NE(meta->find("{\"name\":\"a\",\"type\":\"Tensor([n], float32, align=16)\",\"kind\":"
                       "\"tensor\",\"optional\":false,\"shape\":[\"n\"],\"dtypes\":[\"float32\"],"
                       "\"device\":null,\"mutable\":false}"),
            std::string::npos)
      << *meta;
  kffi::env::StreamScope scope(kCuda0, reinterpret_cast<void*>(0x42));
  FakeTensor c({4}, kF32, kCuda0);
  EXPECT_EQ(mod.GetFunctionRequired("stream_of")(TensorView(c)).cast<int64_t>(), 0x42);
}

TEST(ContractModule, MutExportRefusesReadOnlyOutputs) {
  kffi::Module mod = kffi::Module::Load(KFFI_TEST_CONTRACTLIB);
  Function scale = mod.GetFunctionRequired("scale");
  float x_data[4] = {1, 2, 3, 4}, y_data[4] = {0, 0, 0, 0};
  int64_t shape[1] = {4};
  DLTensor x{x_data, {kDLCPU, 0}, 1, kF32, shape, nullptr, 0};
  DLTensor y{y_data, {kDLCPU, 0}, 1, kF32, shape, nullptr, 0};
  const kffi::AnyView views[3] = {TensorView(&y), TensorView(&x), 2.0};
  KFFIAny args[3];
  for (int i = 0; i < 3; ++i) args[i] = *reinterpret_cast<const KFFIAny*>(&views[i]);
  args[1].tensor_flags = kKFFITensorFlagReadOnly;  // the input may be read-only
  scale.CallPacked(args, 3);
  EXPECT_EQ(y_data[3], 8.0f);
  args[0].tensor_flags = kKFFITensorFlagReadOnly;
  y_data[3] = -1;
  EXPECT_EQ(ErrorOf([&] { scale.CallPacked(args, 3); }),
            "ValueError: y: expected a writable tensor (the parameter is declared `mut`), got a "
            "read-only tensor (argument #0 of `scale(y: Tensor([n], float32, mut), x: Tensor([n], "
            "float32), factor: float)`)");
  EXPECT_EQ(y_data[3], -1.0f);  // not written
  std::string meta = *mod.GetFunctionMetadata("scale");
  EXPECT_NE(meta.find("\"mutable\":true"), std::string::npos);
  EXPECT_NE(meta.find("\"mutates\":[\"y\"]"), std::string::npos);
  EXPECT_NE(meta.find("\"shape_rpn\":[[\"n\"]]"), std::string::npos) << meta;
}

TEST(ContractModule, StreamAndOptionalParameters) {
  kffi::Module mod = kffi::Module::Load(KFFI_TEST_CONTRACTLIB);
  Function f = mod.GetFunctionRequired("with_bias");
  FakeTensor x({3, 4}), bias({4});
  EXPECT_EQ(f(TensorView(x), nullptr, nullptr).cast<int64_t>(), 30);
  EXPECT_EQ(f(TensorView(x), TensorView(bias), int64_t{2}).cast<int64_t>(), 231);
  EXPECT_EQ(f(TensorView(x), nullptr, reinterpret_cast<void*>(5)).cast<int64_t>(), 530);
  EXPECT_NE(ErrorOf([&] { f(TensorView(x), nullptr, "stream"); })
                .find("TypeError: stream: expected Stream (an opaque pointer, an int handle or "
                      "None), got str (argument #2 of `with_bias("),
            std::string::npos);
  std::string meta = *mod.GetFunctionMetadata("with_bias");
  EXPECT_NE(meta.find(R"({"name":"bias","type":"Optional[Tensor([m], *)]","kind":"tensor",)"
                      R"("optional":true,"default":null,)"),
            std::string::npos)
      << meta;
  EXPECT_NE(meta.find(R"({"name":"stream","type":"Stream","kind":"stream","optional":false,)"
                      R"("default":null})"),
            std::string::npos)
      << meta;
  EXPECT_NE(meta.find(R"("shape_rpn":[["n",2,"*"],["m",2,"//",1,"+"]])"), std::string::npos);
  // A plain export of the same library: unnamed parameters are arg0, arg1; Optional defaults.
  EXPECT_EQ(*mod.GetFunctionMetadata("plain_optional"),
            R"({"name":"plain_optional","params":[{"name":"arg0","type":"int"},)"
            R"({"name":"arg1","type":"Optional<int>","default":null}],"return":"int","doc":""})");
}

TEST(ContractModule, MalformedContractFailsTheLoadNamingEveryBadExport) {
  const std::string path = KFFI_TEST_CONTRACTLIB_BAD;
  const std::string expected =
      "ValueError: Cannot load module `" + path +
      "`: Invalid contract for `broken` at column 47: expected `]`\n"
      "  a: Tensor([n], float32), b: Tensor([n, float32)\n"
      "                                                ^\n"
      "Invalid contract for `misfit`: parameter #0 `a: int` cannot be passed to the C++ parameter "
      "of type `Tensor`\n"
      "Invalid contract for `readonly_misfit`: parameter #0 `y: Tensor([n], float32)` is "
      "read-only (not `mut`), but its C++ type (kffi::TensorView or DLTensor*) may write it: "
      "declare it kffi::ConstTensorView (or const DLTensor*) if the function only reads it, or "
      "mark it `mut`";
  EXPECT_EQ(ErrorOf([&] { kffi::Module::Load(path); }).substr(0, expected.size()), expected);
  // The library stays open (libraries are never unloaded): loading it again fails the same way.
  EXPECT_EQ(ErrorOf([&] { kffi::Module::Load(path); }).substr(0, expected.size()), expected);
}

TEST(ContractModule, HostileContractsFailTheLoadWithoutCrashing) {
  const std::string msg = ErrorOf([] { kffi::Module::Load(KFFI_TEST_CONTRACTLIB_HOSTILE); });
  EXPECT_EQ(msg.rfind("ValueError: Cannot load module `", 0), 0u) << msg.substr(0, 300);
  EXPECT_NE(msg.find("Invalid contract for `deep_types` at column 148: "), std::string::npos);
  EXPECT_NE(msg.find("Optional and Tuple types nest more than 16 deep"), std::string::npos);
  EXPECT_NE(msg.find("Invalid contract for `deep_parens` at column "), std::string::npos);
  EXPECT_NE(msg.find("parentheses and unary minus nest more than 32 deep"), std::string::npos);
  EXPECT_NE(msg.find("Invalid contract for `huge` at column 1: the contract is 1048576 bytes long "
                     "(at most 65536)"),
            std::string::npos);
  // Long texts are shown as an excerpt around the column, so the message stays short.
  EXPECT_LT(msg.size(), 1500u) << msg;
}

TEST(ContractModule, MalformedContractOpenedWithoutTheLoaderRaisesOnCall) {
  // Opened some other way (no module load in progress): the report is not taken, and the export
  // raises the error on every call and metadata query instead.
  void* handle = dlopen(KFFI_TEST_CONTRACTLIB_BAD, RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(handle, nullptr) << dlerror();
  auto call = reinterpret_cast<KFFISafeCallType>(dlsym(handle, "__kffi_broken"));
  auto meta = reinterpret_cast<KFFISafeCallType>(dlsym(handle, "__kffi__meta_broken"));
  ASSERT_NE(call, nullptr);
  ASSERT_NE(meta, nullptr);
  const std::string expected = "ValueError: Invalid contract for `broken` at column 47";
  for (KFFISafeCallType fn : {call, meta}) {
    KFFIAny result{};
    ASSERT_EQ(fn(nullptr, nullptr, 0, &result), -1);
    KFFIObjectHandle err = nullptr;
    KFFIErrorMoveFromRaised(&err);
    ASSERT_NE(err, nullptr);
    const KFFIErrorCell* cell = KFFIErrorGetCellPtr(err);
    std::string got = std::string(cell->kind.data, cell->kind.size) + ": " +
                      std::string(cell->message.data, cell->message.size);
    KFFIObjectDecRef(err);
    EXPECT_EQ(got.substr(0, expected.size()), expected);
  }
}

TEST(ContractModule, ReportLoadErrorOutsideALoadIsNotTaken) {
  KFFIByteArray kind{"ValueError", 10}, msg{"x", 1};
  int32_t taken = -1;
  ASSERT_EQ(KFFIModuleReportLoadError(&kind, &msg, &taken), 0);
  EXPECT_EQ(taken, 0);
  EXPECT_EQ(KFFIModuleReportLoadError(&kind, &msg, nullptr), -1);
  EXPECT_NE(ErrorOf([] { kffi::details::ThrowRaisedError(-1); }).find("taken"), std::string::npos);
}

}  // namespace
