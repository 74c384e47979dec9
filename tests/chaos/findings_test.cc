// Regression tests for what the chaos campaign found (docs/reliability.md), end to
// end on a real cluster. Each is named after the bug it pins; the units that were
// fixed have their own tests too (named in each comment).
#include <signal.h>
#include <unistd.h>

#include <future>

#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "common/files.h"
#include "tests/chaos/cluster_env.h"
#include "tests/util/test_cluster.h"

namespace drover::testing {
namespace {

std::unique_ptr<TestCluster> StartCluster() {
  TestClusterOptions o;
  o.nodes = 2;
  o.redis = true;  // jobs outlive the scheduler restarts below
  auto c = TestCluster::Start(o);
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? std::move(*c) : nullptr;
}

// How the CLI and drivers reach the cluster (chaos::RunWithCluster).
chaos::ClusterEnv EnvOf(TestCluster& c) {
  return {c.address(), c.token_file(), c.dir() + "/home", c.dir()};
}

// A job with one process on each node, each printing its rank.
JobInfo RunOnBothNodes(TestCluster& c) {
  auto job = c.RunJob(TestCluster::JobOf({"/bin/sh", "-c", "echo line of rank $RANK"}, 2, 1),
                      absl::Seconds(60));
  EXPECT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->state, JobState::kSucceeded) << job->reason;
  return *job;
}

// A killed agent started again on its directory came back as a new node; once the
// scheduler restarted (forgetting the old id), `drover logs` left out everything the
// jobs of the old node had written, without a word, and exited 0. The agent now keeps
// its node id in its directory (NodeAgentTest.AnAgentStartedAgainOnItsDirectoryIsTheSameNode).
TEST(ChaosFindingsTest, LogsOfAKilledAgentsJobsAreShownAfterItIsStartedAgain) {
  auto c = StartCluster();
  ASSERT_NE(c, nullptr);
  JobInfo job = RunOnBothNodes(*c);
  const std::string node0 = c->agent_node_id(0);
  c->SignalAgent(0, SIGKILL);
  ASSERT_TRUE(c->RestartAgent(0).ok());
  EXPECT_EQ(c->agent_node_id(0), node0) << "the agent came back as another node";
  ASSERT_TRUE(c->RestartScheduler(SIGKILL).ok());
  ASSERT_TRUE(WaitFor([&] {
    auto s = c->client().Status();
    if (!s.ok()) return false;
    int alive = 0;
    for (const auto& n : s->nodes) alive += n.state == NodeState::kAlive;
    return alive == 2;
  }, absl::Seconds(30))) << c->DaemonLogs();
  std::string out, err;
  ASSERT_EQ(c->RunCli({"logs", job.job_id}, &out, &err), 0) << err;
  EXPECT_TRUE(absl::StrContains(out, "[rank0]: line of rank 0")) << out << err;
  EXPECT_TRUE(absl::StrContains(out, "[rank1]: line of rank 1")) << out << err;
}

// When a node's machine is really gone (its agent never returns), `drover logs` said
// nothing about the output it could not show: it now names the node.
TEST(ChaosFindingsTest, LogsSayWhichNodesOutputTheyCannotShow) {
  auto c = StartCluster();
  ASSERT_NE(c, nullptr);
  JobInfo job = RunOnBothNodes(*c);
  const std::string gone = c->agent_node_id(1);
  c->SignalAgent(1, SIGKILL);
  ASSERT_TRUE(c->RestartScheduler(SIGKILL).ok());
  std::string out, err;
  c->RunCli({"logs", job.job_id}, &out, &err);
  EXPECT_TRUE(absl::StrContains(err, gone + " is not known to the scheduler")) << err;
  EXPECT_TRUE(absl::StrContains(err, "is not shown")) << err;
}

// `drover run` followed its job's output with calls that wait for an agent to answer;
// when the agent was killed and started again (listening elsewhere), the follow call
// to the old address waited forever, and `drover run` never returned though its job
// had failed. Following now ends with the job, and the last pass reads from where the
// node's agent is now, so the output written before the kill is printed too.
TEST(ChaosFindingsTest, DroverRunReturnsWhenItsNodesAgentWasKilledAndStartedAgain) {
  auto c = StartCluster();
  ASSERT_NE(c, nullptr);
  const std::string marker = absl::StrCat(c->dir(), "/started");
  const chaos::ClusterEnv env = EnvOf(*c);
  auto run = std::async(std::launch::async, [&] {
    return chaos::RunWithCluster(
        env,
        {Runfile("cli/drover"), "run", "--nodes", "1", "--", "/bin/sh", "-c",
         absl::StrCat("echo before the kill; touch ", marker, "; sleep 120")},
        absl::Seconds(90));
  });
  ASSERT_TRUE(WaitFor([&] { return ::access(marker.c_str(), F_OK) == 0; }, absl::Seconds(30)));
  // Whichever node runs it: kill both agents, then start them again.
  c->SignalAgent(0, SIGKILL);
  c->SignalAgent(1, SIGKILL);
  ASSERT_TRUE(c->RestartAgent(0).ok());
  ASSERT_TRUE(c->RestartAgent(1).ok());
  chaos::RunResult r = run.get();
  EXPECT_FALSE(r.timed_out) << "drover run did not return in 90 s; stderr: " << r.err;
  EXPECT_EQ(r.exit, 1) << r.err;
  EXPECT_TRUE(absl::StrContains(r.out, "[rank0]: before the kill")) << r.out << r.err;
  EXPECT_LT(r.ended - r.started, absl::Seconds(60)) << r.err;
}

// A plain driver registering while Redis stalled got UNAVAILABLE ("the change stands,
// is saved later: retry the call") and Init gave up: the driver exited, and its job,
// registered all the same, stayed RUNNING with no driver to end it. Init now retries.
TEST(ChaosFindingsTest, ADriverThatRegistersWhileRedisStallsRuns) {
  auto c = StartCluster();
  ASSERT_NE(c, nullptr);
  const pid_t redis = c->redis()->pid();
  ASSERT_EQ(::kill(redis, SIGSTOP), 0);
  const chaos::ClusterEnv env = EnvOf(*c);
  auto driver = std::async(std::launch::async, [&] {
    return chaos::RunWithCluster(env,
                                 {Runfile("tests/chaos/chaos_tasks"), "--truth",
                                  c->dir() + "/truth", "--rounds", "1"},
                                 absl::Seconds(90));
  });
  const std::string log = c->dir() + "/scheduler.log";
  ASSERT_TRUE(WaitFor([&] { return absl::StrContains(ReadFile(log).value_or(""), "registered: driver"); },
                      absl::Seconds(30)));
  // The fault's length (not a synchronization): longer than the scheduler waits for a
  // stored record before it answers UNAVAILABLE (4 s).
  absl::SleepFor(absl::Seconds(6));
  ::kill(redis, SIGCONT);
  chaos::RunResult r = driver.get();
  EXPECT_EQ(r.exit, 0) << r.out << r.err;
  EXPECT_TRUE(absl::StrContains(r.out, "round 0 errors 0")) << r.out << r.err;
  EXPECT_TRUE(WaitFor([&] {
    auto j = c->client().ListJobs({JobState::kRunning});
    return j.ok() && j->empty();
  })) << "a driver job stays RUNNING with no driver";
}

// A scheduler stalled (SIGSTOP here; a frozen VM or swapping in life) for longer than
// the node timeout declared every healthy node dead on its first pass after it resumed,
// before it read the heartbeats queued meanwhile, and failed every running job.
TEST(ChaosFindingsTest, AStalledSchedulerDoesNotDeclareHealthyNodesDead) {
  auto c = StartCluster();  // node timeout 5 s
  ASSERT_NE(c, nullptr);
  auto job = c->client().Submit(TestCluster::JobOf({"/bin/sleep", "60"}, 2, 1));
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_TRUE(WaitFor([&] { return ProcessesOfJob(job->job_id).size() >= 2; }));
  ASSERT_EQ(::kill(c->scheduler_pid(), SIGSTOP), 0);
  // The fault's length (not a synchronization): longer than the node timeout.
  absl::SleepFor(absl::Seconds(7));
  ::kill(c->scheduler_pid(), SIGCONT);
  // A few heartbeat rounds after it resumed, nothing has died.
  ASSERT_TRUE(WaitFor([&] {
    auto j = c->client().GetJob(job->job_id);
    return j.ok() && j->version > 0;
  })) << c->DaemonLogs();
  absl::Time until = absl::Now() + absl::Seconds(2);
  while (absl::Now() < until) {
    auto s = c->client().Status();
    ASSERT_TRUE(s.ok()) << s.status();
    for (const auto& n : s->nodes) {
      ASSERT_EQ(n.state, NodeState::kAlive) << n.node_id << " was declared dead\n"
                                             << c->DaemonLogs();
    }
    absl::SleepFor(absl::Milliseconds(100));
  }
  auto j = c->client().GetJob(job->job_id);
  ASSERT_TRUE(j.ok()) << j.status();
  EXPECT_EQ(j->state, JobState::kRunning) << j->reason;
  ASSERT_TRUE(c->client().Cancel(job->job_id).ok());
}

// `drover run` gave up ("cannot reach the scheduler", exit 1) when the scheduler did
// not answer one poll in time, while its job ran on and succeeded. It now waits for the
// scheduler (up to a minute) and exits with the job's code, every line printed.
TEST(ChaosFindingsTest, DroverRunRidesOutAStalledScheduler) {
  auto c = StartCluster();
  ASSERT_NE(c, nullptr);
  const std::string marker = absl::StrCat(c->dir(), "/first-line");
  const chaos::ClusterEnv env = EnvOf(*c);
  auto run = std::async(std::launch::async, [&] {
    return chaos::RunWithCluster(
        env,
        {Runfile("cli/drover"), "run", "--", "/bin/sh", "-c",
         absl::StrCat("echo one; touch ", marker, "; sleep 12; echo two")},
        absl::Seconds(90));
  });
  ASSERT_TRUE(WaitFor([&] { return ::access(marker.c_str(), F_OK) == 0; }, absl::Seconds(30)));
  ASSERT_EQ(::kill(c->scheduler_pid(), SIGSTOP), 0);
  // The fault's length: longer than a poll's deadline (5 s + its 2 s wait).
  absl::SleepFor(absl::Seconds(9));
  ::kill(c->scheduler_pid(), SIGCONT);
  chaos::RunResult r = run.get();
  EXPECT_EQ(r.exit, 0) << r.out << r.err;
  EXPECT_TRUE(absl::StrContains(r.out, "[rank0]: one\n[rank0]: two\n")) << r.out << r.err;
  EXPECT_TRUE(absl::StrContains(r.err, "still waiting for")) << r.err;
}

// A driver whose job ended under it (found when a scheduler restart ended the drivers
// that were running; now their jobs outlive it, SchedulerRestartTasksTest, so the job
// is cancelled here) went on submitting, got "cannot get a worker: job ... has ended"
// as a pending reason and each task waited out its Get's timeout (30 s here), so the
// driver took many minutes to finish. Its tasks now fail at once with that reason.
TEST(ChaosFindingsTest, TasksOfADriverWhoseJobEndedFailAtOnce) {
  auto c = StartCluster();
  ASSERT_NE(c, nullptr);
  const std::string truth = c->dir() + "/truth";
  const chaos::ClusterEnv env = EnvOf(*c);
  auto driver = std::async(std::launch::async, [&] {
    return chaos::RunWithCluster(
        env,
        {Runfile("tests/chaos/chaos_tasks"), "--truth", truth, "--rounds", "6", "--pause-ms", "500"},
        absl::Seconds(90));
  });
  // Once it has results, its job is cancelled under it.
  std::string job;
  ASSERT_TRUE(WaitFor([&] {
    auto jobs = c->client().ListJobs({JobState::kRunning});
    if (!jobs.ok() || jobs->empty()) return false;
    job = jobs->front().job_id;
    return absl::StrContains(ReadFile(truth + "/" + job + "/driver.truth").value_or(""),
                             "check ok round 0 add 0");
  }, absl::Seconds(60))) << c->DaemonLogs();
  ASSERT_TRUE(c->client().Cancel(job).ok());
  const absl::Time restarted = absl::Now();
  chaos::RunResult r = driver.get();
  EXPECT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(r.exit, 0) << r.out << r.err;
  EXPECT_LT(r.ended - restarted, absl::Seconds(60)) << r.out << r.err;
  EXPECT_TRUE(absl::StrContains(r.out, "round 5 errors")) << r.out;
  EXPECT_FALSE(absl::StrContains(r.out, "round 5 errors 0")) << "the restart came too late: " << r.out;
}

// A job that hosts a task driver ended after a scheduler restart: the restarted
// scheduler did not know of the job's task workers (soft state), told no node, and the
// workers ran on until their idle timeout (60 s). Agents now ask about the jobs of
// their workers every few seconds.
TEST(ChaosFindingsTest, TaskWorkersStopWhenTheirJobEndsAfterASchedulerRestart) {
  auto c = StartCluster();
  ASSERT_NE(c, nullptr);
  const std::string truth = c->dir() + "/truth";
  JobSpec spec = TestCluster::JobOf(
      {Runfile("tests/chaos/chaos_tasks"), "--truth", truth, "--rounds", "1", "--pause-ms", "4000"},
      1);
  auto job = c->client().Submit(spec);
  ASSERT_TRUE(job.ok()) << job.status();
  const std::string driver_truth = truth + "/" + job->job_id + "/driver.truth";
  // Round 0 is done and its workers are idle when the scheduler restarts; the driver
  // exits during its pause, under the new scheduler.
  ASSERT_TRUE(WaitFor([&] {
    return absl::StrContains(ReadFile(driver_truth).value_or(""), " round 0 errors ");
  }, absl::Seconds(60))) << c->DaemonLogs();
  ASSERT_FALSE(ProcessesOfJob(job->job_id).size() <= 1) << "no task workers ran";
  ASSERT_TRUE(c->RestartScheduler(SIGKILL).ok());
  auto ended = c->client().WaitJob(job->job_id, absl::Seconds(60));
  ASSERT_TRUE(ended.ok()) << ended.status();
  EXPECT_EQ(ended->state, JobState::kSucceeded) << ended->reason;
  EXPECT_TRUE(WaitFor([&] { return ProcessesOfJob(job->job_id).empty(); }, absl::Seconds(20)))
      << ProcessesOfJob(job->job_id).size() << " process(es) of the ended job still run";
}

}  // namespace
}  // namespace drover::testing
