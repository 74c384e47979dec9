// SchedulerCore driven directly, with a recording fake in place of the agents' gRPC
// service. Covers what the integration tests cannot force: handlers called twice,
// reports in odd orders, and exact resource accounting.
#include "scheduler/scheduler_core.h"

#include <algorithm>
#include <atomic>
#include <set>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "scheduler/testing/core_fakes.h"
#include "tests/util/test_util.h"

namespace drover {
namespace {

using testing::FakeAgents;
using testing::SharedStore;
using testing::OneCpuJob;
using testing::WaitFor;

// Runs `call` (a long poll) on a thread, then `trigger`; returns what `call` answered.
// The clock is fake and never advanced, so an answer means `trigger` woke the call, not
// its timeout. A call still waiting after 10 s fails the test (and is released by
// advancing the clock past any wait).
template <typename Call, typename Trigger>
auto AnswerWithoutTimePassing(FakeClock* clock, Call call, Trigger trigger) {
  decltype(call()) answer;
  std::atomic<bool> done{false};
  std::thread t([&] {
    answer = call();
    done = true;
  });
  trigger();
  EXPECT_TRUE(WaitFor([&] { return done.load(); })) << "the call waited for its timeout";
  if (!done) clock->Advance(absl::Hours(1));
  t.join();
  return answer;
}

// A FakeClock that counts the waits reaching further ahead than the monitor's tick
// (200 ms), so that a test can act once the long poll it means to wake is waiting
// (acting earlier would let a call that never waits pass by luck).
class WaitCountingClock : public FakeClock {
 public:
  bool WaitWithDeadline(absl::CondVar* cv, absl::Mutex* mu, absl::Time deadline) override
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    const absl::Time now = Now();
    if (deadline - now > absl::Milliseconds(500)) ++long_waits_;
    if (deadline > now && deadline - now <= absl::Milliseconds(200)) {
      absl::MutexLock l(&seen_mu_);
      last_wait_began_ = now;
    }
    return FakeClock::WaitWithDeadline(cv, mu, deadline);
  }
  // How many waits of more than 500 ms have begun.
  int64_t long_waits() const { return long_waits_.load(); }
  // The fake time at which the latest wait of at most the monitor's tick (200 ms) that
  // had to wait began: the monitor waits again only after a pass, so this reaching
  // Now() means a pass ran at Now() (the core's other waits are long).
  absl::Time last_wait_began() {
    absl::MutexLock l(&seen_mu_);
    return last_wait_began_;
  }

 private:
  std::atomic<int64_t> long_waits_{0};
  absl::Mutex seen_mu_;
  absl::Time last_wait_began_ ABSL_GUARDED_BY(seen_mu_) = absl::InfinitePast();
};

class SchedulerCoreTest : public ::testing::Test {
 protected:
  void SetUp() override { Make(absl::Seconds(30)); }

  // A new core over the same store. With `fake` time moves only by clock_.Advance.
  void Make(absl::Duration node_timeout, bool fake = false) {
    core_.reset();
    auto agents = std::make_unique<FakeAgents>();
    agents_ = agents.get();
    SchedulerOptions o;
    o.node_timeout = node_timeout;
    if (fake) o.clock = &clock_;
    core_ = std::make_unique<SchedulerCore>(o, std::make_unique<SharedStore>(store_.get()),
                                            std::move(agents));
    ASSERT_TRUE(core_->Start().ok());
  }

  std::string Register(const std::string& ip, int gpus, const std::string& id = "") {
    proto::RegisterNodeRequest req;
    req.set_node_id(id);
    req.set_agent_address(ip + ":7000");
    req.set_node_ip(ip);
    req.mutable_total()->set_cpus(8);
    req.mutable_total()->set_gpus(gpus);
    for (int i = 0; i < gpus; ++i) req.add_gpu_ids(i);
    auto r = core_->RegisterNode(req);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? r->node_id() : "";
  }

  proto::JobInfo Submit(int nproc, int ppn, int gpus, int max_restarts = 0,
                        const std::string& key = "") {
    proto::JobSpec spec;
    spec.add_command("train");
    spec.set_nproc(nproc);
    spec.set_nproc_per_node(ppn);
    spec.mutable_per_process()->set_cpus(1);
    spec.mutable_per_process()->set_gpus(gpus);
    spec.set_max_restarts(max_restarts);
    spec.set_idempotency_key(key);
    auto j = core_->SubmitJob(spec);
    EXPECT_TRUE(j.ok()) << j.status();
    return j.ok() ? *j : proto::JobInfo();
  }

  // An AddObjectLocations of one copy.
  static proto::AddObjectLocationsRequest OneCopy(const std::string& node_id,
                                                  const std::string& object_id, int64_t size) {
    proto::AddObjectLocationsRequest add;
    add.set_node_id(node_id);
    auto* o = add.add_objects();
    o->set_object_id(object_id);
    o->set_size(size);
    return add;
  }

  proto::JobInfo Job(const std::string& id) { return *core_->GetJob(id, 0, absl::ZeroDuration()); }

  void Exit(const std::string& node, const std::string& job, int rank, int code, int gen = 0) {
    proto::ReportExitRequest req;
    req.set_node_id(node);
    req.set_job_id(job);
    req.mutable_exit()->set_rank(rank);
    req.mutable_exit()->set_exit_code(code);
    req.mutable_exit()->set_generation(gen);
    core_->ReportExit(req);
  }

  WaitCountingClock clock_;
  std::unique_ptr<StateStore> store_ = NewMemoryStateStore();
  FakeAgents* agents_ = nullptr;
  std::unique_ptr<SchedulerCore> core_;
};

// Heartbeats, exits and reads from many threads at once are applied in batches
// (RunBatched): every report counts, each freed slot is filled, and every call returns.
TEST_F(SchedulerCoreTest, ReportsFromManyThreadsAreAllApplied) {
  std::vector<std::string> nodes;
  for (int i = 0; i < 4; ++i) nodes.push_back(Register(absl::StrCat("10.0.0.", i + 1), 0));
  std::vector<std::string> first;  // fill the 32 CPUs
  for (int i = 0; i < 32; ++i) first.push_back(Submit(1, 0, 0).job_id());
  for (int i = 0; i < 100; ++i) Submit(1, 0, 0);
  ASSERT_TRUE(WaitFor([&] { return agents_->starts() == 32; }));
  std::map<std::string, std::string> node_of;  // job -> node
  for (const auto& [address, req] : agents_->start_calls()) {
    for (size_t n = 0; n < nodes.size(); ++n) {
      if (address == absl::StrCat("10.0.0.", n + 1, ":7000")) node_of[req.job_id()] = nodes[n];
    }
  }
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int i = t; i < 32; i += 8) {
        proto::HeartbeatRequest hb;
        hb.set_node_id(nodes[i % nodes.size()]);
        EXPECT_TRUE(core_->Heartbeat(hb).known());
        Exit(node_of[first[i]], first[i], 0, 0);
        EXPECT_EQ(core_->ClusterStatus().nodes_size(), 4);
        proto::ListJobsRequest list;
        list.set_limit(5);
        EXPECT_EQ(core_->ListJobs(list).size(), 5u);
      }
    });
  }
  for (auto& t : threads) t.join();
  for (const std::string& id : first) EXPECT_EQ(Job(id).state(), proto::SUCCEEDED) << id;
  auto counts = core_->ClusterStatus().job_counts();
  EXPECT_EQ(counts["SUCCEEDED"], 32);
  EXPECT_EQ(counts["RUNNING"], 32);  // each freed CPU taken by a queued job
  EXPECT_EQ(counts["PENDING"], 68);
  EXPECT_TRUE(WaitFor([&] { return agents_->starts() == 64; }));
}

TEST_F(SchedulerCoreTest, RegisterTwiceKeepsOneNode) {
  std::string id = Register("10.0.0.1", 2);
  EXPECT_EQ(Register("10.0.0.1", 2, id), id);
  EXPECT_EQ(core_->ClusterStatus().nodes_size(), 1);
}

TEST_F(SchedulerCoreTest, SubmitWithSameKeyTwiceCreatesOneJob) {
  Register("10.0.0.1", 0);
  auto a = Submit(1, 0, 0, 0, "key-1");
  auto b = Submit(1, 0, 0, 0, "key-1");
  EXPECT_EQ(a.job_id(), b.job_id());
  EXPECT_EQ(core_->ListJobs({}).size(), 1u);
}

TEST_F(SchedulerCoreTest, StartedProcessesCountTheRanksOfNodesWhoseStartReturned) {
  Register("10.0.0.1", 0);
  Register("10.0.0.2", 0);
  auto job = Submit(4, 2, 0);
  EXPECT_EQ(job.started_processes(), 0);
  ASSERT_TRUE(WaitFor([&] { return Job(job.job_id()).started_processes() == 4; }));
  EXPECT_EQ(agents_->starts(), 2u);

  // A node whose start fails adds nothing; the nodes started before it still count.
  agents_->FailAddress("10.0.0.2:7000");
  auto second = Submit(4, 2, 0);
  ASSERT_TRUE(WaitFor([&] { return Job(second.job_id()).state() == proto::FAILED; }));
  auto calls = agents_->start_calls();
  std::vector<std::string> order;
  for (const auto& [address, req] : calls) {
    if (req.job_id() == second.job_id()) order.push_back(address);
  }
  ASSERT_FALSE(order.empty());
  EXPECT_EQ(Job(second.job_id()).started_processes(), order[0] == "10.0.0.2:7000" ? 0 : 2);
}

TEST_F(SchedulerCoreTest, ExitReportedTwiceCountsOnceAndGpusAreFreedOnlyWhenAllExited) {
  std::string n1 = Register("10.0.0.1", 2);
  auto job = Submit(2, 2, 1);
  ASSERT_TRUE(WaitFor([&] { return agents_->starts() == 1; }));
  EXPECT_EQ(core_->ClusterStatus().nodes(0).free().gpus(), 0);
  Exit(n1, job.job_id(), 0, 0);
  Exit(n1, job.job_id(), 0, 0);
  auto j = Job(job.job_id());
  EXPECT_EQ(j.state(), proto::RUNNING);
  EXPECT_EQ(j.succeeded_ranks_size(), 1);
  EXPECT_EQ(j.live_processes(), 1);
  EXPECT_EQ(core_->ClusterStatus().nodes(0).free().gpus(), 0);
  Exit(n1, job.job_id(), 1, 0);
  j = Job(job.job_id());
  EXPECT_EQ(j.state(), proto::SUCCEEDED);
  EXPECT_EQ(core_->ClusterStatus().nodes(0).free().gpus(), 2);
}

