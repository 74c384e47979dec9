// Issue 19 item 4: a driver's tasks and actors outlive scheduler restarts on a --redis
// cluster. Its job stands (the new scheduler waits for its driver to open its session
// again), its leased workers and actors run on, their leases are booked again from the
// agents' registrations, the actors' records come back from Redis (a named one is found
// by name again, on the same worker), lookups made while the scheduler is away wait for
// it, results stored on either node are found through the rebuilt object directory, and
// the tasks and ordered actor calls go on and come back right.
#include <signal.h>
#include <sys/wait.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <vector>

#include <iostream>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/files.h"
#include "gtest/gtest.h"
#include "tests/util/driver_program.h"
#include "tests/util/test_cluster.h"

namespace drover::testing {
namespace {

class SchedulerRestartTasksTest : public TwoNodeClusterTest {
 protected:
  static void SetUpTestSuite() {
    TestClusterOptions o = TwoNodes();
    o.redis = true;
    StartCluster(o);
  }
};

TEST_F(SchedulerRestartTasksTest, TwoHundredTasksAndTwoActorsOutliveTwoSchedulerKills) {
  const std::string stop = absl::StrCat(cluster_->dir(), "/stop-outlive");
  const std::string base = absl::StrCat(cluster_->dir(), "/outlive");
  pid_t pid = StartDriver(*cluster_, "tests/task_program",
                          {"outlive", "200", stop, "kept-counter", cluster_->agent_node_id(0),
                           cluster_->agent_node_id(1)},
                          base);
  auto done = [&] {
    int64_t n = 0;
    return absl::SimpleAtoi(ReadDriverOutput(base).Get("done"), &n) ? n : int64_t{0};
  };
  // The driver ended early (it prints why as "outlive=..."): waiting longer is useless.
  auto ended = [&] { return ReadDriverOutput(base).kv.count("outlive") > 0; };
  // Two rounds of 200 before the first kill: every lease and both actors are in use.
  ASSERT_TRUE(WaitFor([&] { return done() >= 400 || ended(); }, absl::Seconds(180)))
      << ReadDriverOutput(base).All() << cluster_->DaemonLogs();
  ASSERT_FALSE(ended()) << ReadDriverOutput(base).All();
  const std::string job = ReadDriverOutput(base).Get("job");
  for (int kill = 0; kill < 2; ++kill) {
    if (kill == 0) {
      ASSERT_TRUE(cluster_->RestartScheduler(SIGKILL).ok()) << cluster_->DaemonLogs();
    } else {
      // A lookup by name made while the scheduler is away waits for it (saying so).
      auto away_lines = [&] {
        const std::string err = ReadDriverOutput(base).err;
        int n = 0;
        for (size_t at = err.find("does not answer"); at != std::string::npos;
             at = err.find("does not answer", at + 1)) {
          ++n;
        }
        return n;
      };
      const int said = away_lines();
      cluster_->StopScheduler(SIGKILL);
      ASSERT_TRUE(WriteFileAtomic(stop + ".lookup", "1").ok());
      EXPECT_TRUE(WaitFor([&] { return away_lines() > said || ended(); }, absl::Seconds(60)))
          << ReadDriverOutput(base).All();
      EXPECT_EQ(ReadDriverOutput(base).kv.count("looked_up"), 0u);  // still waiting
      ASSERT_TRUE(cluster_->StartSchedulerAgain().ok()) << cluster_->DaemonLogs();
      EXPECT_TRUE(WaitFor([&] { return ReadDriverOutput(base).kv.count("looked_up") > 0 || ended(); },
                          absl::Seconds(90)))
          << ReadDriverOutput(base).All() << cluster_->DaemonLogs();
      EXPECT_EQ(ReadDriverOutput(base).Get("looked_up"), "1 ok");
    }
    // The job stands, and its tasks go on: two more rounds after the restart.
    const int64_t before = done();
    EXPECT_TRUE(WaitFor([&] { return done() >= before + 400 || ended(); }, absl::Seconds(180)))
        << "kill " << kill << ": " << ReadDriverOutput(base).All() << cluster_->DaemonLogs();
    auto info = cluster_->client().GetJob(job);
    ASSERT_TRUE(info.ok()) << info.status();
    EXPECT_EQ(info->state, JobState::kRunning) << info->reason;
  }
  ASSERT_TRUE(WriteFileAtomic(stop, "").ok());
  DriverRun r = FinishDriver(*cluster_, pid, base, absl::Seconds(180));
  EXPECT_EQ(r.code, 0) << r.All() << cluster_->DaemonLogs();
  EXPECT_EQ(r.Get("outlive"), "ok") << r.All();
  // Both actors called in order all along (their connections outlive the scheduler).
  EXPECT_TRUE(absl::StartsWith(r.Get("actors"), "ok ")) << r.All();
  // The named one found by name after both restarts: the same worker, its state kept.
  EXPECT_EQ(r.Get("named"), "ok same worker") << r.All();
  // Results stored on each node, read after the restarts.
  EXPECT_EQ(r.Get("blob0"), "ok") << r.All();
  EXPECT_EQ(r.Get("blob1"), "ok") << r.All();
  // One "away" and one "back" line per restart, though the session, actor calls and
  // lease requests all noticed each (sdk/runtime/scheduler_outage.h).
  int away = 0, back = 0;
  for (absl::string_view line : absl::StrSplit(r.err, '\n')) {
    away += absl::StrContains(line, "does not answer") && absl::StrContains(line, "waits for it to come back");
    back += absl::StrContains(line, "is back");
  }
  EXPECT_EQ(away, 2) << r.err;
  EXPECT_EQ(back, 2) << r.err;
  auto last = cluster_->client().WaitJob(job, absl::Seconds(30));
  ASSERT_TRUE(last.ok()) << last.status();
  EXPECT_EQ(last->state, JobState::kSucceeded) << last->reason;
}

// A driver started as a job's command while the head restarts (the chaos campaign's
// "not created: tasks: ... Connection refused") waits for the scheduler: the job's
// environment says a cluster exists. It says once, on stderr, which scheduler does not
// answer and until when it waits, and runs once the scheduler is back.
TEST_F(SchedulerRestartTasksTest, ADriverInAJobStartedWhileTheSchedulerRestartsWaitsForIt) {
  const std::string go = absl::StrCat(cluster_->dir(), "/go-injob");
  const std::string out = absl::StrCat(cluster_->dir(), "/injob.out");
  const std::string err = absl::StrCat(cluster_->dir(), "/injob.err");
  const std::string started = absl::StrCat(cluster_->dir(), "/started-injob");
  const std::string script =
      absl::StrCat("touch ", started, "; while [ ! -e ", go, " ]; do sleep 0.05; done; exec ",
                   Runfile("tests/task_program"), " one >", out, " 2>", err);
  auto job = cluster_->client().Submit(TestCluster::JobOf({"/bin/sh", "-c", script}, 1));
  ASSERT_TRUE(job.ok()) << job.status();
  // Its process runs (RUNNING alone means placed: the start may still be on its way).
  ASSERT_TRUE(WaitFor([&] { return ::access(started.c_str(), F_OK) == 0; }, absl::Seconds(60)))
      << cluster_->DaemonLogs();
  auto text = [](const std::string& path) {
    absl::StatusOr<std::string> t = ReadFile(path);
    return t.ok() ? *t : std::string();
  };
  cluster_->StopScheduler(SIGKILL);
  ASSERT_TRUE(WriteFileAtomic(go, "").ok());
  // Its Init finds no scheduler, and says so (or fails: "Init: ...").
  const bool told = WaitFor([&] {
    const std::string e = text(err);
    return absl::StrContains(e, "does not answer") || absl::StrContains(e, "Init:");
  }, absl::Seconds(60)) && absl::StrContains(text(err), "does not answer");
  const std::string said = text(err);
  ASSERT_TRUE(cluster_->StartSchedulerAgain().ok()) << cluster_->DaemonLogs();
  ASSERT_TRUE(told) << "stderr: " << said << "\nstdout: " << text(out) << "\njob: "
                    << cluster_->client().GetJob(job->job_id)->reason << cluster_->DaemonLogs();
  EXPECT_TRUE(absl::StrContains(said, absl::StrCat("the scheduler at ", cluster_->address())))
      << said;
  EXPECT_TRUE(absl::StrContains(said, absl::StrCat("drover::Init in job ", job->job_id, " (until ")))
      << said;
  auto last = cluster_->client().WaitJob(job->job_id, absl::Seconds(120));
  ASSERT_TRUE(last.ok()) << last.status();
  EXPECT_EQ(last->state, JobState::kSucceeded) << last->reason << "\n" << text(out) << text(err);
  EXPECT_TRUE(absl::StrContains(text(out), "one_task=3")) << text(out) << text(err);
  EXPECT_TRUE(absl::StrContains(text(err), "is back")) << text(err);
}

// Outside a job nothing says a cluster exists: a driver whose scheduler does not answer
// fails at once (it does not wait as a job's driver does), saying what to do.
TEST_F(SchedulerRestartTasksTest, ADriverOutsideAJobFailsAtOnceWhenNoSchedulerAnswers) {
  cluster_->StopScheduler(SIGKILL);
  const absl::Time start = absl::Now();
  DriverRun r = RunDriver(*cluster_, "tests/task_program", {"one"}, absl::Seconds(60));
  const absl::Duration took = absl::Now() - start;
  ASSERT_TRUE(cluster_->StartSchedulerAgain().ok()) << cluster_->DaemonLogs();
  // The next test finds both nodes back.
  EXPECT_TRUE(WaitFor([&] {
    auto st = cluster_->client().Status();
    if (!st.ok()) return false;
    int alive = 0;
    for (const auto& n : st->nodes) alive += n.state == NodeState::kAlive;
    return alive == 2;
  }, absl::Seconds(60))) << cluster_->DaemonLogs();
  EXPECT_EQ(r.code, 2) << r.All();
  EXPECT_TRUE(absl::StrContains(r.err, absl::StrCat("no scheduler answers at ", cluster_->address())))
      << r.All();
  EXPECT_TRUE(absl::StrContains(r.err, "start a cluster (`drover up`)")) << r.All();
  // Generous: a driver in a job waits 20 s.
  EXPECT_LT(took, absl::Seconds(15)) << r.All();
}


// The idle (warm) task workers of a driver outlive a scheduler restart with no lease,
// so the new scheduler had no record that the job had workers: when the driver was
// then killed, the job's end was sent to no node, and the workers ran on until their
// agent's own check (every few seconds, and only while it reaches the scheduler) found
// the job ended: the chaos campaign's no-process-outlives-job. The agents now list
// their idle workers when they register, and the job's end reaches their nodes at
// once ("the scheduler asked (StopJob)" in the agent's log, before its own check).
TEST_F(SchedulerRestartTasksTest, IdleWorkersFromBeforeARestartGoWithTheirJob) {
  const std::string base = absl::StrCat(cluster_->dir(), "/idle");
  pid_t pid = StartDriver(*cluster_, "tests/task_program", {"idle", "4"}, base);
  std::string job;
  ASSERT_TRUE(WaitFor([&] { return ReadDriverOutput(base).kv.count("idle") > 0; },
                      absl::Seconds(120)))
      << ReadDriverOutput(base).All();
  job = ReadDriverOutput(base).Get("idle");
  ASSERT_TRUE(absl::StartsWith(job, "job-")) << job;
  ASSERT_FALSE(ProcessesOfJob(job).empty()) << "no worker of " << job << " runs";
  ASSERT_TRUE(cluster_->RestartScheduler(SIGKILL).ok()) << cluster_->DaemonLogs();
  // Both agents registered again (listing their workers), the driver's job stands.
  ASSERT_TRUE(WaitFor(
      [&] {
        auto st = cluster_->client().Status();
        if (!st.ok()) return false;
        int alive = 0;
        for (const auto& n : st->nodes) alive += n.state == NodeState::kAlive;
        auto j = cluster_->client().GetJob(job);
        return alive == 2 && j.ok() && j->state == JobState::kRunning;
      },
      absl::Seconds(60)))
      << cluster_->DaemonLogs();
  ::kill(pid, SIGKILL);
  int status;
  ::waitpid(pid, &status, 0);
  auto ended = cluster_->client().WaitJob(job, absl::Seconds(60));
  ASSERT_TRUE(ended.ok()) << ended.status();
  const absl::Time end_seen = absl::Now();
  EXPECT_TRUE(WaitFor([&] { return ProcessesOfJob(job).empty(); }, absl::Seconds(30)))
      << ProcessesOfJob(job).size() << " processes of " << job << " outlived it";
  std::cout << "the processes of " << job << " were gone "
            << absl::FormatDuration(absl::Now() - end_seen) << " after its end was seen\n";
  // On each node, the first stop of the job's processes was the scheduler's.
  int stopped_on = 0;
  for (int i = 0; i < 2; ++i) {
    const std::string log = ReadFile(absl::StrCat(cluster_->dir(), "/agent-", i, ".log")).value_or("");
    for (absl::string_view line : absl::StrSplit(log, '\n')) {
      if (!absl::StrContains(line, absl::StrCat(" of job ", job)) ||
          !absl::StrContains(line, "stopping ")) {
        continue;
      }
      ++stopped_on;
      EXPECT_TRUE(absl::StrContains(line, "the scheduler asked (StopJob)"))
          << "agent " << i << " stopped " << job << "'s workers first by: " << line;
      break;
    }
  }
  EXPECT_GE(stopped_on, 1) << cluster_->DaemonLogs();
}

// Starts exactly once across a scheduler crash (docs/architecture.md, "starts exactly
// once"). The scheduler dies (_exit, as a SIGKILL: DROVER_TEST_CRASH_AFTER_START) right
// after the agents answered a gang's starts, with its Redis writes slowed
// (DROVER_TEST_STORE_DELAY_MS) as a loaded machine slows them: before the placement was
// stored ahead of the start, the restarted scheduler did not know the job had started
// (or that it existed at all) and ran its ranks a second time.
class StartOnceAcrossACrashTest : public TwoNodeClusterTest {
 protected:
  static void SetUpTestSuite() {
    TestClusterOptions o = TwoNodes();
    o.redis = true;
    StartCluster(o);
  }

