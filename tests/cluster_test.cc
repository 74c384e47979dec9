// Integration tests: a real scheduler and real agents as processes on loopback; jobs
// are real processes. Nothing is mocked.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <iostream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/files.h"
#include "common/rpc.h"
#include "drover/json.h"
#include "sdk/internal/convert.h"
#include "gtest/gtest.h"
#include "proto/node_agent.grpc.pb.h"
#include "proto/scheduler.grpc.pb.h"
#include "tests/util/driver_program.h"
#include "tests/util/test_cluster.h"

namespace drover::testing {
namespace {

std::string Tmp(const std::string& name) {
  std::string dir = absl::StrCat(std::getenv("TEST_TMPDIR"), "/", name);
  (void)MakeDirs(dir);
  return dir;
}

JobSpec ShellJob(const std::string& script, int nproc, int ppn = 0) {
  JobSpec spec;
  spec.command.push_back("/bin/sh");
  spec.command.push_back("-c");
  spec.command.push_back(script);
  spec.nproc = nproc;
  spec.nproc_per_node = ppn;
  spec.per_process.cpus = 1;
  return spec;
}

class ClusterTest : public ::testing::Test {
 protected:
  void StartCluster(TestClusterOptions options = {}) {
    auto c = TestCluster::Start(options);
    ASSERT_TRUE(c.ok()) << c.status();
    cluster_ = std::move(*c);
  }
  JobInfo Submit(const JobSpec& spec) {
    auto job = cluster_->client().Submit(spec);
    EXPECT_TRUE(job.ok()) << job.status();
    return job.ok() ? *job : JobInfo();
  }
  JobInfo Wait(const std::string& id, absl::Duration timeout = absl::Seconds(30)) {
    auto job = cluster_->client().WaitJob(id, timeout);
    EXPECT_TRUE(job.ok()) << job.status() << "\n" << cluster_->DaemonLogs();
    return job.ok() ? *job : JobInfo();
  }
  // Waits until the job satisfies `pred`.
  JobInfo WaitUntil(const std::string& id, const std::function<bool(const JobInfo&)>& pred,
                    absl::Duration timeout = absl::Seconds(20)) {
    JobInfo last;
    bool ok = WaitFor(
        [&] {
          auto j = cluster_->client().GetJob(id);
          if (j.ok()) last = *j;
          return j.ok() && pred(*j);
        },
        timeout);
    EXPECT_TRUE(ok) << "job " << id << " never reached the expected state; last: "
                    << ToJson(last) << "\n" << cluster_->DaemonLogs();
    return last;
  }

