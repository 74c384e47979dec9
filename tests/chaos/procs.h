// What /proc says about a test cluster's processes, for the chaos campaign: which
// processes belong to which job (the DROVER_JOB_ID the agent gives every process it
// starts), which belong to the cluster at all, and a daemon's children.
#ifndef DROVER_TESTS_CHAOS_PROCS_H_
#define DROVER_TESTS_CHAOS_PROCS_H_

#include <sys/types.h>

#include <map>
#include <string>
#include <vector>

namespace drover::chaos {

struct Proc {
  pid_t pid = 0;
  pid_t ppid = 0;
  char state = '?';   // 'R', 'S', 'T' (stopped), 'Z' (zombie), ...
  std::string comm;   // cut at 15 characters by the kernel
  std::string job;    // DROVER_JOB_ID, if set
  std::string node;   // DROVER_NODE_ID, if set
  bool task_worker = false;  // DROVER_WORKER_ID is set (a leased worker, not a rank)
  bool launcher = false;     // drover-launch (the agent's per-process supervisor)
};

// Live (not zombie) processes whose environment holds DROVER_TOKEN_FILE=`token_file`:
// every process an agent of the cluster started, with its launcher.
std::vector<Proc> JobProcesses(const std::string& token_file);

// Live processes whose command line mentions `cluster_dir` (daemons started with
// their directory: agents, stores, the scheduler's token file), whose working
// directory is under it (its redis-server) or whose environment names `token_file`:
// whatever of the cluster still runs.
std::vector<Proc> ClusterProcesses(const std::string& cluster_dir, const std::string& token_file);

// Live children of `parent` whose comm starts with `comm_prefix`.
std::vector<pid_t> ChildrenOf(pid_t parent, const std::string& comm_prefix);

// "1234 (drover-agent, S)"
std::string Show(const Proc& p);

}  // namespace drover::chaos

#endif  // DROVER_TESTS_CHAOS_PROCS_H_
