#include "scheduler/job_timeline.h"

#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "gtest/gtest.h"

namespace drover {
namespace {

proto::ExitInfo Exit(int rank, int code, int signal = 0) {
  proto::ExitInfo e;
  e.set_rank(rank);
  e.set_node_id("node-1");
  e.set_exit_code(code);
  e.set_signal(signal);
  e.set_stderr_tail("boom\n");
  return e;
}

TEST(JobTimelineTest, KeepsEventsInOrderStampedByTheClock) {
  FakeClock clock(absl::FromUnixSeconds(100));
  JobTimeline t(&clock);
  t.Record("job-a", TimelineEventOf(proto::TIMELINE_SUBMITTED, 0));
  clock.Advance(absl::Milliseconds(5));
  t.Record("job-a", TimelineEventOf(proto::TIMELINE_PLACED, 0, "node-1", {0, 1}));
  auto got = t.Get("job-a");
  ASSERT_TRUE(got.has_value());
  ASSERT_EQ(got->events.size(), 2u);
  EXPECT_EQ(got->events[0].time_us(), 100'000'000);
  EXPECT_EQ(got->events[1].time_us(), 100'005'000);
  EXPECT_EQ(got->events[1].ranks_size(), 2);
  EXPECT_EQ(got->dropped, 0);
  EXPECT_FALSE(t.Get("job-b").has_value());
}

TEST(JobTimelineTest, BoundsEventsPerJobAndJobs) {
  FakeClock clock;
  TimelineLimits limits;
  limits.events_per_job = 3;
  limits.jobs = 2;
  JobTimeline t(&clock, limits);
  for (int i = 0; i < 5; ++i) {
    t.Record("job-a", TimelineEventOf(proto::TIMELINE_RANKS_STARTED, i));
  }
  auto a = t.Get("job-a");
  ASSERT_TRUE(a.has_value());
  ASSERT_EQ(a->events.size(), 3u);
  EXPECT_EQ(a->events[0].generation(), 2);  // the oldest went first
  EXPECT_EQ(a->dropped, 2);
  t.Record("job-b", TimelineEventOf(proto::TIMELINE_SUBMITTED, 0));
  t.Record("job-a", TimelineEventOf(proto::TIMELINE_SUBMITTED, 0));  // a is newer than b now
  t.Record("job-c", TimelineEventOf(proto::TIMELINE_SUBMITTED, 0));
  EXPECT_FALSE(t.Get("job-b").has_value());
  EXPECT_TRUE(t.Get("job-a").has_value());
  EXPECT_TRUE(t.Get("job-c").has_value());
}

TEST(JobTimelineTest, FailuresAreKeptApartNewestFirst) {
  FakeClock clock;
  TimelineLimits limits;
  limits.failures = 2;
  JobTimeline t(&clock, limits);
  t.Record("job-a", RankExitEvent(Exit(0, 0)));
  t.Record("job-a", RankExitEvent(Exit(1, 3)));
  t.Record("job-b", RankExitEvent(Exit(0, -1, 9)));
  t.Record("job-b", JobEndEvent(proto::SUCCEEDED, 0, "all 1 processes exited with code 0"));
  t.Record("job-c", JobEndEvent(proto::FAILED, 0, "rank 0 was killed"));
  auto f = t.RecentFailures();
  ASSERT_EQ(f.size(), 2u);
  EXPECT_EQ(f[0].job_id, "job-c");
  EXPECT_EQ(f[0].event.state(), "FAILED");
  EXPECT_EQ(f[1].job_id, "job-b");
  EXPECT_EQ(f[1].event.exit().signal(), 9);
  // A success keeps no stderr tail; a failure does, with how it ended in words.
  auto a = t.Get("job-a");
  EXPECT_EQ(a->events[0].exit().stderr_tail(), "");
  EXPECT_EQ(a->events[1].exit().stderr_tail(), "boom\n");
  EXPECT_NE(a->events[1].detail().find("code 3"), std::string::npos) << a->events[1].detail();
}

TEST(JobTimelineTest, TheListenerHearsEveryEventStamped) {
  FakeClock clock(absl::FromUnixSeconds(7));
  JobTimeline t(&clock);
  std::vector<std::pair<std::string, int64_t>> heard;
  t.SetListener([&](const std::string& job, const proto::TimelineEvent& e) {
    heard.emplace_back(job, e.time_us());
  });
  t.Record("job-a", TimelineEventOf(proto::TIMELINE_SUBMITTED, 0));
  ASSERT_EQ(heard.size(), 1u);
  EXPECT_EQ(heard[0].first, "job-a");
  EXPECT_EQ(heard[0].second, 7'000'000);
}

proto::TimelineEvent TaskSpan(int64_t start_us, const std::string& name = "Add") {
  proto::TimelineEvent e;
  e.set_kind(proto::TIMELINE_TASK);
  e.set_time_us(start_us);
  e.set_duration_us(10);
  e.set_name(name);
  e.set_node_id("node-1");
  e.set_worker_id("w-1");
  return e;
}

proto::ReportTimelineRequest Batch(const std::string& reporter, uint64_t seq,
                                   const std::string& job, std::vector<proto::TimelineEvent> events,
                                   int64_t dropped = 0) {
  proto::ReportTimelineRequest r;
  r.set_reporter(reporter);
  r.set_seq(seq);
  proto::JobTimelineReport* j = r.add_jobs();
  j->set_job_id(job);
  for (auto& e : events) *j->add_events() = std::move(e);
  j->set_dropped(dropped);
  return r;
}

TEST(JobTimelineTest, ReportedEventsMergeIntoTheJobsEventsByTime) {
  FakeClock clock(absl::FromUnixSeconds(100));
  JobTimeline t(&clock);
  t.Record("job-a", TimelineEventOf(proto::TIMELINE_SUBMITTED, 0));  // at 100 s
  clock.Advance(absl::Seconds(2));
  t.Record("job-a", TimelineEventOf(proto::TIMELINE_ENDED, 0));  // at 102 s
  // Out of order, as batches of several reporters arrive.
  auto r = t.Report(Batch("w-1", 1, "job-a", {TaskSpan(101'500'000, "B"), TaskSpan(100'500'000, "A")}, 3));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->recorded(), 2);
  auto got = t.Get("job-a");
  ASSERT_TRUE(got.has_value());
  ASSERT_EQ(got->events.size(), 4u);
  EXPECT_EQ(got->events[0].kind(), proto::TIMELINE_SUBMITTED);
  EXPECT_EQ(got->events[1].name(), "A");
  EXPECT_EQ(got->events[2].name(), "B");
  EXPECT_EQ(got->events[3].kind(), proto::TIMELINE_ENDED);
  EXPECT_EQ(got->activity_dropped, 3);  // what the reporter dropped
}

TEST(JobTimelineTest, ARetriedBatchIsAppliedOnce) {
  FakeClock clock;
  JobTimeline t(&clock);
  t.Record("job-a", TimelineEventOf(proto::TIMELINE_SUBMITTED, 0));
  const auto batch = Batch("w-1", 1, "job-a", {TaskSpan(1)}, 2);
  auto first = t.Report(batch);
  auto again = t.Report(batch);  // the reply was lost; the reporter sends it again
  ASSERT_TRUE(first.ok() && again.ok());
  EXPECT_FALSE(first->duplicate());
  EXPECT_TRUE(again->duplicate());
  EXPECT_EQ(again->recorded(), 0);
  auto got = t.Get("job-a");
  EXPECT_EQ(got->events.size(), 2u);
  EXPECT_EQ(got->activity_dropped, 2);
  // The next batch of that reporter, and another reporter's first, are new.
  EXPECT_EQ(t.Report(Batch("w-1", 2, "job-a", {TaskSpan(2)}))->recorded(), 1);
  EXPECT_EQ(t.Report(Batch("w-2", 1, "job-a", {TaskSpan(3)}))->recorded(), 1);
  EXPECT_EQ(t.Get("job-a")->events.size(), 4u);
}

TEST(JobTimelineTest, ReportsOfUnknownJobsAreIgnored) {
  FakeClock clock;
  JobTimeline t(&clock);
  auto r = t.Report(Batch("w-1", 1, "job-nope", {TaskSpan(1), TaskSpan(2)}));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->recorded(), 0);
  EXPECT_EQ(r->unknown_job(), 2);
  EXPECT_FALSE(t.Get("job-nope").has_value());
}

