// `drover up` / `drover down` as a user runs them: a local cluster with nothing else to
// install or start, state in memory or (with --redis) in a redis-server it starts.
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <fcntl.h>
#include <dirent.h>
#include <hiredis/hiredis.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/files.h"
#include "common/spawn.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/util/proc_stat.h"
#include "tests/util/test_cluster.h"

namespace drover::testing {
namespace {

class CliUpTest : public ::testing::Test {
 protected:
  void SetUp() override {
    static int n = 0;
    home_ = absl::StrCat(std::getenv("TEST_TMPDIR"), "/home-", n++);
    ASSERT_TRUE(MakeDirs(home_).ok());
  }
  void TearDown() override {
    // Whatever happened, leave no daemon behind.
    std::string out, err;
    Drover({"down"}, &out, &err);
  }
  int Drover(const std::vector<std::string>& args, std::string* out, std::string* err) {
    return RunDrover(args,
                     {"DROVER_HOME=" + home_, "DROVER_ADDRESS=", "DROVER_TOKEN_FILE=",
                      "DROVER_TLS_CA="},
                     home_, out, err);
  }
  std::vector<pid_t> DaemonPids() {
    std::vector<pid_t> pids;
    auto text = ReadFile(home_ + "/cluster.json");
    if (!text.ok()) return pids;
    auto j = nlohmann::json::parse(*text);
    for (const char* key : {"scheduler_pid", "redis_pid"}) {
      if (j.contains(key)) pids.push_back(j[key].get<int>());
    }
    for (auto& p : j["agent_pids"]) pids.push_back(p.get<int>());
    return pids;
  }