// ListJobs and the job counts come from indexes kept as jobs change (not from a scan
// and sort of every job): newest first, filtered by state, limited; counts by state.
TEST_F(SchedulerCoreTest, ListsNewestFirstAndCountsJobsByState) {
  std::string n1 = Register("10.0.0.1", 0);  // 8 CPUs
  std::vector<std::string> ids;
  for (int i = 0; i < 5; ++i) ids.push_back(Submit(4, 0, 0).job_id());  // 2 run, 3 wait
  ASSERT_TRUE(core_->CancelJob(ids[3]).ok());
  proto::ListJobsRequest req;
  req.set_limit(2);
  auto newest = core_->ListJobs(req);
  ASSERT_EQ(newest.size(), 2u);
  EXPECT_EQ(newest[0].job_id(), ids[4]);
  EXPECT_EQ(newest[1].job_id(), ids[3]);
  req.add_states(proto::PENDING);
  req.set_limit(0);
  auto pending = core_->ListJobs(req);
  ASSERT_EQ(pending.size(), 2u);
  EXPECT_EQ(pending[0].job_id(), ids[4]);
  EXPECT_EQ(pending[1].job_id(), ids[2]);
  auto counts = core_->ClusterStatus().job_counts();
  EXPECT_EQ(counts["RUNNING"], 2);
  EXPECT_EQ(counts["PENDING"], 2);
  EXPECT_EQ(counts["CANCELLED"], 1);
  EXPECT_EQ(counts["SUCCEEDED"], 0);
  // The first job ends: the oldest waiting one starts in its place.
  for (int r = 0; r < 4; ++r) Exit(n1, ids[0], r, 0);
  EXPECT_EQ(Job(ids[2]).state(), proto::RUNNING);
  EXPECT_EQ(Job(ids[4]).state(), proto::PENDING);
  counts = core_->ClusterStatus().job_counts();
  EXPECT_EQ(counts["SUCCEEDED"], 1);
  EXPECT_EQ(counts["RUNNING"], 2);
  EXPECT_EQ(counts["PENDING"], 1);
}

// The oldest job that does not fit keeps what it will need: a later small job that
// would fit in that space waits (and says behind whom); one that fits elsewhere starts.
TEST_F(SchedulerCoreTest, OldestWaitingJobIsNotStarvedBySmallerLaterOnes) {
  std::string n1 = Register("10.0.0.1", 0);  // 8 CPUs each
  std::string n2 = Register("10.0.0.2", 0);
  auto running = Submit(12, 0, 0);  // n1 full, 4 CPUs of n2
  ASSERT_EQ(Job(running.job_id()).state(), proto::RUNNING);
  auto big = Submit(16, 0, 0);  // both nodes, whole
  ASSERT_EQ(Job(big.job_id()).state(), proto::PENDING);
  auto small = Submit(2, 0, 0);  // would fit in n2's 4 free CPUs
  auto waiting = Job(small.job_id());
  EXPECT_EQ(waiting.state(), proto::PENDING);
  EXPECT_EQ(waiting.reason(),
            absl::StrCat("waiting behind ", big.job_id(),
                         " (submitted earlier): the free resources it will need are kept for it"));
  // The running job ends: the big one starts, the small one still waits (for space now).
  auto placed = Job(running.job_id()).placement();
  for (const auto& p : placed) Exit(p.node_id(), running.job_id(), p.rank(), 0);
  EXPECT_EQ(Job(big.job_id()).state(), proto::RUNNING);
  waiting = Job(small.job_id());
  EXPECT_EQ(waiting.state(), proto::PENDING);
  EXPECT_FALSE(absl::StrContains(waiting.reason(), "waiting behind")) << waiting.reason();
  auto big_placed = Job(big.job_id()).placement();
  for (const auto& p : big_placed) Exit(p.node_id(), big.job_id(), p.rank(), 0);
  EXPECT_EQ(Job(small.job_id()).state(), proto::RUNNING);
}

TEST_F(SchedulerCoreTest, JobsThatFitBesideTheOldestWaitingOneStillStart) {
  std::string n1 = Register("10.0.0.1", 0);  // 8 CPUs each
  std::string n2 = Register("10.0.0.2", 0);
  auto a = Submit(6, 0, 0);  // 6 CPUs of n1
  auto b = Submit(6, 6, 0);  // 6 CPUs of n2
  ASSERT_EQ(Job(a.job_id()).placement(0).node_id(), n1);
  ASSERT_EQ(Job(b.job_id()).placement(0).node_id(), n2);
  auto big = Submit(8, 8, 0);  // a whole node: none is free; it claims n1
  ASSERT_EQ(Job(big.job_id()).state(), proto::PENDING);
  auto beside = Submit(2, 0, 0);  // fits in n2's 2 free CPUs, outside the claim
  auto started = Job(beside.job_id());
  ASSERT_EQ(started.state(), proto::RUNNING) << started.reason();
  EXPECT_EQ(started.placement(0).node_id(), n2);
  auto held = Submit(2, 0, 0);  // only n1's 2 free CPUs are left, and they are claimed
  EXPECT_EQ(Job(held.job_id()).state(), proto::PENDING);
  EXPECT_TRUE(absl::StrContains(Job(held.job_id()).reason(), "waiting behind " + big.job_id()))
      << Job(held.job_id()).reason();
  // Only the oldest blocked job holds a claim: cancelled, the next one starts.
  ASSERT_TRUE(core_->CancelJob(big.job_id()).ok());
  EXPECT_EQ(Job(held.job_id()).state(), proto::RUNNING) << Job(held.job_id()).reason();
}

// A restarted gang may land elsewhere; the job remembers every node that ran it (where
// its output stays).
TEST_F(SchedulerCoreTest, NodesUsedListsEveryNodeOfEveryGeneration) {
  std::string n1 = Register("10.0.0.1", 0);
  std::string n2 = Register("10.0.0.2", 0);
  auto other = Submit(4, 0, 0);  // first of two equal nodes: n1
  auto job = Submit(1, 0, 0, /*max_restarts=*/1);  // more room on n2
  ASSERT_EQ(Job(other.job_id()).placement(0).node_id(), n1);
  ASSERT_EQ(Job(job.job_id()).placement(0).node_id(), n2);
  for (int r = 0; r < 4; ++r) Exit(n1, other.job_id(), r, 0);
  Exit(n2, job.job_id(), 0, 1);  // generation 1 goes to the first of two empty nodes
  auto j = Job(job.job_id());
  ASSERT_EQ(j.restart_count(), 1);
  ASSERT_EQ(j.placement(0).node_id(), n1);
  EXPECT_THAT(std::vector<std::string>(j.nodes_used().begin(), j.nodes_used().end()),
              ::testing::ElementsAre(n2, n1));
}

// A generation that runs past the job's time limit is stopped and the job fails
// (exit code 124), with no restart even when restarts are left.
TEST_F(SchedulerCoreTest, JobPastItsTimeLimitIsStoppedAndFailsWithoutRestart) {
  Make(absl::Seconds(30), /*fake=*/true);
  std::string n1 = Register("10.0.0.1", 0);
  proto::JobSpec spec;
  spec.add_command("train");
  spec.set_nproc(2);
  spec.mutable_per_process()->set_cpus(1);
  spec.set_max_restarts(3);
  spec.set_time_limit_ms(300);
  auto job = core_->SubmitJob(spec);
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_EQ(Job(job->job_id()).state(), proto::RUNNING);
  EXPECT_EQ(Job(job->job_id()).generation_start_ms(), absl::ToUnixMillis(clock_.Now()));
  clock_.Advance(absl::Milliseconds(300));  // the limit, not past it
  // Let the monitor pass at exactly the limit (this raced with the check below and
  // failed the job: the limit counted as past), then 1 ms later (it must come then).
  ASSERT_TRUE(WaitFor([&] { return clock_.last_wait_began() == clock_.Now(); }));
  EXPECT_EQ(Job(job->job_id()).state(), proto::RUNNING);
  clock_.Advance(absl::Milliseconds(1));
  ASSERT_TRUE(WaitFor([&] { return Job(job->job_id()).state() == proto::FAILED; }));
  auto j = Job(job->job_id());
  EXPECT_EQ(j.exit_code(), 124);
  EXPECT_EQ(j.restart_count(), 0);
  EXPECT_TRUE(absl::StrContains(j.reason(), "time limit of 300ms")) << j.reason();
  EXPECT_TRUE(WaitFor([&] { return agents_->stops() >= 1; })) << "nothing was stopped";
  // Its processes still hold the node until they are reported gone.
  EXPECT_EQ(core_->ClusterStatus().nodes(0).free().cpus(), 6);
  Exit(n1, job->job_id(), 0, 143);
  Exit(n1, job->job_id(), 1, 143);
  EXPECT_EQ(core_->ClusterStatus().nodes(0).free().cpus(), 8);
  EXPECT_EQ(Job(job->job_id()).state(), proto::FAILED);
  spec.set_time_limit_ms(-1);
  EXPECT_EQ(core_->SubmitJob(spec).status().code(), absl::StatusCode::kInvalidArgument);
}

// With time limits known, a job sure to end before the claiming job could start may
// use the claimed resources meanwhile; a longer one, or one without a limit, waits.
TEST_F(SchedulerCoreTest, ShortJobsBackfillAClaimTheyEndBefore) {
  // The node sends no heartbeat while the clock moves 4 minutes: a node timeout beyond
  // that keeps the monitor from declaring it dead before the last submissions (a race
  // that failed this test about one run in six on a loaded machine).
  Make(absl::Hours(1), /*fake=*/true);
  Register("10.0.0.1", 0);  // 8 CPUs
  auto limited = [&](int nproc, absl::Duration limit) {
    proto::JobSpec spec;
    spec.add_command("train");
    spec.set_nproc(nproc);
    spec.mutable_per_process()->set_cpus(1);
    spec.set_time_limit_ms(absl::ToInt64Milliseconds(limit));
    auto j = core_->SubmitJob(spec);
    EXPECT_TRUE(j.ok()) << j.status();
    return j.ok() ? j->job_id() : "";
  };
  const std::string running = limited(6, absl::Minutes(10));
  ASSERT_EQ(Job(running).state(), proto::RUNNING);
  const std::string big = limited(8, absl::ZeroDuration());  // claims the node
  ASSERT_EQ(Job(big).state(), proto::PENDING);
  const std::string too_long = limited(2, absl::Minutes(20));
  const std::string unlimited = limited(2, absl::ZeroDuration());
  const std::string short_one = limited(2, absl::Minutes(5));
  EXPECT_EQ(Job(too_long).state(), proto::PENDING);
  EXPECT_EQ(Job(unlimited).state(), proto::PENDING);
  // The claim can start when the running job's limit ends: 10 minutes from now.
  const std::string until = absl::FormatTime("%Y-%m-%d %H:%M:%S UTC",
                                             clock_.Now() + absl::Minutes(10),
                                             absl::UTCTimeZone());
  EXPECT_TRUE(absl::StrContains(Job(unlimited).reason(),
                                "a --time-limit ending before " + until + " would let it start"))
      << Job(unlimited).reason();
  EXPECT_EQ(Job(short_one).state(), proto::RUNNING) << Job(short_one).reason();
  // Time passes: a job ending exactly when the claim may start still borrows it, one
  // ending a millisecond later does not.
  ASSERT_TRUE(core_->CancelJob(short_one).ok());
  Exit(Job(short_one).placement(0).node_id(), short_one, 0, 143);
  Exit(Job(short_one).placement(0).node_id(), short_one, 1, 143);
  clock_.Advance(absl::Minutes(4));
  const std::string late = limited(2, absl::Minutes(6) + absl::Milliseconds(1));
  EXPECT_EQ(Job(late).state(), proto::PENDING);
  const std::string exact = limited(2, absl::Minutes(6));
  EXPECT_EQ(Job(exact).state(), proto::RUNNING) << Job(exact).reason();
}

