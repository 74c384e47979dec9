// LeaseManager's memory of requests, over a book and workers that always answer.
#include "scheduler/lease_manager.h"

#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "gtest/gtest.h"

namespace drover {
namespace {

// One node with room for anything.
class RoomyBook : public ResourceBook {
 public:
  absl::StatusOr<std::optional<Grant>> Reserve(const proto::Resources& shape,
                                               const proto::PlacementHint&, std::string*) override {
    return Grant{"node-1", "10.0.0.1:7000", shape, {}};
  }
  void Release(const Grant&) override {}
  absl::Status CheckJobRunning(const std::string&) override { return absl::OkStatus(); }
  std::vector<std::string> AliveAgents() override { return {"10.0.0.1:7000"}; }
  std::string SchedulerAddress() override { return "10.0.0.9:7070"; }
};

class StartingWorkers : public WorkerClient {
 public:
  absl::StatusOr<proto::StartWorkerReply> StartWorker(const std::string&,
                                                      const proto::StartWorkerRequest& req) override {
    proto::StartWorkerReply reply;
    reply.set_worker_id(absl::StrCat("worker-", req.lease_id()));
    return reply;
  }
  absl::Status KillWorker(const std::string&, const proto::KillWorkerRequest&) override {
    return absl::OkStatus();
  }
  absl::Status StopJob(const std::string&, const std::string&) override { return absl::OkStatus(); }
  absl::Status DeleteObjects(const std::string&, const std::vector<std::string>&) override {
    return absl::OkStatus();
  }
};

proto::RequestLeaseRequest Ask(const std::string& request_id) {
  proto::RequestLeaseRequest req;
  req.set_job_id("job-1");
  req.set_request_id(request_id);
  req.mutable_package()->set_hash("abc");
  req.mutable_shape()->set_cpus(1);
  return req;
}

TEST(LeaseManagerTest, ARequestIsRememberedForAMinuteAfterItWasLastAsked) {
  FakeClock clock;
  RoomyBook book;
  LeaseManager leases(&book, std::make_unique<StartingWorkers>(), &clock);
  auto first = leases.RequestLease(Ask("a"));
  ASSERT_TRUE(first.ok() && first->granted()) << first.status();
  // Asked again within the minute (a retry): the same lease, however many others came.
  for (int i = 0; i < 1000; ++i) ASSERT_TRUE(leases.RequestLease(Ask(absl::StrCat("x", i))).ok());
  clock.Advance(absl::Seconds(50));
  EXPECT_EQ(leases.RequestLease(Ask("a"))->lease_id(), first->lease_id());
  // 50 s after that retry it is still remembered; the others (asked 100 s ago) are not.
  clock.Advance(absl::Seconds(50));
  EXPECT_EQ(leases.RequestLease(Ask("a"))->lease_id(), first->lease_id());
  EXPECT_NE(leases.RequestLease(Ask("x0"))->lease_id(), "");
  EXPECT_EQ(leases.counts().leases_granted, 1002);  // x0 again is a new request
  // Not asked for over a minute: a new request under the same id.
  clock.Advance(absl::Seconds(61));
  auto again = leases.RequestLease(Ask("a"));
  ASSERT_TRUE(again.ok() && again->granted());
  EXPECT_NE(again->lease_id(), first->lease_id());
  leases.Stop();
}

}  // namespace
}  // namespace drover
