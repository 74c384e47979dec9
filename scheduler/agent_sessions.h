// AgentSessions: which node agents hold a session with the scheduler
// (Scheduler.AgentSession) and which lost theirs. It is the fast path of failure
// detection: an agent's process that exits or is killed (even by SIGKILL) has its
// connection closed by the kernel, its session ends, and the node is lost once a short
// grace has passed without a new session of the same node. Heartbeats remain the path
// for machines that vanish without closing anything.
//
// The grace is what keeps a healthy node alive when its session ends for a reason
// other than its agent's death: the agent re-registered and opened a new session (the
// new one replaces the old, whose close is then ignored, whichever arrives first), or
// a network blip broke the connection and the agent opens a session again. Only a new
// session cancels a pending loss, not a heartbeat or a registration: a heartbeat sent
// just before the kill can be handled after the close was noticed, and would hide the
// death until the node timeout.
//
// No clock of its own (callers pass the time). Not thread-safe: SchedulerCore keeps it
// under its mutex, where every use of it is made anyway (an open checks the node is
// ALIVE, the monitor's pass declares the lost nodes dead, a close wakes the monitor);
// opens and closes are rare, so a lock of its own would gain nothing.
#ifndef DROVER_SCHEDULER_AGENT_SESSIONS_H_
#define DROVER_SCHEDULER_AGENT_SESSIONS_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/time/time.h"

namespace drover {

class AgentSessions {
 public:
  // A node whose session closed and stayed closed for the grace.
  struct Lost {
    std::string node_id;
    absl::Time closed;  // when its session's close was noticed
  };

  explicit AgentSessions(absl::Duration grace) : grace_(grace) {}

  absl::Duration grace() const { return grace_; }

  // A new session of `node_id`: it replaces the node's earlier one and cancels the
  // node's pending loss. Returns its id (increasing, never 0).
  int64_t Open(const std::string& node_id);
  // The session ended from the agent's side, noticed at `now`. If it is the node's
  // current session, the node is lost at now + grace unless Open comes first. Returns
  // whether it was the current session (false: replaced, forgotten or unknown).
  // Always false once Stop() was called.
  bool Closed(const std::string& node_id, int64_t session_id, absl::Time now)
     ;
  // Forgets the node (declared dead another way): a later close of its session is
  // ignored.
  void Forget(const std::string& node_id);
  // Whether `session_id` is the node's current session, open or within its grace.
  bool IsCurrent(const std::string& node_id, int64_t session_id);
  // When the next pending loss falls due; absl::InfiniteFuture() if none is pending.
  absl::Time NextDue();
  // The nodes whose loss has fallen due by `now`, in node id order; they are forgotten.
  std::vector<Lost> TakeDue(absl::Time now);
  // The scheduler is stopping: closes are ignored from now on.
  void Stop();

 private:
  struct Session {
    int64_t id = 0;
    bool closed = false;
    absl::Time closed_at;
  };

  const absl::Duration grace_;
  int64_t next_id_ = 1;
  std::map<std::string, Session> nodes_;
  bool stopped_ = false;
};

}  // namespace drover

#endif  // DROVER_SCHEDULER_AGENT_SESSIONS_H_
