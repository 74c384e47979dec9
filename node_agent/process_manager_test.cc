// Real processes through the real drover-launch binary.
#include "node_agent/process_manager.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/files.h"
#include "common/spawn.h"
#include "gtest/gtest.h"
#include "tests/util/test_util.h"

namespace drover {
namespace {

using testing::WaitFor;

// Pids of live (non-zombie) processes whose environment holds DROVER_JOB_ID=<job_id>.
std::vector<int> ProcessesOfJob(const std::string& job_id) {
  std::vector<int> pids;
  std::string needle = absl::StrCat("DROVER_JOB_ID=", job_id);
  DIR* d = opendir("/proc");
  if (d == nullptr) return pids;
  while (struct dirent* e = readdir(d)) {
    int pid;
    if (!absl::SimpleAtoi(e->d_name, &pid)) continue;
    auto env = ReadFile(absl::StrCat("/proc/", pid, "/environ"));
    if (!env.ok()) continue;
    for (absl::string_view kv : absl::StrSplit(*env, '\0')) {
      if (kv == needle) {
        pids.push_back(pid);
        break;
      }
    }
  }
  closedir(d);
  return pids;
}

class ProcessManagerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ProcessManagerOptions o;
    o.launcher_path = testing::Runfile("node_agent/drover-launch");
    o.log_dir = absl::StrCat(testing::TestTmpDir(), "/logs");
    o.node_id = "node-test";
    o.node_ip = "127.0.0.1";
    o.token_file = "/nonexistent/token";
    o.default_grace = absl::Milliseconds(200);
    pm_ = std::make_unique<ProcessManager>(
        o, [this](const std::string& job_id, const proto::ExitInfo& e) {
          absl::MutexLock lock(&mu_);
          exits_.emplace_back(job_id, e);
        });
  }
  void TearDown() override { pm_.reset(); }

  proto::StartProcessesRequest Request(const std::string& job_id,
                                       std::vector<std::string> command, int nproc = 1) {
    proto::StartProcessesRequest req;
    req.set_job_id(job_id);
    for (auto& c : command) req.add_command(c);
    req.set_world_size(nproc);
    req.set_local_world_size(nproc);
    req.set_master_addr("127.0.0.1");
    req.set_scheduler_address("127.0.0.1:1");
    for (int r = 0; r < nproc; ++r) {
      auto* p = req.add_processes();
      p->set_rank(r);
      p->set_local_rank(r);
    }
    return req;
  }

  // Waits until `job_id` generation `gen` rank `rank` has been reaped; returns its exit.
  proto::ExitInfo WaitExit(const std::string& job_id, int rank, int gen = 0) {
    proto::ExitInfo out;
    bool done = WaitFor([&] {
      absl::MutexLock lock(&mu_);
      for (const auto& [j, e] : exits_) {
        if (j == job_id && e.rank() == rank && e.generation() == gen) {
          out = e;
          return true;
        }
      }
      return false;
    });
    EXPECT_TRUE(done) << "no exit for " << job_id << " rank " << rank;
    return out;
  }

  int ExitCount(const std::string& job_id) {
    absl::MutexLock lock(&mu_);
    int n = 0;
    for (const auto& [j, e] : exits_) n += j == job_id;
    return n;
  }

  std::map<std::string, std::string> ReadEnvLog(const std::string& job_id, int rank) {
    return testing::ReadEnvFile(pm_->LogPath(job_id, rank, ProcessManager::kStdout));
  }

  std::unique_ptr<ProcessManager> pm_;
  absl::Mutex mu_;
  std::vector<std::pair<std::string, proto::ExitInfo>> exits_ ABSL_GUARDED_BY(mu_);
};

