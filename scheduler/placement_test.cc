#include "scheduler/placement.h"

#include <cmath>
#include <set>

#include "gtest/gtest.h"

namespace drover {
namespace {

NodeCapacity Node(const std::string& id, double cpus, int gpus) {
  NodeCapacity n;
  n.node_id = id;
  n.node_ip = "10.0.0." + id.substr(id.size() - 1);
  n.available.set_cpus(cpus);
  n.available.set_gpus(gpus);
  n.available.set_memory_bytes(64LL << 30);
  for (int i = 0; i < gpus; ++i) n.gpu_ids.push_back(i);
  return n;
}

proto::JobSpec Spec(int nproc, int ppn, double cpus, int gpus) {
  proto::JobSpec s;
  s.add_command("true");
  s.set_nproc(nproc);
  s.set_nproc_per_node(ppn);
  s.mutable_per_process()->set_cpus(cpus);
  s.mutable_per_process()->set_gpus(gpus);
  return s;
}

TEST(PlacementTest, NprocPerNodeGivesContiguousRanksAndDistinctGpus) {
  auto r = PlaceGang(Spec(4, 2, 1, 1), {Node("n1", 8, 4), Node("n2", 8, 4)});
  ASSERT_TRUE(r.ok) << r.reason;
  ASSERT_EQ(r.ranks.size(), 4u);
  std::set<std::pair<std::string, int>> gpus;
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(r.ranks[i].rank(), i);
    EXPECT_EQ(r.ranks[i].local_rank(), i % 2);
    EXPECT_EQ(r.ranks[i].group_rank(), i / 2);
    EXPECT_EQ(r.ranks[i].node_id(), i < 2 ? "n1" : "n2");
    ASSERT_EQ(r.ranks[i].gpu_ids_size(), 1);
    gpus.insert({r.ranks[i].node_id(), r.ranks[i].gpu_ids(0)});
  }
  EXPECT_EQ(gpus.size(), 4u);
}

TEST(PlacementTest, GangIsAllOrNothingWithReadableReason) {
  auto r = PlaceGang(Spec(1, 1, 1, 4), {Node("n1", 8, 2), Node("n2", 8, 1)});
  EXPECT_FALSE(r.ok);
  EXPECT_TRUE(r.ranks.empty());
  EXPECT_EQ(r.reason, "needs 4 GPUs on one node; the most free on any node is 2 GPUs");
}

TEST(PlacementTest, NotEnoughNodesForNprocPerNode) {
  auto r = PlaceGang(Spec(6, 2, 1, 0), {Node("n1", 2, 0), Node("n2", 1, 0), Node("n3", 4, 0)});
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.reason.find("needs 3 nodes with room for 2 processes"), std::string::npos)
      << r.reason;
  EXPECT_NE(r.reason.find("2 of 3 nodes"), std::string::npos) << r.reason;
}

TEST(PlacementTest, PackUsesFewestNodesSpreadUsesAll) {
  std::vector<NodeCapacity> nodes = {Node("n1", 2, 0), Node("n2", 4, 0), Node("n3", 4, 0)};
  auto pack = PlaceGang(Spec(4, 0, 1, 0), nodes);
  ASSERT_TRUE(pack.ok);
  for (const auto& p : pack.ranks) EXPECT_EQ(p.node_id(), "n2");
  auto spec = Spec(3, 0, 1, 0);
  spec.set_strategy(proto::SPREAD);
  auto spread = PlaceGang(spec, nodes);
  ASSERT_TRUE(spread.ok);
  std::set<std::string> used;
  for (const auto& p : spread.ranks) used.insert(p.node_id());
  EXPECT_EQ(used.size(), 3u);
}

TEST(PlacementTest, TotalCapacityShortfallSaysHowMuchFits) {
  auto r = PlaceGang(Spec(8, 0, 1, 0), {Node("n1", 2, 0), Node("n2", 2, 0)});
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.reason.find("hold only 4"), std::string::npos) << r.reason;
}

