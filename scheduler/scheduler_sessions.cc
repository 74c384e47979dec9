// SchedulerCore's part of failure detection through agents' sessions: the table of
// sessions (agent_sessions.h, which has a lock of its own, taken after mu_) and what the
// core does with it. The gRPC side is agent_session_hub.h. Also: a stalled scheduler
// does not hold the nodes' silence meanwhile against them (ForgiveStallLocked).
#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "scheduler/scheduler_core.h"

namespace drover {

absl::StatusOr<proto::AgentSessionNotice> SchedulerCore::OpenAgentSession(
    const std::string& node_id) {
  absl::MutexLock lock(&mu_);
  if (stopping_) {
    return absl::UnavailableError(
        "the scheduler is shutting down; open the session again once it is back");
  }
  const Node* node = FindNodeLocked(node_id);
  if (node == nullptr || node->info.state() != proto::ALIVE) {
    return absl::FailedPreconditionError(absl::StrCat(
        "AgentSession: node ", node_id,
        node == nullptr ? " is not registered"
                        : absl::StrCat(" is ", proto::NodeState_Name(node->info.state())),
        "; register it (RegisterNode) before opening its session"));
  }
  proto::AgentSessionNotice notice;
  notice.set_session_id(sessions_.Open(node_id));
  notice.set_grace_ms(absl::ToInt64Milliseconds(sessions_.grace()));
  return notice;
}

void SchedulerCore::AgentSessionClosed(const std::string& node_id, int64_t session_id) {
  {
    absl::MutexLock lock(&mu_);
    // Ignored once Stop() has begun (AgentSessions::Stop).
    if (!sessions_.Closed(node_id, session_id, clock_->Now())) return;
    // The monitor's next pass may now come sooner (at the loss).
    monitor_wake_.Signal();
  }
  DROVER_LOG(INFO) << "the agent of node " << node_id << " closed its session " << session_id
                   << "; the node is declared dead in "
                   << absl::FormatDuration(options_.session_grace)
                   << " unless the agent opens a new one";
}

void SchedulerCore::ExpireAgentSessionsLocked(absl::Time now, Actions* out) {
  for (const AgentSessions::Lost& lost : sessions_.TakeDue(now)) {
    Node* node = FindNodeLocked(lost.node_id);
    if (node == nullptr || node->info.state() != proto::ALIVE) continue;
    DeclareDeadLocked(
        *node,
        absl::StrCat("the agent of ", lost.node_id, " (", NodeIpLocked(lost.node_id),
                     ") closed its connection ",
                     absl::FormatDuration(absl::Trunc(now - lost.closed, absl::Milliseconds(100))),
                     " ago and opened no new session: the agent process exited or was killed"),
        out);
  }
}

void SchedulerCore::ForgiveStallLocked(absl::Time now, absl::Duration late) {
  // A scheduler stalled for longer than the node timeout would declare every healthy
  // node dead when it resumes, before the heartbeats queued meanwhile are read, and
  // fail every job. Only with the real clock: a fake clock's jumps are a test's, not a
  // stall.
  if (clock_ != Clock::Real() || late <= options_.node_timeout / 4) return;
  for (auto& [id, node] : nodes_) node.last_heartbeat = std::min(now, node.last_heartbeat + late);
  DROVER_LOG(WARNING) << "the scheduler did not run for " << absl::FormatDuration(late)
                      << " (stalled); the nodes' silence meanwhile is not held against them";
}

}  // namespace drover
