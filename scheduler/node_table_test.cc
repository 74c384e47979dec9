// The node table on its own: views of ALIVE nodes in order, use and holds, versions.
#include "scheduler/node_table.h"

#include "gtest/gtest.h"

namespace drover {
namespace {

proto::Resources Cpus(double n) {
  proto::Resources r;
  r.set_cpus(n);
  return r;
}

TEST(NodeTableTest, ViewsListAliveNodesInOrderWithWhatIsFree) {
  NodeTable t;
  t.Set("b", "10.0.0.2", Cpus(8), {0, 1}, /*order=*/2);
  t.Set("a", "10.0.0.1", Cpus(4), {}, /*order=*/1);
  t.Set("c", "10.0.0.3", Cpus(2), {}, /*order=*/3);
  t.SetAlive("a", true);
  t.SetAlive("b", true);  // c is known but not ALIVE
  ASSERT_EQ(t.Free().size(), 2u);
  EXPECT_EQ(t.Free()[0].node_id, "a");
  EXPECT_EQ(t.Free()[1].node_id, "b");
  EXPECT_EQ(t.ViewIndex("b"), 1);
  EXPECT_EQ(t.ViewIndex("c"), -1);
  t.Use("b", Cpus(3), {1}, +1);
  EXPECT_EQ(t.Free()[1].available.cpus(), 5);
  EXPECT_EQ(t.Free()[1].gpu_ids, std::vector<int>{0});
  EXPECT_EQ(t.Total()[1].available.cpus(), 8);
  EXPECT_EQ(t.Total()[1].gpu_ids.size(), 2u);
  t.Use("b", Cpus(3), {1}, -1);
  EXPECT_EQ(t.Free()[1].available.cpus(), 8);
  EXPECT_EQ(t.Free()[1].gpu_ids.size(), 2u);
  // A node that goes away keeps what it uses (its jobs may come back with it).
  t.Use("a", Cpus(1), {}, +1);
  t.SetAlive("a", false);
  ASSERT_EQ(t.Free().size(), 1u);
  t.SetAlive("a", true);
  EXPECT_EQ(t.Free()[0].available.cpus(), 3);
}

TEST(NodeTableTest, HoldsSayWhenTheLastHolderEndsAtTheLatest) {
  NodeTable t;
  const absl::Time t1 = absl::FromUnixSeconds(100), t2 = absl::FromUnixSeconds(200);
  EXPECT_EQ(t.LatestHoldEnd("n1"), absl::InfinitePast());
  t.Hold({"n1", "n1", "n2"}, t1, +1);  // a repeated node counts once
  t.Hold({"n1"}, t2, +1);
  EXPECT_EQ(t.LatestHoldEnd("n1"), t2);
  EXPECT_EQ(t.LatestHoldEnd("n2"), t1);
  t.Hold({"n2"}, absl::InfiniteFuture(), +1);
  EXPECT_EQ(t.LatestHoldEnd("n2"), absl::InfiniteFuture());
  t.Hold({"n2"}, absl::InfiniteFuture(), -1);
  t.Hold({"n1"}, t2, -1);
  EXPECT_EQ(t.LatestHoldEnd("n1"), t1);
  EXPECT_EQ(t.LatestHoldEnd("n2"), t1);
  t.Hold({"n1", "n2"}, t1, -1);
  EXPECT_EQ(t.LatestHoldEnd("n1"), absl::InfinitePast());
}

TEST(NodeTableTest, VersionsMoveWithChanges) {
  NodeTable t;
  t.Set("a", "10.0.0.1", Cpus(4), {}, 1);
  t.SetAlive("a", true);
  const uint64_t v = t.version(), totals = t.totals_version();
  t.Free();  // reading changes nothing
  EXPECT_EQ(t.version(), v);
  t.Use("a", Cpus(1), {}, +1);
  EXPECT_GT(t.version(), v);
  EXPECT_EQ(t.totals_version(), totals);  // use is not a total
  t.Use("missing", Cpus(1), {}, +1);      // unknown: ignored
  t.SetAlive("a", false);
  EXPECT_GT(t.totals_version(), totals);
}

}  // namespace
}  // namespace drover