TEST(JobTimelineTest, MalformedReportsAreRefusedNamingTheProblem) {
  FakeClock clock;
  JobTimeline t(&clock);
  t.Record("job-a", TimelineEventOf(proto::TIMELINE_SUBMITTED, 0));
  auto forged = TimelineEventOf(proto::TIMELINE_ENDED, 0);
  auto r = t.Report(Batch("w-1", 1, "job-a", {forged}));
  ASSERT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("TIMELINE_ENDED"), std::string::npos) << r.status();
  EXPECT_EQ(t.Report(Batch("", 1, "job-a", {TaskSpan(1)})).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(t.Report(Batch("w-1", 0, "job-a", {TaskSpan(1)})).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(t.Report(Batch("w-1", 1, "", {TaskSpan(1)})).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(t.Report(Batch("w-1", 1, "job-a", {TaskSpan(1)}, -1)).status().code(),
            absl::StatusCode::kInvalidArgument);
  std::vector<proto::TimelineEvent> many(kMaxReportedEvents + 1, TaskSpan(1));
  EXPECT_EQ(t.Report(Batch("w-1", 1, "job-a", many)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(t.Get("job-a")->events.size(), 1u);  // nothing of those was kept
  // A refused batch does not use up its number.
  EXPECT_EQ(t.Report(Batch("w-1", 1, "job-a", {TaskSpan(1)}))->recorded(), 1);
}

TEST(JobTimelineTest, ReportedEventsAreBoundedPerJobAndInAllCountingWhatGoes) {
  FakeClock clock;
  TimelineLimits limits;
  limits.activity_per_job = 5;
  limits.activity_total = 7;
  JobTimeline t(&clock, limits);
  t.Record("job-a", TimelineEventOf(proto::TIMELINE_SUBMITTED, 0));
  t.Record("job-b", TimelineEventOf(proto::TIMELINE_SUBMITTED, 0));
  std::vector<proto::TimelineEvent> eight;
  const int64_t later = absl::ToUnixMicros(clock.Now()) + 1000;
  for (int i = 0; i < 8; ++i) eight.push_back(TaskSpan(later + i, absl::StrCat("t", i)));
  ASSERT_TRUE(t.Report(Batch("w-1", 1, "job-a", eight, /*dropped=*/4)).ok());
  auto a = t.Get("job-a");
  ASSERT_EQ(a->events.size(), 1u + 5u);
  EXPECT_EQ(a->events[1].name(), "t3");  // the oldest went first
  EXPECT_EQ(a->activity_dropped, 4 + 3);
  // job-b's events push the total over 7: job-a (least recently active) gives up more.
  ASSERT_TRUE(t.Report(Batch("w-2", 1, "job-b", {TaskSpan(1), TaskSpan(2), TaskSpan(3),
                                                  TaskSpan(4)})).ok());
  a = t.Get("job-a");
  auto b = t.Get("job-b");
  EXPECT_EQ(a->events.size() - 1 + b->events.size() - 1, 7u);
  EXPECT_EQ(b->events.size(), 1u + 4u);
  EXPECT_EQ(a->activity_dropped, 4 + 3 + 2);
  EXPECT_EQ(b->activity_dropped, 0);
  // Whatever was kept plus what was dropped is all that happened.
  EXPECT_EQ(static_cast<int64_t>(a->events.size() - 1) + a->activity_dropped, 8 + 4);
}

TEST(JobTimelineTest, ReportedStringsAreCut) {
  FakeClock clock;
  JobTimeline t(&clock);
  t.Record("job-a", TimelineEventOf(proto::TIMELINE_SUBMITTED, 0));
  proto::TimelineEvent e = TaskSpan(absl::ToUnixMicros(clock.Now()) + 5, std::string(100000, 'n'));
  e.set_detail(std::string(100000, 'd'));
  for (int i = 0; i < 50; ++i) e.add_ranks(i);
  ASSERT_TRUE(t.Report(Batch("w-1", 1, "job-a", {e})).ok());
  const proto::TimelineEvent kept = t.Get("job-a")->events[1];
  EXPECT_LE(kept.name().size(), 192u);
  EXPECT_LE(kept.detail().size(), 512u);
  EXPECT_EQ(kept.ranks_size(), 1);
}

TEST(JobTimelineTest, ReportedEventsGoWithTheirJob) {
  FakeClock clock;
  TimelineLimits limits;
  limits.jobs = 1;
  limits.activity_total = 3;
  JobTimeline t(&clock, limits);
  t.Record("job-a", TimelineEventOf(proto::TIMELINE_SUBMITTED, 0));
  ASSERT_TRUE(t.Report(Batch("w-1", 1, "job-a", {TaskSpan(1), TaskSpan(2), TaskSpan(3)})).ok());
  t.Record("job-b", TimelineEventOf(proto::TIMELINE_SUBMITTED, 0));  // job-a goes
  ASSERT_TRUE(t.Report(Batch("w-1", 2, "job-b", {TaskSpan(1), TaskSpan(2), TaskSpan(3)})).ok());
  auto b = t.Get("job-b");
  EXPECT_EQ(b->events.size(), 4u);  // job-a's events no longer count against the total
  EXPECT_EQ(b->activity_dropped, 0);
}

}  // namespace
}  // namespace drover
