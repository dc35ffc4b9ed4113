// tests/cpp/test_cuda_cubin.cc: kffi::cuda::CubinModule without a GPU: arch tags, which image a
// device loads, bad input, KFFI_EMBED_CUBIN. Launches run in
// tests/python/kffi_cuda/test_cuda_compile_gpu.py (a library embedding an NVRTC cubin, built by
// test_cuda_compile.py's helper).
// SPDX-License-Identifier: Apache-2.0
#include <gtest/gtest.h>
#include <kffi/cuda/cubin.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

// Any file will do: the macro embeds bytes, whatever they are.
KFFI_EMBED_CUBIN(license_text, KFFI_TEST_SOURCE_DIR "/LICENSE");

namespace {

using kffi::cuda::details::ParseArchTag;
using kffi::cuda::details::PickImage;

TEST(CudaCubin, ArchTagsRead) {
  auto t = ParseArchTag("sm_90a");
  EXPECT_TRUE(t.ok && !t.ptx && t.cc == 90 && t.suffix == 'a');
  t = ParseArchTag("compute_100");
  EXPECT_TRUE(t.ok && t.ptx && t.cc == 100 && t.suffix == 0);
  t = ParseArchTag("sm_100f");
  EXPECT_TRUE(t.ok && t.cc == 100 && t.suffix == 'f');
  EXPECT_TRUE(ParseArchTag("").ok);
  for (const char* bad : {"sm_9", "sm_9x", "sm_1000", "gfx90a", "sm_", "compute_90b"}) {
    EXPECT_FALSE(ParseArchTag(bad).ok) << bad;
  }
}

TEST(CudaCubin, PicksTheImageThatRunsBest) {
  const std::vector<std::string> tags = {"sm_80", "sm_90a", "sm_100f", "compute_75"};
  EXPECT_EQ(PickImage(tags, 80), 0);
  EXPECT_EQ(PickImage(tags, 86), 0);   // same major, higher minor
  EXPECT_EQ(PickImage(tags, 90), 1);   // 'a': exact only, and preferred there
  EXPECT_EQ(PickImage(tags, 103), 2);  // family
  EXPECT_EQ(PickImage(tags, 120), 3);  // no cubin runs: the PTX
  EXPECT_EQ(PickImage({"sm_90a", "sm_100"}, 89), -1);
  EXPECT_EQ(PickImage({"sm_90a", "sm_100"}, 91), -1);
  EXPECT_EQ(PickImage({"sm_80", "sm_86"}, 89), 1);       // the newest that runs
  EXPECT_EQ(PickImage({"compute_80", "sm_80"}, 80), 1);  // a cubin before PTX
  EXPECT_EQ(PickImage({"sm_80", ""}, 90), 1);            // untagged: the driver picks
}

TEST(CudaCubin, BadInputIsAValueError) {
  try {
    kffi::cuda::CubinModule m(std::vector<std::pair<std::string, std::string>>{{"sm_9x", "x"}});
    FAIL() << "accepted a bad tag";
  } catch (const kffi::Error& e) {
    EXPECT_EQ(e.kind(), "ValueError");
    EXPECT_NE(std::string(e.message()).find("sm_9x"), std::string::npos);
  }
  EXPECT_THROW(kffi::cuda::CubinModule(std::string_view()), kffi::Error);
  EXPECT_THROW(kffi::cuda::CubinModule(std::vector<std::pair<std::string, std::string>>{}),
               kffi::Error);
}

TEST(CudaCubin, EmbedsAFileByteForByte) {
  std::ifstream f(KFFI_TEST_SOURCE_DIR "/LICENSE", std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string_view embedded = KFFI_EMBEDDED_CUBIN(license_text);
  EXPECT_EQ(embedded, ss.str());
  EXPECT_EQ(embedded.data()[embedded.size()], '\0');  // PTX text reads as a C string
  kffi::cuda::CubinModule mod(embedded, "the license");
  EXPECT_EQ(mod.archs(), std::vector<std::string>{""});
}

TEST(CudaCubin, WithoutADriverLoadingIsARuntimeError) {
  if (access("/dev/nvidiactl", F_OK) == 0) GTEST_SKIP() << "this machine has an NVIDIA driver";
  kffi::cuda::CubinModule mod(KFFI_EMBEDDED_CUBIN(license_text));
  try {
    (void)mod["kernel"].Handle(0);
    FAIL() << "loaded without a driver";
  } catch (const kffi::Error& e) {
    EXPECT_EQ(e.kind(), "RuntimeError");
    EXPECT_NE(std::string(e.message()).find("CUDA driver"), std::string::npos);  // none, or no GPU
  }
  std::vector<std::pair<size_t, size_t>> info;
  EXPECT_THROW((void)mod["kernel"].ParamInfo(0, &info), kffi::Error);  // loads the image first
}

}  // namespace
