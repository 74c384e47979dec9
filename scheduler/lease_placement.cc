#include "scheduler/lease_placement.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace drover {
namespace {

bool Fits(const proto::Resources& shape, const NodeCapacity& n) {
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

}  // namespace

LeasePlacement PlaceLease(const proto::Resources& shape, const proto::PlacementHint& hint,
                          const std::vector<NodeCapacity>& free,
                          const std::vector<NodeCapacity>& total) {
  LeasePlacement out;
  std::vector<const NodeCapacity*> order;
  for (const NodeCapacity& n : free) {
    if (!hint.node_id().empty() && !hint.soft() && n.node_id != hint.node_id()) continue;
    order.push_back(&n);
  }
  auto data = [&](const NodeCapacity* n) -> uint64_t {
    auto it = hint.data_bytes().find(n->node_id);
    return it == hint.data_bytes().end() ? 0 : it->second;
  };
  std::stable_sort(order.begin(), order.end(), [&](const NodeCapacity* a, const NodeCapacity* b) {
    const bool pa = a->node_id == hint.node_id(), pb = b->node_id == hint.node_id();
    if (pa != pb) return pa;
    if (data(a) != data(b)) return data(a) > data(b);
    if (hint.spread()) return a->available.cpus() > b->available.cpus();
    return false;
  });
  for (const NodeCapacity* n : order) {
    if (!Fits(shape, *n)) continue;
    out.ok = true;
    out.node_id = n->node_id;
    out.gpu_ids.assign(n->gpu_ids.begin(), n->gpu_ids.begin() + shape.gpus());
    return out;
  }
  // Why not: could it ever fit?
  bool ever = false;
  for (const NodeCapacity& n : total) {
    if (!hint.node_id().empty() && !hint.soft() && n.node_id != hint.node_id()) continue;
    ever = ever || Fits(shape, n);
  }
  const std::string need = DescribeResources(shape);
  if (!hint.node_id().empty() && !hint.soft() &&
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

}  // namespace drover
