#include "object_store/device_copier.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <numeric>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "object_store/tensor.h"

namespace drover::object_store {
namespace {

using ::testing::HasSubstr;

TEST(HostCopierTest, PutAndGetATensorThroughSharedMemory) {
  // The path of a put and a get: producer buffer -> arena (a shared mapping, as the
  // store's memfd arena) -> consumer buffer, with the tensor header describing it.
  auto copier = NewHostCopier();
  EXPECT_FALSE(copier->HasDevice());
  EXPECT_THAT(copier->Describe(), HasSubstr("no GPU"));

  const size_t kBytes = 1 << 20;
  void* arena = mmap(nullptr, kBytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(arena, MAP_FAILED);
  ASSERT_TRUE(copier->RegisterHostMemory(arena, kBytes).ok());

  std::vector<float> src(kBytes / sizeof(float));
  std::iota(src.begin(), src.end(), 0.5f);
  ASSERT_TRUE(copier->ToHost({kHostDevice, src.data()}, arena, kBytes).ok());

  TensorMeta meta = ContiguousMeta(DType::kFloat32, {256, 1024});
  auto view = ViewAs<float>(meta, arena, kBytes);
  ASSERT_TRUE(view.ok()) << view.status();
  EXPECT_EQ((*view)(3, 5), src[3 * 1024 + 5]);

  std::vector<float> dst(src.size(), 0);
  DeviceBuffer out{kHostDevice, dst.data()};
  ASSERT_TRUE(copier->FromHost(arena, &out, kBytes).ok());
  EXPECT_EQ(dst, src);

  EXPECT_TRUE(copier->UnregisterHostMemory(arena).ok());
  munmap(arena, kBytes);
}

TEST(HostCopierTest, DeviceBuffersFailWithTheCause) {
  auto copier = NewHostCopier();
  char host[16] = {};
  char fake_device[16] = {};
  absl::Status s = copier->ToHost({0, fake_device}, host, sizeof(host));
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(s.message()), HasSubstr("no GPU in this process"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("device 0"));
  DeviceBuffer dst{1, fake_device};
  s = copier->FromHost(host, &dst, sizeof(host));
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(s.message()), HasSubstr("device 1"));
}

TEST(HostCopierTest, MalformedBuffersAreInvalidArguments) {
  auto copier = NewHostCopier();
  char host[16] = {};
  EXPECT_EQ(copier->ToHost({-2, host}, host, 1).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(copier->ToHost({kHostDevice, nullptr}, host, 1).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(copier->ToHost({kHostDevice, host}, nullptr, 1).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(copier->FromHost(host, nullptr, 1).code(), absl::StatusCode::kInvalidArgument);
  DeviceBuffer null_dst{kHostDevice, nullptr};
  EXPECT_EQ(copier->FromHost(host, &null_dst, 1).code(), absl::StatusCode::kInvalidArgument);
  // Zero bytes with null pointers is a no-op, as memcpy of 0 would be.
  EXPECT_TRUE(copier->ToHost({kHostDevice, nullptr}, nullptr, 0).ok());
}

TEST(HostCopierTest, OverlappingHostCopyIsSafe) {
  auto copier = NewHostCopier();
  char buf[8] = {'a', 'b', 'c', 'd', 'e', 'f', 'g', 'h'};
  ASSERT_TRUE(copier->ToHost({kHostDevice, buf}, buf + 2, 4).ok());
  EXPECT_EQ(std::string(buf, 8), "ababcdgh");
}

}  // namespace
}  // namespace drover::object_store
