// JobPersister over a store that the test can hold (every call blocks until released)
// or make fail: writes in order, coalesced, retried; durability waits; id blocks.
#include "scheduler/job_persister.h"

#include <atomic>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/synchronization/mutex.h"
#include "common/clock.h"
#include "gtest/gtest.h"
#include "tests/util/test_util.h"

namespace drover {
namespace {

using testing::WaitFor;

// A memory store whose calls can be held at the door or failed.
class HeldStore : public StateStore {
 public:
  absl::Status PutJob(const proto::JobInfo& job) override {
    if (absl::Status s = Enter(); !s.ok()) return s;
    {
      absl::MutexLock lock(&mu_);
      written_.emplace_back(job.job_id(), job.version());
    }
    return inner_->PutJob(job);
  }
  absl::StatusOr<std::vector<proto::JobInfo>> LoadJobs() override { return inner_->LoadJobs(); }
  absl::StatusOr<int64_t> ReserveIds(const std::string& c, int64_t n) override {
    if (absl::Status s = Enter(); !s.ok()) return s;
    absl::MutexLock lock(&mu_);
    ++reservations_;
    return inner_->ReserveIds(c, n);
  }
  std::string Describe() const override { return "held-store"; }

  void Hold(bool held) {
    absl::MutexLock lock(&mu_);
    held_ = held;
  }
  void Fail(bool fail) {
    absl::MutexLock lock(&mu_);
    fail_ = fail;
  }
  int waiting() {
    absl::MutexLock lock(&mu_);
    return waiting_;
  }
  int attempts() {
    absl::MutexLock lock(&mu_);
    return attempts_;
  }
  int reservations() {
    absl::MutexLock lock(&mu_);
    return reservations_;
  }
  std::vector<std::pair<std::string, int64_t>> written() {
    absl::MutexLock lock(&mu_);
    return written_;
  }
  StateStore* inner() { return inner_.get(); }

 private:
  absl::Status Enter() {
    absl::MutexLock lock(&mu_);
    ++attempts_;
    ++waiting_;
    mu_.Await(absl::Condition(+[](bool* held) { return !*held; }, &held_));
    --waiting_;
    if (fail_) return absl::UnavailableError("redis 127.0.0.1:1: connection refused");
    return absl::OkStatus();
  }

  std::unique_ptr<StateStore> inner_ = NewMemoryStateStore();
  absl::Mutex mu_;
  bool held_ ABSL_GUARDED_BY(mu_) = false;
  bool fail_ ABSL_GUARDED_BY(mu_) = false;
  int waiting_ ABSL_GUARDED_BY(mu_) = 0;
  int attempts_ ABSL_GUARDED_BY(mu_) = 0;
  int reservations_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<std::pair<std::string, int64_t>> written_ ABSL_GUARDED_BY(mu_);
};

proto::JobInfo Record(const std::string& id, int64_t version) {
  proto::JobInfo j;
  j.set_job_id(id);
  j.set_version(version);
  return j;
}

// A persister on the real clock over a HeldStore that holds every call.
class HeldPersisterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(p.Start({}).ok());
    store.Hold(true);
  }
  HeldStore store;
  JobPersister p{&store, Clock::Real()};
};

TEST_F(HeldPersisterTest, WritesInOrderAndOnlyTheNewestRecordOfAQueuedJob) {
  p.Put(Record("a", 1));
  ASSERT_TRUE(WaitFor([&] { return store.waiting() == 1; }));  // a v1 is being written
  p.Put(Record("b", 1));  // Put never waits for the store
  p.Put(Record("a", 2));
  p.Put(Record("b", 2));
  p.Put(Record("c", 1));
  p.Put(Record("a", 3));
  EXPECT_EQ(p.backlog(), 4u);  // a v1 in flight; b, a, c queued
  store.Hold(false);
  ASSERT_TRUE(p.AwaitStored("a", absl::Seconds(10)).ok());
  ASSERT_TRUE(p.AwaitStored("c", absl::Seconds(10)).ok());
  const std::vector<std::pair<std::string, int64_t>> want = {
      {"a", 1}, {"b", 2}, {"a", 3}, {"c", 1}};
  EXPECT_EQ(store.written(), want);
  EXPECT_EQ(p.backlog(), 0u);
}

TEST_F(HeldPersisterTest, AwaitStoredTimesOutWhileTheStoreIsStuckAndSucceedsAfter) {
  p.Put(Record("job-x-1", 1));
  absl::Status s = p.AwaitStored("job-x-1", absl::Milliseconds(50));
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "job job-x-1 is not saved: held-store")) << s;
  EXPECT_TRUE(p.AwaitStored("never-queued", absl::ZeroDuration()).ok());
  store.Hold(false);
  EXPECT_TRUE(p.AwaitStored("job-x-1", absl::Seconds(10)).ok());
  auto loaded = store.inner()->LoadJobs();
  ASSERT_TRUE(loaded.ok());
  ASSERT_EQ(loaded->size(), 1u);
}

