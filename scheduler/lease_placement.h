// Where a worker lease goes: one process of a resource shape on one node. PlaceLease is
// a pure function over node capacities (as placement.h is for gangs), unit-tested alone;
// LeasePlacer answers the same from per-shape indexes that follow a NodeTable's change
// log, so that a grant costs what changed since the last one, not a scan of every node.
#ifndef DROVER_SCHEDULER_LEASE_PLACEMENT_H_
#define DROVER_SCHEDULER_LEASE_PLACEMENT_H_

#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "proto/lease.pb.h"
#include "scheduler/capacity_index.h"
#include "scheduler/node_table.h"
#include "scheduler/placement.h"

namespace drover {

struct LeasePlacement {
  bool ok = false;
  std::string node_id;
  std::vector<int> gpu_ids;
  // Unless ok: why not, for the user ("needs 4 GPUs; the most free on any node is 2").
  std::string reason;
  // Unless ok: true if no node could hold it even with nothing else running.
  bool never = false;
};

// Picks a node for `shape` among `free` (ALIVE nodes' free capacity, in registration
// order), honouring `hint`: a hard node affinity allows only that node; a soft one and
// the nodes holding the task's data (most bytes first) come first; `spread` prefers
// the node with the most free CPUs, otherwise the first that fits (packing). `total`
// (the same nodes' whole capacity) tells "not now" from "never".
LeasePlacement PlaceLease(const proto::Resources& shape, const proto::PlacementHint& hint,
                          const std::vector<NodeCapacity>& free,
                          const std::vector<NodeCapacity>& total);

// Whether one process of `shape` fits in `n` (PlaceLease's test).
bool LeaseFits(const proto::Resources& shape, const NodeCapacity& n);

// PlaceLease(shape, hint, table.Free(), table.Total()), answered from an index per
// shape: the ALIVE nodes one process of the shape fits on, in view order (packing) and
// by free CPUs (spread), kept up to date from the table's change log. The hint's few
// named nodes (soft affinity, data) are tried first, as PlaceLease orders them. When
// nothing fits, `explain` false answers !ok without a reason (no scan); true asks
// PlaceLease for the reason and whether it could ever fit (a scan).
//
// A pending job's claim leaves less on the few nodes it claims: `overrides` gives those
// nodes' capacity instead of the table's (capacity_index.h's ClaimedView, which the
// queue's placement of later jobs uses too), and a grant still costs what changed plus
// a look at each overridden node, not a scan of every node.
//
// Checked against PlaceLease on random changing tables, with and without a claim
// (lease_placement_test.cc). Keeps at most kMaxShapes indexes (the least recently used
// go). Not thread-safe: used under the lock of the table's owner.
class LeasePlacer {
 public:
  static constexpr size_t kMaxShapes = 64;
  // (view index, its capacity for leases: at most its free capacity in the table), by
  // index.
  using Overrides = CapacityIndex::Overrides;

  LeasePlacement Place(const proto::Resources& shape, const proto::PlacementHint& hint,
                       NodeTable& table, bool explain, const Overrides* overrides = nullptr);

 private:
  class Index {
   public:
    explicit Index(const proto::Resources& shape) : shape_(shape) {}
    void Sync(NodeTable& table);
    bool Fits(int i) const { return i >= 0 && static_cast<size_t>(i) < fits_.size() && fits_[i]; }
    // The fitting nodes in view order, and by (-free CPUs, view index).
    const std::set<int>& in_order() const { return in_order_; }
    const std::set<std::pair<double, int>>& by_cpus() const { return by_cpus_; }
    uint64_t last_use = 0;

   private:
    void Set(int i, const NodeCapacity& n);

    const proto::Resources shape_;
    NodeTable::Cursor cursor_;
    std::vector<char> fits_;     // by view index
    std::vector<double> cpus_;   // the free CPUs by_cpus_ holds each fitting node at
    std::set<int> in_order_;     // fitting nodes, view order
    std::set<std::pair<double, int>> by_cpus_;  // (-free CPUs, index) of fitting nodes
  };

  Index& IndexFor(const proto::Resources& shape);

  std::map<std::string, std::unique_ptr<Index>> indexes_;  // by serialized shape
  uint64_t uses_ = 0;
};

}  // namespace drover

#endif  // DROVER_SCHEDULER_LEASE_PLACEMENT_H_