  // Restarts the scheduler with the fault points on, submits a 2-rank gang (one per
  // node) that appends "start-<rank>" to <dir>/<name>.starts, prints hello-<rank> and
  // waits for <dir>/<name>.go; waits for the scheduler to die after the starts (after
  // the master's start only, with `crash_at` "master"), starts it again (fault points
  // off) and returns the job's id ("" after a test failure).
  std::string SubmitAcrossACrash(const std::string& name, const char* crash_at = "1") {
    const std::string base = absl::StrCat(cluster_->dir(), "/", name);
    const int crashes = Crashes();
    ::setenv("DROVER_TEST_CRASH_AFTER_START", crash_at, 1);
    ::setenv("DROVER_TEST_STORE_DELAY_MS", "1500", 1);
    absl::Status restarted = cluster_->RestartScheduler(SIGTERM);
    ::unsetenv("DROVER_TEST_CRASH_AFTER_START");
    ::unsetenv("DROVER_TEST_STORE_DELAY_MS");
    EXPECT_TRUE(restarted.ok()) << restarted;
    if (!restarted.ok()) return "";
    // Both agents registered with this scheduler (its starts need them ALIVE).
    EXPECT_TRUE(WaitFor(
        [&] {
          auto st = cluster_->client().Status();
          if (!st.ok() || st->nodes.size() != 2) return false;
          for (const auto& n : st->nodes) {
            if (n.state != NodeState::kAlive) return false;
          }
          return true;
        },
        absl::Seconds(60)))
        << cluster_->DaemonLogs();
    JobSpec spec;
    spec.command = {"/bin/sh", "-c",
                    absl::StrCat("echo start-$RANK >> ", base, ".starts; echo hello-$RANK; ",
                                 "while [ ! -e ", base, ".go ]; do sleep 0.05; done")};
    spec.nproc = 2;
    spec.nproc_per_node = 1;
    spec.per_process.cpus = 1;
    spec.idempotency_key = absl::StrCat("start-once-", name);
    std::string job;
    if (auto submitted = cluster_->client().Submit(spec); submitted.ok()) {
      job = submitted->job_id;
    } else if (auto accepted = AcceptedJobId(submitted.status())) {
      job = *accepted;
    }
    EXPECT_TRUE(WaitFor([&] { return Crashes() > crashes; }, absl::Seconds(60)))
        << cluster_->DaemonLogs();
    cluster_->StopScheduler(SIGKILL);  // reaps it
    absl::Status again = cluster_->StartSchedulerAgain();
    EXPECT_TRUE(again.ok()) << again;
    if (job.empty()) {
      // The submit's answer was lost with the scheduler: the same request id returns the
      // job it made (if it was saved), never a second one.
      EXPECT_TRUE(WaitFor(
          [&] {
            auto submitted = cluster_->client().Submit(spec);
            if (submitted.ok()) job = submitted->job_id;
            return submitted.ok();
          },
          absl::Seconds(60)));
    }
    return job;
  }