  std::unique_ptr<TestCluster> cluster_;
};

TEST_F(ClusterTest, EachRankSeesTorchrunEnvironmentAndItsOwnGpus) {
  TestClusterOptions o;
  o.nodes = 2;
  o.gpus_per_node = 4;
  StartCluster(o);
  std::string out = Tmp("env");
  auto spec = ShellJob(absl::StrCat("env > ", out, "/rank$RANK.env"), 4, 2);
  spec.per_process.gpus = 1;
  spec.max_restarts = 3;
  auto job = Wait(Submit(spec).job_id);
  ASSERT_EQ(job.state, JobState::kSucceeded) << job.reason;
  std::set<std::string> node_gpu;
  std::set<std::string> master;
  for (int r = 0; r < 4; ++r) {
    auto env = ReadEnvFile(absl::StrCat(out, "/rank", r, ".env"));
    ASSERT_FALSE(env.empty()) << "rank " << r << " wrote nothing";
    EXPECT_EQ(env["RANK"], absl::StrCat(r));
    EXPECT_EQ(env["LOCAL_RANK"], absl::StrCat(r % 2));
    EXPECT_EQ(env["WORLD_SIZE"], "4");
    EXPECT_EQ(env["LOCAL_WORLD_SIZE"], "2");
    EXPECT_EQ(env["GROUP_RANK"], absl::StrCat(r / 2));
    EXPECT_EQ(env["TORCHELASTIC_RESTART_COUNT"], "0");
    EXPECT_EQ(env["TORCHELASTIC_MAX_RESTARTS"], "3");
    EXPECT_EQ(env["TORCHELASTIC_RUN_ID"], job.job_id);
    EXPECT_EQ(env["DROVER_JOB_ID"], job.job_id);
    EXPECT_EQ(env["DROVER_NODE_ID"], job.placement[r].node_id);
    EXPECT_FALSE(env["DROVER_SCHEDULER_ADDRESS"].empty());
    EXPECT_FALSE(env["DROVER_TOKEN_FILE"].empty());
    EXPECT_EQ(env["MASTER_ADDR"], job.placement[0].node_ip);
    EXPECT_NE(env["MASTER_PORT"], "0");
    master.insert(env["MASTER_ADDR"] + ":" + env["MASTER_PORT"]);
    ASSERT_EQ(env["CUDA_VISIBLE_DEVICES"].size(), 1u) << env["CUDA_VISIBLE_DEVICES"];
    node_gpu.insert(env["DROVER_NODE_ID"] + "/" + env["CUDA_VISIBLE_DEVICES"]);
  }
  EXPECT_EQ(master.size(), 1u) << "every rank must meet at the same MASTER_ADDR:PORT";
  EXPECT_EQ(node_gpu.size(), 4u) << "two ranks share a GPU";
  // The job had two nodes, two ranks each, in rank order.
  EXPECT_EQ(job.placement[0].node_id, job.placement[1].node_id);
  EXPECT_NE(job.placement[1].node_id, job.placement[2].node_id);
}

TEST_F(ClusterTest, GangIsAllOrNothingAndWaitingJobStartsWhenSpaceFrees) {
  TestClusterOptions o;
  o.nodes = 2;
  o.gpus_per_node = 2;
  StartCluster(o);
  std::string dir = Tmp("gang");
  // A holds every GPU until the release file appears.
  auto a = ShellJob(absl::StrCat("while [ ! -e ", dir, "/release ]; do sleep 0.02; done"), 4, 2);
  a.per_process.gpus = 1;
  auto job_a = Submit(a);
  WaitUntil(job_a.job_id, [](const auto& j) { return j.state == JobState::kRunning; });
  // B needs 2 GPUs on one node: nothing of it may start while A runs.
  auto b = ShellJob(absl::StrCat("touch ", dir, "/b-ran-$RANK"), 2, 2);
  b.per_process.gpus = 1;
  auto job_b = Submit(b);
  auto pending = WaitUntil(job_b.job_id, [](const auto& j) {
    return j.state == JobState::kPending &&
           absl::StrContains(j.reason, "needs 2 GPUs on one node");
  });
  EXPECT_EQ(pending.reason, "needs 2 GPUs on one node; the most free on any node is 0 GPUs");
  EXPECT_TRUE(pending.placement.empty());
  EXPECT_FALSE(access((dir + "/b-ran-0").c_str(), F_OK) == 0);
  std::ofstream(dir + "/release").put('x');
  auto done_a = Wait(job_a.job_id);
  EXPECT_EQ(done_a.state, JobState::kSucceeded) << done_a.reason;
  auto done_b = Wait(job_b.job_id);
  EXPECT_EQ(done_b.state, JobState::kSucceeded) << done_b.reason;
  EXPECT_TRUE(access((dir + "/b-ran-0").c_str(), F_OK) == 0);
  EXPECT_TRUE(access((dir + "/b-ran-1").c_str(), F_OK) == 0);
}

TEST_F(ClusterTest, OneRankFailingStopsTheRestAndReportsRootCause) {
  StartCluster();
  // Rank 3 fails; the others ignore SIGTERM and have children, so only SIGKILL of the
  // whole process group stops them.
  auto spec = ShellJob(
      "if [ \"$RANK\" = 3 ]; then echo preparing >&2; echo 'boom: CUDA out of memory' >&2; "
      "exit 3; fi; trap '' TERM; sleep 300 & sleep 300",
      4, 2);
  absl::Time start = absl::Now();
  auto job = Wait(Submit(spec).job_id);
  absl::Duration took = absl::Now() - start;
  EXPECT_EQ(job.state, JobState::kFailed);
  EXPECT_EQ(job.root_cause->rank, 3);
  EXPECT_EQ(job.root_cause->exit_code, 3);
  EXPECT_EQ(job.exit_code, 3);
  EXPECT_TRUE(absl::StrContains(job.reason, "rank 3 on node " + job.placement[3].node_id))
      << job.reason;
  EXPECT_TRUE(absl::StrContains(job.reason, "exited with code 3")) << job.reason;
  EXPECT_TRUE(absl::StrContains(job.reason, "boom: CUDA out of memory")) << job.reason;
  EXPECT_LT(took, absl::Seconds(10)) << "failure took " << took << " to surface";
  // The job's launchers are reaped; the children SIGKILLed with their process group
  // may take a moment more to be torn down and reaped by init.
  EXPECT_TRUE(WaitFor([&] { return ProcessesOfJob(job.job_id).empty(); }, absl::Seconds(2)));
}

TEST_F(ClusterTest, SignalDeathIsReportedBySignalName) {
  StartCluster();
  auto job =
      Wait(Submit(ShellJob("if [ $RANK = 1 ]; then kill -SEGV $$; fi; sleep 300", 2)).job_id);
  EXPECT_EQ(job.state, JobState::kFailed);
  EXPECT_EQ(job.root_cause->signal, SIGSEGV);
  EXPECT_EQ(job.exit_code, 128 + SIGSEGV);
  EXPECT_TRUE(absl::StrContains(job.reason, "killed by SIGSEGV")) << job.reason;
}

TEST_F(ClusterTest, CancelLeavesNoSurvivorOnAnyNode) {
  StartCluster();
  std::string dir = Tmp("cancel");
  auto spec = ShellJob(absl::StrCat("trap '' TERM; (trap '' TERM; sleep 300) & sleep 300 & "
                                    "touch ", dir, "/up-$RANK; wait"),
                       4, 2);
  auto job = Submit(spec);
  ASSERT_TRUE(WaitFor(
      [&] {
        for (int r = 0; r < 4; ++r) {
          if (access(absl::StrCat(dir, "/up-", r).c_str(), F_OK) != 0) return false;
        }
        return true;
      },
      absl::Seconds(20)));
  EXPECT_GE(ProcessesOfJob(job.job_id).size(), 12u);
  std::string out, err;
  int rc = cluster_->RunCli({"cancel", job.job_id}, &out, &err);
  EXPECT_EQ(rc, 0) << err;
  EXPECT_TRUE(absl::StrContains(out, job.job_id + " CANCELLED")) << out << err;
  // `drover cancel` returns once every launcher is reaped; members of the killed
  // process groups are gone within moments (reaped by init).
  EXPECT_TRUE(WaitFor([&] { return ProcessesOfJob(job.job_id).empty(); }, absl::Seconds(2)));
  auto info = cluster_->client().GetJob(job.job_id);
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->state, JobState::kCancelled);
  EXPECT_EQ(info->live_processes, 0);
  // Cancelling again is harmless.
  EXPECT_EQ(cluster_->RunCli({"cancel", job.job_id}, &out, &err), 0) << err;
}

TEST_F(ClusterTest, AgentKilledIsDeclaredDeadAndItsJobFails) {
  TestClusterOptions o;
  o.node_timeout_ms = 1500;
  StartCluster(o);
  std::string dir = Tmp("dead-agent");
  auto job = Submit(ShellJob(absl::StrCat("touch ", dir, "/up-$RANK; sleep 300"), 4, 2));
  // Every rank runs (so the kill below hits running work, not a launch in flight).
  ASSERT_TRUE(WaitFor(
      [&] {
        for (int r = 0; r < 4; ++r) {
          if (access(absl::StrCat(dir, "/up-", r).c_str(), F_OK) != 0) return false;
        }
        return true;
      },
      absl::Seconds(20)));
  auto running = WaitUntil(job.job_id, [](const auto& j) {
    return j.state == JobState::kRunning && j.master_port != 0;
  });
  // Which agent hosts rank 2? Kill that one.
  int victim = cluster_->agent_node_id(0) == running.placement[2].node_id ? 0 : 1;
  ASSERT_EQ(cluster_->agent_node_id(victim), running.placement[2].node_id);
  absl::Time killed = absl::Now();
  cluster_->SignalAgent(victim, SIGKILL);
  auto failed = Wait(job.job_id);
  EXPECT_LT(absl::Now() - killed, absl::Seconds(8));
  EXPECT_EQ(failed.state, JobState::kFailed);
  EXPECT_TRUE(absl::StrContains(failed.reason, "declared dead")) << failed.reason;
  EXPECT_TRUE(absl::StrContains(failed.reason, running.placement[2].node_id)) << failed.reason;
  // The dead agent's workers die with it (no orphans), the others were stopped.
  EXPECT_TRUE(WaitFor([&] { return ProcessesOfJob(job.job_id).empty(); },
                                   absl::Seconds(10)));
  auto after = cluster_->client().Status();
  ASSERT_TRUE(after.ok());
  for (const auto& n : after->nodes) {
    EXPECT_EQ(n.state, n.node_id == running.placement[2].node_id ? NodeState::kDead
                                                                 : NodeState::kAlive)
        << n.node_id;
  }
}

// Failure detection (docs/architecture.md, "Failure detection"), on the scheduler's
// default timing unless a test says otherwise.
class FailureDetectionTest : public ClusterTest {
 protected:
  static TestClusterOptions Defaults() {
    TestClusterOptions o;
    o.node_timeout_ms = 10000;
    o.heartbeat_ms = 500;
    return o;
  }

