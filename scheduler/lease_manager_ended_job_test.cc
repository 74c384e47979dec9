// LeaseManager against a fake node book and fake agents: a request that waits for room
// while its job ends; workers that outlive a scheduler restart with no lease.
#include "scheduler/lease_manager.h"

#include <atomic>
#include <future>

#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"
#include "scheduler/testing/lease_fakes.h"
#include "tests/util/test_util.h"

namespace drover {
namespace {

// One node with room for nothing until `fits`; the job runs while `running`.
class FakeBook : public ResourceBook {
 public:
  absl::StatusOr<std::optional<Grant>> Reserve(const proto::Resources& shape,
                                              const proto::PlacementHint&,
                                              std::string* reason) override {
    ++reserves;
    if (!fits.load()) {
      *reason = "no room";
      return std::optional<Grant>();
    }
    return std::optional<Grant>(Grant{"node-1", "10.0.0.1:7000", shape, {}});
  }
  void Release(const Grant&) override {}
  absl::Status CheckJobRunning(const std::string& job_id) override {
    if (running.load()) return absl::OkStatus();
    return absl::FailedPreconditionError("job " + job_id + " has ended");
  }
  std::vector<std::string> AliveAgents() override { return {"10.0.0.1:7000"}; }
  // (No `override`: not every version of ResourceBook has it.)
  std::map<std::string, std::vector<std::string>> ObjectsWithPrefix(const std::string&) {
    return {};
  }
  std::string SchedulerAddress() override { return "10.0.0.9:5000"; }

  std::atomic<bool> fits{false};
  std::atomic<bool> running{true};
  std::atomic<int> reserves{0};
};

// A request that waits for room must not be granted once its job has ended: the
// worker started for it would never be stopped.
TEST(LeaseManagerTest, ARequestWaitingForRoomIsNotGrantedOnceItsJobHasEnded) {
  FakeBook book;
  auto workers = std::make_unique<FakeWorkers>();
  FakeWorkers* w = workers.get();
  LeaseManager leases(&book, std::move(workers));
  proto::RequestLeaseRequest req;
  req.set_job_id("job-1");
  req.set_request_id("req-1");
  req.set_owner("owner-1");
  req.mutable_package()->set_hash("abc");
  req.mutable_shape()->set_cpus(1);
  req.set_wait_ms(30000);
  auto reply = std::async(std::launch::async, [&] { return leases.RequestLease(req); });
  ASSERT_TRUE(testing::WaitFor([&] { return book.reserves.load() >= 1; }));
  book.running = false;  // the job ends while the request waits
  book.fits = true;      // and room frees up
  leases.ResourcesFreed();
  absl::StatusOr<proto::RequestLeaseReply> r = reply.get();
  EXPECT_EQ(w->starts.load(), 0) << "a worker was started for an ended job";
  ASSERT_FALSE(r.ok() && r->granted()) << "granted a lease to an ended job";
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition) << r.status();
}

// An idle worker (warm pool) outlives a scheduler restart with no lease to adopt. Its
// agent lists it at registration; the job's end must then stop it on its node (the
// scheduler used to stop workers only of jobs it had granted leases to itself, so the
// worker ran on until the agent's own check found the job ended).
TEST(LeaseManagerTest, AnIdleWorkerFromBeforeARestartIsStoppedWhenItsJobEnds) {
  FakeBook book;
  auto workers = std::make_unique<FakeWorkers>();
  FakeWorkers* w = workers.get();
  LeaseManager leases(&book, std::move(workers));
  proto::HeldLease idle;
  idle.set_job_id("job-1");
  idle.set_worker_id("w-7");
  leases.Adopt("node-1", "10.0.0.1:7000", {idle});
  EXPECT_TRUE(w->killed().empty()) << "an idle worker of a running job was killed";
  book.running = false;
  leases.JobEnded("job-1", {});
  EXPECT_TRUE(testing::WaitFor([&] {
    for (const auto& [agent, job] : w->stopped()) {
      if (agent == "10.0.0.1:7000" && job == "job-1") return true;
    }
    return false;
  })) << "job-1's end was not sent to the node of its idle worker";
}

// A node that comes back (after a scheduler restart or a cut) with an idle worker of a
// job that ended meanwhile: the worker is stopped at once.
TEST(LeaseManagerTest, AnIdleWorkerOfAJobThatEndedMeanwhileIsStoppedAtRegistration) {
  FakeBook book;
  book.running = false;
  auto workers = std::make_unique<FakeWorkers>();
  FakeWorkers* w = workers.get();
  LeaseManager leases(&book, std::move(workers));
  proto::HeldLease idle;
  idle.set_job_id("job-1");
  idle.set_worker_id("w-7");
  leases.Adopt("node-1", "10.0.0.1:7000", {idle});
  ASSERT_TRUE(testing::WaitFor([&] { return !w->killed().empty(); }))
      << "the idle worker of an ended job was left running";
  EXPECT_EQ(w->killed()[0].worker_id(), "w-7");
  EXPECT_NE(w->killed()[0].reason().find("has ended"), std::string::npos) << w->killed()[0].reason();
}

}  // namespace
}  // namespace drover
