// NodeFeed: the nodes' state as drivers see it (proto::DriverNodeState), published by
// SchedulerCore as it changes and read by the drivers' sessions (LeasesService::
// DriverSession), which push the changes to their drivers. A driver thereby learns of
// a node's death (its objects there are lost) without polling GetClusterStatus, and the
// scheduler copies no node table per driver read.
//
// Every Publish that changes a node moves a version; a reader keeps the version it has
// seen and gets the nodes changed since (every node for version 0).
//
// Thread safety: thread-safe. Lock order: SchedulerCore's mutex before this one (the
// core publishes holding it); nothing is called out while it is held.
#ifndef DROVER_SCHEDULER_NODE_FEED_H_
#define DROVER_SCHEDULER_NODE_FEED_H_

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "proto/lease.pb.h"

namespace drover {

class NodeFeed {
 public:
  // `clock` times Next's waits (tests use a fake); not owned.
  explicit NodeFeed(Clock* clock = Clock::Real()) : clock_(clock) {}

  // Records `node` as it is now; a no-op if nothing changed since its last Publish.
  void Publish(const proto::DriverNodeState& node) ABSL_LOCKS_EXCLUDED(mu_);
  // The nodes published after `*version` (every node for 0), in node id order, and
  // moves `*version` on. If there are none, waits until `deadline` (the clock's) for
  // some: callers bound their waits (a session looks at its client every 100 ms).
  std::vector<proto::DriverNodeState> Next(uint64_t* version, absl::Time deadline)
      ABSL_LOCKS_EXCLUDED(mu_);
  // For lock-order annotations only (scheduler_core.h: ABSL_ACQUIRED_BEFORE).
  absl::Mutex* mutex() ABSL_LOCK_RETURNED(mu_) { return &mu_; }

 private:
  Clock* const clock_;
  absl::Mutex mu_;
  absl::CondVar changed_;
  uint64_t version_ ABSL_GUARDED_BY(mu_) = 0;
  // node id -> (version of its last change, its state).
  std::map<std::string, std::pair<uint64_t, proto::DriverNodeState>> nodes_ ABSL_GUARDED_BY(mu_);
};

}  // namespace drover

#endif  // DROVER_SCHEDULER_NODE_FEED_H_