  // Starts a cluster and a job of `nproc` processes (`ppn` per node) that write their
  // pid to <dir_>/up-<rank> and sleep; returns it once every rank runs and the
  // scheduler has every start's answer (so a kill hits running work, not a launch in
  // flight: a process can write its file before its agent's answer arrives).
  JobInfo StartRunning(const TestClusterOptions& o, int nproc, int ppn) {
    StartCluster(o);
    static int n = 0;  // a directory per call: tests may run repeatedly (--gtest_repeat)
    dir_ = Tmp(absl::StrCat("failure-detection-", n++));
    auto job = Submit(ShellJob(absl::StrCat("echo $$ > ", dir_, "/up-$RANK.tmp; mv ", dir_,
                                            "/up-$RANK.tmp ", dir_, "/up-$RANK; exec sleep 300"),
                               nproc, ppn));
    EXPECT_TRUE(WaitFor(
        [&] {
          for (int r = 0; r < nproc; ++r) {
            if (access(absl::StrCat(dir_, "/up-", r).c_str(), F_OK) != 0) return false;
          }
          return true;
        },
        absl::Seconds(20)));
    return WaitUntil(job.job_id, [nproc](const auto& j) {
      return j.state == JobState::kRunning && j.started_processes == nproc;
    });
  }
  // The pid of a rank of the StartRunning job.
  pid_t PidOf(int rank) {
    return std::atoi(ReadFile(absl::StrCat(dir_, "/up-", rank)).value_or("0").c_str());
  }
  // Which agent runs `node_id`.
  int AgentOf(const std::string& node_id) {
    return cluster_->agent_node_id(0) == node_id ? 0 : 1;
  }
  bool AllAlive() {
    auto s = cluster_->client().Status();
    if (!s.ok()) return false;
    for (const auto& n : s->nodes) {
      if (n.state != NodeState::kAlive) return false;
    }
    return true;
  }

