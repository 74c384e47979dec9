#include <vector>

#include "gpu/gpu_runtime.h"
#include "gtest/gtest.h"

namespace drover {
namespace {

// Runs everywhere: where no device is visible, every call fails at once with an error
// that says so (never a crash, never a hang).
TEST(CudaRuntimeTest, WithoutDeviceFailsClearly) {
  auto rt = NewCudaRuntime();
  auto n = rt->DeviceCount();
  if (n.ok()) GTEST_SKIP() << "a GPU is visible; see cuda_runtime_gpu_test";
  EXPECT_EQ(n.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(n.status().message().find("no CUDA device is visible"), std::string::npos)
      << n.status();
  auto p = rt->Allocate(0, 1024);
  EXPECT_EQ(p.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(rt->Describe().find("CUDA"), std::string::npos);
  // Every other call, including those that reach CUDA without asking for a device first
  // (page-locking host memory): the real runtime's answer without a driver.
  std::vector<char> host(4096);
  void* dev = host.data();  // never dereferenced: each call fails first
  for (absl::Status s : {rt->Free(0, dev), rt->CopyToDevice(0, dev, host.data(), 8),
                         rt->CopyToHost(0, host.data(), dev, 8),
                         rt->Fill(0, static_cast<float*>(dev), 2, 0.0f),
                         rt->RegisterHost(host.data(), host.size()),
                         rt->UnregisterHost(host.data())}) {
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
    EXPECT_NE(s.message().find("no CUDA device is visible"), std::string::npos) << s;
  }
}

TEST(CudaRuntimeTest, NcclIsLinked) {
  std::string v = NcclVersion();
  EXPECT_NE(v, "unknown");
  EXPECT_EQ(v.substr(0, 2), "2.") << v;
}

}  // namespace
}  // namespace drover
