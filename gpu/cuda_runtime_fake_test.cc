// The CUDA runtime's call sites (gpu/cuda_runtime.cc, the fill kernel's launch) without
// a GPU: drover's loader is pointed at the stand-in CUDA (gpu/testing/fake_cuda.cc), so
// drover's real calls reach a "device" of host memory, and each call is
// made to fail as a driver would, to check what the runtime answers.
#include <stdlib.h>

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gpu/gpu_runtime.h"
#include "gtest/gtest.h"

namespace drover {
namespace {

using ::testing::HasSubstr;

class FakeCudaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    unsetenv("DROVER_FAKE_CUDA_FAIL");
    unsetenv("DROVER_FAKE_CUDA_DEVICES");
  }
  void Fail(const char* spec) { setenv("DROVER_FAKE_CUDA_FAIL", spec, 1); }
  std::unique_ptr<GpuRuntime> rt_ = NewCudaRuntime();
};

TEST_F(FakeCudaTest, TheStandInIsLoadedAndWorksOnHostMemory) {
  absl::StatusOr<int> n = rt_->DeviceCount();
  ASSERT_TRUE(n.ok()) << n.status() << " (is the stand-in preloaded?)";
  EXPECT_EQ(*n, 1);
  EXPECT_THAT(rt_->Describe(), HasSubstr("CUDA 13.0 runtime ("));
  EXPECT_THAT(rt_->Describe(), HasSubstr("libfake_cuda.so), 1 device"));
  EXPECT_EQ(NcclVersion(), "2.28.3");
  absl::StatusOr<void*> p = rt_->Allocate(0, 64);
  ASSERT_TRUE(p.ok()) << p.status();
  const std::string in = "sixty-four bytes or fewer";
  std::string out(in.size(), '\0');
  ASSERT_TRUE(rt_->CopyToDevice(0, *p, in.data(), in.size()).ok());
  ASSERT_TRUE(rt_->CopyToHost(0, out.data(), *p, out.size()).ok());
  EXPECT_EQ(out, in);
  ASSERT_TRUE(rt_->Fill(0, static_cast<float*>(*p), 4, 2.5f).ok());
  float filled[4] = {};
  ASSERT_TRUE(rt_->CopyToHost(0, filled, *p, sizeof(filled)).ok());
  for (float f : filled) EXPECT_EQ(f, 2.5f);
  EXPECT_TRUE(rt_->RegisterHost(out.data(), out.size()).ok());
  EXPECT_TRUE(rt_->UnregisterHost(out.data()).ok());
  EXPECT_TRUE(rt_->Free(0, *p).ok());
}

TEST_F(FakeCudaTest, EachFailingCallIsReportedNamingTheCallAndTheError) {
  std::vector<char> host(64);
  void* dev = host.data();
  Fail("cudaMalloc=2");
  absl::StatusOr<void*> p = rt_->Allocate(0, 64);
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInternal);
  EXPECT_THAT(p.status().message(), HasSubstr("cudaMalloc: cudaErrorMemoryAllocation"));
  Fail("cudaFree=700");
  absl::Status s = rt_->Free(0, nullptr);
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(s.message(), HasSubstr("cudaFree: cudaErrorIllegalAddress"));
  Fail("cudaMemcpy=700");
  s = rt_->CopyToDevice(0, dev, host.data(), 8);
  EXPECT_THAT(s.message(), HasSubstr("cudaMemcpy H2D: cudaErrorIllegalAddress"));
  s = rt_->CopyToHost(0, host.data(), dev, 8);
  EXPECT_THAT(s.message(), HasSubstr("cudaMemcpy D2H: cudaErrorIllegalAddress"));
  Fail("cudaLaunchKernel=209");
  s = rt_->Fill(0, static_cast<float*>(dev), 16, 1.0f);
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(s.message(), HasSubstr("fill kernel: cudaErrorNoKernelImageForDevice"));
  Fail("cudaDeviceSynchronize=719");
  s = rt_->Fill(0, static_cast<float*>(dev), 16, 1.0f);
  EXPECT_THAT(s.message(), HasSubstr("fill kernel: cudaErrorLaunchFailure"));
  Fail("cudaHostRegister=1");
  s = rt_->RegisterHost(host.data(), host.size());
  EXPECT_THAT(s.message(), HasSubstr("cudaHostRegister: cudaErrorInvalidValue"));
  Fail("cudaHostUnregister=1");
  s = rt_->UnregisterHost(host.data());
  EXPECT_THAT(s.message(), HasSubstr("cudaHostUnregister: cudaErrorInvalidValue"));
}

TEST_F(FakeCudaTest, AlreadyRegisteredAndNotRegisteredHostMemoryAreNotErrors) {
  std::vector<char> host(64);
  Fail("cudaHostRegister=712");  // cudaErrorHostMemoryAlreadyRegistered
  EXPECT_TRUE(rt_->RegisterHost(host.data(), host.size()).ok());
  Fail("cudaHostUnregister=713");  // cudaErrorHostMemoryNotRegistered
  EXPECT_TRUE(rt_->UnregisterHost(host.data()).ok());
}

TEST_F(FakeCudaTest, EveryDeviceCallChecksTheDeviceFirst) {
  std::vector<char> host(64);
  void* dev = host.data();
  Fail("cudaSetDevice=101");
  for (absl::Status s : {rt_->Allocate(0, 8).status(), rt_->Free(0, dev),
                         rt_->CopyToDevice(0, dev, host.data(), 8),
                         rt_->CopyToHost(0, host.data(), dev, 8),
                         rt_->Fill(0, static_cast<float*>(dev), 2, 0.0f)}) {
    EXPECT_EQ(s.code(), absl::StatusCode::kInternal) << s;
    EXPECT_THAT(s.message(), HasSubstr("cudaSetDevice")) << s;
  }
  unsetenv("DROVER_FAKE_CUDA_FAIL");
  absl::Status s = rt_->CopyToHost(1, host.data(), dev, 8);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(s.message(), HasSubstr("device 1 does not exist; 1 visible"));
  Fail("cudaGetDeviceCount=35");  // cudaErrorInsufficientDriver: no driver
  s = rt_->Allocate(0, 8).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_THAT(s.message(), HasSubstr("no CUDA device is visible"));
  EXPECT_THAT(rt_->Describe(), HasSubstr("no CUDA device is visible"));
}

}  // namespace
}  // namespace drover
