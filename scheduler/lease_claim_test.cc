// The lease book against the core's node table: the real core and lease manager over
// fake agents and workers, on a fake clock. A pending job's claim holds against task
// leases (lease_manager.h): new leases go only beside the claim; task leases on claimed
// resources are asked back, as many as the claim lacks and each once; the job starts
// when they come back. And the leases a re-registering agent reports (after a
// scheduler restart) rebuild the book. And leases never wait for the core's lock.
#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/clock.h"
#include "gtest/gtest.h"
#include "scheduler/lease_manager.h"
#include "scheduler/scheduler_core.h"
#include "scheduler/state_store.h"
#include "scheduler/testing/core_fakes.h"
#include "scheduler/testing/lease_fakes.h"
#include "tests/util/test_util.h"

namespace drover {
namespace {

class LeaseClaimTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SchedulerOptions o;
    o.clock = &clock_;
    auto agents = std::make_unique<testing::FakeAgents>();
    agents_ = agents.get();
    core_ = std::make_unique<SchedulerCore>(o, NewMemoryStateStore(), std::move(agents));
    ASSERT_TRUE(core_->Start().ok());
    auto workers = std::make_unique<FakeWorkers>();
    workers_ = workers.get();
    leases_ = std::make_unique<LeaseManager>(core_->resource_book(), std::move(workers), &clock_);
    core_->SetLeaseManager(leases_.get());
    for (int i = 0; i < 2; ++i) {
      auto reg = core_->RegisterNode(NodeAt(i + 1, 2));
      ASSERT_TRUE(reg.ok()) << reg.status();
      nodes_.push_back(reg->node_id());
    }
    proto::RegisterDriverRequest driver;
    driver.set_request_id("driver-1");
    absl::StatusOr<std::string> job = core_->RegisterDriver(driver);
    ASSERT_TRUE(job.ok()) << job.status();
    driver_ = *job;
  }
  void TearDown() override {
    core_->SetLeaseManager(nullptr);
    leases_->Stop();
    leases_.reset();
    core_.reset();
  }

  absl::StatusOr<proto::RequestLeaseReply> Ask(const std::string& id,
                                               const proto::PlacementHint& hint = {}) {
    proto::RequestLeaseRequest req;
    req.set_job_id(driver_);
    req.set_request_id(id);
    req.set_wait_ms(0);
    req.mutable_shape()->set_cpus(1);
    req.mutable_package()->set_hash("abc");
    *req.mutable_hint() = hint;
    return leases_->RequestLease(req);
  }
  // The registration of the agent at 10.0.0.<n>:7000 with `cpus` CPUs.
  static proto::RegisterNodeRequest NodeAt(int n, double cpus) {
    proto::RegisterNodeRequest node;
    node.set_agent_address(absl::StrCat("10.0.0.", n, ":7000"));
    node.set_node_ip(absl::StrCat("10.0.0.", n));
    node.mutable_total()->set_cpus(cpus);
    return node;
  }
  proto::JobState StateOf(const std::string& job) {
    auto info = core_->GetJob(job, 0, absl::ZeroDuration());
    return info.ok() ? info->state() : proto::FAILED;
  }

  FakeClock clock_;
  testing::FakeAgents* agents_ = nullptr;
  FakeWorkers* workers_ = nullptr;
  std::unique_ptr<SchedulerCore> core_;
  std::unique_ptr<LeaseManager> leases_;
  std::vector<std::string> nodes_;
  std::string driver_;
};