  std::string home_;
};

TEST_F(CliUpTest, UpRunDownLeavesNothingBehind) {
  std::string out, err;
  ASSERT_EQ(Drover({"up", "--nodes", "2", "--gpus-per-node", "4", "--cpus-per-node", "4"}, &out,
                   &err),
            0)
      << out << err;
  EXPECT_TRUE(absl::StrContains(err, "2 nodes ready")) << err;
  auto pids = DaemonPids();
  ASSERT_EQ(pids.size(), 3u);
  for (pid_t p : pids) EXPECT_EQ(kill(p, 0), 0);
  // A second `up` starts nothing: it says the cluster runs and how to stop it.
  EXPECT_EQ(Drover({"up", "--nodes", "2"}, &out, &err), 0) << out << err;
  EXPECT_TRUE(absl::StrContains(err, "nothing to restart")) << err;
  EXPECT_TRUE(absl::StrContains(err, "drover down")) << err;
  EXPECT_EQ(DaemonPids(), pids);

  ASSERT_EQ(Drover({"status", "--json"}, &out, &err), 0) << err;
  auto status = nlohmann::json::parse(out);
  ASSERT_EQ(status["nodes"].size(), 2u) << out;
  EXPECT_EQ(status["nodes"][0]["total"]["gpus"], 4);
  EXPECT_EQ(status["state_backend"], "memory");
  EXPECT_TRUE(absl::StartsWith(status["address"].get<std::string>(), "127.0.0.1:"))
      << "drover up must bind to loopback";

  ASSERT_EQ(Drover({"run", "--nodes", "2", "--nproc-per-node", "2", "--gpus-per-proc", "2", "--",
                    "sh", "-c", "echo gpus=$CUDA_VISIBLE_DEVICES"},
                   &out, &err),
            0)
      << err;
  EXPECT_TRUE(absl::StrContains(out, "[rank0]: gpus=0,1")) << out;
  EXPECT_TRUE(absl::StrContains(out, "[rank1]: gpus=2,3")) << out;

  ASSERT_EQ(Drover({"down"}, &out, &err), 0) << err;
  for (pid_t p : pids) {
    EXPECT_TRUE(WaitFor([p] { return kill(p, 0) != 0; }, absl::Seconds(10)))
        << "pid " << p << " survived drover down";
  }
  EXPECT_NE(Drover({"status"}, &out, &err), 0);
  EXPECT_TRUE(absl::StrContains(err, "drover up")) << err;
}

// `up --tls`: the CLI finds the cluster's CA in cluster.json, so nothing else to pass.
TEST_F(CliUpTest, UpWithTlsNeedsNoOtherFlag) {
  std::string out, err;
  ASSERT_EQ(Drover({"up", "--tls", "--nodes", "1"}, &out, &err), 0) << out << err;
  EXPECT_TRUE(absl::StrContains(err, "(TLS, cluster CA " + home_ + "/tls/ca.crt)")) << err;
  ASSERT_EQ(Drover({"run", "--", "echo", "over-tls"}, &out, &err), 0) << out << err;
  EXPECT_TRUE(absl::StrContains(out, "[rank0]: over-tls")) << out;
  struct stat st;
  ASSERT_EQ(::stat((home_ + "/tls/ca.key").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  ASSERT_EQ(Drover({"down"}, &out, &err), 0) << err;
}

TEST_F(CliUpTest, UpWithRedisKeepsStateInRedis) {
  std::string out, err;
  ASSERT_EQ(Drover({"up", "--nodes", "1", "--redis"}, &out, &err), 0) << out << err;
  ASSERT_EQ(DaemonPids().size(), 3u);  // scheduler, redis-server, one agent
  ASSERT_EQ(Drover({"status", "--json"}, &out, &err), 0) << err;
  auto status = nlohmann::json::parse(out);
  EXPECT_TRUE(absl::StartsWith(status["state_backend"].get<std::string>(), "redis 127.0.0.1:"))
      << out;
  ASSERT_EQ(Drover({"run", "--", "true"}, &out, &err), 0) << err;
  auto pids = DaemonPids();
  ASSERT_EQ(Drover({"down"}, &out, &err), 0) << err;
  for (pid_t p : pids) {
    EXPECT_TRUE(WaitFor([p] { return kill(p, 0) != 0; }, absl::Seconds(10)));
  }
}

// The id `drover run` reports on stderr ("drover: submitted ID"), or "".
std::string SubmittedId(const std::string& err) {
  const std::string tag = "drover: submitted ";
  auto at = err.find(tag);
  if (at == std::string::npos) return "";
  at += tag.size();
  return err.substr(at, err.find('\n', at) - at);
}

// Issue 13: job ids restarted at job-1 when a cluster with in-memory state came up
// again in the same DROVER_HOME, and the new job-1 showed the old job-1's output,
// which the agent's log directory still held.
TEST_F(CliUpTest, JobIdsAreNewAfterDownAndUpAndNoJobShowsAnothersOutput) {
  std::string out, err;
  ASSERT_EQ(Drover({"up", "--nodes", "1"}, &out, &err), 0) << out << err;
  ASSERT_EQ(Drover({"run", "--", "echo", "first"}, &out, &err), 0) << err;
  EXPECT_TRUE(absl::StrContains(out, "first")) << out;
  const std::string first = SubmittedId(err);
  ASSERT_FALSE(first.empty()) << err;
  ASSERT_EQ(Drover({"down"}, &out, &err), 0) << err;

  ASSERT_EQ(Drover({"up", "--nodes", "1"}, &out, &err), 0) << out << err;
  ASSERT_EQ(Drover({"run", "--", "echo", "second"}, &out, &err), 0) << err;
  const std::string second = SubmittedId(err);
  EXPECT_NE(second, first);
  EXPECT_TRUE(absl::StrContains(out, "second")) << out;
  EXPECT_FALSE(absl::StrContains(out, "first")) << out;
  ASSERT_EQ(Drover({"logs", second}, &out, &err), 0) << err;
  EXPECT_TRUE(absl::StrContains(out, "second")) << out;
  EXPECT_FALSE(absl::StrContains(out, "first")) << out;
  // The new cluster does not know the old job: no output of anyone else's under its id.
  EXPECT_NE(Drover({"logs", first}, &out, &err), 0) << out;
  EXPECT_FALSE(absl::StrContains(out, "first")) << out;
}

// A cluster file that outlived its daemons (a reboot, a crash) names pids that may
// belong to unrelated processes by now: `down` must not signal them, and `up` must not
// take them for a running cluster.
TEST_F(CliUpTest, StalePidsOfOtherProgramsAreNeverSignalled) {
  SpawnOptions o;
  o.argv = {"sleep", "600"};
  auto bystander = Spawn(o);
  ASSERT_TRUE(bystander.ok()) << bystander.status();
  const pid_t pid = *bystander;
  nlohmann::json stale = {{"address", "127.0.0.1:1"},
                          {"scheduler_pid", pid},
                          {"redis_pid", pid},
                          {"agent_pids", {pid}}};
  ASSERT_TRUE(WriteFileAtomic(home_ + "/cluster.json", stale.dump(), 0600).ok());
  std::string out, err;
  EXPECT_EQ(Drover({"down"}, &out, &err), 0) << out << err;
  EXPECT_TRUE(absl::StrContains(out, "stopped 0 daemons")) << out;
  EXPECT_EQ(kill(pid, 0), 0) << "drover down signalled an unrelated process";
  int status = 0;
  EXPECT_EQ(waitpid(pid, &status, WNOHANG), 0);

  ASSERT_TRUE(WriteFileAtomic(home_ + "/cluster.json", stale.dump(), 0600).ok());
  EXPECT_EQ(Drover({"up", "--nodes", "1"}, &out, &err), 0) << out << err;
  EXPECT_EQ(kill(pid, 0), 0);
  EXPECT_EQ(Drover({"down"}, &out, &err), 0) << out << err;
  EXPECT_TRUE(absl::StrContains(out, "stopped 2 daemons")) << out;
  EXPECT_EQ(kill(pid, 0), 0);
  kill(pid, SIGKILL);
  waitpid(pid, &status, 0);
}

// True once `pid` is gone (a zombie counts as gone: it runs nothing).
bool Gone(pid_t pid) { return !IsRunning(pid); }

// Live processes whose command line mentions `needle` (zombies excluded), as
// "PID PROGRAM...".
std::vector<std::string> ProcessesNaming(const std::string& needle) {
  std::vector<std::string> out;
  DIR* d = opendir("/proc");
  if (d == nullptr) return out;
  while (dirent* e = readdir(d)) {
    int pid = 0;
    if (!absl::SimpleAtoi(e->d_name, &pid) || pid == getpid() || Gone(pid)) continue;
    auto cmd = ReadFile(absl::StrCat("/proc/", pid, "/cmdline"));
    if (!cmd.ok()) continue;
    std::string line = *cmd;
    std::replace(line.begin(), line.end(), '\0', ' ');
    if (absl::StrContains(line, needle)) out.push_back(absl::StrCat(pid, " ", line));
  }
  closedir(d);
  return out;
}

// How many live processes run `program` with `needle` on their command line.
int CountDaemons(const std::string& program, const std::string& needle) {
  int n = 0;
  for (const std::string& p : ProcessesNaming(needle)) n += absl::StrContains(p, program);
  return n;
}

// Two `drover up` (or `down`) at once in one DROVER_HOME: each takes an flock on
// $DROVER_HOME/cluster.lock; a second one names the pid that holds it, waits, and
// refuses clearly when it waited too long. Here the test holds the lock itself.
TEST_F(CliUpTest, UpAndDownWaitForTheHomeLockAndNameItsHolder) {
  const std::string lock_path = home_ + "/cluster.lock";
  const int fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::flock(fd, LOCK_EX | LOCK_NB), 0);
  const std::string me = absl::StrCat(::getpid(), "\n");
  ASSERT_EQ(::pwrite(fd, me.data(), me.size(), 0), static_cast<ssize_t>(me.size()));
  std::string out, err;
  // --timeout 1: it waits twice that for the lock, then refuses.
  EXPECT_NE(Drover({"up", "--nodes", "1", "--timeout", "1"}, &out, &err), 0) << out << err;
  EXPECT_TRUE(absl::StrContains(err, absl::StrCat("(pid ", ::getpid(), ") is working on the cluster")))
      << err;
  EXPECT_TRUE(absl::StrContains(err, absl::StrCat("(pid ", ::getpid(), ") still holds ", lock_path)))
      << err;
  EXPECT_FALSE(ReadFile(home_ + "/cluster.json").ok()) << "up started a cluster without the lock";
  EXPECT_EQ(CountDaemons("drover-scheduler", home_ + "/"), 0);
  ::close(fd);  // released: now it starts
  ASSERT_EQ(Drover({"up", "--nodes", "1"}, &out, &err), 0) << out << err;
  EXPECT_FALSE(absl::StrContains(err, "is working on the cluster")) << err;
  struct stat st;
  ASSERT_EQ(::stat(lock_path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  ASSERT_EQ(Drover({"down"}, &out, &err), 0) << err;
}

// Two `drover up` started together in one DROVER_HOME make one cluster: the second
// waits for the first, then finds its cluster running.
TEST_F(CliUpTest, TwoUpsAtOnceInOneHomeStartOneCluster) {
  std::string out[2], err[2];
  int rc[2] = {-1, -1};
  std::thread a([&] { rc[0] = Drover({"up", "--nodes", "1"}, &out[0], &err[0]); });
  std::thread b([&] { rc[1] = Drover({"up", "--nodes", "1"}, &out[1], &err[1]); });
  a.join();
  b.join();
  EXPECT_EQ(rc[0], 0) << err[0];
  EXPECT_EQ(rc[1], 0) << err[1];
  EXPECT_EQ(CountDaemons("drover-scheduler", home_ + "/"), 1)
      << absl::StrJoin(ProcessesNaming(home_ + "/"), "\n") << "\n" << err[0] << "\n" << err[1];
  EXPECT_EQ(CountDaemons("drover-agent", home_ + "/"), 1)
      << absl::StrJoin(ProcessesNaming(home_ + "/"), "\n");
  ASSERT_EQ(Drover({"down"}, &out[0], &err[0]), 0) << err[0];
  EXPECT_EQ(CountDaemons("drover-scheduler", home_ + "/"), 0);
}

class CliUpRestartTest : public CliUpTest {
 protected:
  nlohmann::json Record() {
    auto text = ReadFile(home_ + "/cluster.json");
    return text.ok() ? nlohmann::json::parse(*text) : nlohmann::json();
  }
  // The job's record, as `drover job --json` prints it (null if that fails).
  nlohmann::json Job(const std::string& id) {
    std::string out, err;
    if (Drover({"job", id, "--json"}, &out, &err) != 0) return nlohmann::json();
    return nlohmann::json::parse(out, nullptr, false);
  }
  std::string StateOf(const std::string& id) {
    nlohmann::json j = Job(id);
    return j.is_object() ? j.value("state", "") : "";
  }
  // Submits a one-process job that writes its pid to `pid_file` and runs until `flag`
  // exists; returns its id once it runs.
  std::string SubmitWaiting(const std::string& flag, const std::string& pid_file) {
    std::string out, err;
    EXPECT_EQ(Drover({"submit", "--", "sh", "-c",
                      absl::StrCat("echo $$ > ", pid_file, "; while [ ! -e ", flag,
                                   " ]; do sleep 0.05; done; echo finished")},
                     &out, &err),
              0)
        << out << err;
    std::string id(absl::StripAsciiWhitespace(out));
    EXPECT_TRUE(WaitFor([&] { return StateOf(id) == "RUNNING"; }, absl::Seconds(30)))
        << id << ": " << Job(id).dump();
    EXPECT_TRUE(WaitFor([&] { return FileSize(pid_file) > 0; }, absl::Seconds(30)));
    return id;
  }
  pid_t PidIn(const std::string& file) {
    auto text = ReadFile(file);
    int pid = 0;
    if (!text.ok() || !absl::SimpleAtoi(absl::StripAsciiWhitespace(*text), &pid)) return 0;
    return pid;
  }
  // The index of the agent whose node is `node_id` (-1 if none).
  int AgentOf(const std::string& node_id) {
    for (int i = 0; i < 8; ++i) {
      auto id = ReadFile(absl::StrCat(home_, "/cluster/agent-", i, "/node-id"));
      if (id.ok() && absl::StripAsciiWhitespace(*id) == node_id) return i;
    }
    return -1;
  }
  void ExpectOneSetOfDaemons(int agents) {
    const std::string dir = home_ + "/cluster/";
    EXPECT_EQ(CountDaemons("drover-scheduler", dir), 1) << absl::StrJoin(ProcessesNaming(dir), "\n");
    EXPECT_EQ(CountDaemons("drover-agent", dir), agents) << absl::StrJoin(ProcessesNaming(dir), "\n");
    EXPECT_EQ(CountDaemons("redis-server", dir), 1) << absl::StrJoin(ProcessesNaming(dir), "\n");
  }
};

// Issue 19, item 1: the head of a --redis cluster SIGKILLed under a running job, then
// `drover up` again (the obvious move). Before, `up` looked only at the scheduler's pid
// and started a second redis, scheduler and agents on the same directories: the job
// was marked FAILED while its process ran on, and `drover down` left the first set
// running. Now `up` brings back only the scheduler, on its port; the job is reattached
// and finishes SUCCEEDED; the same for an agent that dies (on its own directory, as the
// same node); `down` stops everything, also a daemon started again by hand.
TEST_F(CliUpRestartTest, UpBringsBackADeadHeadOrAgentInPlaceAndJobsRunOn) {
  std::string out, err;
  ASSERT_EQ(Drover({"up", "--nodes", "2", "--redis", "--cpus-per-node", "2"}, &out, &err), 0)
      << out << err;
  const nlohmann::json first = Record();
  const std::string address = first["address"];
  const pid_t scheduler = first["scheduler_pid"];
  const pid_t redis = first["redis_pid"];
  const std::vector<pid_t> agents = first["agent_pids"];
  ASSERT_EQ(agents.size(), 2u);

  const std::string flag = home_ + "/go-1", pid_file = home_ + "/job-1.pid";
  const std::string job = SubmitWaiting(flag, pid_file);
  const pid_t job_pid = PidIn(pid_file);
  ASSERT_GT(job_pid, 0);

  // The head dies.
  ASSERT_EQ(kill(scheduler, SIGKILL), 0);
  ASSERT_TRUE(WaitFor([&] { return Gone(scheduler); }, absl::Seconds(10)));
  ASSERT_EQ(Drover({"up", "--nodes", "2", "--redis"}, &out, &err), 0) << out << err;
  EXPECT_TRUE(absl::StrContains(err, "scheduler (dead)")) << err;
  EXPECT_TRUE(absl::StrContains(err, "restarted scheduler")) << err;
  EXPECT_FALSE(absl::StrContains(err, "restarted redis")) << err;
  EXPECT_FALSE(absl::StrContains(err, "restarted agent")) << err;  // only the scheduler
  nlohmann::json now = Record();
  EXPECT_EQ(now["address"], address) << "the head must come back on its recorded port";
  EXPECT_NE(now["scheduler_pid"], scheduler);
  EXPECT_EQ(now["redis_pid"], redis);
  EXPECT_EQ(now["agent_pids"].get<std::vector<pid_t>>(), agents);
  ExpectOneSetOfDaemons(2);
  for (pid_t p : agents) EXPECT_FALSE(Gone(p));
  EXPECT_FALSE(Gone(job_pid)) << "the job's process must keep running";
  // The job is reattached (never FAILED) and finishes.
  EXPECT_TRUE(WaitFor([&] { return StateOf(job) == "RUNNING"; }, absl::Seconds(20)))
      << Job(job).dump();
  { std::ofstream(flag) << "go"; }
  EXPECT_TRUE(WaitFor([&] { return StateOf(job) == "SUCCEEDED"; }, absl::Seconds(30)))
      << Job(job).dump();

  // An agent dies (the one not running the second job): brought back on its own
  // directory, as the same node; the job on the other node runs on and finishes.
  const std::string flag2 = home_ + "/go-2", pid_file2 = home_ + "/job-2.pid";
  const std::string job2 = SubmitWaiting(flag2, pid_file2);

  // The whole head dies, its Redis with it: both come back, Redis on its port with its
  // data and password, and the job runs on.
  now = Record();
  const pid_t scheduler2 = now["scheduler_pid"];
  ASSERT_EQ(kill(redis, SIGKILL), 0);
  ASSERT_EQ(kill(scheduler2, SIGKILL), 0);
  ASSERT_TRUE(WaitFor([&] { return Gone(redis) && Gone(scheduler2); }, absl::Seconds(10)));
  ASSERT_EQ(Drover({"up", "--nodes", "2", "--redis"}, &out, &err), 0) << out << err;
  EXPECT_TRUE(absl::StrContains(err, "redis-server (dead), scheduler (dead)")) << err;
  EXPECT_TRUE(absl::StrContains(err, "restarted redis-server")) << err;
  EXPECT_TRUE(absl::StrContains(err, "scheduler (pid")) << err;
  now = Record();
  EXPECT_EQ(now["redis"], first["redis"]);
  EXPECT_EQ(now["address"], address);
  const pid_t redis2 = now["redis_pid"];
  EXPECT_NE(redis2, redis);
  ExpectOneSetOfDaemons(2);
  EXPECT_EQ(StateOf(job), "SUCCEEDED") << "a job that ended before is remembered";
  EXPECT_TRUE(WaitFor([&] { return StateOf(job2) == "RUNNING"; }, absl::Seconds(20)))
      << Job(job2).dump();
  EXPECT_FALSE(Gone(PidIn(pid_file2)));

  const nlohmann::json j2 = Job(job2);
  ASSERT_EQ(j2["placement"].size(), 1u) << j2.dump();
  const int busy = AgentOf(j2["placement"][0]["node_id"]);
  ASSERT_GE(busy, 0) << j2.dump();
  const int victim = 1 - busy;
  ASSERT_EQ(kill(agents[victim], SIGKILL), 0);
  ASSERT_TRUE(WaitFor([&] { return Gone(agents[victim]); }, absl::Seconds(10)));
  ASSERT_EQ(Drover({"up", "--nodes", "2", "--redis"}, &out, &err), 0) << out << err;
  EXPECT_TRUE(absl::StrContains(err, absl::StrCat("agent-", victim, " (dead)"))) << err;
  EXPECT_TRUE(absl::StrContains(err, absl::StrCat("restarted agent-", victim))) << err;
  now = Record();
  EXPECT_EQ(now["agent_pids"][busy], agents[busy]);
  const pid_t revived = now["agent_pids"][victim];
  EXPECT_NE(revived, agents[victim]);
  ExpectOneSetOfDaemons(2);
  ASSERT_EQ(Drover({"status", "--json"}, &out, &err), 0) << err;
  auto status = nlohmann::json::parse(out);
  ASSERT_EQ(status["nodes"].size(), 2u) << out;  // the same node, not a third one
  for (const auto& n : status["nodes"]) EXPECT_EQ(n["state"], "ALIVE") << out;
  { std::ofstream(flag2) << "go"; }
  EXPECT_TRUE(WaitFor([&] { return StateOf(job2) == "SUCCEEDED"; }, absl::Seconds(30)))
      << Job(job2).dump();

  // A third job runs while `down` comes; an agent was started again by hand (the
  // record's command line, not through `up`): `down` stops all of it.
  const std::string job3 = SubmitWaiting(home_ + "/never", home_ + "/job-3.pid");
  const pid_t job3_pid = PidIn(home_ + "/job-3.pid");
  const int idle = 1 - AgentOf(Job(job3)["placement"][0]["node_id"]);
  const pid_t idle_pid = Record()["agent_pids"][idle];
  ASSERT_EQ(kill(idle_pid, SIGKILL), 0);
  ASSERT_TRUE(WaitFor([&] { return Gone(idle_pid); }, absl::Seconds(10)));
  SpawnOptions by_hand;
  by_hand.argv = Record()["agent_argvs"][idle].get<std::vector<std::string>>();
  by_hand.stdout_path = by_hand.stderr_path = home_ + "/by-hand.log";
  auto hand = Spawn(by_hand);
  ASSERT_TRUE(hand.ok()) << hand.status();
  const std::vector<pid_t> all = {Record()["scheduler_pid"], redis2, *hand,
                                  Record()["agent_pids"][1 - idle], job3_pid};
  ASSERT_EQ(Drover({"down"}, &out, &err), 0) << out << err;
  int status_code = 0;
  EXPECT_EQ(waitpid(*hand, &status_code, 0), *hand);
  for (pid_t p : all) {
    EXPECT_TRUE(WaitFor([p] { return Gone(p); }, absl::Seconds(10))) << "pid " << p << " survived";
  }
  EXPECT_TRUE(ProcessesNaming(home_ + "/").empty())
      << absl::StrJoin(ProcessesNaming(home_ + "/"), "\n");
}

// A DROVER_HOME whose cluster.json is a `drover start --head` head's (its ready file):
// while that head runs, `up` starts no second cluster over it and `down` does not
// forget it (before, `up` overwrote its record and `down` removed it).
TEST_F(CliUpTest, UpAndDownLeaveAStartedHeadAlone) {
  SpawnOptions o;
  o.argv = {Runfile("cli/drover"), "start", "--head", "--bind", "127.0.0.1", "--port", "0"};
  for (char** e = environ; *e != nullptr; ++e) {
    if (!absl::StartsWith(*e, "DROVER_") || absl::StartsWith(*e, "DROVER_BIN_DIR=")) {
      o.env.push_back(*e);
    }
  }
  o.env.push_back("DROVER_HOME=" + home_);
  o.stdout_path = o.stderr_path = home_ + "/head.log";
  auto head = Spawn(o);
  ASSERT_TRUE(head.ok()) << head.status();
  ASSERT_TRUE(WaitFor([&] { return FileSize(home_ + "/cluster.json") > 0; }, absl::Seconds(30)))
      << ReadFile(home_ + "/head.log").value_or("");
  std::string out, err;
  EXPECT_NE(Drover({"up", "--nodes", "1"}, &out, &err), 0) << out << err;
  EXPECT_TRUE(absl::StrContains(err, "drover start --head")) << err;
  EXPECT_NE(Drover({"down"}, &out, &err), 0) << out << err;
  EXPECT_TRUE(absl::StrContains(err, absl::StrCat("SIGTERM to pid ", *head))) << err;
  EXPECT_EQ(kill(*head, 0), 0);
  EXPECT_EQ(CountDaemons("drover-agent", home_ + "/"), 0);
  ASSERT_TRUE(ReadFile(home_ + "/cluster.json").ok());
  kill(*head, SIGTERM);
  int status = 0;
  EXPECT_EQ(waitpid(*head, &status, 0), *head);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  ::unlink((home_ + "/cluster.json").c_str());
}

// Issue 19, item 5: the Redis of `drover up --redis` has a generated password that no
// command line shows; a connection without it is refused, the scheduler has it.
TEST_F(CliUpTest, UpWithRedisGivesRedisAPasswordOnlyTheSchedulerKnows) {
  std::string out, err;
  ASSERT_EQ(Drover({"up", "--nodes", "1", "--redis"}, &out, &err), 0) << out << err;
  for (const char* f : {"/redis.password", "/cluster/redis.conf"}) {
    struct stat st;
    ASSERT_EQ(::stat((home_ + f).c_str(), &st), 0) << f;
    EXPECT_EQ(st.st_mode & 0777, 0600u) << f;
  }
  auto password = ReadFile(home_ + "/redis.password");
  ASSERT_TRUE(password.ok());
  const std::string pw(absl::StripAsciiWhitespace(*password));
  ASSERT_GE(pw.size(), 32u);
  EXPECT_TRUE(ProcessesNaming(pw).empty()) << "the password is on a command line";

  ASSERT_EQ(Drover({"status", "--json"}, &out, &err), 0) << err;
  const std::string backend = nlohmann::json::parse(out)["state_backend"];
  const int port = std::stoi(backend.substr(backend.rfind(':') + 1));
  redisContext* c = redisConnect("127.0.0.1", port);
  ASSERT_TRUE(c != nullptr && c->err == 0);
  auto* r = static_cast<redisReply*>(redisCommand(c, "HLEN drover:jobs"));
  ASSERT_NE(r, nullptr);
  ASSERT_EQ(r->type, REDIS_REPLY_ERROR);
  EXPECT_TRUE(absl::StartsWith(std::string(r->str, r->len), "NOAUTH")) << r->str;
  freeReplyObject(r);
  redisFree(c);

  // The scheduler, which has it, keeps the jobs there.
  ASSERT_EQ(Drover({"run", "--", "echo", "kept"}, &out, &err), 0) << out << err;
  c = redisConnect("127.0.0.1", port);
  ASSERT_TRUE(c != nullptr && c->err == 0);
  r = static_cast<redisReply*>(redisCommand(c, "AUTH %b", pw.data(), pw.size()));
  ASSERT_NE(r, nullptr);
  freeReplyObject(r);
  r = static_cast<redisReply*>(redisCommand(c, "HLEN drover:jobs"));
  ASSERT_NE(r, nullptr);
  ASSERT_EQ(r->type, REDIS_REPLY_INTEGER);
  EXPECT_EQ(r->integer, 1);
  freeReplyObject(r);
  redisFree(c);
}

}  // namespace
}  // namespace drover::testing
