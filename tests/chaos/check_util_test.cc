// The run-output-complete check (check_util.h) on records built by hand: what `drover
// run` may leave out under a fault, and what it may not.
#include "tests/chaos/check_util.h"

#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace drover::chaos {
namespace {

struct Case {
  CheckContext ctx;
  JobRecord r;
  JobInfo j;
  std::vector<ProcessTruth> truth;
};

// A 1-rank small job run through `drover run` that printed its outcome but none of the
// line its rank wrote; a restart-head fault overlapped it (or not, with `touched`).
Case RunMissingItsOutput(const std::string& err, bool touched) {
  Case c;
  const absl::Time t0 = absl::Now();
  c.r.kind = JobKind::kSmall;
  c.r.how = "cli";
  c.r.job_id = "job-abcd-1";
  c.r.submitted = t0;
  c.r.returned = t0 + absl::Seconds(5);
  c.r.cli_exit = 0;
  c.r.cli_err = "drover: submitted job-abcd-1\ndrover: job-abcd-1 SUCCEEDED in 5s\n" + err;
  c.j.job_id = c.r.job_id;
  c.j.state = JobState::kSucceeded;
  c.j.exit_code = 0;
  c.j.end_time = t0 + absl::Seconds(4);
  ProcessTruth t;
  t.job = c.r.job_id;
  t.name = "g0-r0";
  t.generation = 0;
  t.rank = 0;
  t.out = {"small job-abcd-1 rank 0 line 0"};
  t.out_ms = {absl::ToUnixMillis(t0 + absl::Seconds(1))};
  c.truth = {t};
  FaultRecord f;
  f.fault.kind = FaultKind::kRestartHead;
  f.injected = true;
  f.start = touched ? t0 + absl::Seconds(2) : t0 - absl::Minutes(10);
  f.end = f.start + absl::Seconds(1);
  c.ctx.faults = {f};
  return c;
}

int Violations(Case c) {
  Report report;
  CheckRunOutput(c.ctx, c.r, c.j, c.truth, report);
  return report.violations();
}

// Seen in the 30-minute run (seed 1795815065292292263, job-trz2-4061, job-7gws-5442):
// under scheduler restarts and stalls `drover run` said what it could not read, and the
// check took it for lost output.
TEST(CheckRunOutputTest, OutputTheRunSaysItCouldNotReadUnderAFaultIsAllowed) {
  EXPECT_EQ(Violations(RunMissingItsOutput(
                "drover: the job's output could not be followed: cannot reach the scheduler "
                "at 10.0.0.1:1 (Deadline Exceeded)",
                /*touched=*/true)),
            0);
  EXPECT_EQ(Violations(RunMissingItsOutput(
                "drover: node-2 is not known to the scheduler (it restarted and the node's "
                "agent has not registered since): the output its processes wrote there is not "
                "shown",
                /*touched=*/true)),
            0);
}

TEST(CheckRunOutputTest, MissingOutputWithoutAFaultOrWithoutAWordIsAViolation) {
  EXPECT_EQ(Violations(RunMissingItsOutput(
                "drover: the job's output could not be followed: cannot reach the scheduler",
                /*touched=*/false)),
            1);
  EXPECT_EQ(Violations(RunMissingItsOutput("", /*touched=*/true)), 1);
}

}  // namespace
}  // namespace drover::chaos