TEST_F(ProcessManagerTest, EnvironmentPerRank) {
  auto req = Request("job-env", {"env"}, 3);
  req.set_world_size(6);
  req.set_local_world_size(3);
  req.set_group_rank(1);
  req.set_generation(2);
  req.set_max_restarts(5);
  (*req.mutable_env())["USER_VAR"] = "hello";
  req.mutable_processes(0)->add_gpu_ids(0);
  req.mutable_processes(0)->add_gpu_ids(1);
  req.mutable_processes(1)->add_gpu_ids(2);
  req.mutable_processes(1)->add_gpu_ids(3);
  for (int i = 0; i < 3; ++i) req.mutable_processes(i)->set_rank(3 + i);
  int port = 0;
  ASSERT_TRUE(pm_->Start(req, &port).ok());
  EXPECT_GT(port, 0);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(WaitExit("job-env", 3 + i, 2).exit_code(), 0);
    auto env = ReadEnvLog("job-env", 3 + i);
    EXPECT_EQ(env["RANK"], absl::StrCat(3 + i));
    EXPECT_EQ(env["ROLE_RANK"], absl::StrCat(3 + i));
    EXPECT_EQ(env["DROVER_RANK"], absl::StrCat(3 + i));
    EXPECT_EQ(env["LOCAL_RANK"], absl::StrCat(i));
    EXPECT_EQ(env["WORLD_SIZE"], "6");
    EXPECT_EQ(env["ROLE_WORLD_SIZE"], "6");
    EXPECT_EQ(env["LOCAL_WORLD_SIZE"], "3");
    EXPECT_EQ(env["GROUP_RANK"], "1");
    EXPECT_EQ(env["GROUP_WORLD_SIZE"], "2");
    EXPECT_EQ(env["ROLE_NAME"], "default");
    EXPECT_EQ(env["MASTER_ADDR"], "127.0.0.1");
    EXPECT_EQ(env["MASTER_PORT"], absl::StrCat(port));
    EXPECT_EQ(env["TORCHELASTIC_RESTART_COUNT"], "2");
    EXPECT_EQ(env["TORCHELASTIC_MAX_RESTARTS"], "5");
    EXPECT_EQ(env["TORCHELASTIC_RUN_ID"], "job-env");
    EXPECT_EQ(env["OMP_NUM_THREADS"], "1");
    EXPECT_EQ(env["USER_VAR"], "hello");
    EXPECT_EQ(env["DROVER_JOB_ID"], "job-env");
    EXPECT_EQ(env["DROVER_NODE_ID"], "node-test");
    EXPECT_EQ(env["DROVER_GENERATION"], "2");
    EXPECT_EQ(env["DROVER_SCHEDULER_ADDRESS"], "127.0.0.1:1");
    EXPECT_EQ(env["DROVER_TOKEN_FILE"], "/nonexistent/token");
    EXPECT_EQ(env["DROVER_AGENT_PID"], absl::StrCat(::getpid()));
    EXPECT_EQ(env.count("PATH"), 1u);  // the agent's own environment is the base
  }
  EXPECT_EQ(ReadEnvLog("job-env", 3)["CUDA_VISIBLE_DEVICES"], "0,1");
  EXPECT_EQ(ReadEnvLog("job-env", 4)["CUDA_VISIBLE_DEVICES"], "2,3");
  auto cpu_env = ReadEnvLog("job-env", 5);
  ASSERT_EQ(cpu_env.count("CUDA_VISIBLE_DEVICES"), 1u);  // set, and empty
  EXPECT_EQ(cpu_env["CUDA_VISIBLE_DEVICES"], "");
}

TEST_F(ProcessManagerTest, UserOmpNumThreadsIsKept) {
  auto req = Request("job-omp", {"env"});
  (*req.mutable_env())["OMP_NUM_THREADS"] = "7";
  int port = 0;
  ASSERT_TRUE(pm_->Start(req, &port).ok());
  WaitExit("job-omp", 0);
  EXPECT_EQ(ReadEnvLog("job-omp", 0)["OMP_NUM_THREADS"], "7");
}

