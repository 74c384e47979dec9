// The phase texts of `drover run`'s status line, and its redraws as time passes
// (a fake clock and an injected writer: no terminal).
#include "cli/status_line.h"

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "common/clock.h"
#include "common/progress_line.h"
#include "common/progress_line_testing.h"
#include "gtest/gtest.h"
#include "tests/util/test_util.h"

namespace drover::cli {
namespace {

const absl::Time kT0 = absl::FromUnixSeconds(1'700'000'000);

JobInfo Job(JobState state, int nproc) {
  JobInfo j;
  j.job_id = "job-3";
  j.state = state;
  j.spec.nproc = nproc;
  j.submit_time = kT0;
  return j;
}

void Place(JobInfo* j, std::vector<std::string> nodes) {
  for (int r = 0; r < static_cast<int>(nodes.size()); ++r) {
    RankPlacement p;
    p.rank = r;
    p.node_id = nodes[r];
    j->placement.push_back(p);
  }
}

TEST(JobPhaseTest, PendingSaysForHowLongAndWhy) {
  JobInfo j = Job(JobState::kPending, 4);
  j.reason = "needs 4 GPUs on one node; the most free on any node is 2 GPUs";
  EXPECT_EQ(JobPhase(j, kT0 + absl::Seconds(12)),
            "drover: job-3 pending 12s: needs 4 GPUs on one node; the most free on any node "
            "is 2 GPUs");
}

TEST(JobPhaseTest, StartingCountsSpawnedRanksThenRunningCountsTimeAndLiveRanks) {
  JobInfo j = Job(JobState::kRunning, 4);
  Place(&j, {"node-1", "node-1", "node-2", "node-2"});
  j.start_time = j.generation_start = kT0 + absl::Seconds(2);
  j.live_processes = 4;
  j.started_processes = 2;
  EXPECT_EQ(JobPhase(j, kT0 + absl::Seconds(3)), "drover: job-3 starting 2/4 ranks on 2 nodes");
  j.started_processes = 4;
  EXPECT_EQ(JobPhase(j, kT0 + absl::Seconds(67)),
            "drover: job-3 running 1m05s: 4/4 ranks alive on 2 nodes");
  j.live_processes = 3;
  j.restart_count = 1;
  j.spec.max_restarts = 3;
  EXPECT_EQ(JobPhase(j, kT0 + absl::Seconds(67)),
            "drover: job-3 running 1m05s: 3/4 ranks alive on 2 nodes (restart 1 of 3)");
  j.restarting = true;
  j.reason = "restarting the gang (2 of 3) because rank 1 exited with code 1";
  EXPECT_EQ(JobPhase(j, kT0 + absl::Seconds(68)),
            "drover: job-3 restarting: restarting the gang (2 of 3) because rank 1 exited with "
            "code 1");
}

TEST(JobPhaseTest, EndedJobsHaveNoLine) {
  for (JobState s : {JobState::kSucceeded, JobState::kFailed, JobState::kCancelled}) {
    EXPECT_EQ(JobPhase(Job(s, 1), kT0), "");
  }
}

TEST(JobPhaseTest, NodesComingUp) {
  EXPECT_EQ(NodesComingUp(1, 2, absl::Seconds(3)), "drover: 1 of 2 nodes registered (3s)");
  EXPECT_EQ(NodesComingUp(0, 1, absl::ZeroDuration()), "drover: 0 of 1 node registered (0s)");
}

TEST(JobStatusLineTest, DrawsEachRecordAndMovesTheTimeEverySecond) {
  FakeClock clock(kT0);
  testing::CapturedTerminal screen;
  std::unique_ptr<ProgressLine> line = screen.Line(&clock, 200);
  {
    JobStatusLine status(line.get(), &clock);
    JobInfo j = Job(JobState::kPending, 2);
    j.reason = "waiting for a node";
    status.Update(j);
    EXPECT_TRUE(absl::StrContains(screen.text(), "\rdrover: job-3 pending 0s: waiting for a node"))
        << screen.text();
    // No new record: the ticker redraws the line as time passes.
    clock.Advance(absl::Seconds(5));
    EXPECT_TRUE(testing::WaitFor([&] {
      return absl::StrContains(screen.text(), "\rdrover: job-3 pending 5s: waiting for a node");
    })) << screen.text();
  }
  // Gone with the JobStatusLine: erased.
  EXPECT_TRUE(absl::EndsWith(screen.text(), "\r\033[K")) << screen.text();
}

TEST(JobStatusLineTest, WithoutALineNothingHappens) {
  JobStatusLine status(nullptr);
  status.Update(Job(JobState::kRunning, 1));  // no crash, no thread
}

}  // namespace
}  // namespace drover::cli