  std::string dir_;
};

// The kernel closes a SIGKILLed agent's connection, its session with the scheduler
// ends, and its node is declared dead once the session grace (1 s) has passed, not
// after the node timeout (10 s, the default, here).
TEST_F(FailureDetectionTest, KilledAgentIsNoticedThroughItsClosedConnection) {
  auto running = StartRunning(Defaults(), 4, 2);
  const std::string victim_node = running.placement[2].node_id;
  const absl::Time killed = absl::Now();
  cluster_->SignalAgent(AgentOf(victim_node), SIGKILL);
  auto failed = Wait(running.job_id);
  const absl::Duration took = absl::Now() - killed;
  std::cout << "FIGURE agent_sigkill_to_job_failed_ms " << absl::ToInt64Milliseconds(took)
            << std::endl;
  EXPECT_EQ(failed.state, JobState::kFailed);
  EXPECT_LT(took, absl::Milliseconds(2500)) << failed.reason << "\n" << cluster_->DaemonLogs();
  EXPECT_TRUE(absl::StrContains(failed.reason, "on node " + victim_node)) << failed.reason;
  EXPECT_TRUE(absl::StrContains(failed.reason, "the agent process exited or was killed"))
      << failed.reason;
  auto after = cluster_->client().Status();
  ASSERT_TRUE(after.ok());
  for (const auto& n : after->nodes) {
    EXPECT_EQ(n.state, n.node_id == victim_node ? NodeState::kDead : NodeState::kAlive)
        << n.node_id;
  }
}

// A worker's death travels drover-launch -> agent -> ReportExit at once: no heartbeat
// (500 ms here) is waited for.
TEST_F(FailureDetectionTest, KilledWorkerFailsItsJobAtOnce) {
  auto running = StartRunning(Defaults(), 2, 1);
  const pid_t worker = PidOf(1);
  ASSERT_GT(worker, 0);
  const absl::Time killed = absl::Now();
  ASSERT_EQ(::kill(worker, SIGKILL), 0);
  auto failed = Wait(running.job_id);
  const absl::Duration took = absl::Now() - killed;
  std::cout << "FIGURE worker_sigkill_to_job_failed_ms " << absl::ToInt64Milliseconds(took)
            << std::endl;
  EXPECT_EQ(failed.state, JobState::kFailed);
  EXPECT_TRUE(absl::StrContains(failed.reason, "rank 1 on node")) << failed.reason;
  EXPECT_TRUE(absl::StrContains(failed.reason, "killed by SIGKILL")) << failed.reason;
  EXPECT_LT(took, absl::Milliseconds(500)) << failed.reason;
}

// A machine that vanishes without closing anything (here: an agent stopped with
// SIGSTOP, whose connection stays open) is still found by its missed heartbeats, and
// its agent, back, registers again.
TEST_F(FailureDetectionTest, StoppedAgentIsFoundByMissedHeartbeats) {
  TestClusterOptions o;
  o.node_timeout_ms = 1500;
  auto running = StartRunning(o, 2, 1);
  const std::string victim_node = running.placement[1].node_id;
  const int victim = AgentOf(victim_node);
  cluster_->SignalAgent(victim, SIGSTOP);
  auto failed = Wait(running.job_id);
  // No lower bound on the time: the node timeout runs from the agent's last heartbeat,
  // before the SIGSTOP (1.488 s after it was measured under load). The reason below
  // says the heartbeats were what found it.
  EXPECT_EQ(failed.state, JobState::kFailed);
  EXPECT_TRUE(absl::StrContains(failed.reason, "no heartbeat from " + victim_node))
      << failed.reason;
  cluster_->SignalAgent(victim, SIGCONT);
  EXPECT_TRUE(WaitFor([&] { return AllAlive(); }, absl::Seconds(15))) << cluster_->DaemonLogs();
}

// A scheduler stopped cleanly and started again (state in Redis) ends the agents'
// sessions without taking that for their death; the agents open new ones, so a kill
// after the restart is noticed as fast as before it.
TEST_F(FailureDetectionTest, RestartedSchedulerKeepsItsNodesAndNoticesAKillAfter) {
  TestClusterOptions o = Defaults();
  o.redis = true;
  auto running = StartRunning(o, 2, 1);
  ASSERT_TRUE(cluster_->RestartScheduler(SIGTERM).ok()) << cluster_->DaemonLogs();
  ASSERT_TRUE(WaitFor([&] { return AllAlive(); }, absl::Seconds(15))) << cluster_->DaemonLogs();
  // Well past the session grace: nothing was declared dead.
  EXPECT_FALSE(WaitFor(
      [&] {
        auto j = cluster_->client().GetJob(running.job_id);
        return !AllAlive() || !j.ok() || j->state != JobState::kRunning;
      },
      absl::Seconds(3)))
      << cluster_->DaemonLogs();
  const absl::Time killed = absl::Now();
  cluster_->SignalAgent(AgentOf(running.placement[1].node_id), SIGKILL);
  auto failed = Wait(running.job_id);
  EXPECT_LT(absl::Now() - killed, absl::Milliseconds(2500)) << failed.reason;
  EXPECT_TRUE(absl::StrContains(failed.reason, "the agent process exited or was killed"))
      << failed.reason;
}

// The last read of a node's output (`drover logs`, and `drover run` once its job has
// ended) waits for an agent that does not answer (stalled here, or killed and starting
// again) and resumes, instead of failing after one 30 s call and losing its lines.
TEST_F(FailureDetectionTest, LastReadOfOutputWaitsForAnAgentThatDoesNotAnswer) {
  StartCluster(Defaults());
  dir_ = Tmp("last-read-waits");
  auto done = Wait(Submit(ShellJob("echo first; echo last", 1)).job_id);
  ASSERT_EQ(done.state, JobState::kSucceeded) << done.reason;
  const int agent = AgentOf(done.placement[0].node_id);
  cluster_->SignalAgent(agent, SIGSTOP);
  const std::string base = dir_ + "/logs";
  const pid_t logs = StartDriver(*cluster_, "cli/drover", {"logs", done.job_id}, base);
  ASSERT_GT(logs, 0);
  const bool noted = WaitFor(
      [&] { return absl::StrContains(ReadDriverOutput(base).err, "waiting up to"); },
      absl::Seconds(20));
  cluster_->SignalAgent(agent, SIGCONT);
  ASSERT_TRUE(noted) << ReadDriverOutput(base).All();
  DriverRun r = FinishDriver(*cluster_, logs, base, absl::Seconds(60));
  EXPECT_EQ(r.code, 0) << r.All();
  EXPECT_TRUE(absl::StrContains(r.out, "first\n")) << r.All();
  EXPECT_TRUE(absl::StrContains(r.out, "last\n")) << r.All();
}

// `drover run` of a 2-node job whose agent on one node is SIGKILLed: the job fails at
// once (the closed connection), and `drover run` says so - FAILED, the root cause -
// and exits with the job's code within 2 s of the end, naming the node whose output it
// could not read after the reason (it used to wait ~15 s and print only "logs from
// node agent ...: Deadline Exceeded").
TEST_F(FailureDetectionTest, RunWhoseAgentIsKilledSaysWhyItsJobFailed) {
  StartCluster(Defaults());
  dir_ = Tmp("run-agent-killed");
  const std::string base = dir_ + "/run";
  const pid_t run = StartDriver(
      *cluster_, "cli/drover",
      {"run", "--nodes", "2", "--nproc-per-node", "1", "--", "/bin/sh", "-c",
       absl::StrCat("echo hello-$RANK; echo $$ > ", dir_, "/up-$RANK.tmp; mv ", dir_,
                    "/up-$RANK.tmp ", dir_, "/up-$RANK; exec sleep 300")},
      base);
  ASSERT_GT(run, 0);
  ASSERT_TRUE(WaitFor(
      [&] {
        return access((dir_ + "/up-0").c_str(), F_OK) == 0 &&
               access((dir_ + "/up-1").c_str(), F_OK) == 0;
      },
      absl::Seconds(30)))
      << ReadDriverOutput(base).All() << cluster_->DaemonLogs();
  auto jobs = cluster_->client().ListJobs();
  ASSERT_TRUE(jobs.ok() && jobs->size() == 1) << jobs.status();
  const JobInfo running =
      WaitUntil(jobs->front().job_id, [](const JobInfo& j) { return j.state == JobState::kRunning; });
  ASSERT_EQ(running.placement.size(), 2u);
  const std::string victim_node = running.placement[1].node_id;
  cluster_->SignalAgent(AgentOf(victim_node), SIGKILL);
  const JobInfo failed = Wait(running.job_id);
  ASSERT_EQ(failed.state, JobState::kFailed) << failed.reason;
  ASSERT_TRUE(failed.end_time.has_value());
  DriverRun r = FinishDriver(*cluster_, run, base, absl::Seconds(60));
  const absl::Duration after_end = absl::Now() - *failed.end_time;
  std::cout << "FIGURE run_exit_after_job_end_ms " << absl::ToInt64Milliseconds(after_end)
            << std::endl;
  EXPECT_EQ(r.code, failed.exit_code & 0xff) << r.All();
  // Within 2 s of the end; the slack is for a loaded CI machine (it was ~15 s).
  EXPECT_LT(after_end, absl::Seconds(4)) << r.All();
  const size_t outcome = r.err.find(running.job_id + " FAILED: ");
  ASSERT_NE(outcome, std::string::npos) << r.All();
  EXPECT_NE(r.err.find("the agent process exited or was killed", outcome), std::string::npos)
      << r.All();
  // What it could not read is named after the reason.
  const size_t unread = r.err.find("processes on " + victim_node + " is not shown");
  EXPECT_NE(unread, std::string::npos) << r.All();
  EXPECT_GT(unread, outcome) << r.All();
  EXPECT_TRUE(absl::StrContains(r.out, "[rank0]: hello-0")) << r.All();
}

TEST_F(ClusterTest, GangRestartsWithRestartCountUntilItSucceeds) {
  StartCluster();
  auto spec = ShellJob(
      "if [ $RANK = 1 ] && [ $TORCHELASTIC_RESTART_COUNT -lt 2 ]; then exit 5; fi; "
      "echo gen=$TORCHELASTIC_RESTART_COUNT",
      2, 1);
  spec.max_restarts = 3;
  auto job = Wait(Submit(spec).job_id);
  EXPECT_EQ(job.state, JobState::kSucceeded) << job.reason;
  EXPECT_EQ(job.restart_count, 2);
  std::string out, err;
  EXPECT_EQ(cluster_->RunCli({"logs", job.job_id}, &out, &err), 0) << err;
  EXPECT_TRUE(absl::StrContains(out, "[rank0]: gen=2")) << out;

  spec.max_restarts = 1;
  auto exhausted = Wait(Submit(spec).job_id);
  EXPECT_EQ(exhausted.state, JobState::kFailed);
  EXPECT_EQ(exhausted.restart_count, 1);
  EXPECT_EQ(exhausted.exit_code, 5);
}

// Output stays where it was written: `drover logs` of a job whose restarted gang ran on
// another node shows both generations.
TEST_F(ClusterTest, LogsShowEveryGenerationOnWhicheverNodeItRan) {
  StartCluster();  // two nodes of 8 CPUs
  std::string dir = Tmp("moved");
  // `other` takes 4 CPUs of the first node until released, so the job starts on the
  // second (more free); once both are empty, generation 1 goes to the first.
  auto other = Submit(
      ShellJob(absl::StrCat("while [ ! -e ", dir, "/release ]; do sleep 0.02; done"), 4));
  WaitUntil(other.job_id, [](const auto& j) { return j.state == JobState::kRunning; });
  auto spec = ShellJob(
      absl::StrCat("echo gen=$TORCHELASTIC_RESTART_COUNT on $DROVER_NODE_ID; ",
                   "if [ $TORCHELASTIC_RESTART_COUNT = 0 ]; then ",
                   "while [ ! -e ", dir, "/fail ]; do sleep 0.02; done; exit 4; fi"),
      1);
  spec.max_restarts = 1;
  auto job = Submit(spec);
  auto first = WaitUntil(job.job_id, [](const auto& j) { return j.state == JobState::kRunning; });
  const std::string node0 = first.placement[0].node_id;
  auto other_now = cluster_->client().GetJob(other.job_id);
  ASSERT_TRUE(other_now.ok()) << other_now.status();
  ASSERT_NE(node0, other_now->placement[0].node_id);
  std::ofstream(dir + "/release").put('x');
  const JobInfo other_done = Wait(other.job_id);
  EXPECT_EQ(other_done.state, JobState::kSucceeded) << other_done.reason;
  std::ofstream(dir + "/fail").put('x');
  auto done = Wait(job.job_id);
  ASSERT_EQ(done.state, JobState::kSucceeded) << done.reason;
  ASSERT_EQ(done.restart_count, 1);
  const std::string node1 = done.placement[0].node_id;
  ASSERT_NE(node0, node1) << "the restarted gang did not move; the test shows nothing";
  std::string out, err;
  EXPECT_EQ(cluster_->RunCli({"logs", job.job_id}, &out, &err), 0) << err;
  EXPECT_TRUE(absl::StrContains(out, "[rank0]: gen=0 on " + node0)) << out;
  EXPECT_TRUE(absl::StrContains(out, "[rank0]: gen=1 on " + node1)) << out;
}

TEST_F(ClusterTest, RunPastItsTimeLimitIsStoppedAndExitsWith124) {
  StartCluster();
  std::string out, err;
  absl::Time start = absl::Now();
  int rc = cluster_->RunCli({"run", "--nproc", "2", "--time-limit", "500ms", "--", "sleep",
                             "300"},
                            &out, &err);
  EXPECT_EQ(rc, 124) << out << err;
  EXPECT_TRUE(absl::StrContains(err, "time limit of 500ms")) << err;
  EXPECT_LT(absl::Now() - start, absl::Seconds(20));
  auto jobs = cluster_->client().ListJobs();
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  ASSERT_FALSE(jobs->empty());
  EXPECT_TRUE(WaitFor([&] { return ProcessesOfJob(jobs->front().job_id).empty(); }));
}

TEST_F(ClusterTest, RunStreamsRankPrefixedOutputAndExitsWithJobCode) {
  StartCluster();
  std::string out, err;
  int rc = cluster_->RunCli({"run", "--nproc", "2", "--", "sh", "-c",
                             "echo hello from $RANK; echo warn $RANK >&2"},
                            &out, &err);
  EXPECT_EQ(rc, 0) << err;
  EXPECT_TRUE(absl::StrContains(out, "[rank0]: hello from 0\n")) << out;
  EXPECT_TRUE(absl::StrContains(out, "[rank1]: hello from 1\n")) << out;
  EXPECT_TRUE(absl::StrContains(err, "[rank1]: warn 1\n")) << err;
  rc = cluster_->RunCli(
      {"run", "--nodes", "2", "--", "sh", "-c", "if [ $RANK = 1 ]; then exit 7; fi; sleep 300"},
      &out, &err);
  EXPECT_EQ(rc, 7) << err;
  EXPECT_TRUE(absl::StrContains(err, "FAILED")) << err;
  EXPECT_TRUE(absl::StrContains(err, "exited with code")) << err;
}

TEST_F(ClusterTest, StatusJobsAndJsonOutput) {
  TestClusterOptions o;
  o.gpus_per_node = 2;
  StartCluster(o);
  auto job = Wait(Submit(ShellJob("true", 1)).job_id);
  std::string out, err;
  ASSERT_EQ(cluster_->RunCli({"status"}, &out, &err), 0) << err;
  EXPECT_TRUE(absl::StrContains(out, "node-1")) << out;
  EXPECT_TRUE(absl::StrContains(out, "ALIVE")) << out;
  EXPECT_TRUE(absl::StrContains(out, "2/2")) << out;  // GPUs free/total
  ASSERT_EQ(cluster_->RunCli({"status", "--json"}, &out, &err), 0) << err;
  EXPECT_TRUE(absl::StrContains(out, "\"nodes\"")) << out;
  ASSERT_EQ(cluster_->RunCli({"jobs"}, &out, &err), 0) << err;
  EXPECT_TRUE(absl::StrContains(out, job.job_id)) << out;
  EXPECT_TRUE(absl::StrContains(out, "SUCCEEDED")) << out;
  ASSERT_EQ(cluster_->RunCli({"jobs", "--json"}, &out, &err), 0) << err;
  EXPECT_TRUE(absl::StrContains(out, "\"state\": \"SUCCEEDED\"")) << out;
  ASSERT_EQ(cluster_->RunCli({"submit", "--", "true"}, &out, &err), 0) << err;
  EXPECT_TRUE(absl::StartsWith(out, "job-")) << out;
}

TEST_F(ClusterTest, RequestsWithoutTheTokenAreRefused) {
  StartCluster();
  auto scheduler = proto::Scheduler::NewStub(MakeChannel(cluster_->address()));
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    proto::GetClusterStatusReply reply;
    auto s = scheduler->GetClusterStatus(&ctx, {}, &reply);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED) << s.error_message();
  }
  {
    grpc::ClientContext ctx;
    PrepareContext(&ctx, "not-the-token");
    proto::SubmitJobRequest req;
    *req.mutable_spec() = internal::ToProto(ShellJob("true", 1));
    proto::SubmitJobReply reply;
    auto s = scheduler->SubmitJob(&ctx, req, &reply);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED) << s.error_message();
  }
  auto status = cluster_->client().Status();
  ASSERT_TRUE(status.ok());
  auto agent = proto::NodeAgent::NewStub(MakeChannel(status->nodes[0].agent_address));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  proto::StartProcessesRequest req;
  req.set_job_id("job-evil");
  req.add_command("/bin/true");
  proto::StartProcessesReply reply;
  auto s = agent->StartProcesses(&ctx, req, &reply);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED) << s.error_message();
  // No job was created by the refused submit.
  auto jobs = cluster_->client().ListJobs();
  ASSERT_TRUE(jobs.ok());
  EXPECT_TRUE(jobs->empty());
  // The token file is owner-only.
  struct stat st;
  ASSERT_EQ(stat(cluster_->token_file().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 077, 0u);
}

