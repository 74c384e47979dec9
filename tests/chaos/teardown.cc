#include "tests/chaos/teardown.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <filesystem>
#include <set>

#include "absl/time/clock.h"

namespace drover::chaos {
namespace {

constexpr int kSignals[] = {SIGTERM, SIGINT, SIGHUP};
int g_pipe[2] = {-1, -1};
struct sigaction g_previous[3];

void OnSignal(int sig) {
  const int saved = errno;
  const unsigned char b = static_cast<unsigned char>(sig);
  (void)!::write(g_pipe[1], &b, 1);
  errno = saved;
}

std::vector<Proc> Others(const std::string& cluster_dir, const std::string& token_file) {
  std::vector<Proc> out;
  for (Proc& p : ClusterProcesses(cluster_dir, token_file)) {
    if (p.pid != ::getpid()) out.push_back(std::move(p));
  }
  return out;
}

}  // namespace

std::vector<Proc> StopClusterProcesses(const std::string& cluster_dir,
                                       const std::string& token_file, absl::Duration grace,
                                       absl::Duration within) {
  // An empty directory would match every command line on the machine.
  if (cluster_dir.empty() || token_file.empty()) return {};
  const absl::Time start = absl::Now();
  std::set<pid_t> termed;
  std::vector<Proc> left = Others(cluster_dir, token_file);
  for (const Proc& p : left) {
    ::kill(p.pid, SIGTERM);
    termed.insert(p.pid);
  }
  // A stopped process (SIGSTOP, a fault) takes no SIGTERM until it runs again.
  for (const Proc& p : left) ::kill(p.pid, SIGCONT);
  // Done once two scans in a row find nothing: a process being started by someone
  // who has not seen the stop yet shows up in the second.
  int empty_scans = left.empty() ? 1 : 0;
  while (empty_scans < 2 && absl::Now() - start < within) {
    absl::SleepFor(absl::Milliseconds(200));
    left = Others(cluster_dir, token_file);
    empty_scans = left.empty() ? empty_scans + 1 : 0;
    const bool grace_over = absl::Now() - start >= grace;
    for (const Proc& p : left) {
      if (grace_over || termed.count(p.pid) == 0) ::kill(p.pid, SIGKILL);
    }
  }
  return left;
}

void RemoveTree(const std::string& dir) {
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
}

SignalWatcher::SignalWatcher() {
  if (g_pipe[0] < 0 && ::pipe2(g_pipe, O_CLOEXEC) != 0) return;
  for (size_t i = 0; i < std::size(kSignals); ++i) {
    struct sigaction sa {};
    sa.sa_handler = OnSignal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    ::sigaction(kSignals[i], &sa, &g_previous[i]);
  }
}

SignalWatcher::~SignalWatcher() {
  for (size_t i = 0; i < std::size(kSignals); ++i) ::sigaction(kSignals[i], &g_previous[i], nullptr);
  if (thread_.joinable()) {
    const unsigned char stop = 0;
    (void)!::write(g_pipe[1], &stop, 1);
    thread_.join();
  }
}

void SignalWatcher::Start(std::function<void(int sig)> on_signal) {
  if (g_pipe[0] < 0 || thread_.joinable()) return;
  thread_ = std::thread([on_signal = std::move(on_signal)] {
    for (;;) {
      unsigned char b = 0;
      const ssize_t n = ::read(g_pipe[0], &b, 1);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0 || b == 0) return;
      on_signal(b);
      return;  // once: later signals wait in the pipe, unread
    }
  });
}

}  // namespace drover::chaos
