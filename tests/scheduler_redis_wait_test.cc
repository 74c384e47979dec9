// drover-scheduler with --redis at start: a Redis that does not listen yet (started
// beside the head by a service manager) is waited for up to --redis-wait-ms; with no
// patience the head exits at once naming the Redis and what to do.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/files.h"
#include "common/spawn.h"
#include "gtest/gtest.h"
#include "tests/util/redis_server.h"
#include "tests/util/test_util.h"

namespace drover::testing {
namespace {

class SchedulerRedisWaitTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = absl::StrCat(std::getenv("TEST_TMPDIR"), "/", ::testing::UnitTest::GetInstance()
                                                              ->current_test_info()
                                                              ->name());
    ASSERT_TRUE(MakeDirs(dir_).ok());
    auto redis = RedisServer::Start(dir_ + "/redis");
    ASSERT_TRUE(redis.ok()) << redis.status();
    redis_ = std::move(*redis);
    redis_->Stop();  // its port is known and nothing listens on it
  }
  void TearDown() override {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  // Starts the scheduler against the stopped Redis.
  void StartScheduler(const std::string& wait_ms) {
    SpawnOptions o;
    o.argv = {Runfile("scheduler/drover-scheduler"), "--port", "0", "--metrics-port", "-1",
              "--token-file", dir_ + "/token", "--ready-file", ready(), "--redis",
              redis_->address(), "--redis-wait-ms", wait_ms};
    o.stdout_path = o.stderr_path = log();
    auto pid = Spawn(o);
    ASSERT_TRUE(pid.ok()) << pid.status();
    pid_ = *pid;
  }
  // The scheduler's exit status once it has exited, or -1 while it runs.
  int ExitStatus() {
    int status = 0;
    if (pid_ <= 0 || ::waitpid(pid_, &status, WNOHANG) != pid_) return -1;
    pid_ = 0;
    return status;
  }
  std::string ready() const { return dir_ + "/ready.json"; }
  std::string log() const { return dir_ + "/scheduler.log"; }
  std::string Log() const { return TailFile(log(), 0, 4000); }

  std::string dir_;
  std::unique_ptr<RedisServer> redis_;
  pid_t pid_ = 0;
};

TEST_F(SchedulerRedisWaitTest, AHeadWaitsForARedisThatStartsAfterIt) {
  StartScheduler("60000");
  ASSERT_TRUE(WaitFor([&] { return absl::StrContains(Log(), "--redis-wait-ms"); })) << Log();
  EXPECT_EQ(ExitStatus(), -1) << "the head gave up instead of waiting\n" << Log();
  EXPECT_NE(::access(ready().c_str(), F_OK), 0) << "ready before its Redis answered";
  ASSERT_TRUE(redis_->Restart().ok());
  EXPECT_TRUE(WaitFor([&] { return ::access(ready().c_str(), F_OK) == 0; }, absl::Seconds(20)))
      << Log();
  EXPECT_EQ(ExitStatus(), -1) << Log();
}

TEST_F(SchedulerRedisWaitTest, WithoutPatienceTheHeadExitsNamingTheRedis) {
  StartScheduler("0");
  int status = -1;
  ASSERT_TRUE(WaitFor([&] { return (status = ExitStatus()) != -1; })) << Log();
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 2);
  EXPECT_TRUE(absl::StrContains(Log(), redis_->address())) << Log();
  EXPECT_TRUE(absl::StrContains(Log(), "is redis-server running?")) << Log();
}

}  // namespace
}  // namespace drover::testing