TEST_F(ClusterTest, BadInputGetsClearErrorsAndNothingCrashes) {
  TestClusterOptions o;
  o.gpus_per_node = 2;
  StartCluster(o);
  std::string out, err;
  // Zero processes, from the CLI and from a raw request.
  EXPECT_EQ(cluster_->RunCli({"submit", "--nproc", "0", "--", "true"}, &out, &err), 2);
  EXPECT_TRUE(absl::StrContains(err, "at least 1")) << err;
  auto zero = cluster_->client().Submit(ShellJob("true", 0));
  EXPECT_EQ(zero.status().code(), absl::StatusCode::kInvalidArgument);
  // No command.
  EXPECT_EQ(cluster_->RunCli({"submit", "--nproc", "1"}, &out, &err), 2);
  EXPECT_TRUE(absl::StrContains(err, "no command")) << err;
  // More GPUs than any node has.
  EXPECT_NE(cluster_->RunCli({"submit", "--gpus-per-proc", "3", "--", "true"}, &out, &err), 0);
  EXPECT_TRUE(absl::StrContains(err, "can never run on this cluster: needs 3 GPUs on one node"))
      << err;
  // Unknown job, for every command that takes one.
  for (const char* cmd : {"logs", "cancel", "job"}) {
    EXPECT_EQ(cluster_->RunCli({cmd, "job-999"}, &out, &err), 1) << cmd;
    EXPECT_TRUE(absl::StrContains(err, "no job 'job-999'")) << cmd << ": " << err;
  }
  // A command that does not exist: the job fails and says so.
  auto missing = Wait(Submit(ShellJob("true", 1)).job_id);
  JobSpec nosuch = ShellJob("", 1);
  nosuch.command.clear();
  nosuch.command.push_back("drover-no-such-command");
  auto j = Wait(Submit(nosuch).job_id);
  EXPECT_EQ(j.state, JobState::kFailed);
  EXPECT_EQ(j.exit_code, 127);
  EXPECT_TRUE(absl::StrContains(j.reason, "drover-no-such-command")) << j.reason;
  // Malformed requests from a client that skips the CLI.
  auto scheduler = proto::Scheduler::NewStub(MakeChannel(cluster_->address()));
  std::string token = std::string(absl::StripAsciiWhitespace(*ReadFile(cluster_->token_file())));
  {
    grpc::ClientContext ctx;
    PrepareContext(&ctx, token);
    proto::RegisterNodeRequest req;  // no address
    req.mutable_total()->set_gpus(-4);
    proto::RegisterNodeReply reply;
    EXPECT_EQ(scheduler->RegisterNode(&ctx, req, &reply).error_code(),
              grpc::StatusCode::INVALID_ARGUMENT);
  }
  {
    grpc::ClientContext ctx;
    PrepareContext(&ctx, token);
    proto::HeartbeatRequest req;
    req.set_node_id("node-404");
    auto* p = req.add_processes();
    p->set_job_id(missing.job_id);
    p->set_rank(77);
    proto::HeartbeatReply reply;
    EXPECT_TRUE(scheduler->Heartbeat(&ctx, req, &reply).ok());
    EXPECT_FALSE(reply.known());
  }
  {
    grpc::ClientContext ctx;
    PrepareContext(&ctx, token);
    proto::ReportExitRequest req;
    req.set_node_id("node-1");
    req.set_job_id(missing.job_id);
    req.mutable_exit()->set_rank(12345);
    req.mutable_exit()->set_exit_code(9);
    req.add_exits()->set_job_id("job-999");
    proto::ReportExitReply reply;
    EXPECT_TRUE(scheduler->ReportExit(&ctx, req, &reply).ok());
  }
  for (bool entry : {false, true}) {
    grpc::ClientContext ctx;
    PrepareContext(&ctx, token);
    proto::ReportExitRequest req;  // no job_id, and no exits or one without a job id
    req.set_node_id("node-1");
    if (entry) req.add_exits()->mutable_exit()->set_rank(3);
    proto::ReportExitReply reply;
    auto s = scheduler->ReportExit(&ctx, req, &reply);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << entry;
    EXPECT_TRUE(absl::StrContains(s.error_message(), entry ? "has no job_id" : "needs node_id"))
        << s.error_message();
  }
  {
    grpc::ClientContext ctx;
    PrepareContext(&ctx, token);
    proto::SubmitJobRequest req;
    *req.mutable_spec() = internal::ToProto(ShellJob("true", 4, 3));  // not a multiple
    proto::SubmitJobReply reply;
    auto s = scheduler->SubmitJob(&ctx, req, &reply);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_TRUE(absl::StrContains(s.error_message(), "not a multiple")) << s.error_message();
  }
  auto status = cluster_->client().Status();
  ASSERT_TRUE(status.ok());
  auto agent = proto::NodeAgent::NewStub(MakeChannel(status->nodes[0].agent_address));
  {
    grpc::ClientContext ctx;
    PrepareContext(&ctx, token);
    proto::StartProcessesRequest req;
    req.set_job_id("job-x");
    req.add_command("/bin/true");
    req.set_world_size(1);
    req.add_processes()->set_rank(5);  // outside [0, world_size)
    proto::StartProcessesReply reply;
    auto s = agent->StartProcesses(&ctx, req, &reply);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
  }
  // The earlier job record is intact and both daemons still serve.
  auto again = cluster_->client().GetJob(missing.job_id);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->state, JobState::kSucceeded);
  auto ok_job = Wait(Submit(ShellJob("true", 2)).job_id);
  EXPECT_EQ(ok_job.state, JobState::kSucceeded) << ok_job.reason;
}