TEST(PlacementTest, CustomResourcesAreHonoured) {
  auto n1 = Node("n1", 8, 0);
  auto n2 = Node("n2", 8, 0);
  (*n2.available.mutable_custom())["ssd"] = 1;
  auto spec = Spec(1, 0, 1, 0);
  (*spec.mutable_per_process()->mutable_custom())["ssd"] = 1;
  auto r = PlaceGang(spec, {n1, n2});
  ASSERT_TRUE(r.ok);
  EXPECT_EQ(r.ranks[0].node_id(), "n2");
  (*spec.mutable_per_process()->mutable_custom())["ssd"] = 2;
  r = PlaceGang(spec, {n1, n2});
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.reason.find("2 of 'ssd' on one node"), std::string::npos) << r.reason;
}

TEST(PlacementTest, ValidateRejectsBadSpecs) {
  EXPECT_EQ(ValidateJobSpec(Spec(1, 0, 1, 0)), "");
  EXPECT_NE(ValidateJobSpec(Spec(0, 0, 1, 0)).find("at least 1"), std::string::npos);
  EXPECT_NE(ValidateJobSpec(Spec(3, 2, 1, 0)).find("not a multiple"), std::string::npos);
  EXPECT_NE(ValidateJobSpec(Spec(1, 0, -1, 0)).find("negative"), std::string::npos);
  proto::JobSpec empty = Spec(1, 0, 1, 0);
  empty.clear_command();
  EXPECT_NE(ValidateJobSpec(empty).find("no command"), std::string::npos);
}

// Found by //fuzz:scheduler_core: a node registering NaN or infinite resources made
// placement cast NaN (or a quotient beyond a long) to an integer, undefined behaviour;
// and duplicate GPU ids would pin two ranks to one GPU. Such offers are now refused at
// registration, specs with infinite amounts at submission, and placement clamps.
TEST(PlacementTest, NodeOffersMustBeFiniteWithDistinctGpuIds) {
  auto ids = [](std::vector<int> v) {
    google::protobuf::RepeatedField<int32_t> out;
    for (int i : v) out.Add(i);
    return out;
  };
  proto::Resources total;
  total.set_cpus(8);
  total.set_gpus(2);
  EXPECT_EQ(ValidateNodeOffer(total, ids({0, 1})), "");
  EXPECT_NE(ValidateNodeOffer(total, ids({0, 0})).find("once"), std::string::npos);
  EXPECT_NE(ValidateNodeOffer(total, ids({-1, 0})).find(">= 0"), std::string::npos);
  EXPECT_NE(ValidateNodeOffer(total, ids({0})).find("once"), std::string::npos);
  for (double bad : {std::nan(""), double{INFINITY}, -1.0}) {
    proto::Resources r = total;
    r.set_cpus(bad);
    EXPECT_NE(ValidateNodeOffer(r, ids({0, 1})).find("finite and not negative"),
              std::string::npos)
        << bad;
    r = total;
    (*r.mutable_custom())["ssd"] = bad;
    EXPECT_NE(ValidateNodeOffer(r, ids({0, 1})).find("'ssd' must be finite"), std::string::npos)
        << bad;
  }
  proto::JobSpec spec = Spec(1, 0, INFINITY, 0);
  EXPECT_NE(ValidateJobSpec(spec).find("finite and not negative"), std::string::npos);
}

TEST(PlacementTest, HugeCapacityOverTinyNeedsIsClampedNotOverflowed) {
  NodeCapacity n = Node("n1", 1e300, 0);
  PlacementResult r = PlaceGang(Spec(4, 0, 1e-8, 0), {n});
  ASSERT_TRUE(r.ok) << r.reason;
  EXPECT_EQ(r.ranks.size(), 4u);
}

}  // namespace
}  // namespace drover
