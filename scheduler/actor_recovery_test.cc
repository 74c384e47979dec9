// Actors across a scheduler restart (issue 19 item 4, step 3): the real core and lease
// manager over fake agents and workers and a store that outlives them. Each change of
// an actor's record is saved; a new scheduler over the same store reloads the records
// (names included), keeps an ALIVE actor on its worker once its node reports the lease,
// restarts one whose node comes back without it, and does not book a lease whose end
// was reported before its node registered.
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
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

using ::drover::testing::WaitFor;

class ActorRecoveryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Boot();
    for (int i = 0; i < 2; ++i) {
      auto reg = core_->RegisterNode(NodeRequest(i, ""));
      ASSERT_TRUE(reg.ok()) << reg.status();
      nodes_.push_back(reg->node_id());
    }
    proto::RegisterDriverRequest driver;
    driver.set_request_id("driver-1");
    absl::StatusOr<std::string> job = core_->RegisterDriver(driver);
    ASSERT_TRUE(job.ok()) << job.status();
    driver_ = *job;
  }
  void TearDown() override { Halt(); }

  // A scheduler over the shared store (its records survive Halt).
  void Boot() {
    SchedulerOptions o;
    o.clock = &clock_;
    o.driver_reconnect = absl::Minutes(10);  // no driver here reconnects its session
    core_ = std::make_unique<SchedulerCore>(o, std::make_unique<testing::SharedStore>(store_.get()),
                                            std::make_unique<testing::FakeAgents>());
    ASSERT_TRUE(core_->Start().ok());
    auto workers = std::make_unique<FakeWorkers>();
    workers_ = workers.get();
    leases_ = std::make_unique<LeaseManager>(core_->resource_book(), std::move(workers), &clock_);
    core_->SetLeaseManager(leases_.get());
  }
  // Its death: what was saved stays in store_ (the persister writes its queue out).
  void Halt() {
    if (core_ == nullptr) return;
    core_->SetLeaseManager(nullptr);
    leases_->Stop();
    leases_.reset();
    core_.reset();
  }
  void Restart() {
    Halt();
    Boot();
    ASSERT_TRUE(leases_->Recover().ok());
  }

  proto::RegisterNodeRequest NodeRequest(int i, const std::string& id) {
    proto::RegisterNodeRequest node;
    node.set_node_id(id);
    node.set_agent_address(absl::StrCat("10.0.0.", i + 1, ":7000"));
    node.set_node_ip(absl::StrCat("10.0.0.", i + 1));
    node.mutable_total()->set_cpus(2);
    return node;
  }
  // Node i registers again holding `held`, as an agent does after a restart.
  void Reregister(int i, const std::vector<proto::HeldLease>& held) {
    proto::RegisterNodeRequest again = NodeRequest(i, nodes_[i]);
    for (const auto& h : held) *again.add_leases() = h;
    auto reg = core_->RegisterNode(again);
    ASSERT_TRUE(reg.ok()) << reg.status();
  }

  proto::ActorInfo Create(const std::string& id, const std::string& name, int node,
                          bool soft = false) {
    proto::CreateActorRequest req;
    req.set_job_id(driver_);
    req.set_owner(driver_ + "/1@here");
    req.mutable_creation()->set_actor_id(id);
    req.mutable_creation()->set_factory("MakeCounter");
    req.mutable_creation()->set_name(name);
    req.mutable_shape()->set_cpus(1);
    req.mutable_package()->set_hash("abc");
    req.mutable_hint()->set_node_id(nodes_[node]);
    req.mutable_hint()->set_soft(soft);
    req.set_max_restarts(1);
    EXPECT_TRUE(leases_->CreateActor(req).ok());
    proto::ActorInfo info;
    EXPECT_TRUE(WaitFor([&] {
      info = Get(id, "");
      return info.state() == proto::ACTOR_ALIVE;
    })) << info.DebugString();
    return info;
  }
  proto::ActorInfo Get(const std::string& id, const std::string& name) {
    proto::GetActorRequest req;
    req.set_actor_id(id);
    req.set_name(name);
    auto info = leases_->GetActor(req);
    return info.ok() ? *info : proto::ActorInfo();
  }
  // The lease each actor holds now, as its agent would report it.
  std::map<std::string, proto::HeldLease> HeldNow() {
    std::map<std::string, proto::HeldLease> out;
    for (const auto& l : leases_->Leases(0)) {
      proto::HeldLease h;
      h.set_lease_id(l.lease_id);
      h.set_job_id(l.job_id);
      h.set_owner(l.owner);
      h.mutable_shape()->set_cpus(1);
      h.set_worker_id(l.worker_id);
      h.set_actor_id(l.actor_id);
      out[l.actor_id.empty() ? l.lease_id : l.actor_id] = h;
    }
    return out;
  }

  std::unique_ptr<StateStore> store_ = NewMemoryStateStore();
  FakeClock clock_;
  FakeWorkers* workers_ = nullptr;
  std::unique_ptr<SchedulerCore> core_;
  std::unique_ptr<LeaseManager> leases_;
  std::vector<std::string> nodes_;
  std::string driver_;
};

