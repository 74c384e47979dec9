#include "scheduler/object_directory.h"

namespace drover {

void ObjectDirectory::Add(const std::string& node_id, const std::string& object_id,
                          int64_t size) {
  auto [it, inserted] = by_object_[object_id].insert_or_assign(node_id, size);
  (void)it;
  if (inserted) {
    by_node_[node_id].insert(object_id);
    ++entries_;
  }
}

void ObjectDirectory::Remove(const std::string& node_id, const std::string& object_id) {
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

int ObjectDirectory::RemoveNode(const std::string& node_id) {
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

std::vector<ObjectDirectory::Holder> ObjectDirectory::Holders(
    const std::string& object_id) const {
  std::vector<Holder> out;
  auto obj = by_object_.find(object_id);
  if (obj == by_object_.end()) return out;
  out.reserve(obj->second.size());
  for (const auto& [node_id, size] : obj->second) out.push_back({node_id, size});
  return out;
}

std::vector<std::pair<std::string, std::string>> ObjectDirectory::WithPrefix(
    const std::string& prefix) const {
  std::vector<std::pair<std::string, std::string>> out;
  for (auto it = by_object_.lower_bound(prefix);
       it != by_object_.end() && it->first.compare(0, prefix.size(), prefix) == 0; ++it) {
    for (const auto& [node, size] : it->second) out.emplace_back(node, it->first);
  }
  return out;
}

}  // namespace drover
