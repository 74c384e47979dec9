// The queue policy on its own: order, claims, backfill by time limit, and the reasons
// waiting jobs are given. No scheduler, no clock: `now` is an argument.
#include "scheduler/queue_policy.h"

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace drover {
namespace {

const absl::Time kNow = absl::FromUnixSeconds(1'000'000'000);

NodeUse Node(const std::string& id, double cpus, int gpus = 0) {
  NodeUse n;
  n.node_id = id;
  n.node_ip = "10.0.0." + id.substr(id.size() - 1);
  n.total.set_cpus(cpus);
  n.total.set_gpus(gpus);
  for (int i = 0; i < gpus; ++i) n.gpu_ids.push_back(i);
  return n;
}

proto::JobSpec Spec(int nproc, absl::Duration limit = absl::ZeroDuration(), int gpus = 0) {
  proto::JobSpec s;
  s.add_command("train");
  s.set_nproc(nproc);
  s.mutable_per_process()->set_cpus(1);
  s.mutable_per_process()->set_gpus(gpus);
  s.set_time_limit_ms(absl::ToInt64Milliseconds(limit));
  return s;
}

// Jobs named "a", "b", ... in submission order.
std::vector<QueuedJob> Queue(const std::vector<proto::JobSpec>& specs) {
  std::vector<QueuedJob> q;
  for (size_t i = 0; i < specs.size(); ++i) {
    q.push_back({std::string(1, static_cast<char>('a' + i)), &specs[i], 0, static_cast<int64_t>(i)});
  }
  return q;
}

HoldingJob Holding(const std::string& node, absl::Time ends_by = absl::InfiniteFuture()) {
  return HoldingJob{{node}, ends_by};
}

TEST(QueuePolicyTest, StartsWhatFitsInOrderAndCountsEarlierStartsOfThePass) {
  std::vector<proto::JobSpec> specs = {Spec(6), Spec(4), Spec(2)};
  QueuePlan plan = PlanQueue(Queue(specs), {Node("n1", 8)}, {}, kNow);
  ASSERT_EQ(plan.decisions.size(), 3u);
  EXPECT_TRUE(plan.decisions[0].start);
  EXPECT_EQ(plan.decisions[0].ranks.size(), 6u);
  // b needs 4 of the 2 left: it claims the node (it fits once a ends); c waits behind it.
  EXPECT_FALSE(plan.decisions[1].start);
  EXPECT_EQ(plan.claim.job_id, "b");
  EXPECT_EQ(plan.claim.resources.at("n1").cpus(), 4);
  EXPECT_EQ(plan.claim.earliest_start, absl::InfiniteFuture());  // a has no time limit
  EXPECT_FALSE(plan.decisions[2].start);
  EXPECT_EQ(plan.decisions[2].reason,
            "waiting behind b (submitted earlier): the free resources it will need are kept "
            "for it");
}

TEST(QueuePolicyTest, RestartingGangsGoFirstAndSayWhichRestartTheyWaitFor) {
  std::vector<proto::JobSpec> specs = {Spec(4), Spec(8)};
  specs[1].set_max_restarts(3);
  auto q = Queue(specs);
  q[1].restart_count = 2;  // b restarts: it goes before a, although submitted later
  NodeUse n1 = Node("n1", 8);
  n1.used.set_cpus(4);
  QueuePlan plan = PlanQueue(q, {n1}, {Holding("n1")}, kNow);
  ASSERT_EQ(plan.decisions.size(), 2u);
  EXPECT_EQ(plan.decisions[0].job_id, "b");
  EXPECT_TRUE(absl::StartsWith(plan.decisions[0].reason, "restart 2 of 3 waiting: needs 8"))
      << plan.decisions[0].reason;
  EXPECT_EQ(plan.claim.job_id, "b");
}

TEST(QueuePolicyTest, AJobThatCanNeverFitClaimsNothing) {
  std::vector<proto::JobSpec> specs = {Spec(16), Spec(2)};
  QueuePlan plan = PlanQueue(Queue(specs), {Node("n1", 8)}, {}, kNow);
  EXPECT_FALSE(plan.decisions[0].start);
  EXPECT_TRUE(plan.claim.job_id.empty());
  EXPECT_TRUE(plan.decisions[1].start);
}

TEST(QueuePolicyTest, ClaimKeepsGpusAndJobsBesideItStart) {
  std::vector<proto::JobSpec> specs = {Spec(2, absl::ZeroDuration(), 1), Spec(1, {}, 1),
                                       Spec(1, {}, 1)};
  specs[0].set_nproc_per_node(2);
  NodeUse n1 = Node("n1", 8, 2);
  n1.used.set_gpus(1);
  n1.used_gpus = {0};
  // a needs both GPUs of n1 (one is used): it claims them; b fits on n2; c would only
  // fit in n1's free GPU 1, which is claimed.
  QueuePlan plan = PlanQueue(Queue(specs), {n1, Node("n2", 8, 1)}, {Holding("n1")}, kNow);
  EXPECT_FALSE(plan.decisions[0].start);
  EXPECT_EQ(plan.claim.gpus.at("n1"), (std::set<int>{0, 1}));
  ASSERT_TRUE(plan.decisions[1].start);
  EXPECT_EQ(plan.decisions[1].ranks[0].node_id(), "n2");
  EXPECT_FALSE(plan.decisions[2].start);
  EXPECT_TRUE(absl::StartsWith(plan.decisions[2].reason, "waiting behind a"))
      << plan.decisions[2].reason;
}

TEST(QueuePolicyTest, BackfillUsesTheClaimOnlyUntilItsEarliestStart) {
  NodeUse n1 = Node("n1", 10);
  n1.used.set_cpus(6);
  const absl::Time ends = kNow + absl::Minutes(10);
  std::vector<proto::JobSpec> specs = {Spec(8), Spec(2, absl::Minutes(10)),
                                       Spec(2, absl::Minutes(10) + absl::Milliseconds(1)),
                                       Spec(2)};
  QueuePlan plan = PlanQueue(Queue(specs), {n1}, {Holding("n1", ends)}, kNow);
  EXPECT_EQ(plan.claim.job_id, "a");
  EXPECT_EQ(plan.claim.earliest_start, ends);
  EXPECT_TRUE(plan.decisions[1].start) << plan.decisions[1].reason;  // ends exactly then
  EXPECT_FALSE(plan.decisions[2].start);                             // a millisecond later
  EXPECT_FALSE(plan.decisions[3].start);                             // no limit
  EXPECT_EQ(plan.decisions[3].reason,
            "waiting behind a (submitted earlier): the free resources it will need are kept "
            "for it; a --time-limit ending before 2001-09-09 01:56:40 UTC would let it start "
            "now");
}

TEST(QueuePolicyTest, EarliestStartIsTheLatestLimitOfTheClaimedNodesAndCountsNewStarts) {
  // Two nodes of 4 CPUs; a (4 on n1, ends in 5 min) and b (4 on n2, ends in 20 min)
  // hold them. c wants both nodes: its claim starts when b ends. d, on another node,
  // does not count.
  NodeUse n1 = Node("n1", 4), n2 = Node("n2", 4), n3 = Node("n3", 2);
  n1.used.set_cpus(4);
  n2.used.set_cpus(4);
  std::vector<proto::JobSpec> specs = {Spec(8)};
  QueuePlan plan =
      PlanQueue(Queue(specs), {n1, n2, n3},
                {Holding("n1", kNow + absl::Minutes(5)), Holding("n2", kNow + absl::Minutes(20)),
                 Holding("n3")},
                kNow);
  EXPECT_EQ(plan.claim.earliest_start, kNow + absl::Minutes(20));
  // A job started earlier in the same pass holds its node by its own limit.
  n2.used.set_cpus(0);
  specs = {Spec(4, absl::Minutes(30)), Spec(8)};
  plan = PlanQueue(Queue(specs), {n1, n2}, {Holding("n1", kNow + absl::Minutes(5))}, kNow);
  ASSERT_TRUE(plan.decisions[0].start);
  EXPECT_EQ(plan.claim.job_id, "b");
  EXPECT_EQ(plan.claim.earliest_start, kNow + absl::Minutes(30));
}

TEST(QueuePolicyTest, FreeCapacitiesLeaveOutUsedAndClaimedResources) {
  NodeUse n1 = Node("n1", 8, 4);
  n1.used.set_cpus(2);
  n1.used_gpus = {1};
  Claim claim;
  claim.job_id = "x";
  claim.resources["n1"].set_cpus(10);  // more than is free: nothing below zero
  claim.gpus["n1"] = {2};
  auto caps = FreeCapacities({n1}, &claim);
  ASSERT_EQ(caps.size(), 1u);
  EXPECT_EQ(caps[0].available.cpus(), 0);
  EXPECT_EQ(caps[0].gpu_ids, (std::vector<int>{0, 3}));
  EXPECT_EQ(caps[0].available.gpus(), 2);
  auto totals = TotalCapacities({n1});
  EXPECT_EQ(totals[0].available.cpus(), 8);
  EXPECT_EQ(totals[0].gpu_ids.size(), 4u);
}

TEST(QueuePolicyTest, PendingReasonClassesNameWhatPlanQueueSaid) {
  // From the policy's own words, so a change of wording fails here, not in a dashboard.
  std::vector<proto::JobSpec> specs = {Spec(4), Spec(8), Spec(2)};
  specs[1].set_max_restarts(1);
  auto q = Queue(specs);
  q[1].restart_count = 1;
  NodeUse n1 = Node("n1", 8);
  n1.used.set_cpus(6);
  QueuePlan plan = PlanQueue(q, {n1}, {Holding("n1")}, kNow);
  ASSERT_EQ(plan.decisions.size(), 3u);
  std::map<std::string, std::string> classes;
  for (const auto& d : plan.decisions) classes[d.job_id] = PendingReasonClass(d.reason);
  EXPECT_EQ(classes["b"], "resources");  // a restart: "restart 1 of 1 waiting: needs ..."
  EXPECT_EQ(classes["a"], "resources");
  EXPECT_EQ(classes["c"], "behind_claim");
  plan = PlanQueue(Queue({Spec(1)}), {}, {}, kNow);
  EXPECT_STREQ(PendingReasonClass(plan.decisions[0].reason), "no_nodes")
      << plan.decisions[0].reason;
  EXPECT_STREQ(PendingReasonClass("waiting to be placed"), "not_yet_scheduled");
  EXPECT_STREQ(PendingReasonClass("restart 1 of 2 waiting: no nodes are alive; start one"),
               "no_nodes");
}

}  // namespace
}  // namespace drover
