#include "object_store/allocator.h"

#include <cstdint>
#include <map>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace drover::object_store {
namespace {

TEST(AllocatorTest, OffsetsAreAlignedAndSizesRoundedUp) {
  Allocator a(1 << 20);
  for (uint64_t size : {1, 63, 64, 65, 100, 4095, 4097, 0}) {
    auto off = a.Allocate(size);
    ASSERT_TRUE(off.has_value()) << size;
    EXPECT_EQ(*off % 64, 0u) << size;
    EXPECT_EQ(*a.BlockSize(*off), Allocator::RoundUp(size));
  }
  EXPECT_EQ(a.used(), 64u + 64 + 64 + 128 + 128 + 4096 + 4160 + 64);
  EXPECT_EQ(a.free_bytes(), a.capacity() - a.used());
}

TEST(AllocatorTest, CapacityRoundedDownToAlignment) {
  Allocator a(1000);
  EXPECT_EQ(a.capacity(), 960u);
  EXPECT_FALSE(a.Allocate(961).has_value());
  EXPECT_TRUE(a.Allocate(960).has_value());
  Allocator empty(10);
  EXPECT_EQ(empty.capacity(), 0u);
  EXPECT_FALSE(empty.Allocate(1).has_value());
  EXPECT_EQ(empty.largest_free(), 0u);
}

TEST(AllocatorTest, ExhaustionReturnsNullopt) {
  Allocator a(64 * 10);
  std::vector<uint64_t> offs;
  for (int i = 0; i < 10; ++i) {
    auto off = a.Allocate(64);
    ASSERT_TRUE(off.has_value());
    offs.push_back(*off);
  }
  EXPECT_FALSE(a.Allocate(1).has_value());
  EXPECT_EQ(a.largest_free(), 0u);
  EXPECT_EQ(a.free_bytes(), 0u);
  // Huge and overflowing sizes fail cleanly.
  EXPECT_FALSE(a.Allocate(UINT64_MAX).has_value());
  EXPECT_FALSE(a.Allocate(UINT64_MAX - 10).has_value());
  ASSERT_TRUE(a.Free(offs[3]));
  auto again = a.Allocate(10);
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ(*again, offs[3]);
}

TEST(AllocatorTest, FreeCoalescesThreeAdjacentBlocksIntoOne) {
  Allocator a(64 * 100);
  auto x = *a.Allocate(640);
  auto y = *a.Allocate(640);
  auto z = *a.Allocate(640);
  auto guard = *a.Allocate(64);  // keeps z's block from merging with the tail
  ASSERT_EQ(y, x + 640);
  ASSERT_EQ(z, y + 640);
  // Free the middle last so both neighbour merges happen in one call.
  ASSERT_TRUE(a.Free(x));
  ASSERT_TRUE(a.Free(z));
  EXPECT_EQ(a.free_blocks(), 3u);  // x, z, tail
  ASSERT_TRUE(a.Free(y));
  EXPECT_EQ(a.free_blocks(), 2u);  // x+y+z, tail
  EXPECT_EQ(a.largest_free(), std::max<uint64_t>(1920, a.capacity() - 1984));
  auto big = a.Allocate(1920);
  ASSERT_TRUE(big.has_value());
  EXPECT_EQ(*big, x);
  ASSERT_TRUE(a.Free(*big));
  ASSERT_TRUE(a.Free(guard));
  EXPECT_EQ(a.free_blocks(), 1u);
  EXPECT_EQ(a.largest_free(), a.capacity());
  EXPECT_EQ(a.used(), 0u);
}

TEST(AllocatorTest, BestFitPicksSmallestBlockThatFits) {
  Allocator a(64 * 1000);
  auto a1 = *a.Allocate(64 * 10);
  auto sep1 = *a.Allocate(64);
  auto a2 = *a.Allocate(64 * 3);
  auto sep2 = *a.Allocate(64);
  (void)sep1;
  (void)sep2;
  ASSERT_TRUE(a.Free(a1));
  ASSERT_TRUE(a.Free(a2));
  // Holes of 10 and 3 blocks, plus the big tail: 3 blocks go into the 3-block hole.
  EXPECT_EQ(*a.Allocate(64 * 3), a2);
  EXPECT_EQ(*a.Allocate(64 * 2), a1);
}

TEST(AllocatorTest, DoubleFreeAndInvalidOffsetsAreRejectedWithoutCorruption) {
  Allocator a(64 * 100);
  auto x = *a.Allocate(128);
  auto y = *a.Allocate(128);
  EXPECT_FALSE(a.Free(x + 64));  // inside a block
  EXPECT_FALSE(a.Free(x + 1));   // unaligned
  EXPECT_FALSE(a.Free(64 * 50));  // in free space
  EXPECT_FALSE(a.Free(UINT64_MAX));
  ASSERT_TRUE(a.Free(x));
  EXPECT_FALSE(a.Free(x));  // double free
  EXPECT_EQ(a.used(), 128u);
  ASSERT_TRUE(a.Free(y));
  EXPECT_FALSE(a.Free(y));
  EXPECT_EQ(a.used(), 0u);
  EXPECT_EQ(a.free_blocks(), 1u);
  EXPECT_EQ(a.largest_free(), a.capacity());
}

TEST(AllocatorTest, ChurnOfSimilarSizesReusesSpace) {
  // Alloc/free of sizes within 10% of 1 MiB with up to 8 live at a time: the
  // high-water mark must stay within a small multiple of the live bytes (best fit
  // leaves holes a slightly larger request cannot use) and must not grow with the
  // length of the churn.
  const uint64_t kMiB = 1 << 20;
  const int kSteps = 10000;
  Allocator a(1024 * kMiB);
  std::mt19937_64 rng(42);
  std::vector<uint64_t> live;
  for (int i = 0; i < kSteps; ++i) {
    if (live.size() == 8 || (!live.empty() && rng() % 2)) {
      size_t k = rng() % live.size();
      ASSERT_TRUE(a.Free(live[k]));
      live.erase(live.begin() + k);
    }
    uint64_t size = kMiB - kMiB / 10 + rng() % (kMiB / 5);
    auto off = a.Allocate(size);
    ASSERT_TRUE(off.has_value());
    live.push_back(*off);
  }
  // At most 8 live blocks of at most 1.1 MiB: 8.8 MiB.
  EXPECT_LE(a.high_water(), 16 * kMiB) << "high water " << a.high_water();
  EXPECT_LE(a.free_blocks(), 10u);
  for (auto off : live) ASSERT_TRUE(a.Free(off));
  EXPECT_EQ(a.used(), 0u);
  EXPECT_EQ(a.free_blocks(), 1u);
}

// Reference model: a byte map of which 64-byte units are in use.
TEST(AllocatorTest, RandomizedAgainstReferenceModel) {
  const uint64_t kUnits = 4096;
  Allocator a(kUnits * 64);
  std::vector<bool> used(kUnits, false);
  std::map<uint64_t, uint64_t> live;  // offset -> rounded size
  std::mt19937_64 rng(7);
  uint64_t model_used = 0;
  auto model_largest = [&] {
    uint64_t best = 0, run = 0;
    for (uint64_t u = 0; u < kUnits; ++u) {
      run = used[u] ? 0 : run + 1;
      best = std::max(best, run);
    }
    return best * 64;
  };
  for (int step = 0; step < 20000; ++step) {
    uint32_t op = rng() % 10;
    if (op < 5) {
      uint64_t size = rng() % 3 == 0 ? rng() % (64 * 200) : rng() % 1000;
      uint64_t rounded = Allocator::RoundUp(size);
      uint64_t largest = model_largest();
      auto off = a.Allocate(size);
      if (rounded > largest) {
        ASSERT_FALSE(off.has_value()) << "step " << step;
        continue;
      }
      ASSERT_TRUE(off.has_value()) << "step " << step << " size " << size;
      ASSERT_EQ(*off % 64, 0u);
      ASSERT_LE(*off + rounded, kUnits * 64);
      for (uint64_t u = *off / 64; u < (*off + rounded) / 64; ++u) {
        ASSERT_FALSE(used[u]) << "overlap at step " << step;
        used[u] = true;
      }
      live[*off] = rounded;
      model_used += rounded;
    } else if (op < 9 && !live.empty()) {
      auto it = live.begin();
      std::advance(it, rng() % live.size());
      ASSERT_TRUE(a.Free(it->first));
      for (uint64_t u = it->first / 64; u < (it->first + it->second) / 64; ++u) used[u] = false;
      model_used -= it->second;
      live.erase(it);
    } else {
      // A bogus free: never an allocated offset.
      uint64_t off = rng() % (kUnits * 64 + 1000);
      bool valid = live.count(off) > 0;
      if (!valid) {
        ASSERT_FALSE(a.Free(off));
      }
    }
    ASSERT_EQ(a.used(), model_used);
    if (step % 97 == 0) {
      ASSERT_EQ(a.largest_free(), model_largest()) << "step " << step;
    }
  }
  for (auto& [off, size] : live) ASSERT_TRUE(a.Free(off));
  EXPECT_EQ(a.used(), 0u);
  EXPECT_EQ(a.free_blocks(), 1u);
}

TEST(AllocatorTest, SplitMakesTwoBlocksFreedOnTheirOwn) {
  Allocator a(64 * 100);
  auto off = a.Allocate(64 * 10);
  ASSERT_TRUE(off.has_value());
  ASSERT_EQ(*off, 0u);
  // Rejected: not a block start, unaligned, at the ends, outside.
  EXPECT_FALSE(a.Split(64, 128));
  EXPECT_FALSE(a.Split(0, 100));
  EXPECT_FALSE(a.Split(0, 0));
  EXPECT_FALSE(a.Split(0, 640));
  EXPECT_FALSE(a.Split(0, 6400));
  EXPECT_EQ(a.allocated_blocks(), 1u);
  // [0, 640) -> [0, 128) [128, 640) -> [0, 128) [128, 320) [320, 640)
  ASSERT_TRUE(a.Split(0, 128));
  ASSERT_TRUE(a.Split(128, 320));
  EXPECT_EQ(a.allocated_blocks(), 3u);
  EXPECT_EQ(a.used(), 640u);
  EXPECT_EQ(*a.BlockSize(0), 128u);
  EXPECT_EQ(*a.BlockSize(128), 192u);
  EXPECT_EQ(*a.BlockSize(320), 320u);
  // The middle one goes first; the space is reused and coalesced as usual.
  ASSERT_TRUE(a.Free(128));
  EXPECT_EQ(a.used(), 448u);
  auto again = a.Allocate(192);
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ(*again, 128u);
  ASSERT_TRUE(a.Free(128));
  ASSERT_TRUE(a.Free(0));
  ASSERT_TRUE(a.Free(320));
  EXPECT_FALSE(a.Free(320));
  EXPECT_EQ(a.used(), 0u);
  EXPECT_EQ(a.free_blocks(), 1u);
  EXPECT_EQ(a.largest_free(), 6400u);
}

}  // namespace
}  // namespace drover::object_store
