#include "object_store/parallel_copy.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace drover::object_store {
namespace {

std::vector<uint8_t> Pattern(size_t n, uint32_t seed) {
  std::vector<uint8_t> v(n);
  uint32_t x = seed * 2654435761u + 1;
  for (size_t i = 0; i < n; ++i) {
    x = x * 1664525u + 1013904223u;
    v[i] = static_cast<uint8_t>(x >> 24);
  }
  return v;
}

// Copies `n` bytes into the middle of a larger buffer and checks every byte, and that
// nothing around the destination was touched.
void CheckCopy(size_t n, uint32_t seed, size_t dst_offset = 0, size_t src_offset = 0) {
  const std::vector<uint8_t> src = Pattern(n + src_offset, seed);
  std::vector<uint8_t> dst(n + dst_offset + 64, 0xAB);
  ParallelCopy(dst.data() + dst_offset, src.data() + src_offset, n);
  ASSERT_EQ(std::memcmp(dst.data() + dst_offset, src.data() + src_offset, n), 0)
      << n << " bytes";
  for (size_t i = 0; i < dst_offset; ++i) ASSERT_EQ(dst[i], 0xAB) << "before, at " << i;
  for (size_t i = dst_offset + n; i < dst.size(); ++i) ASSERT_EQ(dst[i], 0xAB) << "after";
}

TEST(ParallelCopyTest, EverySizeAroundTheThresholdAndThePiecesComesOutExact) {
  const size_t t = kMinParallelCopyBytes;
  for (size_t n : {size_t{0}, size_t{1}, size_t{4096}, t - 1, t, t + 1, t + 63,
                   t + (2u << 20) - 1, 3 * t + 12345, size_t{100} << 20}) {
    CheckCopy(n, static_cast<uint32_t>(n));
  }
  // Unaligned source and destination.
  CheckCopy(t + 777, 9, /*dst_offset=*/3, /*src_offset=*/5);
}

TEST(ParallelCopyTest, ConcurrentCopiesFromManyThreadsAreAllExact) {
  // One holds the pool; the others find it busy and copy alone: all must be exact.
  std::vector<std::thread> threads;
  std::vector<int> ok(6, 0);
  for (int t = 0; t < 6; ++t) {
    threads.emplace_back([t, &ok] {
      for (int round = 0; round < 4; ++round) {
        const size_t n = kMinParallelCopyBytes + static_cast<size_t>(t) * 1000003 + round;
        const std::vector<uint8_t> src = Pattern(n, static_cast<uint32_t>(t * 10 + round));
        std::vector<uint8_t> dst(n);
        ParallelCopy(dst.data(), src.data(), n);
        if (dst != src) return;
      }
      ok[t] = 1;
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < 6; ++t) EXPECT_EQ(ok[t], 1) << "thread " << t << " got wrong bytes";
}

TEST(ParallelCopyTest, ChildAfterForkCopiesWithAPoolOfItsOwn) {
  CheckCopy(kMinParallelCopyBytes * 2, 1);  // the parent's pool exists now
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    const size_t n = kMinParallelCopyBytes * 3 + 5;
    const std::vector<uint8_t> src = Pattern(n, 77);
    std::vector<uint8_t> dst(n);
    ParallelCopy(dst.data(), src.data(), n);  // must neither hang nor miss a piece
    _exit(dst == src ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

TEST(ParallelCopyTest, ThreadCountIsBoundedAndAtLeastOne) {
  EXPECT_GE(ParallelCopyThreads(), 1);
  EXPECT_LE(ParallelCopyThreads(), 64);
}

}  // namespace
}  // namespace drover::object_store
