#include "tests/util/driver_program.h"

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

std::string DriverRun::Get(const std::string& key) const {
  auto it = kv.find(key);
  return it == kv.end() ? "<missing " + key + ">" : it->second;
}

pid_t StartDriver(const TestCluster& cluster, const std::string& binary,
                  const std::vector<std::string>& args, const std::string& base) {
  SpawnOptions o;
  o.argv = {binary.rfind('/', 0) == 0 ? binary : Runfile(binary)};
  o.argv.insert(o.argv.end(), args.begin(), args.end());
  for (char** e = environ; *e; ++e) {
    if (!absl::StartsWith(*e, "DROVER_")) o.env.push_back(*e);
  }
  o.env.push_back("DROVER_ADDRESS=" + cluster.address());
  o.env.push_back("DROVER_TOKEN_FILE=" + cluster.token_file());
  o.env.push_back("DROVER_HOME=" + cluster.dir() + "/home");
  o.stdout_path = base + ".out";
  o.stderr_path = base + ".err";
  auto pid = Spawn(o);
  EXPECT_TRUE(pid.ok()) << pid.status();
  return pid.ok() ? *pid : -1;
}

DriverRun FinishDriver(const TestCluster& cluster, pid_t pid, const std::string& base,
                       absl::Duration timeout) {
  DriverRun r;
  int status = 0;
  const bool done = pid > 0 && WaitFor([&] { return ::waitpid(pid, &status, WNOHANG) == pid; }, timeout);
  if (!done && pid > 0) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, &status, 0);
  }
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = ReadFile(base + ".out").value_or("");
  r.err = ReadFile(base + ".err").value_or("");
  std::string key;
  for (absl::string_view line : absl::StrSplit(r.out, '\n')) {
    const size_t eq = line.find('=');
    if (eq != absl::string_view::npos && eq > 0 && line.find(' ') > eq) {
      key = std::string(line.substr(0, eq));
      r.kv[key] = std::string(line.substr(eq + 1));
    } else if (!key.empty() && !line.empty()) {
      absl::StrAppend(&r.kv[key], "\n", line);
    }
  }
  if (!done) {
    ADD_FAILURE() << "the driver did not finish in time; its output:\n" << r.All() << cluster.DaemonLogs();
  }
  return r;
}

DriverRun RunDriver(const TestCluster& cluster, const std::string& binary,
                    const std::vector<std::string>& args, absl::Duration timeout) {
  static int n = 0;
  const std::string base = absl::StrCat(cluster.dir(), "/driver-", ::getpid(), "-", ++n);
  return FinishDriver(cluster, StartDriver(cluster, binary, args, base), base, timeout);
}

TestCluster* TwoNodeClusterTest::cluster_ = nullptr;

void TwoNodeClusterTest::SetUpTestSuite() {
  TestClusterOptions o;
  o.nodes = 2;
  o.cpus_per_node = 4;
  auto c = TestCluster::Start(o);
  ASSERT_TRUE(c.ok()) << c.status();
  cluster_ = c->release();
}

void TwoNodeClusterTest::TearDownTestSuite() {
  delete cluster_;
  cluster_ = nullptr;
}

}  // namespace drover::testing