TEST_F(ProcessManagerTest, ExitCodeAndStderrTailOfThisGenerationOnly) {
  int port = 0;
  ASSERT_TRUE(
      pm_->Start(Request("job-exit", {"sh", "-c", "echo first-gen >&2; exit 3"}), &port).ok());
  auto e = WaitExit("job-exit", 0);
  EXPECT_EQ(e.exit_code(), 3);
  EXPECT_EQ(e.signal(), 0);
  EXPECT_EQ(e.stderr_tail(), "first-gen\n");
  EXPECT_EQ(e.node_id(), "node-test");

  auto req = Request("job-exit", {"sh", "-c", "echo second-gen >&2; exit 4"});
  req.set_generation(1);
  ASSERT_TRUE(pm_->Start(req, &port).ok());
  e = WaitExit("job-exit", 0, 1);
  EXPECT_EQ(e.exit_code(), 4);
  EXPECT_EQ(e.stderr_tail(), "second-gen\n");
  // The log file itself is appended across generations.
  auto all = ReadFile(pm_->LogPath("job-exit", 0, ProcessManager::kStderr));
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(*all, "first-gen\nsecond-gen\n");

  auto snap = pm_->Snapshot();
  ASSERT_EQ(snap.size(), 2u);
  EXPECT_FALSE(snap[0].running());
  EXPECT_EQ(snap[0].generation(), 0);
  EXPECT_EQ(snap[1].exit().exit_code(), 4);
}

// A job id seen before (a scheduler that lost its state reused it): the new job's
// generation 0 starts with fresh logs; the old output is kept aside, never appended to.
TEST_F(ProcessManagerTest, NewJobWithAReusedIdNeverSharesTheOldJobsLogs) {
  const std::string old_dir = pm_->JobLogDir("job-reused");
  ASSERT_TRUE(MakeDirs(old_dir).ok());
  ASSERT_TRUE(WriteFileAtomic(pm_->LogPath("job-reused", 0, ProcessManager::kStdout),
                              "old job\n").ok());
  int port = 0;
  ASSERT_TRUE(pm_->Start(Request("job-reused", {"echo", "new job"}), &port).ok());
  WaitExit("job-reused", 0);
  EXPECT_EQ(*ReadFile(pm_->LogPath("job-reused", 0, ProcessManager::kStdout)), "new job\n");
  // The old output is beside it, renamed.
  std::vector<std::string> aside;
  for (const auto& e : std::filesystem::directory_iterator(testing::TestTmpDir() + "/logs")) {
    const std::string name = e.path().filename();
    if (absl::StartsWith(name, "job-reused.replaced-")) aside.push_back(e.path());
  }
  ASSERT_EQ(aside.size(), 1u);
  EXPECT_EQ(*ReadFile(aside[0] + "/rank0.out"), "old job\n");
  // A later generation of the same job appends, as before.
  auto req = Request("job-reused", {"echo", "restarted"});
  req.set_generation(1);
  ASSERT_TRUE(pm_->Start(req, &port).ok());
  WaitExit("job-reused", 0, 1);
  EXPECT_EQ(*ReadFile(pm_->LogPath("job-reused", 0, ProcessManager::kStdout)),
            "new job\nrestarted\n");
}

TEST_F(ProcessManagerTest, StderrTailIsBounded) {
  int port = 0;
  ASSERT_TRUE(pm_->Start(Request("job-long", {"sh", "-c",
                                              "i=0; while [ $i -lt 100 ]; do echo line$i >&2; "
                                              "i=$((i+1)); done; exit 1"}),
                         &port)
                  .ok());
  auto e = WaitExit("job-long", 0);
  EXPECT_EQ(e.exit_code(), 1);
  EXPECT_EQ(std::count(e.stderr_tail().begin(), e.stderr_tail().end(), '\n'), 20);
  EXPECT_EQ(e.stderr_tail().rfind("line99\n"), e.stderr_tail().size() - 7);
}