// Issue 13: `drover run --nproc -1 -- /bin/true` and `drover run --nodes 0 -- /bin/true`
// were accepted and succeeded (-1 and 0 stood for "not given"), and CLI11's own errors
// exited with 105 and the like while the CLI's other usage errors exited with 2. Every
// number out of its range is refused with a message naming the flag, submits nothing,
// and every usage error exits with 2.
// Bytes that are not UTF-8 in a command's arguments are refused before anything is
// sent, naming the argument (they gave a libprotobuf error and an empty "drover: "
// line), and the scheduler goes on.
TEST_F(ClusterTest, NonUtf8ArgumentsAreRefusedNamingTheArgument) {
  StartCluster();
  std::string out, err;
  int rc = cluster_->RunCli({"submit", "--", "/bin/echo", "ok", "caf\xe9"}, &out, &err);
  EXPECT_EQ(rc, 2) << out << err;
  EXPECT_TRUE(absl::StrContains(err, "argument 2 of the command \"caf\\xe9\" is not valid UTF-8"))
      << err;
  EXPECT_FALSE(absl::StrContains(err, "libprotobuf")) << err;
  EXPECT_FALSE(absl::StrContains(err, "drover: \n")) << err;
  auto jobs = cluster_->client().ListJobs();
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  EXPECT_TRUE(jobs->empty());
  // Valid UTF-8 beyond ASCII runs as given.
  rc = cluster_->RunCli({"run", "--", "/bin/echo", "caf\xc3\xa9"}, &out, &err);
  EXPECT_EQ(rc, 0) << err;
  EXPECT_TRUE(absl::StrContains(out, "caf\xc3\xa9\n")) << out;
}

