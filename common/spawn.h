// Process creation by exec only: posix_spawn(3), never a bare fork of a process that
// may have threads (see docs/architecture.md, "Process model").
#ifndef DROVER_COMMON_SPAWN_H_
#define DROVER_COMMON_SPAWN_H_

#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace drover {

struct SpawnOptions {
  // argv[0] is searched in the *caller's* PATH unless it contains a '/'.
  std::vector<std::string> argv;
  // Full environment (KEY=VALUE). If empty, the caller's environment is inherited.
  std::vector<std::string> env;
  // Working directory for the child; empty keeps the caller's.
  std::string cwd;
  // Redirections; empty means inherit. Files are created 0600 and appended to.
  std::string stdin_path = "/dev/null";
  std::string stdout_path;
  std::string stderr_path;
  // Put the child in a new process group (pgid = its pid), so the whole group can be
  // signalled at once.
  bool new_process_group = false;
  // Start a new session (daemons that must outlive a terminal).
  bool new_session = false;
};

// Spawns the child with default signal dispositions and an empty signal mask.
// Returns its pid; the caller must reap it.
absl::StatusOr<pid_t> Spawn(const SpawnOptions& options);

// "SIGKILL", "SIGSEGV", ... or "signal N".
std::string SignalName(int sig);

// "exit code 3" / "killed by SIGKILL" for a waitpid(2) status.
std::string DescribeWaitStatus(int status);

// The directory holding the running executable (from /proc/self/exe).
std::string SelfExeDir();

// A pidfd for `pid` (readable once it exits; poll(2) it), or -1 with errno set
// (ENOSYS on kernels before 5.3: fall back to polling waitpid).
int PidfdOpen(pid_t pid);

// Finds a drover binary: next to the running executable, in the sibling directories
// of a Bazel output tree (../scheduler, ../node_agent, ../cli, ../object_store), then
// in PATH.
// Returns "" if not found.
std::string FindDroverBinary(const std::string& name);

}  // namespace drover

#endif  // DROVER_COMMON_SPAWN_H_
