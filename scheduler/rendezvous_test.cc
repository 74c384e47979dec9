#include "scheduler/rendezvous.h"

#include <thread>

#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "scheduler/testing/signal_clock.h"
#include "tests/util/test_util.h"

namespace drover {
namespace {

proto::KvScope Scope(const std::string& job, int generation) {
  proto::KvScope s;
  s.set_job_id(job);
  s.set_generation(generation);
  return s;
}

proto::KvSetRequest SetReq(const std::string& job, int generation, const std::string& key,
                           const std::string& value) {
  proto::KvSetRequest r;
  *r.mutable_scope() = Scope(job, generation);
  r.set_key(key);
  r.set_value(value);
  return r;
}

proto::KvGetRequest GetReq(const std::string& job, int generation, const std::string& key) {
  proto::KvGetRequest r;
  *r.mutable_scope() = Scope(job, generation);
  r.set_key(key);
  return r;
}

TEST(RendezvousTest, ScopeIsTheRunningGenerationOnly) {
  Rendezvous kv;
  EXPECT_EQ(kv.Set(SetReq("job-a-1", 1, "k", "v")).code(), absl::StatusCode::kFailedPrecondition);
  kv.JobChanged("job-a-1", proto::RUNNING, 1);
  EXPECT_TRUE(kv.Set(SetReq("job-a-1", 1, "k", "v")).ok());
  absl::Status old = kv.Set(SetReq("job-a-1", 0, "k", "v"));
  EXPECT_EQ(old.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(old.message().find("is not running generation 0 (state RUNNING, generation 1)"),
            std::string::npos)
      << old;
  kv.JobChanged("job-a-1", proto::CANCELLED, 1);
  EXPECT_EQ(kv.Set(SetReq("job-a-1", 1, "k", "v")).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(kv.scopes(), 0u);  // an ended job's values go with it
}

TEST(RendezvousTest, ARestartDropsTheOlderGenerationsValues) {
  Rendezvous kv;
  kv.JobChanged("job-a-1", proto::RUNNING, 0);
  ASSERT_TRUE(kv.Set(SetReq("job-a-1", 0, "k", "v")).ok());
  kv.JobChanged("job-a-1", proto::PENDING, 1);
  EXPECT_EQ(kv.scopes(), 0u);
  absl::StatusOr<proto::KvGetReply> got = kv.Get(GetReq("job-a-1", 1, "k"), absl::ZeroDuration());
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_FALSE(got->found());
}

TEST(RendezvousTest, AWaitingGetIsAnsweredBySetAndAbortedWhenTheJobEnds) {
  // Time never moves: only a signal (the Set, the job's end) can end a wait.
  testing::SignalOnlyClock clock;
  Rendezvous kv(&clock);
  kv.JobChanged("job-a-1", proto::RUNNING, 0);
  absl::StatusOr<proto::KvGetReply> got;
  std::thread getter([&] { got = kv.Get(GetReq("job-a-1", 0, "addr"), absl::Seconds(30)); });
  ASSERT_TRUE(testing::WaitFor([&] { return clock.waits() >= 1; }));
  ASSERT_TRUE(kv.Set(SetReq("job-a-1", 0, "addr", "10.0.0.1:29500")).ok());
  getter.join();
  EXPECT_EQ(clock.stuck(), 0) << "the Set did not wake the Get";
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->value(), "10.0.0.1:29500");

  getter = std::thread([&] { got = kv.Get(GetReq("job-a-1", 0, "never"), absl::Seconds(30)); });
  ASSERT_TRUE(testing::WaitFor([&] { return clock.waits() >= 2; }));
  kv.JobChanged("job-a-1", proto::FAILED, 0);
  getter.join();
  EXPECT_EQ(clock.stuck(), 0) << "the job's end did not wake the Get";
  EXPECT_EQ(got.status().code(), absl::StatusCode::kAborted) << got.status();
  EXPECT_EQ(kv.jobs(), 0u);  // an ended job is forgotten
}

TEST(RendezvousTest, OnlyJobsNotEndedAreKept) {
  Rendezvous kv;
  kv.JobChanged("job-a-1", proto::PENDING, 0);  // queued, never ran: not kept
  EXPECT_EQ(kv.jobs(), 0u);
  for (int i = 0; i < 100; ++i) {
    const std::string id = "job-a-" + std::to_string(i);
    kv.JobChanged(id, proto::RUNNING, 0);
    ASSERT_TRUE(kv.Set(SetReq(id, 0, "k", "v")).ok());
    kv.JobChanged(id, i % 2 == 0 ? proto::SUCCEEDED : proto::FAILED, 0);
  }
  kv.JobChanged("job-b-1", proto::RUNNING, 0);
  kv.JobChanged("job-b-1", proto::PENDING, 1);  // restarting: kept
  EXPECT_EQ(kv.jobs(), 1u);
  EXPECT_EQ(kv.scopes(), 0u);
  absl::Status ended = kv.Set(SetReq("job-a-7", 0, "k", "v"));
  EXPECT_EQ(ended.code(), absl::StatusCode::kFailedPrecondition) << ended;
  EXPECT_NE(ended.message().find("job-a-7"), std::string::npos) << ended;
}

TEST(RendezvousTest, AGetForAKeyThatNeverComesEndsAtItsDeadlineNamingIt) {
  Rendezvous kv;
  kv.JobChanged("job-a-1", proto::RUNNING, 0);
  absl::StatusOr<proto::KvGetReply> got =
      kv.Get(GetReq("job-a-1", 0, "rank-3"), absl::Milliseconds(50));
  EXPECT_EQ(got.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(got.status().message().find("'rank-3'"), std::string::npos) << got.status();
}

}  // namespace
}  // namespace drover
