#include "scheduler/node_table.h"

#include <algorithm>
#include <utility>

namespace drover {

NodeCapacity CapacityOf(const NodeUse& n, bool free, const proto::Resources* claimed,
                        const std::set<int>* claimed_gpus) {
  NodeCapacity c;
  c.node_id = n.node_id;
  c.node_ip = n.node_ip;
  c.available = free ? SubtractResources(n.total, n.used) : n.total;
  if (free && claimed != nullptr) {
    c.available = SubtractResources(c.available, *claimed);
    // Nothing below zero: a claim on what running jobs still hold leaves nothing.
    c.available.set_memory_bytes(std::max<int64_t>(0, c.available.memory_bytes()));
    for (auto& [k, v] : *c.available.mutable_custom()) v = std::max(0.0, v);
  }
  for (int g : n.gpu_ids) {
    if (free && (n.used_gpus.count(g) || (claimed_gpus != nullptr && claimed_gpus->count(g)))) {
      continue;
    }
    c.gpu_ids.push_back(g);
  }
  c.available.set_gpus(static_cast<int>(c.gpu_ids.size()));
  return c;
}

NodeTable::Entry* NodeTable::Get(const std::string& node_id) {
  auto it = nodes_.find(node_id);
  return it == nodes_.end() ? nullptr : &it->second;
}

void NodeTable::Changed(const std::string& node_id) {
  ++version_;
  dirty_.insert(node_id);
}

void NodeTable::Set(const std::string& node_id, const std::string& node_ip,
                    const proto::Resources& total, std::vector<int> gpu_ids, int64_t order) {
  Entry& e = nodes_[node_id];
  e.use.node_id = node_id;
  e.use.node_ip = node_ip;
  e.use.total = total;
  e.use.gpu_ids = std::move(gpu_ids);
  e.order = order;
  stale_ = true;
  ++totals_version_;
  ++version_;
}

void NodeTable::SetAlive(const std::string& node_id, bool alive) {
  Entry* e = Get(node_id);
  if (e == nullptr || e->alive == alive) return;
  e->alive = alive;
  stale_ = true;
  ++totals_version_;
  ++version_;
}

void NodeTable::Use(const std::string& node_id, const proto::Resources& r,
                    const std::vector<int>& gpus, int sign) {
  Entry* e = Get(node_id);
  if (e == nullptr) return;
  AddResources(&e->use.used, r, sign);
  for (int g : gpus) {
    if (sign > 0) {
      e->use.used_gpus.insert(g);
    } else {
      e->use.used_gpus.erase(g);
    }
  }
  Changed(node_id);
}

void NodeTable::Hold(const std::vector<std::string>& node_ids, absl::Time ends_by, int sign) {
  std::vector<std::string> ids = node_ids;
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  for (const std::string& id : ids) {
    Entry& e = nodes_[id];
    if (e.use.node_id.empty()) e.use.node_id = id;
    if (ends_by == absl::InfiniteFuture()) {
      e.endless_holds += sign;
    } else if (sign > 0) {
      e.hold_ends.insert(ends_by);
    } else if (auto it = e.hold_ends.find(ends_by); it != e.hold_ends.end()) {
      e.hold_ends.erase(it);
    }
  }
  ++version_;
}

const NodeUse* NodeTable::Find(const std::string& node_id) const {
  auto it = nodes_.find(node_id);
  return it == nodes_.end() ? nullptr : &it->second.use;
}

bool NodeTable::Alive(const std::string& node_id) const {
  auto it = nodes_.find(node_id);
  return it != nodes_.end() && it->second.alive;
}

int NodeTable::ViewIndex(const std::string& node_id) {
  if (stale_) Rebuild();
  const Entry* e = Get(node_id);
  return e == nullptr ? -1 : e->view_index;
}

absl::Time NodeTable::LatestHoldEnd(const std::string& node_id) const {
  auto it = nodes_.find(node_id);
  if (it == nodes_.end()) return absl::InfinitePast();
  if (it->second.endless_holds > 0) return absl::InfiniteFuture();
  if (it->second.hold_ends.empty()) return absl::InfinitePast();
  return *it->second.hold_ends.rbegin();
}

void NodeTable::Rebuild() {
  std::vector<Entry*> alive;
  for (auto& [id, e] : nodes_) {
    e.view_index = -1;
    if (e.alive) alive.push_back(&e);
  }
  std::stable_sort(alive.begin(), alive.end(),
                   [](const Entry* a, const Entry* b) { return a->order < b->order; });
  alive_.clear();
  free_.clear();
  total_.clear();
  for (Entry* e : alive) {
    e->view_index = static_cast<int>(alive_.size());
    alive_.push_back(&e->use);
    free_.push_back(CapacityOf(e->use, /*free=*/true));
    total_.push_back(CapacityOf(e->use, /*free=*/false));
  }
  dirty_.clear();
  stale_ = false;
}

const std::vector<const NodeUse*>& NodeTable::AliveNodes() {
  if (stale_) Rebuild();
  return alive_;
}

const std::vector<NodeCapacity>& NodeTable::Free() {
  if (stale_) Rebuild();
  for (const std::string& id : dirty_) {
    const Entry* e = Get(id);
    if (e != nullptr && e->view_index >= 0) free_[e->view_index] = CapacityOf(e->use, true);
  }
  dirty_.clear();
  return free_;
}

const std::vector<NodeCapacity>& NodeTable::Total() {
  if (stale_) Rebuild();
  return total_;
}

}  // namespace drover
