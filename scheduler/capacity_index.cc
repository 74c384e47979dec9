#include "scheduler/capacity_index.h"

#include <algorithm>

namespace drover {

CapacityIndex::CapacityIndex(const proto::Resources& per, int per_node)
    : per_(per), per_node_(per_node) {}

void CapacityIndex::Set(int index, int cap) {
  const int old = caps_[index];
  if (old == cap) return;
  if (old > 0) by_room_.erase({-old, index});
  if (cap > 0) by_room_.emplace(-cap, index);
  if (per_node_ > 0) {
    if (old >= per_node_) roomy_.erase(index);
    if (cap >= per_node_) roomy_.insert(index);
  }
  total_ += static_cast<long>(cap) - old;
  caps_[index] = cap;
}

void CapacityIndex::Sync(NodeTable& table) {
  const std::vector<NodeCapacity>& free = table.Free();
  const bool caught_up = table.Changes(&cursor_, [&](int i) {
    if (i >= 0 && static_cast<size_t>(i) < caps_.size()) {
      Set(i, ProcessesThatFit(free[i].available, per_));
    }
  });
  if (caught_up && caps_.size() == free.size()) return;
  // Every node again, into the sets in their order (a hint at the end each).
  caps_.assign(free.size(), 0);
  by_room_.clear();
  roomy_.clear();
  total_ = 0;
  std::vector<std::pair<int, int>> room;
  for (size_t i = 0; i < free.size(); ++i) {
    const int cap = ProcessesThatFit(free[i].available, per_);
    caps_[i] = cap;
    total_ += cap;
    if (cap > 0) room.emplace_back(-cap, static_cast<int>(i));
    if (per_node_ > 0 && cap >= per_node_) roomy_.insert(roomy_.end(), static_cast<int>(i));
  }
  std::sort(room.begin(), room.end());
  by_room_.insert(room.begin(), room.end());
}

long CapacityIndex::FitWith(const Overrides& overrides,
                            std::vector<std::pair<int, int>>* caps) const {
  long fit = per_node_ > 0 ? static_cast<long>(roomy_.size()) : total_;
  for (const auto& [i, capacity] : overrides) {
    const int was = caps_[i];
    const int cap = ProcessesThatFit(capacity->available, per_);
    caps->emplace_back(-cap, i);
    if (per_node_ > 0) {
      fit += (cap >= per_node_) - (was >= per_node_);
    } else {
      fit += static_cast<long>(cap) - was;
    }
  }
  std::sort(caps->begin(), caps->end());
  return fit;
}

bool CapacityIndex::Fits(const proto::JobSpec& spec, NodeTable& table,
                         const Overrides& overrides) {
  Sync(table);
  if (caps_.empty()) return false;
  std::vector<std::pair<int, int>> caps;
  const long fit = FitWith(overrides, &caps);
  return fit >= (per_node_ > 0 ? spec.nproc() / per_node_ : spec.nproc());
}

PlacementResult CapacityIndex::Place(const proto::JobSpec& spec, NodeTable& table,
                                     const Overrides& overrides) {
  Sync(table);
  const std::vector<NodeCapacity>& free = table.Free();
  PlacementResult result;
  if (free.empty()) {
    result.reason = kNoNodesAlive;
    return result;
  }
  std::vector<std::pair<int, int>> over;  // (-cap, index), biggest first
  const long fit = FitWith(overrides, &over);
  auto overridden = [&overrides](int i) {
    auto it = std::lower_bound(overrides.begin(), overrides.end(), std::make_pair(i, nullptr),
                               [](const auto& a, const auto& b) { return a.first < b.first; });
    return it != overrides.end() && it->first == i ? it->second : nullptr;
  };
  auto capacity = [&](int i) {
    const NodeCapacity* o = overridden(i);
    return o != nullptr ? o : &free[i];
  };
  const long need = per_node_ > 0 ? spec.nproc() / per_node_ : spec.nproc();
  if (fit < need) {
    result.reason = PlacementShortfall(spec, table.FreeMaxima(overrides), free.size(), fit);
    return result;
  }
  std::vector<std::pair<int, int>> taken;  // (index, processes)
  if (per_node_ > 0) {
    // The first nodes with room in preference order: the index's, but the overridden
    // ones as overridden.
    std::vector<int> roomy;
    for (const auto& [neg_cap, i] : over) {
      if (-neg_cap >= per_node_) roomy.push_back(i);
    }
    std::sort(roomy.begin(), roomy.end());
    auto extra = roomy.begin();
    for (auto it = roomy_.begin(); static_cast<long>(taken.size()) < need;) {
      while (it != roomy_.end() && overridden(*it) != nullptr) ++it;
      if (it == roomy_.end() && extra == roomy.end()) break;  // cannot happen: it fits
      const bool from_index =
          it != roomy_.end() && (extra == roomy.end() || *it < *extra);
      taken.emplace_back(from_index ? *it++ : *extra++, per_node_);
    }
  } else if (spec.strategy() == proto::SPREAD) {
    std::vector<const NodeCapacity*> view;
    view.reserve(free.size());
    for (size_t i = 0; i < free.size(); ++i) view.push_back(capacity(static_cast<int>(i)));
    return PlaceGang(spec, view);
  } else {
    // PACK: the biggest first (ties in preference order), the overridden nodes merged
    // in as overridden.
    int left = spec.nproc();
    auto it = by_room_.begin();
    auto extra = over.begin();
    while (left > 0) {
      while (it != by_room_.end() && overridden(it->second) != nullptr) ++it;
      if (it == by_room_.end() && extra == over.end()) break;  // cannot happen: it fits
      const bool from_index = it != by_room_.end() && (extra == over.end() || *it < *extra);
      const auto [neg_cap, i] = from_index ? *it++ : *extra++;
      if (neg_cap >= 0) break;  // no room left anywhere (cannot happen: it fits)
      const int take = std::min(left, -neg_cap);
      taken.emplace_back(i, take);
      left -= take;
    }
  }
  std::sort(taken.begin(), taken.end());
  std::vector<std::pair<const NodeCapacity*, int>> counts;
  for (const auto& [i, n] : taken) counts.emplace_back(capacity(i), n);
  result.ranks = AssignRanks(per_, counts);
  result.ok = true;
  return result;
}

const CapacityIndex::Overrides& ClaimedView::Set(
    NodeTable& table, const std::map<std::string, proto::Resources>& resources,
    const std::map<std::string, std::set<int>>& gpus) {
  capacities_.clear();
  capacities_.reserve(resources.size());  // no reallocation: pointers are kept
  overrides_.clear();
  for (const auto& [node, r] : resources) {
    const int i = table.ViewIndex(node);  // ALIVE nodes only
    if (i < 0) continue;
    auto g = gpus.find(node);
    capacities_.push_back(CapacityOf(*table.Find(node), /*free=*/true, &r,
                                     g == gpus.end() ? nullptr : &g->second));
    overrides_.emplace_back(i, &capacities_.back());
  }
  std::sort(overrides_.begin(), overrides_.end());
  return overrides_;
}

}  // namespace drover