// The issue 19 item 7 regression: a gang needing every CPU of both nodes waited behind
// task leases for as long as their driver kept them busy.
TEST_F(LeaseClaimTest, AWaitingGangGetsTheLeasesItClaimsBack) {
  std::vector<std::string> held;
  for (int i = 0; i < 4; ++i) {
    auto r = Ask(absl::StrCat("task-", i));
    ASSERT_TRUE(r.ok() && r->granted()) << r.status() << " " << (r.ok() ? r->pending_reason() : "");
    held.push_back(r->lease_id());
  }
  proto::JobSpec spec = testing::OneCpuJob(4);
  spec.set_nproc_per_node(2);
  auto gang = core_->SubmitJob(spec);
  ASSERT_TRUE(gang.ok()) << gang.status();
  EXPECT_EQ(StateOf(gang->job_id()), proto::PENDING);

  // Every task lease is asked back, naming the claim.
  ASSERT_TRUE(::drover::testing::WaitFor([&] { return workers_->revoked().size() == 4; }))
      << workers_->revoked().size();
  for (const auto& r : workers_->revoked()) {
    EXPECT_TRUE(absl::StrContains(r.reason(), gang->job_id())) << r.reason();
  }
  // A new lease does not go on claimed resources, and says why.
  auto later = Ask("later");
  ASSERT_TRUE(later.ok()) << later.status();
  EXPECT_FALSE(later->granted());
  EXPECT_TRUE(absl::StrContains(later->pending_reason(), gang->job_id())) << later->pending_reason();

  // Leases come back as their tasks finish; the gang starts with the last one.
  for (size_t i = 0; i < held.size(); ++i) {
    EXPECT_EQ(StateOf(gang->job_id()), proto::PENDING) << i;
    leases_->ReturnLease(held[i], "its holder handed it back");
  }
  ASSERT_TRUE(::drover::testing::WaitFor([&] { return StateOf(gang->job_id()) == proto::RUNNING; }))
      << proto::JobState_Name(StateOf(gang->job_id()));
  EXPECT_TRUE(::drover::testing::WaitFor([&] { return agents_->starts() == 2; })) << agents_->starts();
  // Leases are asked back once each, however long the claim stood.
  clock_.Advance(absl::Seconds(5));
  EXPECT_EQ(workers_->revoked().size(), 4u);
  EXPECT_EQ(leases_->counts().leases_revoked, 4);
  EXPECT_FALSE(Ask("later")->granted());  // the gang holds every CPU now
}

// Only what the claim lacks is asked back, and leases beside the claim are granted.
TEST_F(LeaseClaimTest, LeasesBesideTheClaimStayAndAreGranted) {
  proto::PlacementHint on0, on1;
  on0.set_node_id(nodes_[0]);
  on1.set_node_id(nodes_[1]);
  auto a = Ask("a", on0), b = Ask("b", on0), c = Ask("c", on1);
  ASSERT_TRUE(a.ok() && a->granted() && b.ok() && b->granted() && c.ok() && c->granted());
  // Two CPUs on one node: none has them free; it claims the first node (packing).
  proto::JobSpec spec = testing::OneCpuJob(2);
  spec.set_nproc_per_node(2);
  auto gang = core_->SubmitJob(spec);
  ASSERT_TRUE(gang.ok()) << gang.status();
  ASSERT_TRUE(::drover::testing::WaitFor([&] { return workers_->revoked().size() == 2; }));
  for (const auto& r : workers_->revoked()) {
    EXPECT_NE(r.lease_id(), c->lease_id()) << "a lease beside the claim was asked back";
  }
  // The free CPU beside the claim is leased; nothing on the claimed node is.
  auto d = Ask("d");
  ASSERT_TRUE(d.ok() && d->granted()) << (d.ok() ? d->pending_reason() : d.status().ToString());
  EXPECT_EQ(d->node_id(), nodes_[1]);
  EXPECT_FALSE(Ask("e", on0)->granted());
  clock_.Advance(absl::Seconds(3));
  EXPECT_EQ(workers_->revoked().size(), 2u);
  leases_->ReturnLease(a->lease_id(), "done");
  leases_->ReturnLease(b->lease_id(), "done");
  ASSERT_TRUE(::drover::testing::WaitFor([&] { return StateOf(gang->job_id()) == proto::RUNNING; }));
}

