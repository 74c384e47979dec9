// How the chaos campaign's workload and checks reach the cluster: its address and
// token (never the TestCluster object, which the fault injector restarts daemons of),
// and running a program (the CLI, a task driver) against it with a deadline.
#ifndef DROVER_TESTS_CHAOS_CLUSTER_ENV_H_
#define DROVER_TESTS_CHAOS_CLUSTER_ENV_H_

#include <string>
#include <vector>

#include "absl/time/time.h"

namespace drover::chaos {

struct ClusterEnv {
  std::string address;     // the scheduler, host:port
  std::string token_file;
  std::string home;        // DROVER_HOME for the CLI
  std::string scratch;     // where output files of the programs go
};

struct RunResult {
  int exit = -1;           // exit code, 128+N for signal N, -1 if killed after the timeout
  bool timed_out = false;
  std::string out, err;
  absl::Time started, ended;
};

// Runs `argv` with this process's environment minus DROVER_* plus the cluster's
// DROVER_ADDRESS, DROVER_TOKEN_FILE and DROVER_HOME; SIGKILLs it after `timeout`.
// Thread-safe.
RunResult RunWithCluster(const ClusterEnv& env, const std::vector<std::string>& argv,
                         absl::Duration timeout);

}  // namespace drover::chaos

#endif  // DROVER_TESTS_CHAOS_CLUSTER_ENV_H_
