// Loading libcudart and libnccl with dlopen: a library that cannot be loaded is an error
// naming every place it was looked for and the variable to set, never a crash; and the
// loaded ones say where they came from.
#include <stdlib.h>

#include <string>

#include "gmock/gmock.h"
#include "gpu/cuda_library.h"
#include "gpu/gpu_runtime.h"
#include "gtest/gtest.h"

namespace drover::gpu {
namespace {

using ::testing::HasSubstr;

// One test: each library is loaded once per process, so the variables must be set
// before the first use.
TEST(CudaLibraryTest, AMissingLibraryIsNamedWithWhereItWasLookedFor) {
  setenv("DROVER_CUDA_RUNTIME_LIBRARY", "/nonexistent/libcudart.so.13", 1);
  setenv("DROVER_NCCL_LIBRARY", "/nonexistent/libnccl.so.2", 1);
  absl::StatusOr<const CudaApi*> cuda = LoadCudaRuntime();
  ASSERT_FALSE(cuda.ok());
  EXPECT_EQ(cuda.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(cuda.status().message(),
              HasSubstr("$DROVER_CUDA_RUNTIME_LIBRARY=/nonexistent/libcudart.so.13 ("));
  EXPECT_THAT(cuda.status().message(), HasSubstr("Set DROVER_CUDA_RUNTIME_LIBRARY"));
  absl::StatusOr<const NcclApi*> nccl = LoadNccl();
  ASSERT_FALSE(nccl.ok());
  EXPECT_THAT(nccl.status().message(), HasSubstr("/nonexistent/libnccl.so.2 ("));
  EXPECT_THAT(DescribeNccl(), HasSubstr("NCCL (libnccl) could not be loaded"));
  EXPECT_EQ(NcclVersion(), "unknown");
  // What callers see: no device, and why.
  auto rt = NewCudaRuntime();
  absl::StatusOr<int> n = rt->DeviceCount();
  EXPECT_EQ(n.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(n.status().message(), HasSubstr("no CUDA device is visible to this process"));
  EXPECT_THAT(n.status().message(), HasSubstr("/nonexistent/libcudart.so.13"));
  EXPECT_THAT(rt->Describe(), HasSubstr("could not be loaded"));
  EXPECT_EQ(rt->RegisterHost(&n, sizeof(n)).code(), absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace drover::gpu
