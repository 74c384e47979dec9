// The short run of the scale benchmark's load (issue 13 item 6), in the test suite: a
// real drover-scheduler process, 20 simulated nodes speaking the agents' RPCs
// (SimFleet), and 100 clients, each with a connection of its own, submitting and
// polling at once. Nothing may fail, and no submission may be lost or doubled: every
// job id distinct, the scheduler holding exactly as many jobs, all SUCCEEDED. The
// on-demand run is `bazel run -c opt //bench:scale` (a minute, 1,000 nodes).
#include <cstdlib>
#include <iostream>

#include "absl/strings/str_cat.h"
#include "bench/bench_util.h"
#include "bench/scale_harness.h"
#include "gtest/gtest.h"
#include "scheduler/testing/sim_fleet.h"
#include "tests/util/test_util.h"

namespace drover::bench {
namespace {

using ::drover::testing::SimFleet;
using ::drover::testing::SimFleetOptions;
using ::drover::testing::SimFleetStats;

TEST(ScaleTest, HundredClientsSubmitAndPollWithoutLosingAJob) {
  const std::string dir = absl::StrCat(std::getenv("TEST_TMPDIR"), "/scale");
  ASSERT_EQ(::system(absl::StrCat("mkdir -p ", dir).c_str()), 0);
  auto scheduler =
      SchedulerProcess::Start(drover::testing::Runfile("scheduler/drover-scheduler"), dir, {});
  ASSERT_TRUE(scheduler.ok()) << scheduler.status();
  SchedulerProcess& s = **scheduler;

  SimFleetOptions fo;
  fo.scheduler_address = s.address();
  fo.token = s.token();
  fo.nodes = 20;
  fo.runtime = absl::Milliseconds(50);  // each job's one process exits after 50 ms
  auto fleet = SimFleet::Start(fo);
  ASSERT_TRUE(fleet.ok()) << fleet.status();
  ASSERT_TRUE((*fleet)->WaitReady(absl::Seconds(30)).ok()) << s.LogTail();

  JobSpec spec;
  spec.command = {"sim"};
  LoadResult load = RunLoad({s.address(), s.token_file()}, spec, /*clients=*/100,
                            absl::Seconds(10));
  EXPECT_EQ(load.errors.count, 0) << load.errors.Describe();
  EXPECT_GE(load.job_ids.size(), 100u);  // at least one round of all 100
  std::cout << "100 clients for 10 s: " << load.job_ids.size() << " submissions; submit "
            << DescribeLatencies(load.submit_ms) << "; poll " << DescribeLatencies(load.poll_ms)
            << std::endl;

  auto client = Client::Connect({s.address(), s.token_file()});
  ASSERT_TRUE(client.ok()) << client.status();
  absl::Status ran = CheckEverySubmissionRan(**client, load, /*jobs_before=*/0,
                                             absl::Seconds(30));
  EXPECT_TRUE(ran.ok()) << ran << "\n" << s.LogTail();
  EXPECT_GE((*fleet)->stats().processes_started, static_cast<int64_t>(load.job_ids.size()));
  (*fleet)->Stop();
}

}  // namespace
}  // namespace drover::bench
