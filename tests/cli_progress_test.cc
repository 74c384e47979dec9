// `drover run` and `drover up` progress as a user sees it: on a terminal (a real
// pseudo-terminal, read back byte for byte) a status line with the job's phase or the
// nodes coming up, never mixed into the job's output lines; through pipes and files,
// no progress at all.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include <atomic>
#include <regex>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/files.h"
#include "common/spawn.h"
#include "gtest/gtest.h"
#include "tests/util/test_cluster.h"

namespace drover::testing {
namespace {

// A pseudo-terminal in raw mode (what a program writes is read back unchanged, "\n"
// not turned into "\r\n"), 200 columns wide. A child gets its slave side as stdout and
// stderr (by path); everything it writes is collected by a reader thread.
class Terminal {
 public:
  Terminal() {
    master_ = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
    EXPECT_GE(master_, 0);
    EXPECT_EQ(grantpt(master_), 0);
    EXPECT_EQ(unlockpt(master_), 0);
    path_ = ptsname(master_);
    // Kept open so that reads do not fail between children.
    slave_ = open(path_.c_str(), O_RDWR | O_NOCTTY | O_CLOEXEC);
    EXPECT_GE(slave_, 0);
    termios t;
    tcgetattr(slave_, &t);
    cfmakeraw(&t);
    tcsetattr(slave_, TCSANOW, &t);
    winsize ws{};
    ws.ws_col = 200;
    ws.ws_row = 50;
    ioctl(master_, TIOCSWINSZ, &ws);
    reader_ = std::thread([this] { ReadLoop(); });
  }
  ~Terminal() {
    stop_ = true;
    reader_.join();
    close(slave_);
    close(master_);
  }

  const std::string& path() const { return path_; }
  std::string text() {
    absl::MutexLock lock(&mu_);
    return text_;
  }
  bool WaitForText(const std::string& needle, absl::Duration timeout = absl::Seconds(30)) {
    return WaitFor([&] { return absl::StrContains(text(), needle); }, timeout);
  }
  // Everything written so far, once the reader has taken it all in (a poll that found
  // nothing to read after this call began). For output of a child that has exited:
  // right after the exit the reader may not have read its last lines yet (under load).
  std::string Drained(absl::Duration timeout = absl::Seconds(30)) {
    const int64_t since = idle_polls_.load();
    EXPECT_TRUE(WaitFor([&] { return idle_polls_.load() >= since + 2; }, timeout))
        << "the terminal's reader did not drain it";
    return text();
  }

 private:
  void ReadLoop() {
    char buf[4096];
    while (!stop_) {
      pollfd p{master_, POLLIN, 0};
      if (poll(&p, 1, 20) <= 0) {
        ++idle_polls_;
        continue;
      }
      ssize_t n = read(master_, buf, sizeof(buf));
      if (n <= 0) continue;
      absl::MutexLock lock(&mu_);
      text_.append(buf, n);
    }
  }

