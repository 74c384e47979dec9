#include "scheduler/object_directory.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace drover {

void ObjectDirectory::NodeUp(const std::string& node_id, const std::string& agent_address) {
  absl::MutexLock lock(&mu_);
  Node& n = nodes_[node_id];
  n.up = true;
  n.agent_address = agent_address;
}

int ObjectDirectory::NodeDown(const std::string& node_id) {
  absl::MutexLock lock(&mu_);
  nodes_[node_id].up = false;
  return DropNodeLocked(node_id);
}

int ObjectDirectory::DropNodeLocked(const std::string& node_id) {
  auto node = by_node_.find(node_id);
  if (node == by_node_.end()) return 0;
  int n = 0;
  for (const auto& object_id : node->second) {
    auto obj = by_object_.find(object_id);
    if (obj == by_object_.end()) continue;
    n += static_cast<int>(obj->second.erase(node_id));
    if (obj->second.empty()) by_object_.erase(obj);
  }
  by_node_.erase(node);
  entries_ -= n;
  return n;
}

absl::Status ObjectDirectory::Add(const std::string& node_id, const std::vector<Copy>& copies) {
  absl::MutexLock lock(&mu_);
  auto node = nodes_.find(node_id);
  if (node == nodes_.end() || !node->second.up) {
    return absl::FailedPreconditionError(absl::StrCat(
        "AddObjectLocations: node ", node_id,
        node == nodes_.end() ? " is not registered" : " is not ALIVE",
        "; the agent must register again before reporting objects"));
  }
  for (const Copy& c : copies) {
    auto [it, inserted] = by_object_[c.object_id].insert_or_assign(node_id, c.size);
    (void)it;
    if (inserted) {
      by_node_[node_id].insert(c.object_id);
      ++entries_;
    }
  }
  if (!copies.empty()) added_.SignalAll();
  return absl::OkStatus();
}

void ObjectDirectory::Remove(const std::string& node_id, const std::string& object_id) {
  absl::MutexLock lock(&mu_);
  auto obj = by_object_.find(object_id);
  if (obj == by_object_.end() || obj->second.erase(node_id) == 0) return;
  --entries_;
  if (obj->second.empty()) by_object_.erase(obj);
  auto node = by_node_.find(node_id);
  if (node != by_node_.end()) {
    node->second.erase(object_id);
    if (node->second.empty()) by_node_.erase(node);
  }
}

std::vector<ObjectDirectory::Holder> ObjectDirectory::HoldersLocked(const std::string& object_id) {
  std::vector<Holder> out;
  auto obj = by_object_.find(object_id);
  if (obj == by_object_.end()) return out;
  out.reserve(obj->second.size());
  for (const auto& [node_id, size] : obj->second) {
    auto node = nodes_.find(node_id);
    if (node == nodes_.end() || !node->second.up) continue;
    out.push_back({node_id, node->second.agent_address, size});
  }
  return out;
}

std::vector<ObjectDirectory::Holder> ObjectDirectory::Holders(const std::string& object_id) {
  absl::MutexLock lock(&mu_);
  return HoldersLocked(object_id);
}

std::vector<ObjectDirectory::Holder> ObjectDirectory::WaitForHolders(
    const std::string& object_id, absl::Time deadline, const std::function<bool()>& cancelled) {
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      // Until an Add, Stop, the deadline, or a second has passed (to ask `cancelled`).
      const absl::Time until = std::min(deadline, clock_->Now() + absl::Seconds(1));
      while (true) {
        std::vector<Holder> out = HoldersLocked(object_id);
        if (!out.empty() || stopped_ || clock_->Now() >= deadline) return out;
        if (clock_->Now() >= until) break;
        clock_->WaitWithDeadline(&added_, &mu_, until);
      }
    }
    // The caller's callback (it may look at its RPC's state) runs without the lock.
    if (cancelled != nullptr && cancelled()) return {};
  }
}

std::map<std::string, std::vector<std::string>> ObjectDirectory::ByAgent(
    const std::string& prefix) {
  absl::MutexLock lock(&mu_);
  std::map<std::string, std::vector<std::string>> out;
  for (auto it = by_object_.lower_bound(prefix);
       it != by_object_.end() && it->first.compare(0, prefix.size(), prefix) == 0; ++it) {
    for (const auto& [node_id, size] : it->second) {
      auto node = nodes_.find(node_id);
      if (node != nodes_.end() && node->second.up) {
        out[node->second.agent_address].push_back(it->first);
      }
    }
  }
  return out;
}

void ObjectDirectory::Stop() {
  absl::MutexLock lock(&mu_);
  stopped_ = true;
  added_.SignalAll();
}

int64_t ObjectDirectory::size() {
  absl::MutexLock lock(&mu_);
  return entries_;
}

int64_t ObjectDirectory::objects() {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(by_object_.size());
}

}  // namespace drover
