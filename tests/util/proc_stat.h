// What /proc/<pid>/stat says about a process, for tests that watch the daemons they
// start: whether a process still runs (a zombie its parent has yet to reap has finished
// running) and which children a daemon has.
#ifndef DROVER_TESTS_UTIL_PROC_STAT_H_
#define DROVER_TESTS_UTIL_PROC_STAT_H_

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace drover::testing {

struct ProcStat {
  pid_t pid = 0;
  pid_t ppid = 0;
  char state = '?';  // 'R', 'S', 'T' (stopped), 'Z' (zombie), ...
  std::string comm;  // cut at 15 characters by the kernel
};

// The process's stat line, parsed; nullopt once it does not exist (or the line does not
// parse).
std::optional<ProcStat> ReadProcStat(pid_t pid);

// True while `pid` runs: it exists and is not a zombie.
bool IsRunning(pid_t pid);

// True once `pid` is gone: reaped here if it is this process's child; otherwise (a
// process another program started and left, adopted by init) once it no longer runs.
bool ReapedOrGone(pid_t pid);

// Running (not zombie) children of `parent` whose comm starts with `comm_prefix`.
std::vector<pid_t> RunningChildren(pid_t parent, absl::string_view comm_prefix);

}  // namespace drover::testing

#endif  // DROVER_TESTS_UTIL_PROC_STAT_H_
