#include "scheduler/job_timeline.h"

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

}  // namespace
}  // namespace drover