TEST_F(SchedulerCoreTest, MasterNodeIsStartedFirstAndOthersGetItsPort) {
  Register("10.0.0.1", 0);
  Register("10.0.0.2", 0);
  auto job = Submit(4, 2, 0);
  ASSERT_TRUE(WaitFor([&] { return agents_->starts() == 2; }));
  auto calls = agents_->start_calls();
  EXPECT_EQ(calls[0].second.master_port(), 0);
  EXPECT_EQ(calls[1].second.master_port(), 29500);
  EXPECT_EQ(calls[0].second.processes(0).rank(), 0);
  EXPECT_EQ(calls[1].second.master_addr(), "10.0.0.1");
  EXPECT_EQ(calls[1].second.group_rank(), 1);
  EXPECT_EQ(Job(job.job_id()).master_port(), 29500);
}

TEST_F(SchedulerCoreTest, FailureOfOneRankFailsTheGangAndStopsTheOthers) {
  std::string n1 = Register("10.0.0.1", 0);
  auto job = Submit(2, 0, 0);
  ASSERT_TRUE(WaitFor([&] { return agents_->starts() == 1; }));
  Exit(n1, job.job_id(), 1, 9);
  auto j = Job(job.job_id());
  EXPECT_EQ(j.state(), proto::FAILED);
  EXPECT_EQ(j.exit_code(), 9);
  EXPECT_TRUE(absl::StrContains(j.reason(), "rank 1 on node " + n1)) << j.reason();
  EXPECT_TRUE(WaitFor([&] { return agents_->stops() >= 1; }));
  // The killed rank's exit (SIGTERM) does not replace the root cause.
  proto::ReportExitRequest req;
  req.set_node_id(n1);
  req.set_job_id(job.job_id());
  req.mutable_exit()->set_rank(0);
  req.mutable_exit()->set_signal(15);
  core_->ReportExit(req);
  j = Job(job.job_id());
  EXPECT_EQ(j.root_cause().rank(), 1);
  EXPECT_EQ(j.live_processes(), 0);
}

TEST_F(SchedulerCoreTest, RestartStartsTheNextGenerationOnlyAfterTheWholeGangExited) {
  std::string n1 = Register("10.0.0.1", 0);
  auto job = Submit(2, 0, 0, /*max_restarts=*/1);
  ASSERT_TRUE(WaitFor([&] { return agents_->starts() == 1; }));
  Exit(n1, job.job_id(), 0, 1);
  EXPECT_TRUE(Job(job.job_id()).restarting());
  EXPECT_EQ(agents_->starts(), 1u);
  Exit(n1, job.job_id(), 1, 0, /*gen=*/1);  // a stale generation is ignored
  EXPECT_EQ(Job(job.job_id()).live_processes(), 1);
  Exit(n1, job.job_id(), 1, 143);
  ASSERT_TRUE(WaitFor([&] { return agents_->starts() == 2; }));
  auto j = Job(job.job_id());
  EXPECT_EQ(j.state(), proto::RUNNING);
  EXPECT_EQ(j.restart_count(), 1);
  EXPECT_EQ(agents_->start_calls()[1].second.generation(), 1);
}

TEST_F(SchedulerCoreTest, UnreachableAgentFailsTheJobWithTheReason) {
  Register("10.0.0.1", 0);
  agents_->FailAddress("10.0.0.1:7000");
  auto job = Submit(1, 0, 0);
  ASSERT_TRUE(WaitFor([&] { return Job(job.job_id()).state() == proto::FAILED; }));
  EXPECT_TRUE(absl::StrContains(Job(job.job_id()).reason(), "could not be started"));
}

// When the master node's start fails, the ranks of the other nodes, never started,
// must end too: else they stay "live", the job ends FAILED with live processes (or a
// restarting gang waits forever) and their resources are never freed.
TEST_F(SchedulerCoreTest, AFailedMasterStartEndsTheRanksTheOtherNodesNeverStarted) {
  std::string n1 = Register("10.0.0.1", 0);
  std::string n2 = Register("10.0.0.2", 0);
  agents_->FailAddress("10.0.0.1:7000");
  auto job = Submit(2, 1, 0);
  ASSERT_TRUE(WaitFor([&] {
    auto j = Job(job.job_id());
    return j.state() == proto::FAILED && j.live_processes() == 0;
  })) << Job(job.job_id()).DebugString();
  ASSERT_EQ(Job(job.job_id()).placement(0).node_id(), n1) << "the master must be the failing node";
  EXPECT_EQ(agents_->starts(), 1u) << "the second node was asked to start";
  EXPECT_TRUE(absl::StrContains(Job(job.job_id()).reason(), "could not be started"))
      << Job(job.job_id()).reason();
  const proto::GetClusterStatusReply status = core_->ClusterStatus();  // not a temporary
  for (const auto& n : status.nodes()) EXPECT_EQ(n.free().cpus(), 8) << n.node_id();
}

// Agents forget a job's exited processes only once the job's record is saved
// (write-behind): a scheduler killed in between would reload the record from before
// the exits, the agent would no longer report them, and a job that SUCCEEDED would
// come back FAILED ("its node agent restarted and no longer has the process").
TEST_F(SchedulerCoreTest, AgentsForgetExitsOnlyOnceTheJobsEndIsSaved) {
  class FlakyStore : public SharedStore {
   public:
    using SharedStore::SharedStore;
    absl::Status PutJob(const proto::JobInfo& j) override {
      if (down.load()) return absl::UnavailableError("down");
      return SharedStore::PutJob(j);
    }
    std::atomic<bool> down{false};
  };
  core_.reset();
  auto flaky = std::make_unique<FlakyStore>(store_.get());
  FlakyStore* store = flaky.get();
  auto agents = std::make_unique<FakeAgents>();
  agents_ = agents.get();
  core_ = std::make_unique<SchedulerCore>(SchedulerOptions{}, std::move(flaky), std::move(agents));
  ASSERT_TRUE(core_->Start().ok());
  std::string n1 = Register("10.0.0.1", 0);
  auto job = Submit(1, 0, 0);
  ASSERT_TRUE(WaitFor([&] { return agents_->starts() == 1; }));
  store->down = true;
  Exit(n1, job.job_id(), 0, 0);
  ASSERT_EQ(Job(job.job_id()).state(), proto::SUCCEEDED);
  proto::HeartbeatRequest hb;
  hb.set_node_id(n1);
  auto* p = hb.add_processes();
  p->set_job_id(job.job_id());
  p->set_rank(0);
  p->set_running(false);
  EXPECT_EQ(core_->Heartbeat(hb).forget_size(), 0) << "forgotten before the end was saved";
  store->down = false;
  EXPECT_TRUE(WaitFor([&] { return core_->Heartbeat(hb).forget_size() == 1; }, absl::Seconds(20)));
}

// A heartbeat's process table is taken before it is sent; an exit reported after it
// can be applied first. The table then shows an exited rank as running. Stopping its
// generation there (StopJob has no rank) SIGTERMed the ranks beside it that still ran:
// gloo_group_test once failed this way under load (rank 2 stopped by its own agent 3 s
// in, the scheduler logging no stop).
TEST_F(SchedulerCoreTest, AHeartbeatOlderThanAnExitStopsNoRankThatStillRuns) {
  std::string n1 = Register("10.0.0.1", 0);
  auto job = Submit(3, 0, 0);
  ASSERT_TRUE(WaitFor([&] { return agents_->starts() == 1; }));
  proto::HeartbeatRequest table;  // taken while all three ran
  table.set_node_id(n1);
  for (int rank = 0; rank < 3; ++rank) {
    auto* p = table.add_processes();
    p->set_job_id(job.job_id());
    p->set_rank(rank);
    p->set_running(true);
  }
  Exit(n1, job.job_id(), 0, 0);  // rank 0 ends; its report overtakes the heartbeat
  EXPECT_TRUE(core_->Heartbeat(table).known());
  auto j = Job(job.job_id());
  EXPECT_EQ(j.state(), proto::RUNNING);
  EXPECT_EQ(j.live_processes(), 2);
  core_->Stop();  // drains the calls to the agents
  EXPECT_EQ(agents_->stops(), 0u) << "a running rank of the job was stopped";
}

// What the scheduler expects nowhere is still stopped: a generation whose ranks on the
// node all ended, an older generation, a job it does not know.
TEST_F(SchedulerCoreTest, ProcessesRunningWhereNoneIsWantedAreStopped) {
  std::string n1 = Register("10.0.0.1", 0);
  auto done = Submit(1, 0, 0);
  auto restarted = Submit(1, 0, 0, /*max_restarts=*/1);
  ASSERT_TRUE(WaitFor([&] { return agents_->starts() == 2; }));
  Exit(n1, done.job_id(), 0, 0);
  Exit(n1, restarted.job_id(), 0, 1);
  ASSERT_TRUE(WaitFor([&] { return agents_->starts() == 3; }));
  ASSERT_EQ(Job(restarted.job_id()).restart_count(), 1);
  proto::HeartbeatRequest table;
  table.set_node_id(n1);
  auto add = [&](const std::string& job_id, int generation) {
    auto* p = table.add_processes();
    p->set_job_id(job_id);
    p->set_generation(generation);
    p->set_running(true);
  };
  add(done.job_id(), 0);
  add(restarted.job_id(), 0);
  add(restarted.job_id(), 1);  // the current one: wanted
  add("job-nobody-knows", 0);
  core_->Heartbeat(table);
  core_->Stop();
  std::set<std::pair<std::string, int>> stopped;
  for (const auto& [address, req] : agents_->stop_calls()) {
    stopped.emplace(req.job_id(), req.generation());
  }
  EXPECT_EQ(stopped, (std::set<std::pair<std::string, int>>{
                         {done.job_id(), 0}, {restarted.job_id(), 0}, {"job-nobody-knows", 0}}));
}

TEST_F(SchedulerCoreTest, SilentNodeIsDeclaredDead) {
  Make(absl::Milliseconds(300), /*fake=*/true);
  std::string n1 = Register("10.0.0.1", 0);
  auto job = Submit(1, 0, 0);
  proto::HeartbeatRequest hb;
  hb.set_node_id(n1);
  clock_.Advance(absl::Milliseconds(250));
  ASSERT_TRUE(core_->Heartbeat(hb).known());  // silent for 250 ms: alive
  clock_.Advance(absl::Milliseconds(300));    // 300 ms since the heartbeat: the timeout
  // Let the monitor pass at exactly the timeout (the node is not late yet) before time
  // moves on: its next pass must then come when the node is 1 ms late, not a tick
  // (75 ms) after this one. Under load this pass happened by chance and the job stayed
  // RUNNING (the clock never reached the next tick).
  ASSERT_TRUE(WaitFor([&] { return clock_.last_wait_began() == clock_.Now(); }));
  EXPECT_EQ(Job(job.job_id()).state(), proto::RUNNING);
  EXPECT_EQ(core_->ClusterStatus().nodes(0).state(), proto::ALIVE);
  clock_.Advance(absl::Milliseconds(1));
  ASSERT_TRUE(WaitFor([&] { return Job(job.job_id()).state() == proto::FAILED; }));
  EXPECT_TRUE(absl::StrContains(Job(job.job_id()).reason(),
                                "declared dead (no heartbeat from " + n1 +
                                    " (10.0.0.1) for 300ms; the node timeout is 300ms)"))
      << Job(job.job_id()).reason();
  EXPECT_EQ(core_->ClusterStatus().nodes(0).state(), proto::DEAD);
  EXPECT_FALSE(core_->Heartbeat(hb).known());
}

