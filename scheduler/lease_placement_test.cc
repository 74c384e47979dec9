#include "scheduler/lease_placement.h"

#include <map>
#include <random>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
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

std::string Describe(const LeasePlacement& p) {
  if (!p.ok) return absl::StrCat("no", p.never ? " (never): " : ": ", p.reason);
  std::string out = absl::StrCat("on ", p.node_id, " gpus");
  for (int g : p.gpu_ids) absl::StrAppend(&out, " ", g);
  return out;
}

// LeasePlacer against PlaceLease on a table that changes between placements (leases
// taken and given back, nodes leaving and joining), with every kind of hint; with
// `claims`, beside a pending job's claim that changes every 50 placements (PlaceLease
// then sees the claimed nodes' capacity less the claim, as the scheduler did).
void PlacesAsPlaceLease(bool claims) {
  std::mt19937 rng(claims ? 7 : 5);
  NodeTable table;
  std::vector<std::string> ids;
  auto add = [&](int i) {
    proto::Resources r;
    r.set_cpus(2 + i % 7);
    r.set_gpus(i % 4 == 0 ? 2 : 0);
    r.set_memory_bytes(int64_t{8 + i % 3} << 30);
    if (i % 3 == 0) (*r.mutable_custom())["disk"] = 2;
    std::vector<int> gpus;
    for (int g = 0; g < r.gpus(); ++g) gpus.push_back(g);
    const std::string id = absl::StrCat("n", i);
    table.Set(id, absl::StrCat("10.0.0.", i), r, gpus, i);
    table.SetAlive(id, true);
    ids.push_back(id);
  };
  for (int i = 0; i < 30; ++i) add(i);
  std::vector<proto::Resources> shapes = {Shape(1), Shape(2), Shape(0.5), Shape(1, 1), Shape(3),
                                          Shape(9), Shape(0)};
  shapes[2].set_memory_bytes(int64_t{5} << 30);
  (*shapes[4].mutable_custom())["disk"] = 1;
  struct Held {
    std::string node;
    proto::Resources shape;
    std::vector<int> gpus;
  };
  std::vector<Held> held;
  LeasePlacer placer;
  int placed = 0, refused = 0;
  std::map<std::string, proto::Resources> claimed;
  std::map<std::string, std::set<int>> claimed_gpus;
  for (int step = 0; step < 4000; ++step) {
    if (claims && step % 50 == 0) {
      claimed.clear();
      claimed_gpus.clear();
      for (int k = rng() % 5; k > 0; --k) {
        const std::string& id = ids[rng() % ids.size()];
        proto::Resources r = Shape(rng() % 5);
        r.set_memory_bytes(static_cast<int64_t>(rng() % 4) << 30);
        if (rng() % 3 == 0) (*r.mutable_custom())["disk"] = 1;
        claimed[id] = r;
        if (rng() % 2 == 0) claimed_gpus[id] = {static_cast<int>(rng() % 2)};
      }
    }
    ClaimedView view;
    const LeasePlacer::Overrides& left = view.Set(table, claimed, claimed_gpus);
    std::vector<NodeCapacity> free = table.Free();
    for (const auto& [i, n] : left) free[i] = *n;
    const proto::Resources& shape = shapes[rng() % shapes.size()];
    proto::PlacementHint hint;
    switch (rng() % 5) {
      case 0: break;
      case 1: hint.set_spread(true); break;
      case 2:
        hint.set_node_id(rng() % 8 == 0 ? "gone" : ids[rng() % ids.size()]);
        hint.set_soft(rng() % 2 == 0);
        break;
      case 3:
        for (int k = rng() % 4; k > 0; --k) {
          (*hint.mutable_data_bytes())[ids[rng() % ids.size()]] = rng() % 3 * 1000;
        }
        hint.set_spread(rng() % 2 == 0);
        break;
      default:
        hint.set_node_id(ids[rng() % ids.size()]);
        hint.set_soft(true);
        (*hint.mutable_data_bytes())[ids[rng() % ids.size()]] = 5;
        break;
    }
    const bool explain = rng() % 2 == 0;
    LeasePlacement scan = PlaceLease(shape, hint, free, table.Total());
    LeasePlacement fast = placer.Place(shape, hint, table, explain, claims ? &left : nullptr);
    if (explain || scan.ok) {
      ASSERT_EQ(Describe(fast), Describe(scan)) << step << " " << shape.ShortDebugString() << " "
                                                << hint.ShortDebugString();
    } else {
      ASSERT_FALSE(fast.ok) << step;
    }
    if (scan.ok) {
      ++placed;
      table.Use(scan.node_id, shape, scan.gpu_ids, +1);
      held.push_back({scan.node_id, shape, scan.gpu_ids});
    } else {
      ++refused;
    }
    for (int f = rng() % 3; f > 0 && !held.empty(); --f) {
      const size_t i = rng() % held.size();
      table.Use(held[i].node, held[i].shape, held[i].gpus, -1);
      held.erase(held.begin() + static_cast<long>(i));
    }
    if (step % 700 == 350) {
      // A node leaves and another joins: the views are rebuilt, the indexes read again.
      table.SetAlive(ids[rng() % ids.size()], false);
      add(static_cast<int>(ids.size()));
    }
  }
  EXPECT_GT(placed, 500);
  EXPECT_GT(refused, 500);
}

TEST(LeasePlacerTest, PlacesAsPlaceLeaseWhileTheTableChanges) { PlacesAsPlaceLease(false); }

TEST(LeasePlacerTest, PlacesAsPlaceLeaseBesideAClaim) { PlacesAsPlaceLease(true); }

// More shapes than the placer keeps indexes for: the least recently used go, and the
// answers stay right.
TEST(LeasePlacerTest, ManyShapesStillPlaceRight) {
  NodeTable table;
  proto::Resources r;
  r.set_cpus(1000);
  table.Set("a", "10.0.0.1", r, {}, 0);
  table.SetAlive("a", true);
  LeasePlacer placer;
  for (int round = 0; round < 2; ++round) {
    for (size_t k = 1; k <= LeasePlacer::kMaxShapes + 10; ++k) {
      LeasePlacement p = placer.Place(Shape(static_cast<double>(k)), {}, table, true);
      ASSERT_TRUE(p.ok) << k << ": " << p.reason;
      table.Use("a", Shape(static_cast<double>(k)), {}, +1);
      table.Use("a", Shape(static_cast<double>(k)), {}, -1);
    }
  }
  EXPECT_FALSE(placer.Place(Shape(1001), {}, table, true).ok);
}

}  // namespace
}  // namespace drover
