#include "object_store/arena.h"

#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace drover::object_store {
namespace {

constexpr uint64_t kMiB = 1 << 20;

TEST(ArenaTest, CreateMapsZeroedReadWriteMemory) {
  auto arena = Arena::Create(kMiB);
  ASSERT_TRUE(arena.ok()) << arena.status();
  Arena& a = **arena;
  EXPECT_EQ(a.capacity(), kMiB);
  EXPECT_GE(a.fd(), 0);
  for (uint64_t i = 0; i < kMiB; i += 4096) ASSERT_EQ(a.base()[i], 0);
  std::memcpy(a.base() + 100, "hello", 5);
  EXPECT_EQ(std::string(a.At(100), 5), "hello");
}

TEST(ArenaTest, CapacityRoundedUpToPages) {
  auto arena = Arena::Create(1000);
  ASSERT_TRUE(arena.ok()) << arena.status();
  EXPECT_EQ((*arena)->capacity() % 4096, 0u);
  EXPECT_GE((*arena)->capacity(), 1000u);
  EXPECT_FALSE(Arena::Create(0).ok());
}

TEST(ArenaTest, IsAnOwnerOnlyMemfdClosedOnExec) {
  auto arena = Arena::Create(kMiB);
  ASSERT_TRUE(arena.ok()) << arena.status();
  int flags = ::fcntl((*arena)->fd(), F_GETFD);
  EXPECT_TRUE(flags & FD_CLOEXEC);
  char link[256] = {};
  std::string path = "/proc/self/fd/" + std::to_string((*arena)->fd());
  ASSERT_GT(::readlink(path.c_str(), link, sizeof(link) - 1), 0);
  // Not a path anyone can open: an anonymous memfd.
  EXPECT_EQ(std::string(link).rfind("/memfd:drover-arena", 0), 0u) << link;
}

TEST(ArenaTest, MapSharesBytesBothWays) {
  auto owner = Arena::Create(2 * kMiB);
  ASSERT_TRUE(owner.ok()) << owner.status();
  auto client = Arena::Map((*owner)->fd(), (*owner)->capacity());
  ASSERT_TRUE(client.ok()) << client.status();
  EXPECT_NE((*client)->fd(), (*owner)->fd());  // its own dup
  EXPECT_NE((*client)->base(), (*owner)->base());
  std::memcpy((*owner)->At(kMiB + 64), "from owner", 10);
  EXPECT_EQ(std::string((*client)->At(kMiB + 64), 10), "from owner");
  std::memcpy((*client)->At(5), "from client", 11);
  EXPECT_EQ(std::string((*owner)->At(5), 11), "from client");
  // The client mapping survives the owner's Arena going away (the memfd lives on).
  owner->reset();
  EXPECT_EQ(std::string((*client)->At(5), 11), "from client");
}

TEST(ArenaTest, MapRejectsBadDescriptorsAndSizes) {
  auto owner = Arena::Create(kMiB);
  ASSERT_TRUE(owner.ok());
  EXPECT_EQ(Arena::Map((*owner)->fd(), 2 * kMiB).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Arena::Map(-1, kMiB).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Arena::Map((*owner)->fd(), 0).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ArenaTest, PrefaultKeepsContentsAndChecksRange) {
  auto arena = Arena::Create(4 * kMiB, /*huge_pages_advice=*/true);
  ASSERT_TRUE(arena.ok()) << arena.status();
  Arena& a = **arena;
  for (uint64_t i = 0; i < a.capacity(); i += 4096) a.base()[i + 7] = static_cast<char>(i >> 12);
  ASSERT_TRUE(a.Prefault(0, a.capacity()).ok());
  ASSERT_TRUE(a.Prefault(123, 4567).ok());  // unaligned range
  ASSERT_TRUE(a.Prefault(a.capacity(), 0).ok());
  for (uint64_t i = 0; i < a.capacity(); i += 4096) {
    ASSERT_EQ(a.base()[i + 7], static_cast<char>(i >> 12));
  }
  EXPECT_EQ(a.Prefault(a.capacity() - 10, 11).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(a.Prefault(10, UINT64_MAX).code(), absl::StatusCode::kInvalidArgument);
}

double Seconds(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

// Not a benchmark with a pass mark: prints the figures the design relies on.
TEST(ArenaTest, PrefaultMakesWritesRunAtMemcpySpeed) {
  const uint64_t size = 256 * kMiB;
  std::vector<char> src(size, 'x');
  auto cold = Arena::Create(size);
  ASSERT_TRUE(cold.ok()) << cold.status();
  auto t0 = std::chrono::steady_clock::now();
  std::memcpy((*cold)->base(), src.data(), size);
  double cold_s = Seconds(std::chrono::steady_clock::now() - t0);

  auto warm = Arena::Create(size);
  ASSERT_TRUE(warm.ok()) << warm.status();
  t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE((*warm)->Prefault(0, size).ok());
  double prefault_s = Seconds(std::chrono::steady_clock::now() - t0);
  t0 = std::chrono::steady_clock::now();
  std::memcpy((*warm)->base(), src.data(), size);
  double warm_s = Seconds(std::chrono::steady_clock::now() - t0);
  std::printf("256 MiB: memcpy into fresh memfd %.1f ms (%.2f GB/s); Prefault %.1f ms; "
              "memcpy after Prefault %.1f ms (%.2f GB/s)\n",
              cold_s * 1e3, size / cold_s / 1e9, prefault_s * 1e3, warm_s * 1e3,
              size / warm_s / 1e9);
  // Loose: prefaulted writes must beat first-touch writes.
  EXPECT_LT(warm_s, cold_s);
}

TEST(ArenaTest, DefaultCapacityIsTheSmallestLimit) {
  const uint64_t GiB = 1ull << 30;
  EXPECT_EQ(*DefaultArenaCapacityFrom(10 * GiB, 100 * GiB, 100 * GiB), 3 * GiB);
  EXPECT_EQ(*DefaultArenaCapacityFrom(100 * GiB, 2 * GiB, 100 * GiB), 2 * GiB / 10 * 9 / kMiB * kMiB);
  EXPECT_EQ(*DefaultArenaCapacityFrom(100 * GiB, 100 * GiB, 1 * GiB), 1 * GiB);
  // Docker's default 64 MiB /dev/shm: too small, and the message says why and what to do.
  auto small = DefaultArenaCapacityFrom(16 * GiB, 64 * kMiB, 64 * kMiB);
  ASSERT_FALSE(small.ok());
  EXPECT_EQ(small.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(small.status().message().find("/dev/shm"), std::string::npos) << small.status();
  EXPECT_NE(small.status().message().find("57.0 MiB"), std::string::npos) << small.status();
}

TEST(ArenaTest, DefaultCapacityOnThisMachine) {
  auto cap = DefaultArenaCapacity();
  if (!cap.ok()) {
    EXPECT_EQ(cap.status().code(), absl::StatusCode::kFailedPrecondition) << cap.status();
    return;
  }
  EXPECT_GE(*cap, kMinArenaCapacity);
  std::printf("default arena capacity here: %.1f MiB\n", *cap / 1048576.0);
}

}  // namespace
}  // namespace drover::object_store
