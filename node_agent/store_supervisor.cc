#include "node_agent/store_supervisor.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/files.h"
#include "common/log.h"
#include "common/paths.h"
#include "common/spawn.h"

namespace drover {
namespace {

constexpr absl::Duration kProbeInterval = absl::Milliseconds(10);
// Without a pidfd (kernel < 5.3) exits are noticed by polling at this interval.
constexpr absl::Duration kExitPollInterval = absl::Milliseconds(100);

// True if something accepts connections on the Unix socket `path`.
bool SocketAnswers(const std::string& path) {
  sockaddr_un addr{};
  if (path.size() >= sizeof(addr.sun_path)) return false;
  addr.sun_family = AF_UNIX;
  memcpy(addr.sun_path, path.data(), path.size());
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  bool ok = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  close(fd);
  return ok;
}

enum class Wake { kExited, kStop, kTimeout };

// Waits until `pid` exits (reaping it into *status), `stop_fd` is readable, or `d`.
Wake WaitExit(pid_t pid, int pidfd, int stop_fd, absl::Duration d, int* status) {
  absl::Time deadline = d == absl::InfiniteDuration() ? absl::InfiniteFuture() : absl::Now() + d;
  while (true) {
    pid_t r = waitpid(pid, status, WNOHANG);
    if (r == pid || (r < 0 && errno == ECHILD)) return Wake::kExited;
    absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) return Wake::kTimeout;
    absl::Duration step = pidfd >= 0 ? left : std::min(left, kExitPollInterval);
    int ms = step == absl::InfiniteDuration()
                 ? -1
                 : static_cast<int>(std::min<int64_t>(
                       absl::ToInt64Milliseconds(absl::Ceil(step, absl::Milliseconds(1))),
                       1 << 30));
    pollfd fds[2] = {{stop_fd, POLLIN, 0}, {pidfd, POLLIN, 0}};
    int n = poll(fds, pidfd >= 0 ? 2 : 1, ms);
    if (n > 0 && (fds[0].revents & POLLIN)) return Wake::kStop;
  }
}

}  // namespace

absl::StatusOr<std::string> StoreSocketPath(const std::string& agent_dir) {
  absl::StatusOr<std::string> dir = SocketDir(agent_dir, "store", "store.sock");
  if (!dir.ok()) return dir.status();
  return absl::StrCat(*dir, "/store.sock");
}

StoreSupervisor::StoreSupervisor(StoreSupervisorOptions options) : options_(std::move(options)) {}

StoreSupervisor::~StoreSupervisor() { Stop(); }

pid_t StoreSupervisor::pid() {
  absl::MutexLock lock(&mu_);
  return pid_;
}

absl::Time StoreSupervisor::last_death() {
  absl::MutexLock lock(&mu_);
  return last_death_;
}

int StoreSupervisor::restarts() {
  absl::MutexLock lock(&mu_);
  return restarts_;
}

bool StoreSupervisor::Stopping() {
  absl::MutexLock lock(&mu_);
  return stopping_;
}

absl::Status StoreSupervisor::Start() {
  if (options_.binary.empty()) {
    options_.binary = FindDroverBinary("drover-object-store");
    if (options_.binary.empty()) {
      return absl::FailedPreconditionError(
          "drover-object-store not found next to drover-agent, in ../object_store/ or in "
          "PATH; install it next to drover-agent, or run the agent with --no-object-store");
    }
  }
  if (options_.socket_path.empty() || options_.socket_path.size() > 107) {
    return absl::InvalidArgumentError(absl::StrCat("object store socket path '",
                                                   options_.socket_path,
                                                   "' must be 1..107 bytes"));
  }
  stop_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (stop_fd_ < 0) return absl::InternalError(absl::StrCat("eventfd: ", strerror(errno)));
  {
    absl::MutexLock lock(&mu_);
    started_ = true;
  }
  thread_ = std::thread([this] { Run(); });
  absl::MutexLock lock(&mu_);
  while (!first_done_) cv_.Wait(&mu_);
  return first_status_;
}

void StoreSupervisor::Stop() {
  {
    absl::MutexLock lock(&mu_);
    if (!started_ || stopping_) return;
    stopping_ = true;
  }
  uint64_t one = 1;
  ssize_t n = write(stop_fd_, &one, sizeof(one));
  (void)n;
  if (thread_.joinable()) thread_.join();
  close(stop_fd_);
  stop_fd_ = -1;
}

bool StoreSupervisor::PauseOrStop(absl::Duration d) {
  pollfd fd = {stop_fd_, POLLIN, 0};
  int ms = static_cast<int>(absl::ToInt64Milliseconds(d));
  return poll(&fd, 1, ms) > 0 || Stopping();
}

