// The chaos campaign's teardown when it is stopped from outside (SIGTERM, SIGINT,
// SIGHUP): what a normal end stops and removes, found from the cluster's record
// (its directory and token file) instead of the objects the campaign's threads are
// still using.
#ifndef DROVER_TESTS_CHAOS_TEARDOWN_H_
#define DROVER_TESTS_CHAOS_TEARDOWN_H_

#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/time.h"
#include "tests/chaos/procs.h"

namespace drover::chaos {

// Stops every process of the cluster (ClusterProcesses: its daemons, the agents'
// workers and launchers, drivers and CLI runs given its token file, a Redis working
// in its directory): SIGTERM to each (agents then stop their own workers), SIGKILL to
// whatever still runs `grace` later, and again to anything new (a daemon a restart
// was bringing back) until nothing is left or `within` has passed. Never signals the
// calling process; does nothing if `cluster_dir` or `token_file` is empty. Returns
// what still runs (empty on success).
std::vector<Proc> StopClusterProcesses(const std::string& cluster_dir,
                                       const std::string& token_file, absl::Duration grace,
                                       absl::Duration within);

// Removes `dir` and everything under it (best effort; mounts under it must be gone).
void RemoveTree(const std::string& dir);

// Turns SIGTERM, SIGINT and SIGHUP into a call of `on_signal(sig)` on a thread of its
// own (the handler only writes the signal's number to a pipe: a multi-threaded
// teardown cannot run in a signal handler). Children started later get the default
// dispositions back when they exec. A signal that came before Start is kept and
// handled once Start runs. Construct while the process is single-threaded if the
// signals must not reach another thread first.
class SignalWatcher {
 public:
  SignalWatcher();
  // Stops the thread and restores the previous dispositions.
  ~SignalWatcher();
  SignalWatcher(const SignalWatcher&) = delete;
  SignalWatcher& operator=(const SignalWatcher&) = delete;

  // `on_signal` may not return (e.g. ends with _exit); later signals are ignored
  // while it runs.
  void Start(std::function<void(int sig)> on_signal);

 private:
  std::thread thread_;
};

}  // namespace drover::chaos

#endif  // DROVER_TESTS_CHAOS_TEARDOWN_H_