TEST_F(ProcessManagerTest, SignalIsCaptured) {
  int port = 0;
  ASSERT_TRUE(pm_->Start(Request("job-segv", {"sh", "-c", "kill -SEGV $$"}), &port).ok());
  auto e = WaitExit("job-segv", 0);
  EXPECT_EQ(e.signal(), SIGSEGV);
  EXPECT_EQ(e.exit_code(), -1);
}

TEST_F(ProcessManagerTest, MissingCommandReports127) {
  int port = 0;
  ASSERT_TRUE(pm_->Start(Request("job-missing", {"no-such-command-drover"}), &port).ok());
  auto e = WaitExit("job-missing", 0);
  EXPECT_EQ(e.exit_code(), 127);
  EXPECT_NE(e.stderr_tail().find("cannot run 'no-such-command-drover'"), std::string::npos)
      << e.stderr_tail();
  EXPECT_NE(e.stderr_tail().find("PATH="), std::string::npos);
}

TEST_F(ProcessManagerTest, MissingCwdIsInvalidArgument) {
  auto req = Request("job-cwd", {"true"});
  req.set_cwd("/no/such/dir/drover");
  int port = 0;
  absl::Status s = pm_->Start(req, &port);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("/no/such/dir/drover"), std::string::npos) << s;
  EXPECT_TRUE(pm_->Snapshot().empty());
}

TEST_F(ProcessManagerTest, StartTwiceStartsOnce) {
  std::string marker = absl::StrCat(testing::TestTmpDir(), "/started-once");
  auto req = Request("job-twice", {"sh", "-c", absl::StrCat("echo x >> ", marker)});
  int port1 = 0, port2 = 0;
  ASSERT_TRUE(pm_->Start(req, &port1).ok());
  ASSERT_TRUE(pm_->Start(req, &port2).ok());
  EXPECT_EQ(port1, port2);
  WaitExit("job-twice", 0);
  ASSERT_TRUE(pm_->Start(req, &port2).ok());  // also after it exited
  EXPECT_EQ(pm_->Snapshot().size(), 1u);
  EXPECT_EQ(ExitCount("job-twice"), 1);
  EXPECT_EQ(*ReadFile(marker), "x\n");
}

TEST_F(ProcessManagerTest, StopKillsStubbornProcessAndGrandchildren) {
  // Ignores SIGTERM (inherited by its children), and leaves two grandchildren.
  auto req = Request("job-stubborn", {"sh", "-c",
                                      "trap '' TERM; sleep 1000 & sleep 1000 & echo ready; "
                                      "while :; do wait; done"});
  int port = 0;
  ASSERT_TRUE(pm_->Start(req, &port).ok());
  ASSERT_TRUE(WaitFor([&] {
    return ReadFile(pm_->LogPath("job-stubborn", 0, 1)).value_or("") == "ready\n" &&
           ProcessesOfJob("job-stubborn").size() >= 4;  // launcher, sh, 2 x sleep
  }));
  EXPECT_TRUE(pm_->JobActive("job-stubborn"));
  uint64_t seq = pm_->ChangeSeq();
  EXPECT_EQ(pm_->Stop("job-stubborn", -1, absl::Milliseconds(300)), 1);
  EXPECT_EQ(pm_->Stop("job-stubborn", -1, absl::Milliseconds(300)), 0);  // idempotent
  pm_->WaitForChange(seq, absl::Now() + absl::Seconds(10));
  auto e = WaitExit("job-stubborn", 0);
  EXPECT_EQ(e.signal(), SIGKILL);  // it really ignored SIGTERM
  EXPECT_FALSE(pm_->JobActive("job-stubborn"));
  EXPECT_TRUE(WaitFor([] { return ProcessesOfJob("job-stubborn").empty(); }));
}

