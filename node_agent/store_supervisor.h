// StoreSupervisor: runs this node's object store (drover-object-store) as a child of
// the agent, and keeps it running.
//
//  - Start spawns the store and returns once its socket answers (or fails, with the
//    store's log tail, if it exits first or does not answer in time).
//  - If the store dies, it is restarted (with a growing pause if it keeps dying
//    quickly) and the death is logged. A restarted store is empty: objects held only
//    there are lost (the directory learns it through the store's events).
//  - Stop sends SIGTERM, SIGKILL after the grace, and reaps it.
//  - The store gets --parent-pid: it stops by itself if the agent dies, even by
//    SIGKILL (PR_SET_PDEATHSIG). That signal follows the *thread* that spawned the
//    child, so every spawn happens on the supervisor's own long-lived thread.
//
// Threading: one thread (started by Start, joined by Stop) spawns, waits (poll on a
// pidfd and an eventfd), restarts and stops. Public methods are thread-safe.
#ifndef DROVER_NODE_AGENT_STORE_SUPERVISOR_H_
#define DROVER_NODE_AGENT_STORE_SUPERVISOR_H_

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace drover {

struct StoreSupervisorOptions {
  // Path of drover-object-store; empty = FindDroverBinary("drover-object-store").
  std::string binary;
  // The store's Unix socket (at most 107 bytes).
  std::string socket_path;
  // Arena bytes; 0 lets the store choose (a share of RAM capped by /dev/shm).
  uint64_t capacity = 0;
  // Spill directory ("" disables spilling) and its byte budget (> 0 when set).
  std::string spill_dir;
  uint64_t spill_capacity = 0;
  // Where the store's stdout and stderr go (appended).
  std::string log_path;
  // How long a (re)started store has to answer on its socket.
  absl::Duration start_timeout = absl::Seconds(30);
  // SIGTERM -> SIGKILL at Stop.
  absl::Duration stop_grace = absl::Seconds(5);
  // Pause before a restart: doubles from min while the store keeps dying within
  // `stable_after` of starting, up to max.
  absl::Duration min_restart_pause = absl::Milliseconds(100);
  absl::Duration max_restart_pause = absl::Seconds(5);
  absl::Duration stable_after = absl::Seconds(10);
};

class StoreSupervisor {
 public:
  explicit StoreSupervisor(StoreSupervisorOptions options);
  // Calls Stop().
  ~StoreSupervisor();
  StoreSupervisor(const StoreSupervisor&) = delete;
  StoreSupervisor& operator=(const StoreSupervisor&) = delete;

  // Starts the supervisor thread and the store; returns once the store answers.
  // FAILED_PRECONDITION (binary missing, store exited: the message has its log tail),
  // DEADLINE_EXCEEDED (no answer within start_timeout; the store is killed).
  // REQUIRES: called once.
  absl::Status Start();

  // Stops the store (SIGTERM, SIGKILL after the grace), reaps it, joins the thread.
  // Idempotent.
  void Stop();

  const std::string& socket_path() const { return options_.socket_path; }
  // The store's pid while it runs, else 0.
  pid_t pid();
  // How many times the store was restarted after dying.
  int restarts();
  // When the store last died (InfinitePast if it never did).
  absl::Time last_death();

 private:
  void Run();
  // Spawns the store and waits until it answers, exits, the deadline passes or Stop.
  absl::Status SpawnAndWaitReady(pid_t* pid, int* pidfd);
  // Sleeps up to `d` unless Stop is called; returns true if stopping.
  bool PauseOrStop(absl::Duration d);
  // SIGTERM, then SIGKILL after `grace`, and reap.
  void Terminate(pid_t pid, int pidfd, absl::Duration grace);
  bool Stopping();

  StoreSupervisorOptions options_;
  int stop_fd_ = -1;  // eventfd, readable once Stop is called
  std::thread thread_;

  absl::Mutex mu_;
  absl::CondVar cv_;
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool first_done_ ABSL_GUARDED_BY(mu_) = false;  // the first start finished (either way)
  absl::Status first_status_ ABSL_GUARDED_BY(mu_);
  pid_t pid_ ABSL_GUARDED_BY(mu_) = 0;
  int restarts_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time last_death_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
};

// The socket path for a store hosted by an agent with state directory `agent_dir`:
// <agent_dir>/store.sock if that fits comfortably in a Unix socket address, else
// store.sock in a new directory of its own under /tmp/drover-<uid>/ (common/paths.h).
absl::StatusOr<std::string> StoreSocketPath(const std::string& agent_dir);

}  // namespace drover

#endif  // DROVER_NODE_AGENT_STORE_SUPERVISOR_H_