// Issue 19 item 4, step 2: after a scheduler restart the agents' workers still serve
// their leases; the new scheduler learns them from the agents' registrations and books
// their resources, so it does not hand them out twice, and a later return frees them.
TEST_F(LeaseClaimTest, LeasesAnAgentReportsOnRegistrationAreBooked) {
  proto::RegisterNodeRequest again;
  again.set_node_id(nodes_[0]);
  again.set_agent_address("10.0.0.1:7000");
  again.set_node_ip("10.0.0.1");
  again.mutable_total()->set_cpus(2);
  auto held = [&](const std::string& id, const std::string& job) {
    proto::HeldLease* h = again.add_leases();
    h->set_lease_id(id);
    h->set_job_id(job);
    h->set_owner(job + "/1@node");
    h->mutable_shape()->set_cpus(1);
    h->set_worker_id("worker-" + id);
  };
  held("lease-before-1", driver_);
  held("lease-before-2", driver_);
  held("lease-before-3", "job-gone-9");  // its job is not known here: its worker goes
  for (int i = 0; i < 2; ++i) {  // an agent may register more than once: booked once
    auto reg = core_->RegisterNode(again);
    ASSERT_TRUE(reg.ok()) << reg.status();
  }
  EXPECT_EQ(leases_->counts().leases, 2);
  // (Once per registration: stopping a worker is idempotent.)
  ASSERT_TRUE(::drover::testing::WaitFor([&] { return workers_->killed().size() == 2; }));
  for (const auto& kill : workers_->killed()) {
    EXPECT_EQ(kill.worker_id(), "worker-lease-before-3");
    EXPECT_TRUE(absl::StrContains(kill.reason(), "job-gone-9")) << kill.reason();
  }
  // The node's two CPUs are held: nothing more goes there.
  proto::PlacementHint on0;
  on0.set_node_id(nodes_[0]);
  EXPECT_FALSE(Ask("new", on0)->granted());
  // One comes back (its holder disconnected): its CPU is free for the next.
  leases_->ReturnLease("lease-before-1", "its holder disconnected");
  // (Granted by the return's grant pass; its worker starts apart: ask until it has.)
  EXPECT_TRUE(::drover::testing::WaitFor([&] {
    auto next = Ask("new", on0);
    return next.ok() && next->granted();
  }));
}

// After a scheduler restart, drivers ask for leases before their nodes are back: a
// request that waits for room is granted when a node with room registers, not left
// waiting until something else frees resources (it waited out its 60 s before).
TEST_F(LeaseClaimTest, ARequestWaitingForRoomIsGrantedWhenANodeRegisters) {
  proto::RequestLeaseRequest req;
  req.set_job_id(driver_);
  req.set_request_id("big");
  req.set_wait_ms(20000);
  req.mutable_shape()->set_cpus(4);  // no node has 4 CPUs yet
  req.mutable_package()->set_hash("abc");
  std::atomic<bool> answered{false};
  absl::StatusOr<proto::RequestLeaseReply> reply;
  std::thread asker([&] {
    reply = leases_->RequestLease(req);
    answered = true;
  });
  ASSERT_TRUE(::drover::testing::WaitFor([&] { return leases_->counts().waiting_calls == 1; }));
  const proto::RegisterNodeRequest node = NodeAt(3, 4);
  auto reg = core_->RegisterNode(node);
  ASSERT_TRUE(reg.ok()) << reg.status();
  const bool in_time = ::drover::testing::WaitFor([&] { return answered.load(); });
  if (!in_time) clock_.Advance(absl::Seconds(30));  // ends the wait, to fail below
  asker.join();
  ASSERT_TRUE(in_time) << "the request was not granted when a node with room registered";
  ASSERT_TRUE(reply.ok() && reply->granted())
      << reply.status() << " " << (reply.ok() ? reply->pending_reason() : "");
  EXPECT_EQ(reply->node_id(), reg->node_id());
}