TEST_F(ProcessManagerTest, StopAlsoKillsProcessesThatLeftTheGroup) {
  // A child that calls setsid() has a session and process group of its own: a group
  // kill misses it. Everything ignores SIGTERM, so the agent's SIGKILL ends the main
  // process and its launcher at once (the launcher's own clean-up never runs).
  auto req = Request("job-setsid", {"sh", "-c",
                                    "trap '' TERM; "
                                    "setsid sh -c \"echo \\$\\$ > escaped; "
                                    "while :; do sleep 1; done\" & "
                                    "while [ ! -s escaped ]; do sleep 0.01; done; echo ready; "
                                    "sleep 1000"});
  const std::string dir = absl::StrCat(testing::TestTmpDir(), "/setsid");
  ASSERT_TRUE(MakeDirs(dir).ok());
  req.set_cwd(dir);
  int port = 0;
  ASSERT_TRUE(pm_->Start(req, &port).ok());
  ASSERT_TRUE(WaitFor([&] {
    return ReadFile(pm_->LogPath("job-setsid", 0, 1)).value_or("") == "ready\n";
  }));
  const pid_t escaped = std::atoi(ReadFile(dir + "/escaped").value_or("0").c_str());
  ASSERT_GT(escaped, 0);
  const pid_t launcher = pm_->Snapshot().at(0).pid();
  ASSERT_NE(getpgid(escaped), launcher) << "the child did not leave the group";
  EXPECT_EQ(pm_->Stop("job-setsid", -1, absl::Milliseconds(300)), 1);
  WaitExit("job-setsid", 0);
  EXPECT_TRUE(WaitFor([] { return ProcessesOfJob("job-setsid").empty(); }))
      << "a process that left the group survived the stop";
}

// Old logs go; recent ones and those of a job still running here stay.
TEST_F(ProcessManagerTest, PruneLogsRemovesOnlyOldLogsOfJobsNotRunningHere) {
  auto age = [&](const std::string& job, absl::Duration by) {
    const std::string dir = pm_->JobLogDir(job);
    const struct timespec t[2] = {absl::ToTimespec(absl::Now() - by),
                                  absl::ToTimespec(absl::Now() - by)};
    for (const char* f : {"/rank0.out", "/rank0.err", ""}) {
      ASSERT_EQ(utimensat(AT_FDCWD, (dir + f).c_str(), t, 0), 0) << dir + f;
    }
  };
  int port = 0;
  ASSERT_TRUE(pm_->Start(Request("job-old", {"true"}), &port).ok());
  ASSERT_TRUE(pm_->Start(Request("job-recent", {"true"}), &port).ok());
  ASSERT_TRUE(pm_->Start(Request("job-live", {"sleep", "1000"}), &port).ok());
  WaitExit("job-old", 0);
  WaitExit("job-recent", 0);
  age("job-old", absl::Hours(48));
  age("job-recent", absl::Minutes(10));
  age("job-live", absl::Hours(48));  // old files, but the job still runs here
  EXPECT_EQ(pm_->PruneLogs(absl::Hours(24)), 1);
  struct stat st;
  EXPECT_NE(stat(pm_->JobLogDir("job-old").c_str(), &st), 0) << "old logs kept";
  EXPECT_EQ(stat(pm_->JobLogDir("job-recent").c_str(), &st), 0) << "recent logs removed";
  EXPECT_EQ(stat(pm_->LogPath("job-live", 0, 1).c_str(), &st), 0) << "a running job's logs removed";
  EXPECT_EQ(pm_->PruneLogs(absl::Hours(24)), 0);
  pm_->Stop("job-live", -1, absl::ZeroDuration());
}

TEST_F(ProcessManagerTest, StopWithGraceLetsSigtermWork) {
  auto req = Request("job-term", {"sleep", "1000"});
  int port = 0;
  ASSERT_TRUE(pm_->Start(req, &port).ok());
  EXPECT_EQ(pm_->Stop("job-term", 0, absl::Seconds(30)), 1);
  auto e = WaitExit("job-term", 0);
  EXPECT_EQ(e.signal(), SIGTERM);  // mirrored by the launcher
}

