// LeaseQueue alone: order of service, blocked classes, removal by job, the cap.
#include "scheduler/lease_queue.h"

#include <deque>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace drover {
namespace {

class LeaseQueueTest : public ::testing::Test {
 protected:
  LeaseQueue::Entry* Push(LeaseQueue& q, const std::string& id, double cpus,
                          const std::string& job = "job-1", const std::string& hard_node = "") {
    ids_.push_back(id);
    proto::RequestLeaseRequest req;
    req.set_job_id(job);
    req.set_request_id(id);
    req.mutable_shape()->set_cpus(cpus);
    req.mutable_package()->set_hash("abc");
    if (!hard_node.empty()) req.mutable_hint()->set_node_id(hard_node);
    absl::StatusOr<LeaseQueue::Entry*> e = q.Push(&ids_.back(), req);
    EXPECT_TRUE(e.ok()) << e.status();
    return e.ok() ? *e : nullptr;
  }
  // One pass granting while `room` CPUs last; the request ids granted, in order.
  std::vector<std::string> Pass(LeaseQueue& q, double room) {
    std::vector<std::string> granted;
    q.ForEachHead([&](const LeaseQueue::Entry& e) {
      if (e.cls->shape.cpus() > room) return LeaseQueue::Offer::kBlocked;
      room -= e.cls->shape.cpus();
      granted.push_back(*e.request_id);
      return LeaseQueue::Offer::kTaken;
    });
    return granted;
  }
  std::deque<std::string> ids_;  // stable addresses for the queue's keys
};

TEST_F(LeaseQueueTest, ServesEachShapeInArrivalOrderAndTheOldestHeadFirst) {
  LeaseQueue q(100);
  Push(q, "big-1", 4);
  Push(q, "small-1", 1);
  Push(q, "small-2", 1);
  Push(q, "big-2", 4);
  Push(q, "small-3", 1);
  // 3 CPUs: the big one (oldest) does not fit and blocks only its own shape.
  EXPECT_EQ(Pass(q, 3), (std::vector<std::string>{"small-1", "small-2", "small-3"}));
  EXPECT_EQ(q.size(), 2u);
  // 9 CPUs: the big ones in order.
  EXPECT_EQ(Pass(q, 9), (std::vector<std::string>{"big-1", "big-2"}));
  EXPECT_EQ(q.size(), 0u);
  EXPECT_EQ(q.classes(), 0u);
}

TEST_F(LeaseQueueTest, AHardAffinityIsAClassOfItsOwn) {
  LeaseQueue q(100);
  LeaseQueue::Entry* on_a = Push(q, "on-a", 1, "job-1", "a");
  Push(q, "any", 1);
  EXPECT_EQ(q.classes(), 2u);
  EXPECT_EQ(LeaseQueue::HintOf(*on_a).node_id(), "a");
  std::vector<std::string> granted;
  q.ForEachHead([&](const LeaseQueue::Entry& e) {
    if (!LeaseQueue::HintOf(e).node_id().empty()) return LeaseQueue::Offer::kBlocked;  // a is full
    granted.push_back(*e.request_id);
    return LeaseQueue::Offer::kTaken;
  });
  EXPECT_EQ(granted, std::vector<std::string>{"any"});
  EXPECT_EQ(q.size(), 1u);
}

TEST_F(LeaseQueueTest, AJobsRequestsGoTogetherAndOthersKeepTheirOrder) {
  LeaseQueue q(100);
  Push(q, "a1", 1, "job-a");
  Push(q, "b1", 1, "job-b");
  Push(q, "a2", 2, "job-a");
  Push(q, "b2", 1, "job-b");
  std::vector<std::string> dropped = q.RemoveJob("job-a");
  EXPECT_EQ(dropped, (std::vector<std::string>{"a1", "a2"}));
  EXPECT_TRUE(q.RemoveJob("job-a").empty());
  EXPECT_EQ(Pass(q, 10), (std::vector<std::string>{"b1", "b2"}));
}

TEST_F(LeaseQueueTest, RefusesBeyondItsCapWithAClearMessage) {
  LeaseQueue q(2);
  Push(q, "r1", 1);
  Push(q, "r2", 1);
  ids_.push_back("r3");
  proto::RequestLeaseRequest req;
  req.set_job_id("job-1");
  req.mutable_shape()->set_cpus(1);
  absl::StatusOr<LeaseQueue::Entry*> e = q.Push(&ids_.back(), req);
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(e.status().message().find("lease queue is full (2 requests"), std::string::npos)
      << e.status();
  EXPECT_NE(e.status().message().find("r3"), std::string::npos) << e.status();
  // Room again once one leaves.
  EXPECT_EQ(Pass(q, 1), std::vector<std::string>{"r1"});
  EXPECT_NE(Push(q, "r4", 1), nullptr);
}

TEST_F(LeaseQueueTest, ARequeuedRequestGoesBackToItsPlace) {
  LeaseQueue q(100);
  Push(q, "r1", 1);
  Push(q, "r2", 1);
  Push(q, "r3", 1);
  // r1 is taken; its start fails after r2 moved up; it comes back before r2.
  uint64_t seq = 0;
  std::shared_ptr<const proto::PackageRef> package;
  q.ForEachHead([&](const LeaseQueue::Entry& e) {
    seq = e.seq;
    package = e.package;
    return LeaseQueue::Offer::kTaken;
  });
  EXPECT_EQ(q.size(), 0u);  // the pass took all three (room for all)
  proto::Resources shape;
  shape.set_cpus(1);
  Push(q, "r5", 1);
  q.Requeue(&ids_[1], "job-1", "", shape, {}, package, seq - 1);
  EXPECT_EQ(Pass(q, 10), (std::vector<std::string>{"r2", "r5"}));
}

TEST_F(LeaseQueueTest, ShapesWithNegativeAmountsAreRefused) {
  proto::Resources r;
  r.set_cpus(-1);
  EXPECT_EQ(ValidateLeaseShape(r).code(), absl::StatusCode::kInvalidArgument);
  r.set_cpus(1);
  (*r.mutable_custom())["disk"] = -2;
  EXPECT_NE(ValidateLeaseShape(r).message().find("'disk'"), std::string::npos);
}

}  // namespace
}  // namespace drover
