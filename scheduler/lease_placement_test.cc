#include "scheduler/lease_placement.h"

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace drover {
namespace {

NodeCapacity Node(const std::string& id, double cpus, std::vector<int> gpus = {}) {
  NodeCapacity n;
  n.node_id = id;
  n.available.set_cpus(cpus);
  n.available.set_gpus(static_cast<int>(gpus.size()));
  n.available.set_memory_bytes(int64_t{1} << 30);
  n.gpu_ids = std::move(gpus);
  return n;
}

proto::Resources Shape(double cpus, int gpus = 0) {
  proto::Resources r;
  r.set_cpus(cpus);
  r.set_gpus(gpus);
  return r;
}

TEST(LeasePlacementTest, PacksOntoTheFirstNodeThatFits) {
  std::vector<NodeCapacity> free = {Node("a", 0.5), Node("b", 2), Node("c", 4)};
  LeasePlacement p = PlaceLease(Shape(1), {}, free, free);
  ASSERT_TRUE(p.ok) << p.reason;
  EXPECT_EQ(p.node_id, "b");
}

TEST(LeasePlacementTest, SpreadPrefersTheMostFreeCpus) {
  std::vector<NodeCapacity> free = {Node("a", 2), Node("b", 3), Node("c", 1)};
  proto::PlacementHint hint;
  hint.set_spread(true);
  EXPECT_EQ(PlaceLease(Shape(1), hint, free, free).node_id, "b");
}

TEST(LeasePlacementTest, HardAffinityOnlyThatNodeSoftAffinityFirst) {
  std::vector<NodeCapacity> free = {Node("a", 4), Node("b", 0)};
  proto::PlacementHint hint;
  hint.set_node_id("b");
  LeasePlacement hard = PlaceLease(Shape(1), hint, free, {Node("a", 4), Node("b", 4)});
  EXPECT_FALSE(hard.ok);
  EXPECT_FALSE(hard.never);  // b could hold it once free
  hint.set_soft(true);
  EXPECT_EQ(PlaceLease(Shape(1), hint, free, free).node_id, "a");
  hint.set_node_id("gone");
  hint.set_soft(false);
  LeasePlacement gone = PlaceLease(Shape(1), hint, free, free);
  EXPECT_TRUE(gone.never);
  EXPECT_TRUE(absl::StrContains(gone.reason, "gone")) << gone.reason;
}

TEST(LeasePlacementTest, DataLocalityComesFirst) {
  std::vector<NodeCapacity> free = {Node("a", 4), Node("b", 4)};
  proto::PlacementHint hint;
  (*hint.mutable_data_bytes())["b"] = 1 << 20;
  EXPECT_EQ(PlaceLease(Shape(1), hint, free, free).node_id, "b");
}

TEST(LeasePlacementTest, GpusAreTheLowestFreeIndices) {
  std::vector<NodeCapacity> free = {Node("a", 4, {1, 3, 5})};
  LeasePlacement p = PlaceLease(Shape(1, 2), {}, free, free);
  ASSERT_TRUE(p.ok);
  EXPECT_EQ(p.gpu_ids, (std::vector<int>{1, 3}));
}

TEST(LeasePlacementTest, SaysWhyNotAndWhetherEver) {
  std::vector<NodeCapacity> total = {Node("a", 4), Node("b", 8)};
  std::vector<NodeCapacity> free = {Node("a", 0), Node("b", 1)};
  LeasePlacement busy = PlaceLease(Shape(2), {}, free, total);
  EXPECT_FALSE(busy.ok);
  EXPECT_FALSE(busy.never);
  LeasePlacement huge = PlaceLease(Shape(1000), {}, free, total);
  EXPECT_TRUE(huge.never);
  EXPECT_TRUE(absl::StrContains(huge.reason, "1000")) << huge.reason;
  EXPECT_TRUE(absl::StrContains(huge.reason, "8")) << huge.reason;
}

}  // namespace
}  // namespace drover