void StoreSupervisor::Terminate(pid_t pid, int pidfd, absl::Duration grace) {
  int status = 0;
  kill(pid, SIGTERM);
  // The stop eventfd stays readable: wait on the pid alone.
  if (WaitExit(pid, pidfd, -1, grace, &status) != Wake::kExited) {
    DROVER_LOG(WARNING) << "object store (pid " << pid << ") did not stop within "
                        << absl::FormatDuration(grace) << " of SIGTERM; sending SIGKILL";
    kill(pid, SIGKILL);
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
  }
}

absl::Status StoreSupervisor::SpawnAndWaitReady(pid_t* pid, int* pidfd) {
  SpawnOptions so;
  so.argv = {options_.binary, "--socket", options_.socket_path, "--parent-pid",
             absl::StrCat(getpid())};
  if (options_.capacity > 0) {
    so.argv.insert(so.argv.end(), {"--capacity", absl::StrCat(options_.capacity)});
  }
  if (!options_.spill_dir.empty()) {
    so.argv.insert(so.argv.end(), {"--spill-dir", options_.spill_dir, "--spill-capacity",
                                   absl::StrCat(options_.spill_capacity)});
  }
  so.stdout_path = so.stderr_path = options_.log_path;
  // Its own group: a Ctrl-C meant for the agent does not stop it before the workers.
  so.new_process_group = true;
  int64_t log_start = FileSize(options_.log_path);
  absl::StatusOr<pid_t> spawned = Spawn(so);
  if (!spawned.ok()) return spawned.status();
  *pid = *spawned;
  *pidfd = PidfdOpen(*pid);
  {
    absl::MutexLock lock(&mu_);
    pid_ = *pid;
  }
  absl::Time deadline = absl::Now() + options_.start_timeout;
  while (true) {
    if (SocketAnswers(options_.socket_path)) return absl::OkStatus();
    int status = 0;
    Wake w = WaitExit(*pid, *pidfd, stop_fd_, kProbeInterval, &status);
    if (w == Wake::kExited) {
      {
        absl::MutexLock lock(&mu_);
        pid_ = 0;
      }
      if (*pidfd >= 0) close(*pidfd);
      *pidfd = -1;
      return absl::FailedPreconditionError(absl::StrCat(
          "drover-object-store exited before serving (", DescribeWaitStatus(status),
          "); its log (", options_.log_path, "):\n",
          TailFile(options_.log_path, log_start, 2000)));
    }
    if (w == Wake::kStop) return absl::CancelledError("stopping");
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          "drover-object-store (pid ", *pid, ") did not answer on ", options_.socket_path,
          " within ", absl::FormatDuration(options_.start_timeout), "; its log:\n",
          TailFile(options_.log_path, log_start, 2000)));
    }
  }
}

void StoreSupervisor::Run() {
  bool first = true;
  absl::Duration pause = options_.min_restart_pause;
  while (true) {
    pid_t pid = 0;
    int pidfd = -1;
    absl::Time started = absl::Now();
    absl::Status s = SpawnAndWaitReady(&pid, &pidfd);
    if (!s.ok() && pid > 0) {
      // Not ready (deadline or stop) but maybe alive: end it.
      {
        absl::MutexLock lock(&mu_);
        if (pid_ != 0) {
          pid_ = 0;
        } else {
          pid = 0;  // already reaped
        }
      }
      if (pid > 0) Terminate(pid, pidfd, options_.stop_grace);
      if (pidfd >= 0) close(pidfd);
    }
    if (first) {
      first = false;
      absl::MutexLock lock(&mu_);
      first_done_ = true;
      first_status_ = s;
      cv_.SignalAll();
      if (!s.ok()) return;
    }
    if (s.ok()) {
      DROVER_LOG(INFO) << "object store (pid " << pid << ") serving on "
                       << options_.socket_path;
      int status = 0;
      Wake w = WaitExit(pid, pidfd, stop_fd_, absl::InfiniteDuration(), &status);
      {
        absl::MutexLock lock(&mu_);
        pid_ = 0;
        if (w != Wake::kStop) last_death_ = absl::Now();
      }
      if (w == Wake::kStop) {
        Terminate(pid, pidfd, options_.stop_grace);
        if (pidfd >= 0) close(pidfd);
        DROVER_LOG(INFO) << "object store (pid " << pid << ") stopped";
        return;
      }
      if (pidfd >= 0) close(pidfd);
      DROVER_LOG(ERROR) << "object store (pid " << pid << ") died: "
                        << DescribeWaitStatus(status)
                        << "; its objects are lost; restarting it (log: " << options_.log_path
                        << ")";
    } else if (s.code() == absl::StatusCode::kCancelled) {
      return;
    } else {
      DROVER_LOG(ERROR) << "cannot restart the object store: " << s.message();
    }
    if (absl::Now() - started >= options_.stable_after) pause = options_.min_restart_pause;
    if (PauseOrStop(pause)) return;
    pause = std::min(pause * 2, options_.max_restart_pause);
    absl::MutexLock lock(&mu_);
    ++restarts_;
  }
}

}  // namespace drover