  int master_ = -1;
  int slave_ = -1;
  std::string path_;
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> idle_polls_{0};
  std::thread reader_;
  absl::Mutex mu_;
  std::string text_ ABSL_GUARDED_BY(mu_);
};

// Starts the `drover` CLI with `args` writing to `terminal` (stdout and stderr), with
// the caller's environment plus `env`.
pid_t StartOnTerminal(const Terminal& terminal, const std::vector<std::string>& args,
                      const std::vector<std::string>& env) {
  SpawnOptions o;
  o.argv = {Runfile("cli/drover")};
  o.argv.insert(o.argv.end(), args.begin(), args.end());
  for (char** e = environ; *e; ++e) o.env.push_back(*e);
  o.env.push_back("TERM=xterm");
  o.env.insert(o.env.end(), env.begin(), env.end());
  o.stdout_path = o.stderr_path = terminal.path();
  auto pid = Spawn(o);
  EXPECT_TRUE(pid.ok()) << pid.status();
  return pid.ok() ? *pid : -1;
}

// The exit code of `pid` once it exits (-1 if it is still running after `timeout`:
// then it is killed).
int WaitExit(pid_t pid, absl::Duration timeout = absl::Seconds(60)) {
  int status = 0;
  bool done = WaitFor([&] { return waitpid(pid, &status, WNOHANG) == pid; }, timeout);
  if (!done) {
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    return -1;
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// Every line of output that contains `marker` starts on a clean line (after a newline
// or after the status line was erased: "\r" ESC "[K") and has no status text drawn
// into it before its newline.
void ExpectCleanLines(const std::string& screen, const std::string& marker) {
  int seen = 0;
  for (size_t at = screen.find(marker); at != std::string::npos;
       at = screen.find(marker, at + 1)) {
    ++seen;
    const size_t start = screen.rfind('\n', at) == std::string::npos ? 0 : screen.rfind('\n', at) + 1;
    const std::string before = screen.substr(start, at - start);
    EXPECT_TRUE(before.empty() || absl::EndsWith(before, "\r\033[K"))
        << "output line does not start on a clean line: ..." << before << marker;
    const size_t end = screen.find('\n', at);
    ASSERT_NE(end, std::string::npos);
    EXPECT_EQ(screen.substr(at, end - at).find('\r'), std::string::npos)
        << "status drawn into an output line: " << screen.substr(at, end - at);
  }
  EXPECT_GT(seen, 0) << "no line with " << marker << " in:\n" << screen;
}

TEST(CliProgressTest, RunShowsPendingThenRunningOnATerminalAndKeepsOutputLinesClean) {
  TestClusterOptions options;
  options.nodes = 2;
  options.cpus_per_node = 2;
  auto cluster = TestCluster::Start(options);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  TestCluster& c = **cluster;
  const std::string go = c.dir() + "/go", finish = c.dir() + "/finish";

  // A job holding every CPU until `go` exists: the run below waits behind it.
  std::string out, err;
  ASSERT_EQ(c.RunCli({"submit", "--nodes", "2", "--nproc-per-node", "1", "--cpus-per-proc", "2",
                      "--", "sh", "-c", "while [ ! -e " + go + " ]; do sleep 0.02; done"},
                     &out, &err),
            0)
      << err;

  Terminal terminal;
  pid_t run = StartOnTerminal(
      terminal,
      {"run", "--nodes", "2", "--nproc-per-node", "1", "--cpus-per-proc", "2", "--", "sh", "-c",
       "echo out-$RANK; echo err-$RANK >&2; while [ ! -e " + finish +
           " ]; do sleep 0.02; done; echo done-$RANK"},
      {"DROVER_ADDRESS=" + c.address(), "DROVER_TOKEN_FILE=" + c.token_file(),
       "DROVER_HOME=" + c.dir() + "/home"});
  ASSERT_GT(run, 0);
  // Pending, with the reason, while the first job holds the CPUs.
  ASSERT_TRUE(terminal.WaitForText(" pending ")) << terminal.text();
  EXPECT_TRUE(std::regex_search(terminal.text(),
                                std::regex("\rdrover: job-[^ ]+ pending [0-9]+s: [^\r]+\033\\[K")))
      << terminal.text();
  ASSERT_TRUE(WriteFileAtomic(go, "").ok());
  // Running once both ranks are spawned, with the time they have run.
  ASSERT_TRUE(terminal.WaitForText("2/2 ranks alive on 2 nodes")) << terminal.text();
  EXPECT_TRUE(std::regex_search(terminal.text(),
                                std::regex("\rdrover: job-[^ ]+ running [0-9]+s: 2/2 ranks")))
      << terminal.text();
  ASSERT_TRUE(terminal.WaitForText("[rank1]: err-1")) << terminal.text();
  ASSERT_TRUE(WriteFileAtomic(finish, "").ok());
  EXPECT_EQ(WaitExit(run), 0) << terminal.text();
  const std::string screen = terminal.Drained();
  EXPECT_TRUE(absl::StrContains(screen, "SUCCEEDED in")) << screen;
  for (const char* marker : {"[rank0]: out-0", "[rank1]: out-1", "[rank0]: err-0",
                             "[rank1]: err-1", "[rank0]: done-0", "[rank1]: done-1"}) {
    ExpectCleanLines(screen, marker);
  }
  // The line was erased before the summary, and nothing is drawn after it.
  EXPECT_TRUE(std::regex_search(
      screen, std::regex("(\n|\r\033\\[K)drover: job-[^ ]+ SUCCEEDED in [^\r]*\n$")))
      << screen;

  // The same through pipes and files: no progress at all.
  ASSERT_EQ(c.RunCli({"run", "--nproc", "2", "--", "sh", "-c", "echo piped-$RANK"}, &out, &err), 0)
      << err;
  EXPECT_TRUE(absl::StrContains(out, "[rank1]: piped-1")) << out;
  EXPECT_EQ(err.find('\r'), std::string::npos) << err;
  EXPECT_EQ(err.find('\033'), std::string::npos) << err;
  EXPECT_FALSE(absl::StrContains(err, "ranks alive")) << err;
}

TEST(CliProgressTest, UpShowsNodesRegisteringOnATerminalOnly) {
  const std::string home = TestTmpDir() + "/up-home";
  ASSERT_TRUE(MakeDirs(home).ok());
  const std::vector<std::string> env = {"DROVER_HOME=" + home, "DROVER_ADDRESS=",
                                        "DROVER_TOKEN_FILE="};
  std::string out, err;
  {
    Terminal terminal;
    pid_t up = StartOnTerminal(terminal, {"up", "--nodes", "2", "--cpus-per-node", "1"}, env);
    ASSERT_GT(up, 0);
    EXPECT_EQ(WaitExit(up), 0) << terminal.text();
    const std::string screen = terminal.Drained();
    EXPECT_TRUE(std::regex_search(screen, std::regex("\rdrover: [0-2] of 2 nodes registered")))
        << screen;
    ExpectCleanLines(screen, "drover: 2 nodes ready");
    RunDrover({"down"}, env, home, &out, &err);
  }
  ASSERT_EQ(RunDrover({"up", "--nodes", "1", "--cpus-per-node", "1"}, env, home, &out, &err), 0)
      << err;
  EXPECT_TRUE(absl::StrContains(err, "1 node ready")) << err;
  EXPECT_EQ(err.find('\r'), std::string::npos) << err;
  EXPECT_FALSE(absl::StrContains(err, "registered")) << err;
  EXPECT_EQ(RunDrover({"down"}, env, home, &out, &err), 0) << err;
}

}  // namespace
}  // namespace drover::testing