  // How many times a scheduler of the cluster ended at the fault point (its log is
  // appended to across restarts).
  int Crashes() {
    auto text = ReadFile(cluster_->dir() + "/scheduler.log");
    if (!text.ok()) return 0;
    int n = 0;
    for (size_t at = text->find("DROVER_TEST_CRASH_AFTER_START: exiting"); at != std::string::npos;
         at = text->find("DROVER_TEST_CRASH_AFTER_START: exiting", at + 1)) {
      ++n;
    }
    return n;
  }

  // The lines of <dir>/<name>.starts, sorted.
  std::vector<std::string> Starts(const std::string& name) {
    auto text = ReadFile(absl::StrCat(cluster_->dir(), "/", name, ".starts"));
    if (!text.ok()) return {};
    std::vector<std::string> lines = absl::StrSplit(*text, '\n', absl::SkipEmpty());
    std::sort(lines.begin(), lines.end());
    return lines;
  }
};

TEST_F(StartOnceAcrossACrashTest, RanksStartOnceWhenTheSchedulerDiesRightAfterTheirStart) {
  const std::string job = SubmitAcrossACrash("succeeds");
  ASSERT_FALSE(job.empty());
  ASSERT_TRUE(WriteFileAtomic(absl::StrCat(cluster_->dir(), "/succeeds.go"), "").ok());
  auto last = cluster_->client().WaitJob(job, absl::Seconds(120));
  ASSERT_TRUE(last.ok()) << last.status() << cluster_->DaemonLogs();
  EXPECT_EQ(last->state, JobState::kSucceeded) << last->reason << cluster_->DaemonLogs();
  EXPECT_EQ(last->restart_count, 0);
  EXPECT_EQ(Starts("succeeds"), (std::vector<std::string>{"start-0", "start-1"}));
}

// The chaos campaign's job-2mca-632: the master's start went out and ran, its answer
// died with the scheduler, rank 1's start was never sent. The restarted scheduler asks
// the master's node again for the port (it starts nothing) and starts rank 1 with it;
// before, rank 1 was failed as "gone" (or "never started") and the job FAILED.
TEST_F(StartOnceAcrossACrashTest, ALaterRankStartsOnceWhenTheSchedulerDiesAfterTheMastersStart) {
  const std::string job = SubmitAcrossACrash("master", "master");
  ASSERT_FALSE(job.empty());
  ASSERT_TRUE(WaitFor([&] { return Starts("master").size() == 2; }, absl::Seconds(60)))
      << cluster_->DaemonLogs();
  ASSERT_TRUE(WriteFileAtomic(absl::StrCat(cluster_->dir(), "/master.go"), "").ok());
  auto last = cluster_->client().WaitJob(job, absl::Seconds(120));
  ASSERT_TRUE(last.ok()) << last.status() << cluster_->DaemonLogs();
  EXPECT_EQ(last->state, JobState::kSucceeded) << last->reason << cluster_->DaemonLogs();
  EXPECT_EQ(last->restart_count, 0);
  EXPECT_EQ(Starts("master"), (std::vector<std::string>{"start-0", "start-1"}));
}

TEST_F(StartOnceAcrossACrashTest, ACancelAfterTheCrashLeavesTheJobCancelledWithItsLogs) {
  const std::string job = SubmitAcrossACrash("cancelled");
  ASSERT_FALSE(job.empty());
  auto cancelled = cluster_->client().Cancel(job);
  ASSERT_TRUE(cancelled.ok()) << cancelled.status();
  auto last = cluster_->client().WaitJob(job, absl::Seconds(120));
  ASSERT_TRUE(last.ok()) << last.status() << cluster_->DaemonLogs();
  EXPECT_EQ(last->state, JobState::kCancelled) << last->reason;
  EXPECT_EQ(Starts("cancelled"), (std::vector<std::string>{"start-0", "start-1"}));
  std::string out, err;
  EXPECT_EQ(cluster_->RunCli({"logs", job}, &out, &err), 0) << err;
  EXPECT_TRUE(absl::StrContains(out, "hello-0")) << out << err;
  EXPECT_TRUE(absl::StrContains(out, "hello-1")) << out << err;
}

}  // namespace
}  // namespace drover::testing
