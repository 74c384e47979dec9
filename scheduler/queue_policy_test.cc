// The queue policy on its own: order, claims, backfill by time limit, and the reasons
// waiting jobs are given. No scheduler, no clock: `now` is an argument.
#include "scheduler/queue_policy.h"

#include <map>
#include <memory>
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


// JobQueue across passes: what a pass looks at, and what it tells.
class JobQueueTest : public ::testing::Test {
 protected:
  void SetUp() override {
    cb_.start = [this](const QueuedJob& job, std::vector<proto::RankPlacement> ranks) {
      for (const auto& p : ranks) {
        table_.Use(p.node_id(), job.spec->per_process(), {}, +1);
        used_[job.job_id].push_back(p.node_id());
      }
      started_.push_back(job.job_id);
    };
    cb_.wait = [this](const QueuedJob& job, const std::string& reason) {
      ++told_;
      reasons_[job.job_id] = reason;
    };
  }
  void AddNode(const std::string& id, double cpus) {
    proto::Resources r;
    r.set_cpus(cpus);
    table_.Set(id, "10.0.0.1", r, {}, order_++);
    table_.SetAlive(id, true);
  }
  // Queues job `id` (submitted in the order of the calls) of `spec`.
  void Add(const std::string& id, const proto::JobSpec& spec) {
    specs_.push_back(std::make_unique<proto::JobSpec>(spec));
    jobs_[id] = QueuedJob{id, specs_.back().get(), 0, seq_++, nullptr};
    queue_.Add(jobs_[id]);
  }
  void Plan() {
    started_.clear();
    told_ = 0;
    queue_.Plan(table_, kNow, cb_);
  }
  // The job `id` ends: what it used is free again.
  void End(const std::string& id) {
    for (const std::string& node : used_[id]) {
      table_.Use(node, jobs_[id].spec->per_process(), {}, -1);
    }
    used_.erase(id);
  }

  NodeTable table_;
  JobQueue queue_;
  JobQueue::Callbacks cb_;
  std::vector<std::unique_ptr<proto::JobSpec>> specs_;
  std::map<std::string, QueuedJob> jobs_;
  std::map<std::string, std::vector<std::string>> used_;
  std::vector<std::string> started_;
  std::map<std::string, std::string> reasons_;
  int told_ = 0;
  int64_t seq_ = 0, order_ = 0;
};

TEST_F(JobQueueTest, WaitingJobsOfOneShapeAreToldOnceAndStartInOrder) {
  AddNode("n1", 2);
  for (int i = 0; i < 100; ++i) Add("j" + std::to_string(i), Spec(1));
  Plan();
  EXPECT_EQ(started_, (std::vector<std::string>{"j0", "j1"}));
  EXPECT_EQ(told_, 98);  // each waiting job once
  EXPECT_EQ(queue_.claim().job_id, "j2");
  EXPECT_TRUE(absl::StartsWith(reasons_["j50"], "needs 1 CPU on one node")) << reasons_["j50"];
  // Nothing changed: nothing to do.
  Plan();
  EXPECT_TRUE(started_.empty());
  EXPECT_EQ(told_, 0);
  // A new job of the same shape is told why it waits; the others are not told again.
  Add("late", Spec(1));
  Plan();
  EXPECT_TRUE(started_.empty());
  EXPECT_EQ(told_, 1);
  EXPECT_EQ(reasons_["late"], reasons_["j50"]);
  // A slot frees: the oldest waiting job starts, and the rest hear nothing new.
  End("j0");
  Plan();
  EXPECT_EQ(started_, std::vector<std::string>{"j2"});
  EXPECT_LE(told_, 1);  // at most the job that held the claim before, again
  EXPECT_EQ(queue_.claim().job_id, "j3");
  EXPECT_EQ(queue_.size(), 98u);
}

TEST_F(JobQueueTest, JobsOfDifferentShapesStartInSubmissionOrderAcrossShapes) {
  AddNode("n1", 4);
  Add("big", Spec(4));
  Add("a1", Spec(1));
  Add("b1", Spec(2));
  Add("a2", Spec(1));
  Plan();
  EXPECT_EQ(started_, std::vector<std::string>{"big"});
  End("big");
  Plan();
  // In order a1, b1, a2 (1 + 2 + 1 CPUs): all fit, oldest first.
  EXPECT_EQ(started_, (std::vector<std::string>{"a1", "b1", "a2"}));
  EXPECT_EQ(queue_.size(), 0u);
}

TEST_F(JobQueueTest, WhenTheClaimingJobGoesTheNextOneClaimsAndTheOthersHearIt) {
  AddNode("n1", 4);
  Add("running", Spec(3));
  Add("big", Spec(4));    // claims n1
  Add("small", Spec(1));  // would fit in the 1 CPU left, which is claimed
  Plan();
  ASSERT_EQ(started_, std::vector<std::string>{"running"});
  EXPECT_EQ(queue_.claim().job_id, "big");
  EXPECT_TRUE(absl::StartsWith(reasons_["small"], "waiting behind big")) << reasons_["small"];
  // big is cancelled: small takes the free CPU at the next pass.
  queue_.Remove(jobs_["big"]);
  Plan();
  EXPECT_EQ(started_, std::vector<std::string>{"small"});
  EXPECT_TRUE(queue_.claim().job_id.empty());
}

TEST_F(JobQueueTest, AFullPassTellsTheWholeShapeWhenItsReasonChanges) {
  AddNode("n1", 4);
  Add("first", Spec(4));
  for (int i = 0; i < 10; ++i) Add("w" + std::to_string(i), Spec(4));
  Plan();
  ASSERT_EQ(started_, std::vector<std::string>{"first"});
  const std::string before = reasons_["w5"];
  // A second node of 2 CPUs: the reason's numbers stay (most free: 2 < 4 needed)...
  AddNode("n2", 2);
  Plan();
  EXPECT_TRUE(started_.empty());
  // ...a node big enough frees room for one, and the others' reason changes with it
  // only if its words do.
  AddNode("n3", 4);
  Plan();
  EXPECT_EQ(started_, std::vector<std::string>{"w0"});
  EXPECT_EQ(queue_.claim().job_id, "w1");
  EXPECT_FALSE(reasons_["w9"].empty());
  EXPECT_EQ(reasons_["w9"], reasons_["w5"]);
  EXPECT_NE(before, "");
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

TEST_F(JobQueueTest, ShapesBeyondTheIndexLimitArePlacedAlike) {
  // More shapes than JobQueue keeps capacity indexes for (32): the rest scan the nodes,
  // with the same decisions, in submission order across shapes.
  AddNode("n1", 3);
  for (int i = 0; i < 40; ++i) {
    proto::JobSpec spec = Spec(1);
    spec.mutable_per_process()->set_cpus(1 + i / 100.0);
    Add("s" + std::to_string(i), spec);
  }
  Plan();
  // 1.00 + 1.01 CPUs fit in 3; s2 (1.02) claims; the rest wait behind it.
  EXPECT_EQ(started_, (std::vector<std::string>{"s0", "s1"}));
  EXPECT_EQ(queue_.claim().job_id, "s2");
  EXPECT_TRUE(absl::StartsWith(reasons_["s39"], "needs 1.39 CPUs on one node")) << reasons_["s39"];
  // Room for all: the rest start, oldest first, those with an index and those without.
  AddNode("n2", 100);
  Plan();
  ASSERT_EQ(started_.size(), 38u);
  for (int i = 0; i < 38; ++i) EXPECT_EQ(started_[i], "s" + std::to_string(i + 2));
  EXPECT_EQ(queue_.size(), 0u);
}

}  // namespace
}  // namespace drover
