#include "tests/chaos/cluster_env.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/files.h"
#include "common/spawn.h"
#include "tests/util/test_util.h"

extern char** environ;

namespace drover::chaos {

RunResult RunWithCluster(const ClusterEnv& env, const std::vector<std::string>& argv,
                         absl::Duration timeout) {
  static std::atomic<int> n{0};
  const std::string base = absl::StrCat(env.scratch, "/run-", ::getpid(), "-", n++);
  SpawnOptions o;
  o.argv = argv;
  for (char** e = environ; *e != nullptr; ++e) {
    if (!absl::StartsWith(*e, "DROVER_")) o.env.push_back(*e);
  }
  o.env.push_back("DROVER_ADDRESS=" + env.address);
  o.env.push_back("DROVER_TOKEN_FILE=" + env.token_file);
  o.env.push_back("DROVER_HOME=" + env.home);
  o.stdout_path = base + ".out";
  o.stderr_path = base + ".err";
  RunResult r;
  r.started = absl::Now();
  auto pid = Spawn(o);
  if (!pid.ok()) {
    r.err = std::string(pid.status().message());
    r.ended = absl::Now();
    return r;
  }
  int status = 0;
  r.timed_out = !testing::WaitFor([&] { return ::waitpid(*pid, &status, WNOHANG) == *pid; },
                                  timeout);
  if (r.timed_out) {
    ::kill(*pid, SIGKILL);
    while (::waitpid(*pid, &status, 0) < 0 && errno == EINTR) {
    }
  }
  r.ended = absl::Now();
  if (!r.timed_out) r.exit = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = ReadFile(base + ".out").value_or("");
  r.err = ReadFile(base + ".err").value_or("");
  ::unlink((base + ".out").c_str());
  ::unlink((base + ".err").c_str());
  return r;
}

}  // namespace drover::chaos
