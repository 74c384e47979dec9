// Needs a visible GPU: tagged "gpu", excluded by default (.bazelrc); run with
// `bazel test --test_tag_filters=gpu //...` on a GPU machine.
#include <vector>

#include "gpu/gpu_runtime.h"
#include "gtest/gtest.h"

namespace drover {
namespace {

TEST(CudaRuntimeGpuTest, CopyRoundTripAndKernel) {
  auto rt = NewCudaRuntime();
  auto n = rt->DeviceCount();
  ASSERT_TRUE(n.ok()) << n.status();
  std::vector<float> host(1 << 20, 1.5f);
  ASSERT_TRUE(rt->RegisterHost(host.data(), host.size() * sizeof(float)).ok());
  auto dev = rt->Allocate(0, host.size() * sizeof(float));
  ASSERT_TRUE(dev.ok()) << dev.status();
  ASSERT_TRUE(rt->CopyToDevice(0, *dev, host.data(), host.size() * sizeof(float)).ok());
  std::vector<float> back(host.size(), 0);
  ASSERT_TRUE(rt->CopyToHost(0, back.data(), *dev, back.size() * sizeof(float)).ok());
  EXPECT_EQ(back, host);
  ASSERT_TRUE(rt->Fill(0, static_cast<float*>(*dev), host.size(), 7.0f).ok());
  ASSERT_TRUE(rt->CopyToHost(0, back.data(), *dev, back.size() * sizeof(float)).ok());
  for (float f : back) ASSERT_EQ(f, 7.0f);
  EXPECT_TRUE(rt->Free(0, *dev).ok());
  EXPECT_TRUE(rt->UnregisterHost(host.data()).ok());
  EXPECT_EQ(rt->Allocate(*n, 16).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace drover
