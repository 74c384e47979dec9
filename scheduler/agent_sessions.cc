#include "scheduler/agent_sessions.h"

#include <algorithm>

namespace drover {

int64_t AgentSessions::Open(const std::string& node_id) {
  Session& s = nodes_[node_id];
  s.id = next_id_++;
  s.closed = false;
  return s.id;
}

bool AgentSessions::Closed(const std::string& node_id, int64_t session_id, absl::Time now) {
  if (stopped_) return false;
  auto it = nodes_.find(node_id);
  if (it == nodes_.end() || it->second.id != session_id) return false;
  if (!it->second.closed) {
    it->second.closed = true;
    it->second.closed_at = now;
  }
  return true;
}

void AgentSessions::Forget(const std::string& node_id) {
  nodes_.erase(node_id);
}

void AgentSessions::Stop() {
  stopped_ = true;
}

bool AgentSessions::IsCurrent(const std::string& node_id, int64_t session_id) {
  auto it = nodes_.find(node_id);
  return it != nodes_.end() && it->second.id == session_id;
}

absl::Time AgentSessions::NextDue() {
  absl::Time next = absl::InfiniteFuture();
  for (const auto& [id, s] : nodes_) {
    if (s.closed) next = std::min(next, s.closed_at + grace_);
  }
  return next;
}

std::vector<AgentSessions::Lost> AgentSessions::TakeDue(absl::Time now) {
  std::vector<Lost> due;
  for (auto it = nodes_.begin(); it != nodes_.end();) {
    if (it->second.closed && it->second.closed_at + grace_ <= now) {
      due.push_back({it->first, it->second.closed_at});
      it = nodes_.erase(it);
    } else {
      ++it;
    }
  }
  return due;
}

}  // namespace drover
