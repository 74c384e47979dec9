// SchedulerCore's object directory methods: thin forwarders to ObjectDirectory, which
// has a lock of its own (object_directory.h). None takes the core's mutex.
#include "scheduler/scheduler_core.h"

namespace drover {

absl::Status SchedulerCore::AddObjectLocations(const proto::AddObjectLocationsRequest& req) {
  std::vector<ObjectDirectory::Copy> copies;
  copies.reserve(req.objects_size());
  for (const auto& o : req.objects()) copies.push_back({o.object_id(), o.size()});
  return objects_.Add(req.node_id(), copies);
}

void SchedulerCore::RemoveObjectLocations(const proto::RemoveObjectLocationsRequest& req) {
  for (const auto& id : req.object_ids()) objects_.Remove(req.node_id(), id);
}

proto::GetObjectLocationsReply SchedulerCore::GetObjectLocations(
    const std::string& object_id, absl::Duration wait, const std::function<bool()>& cancelled) {
  proto::GetObjectLocationsReply reply;
  const absl::Time deadline = clock_->Now() + std::min(wait, absl::Minutes(10));
  for (const ObjectDirectory::Holder& h : objects_.WaitForHolders(object_id, deadline, cancelled)) {
    auto* loc = reply.add_locations();
    loc->set_node_id(h.node_id);
    loc->set_agent_address(h.agent_address);
    loc->set_size(h.size);
  }
  return reply;
}

}  // namespace drover
