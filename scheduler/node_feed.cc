#include "scheduler/node_feed.h"

namespace drover {
namespace {

bool Same(const proto::DriverNodeState& a, const proto::DriverNodeState& b) {
  return a.alive() == b.alive() && a.reason() == b.reason() &&
         a.agent_address() == b.agent_address() && a.store_restarts() == b.store_restarts() &&
         a.store_last_restart_ms() == b.store_last_restart_ms();
}

}  // namespace

void NodeFeed::Publish(const proto::DriverNodeState& node) {
  absl::MutexLock lock(&mu_);
  auto it = nodes_.find(node.node_id());
  if (it != nodes_.end() && Same(it->second.second, node)) return;
  nodes_[node.node_id()] = {++version_, node};
  changed_.SignalAll();
}

std::vector<proto::DriverNodeState> NodeFeed::Next(uint64_t* version, absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  while (version_ <= *version) {
    if (clock_->WaitWithDeadline(&changed_, &mu_, deadline)) break;
  }
  std::vector<proto::DriverNodeState> out;
  if (version_ <= *version) return out;
  for (const auto& [id, entry] : nodes_) {
    if (entry.first > *version) out.push_back(entry.second);
  }
  *version = version_;
  return out;
}

}  // namespace drover