// A job that fits only with a node that is down now is not told it can "never" run:
// the answer names the down node and says to submit again once it is back.
TEST_F(SchedulerCoreTest, AJobThatNeedsADownNodeIsToldToWaitForItNotThatItNeverFits) {
  Make(absl::Milliseconds(300), /*fake=*/true);
  const std::string n1 = Register("10.0.0.1", 0);
  const std::string n2 = Register("10.0.0.2", 0);
  proto::HeartbeatRequest hb;
  hb.set_node_id(n2);
  clock_.Advance(absl::Milliseconds(250));
  ASSERT_TRUE(core_->Heartbeat(hb).known());
  clock_.Advance(absl::Milliseconds(300));  // n1 silent 550 ms: dead; n2 300 ms: alive
  auto state = [&](const std::string& id) {
    const auto status = core_->ClusterStatus();
    for (const auto& n : status.nodes()) {
      if (n.node_id() == id) return n.state();
    }
    return proto::NodeState();
  };
  ASSERT_TRUE(WaitFor([&] { return state(n1) == proto::DEAD; }));
  ASSERT_EQ(state(n2), proto::ALIVE);

  proto::JobSpec spec;
  spec.add_command("train");
  spec.set_nproc(2);
  spec.set_nproc_per_node(1);
  spec.mutable_per_process()->set_cpus(1);
  absl::StatusOr<proto::JobInfo> refused = core_->SubmitJob(spec);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  const std::string text(refused.status().message());
  EXPECT_FALSE(absl::StrContains(text, "never")) << text;
  EXPECT_TRUE(absl::StrContains(text, "1 known node(s) are down and not counted: " + n1 +
                                          " (DEAD: "))
      << text;
  EXPECT_TRUE(absl::StrContains(text, "submit again once they are back")) << text;
}

TEST_F(SchedulerCoreTest, RestartedSchedulerReattachesRunningJobs) {
  std::string n1 = Register("10.0.0.1", 1);
  auto job = Submit(1, 0, 1);
  ASSERT_TRUE(WaitFor([&] { return agents_->starts() == 1; }));
  Make(absl::Seconds(30));  // a new core over the same store
  auto j = Job(job.job_id());
  EXPECT_EQ(j.state(), proto::RUNNING);
  EXPECT_EQ(core_->ClusterStatus().nodes(0).state(), proto::RECONNECTING);
  // The agent comes back still running rank 0: no new start, the GPU stays taken.
  proto::RegisterNodeRequest req;
  req.set_node_id(n1);
  req.set_agent_address("10.0.0.1:7000");
  req.set_node_ip("10.0.0.1");
  req.mutable_total()->set_cpus(8);
  req.mutable_total()->set_gpus(1);
  req.add_gpu_ids(0);
  auto* p = req.add_processes();
  p->set_job_id(job.job_id());
  p->set_rank(0);
  p->set_running(true);
  ASSERT_TRUE(core_->RegisterNode(req).ok());
  EXPECT_EQ(core_->ClusterStatus().nodes(0).free().gpus(), 0);
  EXPECT_EQ(agents_->starts(), 0u);
  Exit(n1, job.job_id(), 0, 0);
  EXPECT_EQ(Job(job.job_id()).state(), proto::SUCCEEDED);
}

TEST_F(SchedulerCoreTest, TimeLimitOutlivesASchedulerRestart) {
  Register("10.0.0.1", 0);
  proto::JobSpec spec;
  spec.add_command("train");
  spec.set_nproc(1);
  spec.mutable_per_process()->set_cpus(1);
  spec.set_time_limit_ms(400);
  auto job = core_->SubmitJob(spec);
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_EQ(Job(job->job_id()).state(), proto::RUNNING);
  Make(absl::Seconds(30));  // a new core over the same store: the deadline is rebuilt
  EXPECT_EQ(Job(job->job_id()).state(), proto::RUNNING);
  ASSERT_TRUE(WaitFor([&] { return Job(job->job_id()).state() == proto::FAILED; }));
  EXPECT_EQ(Job(job->job_id()).exit_code(), 124);
}

TEST_F(SchedulerCoreTest, ObjectLocationsListLiveHoldersAndDropDeadNodes) {
  Make(absl::Milliseconds(300), /*fake=*/true);
  std::string n1 = Register("10.0.0.1", 0);
  std::string n2 = Register("10.0.0.2", 0);
  proto::AddObjectLocationsRequest add = OneCopy(n1, "obj-a", 42);
  ASSERT_TRUE(core_->AddObjectLocations(add).ok());
  ASSERT_TRUE(core_->AddObjectLocations(add).ok());  // retried: still one entry
  add.set_node_id(n2);
  ASSERT_TRUE(core_->AddObjectLocations(add).ok());
  auto locs = core_->GetObjectLocations("obj-a");
  ASSERT_EQ(locs.locations_size(), 2);
  EXPECT_EQ(locs.locations(0).node_id(), n1);
  EXPECT_EQ(locs.locations(0).agent_address(), "10.0.0.1:7000");
  EXPECT_EQ(locs.locations(0).size(), 42);
  EXPECT_EQ(core_->GetObjectLocations("unknown").locations_size(), 0);

  proto::RemoveObjectLocationsRequest rm;
  rm.set_node_id(n2);
  rm.add_object_ids("obj-a");
  core_->RemoveObjectLocations(rm);
  core_->RemoveObjectLocations(rm);  // retried
  ASSERT_EQ(core_->GetObjectLocations("obj-a").locations_size(), 1);

  // Both nodes go silent and are declared dead: no copy is listed any more, and a dead
  // node may not report new ones until it registers again.
  clock_.Advance(absl::Milliseconds(301));
  ASSERT_TRUE(WaitFor([&] { return core_->GetObjectLocations("obj-a").locations_size() == 0; }));
  add.set_node_id(n1);
  EXPECT_EQ(core_->AddObjectLocations(add).code(), absl::StatusCode::kFailedPrecondition);
  add.set_node_id("node-unknown");
  EXPECT_EQ(core_->AddObjectLocations(add).code(), absl::StatusCode::kFailedPrecondition);
  // Re-registration does not bring the dropped entries back.
  Register("10.0.0.1", 0, n1);
  EXPECT_EQ(core_->GetObjectLocations("obj-a").locations_size(), 0);
}

TEST_F(SchedulerCoreTest, ObjectLocationsWaitAnswersWhenACopyIsAdded) {
  Make(absl::Seconds(30), /*fake=*/true);
  std::string n1 = Register("10.0.0.1", 0);
  const proto::AddObjectLocationsRequest add = OneCopy(n1, "obj-late", 7);
  // Time stands still: the waiting call can only end because the copy was added, and
  // the copy is added only once it waits.
  int64_t waits = clock_.long_waits();
  proto::GetObjectLocationsReply locs = AnswerWithoutTimePassing(
      &clock_, [&] { return core_->GetObjectLocations("obj-late", absl::Minutes(5)); },
      [&] {
        ASSERT_TRUE(WaitFor([&] { return clock_.long_waits() > waits; }))
            << "GetObjectLocations did not wait for a holder";
        ASSERT_TRUE(core_->AddObjectLocations(add).ok());
      });
  ASSERT_EQ(locs.locations_size(), 1);
  EXPECT_EQ(locs.locations(0).node_id(), n1);
  EXPECT_EQ(locs.locations(0).size(), 7);
  // A copy that is already listed answers a waiting call at once, too.
  EXPECT_EQ(core_->GetObjectLocations("obj-late", absl::Minutes(5)).locations_size(), 1);

  // Nobody adds "obj-never": the wait ends empty once its deadline passes on the clock.
  std::atomic<bool> done{false};
  proto::GetObjectLocationsReply never;
  std::thread waiter([&] {
    never = core_->GetObjectLocations("obj-never", absl::Seconds(5));
    done = true;
  });
  EXPECT_TRUE(WaitFor([&] {
    clock_.Advance(absl::Seconds(1));
    return done.load();
  }));
  if (!done) clock_.Advance(absl::Hours(1));
  waiter.join();
  EXPECT_EQ(never.locations_size(), 0);

  // A caller that goes away stops the wait (the service asks its call's IsCancelled,
  // without the directory's lock, after each second of waiting): at its next ask, not
  // at its deadline (an hour). Time moves a second at a time until it has asked once
  // (so it is waiting: a long wait of another core thread could not be told from it).
  std::atomic<bool> gone{false};
  std::atomic<int> asked{0};
  std::atomic<bool> told_gone{false};  // the call ended because it was told so
  done = false;
  std::thread leaver([&] {
    locs = core_->GetObjectLocations("obj-never", absl::Hours(1), [&] {
      ++asked;
      if (gone.load()) told_gone = true;
      return gone.load();
    });
    done = true;
  });
  EXPECT_TRUE(WaitFor([&] {
    clock_.Advance(absl::Seconds(1));
    return asked.load() >= 1;
  })) << "the waiting call never asked whether its caller went away";
  gone = true;
  EXPECT_TRUE(WaitFor([&] {
    clock_.Advance(absl::Seconds(1));
    return done.load();
  })) << "the caller's going away was not seen";
  if (!done) clock_.Advance(absl::Hours(2));
  leaver.join();
  EXPECT_EQ(locs.locations_size(), 0);
  EXPECT_TRUE(told_gone.load()) << "it ended at its deadline, not when told";

  // Stop releases a waiting call with what it has: nothing.
  waits = clock_.long_waits();
  locs = AnswerWithoutTimePassing(
      &clock_, [&] { return core_->GetObjectLocations("obj-never", absl::Minutes(5)); },
      [&] {
        ASSERT_TRUE(WaitFor([&] { return clock_.long_waits() > waits; }));
        core_->Stop();
      });
  EXPECT_EQ(locs.locations_size(), 0);
}

proto::KvScope Scope(const proto::JobInfo& job, int gen = 0) {
  proto::KvScope s;
  s.set_job_id(job.job_id());
  s.set_generation(gen);
  return s;
}

TEST_F(SchedulerCoreTest, KvGetWaitsForASetFromAnotherRank) {
  std::string n1 = Register("10.0.0.1", 0);
  auto job = Submit(2, 0, 0);
  ASSERT_TRUE(WaitFor([&] { return agents_->starts() == 1; }));
  proto::KvGetRequest get;
  *get.mutable_scope() = Scope(job);
  get.set_key("nccl-unique-id");
  std::thread setter([&] {
    proto::KvSetRequest set;
    *set.mutable_scope() = Scope(job);
    set.set_key("nccl-unique-id");
    set.set_value("abc");
    EXPECT_TRUE(core_->rendezvous()->Set(set).ok());
  });
  auto r = core_->rendezvous()->Get(get, absl::Seconds(10));
  setter.join();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->value(), "abc");
  get.set_key("never");
  auto missing = core_->rendezvous()->Get(get, absl::Milliseconds(50));
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(missing.status().message().find("'never'"), std::string::npos);
}

