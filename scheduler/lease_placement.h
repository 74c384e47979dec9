// Where a worker lease goes: one process of a resource shape on one node. A pure
// function over node capacities (as placement.h is for gangs), unit-tested alone.
#ifndef DROVER_SCHEDULER_LEASE_PLACEMENT_H_
#define DROVER_SCHEDULER_LEASE_PLACEMENT_H_

#include <string>
#include <vector>

#include "proto/lease.pb.h"
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

}  // namespace drover

#endif  // DROVER_SCHEDULER_LEASE_PLACEMENT_H_
