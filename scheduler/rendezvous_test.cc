#include "scheduler/rendezvous.h"

#include <thread>

#include "absl/time/clock.h"
#include "gtest/gtest.h"

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
  EXPECT_EQ(kv.Set(SetReq("job-a-1", 1, "k", "v")).code(), absl::StatusCode::kNotFound);
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
  Rendezvous kv;
  kv.JobChanged("job-a-1", proto::RUNNING, 0);
  std::thread setter([&] {
    absl::SleepFor(absl::Milliseconds(20));
    ASSERT_TRUE(kv.Set(SetReq("job-a-1", 0, "addr", "10.0.0.1:29500")).ok());
  });
  absl::StatusOr<proto::KvGetReply> got = kv.Get(GetReq("job-a-1", 0, "addr"), absl::Seconds(30));
  setter.join();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->value(), "10.0.0.1:29500");

  std::thread ender([&] {
    absl::SleepFor(absl::Milliseconds(20));
    kv.JobChanged("job-a-1", proto::FAILED, 0);
  });
  got = kv.Get(GetReq("job-a-1", 0, "never"), absl::Seconds(30));
  ender.join();
  EXPECT_EQ(got.status().code(), absl::StatusCode::kAborted) << got.status();
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
