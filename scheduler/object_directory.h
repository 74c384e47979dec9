// ObjectDirectory: which node's object store holds a sealed copy of which object, as
// reported by the agents (AddObjectLocations / RemoveObjectLocations). The scheduler
// answers GetObjectLocations from it so that an agent can pull an object it lacks.
//
// In memory only: a scheduler restart empties it (agents report new copies as they
// make them). Which nodes may hold copies is told by SchedulerCore (NodeUp when a node
// registers, NodeDown when it is declared dead): copies are accepted only from a node
// that is up, a node's copies go with it, and reads list up nodes only, so "node dead"
// and "its objects gone" are one step here and no read needs the core's lock.
//
// Thread safety: thread-safe, with a mutex of its own. Lock order: SchedulerCore's
// mutex before this one (the core calls NodeUp/NodeDown/ByAgent holding it); nothing
// is called out while it is held.
#ifndef DROVER_SCHEDULER_OBJECT_DIRECTORY_H_
#define DROVER_SCHEDULER_OBJECT_DIRECTORY_H_

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"

namespace drover {

class ObjectDirectory {
 public:
  struct Holder {
    std::string node_id;
    std::string agent_address;
    int64_t size = 0;
  };
  struct Copy {
    std::string object_id;
    int64_t size = 0;
  };

  // `clock` times the waits of WaitForHolders; not owned.
  explicit ObjectDirectory(Clock* clock = Clock::Real()) : clock_(clock) {}

  // `node_id` is up (registered, ALIVE) at `agent_address`: its reports are accepted.
  void NodeUp(const std::string& node_id, const std::string& agent_address)
      ABSL_LOCKS_EXCLUDED(mu_);
  // `node_id` is down (declared dead, or known but not registered): its copies are
  // forgotten and its reports refused until NodeUp. Returns how many copies went.
  int NodeDown(const std::string& node_id) ABSL_LOCKS_EXCLUDED(mu_);

  // Records that `node_id` holds `copies` (adding again replaces the size), and wakes
  // the waits for them. FAILED_PRECONDITION (nothing recorded) if the node is not up.
  absl::Status Add(const std::string& node_id, const std::vector<Copy>& copies)
      ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status Add(const std::string& node_id, const std::string& object_id, int64_t size) {
    return Add(node_id, {{object_id, size}});
  }
  // Forgets one copy; no-op if unknown.
  void Remove(const std::string& node_id, const std::string& object_id) ABSL_LOCKS_EXCLUDED(mu_);
  // Every up node holding `object_id`, in node id order; empty if none.
  std::vector<Holder> Holders(const std::string& object_id) ABSL_LOCKS_EXCLUDED(mu_);
  // Holders, waiting until `deadline` for one if there is none yet (woken by Add). An
  // empty answer: none came in time, Stop() was called, or `cancelled` (if given; asked
  // at least once a second while waiting) said the caller went away.
  std::vector<Holder> WaitForHolders(const std::string& object_id, absl::Time deadline,
                                     const std::function<bool()>& cancelled = nullptr)
      ABSL_LOCKS_EXCLUDED(mu_);
  // The objects whose id starts with `prefix`, by the agent address of the up node
  // holding each copy.
  std::map<std::string, std::vector<std::string>> ByAgent(const std::string& prefix)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Ends every wait, now and later. Idempotent.
  void Stop() ABSL_LOCKS_EXCLUDED(mu_);
  // For lock-order annotations only (scheduler_core.h: ABSL_ACQUIRED_BEFORE).
  absl::Mutex* mutex() ABSL_LOCK_RETURNED(mu_) { return &mu_; }

  // Number of (object, node) entries.
  int64_t size() ABSL_LOCKS_EXCLUDED(mu_);
  // Number of distinct objects with at least one copy.
  int64_t objects() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Node {
    bool up = false;
    std::string agent_address;
  };
  std::vector<Holder> HoldersLocked(const std::string& object_id)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  int DropNodeLocked(const std::string& node_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  Clock* const clock_;
  absl::Mutex mu_;
  // Signalled (SignalAll) when copies are added, and by Stop(): wakes WaitForHolders
  // (each re-checks its own object).
  absl::CondVar added_;
  std::map<std::string, Node> nodes_ ABSL_GUARDED_BY(mu_);
  // object id -> node id -> size.
  std::map<std::string, std::map<std::string, int64_t>> by_object_ ABSL_GUARDED_BY(mu_);
  // node id -> object ids it holds (so a node's death costs O(its objects)).
  std::map<std::string, std::set<std::string>> by_node_ ABSL_GUARDED_BY(mu_);
  int64_t entries_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace drover

#endif  // DROVER_SCHEDULER_OBJECT_DIRECTORY_H_
