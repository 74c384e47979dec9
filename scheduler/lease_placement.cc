#include "scheduler/lease_placement.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace drover {

bool LeaseFits(const proto::Resources& shape, const NodeCapacity& n) {
  const proto::Resources& a = n.available;
  if (shape.cpus() > a.cpus() + 1e-9 || shape.memory_bytes() > a.memory_bytes() ||
      shape.gpus() > static_cast<int>(n.gpu_ids.size())) {
    return false;
  }
  for (const auto& [k, v] : shape.custom()) {
    auto it = a.custom().find(k);
    if (v > 0 && (it == a.custom().end() || it->second + 1e-9 < v)) return false;
  }
  return true;
}

namespace {

// PlaceLease's order of nodes: the soft-affinity node, then by data bytes, then (spread)
// by free CPUs; stable, so view order among equals.
struct HintOrder {
  const proto::PlacementHint& hint;
  uint64_t Data(const NodeCapacity* n) const {
    auto it = hint.data_bytes().find(n->node_id);
    return it == hint.data_bytes().end() ? 0 : it->second;
  }
  bool operator()(const NodeCapacity* a, const NodeCapacity* b) const {
    const bool pa = a->node_id == hint.node_id(), pb = b->node_id == hint.node_id();
    if (pa != pb) return pa;
    if (Data(a) != Data(b)) return Data(a) > Data(b);
    if (hint.spread()) return a->available.cpus() > b->available.cpus();
    return false;
  }
};

bool Hard(const proto::PlacementHint& hint) { return !hint.node_id().empty() && !hint.soft(); }

LeasePlacement PlacedOn(const proto::Resources& shape, const NodeCapacity& n) {
  LeasePlacement out;
  out.ok = true;
  out.node_id = n.node_id;
  out.gpu_ids.assign(n.gpu_ids.begin(), n.gpu_ids.begin() + shape.gpus());
  return out;
}

}  // namespace

LeasePlacement PlaceLease(const proto::Resources& shape, const proto::PlacementHint& hint,
                          const std::vector<NodeCapacity>& free,
                          const std::vector<NodeCapacity>& total) {
  LeasePlacement out;
  std::vector<const NodeCapacity*> order;
  for (const NodeCapacity& n : free) {
    if (Hard(hint) && n.node_id != hint.node_id()) continue;
    order.push_back(&n);
  }
  std::stable_sort(order.begin(), order.end(), HintOrder{hint});
  for (const NodeCapacity* n : order) {
    if (LeaseFits(shape, *n)) return PlacedOn(shape, *n);
  }
  // Why not: could it ever fit?
  bool ever = false;
  for (const NodeCapacity& n : total) {
    if (Hard(hint) && n.node_id != hint.node_id()) continue;
    ever = ever || LeaseFits(shape, n);
  }
  const std::string need = DescribeResources(shape);
  if (Hard(hint) &&
      std::none_of(total.begin(), total.end(), [&](const NodeCapacity& n) { return n.node_id == hint.node_id(); })) {
    out.never = true;
    out.reason = absl::StrCat("needs node ", hint.node_id(), ", which is not alive");
    return out;
  }
  out.never = !ever;
  double most_cpus = 0;
  int most_gpus = 0;
  for (const NodeCapacity& n : ever ? free : total) {
    most_cpus = std::max(most_cpus, n.available.cpus());
    most_gpus = std::max(most_gpus, static_cast<int>(n.gpu_ids.size()));
  }
  out.reason = absl::StrCat("needs ", need, " on one node; the most ", ever ? "free" : "any node has",
                            " is ", most_cpus, " CPUs and ", most_gpus, " GPUs",
                            hint.node_id().empty() || hint.soft() ? "" : absl::StrCat(" (on ", hint.node_id(), ")"));
  return out;
}

void LeasePlacer::Index::Set(int i, const NodeCapacity& n) {
  const bool fits = LeaseFits(shape_, n);
  if (fits_[i]) {
    in_order_.erase(i);
    by_cpus_.erase({-cpus_[i], i});
  }
  fits_[i] = fits;
  cpus_[i] = n.available.cpus();
  if (fits) {
    in_order_.insert(i);
    by_cpus_.emplace(-cpus_[i], i);
  }
}

void LeasePlacer::Index::Sync(NodeTable& table) {
  const std::vector<NodeCapacity>& free = table.Free();
  const bool caught_up = table.Changes(&cursor_, [&](int i) {
    if (i >= 0 && static_cast<size_t>(i) < fits_.size()) Set(i, free[i]);
  });
  if (caught_up && fits_.size() == free.size()) return;
  // Every node again (a rebuild of the views, or a reader far behind).
  fits_.assign(free.size(), 0);
  cpus_.assign(free.size(), 0);
  in_order_.clear();
  by_cpus_.clear();
  for (size_t i = 0; i < free.size(); ++i) Set(static_cast<int>(i), free[i]);
}