// What a launch waits on: the callback runs once every named job's records are stored
// (at once if they are), never while a record of them is queued or being written.
TEST_F(HeldPersisterTest, WhenStoredCallsBackOnceEveryNamedJobIsStored) {
  std::atomic<int> calls{0};
  std::atomic<bool> stored_answer{false};
  p.WhenStored({"never-queued"}, [&](bool stored) {
    stored_answer = stored;
    ++calls;
  });
  EXPECT_EQ(calls.load(), 1);  // at once, on this thread
  EXPECT_TRUE(stored_answer.load());
  p.Put(Record("a", 1));
  p.Put(Record("b", 1));
  ASSERT_TRUE(WaitFor([&] { return store.waiting() == 1; }));  // a is being written
  p.WhenStored({"a", "b"}, [&](bool stored) {
    stored_answer = stored;
    ++calls;
  });
  p.Put(Record("b", 2));  // a newer record of b: it too is waited for
  EXPECT_EQ(calls.load(), 1);
  store.Hold(false);
  ASSERT_TRUE(WaitFor([&] { return calls.load() == 2; }));
  EXPECT_TRUE(stored_answer.load());
  EXPECT_TRUE(p.AllStored({"a", "b"}));
  const std::vector<std::pair<std::string, int64_t>> want = {{"a", 1}, {"b", 2}};
  EXPECT_EQ(store.written(), want);
}

// A scheduler that stops must not wait on a store that may never answer: the waiting
// launches are told "not stored", and later ones at once.
TEST_F(HeldPersisterTest, CancelWaitsAnswersEveryWaiterNotStored) {
  p.Put(Record("a", 1));
  std::atomic<int> not_stored{0};
  p.WhenStored({"a"}, [&](bool stored) { not_stored += stored ? 0 : 1; });
  p.CancelWaits();
  EXPECT_EQ(not_stored.load(), 1);
  p.WhenStored({"a"}, [&](bool stored) { not_stored += stored ? 0 : 1; });
  EXPECT_EQ(not_stored.load(), 2);
  store.Hold(false);
}

TEST(JobPersisterTest, FailedWritesAreRetriedAndALongOutageRefusesNewWork) {
  HeldStore store;
  FakeClock clock;
  JobPersister p(&store, &clock);
  ASSERT_TRUE(p.Start({}).ok());
  store.Fail(true);
  p.Put(Record("a", 1));
  ASSERT_TRUE(WaitFor([&] { return store.attempts() == 1; }));
  EXPECT_TRUE(p.Health().ok());  // failing, but not for long: slow, not down
  clock.Advance(JobPersister::kDownAfter + absl::Seconds(1));
  ASSERT_TRUE(WaitFor([&] { return store.attempts() >= 2; }));  // retried after back-off
  absl::Status down = p.Health();
  EXPECT_EQ(down.code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(absl::StrContains(down.message(), "connection refused")) << down;
  // A newer record queued during the outage replaces the failed one.
  p.Put(Record("a", 2));
  store.Fail(false);
  clock.Advance(absl::Seconds(2));  // past the longest back-off
  ASSERT_TRUE(p.AwaitStored("a", absl::Hours(1)).ok());
  EXPECT_EQ(store.written().back(), std::make_pair(std::string("a"), int64_t{2}));
  EXPECT_TRUE(p.Health().ok());
}

TEST(JobPersisterTest, IdsComeFromReservedBlocksWithoutWaitingOnTheStore) {
  HeldStore store;
  JobPersister p(&store, Clock::Real());
  ASSERT_TRUE(p.Start({"job", "node"}).ok());
  EXPECT_EQ(store.reservations(), 2);
  store.Hold(true);
  // The first block is served while the store is stuck; the refill waits for it.
  for (int64_t want = 1; want <= JobPersister::kIdBlock; ++want) {
    std::optional<int64_t> id = p.TakeId("job");
    ASSERT_TRUE(id.has_value()) << want;
    EXPECT_EQ(*id, want);
  }
  EXPECT_FALSE(p.TakeId("job").has_value());
  EXPECT_EQ(p.TakeId("node"), 1);  // counters are independent
  EXPECT_EQ(p.WaitForIds("job", absl::Milliseconds(20)).code(), absl::StatusCode::kUnavailable);
  store.Hold(false);
  ASSERT_TRUE(p.WaitForIds("job", absl::Seconds(10)).ok());
  EXPECT_EQ(p.TakeId("job"), JobPersister::kIdBlock + 1);
}

TEST(JobPersisterTest, AnInMemoryStoreIsWrittenThroughAtOnce) {
  std::unique_ptr<StateStore> store = NewMemoryStateStore();
  JobPersister p(store.get(), Clock::Real());
  ASSERT_TRUE(p.Start({"job"}).ok());
  p.Put(Record("job-a-1", 1));
  EXPECT_EQ(p.backlog(), 0u);
  auto loaded = store->LoadJobs();
  ASSERT_TRUE(loaded.ok());
  ASSERT_EQ(loaded->size(), 1u);
  EXPECT_TRUE(p.AwaitStored("job-a-1", absl::ZeroDuration()).ok());
}

TEST(JobPersisterTest, StopWritesWhatIsQueuedWithinItsGrace) {
  HeldStore store;
  auto p = std::make_unique<JobPersister>(&store, Clock::Real());
  ASSERT_TRUE(p->Start({}).ok());
  for (int i = 0; i < 50; ++i) p->Put(Record("job-" + std::to_string(i), 1));
  p->Stop(absl::Seconds(10));
  auto loaded = store.inner()->LoadJobs();
  ASSERT_TRUE(loaded.ok());
  EXPECT_EQ(loaded->size(), 50u);
}

}  // namespace
}  // namespace drover