// A node that registers with leases its workers serve (after a scheduler restart) has
// them booked before anything is placed on it: a job the same registration lets in
// (here by ending the job that filled the node) must not take what the leases hold.
TEST_F(LeaseClaimTest, LeasesReportedAtRegistrationAreBookedBeforeJobsArePlacedThere) {
  const proto::RegisterNodeRequest node = NodeAt(3, 4);
  auto reg = core_->RegisterNode(node);
  ASSERT_TRUE(reg.ok()) << reg.status();
  // Fills the only node with 4 CPUs.
  proto::JobSpec fill = testing::OneCpuJob(4);
  fill.set_nproc_per_node(4);
  auto filler = core_->SubmitJob(fill);
  ASSERT_TRUE(filler.ok()) << filler.status();
  ASSERT_EQ(StateOf(filler->job_id()), proto::RUNNING);
  // Needs 3 CPUs of one node: waits for the filler.
  proto::JobSpec three = testing::OneCpuJob(3);
  three.set_nproc_per_node(3);
  auto waiting = core_->SubmitJob(three);
  ASSERT_TRUE(waiting.ok()) << waiting.status();
  ASSERT_EQ(StateOf(waiting->job_id()), proto::PENDING);

  // The node's agent comes back without the filler's ranks (they are lost: the filler
  // ends and frees 4 CPUs) and with two 1-CPU leases of the driver's.
  proto::RegisterNodeRequest again = node;
  again.set_node_id(reg->node_id());
  for (int i = 0; i < 2; ++i) {
    proto::HeldLease* h = again.add_leases();
    h->set_lease_id(absl::StrCat("lease-earlier-", i));
    h->set_job_id(driver_);
    h->set_owner(driver_ + "/1@node");
    h->mutable_shape()->set_cpus(1);
    h->set_worker_id(absl::StrCat("worker-earlier-", i));
  }
  ASSERT_TRUE(core_->RegisterNode(again).ok());
  EXPECT_EQ(leases_->counts().leases, 2);
  EXPECT_TRUE(::drover::testing::WaitFor([&] {
    return StateOf(filler->job_id()) != proto::RUNNING;
  }));
  // 2 of the 4 CPUs are the leases': the 3-CPU job still waits.
  EXPECT_EQ(StateOf(waiting->job_id()), proto::PENDING);
  for (const auto& [address, start] : agents_->start_calls()) {
    EXPECT_NE(start.job_id(), waiting->job_id()) << "started on " << address;
  }
}

// The lease manager never takes the core's lock (scheduler_core.h, the lock order): a
// lease is granted and returned, and a request of an unknown job refused, while
// another thread holds the core's mu_ (its job and node work, its queue passes). The
// book (book_mu_) is all a grant takes.
TEST_F(LeaseClaimTest, LeasesAreGrantedAndReturnedWhileTheCoreHoldsItsLock) {
  absl::Notification held, release;
  std::thread busy([&] {
    core_->RunWithLockHeldForTest([&] {
      held.Notify();
      release.WaitForNotification();
    });
  });
  held.WaitForNotification();
  absl::Notification done;
  absl::StatusOr<proto::RequestLeaseReply> granted, unknown;
  std::thread asker([&] {
    granted = Ask("while-busy");
    if (granted.ok() && granted->granted()) {
      leases_->ReturnLease(granted->lease_id(), "its holder handed it back");
    }
    proto::RequestLeaseRequest req;
    req.set_job_id("job-none-1");
    req.set_request_id("of-no-job");
    req.set_wait_ms(0);
    req.mutable_shape()->set_cpus(1);
    req.mutable_package()->set_hash("abc");
    unknown = leases_->RequestLease(req);
    done.Notify();
  });
  // Generous: without the core's lock it takes milliseconds; with it, for ever.
  const bool in_time = done.WaitForNotificationWithTimeout(absl::Seconds(30));
  release.Notify();
  busy.join();
  asker.join();
  ASSERT_TRUE(in_time) << "the lease calls waited for the core's lock";
  ASSERT_TRUE(granted.ok() && granted->granted())
      << granted.status() << " " << (granted.ok() ? granted->pending_reason() : "");
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kNotFound) << unknown.status();
  // The returned lease's resources are free again: both nodes' CPUs can be leased.
  for (int i = 0; i < 4; ++i) {
    auto r = Ask(absl::StrCat("after-", i));
    ASSERT_TRUE(r.ok() && r->granted()) << i << " " << r.status();
  }
}