LeasePlacer::Index& LeasePlacer::IndexFor(const proto::Resources& shape) {
  std::string key = shape.SerializeAsString();
  auto it = indexes_.find(key);
  if (it == indexes_.end()) {
    if (indexes_.size() >= kMaxShapes) {
      auto oldest = std::min_element(indexes_.begin(), indexes_.end(), [](const auto& a, const auto& b) {
        return a.second->last_use < b.second->last_use;
      });
      indexes_.erase(oldest);
    }
    it = indexes_.emplace(std::move(key), std::make_unique<Index>(shape)).first;
  }
  it->second->last_use = ++uses_;
  return *it->second;
}

LeasePlacement LeasePlacer::Place(const proto::Resources& shape, const proto::PlacementHint& hint,
                                  NodeTable& table, bool explain, const Overrides* overrides) {
  Index& index = IndexFor(shape);
  index.Sync(table);
  const std::vector<NodeCapacity>& free = table.Free();
  static const Overrides kNone;
  const Overrides& over = overrides != nullptr ? *overrides : kNone;
  // Node i's override, if any (`over` is by view index).
  auto find = [&](int i) -> const NodeCapacity* {
    if (over.empty()) return nullptr;
    auto it = std::lower_bound(over.begin(), over.end(), std::make_pair(i, nullptr),
                               [](const auto& a, const auto& b) { return a.first < b.first; });
    return it != over.end() && it->first == i ? it->second : nullptr;
  };
  // Node i's capacity for leases: the override's, else the table's.
  auto capacity = [&](int i) -> const NodeCapacity& {
    const NodeCapacity* o = find(i);
    return o != nullptr ? *o : free[i];
  };
  auto overridden = [&](int i) { return find(i) != nullptr; };
  auto refuse = [&] {
    if (!explain) return LeasePlacement();
    if (over.empty()) return PlaceLease(shape, hint, free, table.Total());
    std::vector<NodeCapacity> left = free;  // a scan, only to say why not
    for (size_t i = 0; i < left.size(); ++i) left[i] = capacity(static_cast<int>(i));
    return PlaceLease(shape, hint, left, table.Total());
  };
  if (Hard(hint)) {
    const int i = table.ViewIndex(hint.node_id());
    if (i < 0) return refuse();
    const bool fits = overridden(i) ? LeaseFits(shape, capacity(i)) : index.Fits(i);
    return fits ? PlacedOn(shape, capacity(i)) : refuse();
  }
  // The nodes the hint names come first, in PlaceLease's order; the rest by the index.
  std::vector<std::pair<int, const NodeCapacity*>> named;  // (view index, capacity)
  auto name = [&](const std::string& node_id) {
    const int i = table.ViewIndex(node_id);
    if (i < 0) return;
    for (const auto& [k, n] : named) {
      if (k == i) return;
    }
    named.emplace_back(i, &capacity(i));
  };
  if (!hint.node_id().empty()) name(hint.node_id());
  for (const auto& [node_id, bytes] : hint.data_bytes()) {
    if (bytes > 0) name(node_id);
  }
  std::sort(named.begin(), named.end());  // view order, then stable
  std::vector<const NodeCapacity*> ordered;
  for (const auto& [i, n] : named) ordered.push_back(n);
  std::stable_sort(ordered.begin(), ordered.end(), HintOrder{hint});
  for (const NodeCapacity* n : ordered) {
    if (LeaseFits(shape, *n)) return PlacedOn(shape, *n);
  }
  // The named nodes did not fit, so the index's sets hold them only where an override
  // (never more than the table's free capacity) says less: checked below. An
  // overridden node that fits now fits by the table too, so it is in the sets.
  if (!hint.spread()) {
    // Skips at most one entry per overridden node.
    for (int i : index.in_order()) {
      if (!overridden(i) || LeaseFits(shape, capacity(i))) return PlacedOn(shape, capacity(i));
    }
    return refuse();
  }
  int best = -1;
  double best_cpus = 0;
  for (const auto& [neg_cpus, i] : index.by_cpus()) {
    if (overridden(i)) continue;  // weighed below by what the claim leaves
    best = i;
    best_cpus = -neg_cpus;
    break;
  }
  for (const auto& [i, n] : over) {
    if (!index.Fits(i) || !LeaseFits(shape, *n)) continue;
    const double cpus = n->available.cpus();
    if (best < 0 || cpus > best_cpus || (cpus == best_cpus && i < best)) {
      best = i;
      best_cpus = cpus;
    }
  }
  return best >= 0 ? PlacedOn(shape, capacity(best)) : refuse();
}

}  // namespace drover