TEST_F(ProcessManagerTest, LauncherKillsLeftoversWhenMainProcessExits) {
  auto req = Request("job-leftover", {"sh", "-c", "sleep 1000 & echo started; exit 0"});
  int port = 0;
  ASSERT_TRUE(pm_->Start(req, &port).ok());
  auto e = WaitExit("job-leftover", 0);
  EXPECT_EQ(e.exit_code(), 0);
  EXPECT_TRUE(WaitFor([] { return ProcessesOfJob("job-leftover").empty(); }));
}

TEST_F(ProcessManagerTest, ForgetDropsRecordsAndStopsLiveOnes) {
  int port = 0;
  ASSERT_TRUE(pm_->Start(Request("job-forget", {"sleep", "1000"}), &port).ok());
  ASSERT_EQ(pm_->Snapshot().size(), 1u);
  pm_->Forget("job-forget", 0);
  EXPECT_TRUE(pm_->Snapshot().empty());
  EXPECT_TRUE(WaitFor([&] { return !pm_->JobActive("job-forget"); }));
  EXPECT_EQ(ExitCount("job-forget"), 0);  // settled: not reported
}

TEST_F(ProcessManagerTest, StopAllAndWaitReapsEverything) {
  int port = 0;
  ASSERT_TRUE(pm_->Start(Request("job-all-a", {"sleep", "1000"}, 2), &port).ok());
  ASSERT_TRUE(pm_->Start(Request("job-all-b", {"sh", "-c", "trap '' TERM; sleep 1000"}), &port)
                  .ok());
  pm_->StopAllAndWait(absl::Milliseconds(200));
  EXPECT_FALSE(pm_->JobActive("job-all-a"));
  EXPECT_FALSE(pm_->JobActive("job-all-b"));
  for (const auto& s : pm_->Snapshot()) EXPECT_FALSE(s.running());
}

// The launcher alone: a fake agent (a shell) starts `drover-launch <worker>` for
// `job_id` and is SIGKILLed once at least `min_processes` of the job run; every process
// of the job must be gone soon after.
void CheckWorkerDiesWithItsAgent(const std::string& job_id, const std::string& worker,
                                 size_t min_processes) {
  SpawnOptions so;
  so.argv = {"sh", "-c",
             absl::StrCat("DROVER_AGENT_PID=$$ DROVER_JOB_ID=", job_id, " ",
                          testing::Runfile("node_agent/drover-launch"), " ", worker,
                          " & echo started; wait")};
  so.stdout_path = absl::StrCat(testing::TestTmpDir(), "/fake-agent-", job_id, ".out");
  so.new_process_group = true;  // the launcher kills its group: keep the test out of it
  auto pid = Spawn(so);
  ASSERT_TRUE(pid.ok()) << pid.status();
  ASSERT_TRUE(WaitFor([&] { return ProcessesOfJob(job_id).size() >= min_processes; }));
  ::kill(*pid, SIGKILL);
  int st;
  ::waitpid(*pid, &st, 0);
  EXPECT_TRUE(WaitFor([&] { return ProcessesOfJob(job_id).empty(); }))
      << "a process of " << job_id << " outlived its agent";
}

TEST(LauncherTest, WorkerDiesWithItsAgent) {
  CheckWorkerDiesWithItsAgent("job-orphan", "sleep 1000", 2);  // launcher, sleep
}

// A worker's child in a session of its own (setsid), ignoring SIGTERM: the launcher
// takes down its whole subtree, not only its process group.
TEST(LauncherTest, ChildThatLeftTheGroupDiesWithTheAgentToo) {
  // launcher, sh, setsid'd sh, its sleep, sleep 1000
  CheckWorkerDiesWithItsAgent("job-orphan-setsid",
                              "sh -c \"setsid sh -c 'trap \\\"\\\" TERM; "
                              "while :; do sleep 1; done' & sleep 1000\"",
                              4);
}

}  // namespace
}  // namespace drover