TEST_F(SchedulerCoreTest, KvCompareAndSetIsAtomicUnderConcurrency) {
  Register("10.0.0.1", 0);
  auto job = Submit(1, 0, 0);
  constexpr int kThreads = 4, kEach = 200;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < kEach; ++i) {
        for (;;) {  // read, then CAS old -> old + 1 until it wins
          proto::KvGetRequest get;
          *get.mutable_scope() = Scope(job);
          get.set_key("counter");
          auto cur = core_->rendezvous()->Get(get, absl::ZeroDuration());
          ASSERT_TRUE(cur.ok());
          proto::KvCompareAndSetRequest cas;
          *cas.mutable_scope() = Scope(job);
          cas.set_key("counter");
          cas.set_expect_absent(!cur->found());
          cas.set_expected(cur->value());
          cas.set_desired(std::to_string(cur->found() ? std::stoi(cur->value()) + 1 : 1));
          auto r = core_->rendezvous()->CompareAndSet(cas);
          ASSERT_TRUE(r.ok());
          if (r->swapped()) break;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  proto::KvAddRequest add;
  *add.mutable_scope() = Scope(job);
  add.set_key("counter");
  add.set_delta(0);
  EXPECT_EQ(core_->rendezvous()->Add(add)->value(), kThreads * kEach);
}

TEST_F(SchedulerCoreTest, KvScopeEndsWithItsGeneration) {
  Make(absl::Seconds(30), /*fake=*/true);
  std::string n1 = Register("10.0.0.1", 0);
  auto job = Submit(1, 0, 0, /*max_restarts=*/1);
  ASSERT_TRUE(WaitFor([&] { return agents_->starts() == 1; }));
  proto::KvSetRequest set;
  *set.mutable_scope() = Scope(job);
  set.set_key("k");
  set.set_value("v");
  ASSERT_TRUE(core_->rendezvous()->Set(set).ok());
  // A reader waiting on the old generation is told when it ends.
  proto::KvGetRequest get;
  *get.mutable_scope() = Scope(job);
  get.set_key("absent");
  // ABORTED if it was already waiting, FAILED_PRECONDITION if it came after: either
  // way at once, not after its 20 s (which never pass: the clock stands still).
  absl::Status waited = AnswerWithoutTimePassing(
      &clock_, [&] { return core_->rendezvous()->Get(get, absl::Seconds(20)).status(); },
      [&] { Exit(n1, job.job_id(), 0, 1); });  // fails -> restart to generation 1
  EXPECT_TRUE(waited.code() == absl::StatusCode::kAborted ||
              waited.code() == absl::StatusCode::kFailedPrecondition)
      << waited;
  EXPECT_EQ(core_->rendezvous()->Set(set).code(), absl::StatusCode::kFailedPrecondition);
  *set.mutable_scope() = Scope(job, 1);
  ASSERT_TRUE(WaitFor([&] { return core_->rendezvous()->Set(set).ok(); }));
  get.set_key("k");
  *get.mutable_scope() = Scope(job, 1);
  EXPECT_EQ(core_->rendezvous()->Get(get, absl::ZeroDuration())->value(), "v");
  Exit(n1, job.job_id(), 0, 0, /*gen=*/1);  // succeeds: the job's KV is gone
  EXPECT_EQ(core_->rendezvous()->Set(set).code(), absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace drover

namespace drover {
namespace {

proto::WatchGenerationRequest WatchRequest(const std::string& job, int gen, int rank) {
  proto::WatchGenerationRequest req;
  req.mutable_scope()->set_job_id(job);
  req.mutable_scope()->set_generation(gen);
  req.set_rank(rank);
  return req;
}

TEST_F(SchedulerCoreTest, WatchGenerationHearsTheFailureAndWatchersGetANoticePeriod) {
  Make(absl::Seconds(30), /*fake=*/true);
  std::string n1 = Register("10.0.0.1", 0);
  auto job = Submit(3, 0, 0, /*max_restarts=*/1);
  ASSERT_TRUE(WaitFor([&] { return agents_->starts() == 1; }));
  // Rank 0 watches (the call returns "still running" at once without a wait).
  auto now = core_->WatchGeneration(WatchRequest(job.job_id(), 0, 0), absl::ZeroDuration());
  ASSERT_TRUE(now.ok()) << now.status();
  EXPECT_FALSE(now->ended());
  // Rank 2 waits in a watch while rank 1 dies: it hears at once (no time passes).
  proto::ReportExitRequest req;
  req.set_node_id(n1);
  req.set_job_id(job.job_id());
  req.mutable_exit()->set_rank(1);
  req.mutable_exit()->set_exit_code(-1);
  req.mutable_exit()->set_signal(9);
  absl::StatusOr<proto::WatchGenerationReply> heard = AnswerWithoutTimePassing(
      &clock_, [&] { return core_->WatchGeneration(WatchRequest(job.job_id(), 0, 2), absl::Seconds(20)); },
      [&] { core_->ReportExit(req); });
  ASSERT_TRUE(heard.ok()) << heard.status();
  EXPECT_TRUE(heard->ended());
  EXPECT_EQ(heard->failure().rank(), 1);
  EXPECT_EQ(heard->description(), "rank 1 on node " + n1 + " (10.0.0.1) was killed by SIGKILL");
  // The watchers get the notice period before the stop (3 s by default)...
  clock_.Advance(absl::Seconds(3) - absl::Milliseconds(1));
  EXPECT_EQ(agents_->stops(), 0u);
  // ...and if they exit by themselves, nothing is stopped at all and the gang restarts.
  Exit(n1, job.job_id(), 0, 3);
  Exit(n1, job.job_id(), 2, 3);
  EXPECT_TRUE(WaitFor([&] { return agents_->starts() == 2; }));
  EXPECT_EQ(agents_->stops(), 0u);
  // The new generation is not ended; the old one still reads as ended (a late watcher
  // of it learns only that the job moved on).
  auto next = core_->WatchGeneration(WatchRequest(job.job_id(), 1, 0), absl::ZeroDuration());
  ASSERT_TRUE(next.ok());
  EXPECT_FALSE(next->ended());
  auto old = core_->WatchGeneration(WatchRequest(job.job_id(), 0, 0), absl::ZeroDuration());
  ASSERT_TRUE(old.ok());
  EXPECT_TRUE(old->ended());
}

TEST_F(SchedulerCoreTest, WatchersThatDoNotExitAreStoppedAfterTheNoticePeriod) {
  Make(absl::Seconds(30), /*fake=*/true);
  std::string n1 = Register("10.0.0.1", 0);
  auto job = Submit(2, 0, 0);
  ASSERT_TRUE(WaitFor([&] { return agents_->starts() == 1; }));
  ASSERT_TRUE(core_->WatchGeneration(WatchRequest(job.job_id(), 0, 0), absl::ZeroDuration()).ok());
  Exit(n1, job.job_id(), 1, 7);
  EXPECT_EQ(Job(job.job_id()).state(), proto::FAILED);
  clock_.Advance(absl::Seconds(3));  // the notice period (3 s), not past it
  EXPECT_EQ(agents_->stops(), 0u);
  clock_.Advance(absl::Milliseconds(1));
  ASSERT_TRUE(WaitFor([&] { return agents_->stops() >= 1; }));
}

// The notice period on the real clock: the mechanism is a timer.
TEST_F(SchedulerCoreTest, NoticePeriodEndsOnTheRealClock) {
  SchedulerOptions o;
  o.abort_notice = absl::Milliseconds(100);
  core_.reset();
  auto agents = std::make_unique<FakeAgents>();
  agents_ = agents.get();
  core_ = std::make_unique<SchedulerCore>(o, NewMemoryStateStore(), std::move(agents));
  ASSERT_TRUE(core_->Start().ok());
  std::string n1 = Register("10.0.0.1", 0);
  auto job = Submit(2, 0, 0);
  ASSERT_TRUE(core_->WatchGeneration(WatchRequest(job.job_id(), 0, 0), absl::ZeroDuration()).ok());
  Exit(n1, job.job_id(), 1, 7);
  ASSERT_TRUE(WaitFor([&] { return agents_->stops() >= 1; }));
}

TEST_F(SchedulerCoreTest, CancelEndsTheWatchAndUnknownJobsAreNotFound) {
  Register("10.0.0.1", 0);
  auto job = Submit(1, 0, 0);
  ASSERT_TRUE(WaitFor([&] { return agents_->starts() == 1; }));
  ASSERT_TRUE(core_->CancelJob(job.job_id()).ok());
  auto r = core_->WatchGeneration(WatchRequest(job.job_id(), 0, 0), absl::Seconds(5));
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->ended());
  EXPECT_TRUE(absl::StrContains(r->description(), "CANCELLED")) << r->description();
  EXPECT_EQ(core_->WatchGeneration(WatchRequest("job-99", 0, 0), absl::ZeroDuration())
                .status()
                .code(),
            absl::StatusCode::kNotFound);
}

// A StartProcesses held up by a cut link can reach its agent after the scheduler
// declared the node dead and failed the job. Every start carries the node's
// registration, which moves with every registration, so an agent registered since can
// refuse it (AgentServiceTest.RefusesAStartSentBeforeItRegisteredAgain).
TEST_F(SchedulerCoreTest, StartsCarryTheRegistrationTheyWereSentUnder) {
  proto::RegisterNodeRequest req;
  req.set_agent_address("10.0.0.1:7000");
  req.set_node_ip("10.0.0.1");
  req.mutable_total()->set_cpus(8);
  auto first = core_->RegisterNode(req);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_GT(first->registration(), 0);
  Submit(1, 0, 0);
  ASSERT_TRUE(WaitFor([&] { return agents_->starts() == 1; }));
  EXPECT_EQ(agents_->start_calls().at(0).second.node_registration(), first->registration());

  req.set_node_id(first->node_id());  // the node registers again (after a cut, say)
  auto again = core_->RegisterNode(req);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_GT(again->registration(), first->registration());
  Submit(1, 0, 0);
  ASSERT_TRUE(WaitFor([&] { return agents_->starts() == 2; }));
  EXPECT_EQ(agents_->start_calls().at(1).second.node_registration(), again->registration());
}

// A store that refuses every RUNNING record while `refuse` (a placement not stored).
class RunningRefused : public SharedStore {
 public:
  using SharedStore::SharedStore;
  absl::Status PutJob(const proto::JobInfo& j) override {
    if (j.state() == proto::RUNNING && refuse.load()) {
      ++refused;
      return absl::UnavailableError("down");
    }
    return SharedStore::PutJob(j);
  }
  std::atomic<bool> refuse{true};
  std::atomic<int> refused{0};
};

class StartOnceTest : public SchedulerCoreTest {
 protected:
  // A new core over a RunningRefused over the same store; its submits answer "not saved
  // yet" after 50 ms.
  RunningRefused* MakeOverRefusingStore() {
    core_.reset();
    auto owned = std::make_unique<RunningRefused>(store_.get());
    RunningRefused* store = owned.get();
    auto agents = std::make_unique<FakeAgents>();
    agents_ = agents.get();
    SchedulerOptions o;
    o.durable_wait = absl::Milliseconds(50);
    core_ = std::make_unique<SchedulerCore>(o, std::move(owned), std::move(agents));
    EXPECT_TRUE(core_->Start().ok());
    return store;
  }
};

// Starts exactly once across a scheduler crash (docs/architecture.md, "starts exactly
// once"): a start goes out only once the record naming its placement is stored, so a
// scheduler killed after sending it reattaches the job instead of placing it again.
TEST_F(StartOnceTest, AStartIsSentOnlyOnceItsPlacementIsStored) {
  RunningRefused* store = MakeOverRefusingStore();
  Register("10.0.0.1", 0);
  auto submitted = core_->SubmitJob(OneCpuJob());
  ASSERT_FALSE(submitted.ok());  // accepted, placed, not saved
  // Three refused writes: the persister's back-off (100, 200 ms) has passed twice.
  ASSERT_TRUE(WaitFor([&] { return store->refused.load() >= 3; }, absl::Seconds(20)));
  EXPECT_EQ(agents_->starts(), 0u) << "a start went out before its placement was stored";
  store->refuse = false;
  ASSERT_TRUE(WaitFor([&] { return agents_->starts() == 1; }, absl::Seconds(20)));
}

// A job record stored RUNNING on `nodes` (rank i on nodes[i]) with no start confirmed,
// as a scheduler killed between storing a placement and sending its start leaves it.
proto::JobInfo PlacedNotStarted(const std::string& id, const std::vector<std::string>& nodes) {
  proto::JobInfo info;
  info.set_job_id(id);
  *info.mutable_spec() = OneCpuJob(static_cast<int>(nodes.size()));
  info.set_state(proto::RUNNING);
  info.set_version(3);
  for (size_t i = 0; i < nodes.size(); ++i) {
    auto* p = info.add_placement();
    p->set_rank(static_cast<int>(i));
    p->set_local_rank(0);
    p->set_group_rank(static_cast<int>(i));
    p->set_node_id(nodes[i]);
    p->set_node_ip(absl::StrCat("10.0.0.", i + 1));
  }
  info.set_live_processes(static_cast<int>(nodes.size()));
  return info;
}

// The start never reached the node: the restarted scheduler places the generation
// again (its first and only start) instead of failing it as "gone".
TEST_F(SchedulerCoreTest, APlacementStoredWhoseStartNeverWentOutIsPlacedAgain) {
  core_.reset();
  ASSERT_TRUE(store_->PutJob(PlacedNotStarted("job-t-1", {"n1", "n2"})).ok());
  Make(absl::Seconds(30));
  EXPECT_EQ(Job("job-t-1").state(), proto::RUNNING);
  Register("10.0.0.2", 0, "n2");  // not the first node: it waits for the first
  EXPECT_EQ(Job("job-t-1").state(), proto::RUNNING);
  EXPECT_EQ(Job("job-t-1").live_processes(), 2);
  EXPECT_EQ(agents_->starts(), 0u);
  Register("10.0.0.1", 0, "n1");  // neither has a process: none ever started
  ASSERT_TRUE(WaitFor([&] { return agents_->starts() >= 1; }));
  auto j = Job("job-t-1");
  EXPECT_EQ(j.state(), proto::RUNNING) << j.reason();
  EXPECT_EQ(j.restart_count(), 0);
  EXPECT_EQ(j.exited_ranks_size(), 0);
  core_->Stop();  // every start is sent
  int ranks = 0;
  for (const auto& [address, req] : agents_->start_calls()) {
    EXPECT_EQ(req.generation(), 0);
    ranks += req.processes_size();
  }
  EXPECT_EQ(ranks, 2);
}

// Registers node `id` (10.0.0.N for nN) running rank `rank` of `job_id`'s generation 0.
void RegisterRunning(SchedulerCore* core, const std::string& id, const std::string& job_id,
                     int rank, int64_t placement_epoch = 0) {
  proto::RegisterNodeRequest req;
  req.set_node_id(id);
  const std::string ip = absl::StrCat("10.0.0.", id.substr(1));
  req.set_agent_address(ip + ":7000");
  req.set_node_ip(ip);
  req.mutable_total()->set_cpus(8);
  auto* p = req.add_processes();
  p->set_job_id(job_id);
  p->set_rank(rank);
  p->set_running(true);
  p->set_placement_epoch(placement_epoch);
  ASSERT_TRUE(core->RegisterNode(req).ok());
}

// Checks that the starts sent were: the first node's again (port 0: it answers the port
// it holds and starts nothing), then each later node's rank with the master's port.
void ExpectMasterAskedThenLaterNodesStarted(
    const std::vector<std::pair<std::string, proto::StartProcessesRequest>>& calls,
    int nodes) {
  ASSERT_EQ(calls.size(), static_cast<size_t>(nodes));
  EXPECT_EQ(calls[0].first, "10.0.0.1:7000");
  EXPECT_EQ(calls[0].second.master_port(), 0);
  std::set<int> later;
  for (size_t k = 1; k < calls.size(); ++k) {
    const auto& [address, start] = calls[k];
    EXPECT_EQ(start.generation(), 0);
    EXPECT_EQ(start.master_port(), 29500) << "to " << address;
    EXPECT_EQ(start.world_size(), nodes);
    ASSERT_EQ(start.processes_size(), 1);
    EXPECT_EQ(address, absl::StrCat("10.0.0.", start.processes(0).rank() + 1, ":7000"));
    later.insert(start.processes(0).rank());
  }
  EXPECT_EQ(later.size(), static_cast<size_t>(nodes - 1));
}

// The first node has its rank: the start went out. A later node registered without its
// rank: that start never reached it (and never will: it refuses starts from before its
// registration). The master's port died with the scheduler, so the first node is asked
// again (it starts nothing) and the later node then gets its start with that port.
TEST_F(SchedulerCoreTest, ARankWhoseStartNeverReachedItsNodeIsStartedWithTheMastersPort) {
  core_.reset();
  ASSERT_TRUE(store_->PutJob(PlacedNotStarted("job-t-2", {"n1", "n2"})).ok());
  Make(absl::Seconds(30));
  Register("10.0.0.2", 0, "n2");
  RegisterRunning(core_.get(), "n1", "job-t-2", 0);
  ASSERT_TRUE(WaitFor([&] { return Job("job-t-2").started_processes() == 2; }));
  auto j = Job("job-t-2");
  EXPECT_EQ(j.state(), proto::RUNNING) << j.reason();
  EXPECT_EQ(j.exited_ranks_size(), 0);
  EXPECT_EQ(j.master_port(), 29500);
  ExpectMasterAskedThenLaterNodesStarted(agents_->start_calls(), 2);
}

// The chaos campaign's lost starts job-2mca-632 and job-jtaa-4737: the master's agent
// was stopped while its start was in flight, the scheduler restarted, the master's node
// came back first running rank 0 (the start reached it late), and the later node came
// back after that without rank 1, which never started: it was failed as "gone: its node
// agent restarted". Its start is sent now, with the master's port.
TEST_F(SchedulerCoreTest, ALaterNodeBackAfterTheMasterWhoseAnswerWasLostGetsItsStart) {
  core_.reset();
  ASSERT_TRUE(store_->PutJob(PlacedNotStarted("job-t-9", {"n1", "n2"})).ok());
  Make(absl::Seconds(30));
  RegisterRunning(core_.get(), "n1", "job-t-9", 0);
  EXPECT_EQ(agents_->starts(), 0u);
  Register("10.0.0.2", 0, "n2");
  ASSERT_TRUE(WaitFor([&] { return Job("job-t-9").started_processes() == 2; }))
      << Job("job-t-9").DebugString();
  auto j = Job("job-t-9");
  EXPECT_EQ(j.state(), proto::RUNNING) << j.reason();
  EXPECT_EQ(j.exited_ranks_size(), 0) << j.root_cause().error();
  ExpectMasterAskedThenLaterNodesStarted(agents_->start_calls(), 2);
}

// The same with a master node that answers late: a third node coming back without its
// rank while the first node is being asked for the port waits for the answer, then gets
// its start with that port.
TEST_F(SchedulerCoreTest, ANodeBackWhileTheMasterIsAskedForItsPortIsStartedAfterTheAnswer) {
  core_.reset();
  ASSERT_TRUE(store_->PutJob(PlacedNotStarted("job-t-10", {"n1", "n2", "n3"})).ok());
  Make(absl::Seconds(30));
  agents_->Hold("10.0.0.1:7000");
  RegisterRunning(core_.get(), "n1", "job-t-10", 0);
  Register("10.0.0.2", 0, "n2");
  ASSERT_TRUE(WaitFor([&] { return agents_->starts() == 1; }));  // held: no answer yet
  Register("10.0.0.3", 0, "n3");
  auto j = Job("job-t-10");
  EXPECT_EQ(j.state(), proto::RUNNING) << j.reason();
  EXPECT_EQ(j.live_processes(), 3);
  EXPECT_EQ(agents_->starts(), 1u) << "a later node was started before the master's port was known";
  agents_->Release();
  ASSERT_TRUE(WaitFor([&] { return Job("job-t-10").started_processes() == 3; }))
      << Job("job-t-10").DebugString();
  j = Job("job-t-10");
  EXPECT_EQ(j.state(), proto::RUNNING) << j.reason();
  EXPECT_EQ(j.exited_ranks_size(), 0) << j.root_cause().error();
  ExpectMasterAskedThenLaterNodesStarted(agents_->start_calls(), 3);
}

// The first node comes back without rank 0 while a later node runs rank 1: the start
// went out and rank 0 is gone. Its node is never sent the start again (to learn the
// master's port for the third node, back without rank 2): that would start rank 0 a
// second time. The job fails with rank 0 gone; rank 2 was never started, said so.
TEST_F(SchedulerCoreTest, AMasterGoneWhileALaterNodeRunsIsNeverStartedAgain) {
  core_.reset();
  ASSERT_TRUE(store_->PutJob(PlacedNotStarted("job-t-11", {"n1", "n2", "n3"})).ok());
  Make(absl::Seconds(30));
  RegisterRunning(core_.get(), "n2", "job-t-11", 1);
  Register("10.0.0.3", 0, "n3");
  Register("10.0.0.1", 0, "n1");
  auto j = Job("job-t-11");
  EXPECT_EQ(j.state(), proto::FAILED) << j.reason();
  EXPECT_EQ(j.root_cause().rank(), 0);
  EXPECT_TRUE(absl::StrContains(j.root_cause().error(), "is gone")) << j.root_cause().error();
  core_->Stop();  // drains the calls to the agents
  EXPECT_EQ(agents_->starts(), 0u) << "a start went out: " << agents_->start_calls()[0].first;
  EXPECT_EQ(Job("job-t-11").live_processes(), 1);  // rank 1, until its stop ends it
}

// Cancelled while its first node is asked for the master's port, a job ends the ranks
// waiting for that answer at once, and starts nothing when the answer comes.
TEST_F(SchedulerCoreTest, ACancelWhileTheMasterIsAskedForItsPortStartsNothingMore) {
  core_.reset();
  ASSERT_TRUE(store_->PutJob(PlacedNotStarted("job-t-12", {"n1", "n2", "n3"})).ok());
  Make(absl::Seconds(30));
  agents_->Hold("10.0.0.1:7000");
  RegisterRunning(core_.get(), "n1", "job-t-12", 0);
  Register("10.0.0.2", 0, "n2");
  ASSERT_TRUE(WaitFor([&] { return agents_->starts() == 1; }));
  Register("10.0.0.3", 0, "n3");  // waits for the port
  ASSERT_TRUE(core_->CancelJob("job-t-12").ok());
  auto j = Job("job-t-12");
  EXPECT_EQ(j.state(), proto::CANCELLED);
  // Rank 0 runs, rank 1's start is under way; rank 2 ended (a job's resources are freed
  // when its last rank ends).
  EXPECT_EQ(j.live_processes(), 2);
  agents_->Release();
  ASSERT_TRUE(WaitFor([&] { return Job("job-t-12").live_processes() == 1; }));
  // The cancel's stop, then the one sent again once the start is answered.
  ASSERT_TRUE(WaitFor([&] {
    int n = 0;
    for (const auto& [address, stop] : agents_->stop_calls()) n += address == "10.0.0.1:7000";
    return n == 2;
  })) << "the master's node was not sent the stop again after its start";
  core_->Stop();  // drains the calls to the agents
  EXPECT_EQ(agents_->starts(), 1u) << "a later node was started for a cancelled job";
}

// A gang cancelled while its master's start is in flight: its later node is never
// started (it would run for a job that ended), and the master's node is sent the stop
// again once the start is answered (the cancel's stop may have reached it first, and
// an agent keeps no record of a stop for a generation it does not hold).
TEST_F(SchedulerCoreTest, AGangCancelledWhileItsMasterStartsNeverStartsItsLaterNodes) {
  Register("10.0.0.1", 0);
  Register("10.0.0.2", 0);
  agents_->Hold("10.0.0.1:7000");
  proto::JobSpec spec = OneCpuJob(2);
  spec.set_nproc_per_node(1);
  auto j = core_->SubmitJob(spec);
  ASSERT_TRUE(j.ok()) << j.status();
  ASSERT_TRUE(WaitFor([&] { return agents_->starts() == 1; }));
  ASSERT_TRUE(core_->CancelJob(j->job_id()).ok());
  auto stops_to_master = [&] {
    int n = 0;
    for (const auto& [address, stop] : agents_->stop_calls()) n += address == "10.0.0.1:7000";
    return n;
  };
  agents_->Release();
  // The cancel's stop, then the one sent again once the start is answered.
  ASSERT_TRUE(WaitFor([&] { return stops_to_master() == 2; }))
      << "the master's node was not sent the stop again after its start";
  ASSERT_TRUE(WaitFor([&] { return Job(j->job_id()).live_processes() == 1; }));
  core_->Stop();  // drains the calls to the agents
  EXPECT_EQ(agents_->starts(), 1u) << "the later node was started for a cancelled job";
  for (const auto& [address, stop] : agents_->stop_calls()) {
    EXPECT_EQ(stop.job_id(), j->job_id());
  }
  EXPECT_EQ(Job(j->job_id()).state(), proto::CANCELLED);
  EXPECT_EQ(Job(j->job_id()).live_processes(), 1);  // the master, until its exit is reported
}

// A job whose processes exit before their start is answered (one that ends at once) is
// sent no stop: nothing of it runs there. One such stop per job cost a tenth of the
// placement rate at 1,000 nodes (//bench:scale).
TEST_F(SchedulerCoreTest, AStartAnsweredAfterItsProcessesExitedSendsNoStop) {
  const std::string node = Register("10.0.0.1", 0);
  agents_->Hold("10.0.0.1:7000");
  auto j = core_->SubmitJob(OneCpuJob());
  ASSERT_TRUE(j.ok()) << j.status();
  ASSERT_TRUE(WaitFor([&] { return agents_->starts() == 1; }));
  Exit(node, j->job_id(), 0, 0);
  EXPECT_EQ(Job(j->job_id()).state(), proto::SUCCEEDED);
  agents_->Release();
  ASSERT_TRUE(WaitFor([&] { return Job(j->job_id()).started_processes() == 1; }))
      << "the start's answer was not applied";
  core_->Stop();  // drains the calls to the agents
  EXPECT_TRUE(agents_->stop_calls().empty())
      << "a stop was sent for a job whose only process had exited: "
      << agents_->stop_calls()[0].second.job_id();
  EXPECT_EQ(Job(j->job_id()).state(), proto::SUCCEEDED);
}

// A confirmed start whose process the node no longer has is gone, as before.
TEST_F(SchedulerCoreTest, AConfirmedStartMissingOnItsNodeIsGone) {
  core_.reset();
  proto::JobInfo info = PlacedNotStarted("job-t-3", {"n1"});
  info.set_started_processes(1);
  ASSERT_TRUE(store_->PutJob(info).ok());
  Make(absl::Seconds(30));
  Register("10.0.0.1", 0, "n1");
  auto j = Job("job-t-3");
  EXPECT_EQ(j.state(), proto::FAILED);
  EXPECT_TRUE(absl::StrContains(j.root_cause().error(), "is gone")) << j.root_cause().error();
  EXPECT_EQ(agents_->starts(), 0u);
}

// A job cancelled while its placement was being stored never starts.
TEST_F(StartOnceTest, AJobCancelledBeforeItsPlacementWasStoredIsNeverStarted) {
  RunningRefused* store = MakeOverRefusingStore();
  Register("10.0.0.1", 0);
  auto submitted = core_->SubmitJob(OneCpuJob());
  ASSERT_FALSE(submitted.ok());
  ASSERT_TRUE(WaitFor([&] { return store->refused.load() >= 1; }, absl::Seconds(20)));
  const std::string id = std::string(submitted.status().GetPayload(kAcceptedJobPayload)->Flatten());
  (void)core_->CancelJob(id);  // stands; stored once the store answers
  store->refuse = false;
  ASSERT_TRUE(WaitFor([&] { return Job(id).live_processes() == 0; }, absl::Seconds(20)));
  EXPECT_EQ(Job(id).state(), proto::CANCELLED);
  core_->Stop();
  EXPECT_EQ(agents_->starts(), 0u);
  EXPECT_EQ(core_->ClusterStatus().nodes(0).free().cpus(), 8);
}

// A generation that failed while its placement was being stored (a node came back
// without its rank, so the stop went out at once) is never started: its unsent ranks
// end there, and the next generation is the one started.
TEST_F(StartOnceTest, AGenerationThatFailedBeforeItsStartWasSentIsNeverStarted) {
  RunningRefused* store = MakeOverRefusingStore();
  Register("10.0.0.1", 0);
  const std::string second = Register("10.0.0.2", 0);
  proto::JobSpec spec = OneCpuJob(2);
  spec.set_nproc_per_node(1);
  spec.set_max_restarts(1);
  auto submitted = core_->SubmitJob(spec);
  ASSERT_FALSE(submitted.ok());
  ASSERT_TRUE(WaitFor([&] { return store->refused.load() >= 1; }, absl::Seconds(20)));
  const std::string id = std::string(submitted.status().GetPayload(kAcceptedJobPayload)->Flatten());
  Register("10.0.0.2", 0, second);  // its agent restarted: rank 1 is gone, generation 0 fails
  EXPECT_TRUE(Job(id).restarting());
  store->refuse = false;
  ASSERT_TRUE(WaitFor([&] { return agents_->starts() >= 2; }, absl::Seconds(20)))
      << "generation 1 never started: " << Job(id).DebugString();
  core_->Stop();
  for (const auto& [address, req] : agents_->start_calls()) {
    EXPECT_EQ(req.generation(), 1) << "a start of the failed generation went to " << address;
  }
}

// Cancelled before its nodes came back, a job whose start never reached them is not
// placed again: its ranks end as never started, its resources are freed.
TEST_F(SchedulerCoreTest, AJobCancelledBeforeItsUnstartedNodesCameBackIsNotPlacedAgain) {
  core_.reset();
  ASSERT_TRUE(store_->PutJob(PlacedNotStarted("job-t-4", {"n1"})).ok());
  Make(absl::Seconds(30));
  ASSERT_TRUE(core_->CancelJob("job-t-4").ok());
  Register("10.0.0.1", 0, "n1");
  auto j = Job("job-t-4");
  EXPECT_EQ(j.state(), proto::CANCELLED);
  EXPECT_EQ(j.live_processes(), 0);
  core_->Stop();
  EXPECT_EQ(agents_->starts(), 0u);
  EXPECT_EQ(core_->ClusterStatus().nodes(0).free().cpus(), 8);
}

// A job cancelled while its node was away (after a scheduler restart) had its stop
// sent nowhere: the node's registration, reporting the rank running, gets it.
TEST_F(SchedulerCoreTest, AJobCancelledWhileItsNodeWasAwayIsStoppedWhenItRegisters) {
  core_.reset();
  proto::JobInfo info = PlacedNotStarted("job-t-5", {"n1"});
  info.set_started_processes(1);
  ASSERT_TRUE(store_->PutJob(info).ok());
  Make(absl::Seconds(30));
  ASSERT_TRUE(core_->CancelJob("job-t-5").ok());
  proto::RegisterNodeRequest req;
  req.set_node_id("n1");
  req.set_agent_address("10.0.0.1:7000");
  req.set_node_ip("10.0.0.1");
  req.mutable_total()->set_cpus(8);
  auto* p = req.add_processes();
  p->set_job_id("job-t-5");
  p->set_rank(0);
  p->set_running(true);
  ASSERT_TRUE(core_->RegisterNode(req).ok());
  EXPECT_EQ(Job("job-t-5").state(), proto::CANCELLED);
  core_->Stop();  // drains the calls to the agents
  ASSERT_EQ(agents_->stops(), 1u);
  EXPECT_EQ(agents_->stop_calls()[0].first, "10.0.0.1:7000");
  EXPECT_EQ(agents_->stop_calls()[0].second.job_id(), "job-t-5");
}

// The same for a later node of a gang whose start was not confirmed: it is stopped there
// as it registers, before the first node has settled the start.
TEST_F(SchedulerCoreTest, ACancelledGangStillRunningOnALaterNodeIsStoppedThere) {
  core_.reset();
  ASSERT_TRUE(store_->PutJob(PlacedNotStarted("job-t-6", {"n1", "n2"})).ok());
  Make(absl::Seconds(30));
  ASSERT_TRUE(core_->CancelJob("job-t-6").ok());
  proto::RegisterNodeRequest req;
  req.set_node_id("n2");
  req.set_agent_address("10.0.0.2:7000");
  req.set_node_ip("10.0.0.2");
  req.mutable_total()->set_cpus(8);
  auto* p = req.add_processes();
  p->set_job_id("job-t-6");
  p->set_rank(1);
  p->set_running(true);
  ASSERT_TRUE(core_->RegisterNode(req).ok());
  core_->Stop();  // drains the calls to the agents
  ASSERT_EQ(agents_->stops(), 1u);
  EXPECT_EQ(agents_->stop_calls()[0].first, "10.0.0.2:7000");
  EXPECT_EQ(agents_->starts(), 0u);
}

// The first node's start is confirmed (its port is recorded), a later node's is not, and
// that node comes back with none of its ranks: its start never reached it, and is sent
// now with the recorded master port, not failed as "gone" (the chaos campaign's lost
// starts of gangs: job-4guj-1871, job-m3pd-1732).
TEST_F(SchedulerCoreTest, ALaterNodeWhoseStartNeverCameGetsItAfterTheRestart) {
  core_.reset();
  proto::JobInfo info = PlacedNotStarted("job-t-7", {"n1", "n2"});
  info.set_started_processes(1);
  info.set_master_port(29511);
  ASSERT_TRUE(store_->PutJob(info).ok());
  Make(absl::Seconds(30));
  RegisterRunning(core_.get(), "n1", "job-t-7", 0);
  Register("10.0.0.2", 0, "n2");
  ASSERT_TRUE(WaitFor([&] { return agents_->starts() == 1; }));
  auto [address, start] = agents_->start_calls()[0];
  EXPECT_EQ(address, "10.0.0.2:7000");
  EXPECT_EQ(start.generation(), 0);
  EXPECT_EQ(start.master_port(), 29511);
  ASSERT_EQ(start.processes_size(), 1);
  EXPECT_EQ(start.processes(0).rank(), 1);
  EXPECT_EQ(start.world_size(), 2);
  auto j = Job("job-t-7");
  EXPECT_EQ(j.state(), proto::RUNNING) << j.reason();
  EXPECT_EQ(j.live_processes(), 2);
  ASSERT_TRUE(WaitFor([&] { return Job("job-t-7").started_processes() == 2; }));
}

// Every placement, "placed again" included, gets a new epoch, stored with it, carried
// by its starts; the record names the nodes whose start was answered.
TEST_F(SchedulerCoreTest, EachPlacementHasItsOwnEpochAndRecordsItsStartedNodes) {
  core_.reset();
  proto::JobInfo info = PlacedNotStarted("job-e-1", {"n1", "n2"});
  info.set_placement_epoch(6);
  ASSERT_TRUE(store_->PutJob(info).ok());
  Make(absl::Seconds(30));
  Register("10.0.0.2", 0, "n2");
  Register("10.0.0.1", 0, "n1");  // no node has it: placed again
  ASSERT_TRUE(WaitFor([&] { return Job("job-e-1").started_processes() == 2; }))
      << Job("job-e-1").DebugString();
  auto j = Job("job-e-1");
  EXPECT_EQ(j.placement_epoch(), 7);
  std::vector<std::string> nodes;  // of the new placement, in order
  for (const auto& p : j.placement()) {
    if (std::find(nodes.begin(), nodes.end(), p.node_id()) == nodes.end()) {
      nodes.push_back(p.node_id());
    }
  }
  EXPECT_EQ(std::vector<std::string>(j.started_nodes().begin(), j.started_nodes().end()), nodes);
  core_->Stop();
  ASSERT_EQ(agents_->starts(), nodes.size());
  for (const auto& [address, req] : agents_->start_calls()) {
    EXPECT_EQ(req.placement_epoch(), 7) << address;
  }
}

// A node that reports a rank of the current generation under another placement epoch
// (a placement the scheduler gave up on: placed again since): that placement is stopped
// there, by its epoch, and the rank is not taken as the current placement's. Before
// epochs the rank was taken as running, the start as confirmed, and nothing stopped it.
TEST_F(SchedulerCoreTest, ARankOfAnotherPlacementEpochIsStoppedAndNotCountedLive) {
  core_.reset();
  proto::JobInfo info = PlacedNotStarted("job-e-2", {"n1"});
  info.set_placement_epoch(5);
  ASSERT_TRUE(store_->PutJob(info).ok());
  Make(absl::Seconds(30));
  RegisterRunning(core_.get(), "n1", "job-e-2", 0, /*placement_epoch=*/4);
  ASSERT_TRUE(WaitFor([&] { return agents_->stops() >= 1; }));
  auto [address, stop] = agents_->stop_calls()[0];
  EXPECT_EQ(address, "10.0.0.1:7000");
  EXPECT_EQ(stop.job_id(), "job-e-2");
  EXPECT_EQ(stop.placement_epoch(), 4);
  // Nothing of the current placement runs anywhere: placed again, a new epoch.
  ASSERT_TRUE(WaitFor([&] { return agents_->starts() >= 1; }));
  EXPECT_EQ(agents_->start_calls()[0].second.placement_epoch(), 6);
  EXPECT_EQ(Job("job-e-2").placement_epoch(), 6);

  // In a heartbeat, and its exit: the current placement's rank stays live.
  ASSERT_TRUE(WaitFor([&] { return Job("job-e-2").started_processes() == 1; }));
  proto::HeartbeatRequest hb;
  hb.set_node_id("n1");
  auto* q = hb.add_processes();
  q->set_job_id("job-e-2");
  q->set_rank(0);
  q->set_running(true);
  q->set_placement_epoch(4);
  core_->Heartbeat(hb);
  ASSERT_TRUE(WaitFor([&] { return agents_->stops() >= 2; }));
  EXPECT_EQ(agents_->stop_calls()[1].second.placement_epoch(), 4);
  proto::ReportExitRequest exit;
  exit.set_node_id("n1");
  exit.set_job_id("job-e-2");
  exit.mutable_exit()->set_rank(0);
  exit.mutable_exit()->set_exit_code(1);
  exit.mutable_exit()->set_placement_epoch(4);
  core_->ReportExit(exit);
  auto j = Job("job-e-2");
  EXPECT_EQ(j.state(), proto::RUNNING) << j.reason();
  EXPECT_EQ(j.live_processes(), 1);
  EXPECT_EQ(j.exited_ranks_size(), 0);
  exit.mutable_exit()->set_placement_epoch(6);  // the current placement's exit counts
  core_->ReportExit(exit);
  EXPECT_EQ(Job("job-e-2").state(), proto::FAILED);
}

// A 3-node gang after a restart: the third node came back first and its start (sent
// again) was answered before the second's; then the scheduler stopped again. The next
// one reads the confirmed nodes from the record by id: the second node, back without
// its rank, gets its start. Inferred as a prefix from the count of started ranks, the
// second node's start was taken as confirmed and its rank failed as "gone".
TEST_F(SchedulerCoreTest, AStartAnsweredOutOfOrderIsReadRightAfterASecondCrash) {
  core_.reset();
  proto::JobInfo info = PlacedNotStarted("job-e-3", {"n1", "n2", "n3"});
  info.set_started_processes(1);
  info.set_master_port(29511);
  info.set_placement_epoch(3);
  info.add_started_nodes("n1");
  ASSERT_TRUE(store_->PutJob(info).ok());
  Make(absl::Seconds(30));
  RegisterRunning(core_.get(), "n1", "job-e-3", 0);
  Register("10.0.0.3", 0, "n3");  // without its rank: its start is sent again
  ASSERT_TRUE(WaitFor([&] { return Job("job-e-3").started_processes() == 2; }));
  ASSERT_EQ(agents_->starts(), 1u);
  EXPECT_EQ(agents_->start_calls()[0].second.placement_epoch(), 3);
  core_.reset();  // the second crash, n2 still away

  Make(absl::Seconds(30));
  RegisterRunning(core_.get(), "n1", "job-e-3", 0);
  RegisterRunning(core_.get(), "n3", "job-e-3", 2);
  Register("10.0.0.2", 0, "n2");
  ASSERT_TRUE(WaitFor([&] { return agents_->starts() == 1; })) << Job("job-e-3").DebugString();
  auto [address, start] = agents_->start_calls()[0];
  EXPECT_EQ(address, "10.0.0.2:7000");
  EXPECT_EQ(start.master_port(), 29511);
  EXPECT_EQ(start.placement_epoch(), 3);
  ASSERT_EQ(start.processes_size(), 1);
  EXPECT_EQ(start.processes(0).rank(), 1);
  auto j = Job("job-e-3");
  EXPECT_EQ(j.state(), proto::RUNNING) << j.reason();
  EXPECT_EQ(j.exited_ranks_size(), 0) << j.root_cause().error();
  EXPECT_EQ(j.live_processes(), 3);
}

// A store whose job writes hang while `hang` (Redis down, its connection not yet timed out).
class HangingStore : public SharedStore {
 public:
  using SharedStore::SharedStore;
  absl::Status PutJob(const proto::JobInfo& j) override {
    {
      absl::MutexLock lock(&mu_);
      ++waiting_;
      while (hang_) released_.Wait(&mu_);
      --waiting_;
    }
    return SharedStore::PutJob(j);
  }
  void Hang() {
    absl::MutexLock lock(&mu_);
    hang_ = true;
  }
  void Release() {
    absl::MutexLock lock(&mu_);
    hang_ = false;
    released_.SignalAll();
  }
  int waiting() {
    absl::MutexLock lock(&mu_);
    return waiting_;
  }

 private:
  absl::Mutex mu_;
  absl::CondVar released_;
  bool hang_ = false;
  int waiting_ = 0;
};

// While the store hangs, a job cancelled during its wait for the placement to be stored
// gives its resources back at the cancel, not when the store answers; its start is
// never sent.
TEST_F(StartOnceTest, AJobCancelledWhileTheStoreHangsFreesItsResourcesAtOnce) {
  core_.reset();
  auto owned = std::make_unique<HangingStore>(store_.get());
  HangingStore* store = owned.get();
  auto agents = std::make_unique<FakeAgents>();
  agents_ = agents.get();
  SchedulerOptions o;
  o.durable_wait = absl::Milliseconds(50);
  core_ = std::make_unique<SchedulerCore>(o, std::move(owned), std::move(agents));
  ASSERT_TRUE(core_->Start().ok());
  Register("10.0.0.1", 0);
  store->Hang();
  auto submitted = core_->SubmitJob(OneCpuJob());
  ASSERT_FALSE(submitted.ok());  // accepted, placed, not saved
  ASSERT_TRUE(WaitFor([&] { return store->waiting() >= 1; }, absl::Seconds(20)));
  const std::string id = std::string(submitted.status().GetPayload(kAcceptedJobPayload)->Flatten());
  EXPECT_EQ(core_->ClusterStatus().nodes(0).free().cpus(), 7);
  (void)core_->CancelJob(id);  // stands; saved once the store answers
  auto j = Job(id);
  EXPECT_EQ(j.state(), proto::CANCELLED);
  EXPECT_EQ(j.live_processes(), 0);
  EXPECT_EQ(core_->ClusterStatus().nodes(0).free().cpus(), 8)
      << "the cancelled job still holds its CPU while the store hangs";
  EXPECT_EQ(store->waiting(), 1);  // still hanging: nothing above waited for it
  store->Release();
  core_->Stop();
  EXPECT_EQ(agents_->starts(), 0u);
  EXPECT_EQ(Job(id).state(), proto::CANCELLED);
}

}  // namespace
}  // namespace drover
