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

void NodeTable::Changed(Entry* e) {
  ++version_;
  dirty_.insert(e->use.node_id);
  if (!e->alive) return;
  // Bounded: a reader that fell this far behind reads every node again instead.
  if (log_.size() >= 4 * nodes_.size() + 1024) {
    log_base_ += log_.size();
    log_.clear();
  }
  log_.push_back(e);
}

void NodeTable::Amounts::Add(const NodeCapacity& c) {
  gpus.insert(c.available.gpus());
  cpus.insert(c.available.cpus());
  memory_bytes.insert(static_cast<double>(c.available.memory_bytes()));
  for (const auto& [name, v] : c.available.custom()) custom[name].insert(v);
}

void NodeTable::Amounts::Remove(const NodeCapacity& c) {
  auto take = [](std::multiset<double>& s, double v) {
    auto it = s.find(v);
    if (it != s.end()) s.erase(it);
  };
  take(gpus, c.available.gpus());
  take(cpus, c.available.cpus());
  take(memory_bytes, static_cast<double>(c.available.memory_bytes()));
  for (const auto& [name, v] : c.available.custom()) {
    auto it = custom.find(name);
    if (it == custom.end()) continue;
    take(it->second, v);
    if (it->second.empty()) custom.erase(it);
  }
}

void NodeTable::Set(const std::string& node_id, const std::string& node_ip,
                    const proto::Resources& total, std::vector<int> gpu_ids, int64_t order) {
  Entry& e = nodes_[node_id];
  e.use.node_id = node_id;
  e.use.node_ip = node_ip;
  e.use.total = total;
  e.use.gpu_ids = std::move(gpu_ids);
  e.use.order = order;
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
  Changed(e);
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
                   [](const Entry* a, const Entry* b) { return a->use.order < b->use.order; });
  alive_.clear();
  free_.clear();
  total_.clear();
  free_amounts_ = Amounts();
  for (Entry* e : alive) {
    e->view_index = static_cast<int>(alive_.size());
    alive_.push_back(&e->use);
    free_.push_back(CapacityOf(e->use, /*free=*/true));
    free_amounts_.Add(free_.back());
    total_.push_back(CapacityOf(e->use, /*free=*/false));
  }
  dirty_.clear();
  stale_ = false;
  // Readers of the log read every node again.
  ++epoch_;
  log_base_ += log_.size();
  log_.clear();
}

const std::vector<const NodeUse*>& NodeTable::AliveNodes() {
  if (stale_) Rebuild();
  return alive_;
}

const std::vector<NodeCapacity>& NodeTable::Free() {
  if (stale_) Rebuild();
  for (const std::string& id : dirty_) {
    const Entry* e = Get(id);
    if (e == nullptr || e->view_index < 0) continue;
    NodeCapacity& c = free_[e->view_index];
    free_amounts_.Remove(c);
    c = CapacityOf(e->use, true);
    free_amounts_.Add(c);
  }
  dirty_.clear();
  return free_;
}

ResourceMaxima NodeTable::FreeMaxima(
    const std::vector<std::pair<int, const NodeCapacity*>>& overrides) {
  Free();
  for (const auto& [i, c] : overrides) {
    free_amounts_.Remove(free_[i]);
    free_amounts_.Add(*c);
  }
  // As MaximaOf: 0 when no node has more (or has the kind at all).
  auto most = [](const std::multiset<double>& s) { return s.empty() ? 0.0 : std::max(0.0, *s.rbegin()); };
  ResourceMaxima best;
  best.gpus = most(free_amounts_.gpus);
  best.cpus = most(free_amounts_.cpus);
  best.memory_bytes = most(free_amounts_.memory_bytes);
  for (const auto& [name, amounts] : free_amounts_.custom) best.custom[name] = most(amounts);
  for (const auto& [i, c] : overrides) {
    free_amounts_.Remove(*c);
    free_amounts_.Add(free_[i]);
  }
  return best;
}

const std::vector<NodeCapacity>& NodeTable::Total() {
  if (stale_) Rebuild();
  return total_;
}

}  // namespace drover
