#include "tests/util/driver_process.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/files.h"
#include "common/spawn.h"
#include "gtest/gtest.h"
#include "tests/util/test_util.h"

extern char** environ;

namespace drover::testing {

DriverProcess::DriverProcess(const TestCluster& cluster, const std::vector<std::string>& argv,
                             const std::vector<std::string>& env) {
  static int n = 0;
  base_ = absl::StrCat(cluster.dir(), "/driver-process-", ::getpid(), "-", ++n);
  SpawnOptions o;
  o.argv = argv;
  for (char** e = environ; *e; ++e) {
    if (!absl::StartsWith(*e, "DROVER_")) o.env.push_back(*e);
  }
  o.env.push_back("DROVER_ADDRESS=" + cluster.address());
  o.env.push_back("DROVER_TOKEN_FILE=" + cluster.token_file());
  o.env.push_back("DROVER_HOME=" + cluster.dir() + "/home");
  o.env.insert(o.env.end(), env.begin(), env.end());
  o.stdout_path = base_ + ".out";
  o.stderr_path = base_ + ".err";
  auto pid = Spawn(o);
  EXPECT_TRUE(pid.ok()) << pid.status();
  pid_ = pid.ok() ? *pid : -1;
}

DriverProcess::~DriverProcess() {
  if (pid_ > 0) {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
}

std::map<std::string, std::string> DriverProcess::Output() const {
  std::map<std::string, std::string> kv;
  for (absl::string_view line : absl::StrSplit(ReadFile(base_ + ".out").value_or(""), '\n')) {
    const size_t eq = line.find('=');
    if (eq != absl::string_view::npos && eq > 0) {
      kv[std::string(line.substr(0, eq))] = std::string(line.substr(eq + 1));
    }
  }
  return kv;
}

std::string DriverProcess::WaitFor(const std::string& key, absl::Duration timeout) {
  std::string value;
  testing::WaitFor(
      [&] {
        auto kv = Output();
        auto it = kv.find(key);
        if (it != kv.end()) value = it->second;
        return it != kv.end();
      },
      timeout);
  return value;
}

int DriverProcess::Wait(absl::Duration timeout) {
  int status = 0;
  if (!testing::WaitFor([&] { return ::waitpid(pid_, &status, WNOHANG) == pid_; }, timeout)) {
    return -1;
  }
  pid_ = -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

std::string DriverProcess::Logs() const {
  return ReadFile(base_ + ".out").value_or("") + ReadFile(base_ + ".err").value_or("");
}

}  // namespace drover::testing
