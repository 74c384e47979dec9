// Needs a visible GPU: tagged "gpu", excluded by default (.bazelrc); run with
// `bazel test --test_tag_filters=gpu //gpu:cuda_copier_gpu_test` on a GPU machine.
//
// The put/get path of a device tensor: a shared-memory arena (memfd, as the store's)
// registered as pinned memory; device tensor -> arena (put) -> another device buffer
// (a consumer's get) -> host, compared byte for byte and through a typed view.
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <vector>

#include "gpu/cuda_copier.h"
#include "gpu/gpu_runtime.h"
#include "gtest/gtest.h"
#include "object_store/tensor.h"

namespace drover {
namespace {

using object_store::DeviceBuffer;
using object_store::DType;

TEST(CudaCopierGpuTest, DeviceTensorRoundTripThroughPinnedArena) {
  auto copier = NewCudaCopier();
  ASSERT_TRUE(copier->HasDevice()) << copier->Describe();
  auto rt = NewCudaRuntime();  // only for Allocate/Fill/Free in this test

  // A 64 MiB float32 tensor, 4096 x 4096.
  object_store::TensorMeta meta = object_store::ContiguousMeta(DType::kFloat32, {4096, 4096});
  const size_t bytes = meta.data_size;
  absl::StatusOr<std::string> header = object_store::EncodeTensorHeader(meta);
  ASSERT_TRUE(header.ok()) << header.status();

  int fd = memfd_create("drover-test-arena", MFD_CLOEXEC);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, bytes), 0);
  void* arena = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ASSERT_NE(arena, MAP_FAILED);
  ASSERT_TRUE(copier->RegisterHostMemory(arena, bytes).ok());
  ASSERT_TRUE(copier->RegisterHostMemory(arena, bytes).ok());  // idempotent

  auto src = rt->Allocate(0, bytes);
  ASSERT_TRUE(src.ok()) << src.status();
  ASSERT_TRUE(rt->Fill(0, static_cast<float*>(*src), bytes / sizeof(float), 3.25f).ok());

  // Put: device -> arena, once.
  ASSERT_TRUE(copier->ToHost({0, *src}, arena, bytes).ok());
  auto meta2 = object_store::DecodeTensorHeader(*header, bytes);
  ASSERT_TRUE(meta2.ok()) << meta2.status();
  auto view = object_store::ViewAs<float>(*meta2, arena, bytes);
  ASSERT_TRUE(view.ok()) << view.status();
  EXPECT_EQ((*view)(0, 0), 3.25f);
  EXPECT_EQ((*view)(4095, 4095), 3.25f);
  static_cast<float*>(arena)[12345] = -1.0f;  // make one element distinct

  // Get: arena -> the consumer's device, then back to plain host memory to compare.
  auto dst = rt->Allocate(0, bytes);
  ASSERT_TRUE(dst.ok()) << dst.status();
  DeviceBuffer dbuf{0, *dst};
  ASSERT_TRUE(copier->FromHost(arena, &dbuf, bytes).ok());
  std::vector<float> back(bytes / sizeof(float), 0);
  ASSERT_TRUE(copier->ToHost(dbuf, back.data(), bytes).ok());
  EXPECT_EQ(std::memcmp(back.data(), arena, bytes), 0);
  EXPECT_EQ(back[12345], -1.0f);

  EXPECT_TRUE(rt->Free(0, *src).ok());
  EXPECT_TRUE(rt->Free(0, *dst).ok());
  EXPECT_TRUE(copier->UnregisterHostMemory(arena).ok());
  munmap(arena, bytes);
  close(fd);
}

}  // namespace
}  // namespace drover
