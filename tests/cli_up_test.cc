// `drover up` / `drover down` as a user runs them: a local cluster with nothing else to
// install or start, state in memory or (with --redis) in a redis-server it starts.
#include <signal.h>
#include <sys/wait.h>

#include <cstdlib>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/files.h"
#include "common/spawn.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
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
    return RunDrover(args, {"DROVER_HOME=" + home_, "DROVER_ADDRESS=", "DROVER_TOKEN_FILE="},
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
  // A second `up` refuses and says what to do.
  EXPECT_NE(Drover({"up"}, &out, &err), 0);
  EXPECT_TRUE(absl::StrContains(err, "drover down")) << err;

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

}  // namespace
}  // namespace drover::testing
