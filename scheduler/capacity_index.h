// CapacityIndex: how many processes of one shape fit on each ALIVE node of a
// NodeTable, kept up to date from the table's change log, so that a placement costs
// what changed since the last one instead of a scan of every node.
//
// Why: PlaceGang (placement.h) reads every node's free capacity, and the queue places
// one job per exit when the cluster is full, so at 1,000 nodes each placement was a
// scan of 1,000 nodes, most of the scheduler's CPU (docs/scaling.md). The queue keeps
// one index per class of pending jobs (queue_policy.h); a class's jobs share the
// per-process resources and the processes per node this index is made for.
//
// Place answers exactly as PlaceGang over the table's free capacities would (the same
// ranks, the same reason), and is checked against it (capacity_index_test.cc): a PACK
// gang by taking nodes biggest first from an ordered set, a gang with processes per
// node from the set of nodes with room for them, a SPREAD gang that does not fit from
// the running total; a SPREAD gang that fits is placed by PlaceGang itself. A few
// nodes' capacities may be given in place of the table's (Overrides: what a queue's
// claim leaves of them), at a cost in those nodes, not in all.
//
// Pure: no lock, no I/O. Not thread-safe; used under the owner's lock with its table.
#ifndef DROVER_SCHEDULER_CAPACITY_INDEX_H_
#define DROVER_SCHEDULER_CAPACITY_INDEX_H_

#include <cstdint>
#include <map>
#include <string>
#include <set>
#include <utility>
#include <vector>

#include "proto/common.pb.h"
#include "scheduler/node_table.h"
#include "scheduler/placement.h"

namespace drover {

class CapacityIndex {
 public:
  // For jobs whose processes each need `per`, `per_node` per node (0: any number).
  CapacityIndex(const proto::Resources& per, int per_node);

  // Capacities used in place of the table's free ones: (view index, capacity), by
  // index, each index once. The capacities must outlive the call.
  using Overrides = std::vector<std::pair<int, const NodeCapacity*>>;

  // PlaceGang(spec, view), the view being table.Free() with `overrides` in place.
  // REQUIRES: spec.per_process() and spec.nproc_per_node() are those the index was
  // made for; spec passed ValidateJobSpec.
  PlacementResult Place(const proto::JobSpec& spec, NodeTable& table,
                        const Overrides& overrides = {});
  // Whether Place would succeed, without placing.
  bool Fits(const proto::JobSpec& spec, NodeTable& table, const Overrides& overrides = {});

 private:
  // Catches up with the table's changes (or reads every node after a rebuild).
  void Sync(NodeTable& table);
  void Set(int index, int cap);
  // What fits with `overrides` in place: the total (or, with per_node_, the nodes with
  // room), and the overridden nodes' capacities (-cap, index), biggest first.
  long FitWith(const Overrides& overrides, std::vector<std::pair<int, int>>* caps) const;

  const proto::Resources per_;
  const int per_node_;
  NodeTable::Cursor cursor_;
  std::vector<int> caps_;  // by view index
  // ALIVE nodes with room for one or more processes, biggest first, ties in preference
  // (view) order: PACK's order.
  std::set<std::pair<int, int>> by_room_;  // (-cap, index)
  // With per_node_ > 0: the nodes with room for per_node_ processes, in preference order.
  std::set<int> roomy_;
  long total_ = 0;  // the sum of caps_
};

// What a pending job's claim (queue_policy.h's Claim: `resources` and `gpus` per node
// id) leaves of its ALIVE nodes' free capacities: each free capacity less the claim,
// nothing below zero, the claimed GPUs taken out. The one computation both the queue's
// later jobs (CapacityIndex) and the leases placed beside the claim (LeasePlacer) use.
class ClaimedView {
 public:
  // Works it out for `table` as it is now; the overrides stay valid until the next Set.
  const CapacityIndex::Overrides& Set(NodeTable& table,
                                      const std::map<std::string, proto::Resources>& resources,
                                      const std::map<std::string, std::set<int>>& gpus);
  const CapacityIndex::Overrides& overrides() const { return overrides_; }

 private:
  std::vector<NodeCapacity> capacities_;
  CapacityIndex::Overrides overrides_;
};

}  // namespace drover

#endif  // DROVER_SCHEDULER_CAPACITY_INDEX_H_
