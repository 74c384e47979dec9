// The pure rules of generation.h: failure descriptions, exit codes, KV scope checks and
// the generation watch's answers.
#include "scheduler/generation.h"

#include "gtest/gtest.h"

namespace drover {
namespace {

proto::ExitInfo Exit(int rank, int code, int signal = 0, int generation = 0) {
  proto::ExitInfo e;
  e.set_rank(rank);
  e.set_node_id("node-2");
  e.set_exit_code(code);
  e.set_signal(signal);
  e.set_generation(generation);
  return e;
}

TEST(GenerationTest, DescribesFailuresAndTheirExitCodes) {
  proto::ExitInfo e = Exit(1, 3);
  e.set_stderr_tail("boom");
  EXPECT_EQ(DescribeFailure(e, "10.0.0.2"),
            "rank 1 on node node-2 (10.0.0.2) exited with code 3; last lines of its stderr:\n"
            "boom\n");
  EXPECT_EQ(DescribeFailure(e, "", /*with_stderr=*/false), "rank 1 on node node-2 exited with code 3");
  EXPECT_EQ(DescribeFailure(Exit(0, -1, 9), ""), "rank 0 on node node-2 was killed by SIGKILL");
  EXPECT_EQ(ExitCodeOf(Exit(0, 3)), 3);
  EXPECT_EQ(ExitCodeOf(Exit(0, -1, 9)), 137);
  EXPECT_EQ(ExitCodeOf(Exit(0, -1)), 1);
  EXPECT_TRUE(Failed(Exit(0, 3)));
  EXPECT_FALSE(Failed(Exit(0, 0)));
}

TEST(GenerationTest, WatchAnswersFailureEndAndMovingOn) {
  proto::JobInfo job;
  job.set_job_id("job-a-1");
  job.set_state(proto::RUNNING);
  EXPECT_FALSE(GenerationEnd(job, 0, "").has_value());  // runs on
  *job.mutable_root_cause() = Exit(1, -1, 9);
  job.set_restarting(true);
  auto failed = GenerationEnd(job, 0, "10.0.0.2");
  ASSERT_TRUE(failed.has_value());
  EXPECT_TRUE(failed->ended());
  EXPECT_EQ(failed->failure().rank(), 1);
  EXPECT_EQ(failed->description(), "rank 1 on node node-2 (10.0.0.2) was killed by SIGKILL");
  job.set_restarting(false);
  job.set_restart_count(1);
  job.clear_root_cause();
  EXPECT_EQ(GenerationEnd(job, 0, "")->description(), "job job-a-1 moved on to generation 1");
  job.set_state(proto::SUCCEEDED);
  job.set_reason("all 2 processes exited with code 0");
  EXPECT_EQ(GenerationEnd(job, 1, "")->description(),
            "job job-a-1 ended (SUCCEEDED: all 2 processes exited with code 0)");
}

}  // namespace
}  // namespace drover
