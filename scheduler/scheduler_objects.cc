// SchedulerCore's object directory methods (object_directory.h): which node holds
// which object, and the waits for a holder.
#include "scheduler/scheduler_core.h"

#include "absl/strings/str_cat.h"

namespace drover {

absl::Status SchedulerCore::AddObjectLocations(const proto::AddObjectLocationsRequest& req) {
  absl::MutexLock lock(&mu_);
  Node* node = FindNodeLocked(req.node_id());
  if (node == nullptr || node->info.state() != proto::ALIVE) {
    return absl::FailedPreconditionError(absl::StrCat(
        "AddObjectLocations: node ", req.node_id(),
        node == nullptr ? " is not registered" : " is not ALIVE",
        "; the agent must register again before reporting objects"));
  }
  for (const auto& o : req.objects()) objects_.Add(req.node_id(), o.object_id(), o.size());
  if (req.objects_size() > 0) objects_added_.SignalAll();
  return absl::OkStatus();
}

void SchedulerCore::RemoveObjectLocations(const proto::RemoveObjectLocationsRequest& req) {
  absl::MutexLock lock(&mu_);
  for (const auto& id : req.object_ids()) objects_.Remove(req.node_id(), id);
}

proto::GetObjectLocationsReply SchedulerCore::GetObjectLocations(
    const std::string& object_id, absl::Duration wait, const std::function<bool()>& cancelled) {
  proto::GetObjectLocationsReply reply;
  absl::MutexLock lock(&mu_);
  const absl::Time deadline = clock_->Now() + std::min(wait, absl::Minutes(10));
  while (true) {
    for (const auto& h : objects_.Holders(object_id)) {
      Node* node = FindNodeLocked(h.node_id);
      if (node == nullptr || node->info.state() != proto::ALIVE) continue;
      auto* loc = reply.add_locations();
      loc->set_node_id(h.node_id);
      loc->set_agent_address(node->info.agent_address());
      loc->set_size(h.size);
    }
    if (reply.locations_size() > 0 || stopping_ || clock_->Now() >= deadline ||
        (cancelled != nullptr && cancelled())) {
      return reply;
    }
    // At least once a second, to see whether the caller went away.
    clock_->WaitWithDeadline(&objects_added_, &mu_,
                             std::min(deadline, clock_->Now() + absl::Seconds(1)));
  }
}

}  // namespace drover
