// The campaign's teardown on a signal, on a fake cluster: processes that carry the
// cluster's token file, name its directory or work in it are stopped (one ignores
// SIGTERM, one is SIGSTOPped), unrelated ones are not (one names a directory whose
// name starts with the cluster's), the directory goes.
#include "tests/chaos/teardown.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>

#include "absl/strings/str_cat.h"
#include "common/files.h"
#include "common/spawn.h"
#include "gtest/gtest.h"
#include "tests/util/proc_stat.h"
#include "tests/util/test_util.h"

namespace drover::chaos {
namespace {

pid_t Start(const std::vector<std::string>& argv, const std::vector<std::string>& env,
            const std::string& cwd = "") {
  SpawnOptions o;
  o.argv = argv;
  o.env = env;
  o.env.push_back("PATH=/usr/bin:/bin");
  o.cwd = cwd;
  auto pid = Spawn(o);
  EXPECT_TRUE(pid.ok()) << pid.status();
  return pid.ok() ? *pid : -1;
}

bool Gone(pid_t pid) {
  // Our children: reap them, else they linger as zombies.
  int status;
  if (::waitpid(pid, &status, WNOHANG) == pid) return true;
  return ::kill(pid, 0) != 0;
}

TEST(TeardownTest, StopsEveryProcessOfTheClusterAndNothingElse) {
  const std::string dir = absl::StrCat(testing::TestTmpDir(), "/cluster-fake-", ::getpid());
  ASSERT_TRUE(MakeDirs(dir + "/redis").ok());
  const std::string token = dir + "/token";
  ASSERT_TRUE(WriteFileAtomic(token, "t\n", 0600).ok());
  const std::string token_env = "DROVER_TOKEN_FILE=" + token;
  // A worker (its token in the environment), stopped as a fault leaves it.
  const pid_t worker = Start({"/bin/sleep", "600"}, {token_env});
  // A daemon naming its directory that ignores SIGTERM.
  const pid_t daemon = Start({"/bin/sh", "-c", "trap '' TERM; while :; do sleep 1; done", dir}, {});
  // A redis-like process: only its working directory says whose it is.
  const pid_t redis = Start({"/bin/sleep", "600"}, {}, dir + "/redis");
  const pid_t stranger = Start({"/bin/sleep", "600"}, {});
  // Another cluster's directory whose name starts with this one's.
  const pid_t sibling = Start({"/bin/sh", "-c", "while :; do sleep 1; done", dir + "1"}, {});
  ASSERT_GT(sibling, 0);
  ASSERT_GT(worker, 0);
  ASSERT_GT(daemon, 0);
  ASSERT_GT(redis, 0);
  ASSERT_GT(stranger, 0);
  ::kill(worker, SIGSTOP);
  ASSERT_TRUE(testing::WaitFor(
      [&] { return ClusterProcesses(dir, token).size() >= 3; }, absl::Seconds(30)));

  // Reap our children as they die (the campaign's daemons are reaped by their parents).
  std::atomic<bool> stop{false};
  std::thread reaper([&] {
    while (!stop.load()) {
      for (pid_t p : {worker, daemon, redis}) ::waitpid(p, nullptr, WNOHANG);
      absl::SleepFor(absl::Milliseconds(20));
    }
  });
  std::vector<Proc> left = StopClusterProcesses(dir, token, absl::Seconds(1), absl::Seconds(60));
  stop = true;
  reaper.join();
  EXPECT_TRUE(left.empty()) << left.size() << " left, the first " << Show(left[0]);
  EXPECT_TRUE(testing::WaitFor([&] { return Gone(worker) && Gone(daemon) && Gone(redis); },
                               absl::Seconds(30)));
  EXPECT_FALSE(Gone(stranger)) << "a process not of the cluster was stopped";
  EXPECT_FALSE(Gone(sibling)) << "a process of " << dir << "1 was stopped";
  for (pid_t p : {stranger, sibling}) {
    ::kill(p, SIGKILL);
    ::waitpid(p, nullptr, 0);
  }

  RemoveTree(dir);
  EXPECT_FALSE(ReadFile(token).ok()) << dir << " is still there";
}

TEST(TeardownTest, AnEmptyRecordStopsNothing) {
  const pid_t stranger = Start({"/bin/sleep", "600"}, {});
  EXPECT_TRUE(StopClusterProcesses("", "", absl::Seconds(1), absl::Seconds(2)).empty());
  EXPECT_FALSE(Gone(stranger));
  ::kill(stranger, SIGKILL);
  ::waitpid(stranger, nullptr, 0);
}

TEST(SignalWatcherTest, ASignalIsHandedToTheWatcherThread) {
  std::atomic<int> got{0};
  {
    SignalWatcher watcher;
    ::raise(SIGTERM);  // before Start: kept until the thread runs
    watcher.Start([&](int sig) { got = sig; });
    EXPECT_TRUE(testing::WaitFor([&] { return got.load() != 0; }, absl::Seconds(30)));
  }
  EXPECT_EQ(got.load(), SIGTERM);
}

}  // namespace
}  // namespace drover::chaos
