#include "common/timeline_reporter.h"

#include <atomic>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace drover {
namespace {

// A sender that keeps every request, failing the first `failures` calls with `code`.
class Sink {
 public:
  explicit Sink(int failures = 0, absl::StatusCode code = absl::StatusCode::kUnavailable)
      : failures_(failures), code_(code) {}
  TimelineSender Sender() {
    return [this](const proto::ReportTimelineRequest& r) {
      absl::MutexLock l(&mu_);
      calls_.push_back(r);
      if (failures_ > 0) {
        --failures_;
        return absl::Status(code_, "refused by the test");
      }
      return absl::OkStatus();
    };
  }
  std::vector<proto::ReportTimelineRequest> Calls() {
    absl::MutexLock l(&mu_);
    return calls_;
  }
  // Waits (bounded) until at least `n` calls came.
  bool WaitCalls(size_t n, absl::Duration timeout = absl::Seconds(10)) {
    absl::MutexLock l(&mu_);
    auto enough = [&] { return calls_.size() >= n; };
    return mu_.AwaitWithTimeout(absl::Condition(&enough), timeout);
  }
  void SetFailures(int n) {
    absl::MutexLock l(&mu_);
    failures_ = n;
  }

 private:
  absl::Mutex mu_;
  std::vector<proto::ReportTimelineRequest> calls_ ABSL_GUARDED_BY(mu_);
  int failures_ ABSL_GUARDED_BY(mu_);
  const absl::StatusCode code_;
};

// Waits (bounded) until `done` holds.
template <typename F>
bool Eventually(F done, absl::Duration timeout = absl::Seconds(10)) {
  const absl::Time deadline = absl::Now() + timeout;
  while (!done()) {
    if (absl::Now() > deadline) return false;
    absl::SleepFor(absl::Milliseconds(1));
  }
  return true;
}

TimelineReporterOptions Options() {
  TimelineReporterOptions o;
  o.reporter = "w-1@node-1";
  o.job_id = "job-a";
  o.node_id = "node-1";
  o.worker_id = "w-1";
  o.interval = absl::Hours(1);  // tests send by Flush unless they say otherwise
  return o;
}

TimelineRecord Task(const std::string& name, int64_t start_us, const std::string& job = "") {
  TimelineRecord r;
  r.kind = proto::TIMELINE_TASK;
  r.name = name;
  r.start_us = start_us;
  r.duration_us = 7;
  r.job_id = job;
  return r;
}

int64_t Events(const proto::ReportTimelineRequest& r) {
  int64_t n = 0;
  for (const auto& j : r.jobs()) n += j.events_size();
  return n;
}

TEST(TimelineReporterTest, BatchesRecordsPerJobWithTheReportersDefaults) {
  Sink sink;
  TimelineReporter rep(Options(), sink.Sender());
  rep.Add(Task("Add", 100));
  rep.Add(Task("Sum", 200));
  TimelineRecord pull;
  pull.kind = proto::TIMELINE_PULL;
  pull.job_id = "job-b";
  pull.object_id = "job-b.x.1";
  pull.source_node_id = "node-2";
  pull.bytes = 4096;
  rep.Add(pull);
  ASSERT_TRUE(rep.Flush(absl::Seconds(10)));
  auto calls = sink.Calls();
  ASSERT_EQ(calls.size(), 1u);
  const auto& r = calls[0];
  EXPECT_EQ(r.seq(), 1u);
  EXPECT_NE(r.reporter().find("w-1@node-1/"), std::string::npos) << r.reporter();
  ASSERT_EQ(r.jobs_size(), 2);
  EXPECT_EQ(r.jobs(0).job_id(), "job-a");
  ASSERT_EQ(r.jobs(0).events_size(), 2);
  const proto::TimelineEvent& e = r.jobs(0).events(1);
  EXPECT_EQ(e.kind(), proto::TIMELINE_TASK);
  EXPECT_EQ(e.name(), "Sum");
  EXPECT_EQ(e.time_us(), 200);
  EXPECT_EQ(e.duration_us(), 7);
  EXPECT_EQ(e.node_id(), "node-1");
  EXPECT_EQ(e.worker_id(), "w-1");
  EXPECT_EQ(r.jobs(1).job_id(), "job-b");
  EXPECT_EQ(r.jobs(1).events(0).bytes(), 4096);
  EXPECT_EQ(r.jobs(1).events(0).source_node_id(), "node-2");
  EXPECT_EQ(rep.counts().sent, 3);
}

TEST(TimelineReporterTest, AFullBufferDropsAndTheNextBatchSaysHowMany) {
  Sink sink;
  TimelineReporterOptions o = Options();
  o.capacity = 4;
  TimelineReporter rep(o, sink.Sender());
  for (int i = 0; i < 10; ++i) rep.Add(Task("Add", i));
  rep.Add(Task("Other", 1, "job-b"));  // dropped too, counted for its own job
  EXPECT_EQ(rep.counts().dropped, 7);
  ASSERT_TRUE(rep.Flush(absl::Seconds(10)));
  auto calls = sink.Calls();
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(Events(calls[0]), 4);
  std::map<std::string, int64_t> dropped;
  for (const auto& j : calls[0].jobs()) dropped[j.job_id()] = j.dropped();
  EXPECT_EQ(dropped["job-a"], 6);
  EXPECT_EQ(dropped["job-b"], 1);
  // Room again after the batch went.
  rep.Add(Task("Add", 11));
  ASSERT_TRUE(rep.Flush(absl::Seconds(10)));
  EXPECT_EQ(Events(sink.Calls().back()), 1);
  EXPECT_EQ(sink.Calls().back().jobs(0).dropped(), 0);
}

TEST(TimelineReporterTest, AHotPathCanSkipItsRecordWhileTheBufferIsFull) {
  Sink sink;
  TimelineReporterOptions o = Options();
  o.capacity = 2;
  TimelineReporter rep(o, sink.Sender());
  EXPECT_TRUE(rep.Accepting());
  rep.Add(Task("Add", 1));
  rep.Add(Task("Add", 2));
  EXPECT_FALSE(rep.Accepting());
  rep.CountDropped();
  rep.CountDropped();
  EXPECT_EQ(rep.counts().dropped, 2);
  ASSERT_TRUE(rep.Flush(absl::Seconds(10)));
  EXPECT_TRUE(rep.Accepting());
  ASSERT_EQ(sink.Calls().size(), 1u);
  EXPECT_EQ(Events(sink.Calls()[0]), 2);
  EXPECT_EQ(sink.Calls()[0].jobs(0).dropped(), 2);
}

TEST(TimelineReporterTest, AFailedBatchIsSentAgainWithTheSameNumber) {
  Sink sink(/*failures=*/2);
  TimelineReporterOptions o = Options();
  o.interval = absl::Milliseconds(20);
  TimelineReporter rep(o, sink.Sender());
  rep.Add(Task("Add", 1));
  ASSERT_TRUE(sink.WaitCalls(3));
  auto calls = sink.Calls();
  EXPECT_EQ(calls[0].seq(), 1u);
  EXPECT_EQ(calls[1].seq(), 1u);
  EXPECT_EQ(calls[2].seq(), 1u);
  ASSERT_TRUE(rep.Flush(absl::Seconds(10)));
  EXPECT_EQ(rep.counts().sent, 1);
  EXPECT_EQ(rep.counts().dropped, 0);
  rep.Add(Task("Add", 2));
  ASSERT_TRUE(rep.Flush(absl::Seconds(10)));
  EXPECT_EQ(sink.Calls().back().seq(), 2u);
}

TEST(TimelineReporterTest, ABatchGivenUpIsCountedInTheNext) {
  Sink sink(/*failures=*/2);
  TimelineReporterOptions o = Options();
  o.interval = absl::Milliseconds(20);
  o.attempts = 2;
  TimelineReporter rep(o, sink.Sender());
  rep.Add(Task("Add", 1));
  rep.Add(Task("Add", 2));
  ASSERT_TRUE(sink.WaitCalls(2));
  // The next batch carries the two lost records as dropped.
  ASSERT_TRUE(sink.WaitCalls(3));
  auto last = sink.Calls()[2];
  EXPECT_EQ(last.seq(), 2u);
  ASSERT_EQ(last.jobs_size(), 1);
  EXPECT_EQ(last.jobs(0).dropped(), 2);
  EXPECT_TRUE(Eventually([&] { return rep.counts().dropped == 2; }));
}

TEST(TimelineReporterTest, AFullBatchGoesBeforeTheInterval) {
  Sink sink;
  TimelineReporterOptions o = Options();
  o.batch = 5;
  o.min_gap = absl::ZeroDuration();
  TimelineReporter rep(o, sink.Sender());
  for (int i = 0; i < 4; ++i) rep.Add(Task("Add", i));
  rep.Add(Task("Add", 4));  // the fifth: the interval (an hour) need not pass
  ASSERT_TRUE(sink.WaitCalls(1));
  EXPECT_EQ(Events(sink.Calls()[0]), 5);
}

TEST(TimelineReporterTest, RecordsGoWithinTheInterval) {
  Sink sink;
  TimelineReporterOptions o = Options();
  o.interval = absl::Milliseconds(50);
  TimelineReporter rep(o, sink.Sender());
  rep.Add(Task("Add", 1));
  ASSERT_TRUE(sink.WaitCalls(1));
  rep.Add(Task("Add", 2));  // after an idle spell, as much later as the interval
  ASSERT_TRUE(sink.WaitCalls(2));
  EXPECT_TRUE(Eventually([&] { return rep.counts().sent == 2; }));
}

TEST(TimelineReporterTest, AddDoesNotWaitForASendInFlight) {
  absl::Notification release;
  std::atomic<int> calls{0};
  TimelineReporterOptions o = Options();
  o.capacity = 100;
  TimelineReporter rep(o, [&](const proto::ReportTimelineRequest&) {
    ++calls;
    release.WaitForNotification();  // a scheduler that does not answer
    return absl::OkStatus();
  });
  rep.Add(Task("Add", 0));
  std::thread flusher([&] { rep.Flush(absl::Seconds(30)); });
  while (calls.load() == 0) absl::SleepFor(absl::Milliseconds(1));
  const absl::Time start = absl::Now();
  for (int i = 0; i < 1000; ++i) rep.Add(Task("Add", i));
  EXPECT_LT(absl::Now() - start, absl::Seconds(1));
  EXPECT_EQ(rep.counts().added, 101);   // the buffer holds 100 while the batch is out
  EXPECT_EQ(rep.counts().dropped, 900);
  release.Notify();
  flusher.join();
}

TEST(TimelineReporterTest, AnOlderSchedulerTurnsItOff) {
  Sink sink(/*failures=*/1, absl::StatusCode::kUnimplemented);
  TimelineReporter rep(Options(), sink.Sender());
  rep.Add(Task("Add", 1));
  rep.Flush(absl::Seconds(10));
  rep.Add(Task("Add", 2));
  rep.Flush(absl::Seconds(10));
  EXPECT_EQ(sink.Calls().size(), 1u);
  EXPECT_EQ(rep.counts().dropped, 2);
}

TEST(TimelineReporterTest, TheDestructorSendsWhatIsBuffered) {
  Sink sink;
  {
    TimelineReporter rep(Options(), sink.Sender());
    rep.Add(Task("Add", 1));
    rep.Add(Task("Add", 2));
  }
  ASSERT_EQ(sink.Calls().size(), 1u);
  EXPECT_EQ(Events(sink.Calls()[0]), 2);
}

}  // namespace
}  // namespace drover