TEST_F(ClusterTest, OutOfRangeNumbersAreUsageErrorsThatSubmitNothing) {
  StartCluster();
  struct Case {
    std::vector<std::string> args;
    std::string message;
  };
  const std::vector<Case> cases = {
      {{"run", "--nproc", "-1", "--", "/bin/true"}, "--nproc -1: a job needs at least 1"},
      {{"run", "--nodes", "0", "--", "/bin/true"}, "--nodes 0: a job runs on at least 1 node"},
      {{"submit", "--nproc-per-node", "0", "--", "/bin/true"}, "--nproc-per-node 0"},
      {{"run", "--gpus-per-proc", "-1", "--", "/bin/true"}, "--gpus-per-proc -1"},
      {{"run", "--cpus-per-proc", "-0.5", "--", "/bin/true"}, "--cpus-per-proc -0.5"},
      {{"run", "--max-restarts", "-2", "--", "/bin/true"}, "--max-restarts -2"},
      {{"run", "--time-limit", "0s", "--", "/bin/true"}, "--time-limit '0s'"},
      {{"submit", "--memory-per-proc", "-1G", "--", "/bin/true"}, "'-1G'"},
      {{"submit", "--resource", "ssd=-1", "--", "/bin/true"}, "--resource -1"},
      // CLI11's own errors: a value that is no number, a value outside a set, an
      // unknown flag, no subcommand.
      {{"run", "--nproc", "two", "--", "/bin/true"}, "--nproc"},
      {{"run", "--strategy", "random", "--", "/bin/true"}, "--strategy"},
      {{"run", "--no-such-flag", "--", "/bin/true"}, "--no-such-flag"},
      {{}, "subcommand"},
      // The other commands' numbers.
      {{"up", "--nodes", "0"}, "--nodes"},
      {{"up", "--gpus-per-node", "-2"}, "--gpus-per-node"},
      {{"up", "--cpus-per-node", "-1"}, "--cpus-per-node"},
      {{"up", "--port", "70000"}, "--port"},
      {{"up", "--node-timeout-ms", "0"}, "--node-timeout-ms"},
      {{"up", "--kill-grace-ms", "-5"}, "--kill-grace-ms"},
      {{"up", "--timeout", "0"}, "--timeout"},
      {{"up", "--memory-per-node", "lots"}, "--memory-per-node: cannot read 'lots'"},
      {{"start", "--num-gpus", "-3", "--head"}, "--num-gpus"},
      {{"start", "--num-cpus", "0", "--head"}, "--num-cpus"},
      {{"start", "--port", "-1", "--head"}, "--port"},
  };
  for (const Case& c : cases) {
    std::string out, err;
    EXPECT_EQ(cluster_->RunCli(c.args, &out, &err), 2) << absl::StrJoin(c.args, " ") << "\n"
                                                       << out << err;
    EXPECT_TRUE(absl::StrContains(err, c.message))
        << absl::StrJoin(c.args, " ") << ": " << err;
  }
  auto jobs = cluster_->client().ListJobs();
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  EXPECT_TRUE(jobs->empty()) << jobs->size() << " jobs were submitted, the first "
                             << ToJson(jobs->front());
  // The smallest values in range still run.
  std::string out, err;
  EXPECT_EQ(cluster_->RunCli({"run", "--nproc", "1", "--nodes", "1", "--max-restarts", "0",
                              "--gpus-per-proc", "0", "--", "/bin/true"},
                             &out, &err),
            0)
      << err;
}

TEST_F(ClusterTest, SchedulerRestartedOnRedisKeepsEveryJobAndReattaches) {
  TestClusterOptions o;
  o.redis = true;
  o.gpus_per_node = 1;
  StartCluster(o);
  std::string dir = Tmp("redis-restart");
  auto done = Wait(Submit(ShellJob("true", 1)).job_id);
  ASSERT_EQ(done.state, JobState::kSucceeded);
  auto failed = Wait(Submit(ShellJob("exit 4", 1)).job_id);
  ASSERT_EQ(failed.state, JobState::kFailed);
  auto hold = ShellJob(absl::StrCat("echo $$ > ", dir, "/pid-$RANK; while [ ! -e ", dir,
                                    "/release ]; do sleep 0.02; done"),
                       2, 1);
  hold.per_process.gpus = 1;
  auto running = Submit(hold);
  WaitUntil(running.job_id, [](const auto& j) { return j.state == JobState::kRunning; });
  auto waiting_spec = ShellJob("echo waited", 1);
  waiting_spec.per_process.gpus = 1;
  auto waiting = Submit(waiting_spec);
  WaitUntil(waiting.job_id, [](const auto& j) {
    return j.state == JobState::kPending && absl::StrContains(j.reason, "GPU");
  });
  // The two shells of the running job, by the pids they wrote.
  std::vector<pid_t> shells;
  ASSERT_TRUE(WaitFor(
      [&] {
        shells.clear();
        for (int r = 0; r < 2; ++r) {
          auto t = ReadFile(absl::StrCat(dir, "/pid-", r));
          if (t.ok() && !t->empty() && t->back() == '\n') shells.push_back(std::atoi(t->c_str()));
        }
        return shells.size() == 2;
      },
      absl::Seconds(10)));

  ASSERT_TRUE(cluster_->RestartScheduler().ok()) << cluster_->DaemonLogs();
  auto jobs = cluster_->client().ListJobs();
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  std::map<std::string, JobState> states;
  for (const auto& j : *jobs) states[j.job_id] = j.state;
  EXPECT_EQ(states.size(), 4u);
  EXPECT_EQ(states[done.job_id], JobState::kSucceeded);
  EXPECT_EQ(states[failed.job_id], JobState::kFailed);
  EXPECT_EQ(states[running.job_id], JobState::kRunning);
  EXPECT_EQ(states[waiting.job_id], JobState::kPending);
  // Agents re-register; the running job's processes are the same ones, still running.
  ASSERT_TRUE(WaitFor(
      [&] {
        auto s = cluster_->client().Status();
        if (!s.ok()) return false;
        int alive = 0;
        for (const auto& n : s->nodes) alive += n.state == NodeState::kAlive;
        return alive == 2;
      },
      absl::Seconds(15)));
  auto now_running = ProcessesOfJob(running.job_id);
  for (pid_t p : shells) {
    EXPECT_NE(std::find(now_running.begin(), now_running.end(), p), now_running.end())
        << "process " << p << " of the running job did not survive the scheduler restart";
  }
  std::ofstream(dir + "/release").put('x');
  auto finished = Wait(running.job_id);
  EXPECT_EQ(finished.state, JobState::kSucceeded) << finished.reason;
  auto then = Wait(waiting.job_id);
  EXPECT_EQ(then.state, JobState::kSucceeded) << then.reason;
}

