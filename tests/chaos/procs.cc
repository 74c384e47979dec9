#include "tests/chaos/procs.h"

#include <dirent.h>
#include <unistd.h>

#include <cstdlib>
#include <functional>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/files.h"
#include "tests/util/proc_stat.h"

namespace drover::chaos {
namespace {

bool ReadStat(pid_t pid, Proc* p) {
  const std::optional<testing::ProcStat> stat = testing::ReadProcStat(pid);
  if (!stat) return false;
  p->pid = pid;
  p->comm = stat->comm;
  p->state = stat->state;
  p->ppid = stat->ppid;
  p->launcher = p->comm == "drover-launch";
  return true;
}

// Calls `fn` with each live process, its environment and its command line
// (NUL-separated).
void ForEachProcess(const std::function<void(Proc&, const std::string& env,
                                             const std::string& cmdline)>& fn) {
  DIR* d = ::opendir("/proc");
  if (d == nullptr) return;
  while (dirent* e = ::readdir(d)) {
    const pid_t pid = std::atoi(e->d_name);
    Proc p;
    if (pid <= 0 || !ReadStat(pid, &p) || p.state == 'Z') continue;
    auto env = ReadFile(absl::StrCat("/proc/", pid, "/environ"));
    auto cmd = ReadFile(absl::StrCat("/proc/", pid, "/cmdline"));
    const std::string empty;
    fn(p, env.ok() ? *env : empty, cmd.ok() ? *cmd : empty);
  }
  ::closedir(d);
}

// Fills job/task_worker from the environment; true if it names `token_file`.
bool FromEnvironment(const std::string& env, const std::string& token_file, Proc* p) {
  bool ours = false;
  for (absl::string_view kv : absl::StrSplit(env, '\0')) {
    if (absl::ConsumePrefix(&kv, "DROVER_JOB_ID=")) {
      p->job = std::string(kv);
    } else if (absl::ConsumePrefix(&kv, "DROVER_NODE_ID=")) {
      p->node = std::string(kv);
    } else if (absl::ConsumePrefix(&kv, "DROVER_TOKEN_FILE=")) {
      ours = kv == token_file;
    } else if (absl::StartsWith(kv, "DROVER_WORKER_ID=")) {
      p->task_worker = true;
    }
  }
  return ours;
}

// Whether the command line (NUL-separated) names `dir` or a path under it: not a
// directory whose name merely starts the same (/tmp/cluster-12-0 vs /tmp/cluster-12-01).
bool Mentions(absl::string_view cmdline, const std::string& dir) {
  if (dir.empty()) return false;
  for (size_t at = cmdline.find(dir); at != absl::string_view::npos;
       at = cmdline.find(dir, at + 1)) {
    const size_t next = at + dir.size();
    if (next == cmdline.size() || cmdline[next] == '/' || cmdline[next] == '\0' ||
        cmdline[next] == ' ' || cmdline[next] == '=' || cmdline[next] == ':') {
      return true;
    }
  }
  return false;
}

// Whether the process's working directory is `dir` or below it (a redis-server, whose
// command line names only its address, works in the cluster's redis directory).
bool WorksUnder(pid_t pid, const std::string& dir) {
  char buf[4096];
  const std::string link = absl::StrCat("/proc/", pid, "/cwd");
  const ssize_t n = ::readlink(link.c_str(), buf, sizeof(buf));
  if (n <= 0 || dir.empty()) return false;
  const absl::string_view cwd(buf, static_cast<size_t>(n));
  return cwd == dir || absl::StartsWith(cwd, dir + "/");
}

}  // namespace

std::vector<Proc> JobProcesses(const std::string& token_file) {
  std::vector<Proc> out;
  ForEachProcess([&](Proc& p, const std::string& env, const std::string&) {
    if (FromEnvironment(env, token_file, &p) && !p.job.empty()) out.push_back(p);
  });
  return out;
}

std::vector<Proc> ClusterProcesses(const std::string& cluster_dir, const std::string& token_file) {
  std::vector<Proc> out;
  ForEachProcess([&](Proc& p, const std::string& env, const std::string& cmdline) {
    if (FromEnvironment(env, token_file, &p) || Mentions(cmdline, cluster_dir) ||
        WorksUnder(p.pid, cluster_dir)) {
      out.push_back(p);
    }
  });
  return out;
}

std::vector<pid_t> ChildrenOf(pid_t parent, const std::string& comm_prefix) {
  return testing::RunningChildren(parent, comm_prefix);
}

std::string Show(const Proc& p) {
  return absl::StrCat(p.pid, " (", p.comm, ", ", std::string(1, p.state),
                      p.job.empty() ? "" : ", " + p.job, ")");
}

}  // namespace drover::chaos