// Leases and jobs change the book from several threads at once (grants and returns; a
// job's placement, exit and release; the claim of a job that waits for the leases'
// CPUs), each side under its own lock and book_mu_ (absl's deadlock detection checks
// the order): every grant is given back and every job's use freed, so the table
// balances at the end.
TEST_F(LeaseClaimTest, LeasesAndJobsRacingLeaveTheBookBalanced) {
  std::atomic<bool> stop{false};
  std::atomic<int> granted{0};
  std::vector<std::thread> askers;
  for (int t = 0; t < 2; ++t) {
    askers.emplace_back([&, t] {
      // One request at a time, asked again under its id until granted (a request given
      // up would be granted later to nobody); the last one is seen through.
      for (int i = 0;; ++i) {
        const std::string id = absl::StrCat("race-", t, "-", i);
        const bool last = stop.load();
        const bool ok = ::drover::testing::WaitFor(
            [&] {
              auto r = Ask(id);
              if (!r.ok() || !r->granted()) return false;
              ++granted;
              leases_->ReturnLease(r->lease_id(), "its holder handed it back");
              return true;
            },
            absl::Seconds(60));
        if (!ok) ADD_FAILURE() << id << " was never granted";
        if (!ok || last) return;
      }
    });
  }
  for (int j = 0; j < 20; ++j) {
    // Every other job is a gang of every CPU: it claims what the leases hold.
    proto::JobSpec spec = testing::OneCpuJob(j % 2 == 0 ? 1 : 4);
    if (j % 2 == 1) spec.set_nproc_per_node(2);
    auto job = core_->SubmitJob(spec);
    if (!job.ok()) {
      ADD_FAILURE() << job.status();
      break;
    }
    std::vector<proto::RankPlacement> ranks;
    const bool running = ::drover::testing::WaitFor(
        [&] {
          auto info = core_->GetJob(job->job_id(), 0, absl::ZeroDuration());
          if (!info.ok() || info->state() != proto::RUNNING) return false;
          ranks.assign(info->placement().begin(), info->placement().end());
          return true;
        },
        absl::Seconds(60));
    if (!running) {
      ADD_FAILURE() << job->job_id() << " never started: " << proto::JobState_Name(StateOf(job->job_id()));
      break;
    }
    for (const proto::RankPlacement& p : ranks) {
      proto::ReportExitRequest exit;
      exit.set_node_id(p.node_id());
      exit.set_job_id(job->job_id());
      exit.mutable_exit()->set_rank(p.rank());
      exit.mutable_exit()->set_exit_code(0);
      core_->ReportExit(exit);
    }
    EXPECT_EQ(StateOf(job->job_id()), proto::SUCCEEDED) << j;
  }
  stop = true;
  for (std::thread& t : askers) t.join();
  EXPECT_GT(granted.load(), 0);
  EXPECT_EQ(leases_->counts().leases, 0);
  // Every node's CPUs are free again (both sides' uses came back out of the table).
  EXPECT_TRUE(::drover::testing::WaitFor([&] {
    proto::GetClusterStatusReply status = core_->ClusterStatus();
    for (const auto& n : status.nodes()) {
      if (n.free().cpus() != 2) return false;
    }
    return status.nodes_size() == 2;
  }));
}

}  // namespace
}  // namespace drover