TEST_F(ActorRecoveryTest, ActorsComeBackFromTheStoreAndKeepTheirWorkers) {
  const proto::ActorInfo kept = Create("actor-kept", "kept", 0);
  const proto::ActorInfo moved = Create("actor-moved", "", 1);
  std::map<std::string, proto::HeldLease> held = HeldNow();
  ASSERT_EQ(held.count("actor-kept"), 1u);
  Restart();
  // Known again at once, by name too, ALIVE where it was.
  proto::ActorInfo found = Get("", "kept");
  EXPECT_EQ(found.actor_id(), "actor-kept");
  EXPECT_EQ(found.state(), proto::ACTOR_ALIVE);
  EXPECT_EQ(found.worker_id(), kept.worker_id());
  EXPECT_EQ(Get("actor-moved", "").state(), proto::ACTOR_ALIVE);
  // Node 0 comes back with the named actor's lease: it stays on its worker, booked.
  Reregister(0, {held["actor-kept"]});
  EXPECT_EQ(leases_->counts().leases, 1);
  // Node 1 comes back without its actor: a worker exit, so it is restarted (1 of 1).
  Reregister(1, {});
  proto::ActorInfo again;
  ASSERT_TRUE(WaitFor([&] {
    again = Get("actor-moved", "");
    return again.state() == proto::ACTOR_ALIVE && again.restarts() == 1;
  })) << again.DebugString();
  EXPECT_NE(again.worker_id(), moved.worker_id());
  EXPECT_TRUE(absl::StrContains(again.reason(), "was gone when node")) << again.reason();
  found = Get("", "kept");
  EXPECT_EQ(found.state(), proto::ACTOR_ALIVE);
  EXPECT_EQ(found.worker_id(), kept.worker_id());
  EXPECT_EQ(found.restarts(), 0);
  EXPECT_TRUE(workers_->killed().empty());
  // A second restart: both records as they are now.
  held = HeldNow();
  Restart();
  Reregister(0, {held["actor-kept"]});
  Reregister(1, {held["actor-moved"]});
  EXPECT_EQ(leases_->counts().leases, 2);
  EXPECT_EQ(Get("actor-moved", "").worker_id(), again.worker_id());
  EXPECT_EQ(Get("", "kept").worker_id(), kept.worker_id());
  EXPECT_EQ(leases_->counts().actors_alive, 2);
}

// An agent's report may overtake its registration: the exit of a recovered actor's
// worker, or a task lease's return, before the node registers with them.
TEST_F(ActorRecoveryTest, EndsReportedBeforeTheRegistrationAreApplied) {
  Create("actor-a", "a", 0);
  proto::RequestLeaseRequest req;
  req.set_job_id(driver_);
  req.set_request_id("task-1");
  req.set_wait_ms(1000);
  req.mutable_shape()->set_cpus(1);
  req.mutable_package()->set_hash("abc");
  req.mutable_hint()->set_node_id(nodes_[0]);
  auto task = leases_->RequestLease(req);
  ASSERT_TRUE(task.ok() && task->granted()) << task.status();
  std::map<std::string, proto::HeldLease> held = HeldNow();
  ASSERT_EQ(held.size(), 2u);
  Restart();
  proto::ReportWorkerExitRequest exit;
  exit.set_lease_id(held["actor-a"].lease_id());
  exit.set_worker_id(held["actor-a"].worker_id());
  exit.set_actor_id("actor-a");
  exit.set_node_id(nodes_[0]);
  exit.mutable_exit()->set_exit_code(3);
  leases_->WorkerExited(exit);
  leases_->ReturnLease(task->lease_id(), "its holder disconnected");
  // The registration was sent before the reports: it still lists both.
  Reregister(0, {held["actor-a"], held[task->lease_id()]});
  proto::ActorInfo a;
  ASSERT_TRUE(WaitFor([&] {
    a = Get("actor-a", "");
    return a.state() == proto::ACTOR_ALIVE && a.restarts() == 1;
  })) << a.DebugString();
  EXPECT_NE(a.worker_id(), held["actor-a"].worker_id());
  // Its new worker's only: neither ended lease was booked at the registration (each
  // would count here; checked only now, as the restart's new lease may come at once).
  EXPECT_EQ(leases_->counts().leases, 1) << "a lease that ended was booked";
}

// A recovered ALIVE actor whose node never registers again is lost after kAdoptionWait.
TEST_F(ActorRecoveryTest, AnActorWhoseNodeNeverComesBackIsRestarted) {
  Create("actor-b", "", 1, /*soft=*/true);
  Restart();
  clock_.Advance(LeaseManager::kAdoptionWait + absl::Seconds(1));
  proto::ActorInfo b;
  ASSERT_TRUE(WaitFor([&] {
    // Node 0 is back (again: its heartbeats are not faked); node 1 stays away.
    EXPECT_TRUE(core_->RegisterNode(NodeRequest(0, nodes_[0])).ok());
    b = Get("actor-b", "");
    return b.state() == proto::ACTOR_ALIVE && b.restarts() == 1;
  })) << b.DebugString();
  EXPECT_EQ(b.node_id(), nodes_[0]);
}

}  // namespace
}  // namespace drover