// Jobs placed in one queue pass on one node start through one StartProcessesBatch
// call, and exits that come together reach the scheduler in one ReportExit: each job
// still gets its own start, output, exit code and reason.
// A submit's request id (`--request-id`, the SDK's idempotency key) makes one job, however
// often the submit is sent: a second submit with it answers the first job, also after a
// scheduler restart (the id is saved with the job in Redis), and the job runs once.
TEST_F(ClusterTest, SubmitsWithTheSameRequestIdMakeOneJobAcrossSchedulerRestarts) {
  TestClusterOptions o;
  o.redis = true;
  StartCluster(o);
  const std::string dir = Tmp("request-id");
  const std::vector<std::string> submit = {
      "submit", "--request-id", "nightly-42", "--", "/bin/sh", "-c",
      absl::StrCat("echo ran >> ", dir, "/runs")};
  std::string first, second, err;
  ASSERT_EQ(cluster_->RunCli(submit, &first, &err), 0) << err;
  ASSERT_EQ(cluster_->RunCli(submit, &second, &err), 0) << err;
  const std::string id(absl::StripAsciiWhitespace(first));
  EXPECT_EQ(second, first);
  EXPECT_EQ(Wait(id).state, JobState::kSucceeded);
  ASSERT_TRUE(cluster_->RestartScheduler(SIGKILL).ok()) << cluster_->DaemonLogs();
  std::string third;
  ASSERT_EQ(cluster_->RunCli(submit, &third, &err), 0) << err << cluster_->DaemonLogs();
  EXPECT_EQ(third, first);
  EXPECT_EQ(Wait(id).state, JobState::kSucceeded);
  auto jobs = cluster_->client().ListJobs();
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  EXPECT_EQ(jobs->size(), 1u);
  EXPECT_EQ(ReadFile(dir + "/runs").value_or(""), "ran\n");
}

// Redis stalls while a job is submitted: the job is made and runs, but its record
// cannot be saved. The answer says that it stands and how to retry without running it
// twice (it used to say "retry the call", and a retry made a second job); the retry
// with the same request id answers the same job, which runs once.
TEST_F(ClusterTest, SubmitWhileRedisStallsSaysTheJobStandsAndARetryReturnsIt) {
  TestClusterOptions o;
  o.redis = true;
  StartCluster(o);
  const std::string dir = Tmp("submit-redis-stalled");
  const std::vector<std::string> submit = {
      "submit", "--request-id", "stalled-1", "--", "/bin/sh", "-c",
      absl::StrCat("echo ran >> ", dir, "/runs")};
  const pid_t redis = cluster_->redis()->pid();
  ASSERT_GT(redis, 0);
  ASSERT_EQ(::kill(redis, SIGSTOP), 0);
  std::string out, err;
  const int rc = cluster_->RunCli(submit, &out, &err);
  ::kill(redis, SIGCONT);
  const std::string id(absl::StripAsciiWhitespace(out));
  ASSERT_EQ(rc, 0) << out << err;
  ASSERT_TRUE(absl::StartsWith(id, "job-")) << out << err;
  EXPECT_TRUE(absl::StrContains(err, id + " was accepted and will run")) << err;
  EXPECT_TRUE(absl::StrContains(err, "--request-id stalled-1")) << err;
  EXPECT_FALSE(absl::StrContains(err, "retry the call")) << err;
  std::string again;
  ASSERT_EQ(cluster_->RunCli(submit, &again, &err), 0) << err;
  EXPECT_EQ(again, out);
  EXPECT_EQ(Wait(id).state, JobState::kSucceeded);
  auto jobs = cluster_->client().ListJobs();
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  EXPECT_EQ(jobs->size(), 1u);
  EXPECT_EQ(ReadFile(dir + "/runs").value_or(""), "ran\n");
}

TEST_F(ClusterTest, JobsStartedAndEndedTogetherEachKeepTheirOwnOutcome) {
  TestClusterOptions o;
  o.nodes = 1;
  o.cpus_per_node = 4;
  StartCluster(o);
  std::string dir = Tmp("together");
  auto hold = Submit(
      ShellJob(absl::StrCat("while [ ! -e ", dir, "/release ]; do sleep 0.02; done"), 4));
  WaitUntil(hold.job_id, [](const auto& j) { return j.state == JobState::kRunning; });
  // Four one-CPU jobs wait for the node; they start in the pass that frees it, and
  // each waits for the others to have started, so that they end together.
  std::vector<std::string> ids;
  for (int i = 0; i < 4; ++i) {
    ids.push_back(Submit(ShellJob(absl::StrCat("touch ", dir, "/started-", i,
                                               "; while [ $(ls ", dir,
                                               " | grep -c started-) -lt 4 ]; do sleep 0.02; "
                                               "done; echo job ", i, " says hi; exit ", i),
                                  1))
                      .job_id);
  }
  for (const auto& id : ids) {
    WaitUntil(id, [](const auto& j) {
      return j.state == JobState::kPending && !j.reason.empty();
    });
  }
  std::ofstream(dir + "/release").put('x');
  EXPECT_EQ(Wait(hold.job_id).state, JobState::kSucceeded);
  for (int i = 0; i < 4; ++i) {
    auto done = Wait(ids[i]);
    EXPECT_EQ(done.state, i == 0 ? JobState::kSucceeded : JobState::kFailed) << done.reason;
    EXPECT_EQ(done.exit_code, i) << done.reason;
    std::string out, err;
    EXPECT_EQ(cluster_->RunCli({"logs", ids[i]}, &out, &err), 0) << err;
    EXPECT_TRUE(absl::StrContains(out, absl::StrCat("job ", i, " says hi"))) << out;
    for (int other = 0; other < 4; ++other) {
      if (other != i) {
        EXPECT_FALSE(absl::StrContains(out, absl::StrCat("job ", other, " says"))) << out;
      }
    }
  }
}

}  // namespace
}  // namespace drover::testing
