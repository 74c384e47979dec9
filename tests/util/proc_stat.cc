#include "tests/util/proc_stat.h"

#include <dirent.h>
#include <signal.h>
#include <sys/wait.h>

#include <cstdlib>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/files.h"

namespace drover::testing {

std::optional<ProcStat> ReadProcStat(pid_t pid) {
  absl::StatusOr<std::string> stat = ReadFile(absl::StrCat("/proc/", pid, "/stat"));
  if (!stat.ok()) return std::nullopt;
  // "pid (comm) state ppid ...": comm may hold spaces and parentheses, so it ends at the
  // last ')'.
  const size_t open = stat->find('(');
  const size_t close = stat->rfind(')');
  if (open == std::string::npos || close == std::string::npos || close + 4 > stat->size()) return std::nullopt;
  ProcStat p;
  p.pid = pid;
  p.comm = stat->substr(open + 1, close - open - 1);
  p.state = (*stat)[close + 2];
  p.ppid = std::atoi(stat->c_str() + close + 4);
  return p;
}

bool IsRunning(pid_t pid) {
  if (::kill(pid, 0) != 0) return false;
  const std::optional<ProcStat> p = ReadProcStat(pid);
  return p.has_value() && p->state != 'Z';
}

bool ReapedOrGone(pid_t pid) {
  int status;
  const pid_t r = ::waitpid(pid, &status, WNOHANG);
  if (r == pid) return true;
  if (r == 0) return false;  // our child, still running
  return !IsRunning(pid);
}

std::vector<pid_t> RunningChildren(pid_t parent, absl::string_view comm_prefix) {
  std::vector<pid_t> out;
  DIR* d = ::opendir("/proc");
  if (d == nullptr) return out;
  while (dirent* e = ::readdir(d)) {
    const pid_t pid = std::atoi(e->d_name);
    if (pid <= 0) continue;
    const std::optional<ProcStat> p = ReadProcStat(pid);
    if (p && p->state != 'Z' && p->ppid == parent && absl::StartsWith(p->comm, comm_prefix)) out.push_back(pid);
  }
  ::closedir(d);
  return out;
}

}  // namespace drover::testing
