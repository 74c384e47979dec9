#include "common/spawn.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

extern char** environ;

namespace drover {

absl::StatusOr<pid_t> Spawn(const SpawnOptions& o) {
  if (o.argv.empty() || o.argv[0].empty()) {
    return absl::InvalidArgumentError("cannot spawn an empty command");
  }
  std::vector<char*> argv;
  for (const auto& a : o.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::vector<char*> envp;
  for (const auto& e : o.env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);

  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  if (!o.cwd.empty()) posix_spawn_file_actions_addchdir_np(&fa, o.cwd.c_str());
  if (!o.stdin_path.empty()) {
    posix_spawn_file_actions_addopen(&fa, 0, o.stdin_path.c_str(), O_RDONLY, 0);
  }
  if (!o.stdout_path.empty()) {
    posix_spawn_file_actions_addopen(&fa, 1, o.stdout_path.c_str(),
                                     O_WRONLY | O_CREAT | O_APPEND, 0600);
  }
  if (!o.stderr_path.empty()) {
    posix_spawn_file_actions_addopen(&fa, 2, o.stderr_path.c_str(),
                                     O_WRONLY | O_CREAT | O_APPEND, 0600);
  }

  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  short flags = POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF;
  if (o.new_session) {
    flags |= POSIX_SPAWN_SETSID;
  } else if (o.new_process_group) {
    flags |= POSIX_SPAWN_SETPGROUP;
    posix_spawnattr_setpgroup(&attr, 0);
  }
  posix_spawnattr_setflags(&attr, flags);
  sigset_t empty, all;
  sigemptyset(&empty);
  sigfillset(&all);
  sigdelset(&all, SIGKILL);
  sigdelset(&all, SIGSTOP);
  posix_spawnattr_setsigmask(&attr, &empty);
  posix_spawnattr_setsigdefault(&attr, &all);

  pid_t pid = -1;
  char** env = o.env.empty() ? environ : envp.data();
  int rc = posix_spawnp(&pid, argv[0], &fa, &attr, argv.data(), env);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot start '", o.argv[0], "': ", strerror(rc),
        rc == ENOENT ? " (is it installed and in PATH?)" : ""));
  }
  return pid;
}

std::string SignalName(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  if (abbrev == nullptr) return absl::StrCat("signal ", sig);
  return absl::StrCat("SIG", abbrev);
}

std::string DescribeWaitStatus(int status) {
  if (WIFEXITED(status)) return absl::StrCat("exit code ", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return absl::StrCat("killed by ", SignalName(WTERMSIG(status)));
  return absl::StrCat("wait status ", status);
}

int PidfdOpen(pid_t pid) {
#ifdef SYS_pidfd_open
  return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
#else
  errno = ENOSYS;
  return -1;
#endif
}

std::string SelfExeDir() {
  char buf[4096];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return ".";
  std::string path(buf, n);
  auto slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

std::string FindDroverBinary(const std::string& name) {
  std::string dir = SelfExeDir();
  std::vector<std::string> candidates = {
      absl::StrCat(dir, "/", name),
      absl::StrCat(dir, "/../scheduler/", name),
      absl::StrCat(dir, "/../node_agent/", name),
      absl::StrCat(dir, "/../cli/", name),
      absl::StrCat(dir, "/../object_store/", name),
  };
  if (const char* bin = std::getenv("DROVER_BIN_DIR")) {
    candidates.insert(candidates.begin(), absl::StrCat(bin, "/", name));
  }
  if (const char* path = std::getenv("PATH")) {
    for (absl::string_view p : absl::StrSplit(path, ':')) {
      if (!p.empty()) candidates.push_back(absl::StrCat(p, "/", name));
    }
  }
  for (const auto& c : candidates) {
    if (::access(c.c_str(), X_OK) == 0) return c;
  }
  return "";
}

}  // namespace drover
